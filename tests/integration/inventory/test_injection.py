"""Inputs are data, never code (issue 14), proven with real ansible-playbook runs: Jinja that would run a command on
the control machine is put into every field of a host file, EC2 tags (moto) and Terraform outputs (a real state read
by the real terraform). Refused fields stop the run with `FIELD: MESSAGE. Fix: FIX`; the ones still accepted reach
Ansible as data (marked unsafe) or not at all; the marker file the command would create never appears. A control run
with an ordinary YAML inventory shows that the same play does run such a command when a value is trusted."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.inventory.inventory_itest import ansible, ansible_env, hcl_type, script_problems, terraform_state

pytestmark = pytest.mark.integration

PLAY = """\
- hosts: tfcluster
  gather_facts: false
  tasks:
    - name: every variable of the host, templated as a task would use it, and the ssh options
      ansible.builtin.debug:
        msg: "{{ {'vars': hostvars[inventory_hostname], 'ssh_args': ansible_ssh_common_args | default('')} }}"
"""
ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIJfrOlzBMaKL3RDX01RAAlUVXOY/uoJhb4aXt4eymqv"
USER = "use a POSIX user name: lowercase letters, digits, '_' or '-', e.g. ubuntu"


@pytest.fixture
def marker(tmp_path: Path) -> tuple[Path, str]:
    """The file a successful injection creates, and the Jinja that would create it."""
    path = tmp_path / "MARKER"
    return path, f"{{{{ lookup('pipe', 'touch {path}') }}}}"


def _play(tmp_path: Path, env: dict[str, str], **kw: Any) -> Any:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    return ansible("ansible-playbook", ansible_env({"ANSIBLE_CALLBACK_RESULT_FORMAT": "json", **env}, tmp_path),
                   str(play), **kw)


def _message(stdout: str, host: str) -> Any:
    """The debug task's msg for ``host`` (the default callback prints `ok: [HOST] => {json}`)."""
    start = stdout.index(f"ok: [{host}] => ") + len(f"ok: [{host}] => ")
    return json.JSONDecoder().raw_decode(stdout[start:])[0]["msg"]


def test_control_a_trusted_value_does_run(tmp_path: Path, marker: tuple[Path, str]) -> None:
    """Without the inventory's checks and marks, the play below runs the injected command: the test can fail."""
    path, jinja = marker
    inventory = tmp_path / "plain.yml"
    inventory.write_text(yaml.safe_dump({"tfcluster": {"hosts": {"worker-0": {
        "ansible_host": "10.0.0.1", "ansible_user": jinja}}}}))
    result = _play(tmp_path, {}, inventory=inventory)
    assert result.returncode == 0, result.stderr
    assert path.exists()


