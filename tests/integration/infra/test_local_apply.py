"""Real `terraform apply` of infra/local against the emulated AWS endpoint (moto on loopback), read back through
boto3, fed to the inventory script, destroyed; and bad input that fails at plan and creates nothing.

Runs the project's real entry points (`python -m tfcluster.provision`, `inventory/slots.py`) as subprocesses."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port
from tfcluster import kinds
from tfcluster.core.contract import TAG_KEYS
from tfcluster.provision import localaws

# Its own copy of infra/ (infra_copy), its own emulated endpoint and cluster name: beside any other test.
pytestmark = [pytest.mark.integration, pytest.mark.slow]
EXPIRES = "2030-01-31T18:00:00Z"


@pytest.fixture
def local_env(tmp_path: Path, tf_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A private endpoint (own state dir and port) and a unique cluster name; the endpoint is stopped afterwards."""
    env = dict(tf_env) | {
        "TFCLUSTER_LOCALAWS_DIR": str(tmp_path / "localaws"),
        "TFCLUSTER_LOCALAWS_PORT": str(free_port()),
        "TFCLUSTER_CLUSTER": f"tfc-it-{uuid.uuid4().hex[:8]}",
        "TFCLUSTER_BASE_PORT": "23100",
        "TFCLUSTER_STRATEGY": "auto",
    }
    env.pop("TFCLUSTER_TF_DIR", None)
    yield env
    localaws.stop(Path(env["TFCLUSTER_LOCALAWS_DIR"]))


