"""Addresses as they enter (issue 18): no IPv6 scope id in any field, and known_hosts lines that are always exactly
``PATTERN TYPE BASE64`` whatever text a host file, a Terraform output or an EC2 answer holds."""

from __future__ import annotations

import os
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.unit.inventory.inventory_helpers import FakeEC2, instance, runner_for
from tfcluster.core.addresses import address_problem, is_address
from tfcluster.core.contract import EXIT_BAD_INPUT
from tfcluster.core.sshkeys import KEY_TYPES, KnownHostsLineError, known_hosts_line, lines
from tfcluster.inventory.access import parse_bastion_text
from tfcluster.inventory.build import render_known_hosts as render
from tfcluster.inventory.build import validate_cluster
from tfcluster.inventory.cli import Injected
from tfcluster.inventory.model import InventoryError
from tfcluster.inventory.sources.static import static_hosts

ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIJfrOlzBMaKL3RDX01RAAlUVXOY/uoJhb4aXt4eymqv"
EC = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNo/X/WwnjYNO+mTCcaZtRDe+TFBnWZheBYwAw"
      "4fz9Ze5yYtj9CLkE9g69tu2klVdKScD+dJwfjTZ3zKQLzc2UQ=")
# A key whose base64 holds no '/': ipaddress takes it whole inside a scope id, as an attacker's key would be taken.
PLAIN = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDpKpq6Gc7KZQCIV9Oisr7rayj69IH7ioEvndqVhZlsN"
ZONE_FIX = ("give a global or unique-local IPv6 address (or a DNS name) without '%' and a zone: link-local fe80:: "
            "addresses need one and are not supported")

# Each passed ipaddress.IPv6Address before issue 18; the second wrote `*` lines (trust any host) into known_hosts.
HOSTILE = [
    "fe80::1%eth0",
    f"fe80::1%\n* {PLAIN}",
    f"fd00::1%x\n@cert-authority * {PLAIN}",
    "::1%$(touch /tmp/pwned)",
    "::1%{{ lookup('pipe', 'id') }}",
    "::1%\"'",
    "fd00::2%eth0 -oProxyCommand=id",
]
MODES = [("--list",), ("--known-hosts",), ("--tf-config", "all")]


def _static_env(tmp_path: Path, data: object) -> dict[str, str]:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)}


def _tf_env(tmp_path: Path, outputs: dict[str, Any]) -> tuple[dict[str, str], Injected]:
    wrapped = {name: {"value": value, "sensitive": False} for name, value in outputs.items()}
    return ({"TFCLUSTER_SOURCE": "terraform", "TFCLUSTER_TF_DIR": str(tmp_path)},
            Injected(terraform_runner=runner_for(wrapped)))


def _refused(cli, env: dict[str, str], argv: tuple[str, ...], field: str,
             injected: Injected = Injected()) -> list[str]:  # noqa: B008
    """Exit 2, nothing on stdout, and a problem line naming ``field`` with a fix; the raw text never reaches stderr."""
    code, out, err = cli(env, *argv, injected=injected)
    assert (code, out) == (EXIT_BAD_INPUT, ""), err
    found = [line.removeprefix("  - ") for line in err.splitlines() if line.startswith("  - ")]
    assert any(line.startswith(f"{field}: ") and "holds an IPv6 zone" in line and f"Fix: {ZONE_FIX}" in line
               for line in found), found
    assert "\n*" not in err and "\n@" not in err
    return found


def test_a_scope_id_is_refused_with_the_field_and_the_fix() -> None:
    found = address_problem("hosts[0].address", "fe80::1%eth0", "give the host an address")
    assert str(found) == (f"hosts[0].address: address 'fe80::1%eth0' holds an IPv6 zone ('%eth0'), which no address "
                          f"field accepts. Fix: {ZONE_FIX}")
    for value in HOSTILE:
        assert not is_address(value)
    assert is_address("fd00::2") and is_address("::ffff:10.0.0.1") and is_address("gpu-a.lab")


@pytest.mark.parametrize("argv", MODES)
@pytest.mark.parametrize("hostile", HOSTILE)
def test_host_file_addresses_with_a_scope_id(cli, tmp_path: Path, argv: tuple[str, ...], hostile: str) -> None:
    keys = {"host_keys": [ED]}
    _refused(cli, _static_env(tmp_path, {"hosts": [{"address": hostile, **keys}]}), argv, "hosts[0].address")
    _refused(cli, _static_env(tmp_path, {"hosts": [{"address": "10.0.0.1", "tf_address": hostile, **keys}]}), argv,
             "hosts[0] (10.0.0.1).tf_address")
    jump = {"bastion": {"address": hostile, "host_keys": [EC]}, "hosts": [{"address": "10.0.0.1", **keys}]}
    _refused(cli, _static_env(tmp_path, jump), argv, "hosts.yml.bastion.address")