def test_host_file_refused_fields(tmp_path: Path, marker: tuple[Path, str]) -> None:
    path, jinja = marker
    q = repr(jinja)
    host_fields = ["name", "address", "tf_address", "task_type", "task_index", "port", "ssh_port", "gpus",
                   "ssh_user"]
    hosts = [{"address": f"10.0.0.{i + 1}", field: jinja} for i, field in enumerate(host_fields)]
    hosts.append({"address": "10.0.1.1", "host_keys": [f"ssh-ed25519 {jinja}"]})
    data = {"cluster_name": jinja, "bastion": {"address": "jump.lab", "user": jinja, "port": jinja}, "hosts": hosts}
    hosts_file = tmp_path / "hosts.yml"
    hosts_file.write_text(yaml.safe_dump(data))
    result = _play(tmp_path, {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(hosts_file)})
    assert result.returncode != 0
    problems = script_problems(result.stderr)
    assert sorted(problems) == sorted([
        f"hosts.yml.cluster_name: {q} is not a valid cluster name. Fix: use 3-32 lowercase letters, digits or '-', "
        "starting with a letter (it names AWS resources)",
        f"hosts.yml.bastion.user: {q} is not a valid user name. Fix: {USER}",
        f"hosts.yml.bastion.port: port {q} is not a whole number in 1..65535. Fix: give the jump host's SSH port in "
        "1..65535, or leave it out for 22",
        f"hosts[0] (10.0.0.1).name: {q} is not a valid host name. Fix: use 1-64 letters, digits, '_', '.' or '-', "
        "starting and ending with a letter or digit",
        f"hosts[1].address: address {q} is not an IP address or DNS name. Fix: give the host an address (IP or DNS "
        "name) that Ansible can reach",
        f"hosts[2] (10.0.0.3).tf_address: tf_address {q} is not an IP address or DNS name. Fix: give the address "
        "peers use for training, or leave it out to use address",
        f"hosts[3] (10.0.0.4).task_type: task_type {q} is not a task type. Fix: use one of chief, worker, ps, "
        "evaluator",
        f"hosts[4] (10.0.0.5).task_index: task_index {q} is not a whole number >= 0. Fix: give the host's index "
        "within its task type, counting from 0",
        f"hosts[5] (10.0.0.6).port: port {q} is not a whole number in 1..65535. Fix: give the training port, a whole "
        "number in 1..65535",
        f"hosts[6] (10.0.0.7).ssh_port: ssh_port {q} is not a whole number in 1..65535. Fix: give the SSH port in "
        "1..65535 or leave it out",
        f"hosts[7] (10.0.0.8).gpus: gpus {q} is not a whole number >= 0. Fix: give the host's GPU count (0 for none)",
        f"hosts[8] (10.0.0.9).ssh_user: {q} is not a valid user name. Fix: {USER}",
        "hosts[9] (10.0.1.1).host_keys[0]: the ssh-ed25519 key is not valid base64. Fix: give each key as `TYPE "
        "BASE64` from the host's /etc/ssh/ssh_host_*_key.pub, e.g. \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA...\"",
    ]), result.stderr
    assert not path.exists()


def test_accepted_strings_stay_data(tmp_path: Path, marker: tuple[Path, str]) -> None:
    """A host key's comment is accepted and dropped; a known_hosts path may hold any of '{', '}', quotes and spaces:
    it reaches ssh as written, marked unsafe, never templated."""
    path, jinja = marker
    known = tmp_path / jinja / "known_hosts"
    known.parent.mkdir(parents=True)
    known.write_text(f"10.0.0.1 {ED}\n")
    hosts_file = tmp_path / "hosts.yml"
    hosts_file.write_text(yaml.safe_dump({"bastion": {"address": "jump.lab", "user": "ops"},
                                          "hosts": [{"address": "10.0.0.1", "host_keys": [f"{ED} {jinja}"]}]}))
    env = {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(hosts_file), "TFCLUSTER_KNOWN_HOSTS": str(known)}
    result = _play(tmp_path, env)
    assert result.returncode == 0, result.stderr
    shown = _message(result.stdout, "worker-0")
    assert shown["vars"]["ansible_host"] == "10.0.0.1" and shown["vars"]["tfcluster_chief"] == "worker-0"
    args = shlex.split(shown["ssh_args"])  # as Ansible's ssh plugin splits it
    assert args[:4] == ["-o", f'UserKnownHostsFile="{known}"', "-o", "StrictHostKeyChecking=yes"]
    assert args[4] == "-o" and args[5].startswith("ProxyCommand=ssh ") and args[5].endswith(" -p 22 ops@jump.lab")
    assert not path.exists()


