"""`make start` on CLUSTER=aws (tfcluster/provision/aws.py start, known_hosts.carried_keys, issue 22): the state's
stopped instances are started (moto), the addresses refreshed through Terraform (faked: the runner), and the keys
the cluster's known_hosts trusted are re-keyed to the new addresses by instance id; a host that has none gets advice
that can work (cloud-init prints the keys on the first boot only: never "run it again in a minute")."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tfcluster.core.contract import TAG_KEYS
from tfcluster.provision import aws as provision_aws
from tfcluster.provision import known_hosts
from tfcluster.provision.common import ProvisionError

ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIJfrOlzBMaKL3RDX01RAAlUVXOY/uoJhb4aXt4eymqv"
ED2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPnQ0xk8QfN0W8mY3hE2cW1YQ5qzVx2l8bZ0n6Y1r9Qz"
BASTION = "[203.0.113.9]:2222 " + ED2


def test_read_and_carry_keys_by_instance_id(tmp_path: Path) -> None:
    path = tmp_path / "known"
    known_hosts.write(path, {"198.51.100.1": [ED], "198.51.100.2": [ED2], "203.0.113.9": [BASTION]})
    known = known_hosts.read(path)
    assert known == {"198.51.100.1": [ED], "198.51.100.2": [ED2], "203.0.113.9": [BASTION]}
    before = {"198.51.100.1": "i-a", "198.51.100.2": "i-b"}
    after = {"192.0.2.7": "i-a", "192.0.2.8": "i-c", "198.51.100.2": "i-d"}  # i-b replaced (i-d) at its address
    assert known_hosts.carried_keys(known, before, after) == {"192.0.2.7": [ED]}


def test_read_refuses_a_line_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "known").write_text("198.51.100.1 ssh-ed25519\n")
    with pytest.raises(known_hosts.KnownHostsError, match="known:1 is not a `PATTERN TYPE BASE64` line"):
        known_hosts.read(tmp_path / "known")
    assert known_hosts.read(tmp_path / "absent") == {}


T0 = datetime(2027, 1, 15, 8, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(("launch", "attach", "was"), [
    (T0, T0, False),                          # launched, never stopped
    (T0 + timedelta(days=1), T0, True),       # started again a day later (LaunchTime moves, AttachTime stays)
    (T0 + timedelta(seconds=60), T0, False),  # within the launch
])
def test_a_restarted_instance_is_told_from_its_root_volume(launch: datetime, attach: datetime, was: bool) -> None:
    instance = {"LaunchTime": launch, "BlockDeviceMappings": [{"Ebs": {"AttachTime": attach}}]}
    assert provision_aws.restarted(instance) is was


def test_missing_keys_advice_never_says_run_it_again_for_a_restarted_instance() -> None:
    restarted = provision_aws.missing_keys_text([("i-a", "192.0.2.7", True)], 600)
    assert "`make start`" in restarted and "accept-new" in restarted
    assert "again" not in restarted and "in a minute" not in restarted
    fresh = provision_aws.missing_keys_text([("i-b", "192.0.2.8", False)], 600)
    assert "after 600 s" in fresh and "get-console-output --instance-id" in fresh
    assert "TFCLUSTER_HOST_KEY_TIMEOUT" in fresh


# ---- start, end to end over moto --------------------------------------------------------------------------------
@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "x")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


def launch(ec2: Any, slots: Sequence[tuple[str, int]]) -> list[str]:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ids = []
    for task_type, index in slots:
        tags = [{"Key": TAG_KEYS["cluster"], "Value": "tfcluster-aws"}, {"Key": TAG_KEYS["task_type"],
                                                                         "Value": task_type},
                {"Key": TAG_KEYS["task_index"], "Value": str(index)}]
        reply = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
                                  TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
        ids.append(reply["Instances"][0]["InstanceId"])
    return ids


def hosts(ids: Sequence[str], addresses: Sequence[str]) -> list[dict[str, Any]]:
    return [{"name": f"worker-{i}", "task_type": "worker", "task_index": i, "instance_id": iid, "public_ip": address,
             "private_ip": f"10.42.0.{10 + i}"} for i, (iid, address) in enumerate(zip(ids, addresses, strict=True))]


class Root:
    """Terraform's side of `make start`: the outputs before and after the refresh, and the commands it was given."""

    def __init__(self, ids: Sequence[str], before: Sequence[str], after: Sequence[str]) -> None:
        common = {"cluster_name": "tfcluster-aws", "region": "us-east-1", "connect": "public",
                  "expires_at": "2027-01-16T08:00:00Z", "autostop_down": "stop",
                  "autostop": {"settings": {"enabled": True, "idle_minutes": 30}}}
        self.before = {**common, "hosts": hosts(ids, before)}
        self.after = {**common, "hosts": hosts(ids, after)}
        self.calls: list[list[str]] = []

    def outputs(self, tf_dir: Path, env: Any) -> dict[str, Any]:
        return self.after if any(c[:2] == ["apply", "-refresh-only"] for c in self.calls) else self.before

    def run(self, args: Sequence[str], *a: Any, **k: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(args))
        return subprocess.CompletedProcess(list(args), 0, "", "")


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    def make(ids: Sequence[str], before: Sequence[str], after: Sequence[str]) -> Root:
        tf = Root(ids, before, after)
        monkeypatch.setattr(provision_aws, "outputs", tf.outputs)
        monkeypatch.setattr(provision_aws, "run_terraform", tf.run)
        return tf
    monkeypatch.setattr(known_hosts, "ROOT", tmp_path)
    (tmp_path / "tf").mkdir()
    (tmp_path / "tf/variables.tf").write_text("".join(f'variable "{v}" {{\n  default = null\n}}\n'
                                                      for v in ("expires_at", "autostop_down",
                                                                "autostop_idle_minutes")))
    return make


