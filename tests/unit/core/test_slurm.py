"""The Slurm resolver (tfcluster/core/slurm.py) on fabricated Slurm environments: Slurm's hostlist and count
notations, the slot every PROCID gets, one spec for every task, and TensorFlow's sorted-name hazard."""

from __future__ import annotations

import json

import pytest

from tfcluster.core import slurm
from tfcluster.core.slurm import SlurmError, expand_hostlist, expand_tasks_per_node


@pytest.mark.parametrize(("text", "hosts"), [
    ("n[9-10]", ("n9", "n10")),
    ("node[9-11]", ("node9", "node10", "node11")),
    ("gpu[08-11]", ("gpu08", "gpu09", "gpu10", "gpu11")),
    ("a[1-2],b3", ("a1", "a2", "b3")),
    ("c5", ("c5",)),
    ("n[098-101]", ("n098", "n099", "n100", "n101")),
    ("o[3-4,6,7-8]", ("o3", "o4", "o6", "o7", "o8")),
    ("rack[1-2]-n[01-02]", ("rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02")),
    ("n[1-2]-ib", ("n1-ib", "n2-ib")),
    ("z9,a[10-11],m1", ("z9", "a10", "a11", "m1")),  # Slurm's order, never sorted
])
def test_hostlist_in_slurm_order(text: str, hosts: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(("text", "wrong"), [
    ("", "is empty"),
    ("n[1-2", "unclosed"),
    ("n1-2]", "unbalanced"),
    ("n[[1-2]]", "nested"),
    ("n[3-1]", "runs backwards"),
    ("n[a-b]", "holds 'a-b'"),
    ("n[]", "empty range"),
    ("a,,b", "empty item"),
    ("n[0-999999999]", "more than"),
])
def test_bad_hostlists_are_refused_naming_the_variable(text: str, wrong: str) -> None:
    with pytest.raises(SlurmError) as caught:
        expand_hostlist(text)
    assert caught.value.problems[0].field == slurm.ENV_NODELIST
    assert wrong in str(caught.value) and "Fix:" in str(caught.value)


@pytest.mark.parametrize(("text", "counts"), [
    ("1", (1,)),
    ("2(x2),1", (2, 2, 1)),
    ("2,1(x2)", (2, 1, 1)),
    ("3(x2),2,1", (3, 3, 2, 1)),
])
def test_tasks_per_node(text: str, counts: tuple[int, ...]) -> None:
    assert expand_tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "2(x)", "x2", "2(x2", "-1"])
def test_bad_tasks_per_node(text: str) -> None:
    with pytest.raises(SlurmError, match=slurm.ENV_TASKS_PER_NODE):
        expand_tasks_per_node(text)


def envs(nodelist: str, tasks_per_node: str) -> list[dict[str, str]]:
    """Every task's environment as srun (block distribution) sets it."""
    places = slurm.placement(expand_hostlist(nodelist), expand_tasks_per_node(tasks_per_node))
    return [{slurm.ENV_NODELIST: nodelist, slurm.ENV_TASKS_PER_NODE: tasks_per_node, slurm.ENV_PROCID: str(procid),
             slurm.ENV_LOCALID: str(local), slurm.ENV_NODENAME: node} for procid, (node, local) in enumerate(places)]


# (node list, tasks per node, layout, expected {slot: address})
CASES = [
    ("n[9-10]", "1(x2)", {"worker": 2}, {"worker-0": "n9:2222", "worker-1": "n10:2222"}),
    ("gpu[08-11]", "1(x4)", {"chief": 1, "worker": 3},
     {"chief-0": "gpu08:2222", "worker-0": "gpu09:2222", "worker-1": "gpu10:2222", "worker-2": "gpu11:2222"}),
    ("a[1-2],b3", "1(x3)", {"chief": 1, "ps": 1, "worker": 1},
     {"chief-0": "a1:2222", "ps-0": "a2:2222", "worker-0": "b3:2222"}),
    ("n[9-10],m1", "2(x2),1", {"chief": 1, "ps": 1, "worker": 2, "evaluator": 1},
     {"chief-0": "n9:2222", "ps-0": "n9:2223", "worker-0": "n10:2222", "worker-1": "n10:2223",
      "evaluator-0": "m1:2222"}),
    ("node[9-11]", "1(x3)", {"chief": 1, "worker": 2},
     {"chief-0": "node9:2222", "worker-0": "node10:2222", "worker-1": "node11:2222"}),
]