def test_ec2_tags(tmp_path: Path, marker: tuple[Path, str], endpoint: str) -> None:
    boto3 = pytest.importorskip("boto3")
    path, jinja = marker
    q = repr(jinja)
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint, aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    image = ec2.describe_images()["Images"][0]["ImageId"]
    labels = {}
    for index, tag in enumerate(("task_type", "task_index", "port", "gpus", "ssh_user")):
        tags = {"tfcluster:cluster": "inject", "tfcluster:task_type": "worker", "tfcluster:task_index": str(index),
                f"tfcluster:{tag}": jinja}
        out = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="t3.micro", TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}])["Instances"][0]
        labels[tag] = f"{out['InstanceId']} ({out['PrivateIpAddress']})"
    env = {"TFCLUSTER_SOURCE": "aws", "TFCLUSTER_CLUSTER": "inject", "AWS_ENDPOINT_URL": endpoint,
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    result = _play(tmp_path, env)
    assert result.returncode != 0
    assert sorted(script_problems(result.stderr)) == sorted([
        f"{labels['task_type']}.task_type: task_type {q} is not a task type. Fix: use one of chief, worker, ps, "
        "evaluator",
        f"{labels['task_index']}.task_index: task_index {q} is not a whole number >= 0. Fix: give the host's index "
        "within its task type, counting from 0",
        f"{labels['port']}.port: port {q} is not a whole number in 1..65535. Fix: give the training port, a whole "
        "number in 1..65535",
        f"{labels['gpus']}.gpus: gpus {q} is not a whole number >= 0. Fix: give the host's GPU count (0 for none)",
        f"{labels['ssh_user']}.ssh_user: {q} is not a valid user name. Fix: {USER}",
    ]), result.stderr
    assert not path.exists()


def test_terraform_outputs(tmp_path: Path, marker: tuple[Path, str]) -> None:
    from tfcluster.inventory.model import InventoryError
    from tfcluster.inventory.sources.terraform import find_terraform

    try:
        find_terraform()
    except InventoryError:
        pytest.skip("no terraform executable (make setup provides one)")
    path, jinja = marker
    q = repr(jinja)
    hosts = [{"name": jinja, "task_type": "worker", "task_index": 0, "private_ip": "10.0.0.1"},
             {"name": "worker-1", "task_type": jinja, "task_index": 1, "private_ip": "10.0.0.2"},
             {"name": "worker-2", "task_type": "worker", "task_index": 2, "private_ip": jinja},
             {"name": "worker-3", "task_type": "worker", "task_index": 3, "private_ip": "10.0.0.4",
              "ssh_user": jinja, "instance_id": jinja, "instance_type": jinja}]
    outputs = {"hosts": hosts, "cluster_name": jinja, "connect": "bastion",
               "bastion": {"address": "jump.lab", "user": jinja, "port": 22}}
    state = terraform_state({k: {"value": v, "type": hcl_type(v)} for k, v in outputs.items()})
    (tmp_path / "terraform.tfstate").write_text(json.dumps(state))
    result = _play(tmp_path, {"TFCLUSTER_SOURCE": "terraform", "TFCLUSTER_TF_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert sorted(script_problems(result.stderr)) == sorted([
        f"terraform output bastion.user: {q} is not a valid user name. Fix: {USER}",
        f"terraform output cluster_name: {q} is not a valid cluster name. Fix: use 3-32 lowercase letters, digits or "
        "'-', starting with a letter (it names AWS resources)",
        f"hosts[0].name: {q} is not a valid host name. Fix: use 1-64 letters, digits, '_', '.' or '-', starting and "
        "ending with a letter or digit",
        f"hosts[1] (worker-1).task_type: task_type {q} is not a task type. Fix: use one of chief, worker, ps, "
        "evaluator",
        f"hosts[2] (worker-2).private_ip: private_ip {q} is not an IP address or DNS name. Fix: connect=bastion "
        "reaches hosts by their private IP: give every host one, or choose connect=public",
        f"hosts[3] (worker-3).ssh_user: {q} is not a valid user name. Fix: {USER}",
        f"hosts[3] (worker-3).instance_type: {q} is not an EC2 instance type. Fix: give a type like g5.xlarge, or "
        "leave it out",
    ]), result.stderr
    assert not path.exists()