def provision(repo: Path, env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfcluster.provision", *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _client(env: dict[str, str]) -> Any:
    endpoint = localaws.running(Path(env["TFCLUSTER_LOCALAWS_DIR"]))
    assert endpoint is not None, "the emulated endpoint should be running"
    return localaws.ec2_client(endpoint.url)


def _plain(value: Any) -> Any:
    """A host var as the inventory script prints it: strings it marks unsafe come wrapped in __ansible_unsafe."""
    return value["__ansible_unsafe"] if isinstance(value, dict) and "__ansible_unsafe" in value else value


def _tagged(client: Any, call: str, key: str, cluster: str) -> list[dict[str, Any]]:
    return getattr(client, call)(Filters=[{"Name": f"tag:{TAG_KEYS['cluster']}", "Values": [cluster]}])[key]


def test_apply_read_back_inventory_destroy(repo: Path, infra_copy: Path, local_env: dict[str, str]) -> None:
    tf_dir = infra_copy / "local"
    cluster = local_env["TFCLUSTER_CLUSTER"]

    started = time.monotonic()
    applied = provision(repo, local_env, "apply", "--backend", "local", "--tf-dir", str(tf_dir),
                        "--var", 'slots={"chief": 1, "worker": 2}', "--var", f"expires_at={EXPIRES}",
                        "--var", "autostop_down=terminate")
    apply_s = time.monotonic() - started
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]

    out = provision(repo, local_env, "output", "--backend", "local", "--tf-dir", str(tf_dir))
    outputs = {k: v["value"] for k, v in json.loads(out.stdout).items()}
    hosts = outputs["hosts"]
    assert [h["name"] for h in hosts] == ["chief-0", "worker-0", "worker-1"]
    assert [h["port"] for h in hosts] == [23100, 23101, 23102]
    assert {(h["private_ip"], h["public_ip"], h["connection"]) for h in hosts} == {("127.0.0.1", "127.0.0.1", "local")}
    assert outputs["cluster_name"] == cluster and outputs["tf_port"] == 23100
    # Terraform leaves null outputs out of `output -json`: an absent bastion or checkpoint_s3 means null.
    assert (outputs["connect"], outputs["region"], outputs["autostop_down"]) == ("public", "us-east-1", "terminate")
    assert (outputs["expires_at"], "bastion" in outputs, "checkpoint_s3" in outputs) == (EXPIRES, False, False)
    # moto's real offering data: g5.xlarge is offered in us-east-1a, b, c, d and f, not e; the first is chosen.
    assert outputs["availability_zone"] == "us-east-1a"

    # Read back through boto3: one live instance per slot, slot tags, IMDSv2, encrypted gp3 root.
    client = _client(local_env)
    live = localaws.live_instances(client, cluster)
    assert len(live) == 3
    by_id = {i["InstanceId"]: i for i in live}
    for host in outputs["emulated_hosts"]:
        instance = by_id[host["instance_id"]]
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        assert tags[TAG_KEYS["cluster"]] == cluster
        assert tags[TAG_KEYS["task_type"]] == host["task_type"]
        assert tags[TAG_KEYS["task_index"]] == str(host["task_index"])
        assert (tags[TAG_KEYS["port"]], tags[TAG_KEYS["gpus"]], tags[TAG_KEYS["ssh_user"]]) == ("23100", "1", "ubuntu")
        assert tags[TAG_KEYS["expires"]] == EXPIRES
        shutdown = client.describe_instance_attribute(InstanceId=instance["InstanceId"],
                                                      Attribute="instanceInitiatedShutdownBehavior")
        assert shutdown["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        assert instance["Placement"]["AvailabilityZone"] == "us-east-1a"
        assert instance["MetadataOptions"]["HttpTokens"] == "required"
        assert instance["InstanceType"] == "g5.xlarge"
        root = next(m for m in instance["BlockDeviceMappings"] if m["DeviceName"] == instance["RootDeviceName"])
        volume = client.describe_volumes(VolumeIds=[root["Ebs"]["VolumeId"]])["Volumes"][0]
        assert volume["Encrypted"] is True and volume["VolumeType"] == "gp3"
    groups = [g for g in _tagged(client, "describe_security_groups", "SecurityGroups", cluster)
              if g["GroupName"] != "default"]  # the VPC's default group is tagged too, and left empty
    assert len(groups) == 1
    ingress = {(p["FromPort"], p["ToPort"]): p for p in groups[0]["IpPermissions"]}
    assert [r["CidrIp"] for r in ingress[(22, 22)]["IpRanges"]] == ["127.0.0.0/8"]
    assert [g["GroupId"] for g in ingress[(23100, 23100)]["UserIdGroupPairs"]] == [groups[0]["GroupId"]]
    assert ingress[(23100, 23100)]["IpRanges"] == []
    # g5.xlarge has a GPU: NCCL's all-TCP rule between members, and only between members.
    assert [g["GroupId"] for g in ingress[(0, 65535)]["UserIdGroupPairs"]] == [groups[0]["GroupId"]]
    assert ingress[(0, 65535)]["IpRanges"] == [] and ingress[(0, 65535)]["IpProtocol"] == "tcp"

    # The inventory's terraform source reads the result.
    inv_env = local_env | {"TFCLUSTER_SOURCE": "terraform", "TFCLUSTER_TF_DIR": str(tf_dir)}
    listed = subprocess.run([sys.executable, str(repo / "inventory" / "slots.py"), "--list"], cwd=repo,
                            env=inv_env, capture_output=True, text=True, timeout=120, check=False)
    assert listed.returncode == 0, listed.stderr
    inventory = json.loads(listed.stdout)
    assert inventory["chief"]["hosts"] == ["chief-0"]
    assert inventory["worker"]["hosts"] == ["worker-0", "worker-1"]
    hostvars = inventory["_meta"]["hostvars"]
    assert _plain(hostvars["worker-1"]["tfcluster_address"]) == "127.0.0.1:23102"
    assert _plain(hostvars["worker-1"]["ansible_connection"]) == "local"
    assert _plain(inventory["tfcluster"]["vars"]["tfcluster_cluster_name"]) == cluster
    tf_config = subprocess.run([sys.executable, str(repo / "inventory" / "slots.py"), "--tf-config", "worker-1"],
                               cwd=repo, env=inv_env, capture_output=True, text=True, timeout=120, check=False)
    assert tf_config.returncode == 0, tf_config.stderr
    assert json.loads(tf_config.stdout)["task"] == {"type": "worker", "index": 1}

    # Destroy, keeping the endpoint to look: nothing of the cluster is left.
    started = time.monotonic()
    destroyed = provision(repo, local_env, "destroy", "--backend", "local", "--tf-dir", str(tf_dir),
                          "--keep-endpoint", "--var", 'slots={"chief": 1, "worker": 2}')
    destroy_s = time.monotonic() - started
    assert destroyed.returncode == 0, destroyed.stdout[-3000:] + destroyed.stderr[-3000:]
    assert f"0 instances tagged {TAG_KEYS['cluster']}={cluster} remain" in destroyed.stderr
    assert localaws.live_instances(client, cluster) == []
    assert _tagged(client, "describe_vpcs", "Vpcs", cluster) == []
    assert _tagged(client, "describe_security_groups", "SecurityGroups", cluster) == []

    # A second destroy (nothing in state) stops the endpoint it started.
    record = localaws.read_state(Path(local_env["TFCLUSTER_LOCALAWS_DIR"]))
    assert record is not None
    again = provision(repo, local_env, "destroy", "--backend", "local", "--tf-dir", str(tf_dir))
    assert again.returncode == 0, again.stderr
    assert localaws.running(Path(local_env["TFCLUSTER_LOCALAWS_DIR"])) is None
    assert not localaws.pid_alive(record.pid)
    print(f"apply {apply_s:.1f} s, destroy {destroy_s:.1f} s against the local endpoint")


@pytest.mark.parametrize(("var", "message"), [
    ("instance_type=m5.large", "instance_type is not a GPU instance family. Fix: use a GPU type"),
    ('slots={"ps": 1, "worker": 2}', "slots with ps (parameter-server training) also needs exactly one chief"),
])
def test_invalid_variable_fails_at_plan_and_creates_nothing(repo: Path, infra_copy: Path, local_env: dict[str, str],
                                                            var: str, message: str) -> None:
    tf_dir = infra_copy / "local"
    result = provision(repo, local_env, "apply", "--backend", "local", "--tf-dir", str(tf_dir), "--var", var)
    assert result.returncode == 1
    output = " ".join((result.stdout + result.stderr).split())  # terraform wraps long messages
    assert "Invalid value for variable" in output
    assert message in output
    client = _client(local_env)
    assert client.describe_instances()["Reservations"] == []
    assert _tagged(client, "describe_vpcs", "Vpcs", local_env["TFCLUSTER_CLUSTER"]) == []
    state_file = tf_dir / "terraform.tfstate"
    state = json.loads(state_file.read_text()) if state_file.is_file() else {}
    assert [r for r in state.get("resources", []) if r["mode"] == "managed"] == []


def test_plan_prints_hosts_and_tf_config_and_leaves_nothing_running(repo: Path, infra_copy: Path,
                                                                    local_env: dict[str, str]) -> None:
    """`make plan CLUSTER=local`: Terraform's plan, then each planned host's TF_CONFIG from the inventory's code."""
    env = local_env | {"TFCLUSTER_WORKERS": "2", "TFCLUSTER_STRATEGY": "parameter_server"}
    ran: list[subprocess.CompletedProcess[str]] = []

    def run(argv: list[str], env: dict[str, str]) -> int:
        ran.append(subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=240, check=False))
        return ran[-1].returncode

    target = kinds.Target(kind="local", name=env["TFCLUSTER_CLUSTER"], strategy="parameter_server", workers=2,
                          tf_dir=infra_copy / "local")
    code, lines = kinds.get("local").plan_lines(target, env, run)
    assert code == 0, ran[-1].stdout[-3000:] + ran[-1].stderr[-3000:]
    assert re.search(r"Plan: \d+ to add, 0 to change, 0 to destroy", ran[-1].stdout)  # terraform's own plan
    assert any(line.startswith("chief-0        chief:0        127.0.0.1:23100          0") for line in lines)
    tf_config = next(line for line in lines if line.startswith("  worker-1 TF_CONFIG="))
    assert json.loads(shlex.split(tf_config.split("=", 1)[1])[0]) == {
        "cluster": {"chief": ["127.0.0.1:23100"], "ps": ["127.0.0.1:23101"],
                    "worker": ["127.0.0.1:23102", "127.0.0.1:23103"]},
        "task": {"type": "worker", "index": 1}}
    assert localaws.read_state(Path(env["TFCLUSTER_LOCALAWS_DIR"])) is None  # the endpoint it started is stopped
