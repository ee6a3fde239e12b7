"""Strategy rules, evaluator handling, TF_CONFIG per host, the CLI and its settings."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfcluster.core.contract import EXIT_BAD_INPUT, build_tf_config, chief_of, parse_tf_config, tf_config_json, unsafe
from tfcluster.inventory.access import SshTrust
from tfcluster.inventory.build import build_inventory, dumps, unmarked, validate_cluster
from tfcluster.inventory.cli import Injected
from tfcluster.inventory.model import HostSpec, InventoryError, SourceResult


def _specs(*slots: tuple[str, int]) -> SourceResult:
    specs = tuple(HostSpec(label=f"{t}{i}", task_type=t, task_index=i, address=f"10.0.{n}.1", port=2222)
                  for n, (t, i) in enumerate(slots))
    return SourceResult(specs=specs, empty_fix="x")


PS = (("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1))
MWMS = (("worker", 0), ("worker", 1))


@pytest.mark.parametrize(("slots", "strategy", "resolved", "spec_types"), [
    (MWMS, "auto", "multi_worker_mirrored", ["worker"]),
    ((("chief", 0), *MWMS), "auto", "multi_worker_mirrored", ["chief", "worker"]),
    (PS, "auto", "parameter_server", ["chief", "ps", "worker"]),
    (PS, "parameter_server", "parameter_server", ["chief", "ps", "worker"]),
    (MWMS, "multi_worker_mirrored", "multi_worker_mirrored", ["worker"]),
    ((("worker", 0),), "mirrored", "mirrored", ["worker"]),
    ((("worker", 0),), "tpu", "tpu", ["worker"]),
    ((*MWMS, ("evaluator", 0)), "auto", "multi_worker_mirrored", ["worker"]),
    ((*PS, ("evaluator", 0)), "auto", "parameter_server", ["chief", "ps", "worker"]),
])
def test_strategy_rules(slots: tuple[tuple[str, int], ...], strategy: str, resolved: str,
                        spec_types: list[str]) -> None:
    cluster = validate_cluster(_specs(*slots), strategy, "c")
    assert cluster.strategy == resolved
    assert sorted(cluster.spec) == spec_types  # the evaluator is never inside the cluster spec
    group = unmarked(build_inventory(cluster))["tfcluster"]["vars"]
    assert group["tfcluster_strategy"] == resolved
    for host in cluster.hosts:
        raw = cluster.tf_config(host)
        if resolved in ("mirrored", "tpu"):
            assert raw == ""  # one host, no TF_CONFIG
            continue
        # What the trainer will accept: the same module validates it.
        parsed = parse_tf_config(raw, strategy=resolved)
        assert parsed is not None
        assert (parsed.task_type, parsed.task_index) == (host.task_type, host.task_index)
        # What the role builds from the group var and the slot (the filter calls contract.tf_config_json).
        assert raw == tf_config_json(group["tfcluster_cluster_spec"], host.task_type, host.task_index)
        assert raw == build_tf_config(cluster.spec, host.task_type, host.task_index, resolved).to_json()


@pytest.mark.parametrize(("slots", "strategy", "message"), [
    ((("ps", 0), ("worker", 0)), "auto", "cluster.chief: parameter_server needs exactly one chief (the coordinator). "
                                         "Fix: add one chief task"),
    ((("chief", 0), ("worker", 0)), "parameter_server", "cluster.ps: parameter_server needs at least one ps task. "
                                                        "Fix: add a ps task"),
    (MWMS, "mirrored", "cluster: mirrored runs on one host with all GPUs of one host, but 2 tasks are listed. Fix: "
                       "use one host without TF_CONFIG, or strategy multi_worker_mirrored"),
    ((("evaluator", 0),), "auto", 'cluster: the cluster is empty. Fix: list at least one task, e.g. {"worker": '
                                  '["10.0.0.5:2222"]}'),
])
def test_strategy_violations(slots: tuple[tuple[str, int], ...], strategy: str, message: str) -> None:
    with pytest.raises(InventoryError) as info:
        validate_cluster(_specs(*slots), strategy, "c")
    assert [str(p) for p in info.value.problems] == [message]


def test_groups_and_order() -> None:
    cluster = validate_cluster(_specs(("worker", 1), ("evaluator", 0), ("worker", 0), ("ps", 0), ("chief", 0)),
                               "auto", "c")
    assert [h.name for h in cluster.hosts] == ["chief-0", "ps-0", "worker-0", "worker-1", "evaluator-0"]
    inv = build_inventory(cluster)
    assert inv["tfcluster"]["children"] == ["chief", "ps", "worker", "evaluator"]
    assert {g: inv[g]["hosts"] for g in ("chief", "ps", "worker", "evaluator")} == {
        "chief": ["chief-0"], "ps": ["ps-0"], "worker": ["worker-0", "worker-1"], "evaluator": ["evaluator-0"]}
    assert sorted(inv["_meta"]["hostvars"]) == ["chief-0", "evaluator-0", "ps-0", "worker-0", "worker-1"]


def test_empty_groups_are_present() -> None:
    inv = build_inventory(validate_cluster(_specs(("worker", 0)), "auto", "c"))
    assert inv["chief"] == {"hosts": []} and inv["ps"] == {"hosts": []} and inv["evaluator"] == {"hosts": []}


def test_host_vars_hold_no_tf_config_and_grow_linearly() -> None:
    """Each host carries its slot, not the cluster: the document grows linearly with the host count."""
    def size(n: int) -> int:
        return len(dumps(build_inventory(validate_cluster(_specs(*[("worker", i) for i in range(n)]), "auto", "c"))))

    inv = unmarked(build_inventory(validate_cluster(_specs(*PS), "auto", "c")))
    assert all("tfcluster_tf_config" not in v for v in inv["_meta"]["hostvars"].values())
    per_host_small, per_host_big = size(200) / 200, size(400) / 400
    assert per_host_big < per_host_small * 1.05, (per_host_small, per_host_big)


@pytest.mark.parametrize(("slots", "chief"), [
    (PS, "chief-0"),
    (MWMS, "worker-0"),
    ((("worker", 1), ("worker", 0), ("chief", 0)), "chief-0"),
    ((("worker", 0),), "worker-0"),
])
def test_chief_group_var_follows_the_contract(slots: tuple[tuple[str, int], ...], chief: str) -> None:
    cluster = validate_cluster(_specs(*slots), "auto", "c")
    assert unmarked(build_inventory(cluster))["tfcluster"]["vars"]["tfcluster_chief"] == chief
    assert (cluster.chief.task_type, cluster.chief.task_index) == chief_of(cluster.spec)


@pytest.mark.parametrize(("gpus", "expected"), [
    ({"worker-0": 1, "worker-1": 8}, True),
    ({"worker-0": 1, "worker-1": 0}, False),
    ({"worker-0": 0, "worker-1": 0}, False),
    ({"worker-0": 2, "worker-1": 2, "evaluator-0": 0}, True),  # the evaluator is not in the collective
])
def test_all_gpus_group_var(gpus: dict[str, int], expected: bool) -> None:
    specs = tuple(HostSpec(label=name, task_type=name.split("-")[0], task_index=int(name.split("-")[1]),
                           address=f"10.0.0.{n}", port=2222, gpus=count)
                  for n, (name, count) in enumerate(gpus.items()))
    cluster = validate_cluster(SourceResult(specs=specs, empty_fix="x"), "auto", "c")
    assert build_inventory(cluster)["tfcluster"]["vars"]["tfcluster_all_gpus"] is expected


def _strings(value: Any) -> list[Any]:
    """Every str found in a document, outside an unsafe mark (a correctly marked document has none)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return []
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_every_string_variable_is_marked_unsafe() -> None:
    """ansible-core templates an inventory script's variables unless a string is marked `__ansible_unsafe`."""
    specs = (HostSpec(label="c", task_type="chief", task_index=0, address="10.0.9.1", port=2222, ssh_user="ubuntu",
                      ssh_port=2200), *_specs(*MWMS).specs)
    trust = SshTrust(known_hosts=Path("/k/known_hosts"), checking="yes")
    inv = build_inventory(validate_cluster(SourceResult(specs=specs, empty_fix="x"), "auto", "c", trust))
    group = inv["tfcluster"]["vars"]
    assert _strings(inv["_meta"]) == [] and _strings(group) == []
    assert group["ansible_ssh_common_args"] == {
        "__ansible_unsafe": "-o UserKnownHostsFile=/k/known_hosts -o StrictHostKeyChecking=yes"}
    assert group["ansible_host_key_checking"] is True
    assert inv["_meta"]["hostvars"]["chief-0"]["ansible_user"] == {"__ansible_unsafe": "ubuntu"}
    assert inv["_meta"]["hostvars"]["chief-0"]["ansible_port"] == 2200
    # ... and unmarked() gives back what Ansible sees.
    assert unmarked(inv)["_meta"]["hostvars"]["chief-0"]["ansible_host"] == "10.0.9.1"
    assert unsafe(["a", {"b": "c", "n": 1}]) == [{"__ansible_unsafe": "a"}, {"b": {"__ansible_unsafe": "c"}, "n": 1}]