def test_start_starts_the_stopped_instances_and_keeps_their_keys_at_the_new_addresses(
        ec2: Any, root: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = launch(ec2, [("worker", 0), ("worker", 1)])
    ec2.stop_instances(InstanceIds=ids)
    tf = root(ids, ["198.51.100.1", "198.51.100.2"], ["192.0.2.7", "192.0.2.8"])
    known_hosts.write(known_hosts.path_for("tfcluster-aws"), {"198.51.100.1": [ED], "198.51.100.2": [ED2]})
    monkeypatch.setattr(provision_aws, "ec2_client", lambda target: ec2)
    lines = provision_aws.start(tmp_path / "tf", {}, ec2, interval=0.05)
    states = {i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances(InstanceIds=ids)["Reservations"]
              for i in r["Instances"]}
    assert set(states.values()) == {"running"}
    refresh = next(c for c in tf.calls if c[0] == "apply")
    assert refresh[:4] == ["apply", "-refresh-only", "-auto-approve", "-input=false"]
    assert "expires_at=2027-01-16T08:00:00Z" in refresh  # the applied expiry, not a new one (or none)
    text = known_hosts.path_for("tfcluster-aws").read_text()
    assert text == f"192.0.2.7 {ED}\n192.0.2.8 {ED2}\n"  # the same keys, re-keyed by instance id
    assert f"started 2 instance(s): {' '.join(sorted(ids))}" in lines[0]


def test_start_of_a_host_without_a_trusted_key_says_why_and_what_to_do(
        ec2: Any, root: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = launch(ec2, [("worker", 0)])
    ec2.stop_instances(InstanceIds=ids)
    root(ids, ["198.51.100.1"], ["192.0.2.7"])  # no known_hosts at all (another checkout provisioned it)
    monkeypatch.setattr(provision_aws, "ec2_client", lambda target: ec2)
    monkeypatch.setattr(provision_aws, "_restarted_ids", lambda client, wanted: set(wanted))
    with pytest.raises(ProvisionError) as caught:
        provision_aws.start(tmp_path / "tf", {}, ec2, interval=0.05)
    assert "it was stopped and started since its launch" in str(caught.value)
    assert "in a minute" not in str(caught.value)


def test_start_without_an_applied_cluster_says_to_provision(root: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provision_aws, "outputs", lambda tf_dir, env: {})
    with pytest.raises(ProvisionError, match="Fix: `make provision` creates one"):
        provision_aws.start(tmp_path / "tf", {}, object())
