"""tfcluster.provision and tfcluster.provision.localaws: the pure parts (slots, -var arguments, plan view, endpoint
records)."""

from __future__ import annotations

import json
import os
import shlex
import socket
from pathlib import Path

import pytest

from tfcluster import kinds
from tfcluster.inventory.cli import plan_lines
from tfcluster.provision import common, localaws
from tfcluster.provision import local as provision
from tfcluster.provision.__main__ import main as provision_main


@pytest.mark.parametrize(("workers", "strategy", "expected"), [
    (2, "auto", {"worker": 2}),
    (3, "multi_worker_mirrored", {"worker": 3}),
    (2, "parameter_server", {"chief": 1, "ps": 1, "worker": 2}),
])
def test_local_slots(workers: int, strategy: str, expected: dict[str, int]) -> None:
    assert provision.local_slots(workers, strategy) == expected


def test_local_slots_refuses_zero_workers() -> None:
    with pytest.raises(provision.ProvisionError, match="WORKERS=0: at least one worker"):
        provision.local_slots(0, "auto")


def test_local_vars_from_environment() -> None:
    env = {"TFCLUSTER_CLUSTER": "demo-local", "TFCLUSTER_WORKERS": "3", "TFCLUSTER_BASE_PORT": "23000",
           "USER": "alice"}
    assert provision.local_vars(env, "http://127.0.0.1:4566", None) == [
        "endpoint=http://127.0.0.1:4566", "cluster_name=demo-local", 'slots={"worker": 3}', "base_port=23000",
        "local_user=alice"]
    assert 'slots={"worker": 1}' in provision.local_vars(env, None, 1)  # --workers wins over the environment


def test_var_args() -> None:
    assert provision.var_args(["a=1", "b=2"]) == ["-var", "a=1", "-var", "b=2"]


def test_tf_dir_must_be_a_root_module(tmp_path: Path) -> None:
    with pytest.raises(provision.ProvisionError, match="not a Terraform root module"):
        common.tf_dir_for("local", {}, str(tmp_path))
    (tmp_path / "main.tf").write_text("")
    assert common.tf_dir_for("local", {"TFCLUSTER_TF_DIR": str(tmp_path)}) == tmp_path.resolve()


def test_local_env_never_carries_real_credentials() -> None:
    env = provision.environment({"PATH": "", "AWS_PROFILE": "prod", "AWS_ACCESS_KEY_ID": "AKIAREAL",
                                 "AWS_SESSION_TOKEN": "t"})
    assert env["AWS_ACCESS_KEY_ID"] == "testing" and "AWS_PROFILE" not in env and "AWS_SESSION_TOKEN" not in env


def test_onprem_has_nothing_to_provision() -> None:
    onprem = kinds.get("onprem")
    with pytest.raises(kinds.KindError, match=r"CLUSTER=onprem has nothing to apply: its hosts exist already\. Fix: "):
        onprem.provision_argv(kinds.Target(kind="onprem", name="lab"), "apply")
    assert kinds.get("aws").provision_argv(kinds.Target(kind="aws", name="c", auto_approve=True), "apply")[-4:] == \
        ["apply", "--backend", "aws", "--auto-approve"]


PLAN = {"output_changes": {"hosts": {"after": [
    {"name": "chief-0", "task_type": "chief", "task_index": 0, "port": 2222, "connection": "ssh", "gpus": 1},
    {"name": "worker-0", "task_type": "worker", "task_index": 0, "port": 2222, "connection": "ssh", "gpus": 1},
    {"name": "evaluator-0", "task_type": "evaluator", "task_index": 0, "port": 2222, "connection": "ssh",
     "gpus": 1},
]}}}


def test_planned_hosts_and_view_before_addresses_are_known() -> None:
    hosts = common.planned_hosts(PLAN)
    assert [h["name"] for h in hosts] == ["chief-0", "worker-0", "evaluator-0"]
    view = plan_lines(hosts, "auto", "tfcluster-aws")  # the inventory's own TF_CONFIG code, as --tf-config all
    assert any(line.startswith("worker-0       worker:0       worker-0:2222") for line in view)
    chief_line = next(line for line in view if line.startswith("  chief-0 TF_CONFIG="))
    config = json.loads(shlex.split(chief_line.split("=", 1)[1])[0])
    assert config == {"cluster": {"chief": ["chief-0:2222"], "worker": ["worker-0:2222"]},
                      "task": {"type": "chief", "index": 0}}  # the evaluator stays out of the cluster


def test_planned_hosts_from_a_plan_without_changes() -> None:
    plan = {"planned_values": {"outputs": {"hosts": {"value": PLAN["output_changes"]["hosts"]["after"]}}}}
    assert len(common.planned_hosts(plan)) == 3
    assert common.planned_hosts({}) == []
    assert plan_lines([], "auto", "x") == ["no hosts in the plan"]


def test_endpoint_record_roundtrip(tmp_path: Path) -> None:
    endpoint = localaws.Endpoint(pid=12345, port=4566)
    localaws.write_state(tmp_path, endpoint)
    assert (tmp_path / "moto.pid").read_text() == "12345\n"
    assert localaws.read_state(tmp_path) == endpoint
    assert endpoint.url == "http://127.0.0.1:4566"
    localaws.clear_state(tmp_path)
    assert localaws.read_state(tmp_path) is None


def test_stop_only_touches_a_recorded_moto(tmp_path: Path) -> None:
    assert localaws.stop(tmp_path) is False  # nothing recorded
    localaws.write_state(tmp_path, localaws.Endpoint(pid=os.getpid(), port=4566))  # alive, but not moto
    assert localaws.is_our_moto(os.getpid(), 4566) is False
    assert localaws.stop(tmp_path) is False
    assert localaws.read_state(tmp_path) is None  # the stale record is gone, this process is untouched