def test_no_ssh_options_without_ssh_hosts_or_settings() -> None:
    local = SourceResult(specs=(HostSpec(label="w", task_type="worker", task_index=0, address="127.0.0.1",
                                         port=2222, connection="local"),), empty_fix="x")
    trust = SshTrust(known_hosts=Path("/k"), checking="yes")
    assert set(unmarked(build_inventory(validate_cluster(local, "auto", "c", trust)))["tfcluster"]["vars"]) == {
        "tfcluster_cluster_spec", "tfcluster_strategy", "tfcluster_cluster_name", "tfcluster_chief",
        "tfcluster_all_gpus"}
    plain = unmarked(build_inventory(validate_cluster(_specs(*MWMS), "auto", "c")))["tfcluster"]["vars"]
    assert "ansible_ssh_common_args" not in plain and "ansible_host_key_checking" not in plain


# ---- CLI -----------------------------------------------------------------------------------------------------------

LOCAL = {"TFCLUSTER_SOURCE": "local", "TFCLUSTER_WORKERS": "2"}


def _list(cli, env: dict[str, str]) -> dict[str, Any]:
    code, out, err = cli(env, "--list")
    assert code == 0, err
    return unmarked(json.loads(out))


def test_cli_list_is_deterministic_sorted_json(cli) -> None:
    code, out, _ = cli(LOCAL, "--list")
    assert code == 0
    doc = json.loads(out)
    assert out == json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"  # compact: Ansible reads it
    assert "_meta" in doc
    assert cli(LOCAL, "--list")[1] == out


