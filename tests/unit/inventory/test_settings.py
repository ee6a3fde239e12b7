"""Inventory settings from the environment: every bad value is named with its fix, all collected together."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfcluster.inventory.access import SshTrust
from tfcluster.inventory.config import load_settings
from tfcluster.inventory.model import Bastion, InventoryError

AWS = {"TFCLUSTER_SOURCE": "aws", "TFCLUSTER_CLUSTER": "exp1"}
BASTION_FIX = "write e.g. TFCLUSTER_BASTION=ubuntu@203.0.113.5 or TFCLUSTER_BASTION=ubuntu@[2001:db8::5]:2200"


@pytest.mark.parametrize(("env", "expected"), [
    ({"TFCLUSTER_SOURCE": "gcp"}, "TFCLUSTER_SOURCE: unknown source 'gcp'. Fix: use one of terraform, static, aws, "
                                  "local"),
    ({"TFCLUSTER_STRATEGY": "horovod"}, "TFCLUSTER_STRATEGY: unknown strategy 'horovod'. Fix: use one of auto, "
                                        "multi_worker_mirrored, parameter_server, mirrored, tpu"),
    ({"TFCLUSTER_WORKERS": "0"}, "TFCLUSTER_WORKERS: '0' is not a whole number in 1..10000. Fix: set "
                                 "TFCLUSTER_WORKERS to a number in 1..10000, or unset it for 2"),
    ({"TFCLUSTER_BASE_PORT": "70000"}, "TFCLUSTER_BASE_PORT: '70000' is not a whole number in 1..65535. Fix: set "
                                       "TFCLUSTER_BASE_PORT to a number in 1..65535, or unset it for 22220"),
    ({"TFCLUSTER_PORT": "0"}, "TFCLUSTER_PORT: '0' is not a whole number in 1..65535. Fix: set TFCLUSTER_PORT to a "
                              "number in 1..65535, or unset it for 2222"),
    ({"TFCLUSTER_SOURCE": "local", "TFCLUSTER_BASE_PORT": "65535", "TFCLUSTER_WORKERS": "2"},
     "TFCLUSTER_BASE_PORT: 2 local tasks from port 65535 would need port 65536. Fix: lower TFCLUSTER_BASE_PORT or "
     "TFCLUSTER_WORKERS"),
    ({"TFCLUSTER_SOURCE": "static"}, "TFCLUSTER_HOSTS_FILE: is not set, but TFCLUSTER_SOURCE=static needs a host "
                                     "file. Fix: export TFCLUSTER_HOSTS_FILE=path/to/hosts.yml (see "
                                     "inventory/onprem.example.yml)"),
    ({"TFCLUSTER_SOURCE": "aws"}, "TFCLUSTER_CLUSTER: is not set, but TFCLUSTER_SOURCE=aws filters instances by the "
                                  "tfcluster:cluster tag. Fix: export TFCLUSTER_CLUSTER=<cluster_name>"),
    ({"TFCLUSTER_CLUSTER": "x;id"}, "TFCLUSTER_CLUSTER: 'x;id' is not a valid cluster name. Fix: use 3-32 lowercase "
                                    "letters, digits or '-', starting with a letter (it names AWS resources)"),
    ({"TFCLUSTER_CLUSTER": "{{ lookup('pipe', 'id') }}"},
     "TFCLUSTER_CLUSTER: \"{{ lookup('pipe', 'id') }}\" is not a valid cluster name. Fix: use 3-32 lowercase "
     "letters, digits or '-', starting with a letter (it names AWS resources)"),
    ({**AWS, "TFCLUSTER_CONNECT": "vpn"}, "TFCLUSTER_CONNECT: unknown connect mode 'vpn'. Fix: use one of public, "
                                          "private, bastion"),
    ({**AWS, "TFCLUSTER_CONNECT": "bastion"}, "TFCLUSTER_CONNECT: is bastion, but TFCLUSTER_BASTION is not set. Fix: "
                                              "export TFCLUSTER_BASTION=user@host[:port] (the jump host)"),
    ({**AWS, "TFCLUSTER_CONNECT": "private", "TFCLUSTER_BASTION": "ops@jump"},
     "TFCLUSTER_BASTION: is set, but TFCLUSTER_CONNECT=private does not use it. Fix: set TFCLUSTER_CONNECT=bastion, "
     "or unset TFCLUSTER_BASTION"),
    ({**AWS, "TFCLUSTER_BASTION": "ops@jump:ssh"},
     "TFCLUSTER_BASTION.port: port 'ssh' is not a whole number in 1..65535. Fix: give the jump host's SSH port in "
     "1..65535, or leave it out for 22"),
    ({**AWS, "TFCLUSTER_BASTION": "o ps@jump"},
     "TFCLUSTER_BASTION.user: 'o ps' is not a valid user name. Fix: use a POSIX user name: lowercase letters, "
     "digits, '_' or '-', e.g. ubuntu"),
    ({**AWS, "TFCLUSTER_BASTION": "ops@{{ lookup('pipe', 'id') }}"},
     "TFCLUSTER_BASTION.address: address \"{{ lookup('pipe', 'id') }}\" is not an IP address or DNS name. Fix: give "
     "the jump host's IP or DNS name"),
    ({**AWS, "TFCLUSTER_BASTION": "ops@[fd00::1"}, "TFCLUSTER_BASTION: 'ops@[fd00::1' is not [user@]host[:port]. "
                                                   "Fix: " + BASTION_FIX),
    ({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": "h.yml", "TFCLUSTER_CONNECT": "private"},
     "TFCLUSTER_CONNECT: applies to the terraform and aws sources, not static. Fix: unset it: a host file's hosts are "
     "reached at their `address` (add `bastion:` to the file for a jump host)"),
    ({"TFCLUSTER_SOURCE": "local", "TFCLUSTER_BASTION": "jump"},
     "TFCLUSTER_BASTION: applies to the terraform and aws sources, not local. Fix: unset it: local slots need no SSH"),
    ({"TFCLUSTER_HOST_KEY_CHECKING": "no"}, "TFCLUSTER_HOST_KEY_CHECKING: unknown host key checking 'no'. Fix: use "
                                            "one of yes, accept-new"),
    ({"TFCLUSTER_KNOWN_HOSTS": "/tmp/100%/known"}, "TFCLUSTER_KNOWN_HOSTS: '/tmp/100%/known' holds '%', which ssh "
                                                   "would expand or split. Fix: use a path without '%'"),
    ({"TFCLUSTER_KNOWN_HOSTS": '/tmp/"a"\\b'}, "TFCLUSTER_KNOWN_HOSTS: '/tmp/\"a\"\\\\b' holds '\"', '\\\\', which "
                                               "ssh would expand or split. Fix: use a path without '\"', '\\\\'"),
])
def test_settings_problems(env: dict[str, str], expected: str) -> None:
    with pytest.raises(InventoryError) as info:
        load_settings(env)
    assert [str(p) for p in info.value.problems] == [expected]


def test_settings_collects_all_and_defaults() -> None:
    with pytest.raises(InventoryError) as info:
        load_settings({"TFCLUSTER_SOURCE": "x", "TFCLUSTER_STRATEGY": "y", "TFCLUSTER_WORKERS": "z"})
    assert [p.field for p in info.value.problems] == ["TFCLUSTER_SOURCE", "TFCLUSTER_STRATEGY", "TFCLUSTER_WORKERS"]
    settings = load_settings({})
    assert (settings.source, settings.strategy, settings.workers, settings.base_port, settings.port) == (
        "terraform", "auto", 2, 22220, 2222)
    assert (settings.connect, settings.bastion, settings.trust) == (None, None, SshTrust())
    assert settings.tf_dir == Path(__file__).resolve().parents[3] / "infra" / "aws"


@pytest.mark.parametrize(("env", "connect", "bastion"), [
    (AWS, "public", None),
    ({**AWS, "TFCLUSTER_CONNECT": "private"}, "private", None),
    ({**AWS, "TFCLUSTER_BASTION": "ops@203.0.113.5"}, "bastion", Bastion("203.0.113.5", 22, "ops")),
    ({**AWS, "TFCLUSTER_CONNECT": "bastion", "TFCLUSTER_BASTION": "jump.example:2200"}, "bastion",
     Bastion("jump.example", 2200, None)),
    ({**AWS, "TFCLUSTER_BASTION": "ops@[2001:db8::5]:2222"}, "bastion", Bastion("2001:db8::5", 2222, "ops")),
    ({"TFCLUSTER_CONNECT": "private"}, "private", None),  # terraform: overrides the `connect` output
    ({}, None, None),  # terraform: the `connect` output decides
])
def test_connect_settings(env: dict[str, str], connect: str | None, bastion: Bastion | None) -> None:
    settings = load_settings(env)
    assert (settings.connect, settings.bastion) == (connect, bastion)


def test_known_hosts_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert load_settings({"TFCLUSTER_KNOWN_HOSTS": "kh"}).trust == SshTrust(known_hosts=tmp_path / "kh",
                                                                              checking="yes")
    env = {"TFCLUSTER_KNOWN_HOSTS": "~/k h", "TFCLUSTER_HOST_KEY_CHECKING": "accept-new"}
    assert load_settings(env).trust == SshTrust(known_hosts=tmp_path / "home" / "k h", checking="accept-new")
    # Without a file, the checking setting alone still reaches ssh (the user's own known_hosts).
    assert load_settings({"TFCLUSTER_HOST_KEY_CHECKING": "yes"}).trust == SshTrust(checking="yes")
