"""Capacity on CLUSTER=aws (tfcluster/provision/aws.py, issue 22): the next zone after InsufficientInstanceCapacity
(a pure decision, in a table), what pins the zone, and the apply loop itself with the Terraform runner faked: moto
launches an instance whatever the capacity (it raises no capacity error), so the runner stands in for AWS here —
it fails the apply in the zones that have no capacity, as Terraform's output would say it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tfcluster.provision import aws as provision_aws
from tfcluster.provision import awscheck
from tfcluster.provision.aws import CapacityStep, capacity_step
from tfcluster.provision.common import ProvisionError

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
ICE = ('Error: creating EC2 Instance: InsufficientInstanceCapacity: We currently do not have sufficient p4d.24xlarge '
       'capacity in the Availability Zone you requested (us-east-1a).\n  with module.cluster.aws_instance.this'
       '["worker-1"],\n')
SPOT = 'Error: waiting for Spot Instance Request (sir-1) to be fulfilled: capacity-not-available\n'


@pytest.mark.parametrize(("output", "pins", "tried", "step"), [
    # the first zone had no capacity: the next one that offers the type
    (ICE, [], ["us-east-1a"], CapacityStep("us-east-1b", "InsufficientInstanceCapacity in us-east-1a")),
    (ICE, [], ["us-east-1a", "us-east-1b"],
     CapacityStep("us-east-1c", "InsufficientInstanceCapacity in us-east-1a, us-east-1b")),
    # every zone tried: stop, naming them
    (ICE, [], ZONES, CapacityStep(None, "InsufficientInstanceCapacity in every zone that offers the type: "
                                        "us-east-1a, us-east-1b, us-east-1c tried")),
    # spot: the request's status code
    (SPOT, [], ["us-east-1a"], CapacityStep("us-east-1b", "capacity-not-available in us-east-1a")),
    # a pinned zone: never another
    (ICE, ["availability_zone = us-east-1a"], ["us-east-1a"],
     CapacityStep(None, "InsufficientInstanceCapacity: the zone is pinned (availability_zone = us-east-1a), so no "
                        "other zone is tried")),
    (ICE, ["subnet_id"], ["us-east-1a"], CapacityStep(None, "InsufficientInstanceCapacity: the zone is pinned "
                                                            "(subnet_id), so no other zone is tried")),
    # another error: nothing to retry
    ("Error: VcpuLimitExceeded: You have requested more vCPU capacity", [], ["us-east-1a"],
     CapacityStep(None, "not a capacity error")),
])
def test_the_next_zone_after_a_capacity_error(output: str, pins: list[str], tried: list[str],
                                              step: CapacityStep) -> None:
    assert capacity_step(output, pins, ZONES, tried) == step


@pytest.mark.parametrize(("files", "env", "extra", "pins"), [
    ({}, {}, [], []),
    ({"terraform.tfvars": 'availability_zone = "us-east-1b"\n'}, {}, [], ["availability_zone = us-east-1b"]),
    ({}, {"TF_VAR_availability_zone": "us-east-1c"}, [], ["availability_zone = us-east-1c"]),
    ({"terraform.tfvars": 'subnet_id = "subnet-0abc"\n'}, {}, [], ["subnet_id"]),
    ({}, {}, ["subnet_id=subnet-0abc"], ["subnet_id"]),
    ({"terraform.tfvars": 'capacity = {\n  reservation_id = "cr-0123"\n}\n'}, {}, [],
     ["capacity (a reservation or Capacity Block)"]),
    ({"x.auto.tfvars": "capacity = { capacity_block = true }\n"}, {}, [],
     ["capacity (a reservation or Capacity Block)"]),
    ({"terraform.tfvars.json": '{"capacity": {"reservation_id": "cr-1"}}'}, {}, [],
     ["capacity (a reservation or Capacity Block)"]),
    ({"terraform.tfvars": 'capacity = { preference = "open" }\n# subnet_id = "x"\n'}, {}, [], []),
])
def test_what_pins_the_zone(tmp_path: Path, files: dict[str, str], env: dict[str, str], extra: list[str],
                            pins: list[str]) -> None:
    (tmp_path / "variables.tf").write_text('variable "availability_zone" {\n  default = null\n}\n')
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert provision_aws.zone_pins(tmp_path, env, extra) == pins


def test_the_slots_of_a_state_and_of_an_error() -> None:
    state = ["module.cluster.aws_subnet.this[0]", 'module.cluster.aws_instance.this["chief-0"]',
             'module.cluster.aws_spot_instance_request.this["worker-0"]', 'module.cluster.aws_ec2_tag.spot["x"]']
    assert provision_aws.slots_in(state) == ["chief-0", "worker-0"]
    assert provision_aws.slots_in(ICE) == ["worker-1"]
    assert provision_aws.subnet_address(state) == "module.cluster.aws_subnet.this[0]"
    assert provision_aws.subnet_address(['module.cluster.aws_instance.this["chief-0"]']) is None


class FakeAws:
    """Stands in for Terraform and AWS: zones without capacity fail the apply (launching the slots it could first);
    the state, outputs and calls are kept as Terraform would keep them."""

    def __init__(self, full: Sequence[str], slots: Sequence[str] = ("worker-0", "worker-1"),
                 launch_before_failing: int = 1) -> None:
        self.full, self.slots, self.partial = set(full), list(slots), launch_before_failing
        self.zone: str | None = None
        self.state: list[str] = []
        self.calls: list[list[str]] = []

    def run(self, args: Sequence[str], tf_dir: Path, env: Any, capture: bool = False,
            check: bool = True) -> Any:
        import subprocess

        args = list(args)
        self.calls.append(args)
        if args[0] == "apply":
            wanted = next((a.split("=", 1)[1] for a in args if a.startswith("availability_zone=")), None)
            if self.zone is None or any(a.startswith("-replace=") and "aws_subnet" in a for a in args):
                self.zone = wanted or ZONES[0]
                self.state = ["module.cluster.aws_subnet.this[0]"]
            if self.zone in self.full:
                launched = self.slots[:self.partial]
                self.state += [f'module.cluster.aws_instance.this["{s}"]' for s in launched]
                missing = self.slots[self.partial:]
                named = (missing or self.slots)[0]  # the slot whose instance the error is about
                raise ProvisionError("terraform apply failed", ICE.replace("us-east-1a", self.zone).replace(
                    "worker-1", named))
            self.state += [f'module.cluster.aws_instance.this["{s}"]' for s in self.slots]
            return subprocess.CompletedProcess(args, 0, "", "")
        if args[0] == "destroy":
            self.state = []
            return subprocess.CompletedProcess(args, 0, "", "")
        if args[0] == "state":
            return subprocess.CompletedProcess(args, 0, "\n".join(self.state), "")
        raise AssertionError(args)

    def outputs(self) -> dict[str, Any]:
        return {"offering_zones": ZONES, "availability_zone": self.zone, "cluster_name": "tfcluster-aws"}


TARGET = awscheck.Target(region="us-east-1", profile=None, instance_type="p4d.24xlarge", zone=None)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    def make(full: Sequence[str], **kwargs: Any) -> FakeAws:
        aws = FakeAws(full, **kwargs)
        monkeypatch.setattr(provision_aws, "run_terraform", aws.run)
        monkeypatch.setattr("tfcluster.provision.common.run_terraform", aws.run)
        monkeypatch.setattr(provision_aws, "outputs", lambda tf_dir, env: aws.outputs())
        monkeypatch.setattr(provision_aws, "ec2_client", lambda target: None)
        destroyed: list[str] = []
        monkeypatch.setattr(provision_aws, "destroy", lambda *a, **k: destroyed.append("destroy") or aws.run(
            ["destroy"], tmp_path, {}))
        aws.destroyed = destroyed  # type: ignore[attr-defined]
        return aws
    (tmp_path / "variables.tf").write_text('variable "availability_zone" {\n  default = null\n}\n')
    return make


def applies(aws: FakeAws) -> list[list[str]]:
    return [c for c in aws.calls if c[0] == "apply"]


def test_an_apply_without_capacity_moves_to_the_next_zone_replacing_the_subnet(
        fake: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    aws = fake(["us-east-1a"])
    provision_aws.apply(tmp_path, {}, ["-var", "x=1"], ["-auto-approve"], TARGET)
    first, second = applies(aws)
    assert first == ["apply", "-auto-approve", "-var", "x=1"]
    assert second == ["apply", "-auto-approve", "-var", "x=1", "-var", "availability_zone=us-east-1b",
                      "-replace=module.cluster.aws_subnet.this[0]"]
    assert aws.zone == "us-east-1b"
    assert "InsufficientInstanceCapacity in us-east-1a: trying us-east-1b (zones tried: us-east-1a)" in caplog.text


def test_every_zone_full_names_them_all_and_what_launched(fake: Any, tmp_path: Path) -> None:
    aws = fake(ZONES)
    with pytest.raises(ProvisionError) as caught:
        provision_aws.apply(tmp_path, {}, [], ["-auto-approve"], TARGET)
    assert len(applies(aws)) == 3
    text = str(caught.value)
    assert "zones tried: us-east-1a, us-east-1b, us-east-1c" in text
    assert "not every slot launched. Launched and billed now (about $" in text
    assert "worker-0; not launched: worker-1" in text
    assert "make destroy CLUSTER=aws TFCLUSTER_CLUSTER=tfcluster-aws" in text and "ALL_OR_NOTHING=1" in text
    assert aws.destroyed == []  # type: ignore[attr-defined]


def test_all_or_nothing_tears_down_what_launched(fake: Any, tmp_path: Path) -> None:
    aws = fake(ZONES)
    with pytest.raises(ProvisionError, match="ALL_OR_NOTHING=1: what launched \\(worker-0\\) was destroyed"):
        provision_aws.apply(tmp_path, {"ALL_OR_NOTHING": "1"}, [], ["-auto-approve"], TARGET)
    assert aws.destroyed == ["destroy"] and aws.state == []  # type: ignore[attr-defined]


def test_a_pinned_zone_is_never_left(fake: Any, tmp_path: Path) -> None:
    aws = fake(ZONES)
    with pytest.raises(ProvisionError, match="the zone is pinned \\(availability_zone = us-east-1a\\)"):
        provision_aws.apply(tmp_path, {}, [], ["-auto-approve"], TARGET, extra=["availability_zone=us-east-1a"])
    assert len(applies(aws)) == 1


def test_hosts_applied_before_never_move_to_another_zone(fake: Any, tmp_path: Path) -> None:
    aws = fake(["us-east-1a"])  # a slot added to a running cluster finds no capacity
    running = {"hosts": [{"instance_id": "i-0", "task_type": "worker", "task_index": 0}]}
    with pytest.raises(ProvisionError, match="the zone is pinned \\(hosts applied before"):
        provision_aws.apply(tmp_path, {}, [], ["-auto-approve"], TARGET, before=running)
    assert len(applies(aws)) == 1  # no -replace of the subnet: that would replace the running hosts


def test_a_failure_after_every_slot_launched_is_no_partial_launch(fake: Any, tmp_path: Path) -> None:
    aws = fake(ZONES, launch_before_failing=2)  # both slots in the state, the error names no missing one
    with pytest.raises(ProvisionError) as caught:
        provision_aws.apply(tmp_path, {}, [], ["-auto-approve"], TARGET)
    assert "not every slot launched" not in str(caught.value)
    assert len(applies(aws)) == 3


def test_another_error_is_explained_once_without_a_retry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def run(args: Sequence[str], *a: Any, **k: Any) -> Any:
        import subprocess

        calls.append(list(args))
        if args[0] == "apply":
            raise ProvisionError("failed", "Error: VcpuLimitExceeded: You have requested more vCPU capacity")
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(provision_aws, "run_terraform", run)
    monkeypatch.setattr("tfcluster.provision.common.run_terraform", run)
    monkeypatch.setattr(provision_aws, "outputs", lambda tf_dir, env: {})
    (tmp_path / "variables.tf").write_text("")
    with pytest.raises(ProvisionError, match="VcpuLimitExceeded: the cluster needs more vCPUs"):
        provision_aws.apply(tmp_path, {}, [], [], TARGET)
    assert [c[0] for c in calls].count("apply") == 1