def test_cli_host(cli) -> None:
    code, out, _ = cli(LOCAL, "--host", "worker-1")
    assert code == 0
    assert json.loads(out) == unsafe({"ansible_connection": "local", "ansible_host": "127.0.0.1",
                                      "tfcluster_address": "127.0.0.1:22221", "tfcluster_gpus": 0,
                                      "tfcluster_port": 22221, "tfcluster_task_index": 1,
                                      "tfcluster_task_type": "worker"})
    code, out, err = cli(LOCAL, "--host", "nobody")
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert "--host: no host named 'nobody' in the inventory. Fix: use one of: worker-0, worker-1" in err


def test_cli_tf_config_all_and_one(cli) -> None:
    code, out, _ = cli(LOCAL, "--tf-config", "all")
    assert code == 0
    lines = out.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["worker-0", "worker-1"]
    value = shlex.split(lines[1].split(" ", 1)[1])[0].removeprefix("TF_CONFIG=")
    assert json.loads(value) == {"cluster": {"worker": ["127.0.0.1:22220", "127.0.0.1:22221"]},
                                 "task": {"type": "worker", "index": 1}}
    code, one, _ = cli(LOCAL, "--tf-config", "worker-1")
    assert one == value + "\n"
    code, out, err = cli(LOCAL, "--tf-config", "worker-9")
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert "--tf-config: no host named 'worker-9' in the inventory. Fix: use one of: all, worker-0, worker-1" in err


def test_cli_tf_config_mirrored_is_empty(cli) -> None:
    env = {**LOCAL, "TFCLUSTER_WORKERS": "1", "TFCLUSTER_STRATEGY": "mirrored"}
    assert cli(env, "--tf-config", "all")[1] == "worker-0 TF_CONFIG=''\n"
    assert cli(env, "--tf-config", "worker-0")[1] == "\n"


@pytest.mark.parametrize("argv", [[], ["--list", "--host", "x"], ["--list", "--tf-config", "all"], ["--host"],
                                  ["--list", "--known-hosts"]])
def test_cli_usage_errors(cli, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli(LOCAL, *argv)
    assert info.value.code == 2


def test_cli_invalid_prints_nothing_and_exits_1(cli, tmp_path: Path) -> None:
    path = tmp_path / "h.yml"
    path.write_text(yaml.safe_dump({"hosts": [{"task_type": "ps", "address": "10.0.0.1"},
                                              {"task_type": "worker", "address": "10.0.0.2"}]}))
    code, out, err = cli({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}, "--list")
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert f"tfcluster inventory (source static, TFCLUSTER_HOSTS_FILE={path}) is invalid (1 problem(s)):" in err
    assert "cluster.chief: parameter_server needs exactly one chief (the coordinator). Fix: add one chief task" in err


def test_cli_terraform_runner_injected(cli, tmp_path: Path) -> None:
    from tests.unit.inventory.inventory_helpers import fixture_json, runner_for

    env = {"TFCLUSTER_SOURCE": "terraform", "TFCLUSTER_TF_DIR": str(tmp_path)}
    code, out, _ = cli(env, "--list", injected=Injected(terraform_runner=runner_for(
        fixture_json("terraform_output_aws.json"))))
    assert code == 0 and json.loads(out)["chief"]["hosts"] == ["chief-0"]
    code, out, err = cli(env, "--list", injected=Injected(terraform_runner=runner_for({})))
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert "Fix: run `make provision` first" in err


def test_cluster_name_precedence(cli, tmp_path: Path) -> None:
    assert _list(cli, LOCAL)["tfcluster"]["vars"]["tfcluster_cluster_name"] == "local"
    named = {**LOCAL, "TFCLUSTER_CLUSTER": "exp1"}
    assert _list(cli, named)["tfcluster"]["vars"]["tfcluster_cluster_name"] == "exp1"
    path = tmp_path / "h.yml"
    path.write_text(yaml.safe_dump({"hosts": [{"address": "10.0.0.1"}]}))
    static = {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}
    assert _list(cli, static)["tfcluster"]["vars"]["tfcluster_cluster_name"] == "onprem"
    path.write_text(yaml.safe_dump({"cluster_name": "lab", "hosts": [{"address": "10.0.0.1"}]}))
    assert _list(cli, static)["tfcluster"]["vars"]["tfcluster_cluster_name"] == "lab"
    assert _list(cli, {**static, "TFCLUSTER_CLUSTER": "exp2"})["tfcluster"]["vars"]["tfcluster_cluster_name"] == "exp2"