def test_start_refuses_a_port_taken_by_someone_else(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(localaws.LocalAwsError, match=f"127.0.0.1:{port} is taken by another process"):
            localaws.start(tmp_path, port)
    assert localaws.read_state(tmp_path) is None


@pytest.mark.parametrize(("raw", "message"), [("abc", "is not a port number"), ("80", "must be from 1024")])
def test_default_port_errors(monkeypatch: pytest.MonkeyPatch, raw: str, message: str) -> None:
    monkeypatch.setenv("TFCLUSTER_LOCALAWS_PORT", raw)
    with pytest.raises(localaws.LocalAwsError, match=message):
        localaws.default_port()


def test_upgrade_and_known_hosts_are_aws_actions(caplog: pytest.LogCaptureFixture) -> None:
    assert provision_main(["upgrade", "--backend", "local"]) == 1
    assert "`upgrade` is not an action of the local backend. Fix: use one of apply, plan, destroy, output" \
        in caplog.text


@pytest.fixture
def no_aws_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith(("AWS_", "TF_VAR_"))] + ["TFCLUSTER_TF_MIRROR"]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # not an EC2 instance with a role


def test_aws_apply_without_credentials_stops_before_terraform(
        aws_root: Path, no_aws_credentials: None, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(common, "run_terraform", lambda args, *a, **k: ran.append(list(args)))
    assert provision_main(["apply", "--backend", "aws"]) == 1
    lines = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(lines) == 1 and lines[0].startswith("no AWS credentials found") and "Fix: `aws configure`" in lines[0]
    assert ran == []  # not even `terraform init`


def test_aws_profile_that_does_not_exist(aws_root: Path, no_aws_credentials: None,
                                         caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "ml")
    assert provision_main(["plan", "--backend", "aws"]) == 1
    assert "AWS profile 'ml' is not in ~/.aws/config. Fix: `aws configure --profile ml`" in caplog.text


def test_registry_init_never_keeps_the_mirrors_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    ran: list[list[str]] = []
    monkeypatch.setattr(common, "run_terraform", lambda args, *a, **k: ran.append(list(args)))
    (tmp_path / ".terraform.lock.hcl").write_text('provider "registry.terraform.io/hashicorp/aws" {\n'
                                                  '  version = "3.39.0"\n}\n')
    config = {"TF_CLI_CONFIG_FILE": str(tmp_path / ".terraform.lock.hcl")}  # any file: the check is that it exists
    common.prepare(tmp_path, config, "registry")
    assert ran[-1] == ["init", "-input=false", "-upgrade"]
    assert "pins hashicorp/aws 3.39.0 (the offline mirror's); taking the newest version" in caplog.text
    common.prepare(tmp_path, {**config, "TFCLUSTER_TF_MIRROR": "1"}, "registry")
    assert ran[-1] == ["get"]  # the mirror as an override: the lock file is not touched
    common.prepare(tmp_path, config, "mirror")
    assert ran[-1] == ["init", "-input=false", "-upgrade=false"]
    with pytest.raises(common.ProvisionError, match=r"CLI config .*missing\. Fix: `make setup`"):
        common.prepare(tmp_path, {"TF_CLI_CONFIG_FILE": str(tmp_path / "nope")}, "registry")


@pytest.mark.parametrize(("stdout", "code", "name"), [
    ('{"cluster_name": {"sensitive": false, "type": "string", "value": "tfcluster-aws"}}', 0, "tfcluster-aws"),
    ("\x1b[33m╷\x1b[0m Warning: No outputs found\n", 0, None),  # what `output -raw` prints before an apply
    ("{}", 0, None),
    ("", 1, None),
])
def test_state_cluster_name_is_a_name_or_none(monkeypatch: pytest.MonkeyPatch, stdout: str, code: int,
                                              name: str | None) -> None:
    import subprocess

    monkeypatch.setattr(common, "run_terraform",
                        lambda args, *a, **k: subprocess.CompletedProcess(args, code, stdout=stdout, stderr=""))
    assert common.state_cluster_name(Path("."), {}) == name


def test_upgrade_needs_the_registry(aws_root: Path, caplog: pytest.LogCaptureFixture,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFCLUSTER_TF_MIRROR", "1")
    assert provision_main(["upgrade", "--backend", "aws"]) == 1
    assert "nothing to upgrade to. Fix: unset TFCLUSTER_TF_MIRROR" in caplog.text


def test_a_state_whose_emulator_is_gone_is_set_aside_not_applied_against(tmp_path: Path) -> None:
    """After a reboot the local state names resources that lived only in the dead emulator's memory."""
    state = tmp_path / "terraform.tfstate"
    state.write_text(json.dumps({"version": 4, "resources": [{"type": "aws_instance", "name": "this"}]}))
    aside = provision.set_aside_stale_state(tmp_path, "20261201T000000")
    assert aside == tmp_path / "terraform.tfstate.stale-20261201T000000"
    assert not state.exists() and json.loads(aside.read_text())["resources"]


@pytest.mark.parametrize("text", [None, "", "not json", "[]", '{"version": 4, "resources": []}'])
def test_no_state_or_an_empty_one_is_left_alone(tmp_path: Path, text: str | None) -> None:
    if text is not None:
        (tmp_path / "terraform.tfstate").write_text(text)
    assert provision.set_aside_stale_state(tmp_path, "x") is None
    assert [p.name for p in tmp_path.iterdir()] == ([] if text is None else ["terraform.tfstate"])
