"""Ports and reachability: the default training port of each source, the connect modes, the bastion, the exact
ssh options Ansible gets, and what ssh itself makes of them."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.inventory.inventory_helpers import FakeEC2, instance, runner_for
from tfcluster.core.contract import EXIT_BAD_INPUT, LOCAL_BASE_PORT, TF_PORT
from tfcluster.inventory.access import SshTrust, jump_command, ssh_args
from tfcluster.inventory.build import unmarked
from tfcluster.inventory.cli import Injected
from tfcluster.inventory.model import Access, Bastion


def _list(cli, env: dict[str, str], injected: Injected = Injected()) -> dict[str, Any]:  # noqa: B008
    code, out, err = cli(env, "--list", injected=injected)
    assert code == 0, err
    return unmarked(json.loads(out))


def _problems(cli, env: dict[str, str], injected: Injected = Injected()) -> list[str]:  # noqa: B008
    code, out, err = cli(env, "--list", injected=injected)
    assert (code, out) == (EXIT_BAD_INPUT, "")
    return [line.removeprefix("  - ") for line in err.splitlines() if line.startswith("  - ")]


def _ports(inv: dict[str, Any]) -> dict[str, int]:
    return {name: hv["tfcluster_port"] for name, hv in inv["_meta"]["hostvars"].items()}


def _static_env(tmp_path: Path, data: object) -> dict[str, str]:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}


def _tf_env(tmp_path: Path, outputs: dict[str, Any]) -> tuple[dict[str, str], Injected]:
    wrapped = {name: {"value": value, "sensitive": False} for name, value in outputs.items()}  # as terraform prints
    return ({"TFCLUSTER_SOURCE": "terraform", "TFCLUSTER_TF_DIR": str(tmp_path)},
            Injected(terraform_runner=runner_for(wrapped)))


AWS = {"TFCLUSTER_SOURCE": "aws", "TFCLUSTER_CLUSTER": "cx1"}
TWO = [instance("i-a", "10.0.0.1", "worker", "0", public_ip="54.0.0.1"),
       instance("i-b", "10.0.0.2", "worker", "1", public_ip="54.0.0.2")]
TF_HOSTS = {"hosts": [{"task_type": "worker", "task_index": i, "private_ip": f"10.0.0.{i + 1}",
                       "public_ip": f"54.0.0.{i + 1}"} for i in range(2)]}


# ---- the training port (issue 9: the aws source defaulted to 22220 while Terraform opens 2222) -------------------

def test_hosts_that_state_no_port_get_the_contract_port(cli, tmp_path: Path) -> None:
    """aws tags, a host file and Terraform outputs without a port: contract.TF_PORT, what the module opens."""
    assert set(_ports(_list(cli, AWS, Injected(ec2_client=FakeEC2(TWO)))).values()) == {TF_PORT}
    assert set(_ports(_list(cli, _static_env(tmp_path, {"hosts": [{"address": "10.0.0.1"}]}))).values()) == {TF_PORT}
    assert set(_ports(_list(cli, *_tf_env(tmp_path, TF_HOSTS))).values()) == {TF_PORT}


def test_tfcluster_port_sets_the_default_and_base_port_stays_local(cli, tmp_path: Path) -> None:
    env = {**AWS, "TFCLUSTER_PORT": "4000", "TFCLUSTER_BASE_PORT": "30000"}
    assert set(_ports(_list(cli, env, Injected(ec2_client=FakeEC2(TWO)))).values()) == {4000}
    static = {**_static_env(tmp_path, {"hosts": [{"address": "10.0.0.1"}, {"address": "10.0.0.2", "port": 5000}]}),
              "TFCLUSTER_PORT": "4000"}
    assert _ports(_list(cli, static)) == {"worker-0": 4000, "worker-1": 5000}
    env, injected = _tf_env(tmp_path, {**TF_HOSTS, "tf_port": 4100})
    assert set(_ports(_list(cli, {**env, "TFCLUSTER_PORT": "4000"}, injected)).values()) == {4100}  # tf_port wins
    local = {"TFCLUSTER_SOURCE": "local", "TFCLUSTER_WORKERS": "2", "TFCLUSTER_PORT": "4000"}
    assert _ports(_list(cli, local)) == {"worker-0": LOCAL_BASE_PORT, "worker-1": LOCAL_BASE_PORT + 1}


# ---- connect modes ---------------------------------------------------------------------------------------------

def _hosts(inv: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {n: (hv["ansible_host"], hv["tfcluster_address"]) for n, hv in inv["_meta"]["hostvars"].items()}


@pytest.mark.parametrize(("outputs", "expected"), [
    ({}, {"worker-0": ("54.0.0.1", "10.0.0.1:2222"), "worker-1": ("54.0.0.2", "10.0.0.2:2222")}),  # old state
    ({"connect": "public", "bastion": None}, {"worker-0": ("54.0.0.1", "10.0.0.1:2222"),
                                              "worker-1": ("54.0.0.2", "10.0.0.2:2222")}),
    ({"connect": "private", "bastion": None}, {"worker-0": ("10.0.0.1", "10.0.0.1:2222"),
                                               "worker-1": ("10.0.0.2", "10.0.0.2:2222")}),
    ({"connect": "bastion", "bastion": {"address": "203.0.113.5", "user": "ops", "port": 22}},
     {"worker-0": ("10.0.0.1", "10.0.0.1:2222"), "worker-1": ("10.0.0.2", "10.0.0.2:2222")}),
])
def test_terraform_connect_output(cli, tmp_path: Path, outputs: dict[str, Any],
                                  expected: dict[str, tuple[str, str]]) -> None:
    inv = _list(cli, *_tf_env(tmp_path, {**TF_HOSTS, **outputs}))
    assert _hosts(inv) == expected
    args = inv["tfcluster"]["vars"].get("ansible_ssh_common_args")
    if outputs.get("connect") == "bastion":
        assert args == ("-o 'ProxyCommand=ssh -o BatchMode=yes -W '\"'\"'[%h]:%p'\"'\"' -p 22 ops@203.0.113.5'")
    else:
        assert args is None


@pytest.mark.parametrize(("env", "expected"), [
    ({}, {"worker-0": ("54.0.0.1", "10.0.0.1:2222"), "worker-1": ("54.0.0.2", "10.0.0.2:2222")}),
    ({"TFCLUSTER_CONNECT": "private"}, {"worker-0": ("10.0.0.1", "10.0.0.1:2222"),
                                        "worker-1": ("10.0.0.2", "10.0.0.2:2222")}),
    ({"TFCLUSTER_BASTION": "ops@203.0.113.5"}, {"worker-0": ("10.0.0.1", "10.0.0.1:2222"),
                                                "worker-1": ("10.0.0.2", "10.0.0.2:2222")}),
])
def test_aws_connect_setting(cli, env: dict[str, str], expected: dict[str, tuple[str, str]]) -> None:
    inv = _list(cli, {**AWS, **env}, Injected(ec2_client=FakeEC2(TWO)))
    assert _hosts(inv) == expected
    assert ("ansible_ssh_common_args" in inv["tfcluster"]["vars"]) == ("TFCLUSTER_BASTION" in env)


def test_terraform_env_overrides_the_outputs(cli, tmp_path: Path) -> None:
    env, injected = _tf_env(tmp_path, {**TF_HOSTS, "connect": "public"})
    inv = _list(cli, {**env, "TFCLUSTER_CONNECT": "bastion", "TFCLUSTER_BASTION": "jump:2200"}, injected)
    assert _hosts(inv)["worker-0"] == ("10.0.0.1", "10.0.0.1:2222")
    assert "-p 2200 jump'" in inv["tfcluster"]["vars"]["ansible_ssh_common_args"]


PRIVATE_FIX = "reaches hosts by their private IP: give every host one, or choose"


@pytest.mark.parametrize(("outputs", "env", "expected"), [
    ({"connect": "bastion", "bastion": None}, {},
     ["terraform output connect: is bastion, but no bastion (jump host) is given. Fix: set the root's `bastion` "
      "variable ({address, user, port}) and `make provision`, or export TFCLUSTER_BASTION=user@host[:port]"]),
    ({"connect": "vpn"}, {}, ["terraform output connect: unknown connect mode 'vpn'. Fix: use one of public, private, "
                              "bastion"]),
    ({"connect": "bastion", "bastion": {"address": "{{ lookup('pipe', 'id') }}", "user": "ops"}}, {},
     ["terraform output bastion.address: address \"{{ lookup('pipe', 'id') }}\" is not an IP address or DNS name. "
      "Fix: give the jump host's IP or DNS name"]),
    ({"connect": "public"}, {"TFCLUSTER_BASTION": "jump"},
     ["TFCLUSTER_BASTION: is set, but terraform output connect=public does not use it. Fix: export "
      "TFCLUSTER_CONNECT=bastion, or unset TFCLUSTER_BASTION"]),
    ({"connect": "private", "hosts": [{"task_type": "worker", "task_index": 0, "public_ip": "54.0.0.1"}]}, {},
     [f"hosts[0].private_ip: private_ip is missing. Fix: connect=private {PRIVATE_FIX} connect=public"]),
])
def test_terraform_reach_problems(cli, tmp_path: Path, outputs: dict[str, Any], env: dict[str, str],
                                  expected: list[str]) -> None:
    base, injected = _tf_env(tmp_path, {**TF_HOSTS, **outputs})
    assert _problems(cli, {**base, **env}, injected) == expected


def test_aws_private_mode_without_private_ip(cli) -> None:
    only_public = [instance("i-a", None, "worker", "0", public_ip="54.0.0.1")]
    assert _problems(cli, {**AWS, "TFCLUSTER_CONNECT": "private"}, Injected(ec2_client=FakeEC2(only_public))) == [
        f"i-a (54.0.0.1).private_ip: private_ip is missing. Fix: TFCLUSTER_CONNECT=private {PRIVATE_FIX} "
        "TFCLUSTER_CONNECT=public"]


def test_static_bastion(cli, tmp_path: Path) -> None:
    data = {"bastion": {"address": "jump.lab", "user": "ops", "port": 2200},
            "hosts": [{"address": "10.1.0.1", "ssh_port": 2222}]}
    inv = _list(cli, _static_env(tmp_path, data))
    assert _hosts(inv) == {"worker-0": ("10.1.0.1", "10.1.0.1:2222")}
    assert inv["tfcluster"]["vars"]["ansible_ssh_common_args"] == (
        "-o 'ProxyCommand=ssh -o BatchMode=yes -W '\"'\"'[%h]:%p'\"'\"' -p 2200 ops@jump.lab'")


# ---- the ssh options, exactly, and as ssh reads them -------------------------------------------------------------

KH = Path("/srv/cluster one/known_hosts")
TRUST = SshTrust(known_hosts=KH, checking="accept-new", identity=Path("/keys/id_ed25519"))
JUMP = Bastion(address="203.0.113.5", port=2200, user="ops")


def test_jump_command_argv() -> None:
    assert jump_command(JUMP, TRUST) == [
        "ssh", "-o", 'UserKnownHostsFile="/srv/cluster one/known_hosts"', "-o", "StrictHostKeyChecking=accept-new",
        "-o", "BatchMode=yes", "-i", "/keys/id_ed25519", "-W", "[%h]:%p", "-p", "2200", "ops@203.0.113.5"]
    assert jump_command(Bastion(address="fd00::9"), SshTrust()) == [
        "ssh", "-o", "BatchMode=yes", "-W", "[%h]:%p", "-p", "22", "fd00::9"]


def test_ssh_args_argv() -> None:
    """What Ansible's ssh plugin gets after shlex-splitting ansible_ssh_common_args."""
    args = ssh_args(Access(mode="bastion", bastion=JUMP), TRUST)
    assert shlex.split(shlex.join(args)) == [
        "-o", 'UserKnownHostsFile="/srv/cluster one/known_hosts"', "-o", "StrictHostKeyChecking=accept-new",
        "-o", "ProxyCommand=ssh -o 'UserKnownHostsFile=\"/srv/cluster one/known_hosts\"' -o "
              "StrictHostKeyChecking=accept-new -o BatchMode=yes -i /keys/id_ed25519 -W '[%h]:%p' -p 2200 "
              "ops@203.0.113.5"]
    assert ssh_args(Access(mode="private"), SshTrust(known_hosts=Path("/k/kh"), checking="yes")) == [
        "-o", "UserKnownHostsFile=/k/kh", "-o", "StrictHostKeyChecking=yes"]
    assert ssh_args(Access(mode="public"), SshTrust()) == []


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client")
def test_ssh_reads_the_options_as_meant(tmp_path: Path) -> None:
    """`ssh -G` (prints the configuration it would use, connects nowhere) on the exact argv Ansible builds: the
    known_hosts path with spaces and quotes survives, and the ProxyCommand's shell words give the jump's argv."""
    odd = tmp_path / "cluster one" / "{{ it's }}" / "known_hosts"
    trust = SshTrust(known_hosts=odd, checking="yes", identity=tmp_path / "key")
    args = shlex.split(shlex.join(ssh_args(Access(mode="bastion", bastion=JUMP), trust)))
    shown = subprocess.run(["ssh", "-G", "-F", "/dev/null", *args, "10.0.0.7"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    config = dict(line.split(" ", 1) for line in shown if " " in line)
    assert config["userknownhostsfile"] == str(odd)
    assert config["stricthostkeychecking"] == "true"
    jump = shlex.split(config["proxycommand"].replace("%h", "10.0.0.7").replace("%p", "22"))
    assert jump == ["ssh", "-o", f'UserKnownHostsFile="{odd}"', "-o", "StrictHostKeyChecking=yes", "-o",
                    "BatchMode=yes", "-i", str(tmp_path / "key"), "-W", "[10.0.0.7]:22", "-p", "2200",
                    "ops@203.0.113.5"]
    inner = subprocess.run(["ssh", "-G", "-F", "/dev/null", *jump[1:-1], jump[-1]], capture_output=True, text=True,
                           check=True).stdout
    assert f"userknownhostsfile {odd}\n" in inner and "port 2200\n" in inner and "user ops\n" in inner


def test_known_hosts_env_reaches_every_ssh_host(cli, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    env = {**_static_env(tmp_path, {"hosts": [{"address": "10.1.0.1"}]}), "TFCLUSTER_KNOWN_HOSTS": str(known)}
    group = _list(cli, env)["tfcluster"]["vars"]
    assert group["ansible_ssh_common_args"] == f"-o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes"
    assert group["ansible_host_key_checking"] is True
    known.unlink()
    assert _problems(cli, env) == [
        f"TFCLUSTER_KNOWN_HOSTS: {known} does not exist, so ssh with StrictHostKeyChecking=yes would refuse every "
        "host. Fix: write the cluster's known_hosts first (`make provision` does), or export "
        "TFCLUSTER_HOST_KEY_CHECKING=accept-new to record each host's key on first contact"]
    accept = _list(cli, {**env, "TFCLUSTER_HOST_KEY_CHECKING": "accept-new"})["tfcluster"]["vars"]
    assert accept["ansible_ssh_common_args"].endswith("StrictHostKeyChecking=accept-new")


def test_identity_is_checked_only_when_a_jump_uses_it(cli, tmp_path: Path) -> None:
    env = {**_static_env(tmp_path, {"hosts": [{"address": "10.1.0.1"}]}), "ANSIBLE_PRIVATE_KEY_FILE": "/k/100%"}
    assert "ansible_ssh_common_args" not in _list(cli, env)["tfcluster"]["vars"]
    env = {**_static_env(tmp_path, {"bastion": {"address": "jump"}, "hosts": [{"address": "10.1.0.1"}]}),
           "ANSIBLE_PRIVATE_KEY_FILE": "/k/100%"}
    assert _problems(cli, env) == ["ANSIBLE_PRIVATE_KEY_FILE: '/k/100%' holds '%', which ssh would expand or split. "
                                   "Fix: use a path without '%'"]
