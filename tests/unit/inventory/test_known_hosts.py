"""Host keys from a host file: checked where they enter, rendered as known_hosts lines that ssh-keygen finds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tfcluster.core.contract import EXIT_BAD_INPUT
from tfcluster.core.sshkeys import key_problem, parse_host_keys
from tfcluster.inventory.build import render_known_hosts as render
from tfcluster.inventory.cli import load_cluster
from tfcluster.inventory.config import load_settings
from tfcluster.inventory.model import InventoryError

ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIJfrOlzBMaKL3RDX01RAAlUVXOY/uoJhb4aXt4eymqv"
EC = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNo/X/WwnjYNO+mTCcaZtRDe+TFBnWZheBYwAw"
      "4fz9Ze5yYtj9CLkE9g69tu2klVdKScD+dJwfjTZ3zKQLzc2UQ=")
KEY_FIX = ("give each key as `TYPE BASE64` from the host's /etc/ssh/ssh_host_*_key.pub, e.g. "
           "\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA...\"")


@pytest.mark.parametrize(("value", "expected"), [
    (ED, None),
    (f"{ED} root@gpu-a", None),
    (EC, None),
    ("ssh-ed25519", f"k: 'ssh-ed25519' is not a public host key. Fix: {KEY_FIX}"),
    (7, f"k: 7 is not a public host key. Fix: {KEY_FIX}"),
    ("ssh-dss AAAA", "k: key type 'ssh-dss' is not an SSH host key type. Fix: use one of ssh-ed25519, "
                     "ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, ssh-rsa, "
                     "sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com"),
    ("ssh-ed25519 {{lookup('pipe','id')}}", f"k: the ssh-ed25519 key is not valid base64. Fix: {KEY_FIX}"),
    ("ssh-ed25519 " + EC.split()[1], f"k: the base64 part is not a ssh-ed25519 key. Fix: {KEY_FIX}"),
    ("ssh-ed25519 AAAA", f"k: the base64 part is not a ssh-ed25519 key. Fix: {KEY_FIX}"),
    (f"{ED} root@gpu-a\n", None),  # a `|` block scalar's last newline
    (f"{ED}\n* {ED}", f"k: {ED + chr(10) + '* ' + ED!r} holds a line break or control character. Fix: give one key per "
                      f"list item: {KEY_FIX}"),
    (f"{ED} a\rb", f"k: {ED + ' a' + chr(13) + 'b'!r} holds a line break or control character. Fix: give one key per "
                   f"list item: {KEY_FIX}"),
])
def test_key_problem(value: object, expected: str | None) -> None:
    found = key_problem("k", value)
    assert (str(found) if found else None) == expected


def test_parse_host_keys_drops_comments() -> None:
    assert parse_host_keys("h", [f"{ED}  root@gpu-a  {{{{ lookup('pipe', 'id') }}}}", EC]) == ((ED, EC), [])
    assert parse_host_keys("h", None) == ((), [])
    keys, problems = parse_host_keys("h", ED)
    assert (keys, [str(p) for p in problems]) == ((), ["h: must be a list of keys, got str. Fix: write host_keys: "
                                                       "[\"ssh-ed25519 AAAA...\"]"])


def _cluster(tmp_path: Path, data: dict[str, object]):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return load_cluster(load_settings({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}))


HOSTS = {"bastion": {"address": "jump.lab", "user": "ops", "host_keys": [EC]},
         "hosts": [{"name": "gpu-a", "address": "10.1.0.1", "task_type": "chief", "host_keys": [f"{ED} root@gpu-a"]},
                   {"name": "gpu-b", "address": "fd00::2", "ssh_port": 2200, "host_keys": [ED, EC]},
                   {"name": "gpu-c", "address": "10.1.0.3", "ssh_port": 22}]}


def test_render_uses_the_address_ansible_connects_to(tmp_path: Path) -> None:
    assert render(_cluster(tmp_path, HOSTS)) == (
        f"jump.lab {EC}\n10.1.0.1 {ED}\n[fd00::2]:2200 {ED}\n[fd00::2]:2200 {EC}\n")
    assert render(_cluster(tmp_path, {"hosts": [{"address": "10.1.0.1"}]})) == ""


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="no ssh-keygen")
def test_ssh_keygen_finds_every_rendered_host(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(render(_cluster(tmp_path, HOSTS)))
    for host, count in (("jump.lab", 1), ("10.1.0.1", 1), ("[fd00::2]:2200", 2), ("10.1.0.3", 0)):
        found = subprocess.run(["ssh-keygen", "-F", host, "-f", str(known)], capture_output=True, text=True,
                               check=False)
        assert len([line for line in found.stdout.splitlines() if line and not line.startswith("#")]) == count, host


def test_bad_host_key_in_a_file_is_named(tmp_path: Path, cli) -> None:
    data = {"hosts": [{"name": "gpu-a", "address": "10.1.0.1", "host_keys": [ED, "ssh-rsa AAAA"]}]}
    with pytest.raises(InventoryError) as info:
        _cluster(tmp_path, data)
    assert [str(p) for p in info.value.problems] == [
        f"hosts[0] (gpu-a).host_keys[1]: the base64 part is not a ssh-rsa key. Fix: {KEY_FIX}"]
    code, out, _ = cli({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(tmp_path / "hosts.yml")},
                       "--known-hosts")
    assert (code, out) == (EXIT_BAD_INPUT, "")


def test_cli_known_hosts(tmp_path: Path, cli) -> None:
    path = tmp_path / "h.yml"
    path.write_text(yaml.safe_dump(HOSTS))
    code, out, _ = cli({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}, "--known-hosts")
    assert (code, out) == (0, render(_cluster(tmp_path, HOSTS)))