@pytest.mark.parametrize(("nodelist", "per_node", "layout", "expected"), CASES)
def test_every_task_agrees_and_holds_its_own_node(nodelist: str, per_node: str, layout: dict[str, int],
                                                  expected: dict[str, str]) -> None:
    resolved = [slurm.resolve_env(env, layout) for env in envs(nodelist, per_node)]
    assert {r.slot: r.address for r in resolved} == expected
    assert len({r.slot for r in resolved}) == len(resolved)  # every index unique
    specs = {json.dumps(r.cluster, sort_keys=True) for r in resolved}
    assert len(specs) == 1  # one spec for every task
    for env, task in zip(envs(nodelist, per_node), resolved, strict=True):
        assert task.node == env[slurm.ENV_NODENAME]  # its own address is its own node
        if task.task_type != "evaluator":
            config = json.loads(task.tf_config)
            assert config["task"] == {"type": task.task_type, "index": task.task_index}
            assert config["cluster"][task.task_type][task.task_index] == task.address
            assert "evaluator" not in config["cluster"]


def tensorflow_address(env: dict[str, str], port: int = 2222) -> str:
    """What TensorFlow's SlurmClusterResolver (tensorflow/python/distribute/cluster_resolver/
    slurm_cluster_resolver.py, cluster_spec) gives task SLURM_PROCID as its own address: it walks the host->count
    map in *sorted* host-name order (reimplemented here; no TensorFlow in a unit test)."""
    hosts = expand_hostlist(env[slurm.ENV_NODELIST])
    counts = expand_tasks_per_node(env[slurm.ENV_TASKS_PER_NODE])
    pairs = sorted(zip(hosts, counts, strict=True))
    task_list = [f"{host}:{port + offset}" for host, count in pairs for offset in range(count)]
    return task_list[int(env[slurm.ENV_PROCID])]


@pytest.mark.parametrize(("nodelist", "per_node"), [("n[9-10]", "1(x2)"), ("node[9-11]", "1(x3)"),
                                                    ("n[9-10]", "2(x2)")])
def test_tensorflows_sorted_order_is_wrong_and_ours_is_right(nodelist: str, per_node: str) -> None:
    tasks = envs(nodelist, per_node)
    wrong = [env for env in tasks if not tensorflow_address(env).startswith(env[slurm.ENV_NODENAME] + ":")]
    assert wrong, "the hazard: TensorFlow's sorted order puts some task's address on another node"
    first = tasks[0]
    assert first[slurm.ENV_NODENAME] == ("n9" if nodelist.startswith("n[") else "node9")
    assert tensorflow_address(first).split(":")[0] in ("n10", "node10")  # task 0 is on n9, TF says n10
    for env in tasks:
        ours = slurm.resolve_env(env, {"worker": len(tasks)})
        assert ours.node == env[slurm.ENV_NODENAME]
        assert json.loads(ours.tf_config)["cluster"]["worker"][int(env[slurm.ENV_PROCID])] == ours.address


def test_ports_from_the_base_port_and_the_local_id() -> None:
    resolved = [slurm.resolve_env(env, {"worker": 4}, base_port=12345) for env in envs("n[1-2]", "2(x2)")]
    assert [r.address for r in resolved] == ["n1:12345", "n1:12346", "n2:12345", "n2:12346"]


def test_mirrored_has_no_tf_config() -> None:
    (env,) = envs("n1", "1")
    resolved = slurm.resolve_env(env, {"worker": 1}, strategy="mirrored")
    assert resolved.tf_config == "" and resolved.slot == "worker-0"


@pytest.mark.parametrize(("change", "layout", "wrong"), [
    ({}, {"worker": 3}, "the step has 2 task(s)"),
    ({slurm.ENV_NODENAME: "n10"}, {"worker": 2}, "block distribution"),
    ({slurm.ENV_LOCALID: "1"}, {"worker": 2}, "block distribution"),
    ({slurm.ENV_PROCID: "7"}, {"worker": 2}, "is not a task of this step"),
    ({slurm.ENV_PROCID: ""}, {"worker": 2}, "SLURM_PROCID: is not set"),
    ({slurm.ENV_NODELIST: "n[9-10],bad;name"}, {"worker": 2}, "is not a valid host name"),
    ({}, {"ps": 1, "worker": 1}, "parameter_server needs exactly one chief"),
    ({}, {"boss": 2}, "unknown task type"),
])
def test_a_step_that_disagrees_with_the_layout_is_refused(change: dict[str, str], layout: dict[str, int],
                                                           wrong: str) -> None:
    env = {**envs("n[9-10]", "1(x2)")[0], **change}
    if change.get(slurm.ENV_NODELIST):
        env[slurm.ENV_TASKS_PER_NODE] = "1(x3)"
    with pytest.raises(SlurmError) as caught:
        slurm.resolve_env(env, layout)
    assert wrong in str(caught.value)
    assert all(problem.fix for problem in caught.value.problems)


def test_cuda_visible_devices_is_never_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    env = {**envs("n[9-10]", "1(x2)")[1], "CUDA_VISIBLE_DEVICES": "3"}
    slurm.resolve_env(env, {"worker": 2})
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    import os
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"


def test_sample_step_is_what_srun_would_give() -> None:
    step = slurm.sample_step(["node9", "node10"], 2, procid=3)
    assert (step.nodename, step.local_id, step.counts) == ("node10", 1, (2, 2))
