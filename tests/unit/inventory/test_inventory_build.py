"""Strategy rules, evaluator handling, TF_CONFIG per host, the CLI and its settings."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from inventory.build import build_inventory, tf_config_strings, validate_cluster
from inventory.cli import Injected
from inventory.config import load_settings
from inventory.model import HostSpec, InventoryError, SourceResult
from tfcluster.contract import TFConfig, build_tf_config, parse_tf_config


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
    inv = build_inventory(cluster)
    assert inv["tfcluster"]["vars"]["tfcluster_strategy"] == resolved
    for host in cluster.hosts:
        raw = inv["_meta"]["hostvars"][host.name]["tfcluster_tf_config"]
        if resolved in ("mirrored", "tpu"):
            assert raw == ""  # one host, no TF_CONFIG
            continue
        # What the trainer will accept: the same module validates it.
        parsed = parse_tf_config(raw, strategy=resolved)
        assert parsed is not None
        assert (parsed.task_type, parsed.task_index) == (host.task_type, host.task_index)
        # Byte-identical to what tfcluster.contract builds.
        assert raw == build_tf_config(cluster.spec, host.task_type, host.task_index, resolved).to_json()


@pytest.mark.parametrize(("slots", "strategy", "message"), [
    ((("ps", 0), ("worker", 0)), "auto", "parameter_server needs exactly one chief"),
    ((("chief", 0), ("worker", 0)), "parameter_server", "parameter_server needs at least one ps task"),
    (MWMS, "mirrored", "mirrored runs on one host"),
    ((("evaluator", 0),), "auto", "the cluster is empty"),
])
def test_strategy_violations(slots: tuple[tuple[str, int], ...], strategy: str, message: str) -> None:
    with pytest.raises(InventoryError) as info:
        validate_cluster(_specs(*slots), strategy, "c")
    assert any(message in p.message for p in info.value.problems), info.value.problems


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


def test_embed_false_leaves_tf_config_out() -> None:
    inv = build_inventory(validate_cluster(_specs(*MWMS), "auto", "c"), embed_tf_config=False)
    assert all("tfcluster_tf_config" not in v for v in inv["_meta"]["hostvars"].values())


def test_tf_config_strings_match_tfconfig_dataclass() -> None:
    cluster = validate_cluster(_specs(*PS), "auto", "c")
    for host in cluster.hosts:
        expected = cluster.tf_config(host)
        assert isinstance(expected, TFConfig)
        assert tf_config_strings(cluster)[host.name] == expected.to_json()


# ---- CLI -----------------------------------------------------------------------------------------------------------

LOCAL = {"TFCLUSTER_SOURCE": "local", "TFCLUSTER_WORKERS": "2"}


def test_cli_list_is_deterministic_sorted_json(cli) -> None:
    code, out, _ = cli(LOCAL, "--list")
    assert code == 0
    doc = json.loads(out)
    assert out == json.dumps(doc, sort_keys=True, indent=2) + "\n"
    assert "_meta" in doc
    assert cli(LOCAL, "--list")[1] == out


def test_cli_host(cli) -> None:
    code, out, _ = cli(LOCAL, "--host", "worker-1")
    assert code == 0
    assert json.loads(out)["tfcluster_address"] == "127.0.0.1:22221"
    code, out, err = cli(LOCAL, "--host", "nobody")
    assert (code, out) == (1, "")
    assert "--host: no host named 'nobody' in the inventory. Fix: use one of: worker-0, worker-1" in err


def test_cli_tf_config_all_and_one(cli) -> None:
    code, out, _ = cli(LOCAL, "--tf-config", "all")
    assert code == 0
    lines = out.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["worker-0", "worker-1"]
    value = shlex.split(lines[1].split(" ", 1)[1])[0].removeprefix("TF_CONFIG=")
    assert json.loads(value)["task"] == {"type": "worker", "index": 1}
    code, one, _ = cli(LOCAL, "--tf-config", "worker-1")
    assert one.strip() == value
    code, out, err = cli(LOCAL, "--tf-config", "worker-9")
    assert (code, out) == (1, "")
    assert "--tf-config: no host named 'worker-9' in the inventory. Fix: use one of: all, worker-0, worker-1" in err


def test_cli_tf_config_mirrored_is_empty(cli) -> None:
    env = {**LOCAL, "TFCLUSTER_WORKERS": "1", "TFCLUSTER_STRATEGY": "mirrored"}
    assert cli(env, "--tf-config", "all")[1] == "worker-0 TF_CONFIG=''\n"


@pytest.mark.parametrize("argv", [[], ["--list", "--host", "x"], ["--list", "--tf-config", "all"], ["--host"]])
def test_cli_usage_errors(cli, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli(LOCAL, *argv)
    assert info.value.code == 2


def test_cli_invalid_prints_nothing_and_exits_1(cli, tmp_path: Path) -> None:
    path = tmp_path / "h.yml"
    path.write_text(yaml.safe_dump({"hosts": [{"task_type": "ps", "address": "10.0.0.1"},
                                              {"task_type": "worker", "address": "10.0.0.2"}]}))
    code, out, err = cli({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}, "--list")
    assert (code, out) == (1, "")
    assert f"tfcluster inventory (source static, TFCLUSTER_HOSTS_FILE={path}) is invalid (1 problem(s))" in err
    assert "cluster.chief: parameter_server needs exactly one chief (the coordinator). Fix: add one chief task" in err


def test_cli_terraform_runner_injected(cli, tmp_path: Path) -> None:
    from inventory_helpers import fixture_json, runner_for

    env = {"TFCLUSTER_SOURCE": "terraform", "TFCLUSTER_TF_DIR": str(tmp_path)}
    code, out, _ = cli(env, "--list", injected=Injected(terraform_runner=runner_for(
        fixture_json("terraform_output_aws.json"))))
    assert code == 0 and json.loads(out)["chief"]["hosts"] == ["chief-0"]
    code, out, err = cli(env, "--list", injected=Injected(terraform_runner=runner_for({})))
    assert (code, out) == (1, "")
    assert "Fix: run `make provision` first" in err


def test_cluster_name_precedence(cli, tmp_path: Path) -> None:
    assert json.loads(cli(LOCAL, "--list")[1])["tfcluster"]["vars"]["tfcluster_cluster_name"] == "local"
    named = {**LOCAL, "TFCLUSTER_CLUSTER": "exp1"}
    assert json.loads(cli(named, "--list")[1])["tfcluster"]["vars"]["tfcluster_cluster_name"] == "exp1"
    path = tmp_path / "h.yml"
    path.write_text(yaml.safe_dump({"hosts": [{"address": "10.0.0.1"}]}))
    static = {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}
    assert json.loads(cli(static, "--list")[1])["tfcluster"]["vars"]["tfcluster_cluster_name"] == "onprem"


# ---- settings ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("env", "expected"), [
    ({"TFCLUSTER_SOURCE": "gcp"}, "TFCLUSTER_SOURCE: unknown source 'gcp'. Fix: use one of terraform, static, aws, "
                                  "local"),
    ({"TFCLUSTER_STRATEGY": "horovod"}, "TFCLUSTER_STRATEGY: unknown strategy 'horovod'. Fix: use one of auto, "
                                        "multi_worker_mirrored, parameter_server, mirrored, tpu"),
    ({"TFCLUSTER_WORKERS": "0"}, "TFCLUSTER_WORKERS: '0' is not a whole number in 1..10000. Fix: set "
                                 "TFCLUSTER_WORKERS to a number in 1..10000, or unset it for 2"),
    ({"TFCLUSTER_BASE_PORT": "70000"}, "TFCLUSTER_BASE_PORT: '70000' is not a whole number in 1..65535."),
    ({"TFCLUSTER_SOURCE": "local", "TFCLUSTER_BASE_PORT": "65535", "TFCLUSTER_WORKERS": "2"},
     "TFCLUSTER_BASE_PORT: 2 local tasks from port 65535 would need port 65536. Fix: lower TFCLUSTER_BASE_PORT or "
     "TFCLUSTER_WORKERS"),
    ({"TFCLUSTER_SOURCE": "static"}, "TFCLUSTER_HOSTS_FILE: is not set, but TFCLUSTER_SOURCE=static needs a host "
                                     "file. Fix: export TFCLUSTER_HOSTS_FILE=path/to/hosts.yml"),
    ({"TFCLUSTER_SOURCE": "aws"}, "TFCLUSTER_CLUSTER: is not set, but TFCLUSTER_SOURCE=aws filters instances by the "
                                  "tfcluster:cluster tag. Fix: export TFCLUSTER_CLUSTER=<cluster_name>"),
])
def test_settings_problems(env: dict[str, str], expected: str) -> None:
    with pytest.raises(InventoryError) as info:
        load_settings(env)
    assert any(str(p).startswith(expected) for p in info.value.problems), info.value.problems


def test_settings_collects_all_and_defaults() -> None:
    with pytest.raises(InventoryError) as info:
        load_settings({"TFCLUSTER_SOURCE": "x", "TFCLUSTER_STRATEGY": "y", "TFCLUSTER_WORKERS": "z"})
    assert len(info.value.problems) == 3
    settings = load_settings({})
    assert (settings.source, settings.strategy, settings.workers, settings.base_port) == (
        "terraform", "auto", 2, 22220)
    assert settings.tf_dir == Path(__file__).resolve().parents[3] / "infra" / "aws"


def test_cli_missing_package_is_one_clear_error(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import builtins

    real_import = builtins.__import__

    def no_yaml(name: str, *args: object, **kwargs: object) -> object:
        if name == "yaml":
            raise ModuleNotFoundError("No module named 'yaml'", name="yaml")
        return real_import(name, *args, **kwargs)

    path = tmp_path / "h.yml"
    path.write_text("hosts: []\n")
    monkeypatch.setattr(builtins, "__import__", no_yaml)
    code, out, err = cli({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}, "--list")
    assert (code, out) == (1, "")
    assert "tfcluster inventory: Python package 'yaml' is missing" in err
    assert "Fix: run it with the project venv first on PATH" in err