@pytest.mark.parametrize("argv", MODES)
@pytest.mark.parametrize("hostile", HOSTILE[:3])
def test_terraform_addresses_with_a_scope_id(cli, tmp_path: Path, argv: tuple[str, ...], hostile: str) -> None:
    public = {"hosts": [{"task_type": "worker", "task_index": 0, "private_ip": "10.0.0.1", "public_ip": hostile}]}
    env, injected = _tf_env(tmp_path, public)
    _refused(cli, env, argv, "hosts[0].public_ip", injected)
    private = {"hosts": [{"task_type": "worker", "task_index": 0, "private_ip": hostile, "public_ip": "54.0.0.1"}]}
    env, injected = _tf_env(tmp_path, private)
    _refused(cli, env, argv, "hosts[0].private_ip", injected)
    jump = {"connect": "bastion", "bastion": {"address": hostile, "user": "ops", "port": 22},
            "hosts": [{"task_type": "worker", "task_index": 0, "private_ip": "10.0.0.1"}]}
    env, injected = _tf_env(tmp_path, jump)
    _refused(cli, env, argv, "terraform output bastion.address", injected)


@pytest.mark.parametrize("argv", MODES)
@pytest.mark.parametrize("hostile", HOSTILE[:3])
def test_aws_and_environment_bastion_with_a_scope_id(cli, tmp_path: Path, argv: tuple[str, ...],
                                                     hostile: str) -> None:
    aws = {"TFCLUSTER_SOURCE": "aws", "TFCLUSTER_CLUSTER": "cx1"}
    ec2 = FakeEC2([instance("i-a", hostile, "worker", "0")])
    _refused(cli, aws, argv, "i-a.private_ip", Injected(ec2_client=ec2))
    env, injected = _tf_env(tmp_path, {"hosts": [{"task_type": "worker", "task_index": 0, "private_ip": "10.0.0.1"}]})
    bastion = {**env, "TFCLUSTER_CONNECT": "bastion", "TFCLUSTER_BASTION": f"ops@[{hostile}]:2200"}
    _refused(cli, bastion, argv, "TFCLUSTER_BASTION.address", injected)
    ec2 = FakeEC2([instance("i-a", "10.0.0.1", "worker", "0")])
    _refused(cli, {**aws, "TFCLUSTER_BASTION": f"[{hostile}]"}, argv, "TFCLUSTER_BASTION.address",
             Injected(ec2_client=ec2))


def test_the_script_writes_no_trust_anything_line(tmp_path: Path) -> None:
    """The finding, through the real script: one address wrote `* KEY` and `@cert-authority * KEY` lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFCLUSTER_")}
    env.update(_static_env(tmp_path, {"hosts": [{"address": f"fd00::1%x\n* {PLAIN}\n@cert-authority * {PLAIN}\n",
                                                 "host_keys": [ED]}]}))
    script = Path(__file__).resolve().parents[3] / "inventory" / "slots.py"
    for argv in MODES:
        done = subprocess.run([sys.executable, str(script), *argv], env=env, capture_output=True, text=True,
                              timeout=60, check=False)
        assert (done.returncode, done.stdout) == (EXIT_BAD_INPUT, ""), done.stderr
        assert "hosts[0].address: address 'fd00::1%x\\n* ssh-ed25519" in done.stderr
        assert "\n*" not in done.stderr and "\n@" not in done.stderr


def test_bastion_text_with_a_scope_id() -> None:
    bastion, problems = parse_bastion_text("TFCLUSTER_BASTION", "ops@[fe80::1%eth0]:2200")
    assert bastion is None
    assert [str(p) for p in problems] == [
        f"TFCLUSTER_BASTION.address: address 'fe80::1%eth0' holds an IPv6 zone ('%eth0'), which no address field "
        f"accepts. Fix: {ZONE_FIX}"]
    assert parse_bastion_text("TFCLUSTER_BASTION", "ops@[fd00::5]:2200")[1] == []


# ---- the one line builder ------------------------------------------------------------------------------------------

def assert_known_hosts_text(text: str) -> list[str]:
    """Every line is `PATTERN TYPE BASE64`: 3 fields, printable ASCII, a pattern that is one plain address."""
    assert text == "" or text.endswith("\n")
    found = text.split("\n")[:-1] if text else []
    assert found == text.splitlines()  # no \r, \v, \x1c ... splitting a line where ssh would
    for line in found:
        assert line and line[0] not in "*@|!#", line
        fields = line.split(" ")
        assert len(fields) == 3 and line.split() == fields, line
        assert all(ch in string.printable and ch not in "\t\r\n\x0b\x0c" for ch in line), line
        pattern, key_type, blob = fields
        assert key_type in KEY_TYPES and set(blob) <= set(string.ascii_letters + string.digits + "+/="), line
        host = pattern[1:pattern.index("]")] if pattern.startswith("[") else pattern
        assert is_address(host) and not set("*?!%,|@") & set(pattern), line
        if pattern.startswith("["):
            assert pattern == f"[{host}]:{int(pattern.rsplit(':', 1)[1])}", line
    return found


def test_line_builder() -> None:
    assert known_hosts_line("10.0.0.1", None, ED) == f"10.0.0.1 {ED}"
    assert known_hosts_line("fd00::2", 2200, f"{EC} root@b") == f"[fd00::2]:2200 {EC}"
    for address, port, key in [("*", 22, ED), ("fe80::1%eth0", 22, ED), ("10.0.0.1", 0, ED), ("10.0.0.1", True, ED),
                               ("10.0.0.1", "22\n*", ED), ("10.0.0.1", 22, f"{ED}\n* {ED}"),
                               ("10.0.0.1", 22, "@cert-authority * " + ED), ("10.0.0.1", 22, ED.replace("A", "*"))]:
        with pytest.raises(KnownHostsLineError):
            known_hosts_line(address, port, key)
    with pytest.raises(KnownHostsLineError) as info:
        lines([("fe80::1%\n*", 22, (ED,))])
    assert str(info.value).startswith("known_hosts.address: address 'fe80::1%\\n*' holds an IPv6 zone")


HOSTILE_TEXT = st.sampled_from(["\n", "%", "*", "@cert-authority ", "@revoked ", "'", '"', "$(id)", "{{ x }}", " ",
                                "\t", "\r", "|1|", "!", ",", "[", "]", ":", "?", "#", "\x00", "\u2028", "fe80::1%"])


def _spliced(base: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``base`` with hostile text put before, after or inside it."""
    return st.tuples(base, st.lists(HOSTILE_TEXT, min_size=1, max_size=3), st.integers(0, 90)).map(
        lambda t: t[0][:t[2]] + "".join(t[1]) + t[0][t[2]:])


