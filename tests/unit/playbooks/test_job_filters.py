"""The tf_job role's filters (tfcluster.cluster job filters): TF_CONFIG, the chief, the slot check, the collective,
the job's environment, systemd quoting, argument lists."""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path
from types import ModuleType

import pytest
from ansible.errors import AnsibleFilterError

from tfcluster.core import contract

REPO = Path(__file__).resolve().parents[3]
PLUGINS = REPO / "playbooks/collections/ansible_collections/tfcluster/cluster/plugins"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_tfjob_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


job = load(PLUGINS / "filter/job.py")
CLUSTER = {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"]}


def hosts(*slots: tuple[str, str, object, str]) -> dict[str, dict[str, object]]:
    return {name: {"tfcluster_task_type": t, "tfcluster_task_index": i, "tfcluster_address": a}
            for name, t, i, a in slots}


# --- TF_CONFIG ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("task_type", "index"), [("chief", 0), ("worker", 1), ("worker", "1"), ("evaluator", 0)])
def test_tf_config_is_the_contracts(task_type: str, index: object) -> None:
    out = job.tf_config(CLUSTER, task_type, index)
    assert out == contract.tf_config_json(CLUSTER, task_type, int(index))  # type: ignore[arg-type]
    assert json.loads(out)["task"] == {"type": task_type, "index": int(index)}  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", ["mirrored", "tpu"])
def test_tf_config_is_empty_on_one_host_strategies(strategy: str) -> None:
    assert job.tf_config({"worker": ["10.0.0.2:2222"]}, "worker", 0, strategy) == ""


@pytest.mark.parametrize(("cluster", "task", "message"), [
    (CLUSTER, ("worker", 5), "worker index 5 is out of range"),
    ({"worker": ["nope"]}, ("worker", 0), "address 'nope' has no port"),
    (CLUSTER, ("boss", 0), "unknown task type 'boss'"),
    ("x", ("worker", 0), "the cluster spec must be a mapping"),
])
def test_tf_config_refuses_a_bad_slot(cluster: object, task: tuple[str, int], message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        job.tf_config(cluster, *task)


# --- slots ----------------------------------------------------------------------------------------------------------
def test_a_valid_cluster_has_no_problems_and_a_chief() -> None:
    hv = hosts(("c", "chief", 0, "10.0.0.1:2222"), ("a", "worker", 0, "10.0.0.2:2222"),
               ("b", "worker", "1", "[fd00::3]:2222"))
    assert job.slot_problems(hv, list(hv)) == []
    assert job.chief_host(hv, list(hv)) == "c"
    workers = hosts(("b", "worker", 1, "h:2"), ("a", "worker", 0, "h:1"))
    assert job.chief_host(workers, list(workers)) == "a"  # no chief: worker 0 (TensorFlow's rule)


@pytest.mark.parametrize(("slots", "message"), [
    ((), "the inventory has no hosts in group tfcluster. Fix: give at least one worker"),
    ((("a", "boss", 0, "h:1"),), "a: tfcluster_task_type 'boss' is not one of chief, worker, ps, evaluator. Fix:"),
    ((("a", "worker", -1, "h:1"),), "a: tfcluster_task_index -1 is not a whole number from 0. Fix:"),
    ((("a", "worker", 0, "h:1"), ("b", "worker", 0, "h:2")), "b: slot worker:0 is also held by a. Fix:"),
    ((("a", "worker", 0, "h:1"), ("b", "worker", 2, "h:2")), "worker indexes [0, 2] are not 0..1. Fix: renumber"),
    ((("a", "worker", 0, "h:1"), ("b", "worker", 1, "h:1")), "b: address h:1 is also used by worker[0]. Fix: give"),
    ((("a", "worker", 0, "nope"),), "a: address 'nope' has no port. Fix: write it as 'host:port'"),
    ((("a", "worker", 0, "h:1"), ("p", "ps", 0, "h:2"), ("c", "chief", 0, "h:3"), ("d", "chief", 1, "h:4")),
     "cluster.chief: 2 chiefs listed, at most one is allowed. Fix:"),
])
def test_slot_problems_name_the_host_and_the_fix(slots: tuple, message: str) -> None:
    hv = hosts(*slots)
    problems = job.slot_problems(hv, list(hv))
    assert any(message in p for p in problems), problems
    assert all("Fix:" in p for p in problems)


def test_the_strategy_rules_are_the_contracts() -> None:
    hv = hosts(("a", "worker", 0, "h:1"), ("p", "ps", 0, "h:2"))
    assert job.slot_problems(hv, list(hv), "auto") != []  # parameter_server needs a chief
    problems = job.slot_problems(hv, list(hv), "multi_worker_mirrored")
    assert problems == ["cluster.ps: multi_worker_mirrored takes no ps tasks. Fix: remove the ps tasks, or use "
                        "strategy parameter_server"]


@pytest.mark.parametrize(("cluster", "strategy", "all_gpus", "expected"), [
    (CLUSTER, "auto", True, "nccl"), (CLUSTER, "auto", "True", "nccl"), (CLUSTER, "auto", False, "ring"),
    (CLUSTER, "multi_worker_mirrored", True, "nccl"), ({**CLUSTER, "ps": ["h:9"]}, "auto", True, "ring"),
    ({"worker": ["h:1"]}, "mirrored", True, "ring"),
])
def test_collective(cluster: dict, strategy: str, all_gpus: object, expected: str) -> None:
    assert job.collective(cluster, strategy, all_gpus) == expected


# --- the environment ------------------------------------------------------------------------------------------------
def test_job_env_uses_the_contracts_names() -> None:
    settings = {"tf_config": '{"x":1}', "job": "j", "model_dir": "/m", "task_type": "worker", "task_index": 0,
                "datasets": "/d", "gpus": 2, "collective": "nccl", "checkpoint_s3": "", "pythonpath": "/r",
                "legacy_keras": True, "nccl": {"NCCL_SOCKET_IFNAME": "ens5", "NCCL_DEBUG": "WARN", "EMPTY": ""}}
    env = job.job_env(settings, {"NCCL_DEBUG": "INFO", "MINE": 1})
    assert env == {contract.ENV_TF_CONFIG: '{"x":1}', contract.ENV_JOB: "j", contract.ENV_MODEL_DIR: "/m",
                   contract.ENV_TASK_TYPE: "worker", contract.ENV_TASK_INDEX: "0", contract.ENV_DATASETS: "/d",
                   contract.ENV_GPUS: "2", contract.ENV_COLLECTIVE: "nccl", "PYTHONPATH": "/r",
                   "PYTHONUNBUFFERED": "1", "TF_USE_LEGACY_KERAS": "1", "NCCL_SOCKET_IFNAME": "ens5",
                   "NCCL_DEBUG": "INFO", "MINE": "1"}


def test_job_env_leaves_out_what_does_not_apply() -> None:
    env = job.job_env({"tf_config": "", "collective": "ring", "legacy_keras": False, "nccl": {"NCCL_DEBUG": "WARN"},
                       "checkpoint_s3": "s3://b/p/j"})
    assert contract.ENV_TF_CONFIG not in env and "TF_USE_LEGACY_KERAS" not in env and "NCCL_DEBUG" not in env
    assert env[contract.ENV_CHECKPOINT_S3] == "s3://b/p/j"


# --- systemd quoting and argument lists ---------------------------------------------------------------------------
@pytest.mark.parametrize(("arg", "word"), [
    ("--epochs", "--epochs"),
    ("/opt/tfcluster/venv/bin/python", "/opt/tfcluster/venv/bin/python"),
    ("a=b,c:d@e+f", "a=b,c:d@e+f"),
    ("50%", "50%%"),                                  # a specifier otherwise (%n is the unit's name)
    ("$HOME", "\"$$HOME\""),                        # an environment variable otherwise
    ("with space", '"with space"'),
    ("", '""'),
    ("x'; touch MARKER; '", "\"x'; touch MARKER; '\""),
    ('say "hi"', '"say \\"hi\\""'),
    ("back\\slash", '"back\\\\slash"'),
    ("two\nlines\ttab", '"two\\nlines\\ttab"'),
    ("{{ lookup('pipe', 'touch M') }}", "\"{{ lookup('pipe', 'touch M') }}\""),
    ("%n $x ;", '"%%n $$x ;"'),
    (";", '";"'),
    ("\x01", '"\\x01"'),
    ("ünï", '"ünï"'),
])
def test_systemd_word(arg: str, word: str) -> None:
    assert job.systemd_word(arg) == word


def test_systemd_exec_needs_an_absolute_program() -> None:
    assert job.systemd_exec(["/bin/echo", "a b", "%i"]) == '/bin/echo "a b" %%i'
    with pytest.raises(AnsibleFilterError, match="the program must be an absolute path"):
        job.systemd_exec(["python", "x"])


@pytest.mark.parametrize(("value", "expected"), [
    (None, []), ("", []), ([], []), (["--steps", 4], ["--steps", "4"]),
    ("--data 'a b' --x=1", ["--data", "a b", "--x=1"]),      # a string from old callers: split like a shell
    (["x'; touch MARKER; '"], ["x'; touch MARKER; '"]),         # a list is taken as it is
])
def test_args(value: object, expected: list[str]) -> None:
    assert job.args(value) == expected
    if isinstance(value, str) and value:
        assert job.args(value) == shlex.split(value)


@pytest.mark.parametrize("value", ["'unclosed", 5])
def test_args_refuses(value: object) -> None:
    with pytest.raises(AnsibleFilterError):
        job.args(value)
