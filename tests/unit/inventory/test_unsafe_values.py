"""Inputs are data, never code (issue 14): Jinja in any field of a host file, an EC2 tag or a Terraform output is
refused where it enters, naming the field and the fix. (tests/integration/inventory/test_injection.py runs
the same inputs through ansible-playbook and shows nothing ran.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.inventory.inventory_helpers import FakeEC2, instance, runner_for
from tfcluster.core.contract import EXIT_BAD_INPUT
from tfcluster.inventory.cli import Injected

JINJA = "{{ lookup('pipe', 'touch MARKER') }}"
Q = repr(JINJA)
HOST = "use 1-64 letters, digits, '_', '.' or '-', starting and ending with a letter or digit"
USER = "use a POSIX user name: lowercase letters, digits, '_' or '-', e.g. ubuntu"
CLUSTER = "use 3-32 lowercase letters, digits or '-', starting with a letter (it names AWS resources)"
TYPES = "use one of chief, worker, ps, evaluator"
KEY = ("give each key as `TYPE BASE64` from the host's /etc/ssh/ssh_host_*_key.pub, e.g. "
       "\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA...\"")


def _problems(cli, env: dict[str, str], injected: Injected = Injected()) -> list[str]:  # noqa: B008
    code, out, err = cli(env, "--list", injected=injected)
    assert (code, out) == (EXIT_BAD_INPUT, ""), err
    return [line.removeprefix("  - ") for line in err.splitlines() if line.startswith("  - ")]


H = "hosts[0] (10.0.0.1)"
HOST_FILE_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("name", {"name": JINJA}, f"{H}.name: {Q} is not a valid host name. Fix: {HOST}"),
    ("address", {"address": JINJA}, f"hosts[0].address: address {Q} is not an IP address or DNS name. Fix: give the "
                                    "host an address (IP or DNS name) that Ansible can reach"),
    ("tf_address", {"tf_address": JINJA}, f"{H}.tf_address: tf_address {Q} is not an IP address or DNS name. Fix: "
                                          "give the address peers use for training, or leave it out to use address"),
    ("task_type", {"task_type": JINJA}, f"{H}.task_type: task_type {Q} is not a task type. Fix: {TYPES}"),
    ("task_index", {"task_index": JINJA}, f"{H}.task_index: task_index {Q} is not a whole number >= 0. Fix: give the "
                                          "host's index within its task type, counting from 0"),
    ("port", {"port": JINJA}, f"{H}.port: port {Q} is not a whole number in 1..65535. Fix: give the training port, "
                              "a whole number in 1..65535"),
    ("ssh_port", {"ssh_port": JINJA}, f"{H}.ssh_port: ssh_port {Q} is not a whole number in 1..65535. Fix: give the "
                                      "SSH port in 1..65535 or leave it out"),
    ("gpus", {"gpus": JINJA}, f"{H}.gpus: gpus {Q} is not a whole number >= 0. Fix: give the host's GPU count (0 for "
                              "none)"),
    ("ssh_user", {"ssh_user": JINJA}, f"{H}.ssh_user: {Q} is not a valid user name. Fix: {USER}"),
    ("host_keys", {"host_keys": [f"ssh-ed25519 {JINJA}"]},
     f"{H}.host_keys[0]: the ssh-ed25519 key is not valid base64. Fix: {KEY}"),
]
TOP_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("cluster_name", {"cluster_name": JINJA}, f"hosts.yml.cluster_name: {Q} is not a valid cluster name. Fix: "
                                              f"{CLUSTER}"),
    ("defaults.ssh_user", {"defaults": {"ssh_user": JINJA}},
     f"{H}.ssh_user: {Q} is not a valid user name. Fix: {USER}"),
    ("bastion.address", {"bastion": {"address": JINJA}},
     f"hosts.yml.bastion.address: address {Q} is not an IP address or DNS name. Fix: give the jump host's IP or DNS "
     "name"),
    ("bastion.user", {"bastion": {"address": "jump", "user": JINJA}}, f"hosts.yml.bastion.user: {Q} is not a valid "
                                                                      f"user name. Fix: {USER}"),
    ("bastion.port", {"bastion": {"address": "jump", "port": JINJA}},
     f"hosts.yml.bastion.port: port {Q} is not a whole number in 1..65535. Fix: give the jump host's SSH port in "
     "1..65535, or leave it out for 22"),
    ("bastion.host_keys", {"bastion": {"address": "jump", "host_keys": [JINJA]}},
     f"hosts.yml.bastion.host_keys[0]: {Q} is not a public host key. Fix: {KEY}"),
]


@pytest.mark.parametrize(("field", "host", "expected"), HOST_FILE_CASES, ids=[c[0] for c in HOST_FILE_CASES])
def test_host_file_host_fields(cli, tmp_path: Path, field: str, host: dict[str, Any], expected: str) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"hosts": [{"address": "10.0.0.1", **host}]}))
    assert _problems(cli, {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}) == [expected]


@pytest.mark.parametrize(("field", "top", "expected"), TOP_CASES, ids=[c[0] for c in TOP_CASES])
def test_host_file_top_fields(cli, tmp_path: Path, field: str, top: dict[str, Any], expected: str) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"hosts": [{"address": "10.0.0.1"}], **top}))
    assert _problems(cli, {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}) == [expected]


EC2 = "i-a (10.0.0.1)"
TAG_CASES: list[tuple[str, str]] = [
    ("task_type", f"{EC2}.task_type: task_type {Q} is not a task type. Fix: {TYPES}"),
    ("task_index", f"{EC2}.task_index: task_index {Q} is not a whole number >= 0. Fix: give the host's index within "
                   "its task type, counting from 0"),
    ("port", f"{EC2}.port: port {Q} is not a whole number in 1..65535. Fix: give the training port, a whole number in "
             "1..65535"),
    ("gpus", f"{EC2}.gpus: gpus {Q} is not a whole number >= 0. Fix: give the host's GPU count (0 for none)"),
    ("ssh_user", f"{EC2}.ssh_user: {Q} is not a valid user name. Fix: {USER}"),
]


@pytest.mark.parametrize(("tag", "expected"), TAG_CASES, ids=[c[0] for c in TAG_CASES])
def test_ec2_tags(cli, tag: str, expected: str) -> None:
    tags = {"task_type": "worker", "task_index": "0", tag: JINJA}
    found = instance("i-a", "10.0.0.1", tags.pop("task_type"), tags.pop("task_index"), **tags)
    env = {"TFCLUSTER_SOURCE": "aws", "TFCLUSTER_CLUSTER": "cx1"}
    assert _problems(cli, env, Injected(ec2_client=FakeEC2([found]))) == [expected]


T = "hosts[0] (worker-0)"
OUTPUT_CASES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [  # (id, host entry fields, outputs, problem)
    ("name", {"name": JINJA}, {}, f"hosts[0].name: {Q} is not a valid host name. Fix: {HOST}"),
    ("private_ip", {"private_ip": JINJA}, {}, f"{T}.private_ip: private_ip {Q} is not an IP address or DNS name. "
                                              "Fix: give the instance a public IP (or a private one)"),
    ("private_ip beside a public IP", {"private_ip": JINJA, "public_ip": "54.0.0.1"}, {},
     f"{T}.private_ip: private_ip {Q} is not an IP address or DNS name. Fix: give the instance a private_ip that is "
     "an IP address (peers train over it)"),
    ("public_ip", {"public_ip": JINJA}, {}, f"{T}.public_ip: public_ip {Q} is not an IP address or DNS name. "
                                            "Fix: give the instance a public IP (or a private one)"),
    ("task_type", {"task_type": JINJA}, {}, f"{T}.task_type: task_type {Q} is not a task type. Fix: {TYPES}"),
    ("ssh_user", {"ssh_user": JINJA}, {}, f"{T}.ssh_user: {Q} is not a valid user name. Fix: {USER}"),
    ("connection", {"connection": JINJA}, {}, f"{T}.connection: connection {Q} is not supported. Fix: use one of ssh, "
                                              "local"),
    ("port", {"port": JINJA}, {}, f"{T}.port: port {Q} is not a whole number in 1..65535. Fix: give the training "
                                  "port, a whole number in 1..65535"),
    ("instance_type", {"instance_type": JINJA}, {}, f"{T}.instance_type: {Q} is not an EC2 instance type. Fix: give a "
                                                    "type like g5.xlarge, or leave it out"),
    ("output ssh_user", {}, {"ssh_user": JINJA}, f"{T}.ssh_user: {Q} is not a valid user name. Fix: {USER}"),
    ("output cluster_name", {}, {"cluster_name": JINJA}, f"terraform output cluster_name: {Q} is not a valid cluster "
                                                         f"name. Fix: {CLUSTER}"),
    ("output connect", {}, {"connect": JINJA}, f"terraform output connect: unknown connect mode {Q}. Fix: use one of "
                                               "public, private, bastion"),
    ("output bastion.user", {}, {"connect": "bastion", "bastion": {"address": "jump", "user": JINJA, "port": 22}},
     f"terraform output bastion.user: {Q} is not a valid user name. Fix: {USER}"),
]


@pytest.mark.parametrize("case", OUTPUT_CASES, ids=[c[0] for c in OUTPUT_CASES])
def test_terraform_outputs(cli, tmp_path: Path, case: tuple[str, dict[str, Any], dict[str, Any], str]) -> None:
    _, host, outputs, expected = case
    entry = {"name": "worker-0", "task_type": "worker", "task_index": 0, "private_ip": "10.0.0.1",
             "instance_id": JINJA, "instance_type": "g5.xlarge", **host}  # the instance id is never passed on
    wrapped = {k: {"value": v} for k, v in {"hosts": [entry], **outputs}.items()}
    env = {"TFCLUSTER_SOURCE": "terraform", "TFCLUSTER_TF_DIR": str(tmp_path)}
    assert _problems(cli, env, Injected(terraform_runner=runner_for(wrapped))) == [expected]


ESCAPES = ["a/b", "a..b", "a b", "a\tb", "a'b", 'a"b', "a;b", "a{b", "a$b", "a%b", "a\nb"]


@pytest.mark.parametrize("bad", ESCAPES)
def test_names_that_could_escape_a_path_or_a_shell(cli, tmp_path: Path, bad: str) -> None:
    """Host names, cluster names and users with '/', '..', whitespace, quotes, ';', '{', '$' or '%' are refused."""
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"cluster_name": f"c{bad}x", "bastion": {"address": "jump", "user": f"u{bad}"},
                                    "hosts": [{"address": "10.0.0.1", "name": f"h{bad}", "ssh_user": f"u{bad}"}]}))
    assert _problems(cli, {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}) == [
        f"hosts.yml.cluster_name: {f'c{bad}x'!r} is not a valid cluster name. Fix: {CLUSTER}",
        f"hosts.yml.bastion.user: {f'u{bad}'!r} is not a valid user name. Fix: {USER}",
        f"{H}.ssh_user: {f'u{bad}'!r} is not a valid user name. Fix: {USER}",
        f"{H}.name: {f'h{bad}'!r} is not a valid host name. Fix: {HOST}",
    ]