def _mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], bad_percent: int) -> st.SearchStrategy[Any]:
    """``good`` (100 - bad_percent)% of the time, else ``bad``: most generated clusters are valid, some are not."""
    return st.integers(0, 99).flatmap(lambda n: bad if n < bad_percent else good)


GOOD_ADDRESSES = st.one_of(st.ip_addresses().map(str), st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z0-9]{1,6}){0,2}",
                                                                     fullmatch=True))
ZONE_TEXT = st.one_of(HOSTILE_TEXT, st.sampled_from(["eth0", PLAIN, "* ", "\n* "]))
ZONED = st.builds(lambda address, zone: f"{address}%{''.join(zone)}", st.sampled_from(["fe80::1", "fd00::3", "::"]),
                  st.lists(ZONE_TEXT, min_size=1, max_size=4))
ADDRESSES = _mostly(GOOD_ADDRESSES, st.one_of(ZONED, _spliced(GOOD_ADDRESSES), st.text(max_size=20)), 15)
PORTS = _mostly(st.one_of(st.none(), st.integers(1, 65535)),
                st.one_of(st.integers(-5, 0), st.integers(65536, 70000), st.booleans(),
                          _spliced(st.sampled_from(["22", "2200"])), st.text(max_size=6)), 10)
GOOD_KEYS = st.one_of(st.sampled_from([ED, EC]),
                      st.builds(lambda key, comment: f"{key} {comment}", st.sampled_from([ED, EC]),
                                st.from_regex(r"[a-z]{1,8}@[a-z0-9.-]{1,12}", fullmatch=True)))
KEYS = _mostly(GOOD_KEYS, st.one_of(_spliced(GOOD_KEYS), st.text(max_size=20)), 10)
HOST = st.fixed_dictionaries({"address": ADDRESSES},
                             optional={"tf_address": ADDRESSES, "ssh_port": PORTS,
                                       "host_keys": st.lists(KEYS, max_size=3)})
HOST_FILES = st.fixed_dictionaries(
    {"hosts": st.lists(HOST, min_size=1, max_size=4, unique_by=lambda h: h["address"])},
    optional={"bastion": st.fixed_dictionaries({"address": ADDRESSES},
                                               optional={"port": PORTS, "host_keys": st.lists(KEYS, max_size=2)})})
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(ADDRESSES, PORTS, KEYS)
def test_every_built_line_is_pattern_type_base64(address: object, port: object, key: object) -> None:
    try:
        line = known_hosts_line(address, port, key)
    except KnownHostsLineError:
        event("refused")
        return
    event("built")
    assert assert_known_hosts_text(line + "\n") == [line]


@FUZZ
@given(HOST_FILES)
def test_no_generated_cluster_renders_a_line_that_does_not_fit(data: dict[str, Any]) -> None:
    found = static_hosts(data, Path("hosts.yml"), 2222)
    try:
        cluster = validate_cluster(found, "auto", "c")
    except InventoryError:
        event("refused")
        return
    text = render(cluster)
    event("rendered lines" if text else "valid, no keys")
    hosts = [*cluster.hosts, *([cluster.access.bastion] if cluster.access.bastion else [])]
    assert len(assert_known_hosts_text(text)) == sum(len(h.host_keys) for h in hosts)
