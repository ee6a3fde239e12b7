"""tfcluster/provision/known_hosts.py: each cluster's known_hosts, filled from cloud-init's console output."""

from __future__ import annotations

import base64
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tfcluster.provision import known_hosts

ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIJfrOlzBMaKL3RDX01RAAlUVXOY/uoJhb4aXt4eymqv"


def _key(tmp_path: Path, name: str, kind: str = "ed25519") -> str:
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", f"root@{name}", "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def console(*keys: str, prefix: str = "") -> str:
    """What cloud-init writes to an EC2 console: fingerprints first, then the keys block."""
    body = "\n".join(f"{prefix}{key} root@ip-10-42-0-7" for key in keys)
    return (f"[   10.1] cloud-init[812]: Cloud-init v. 24.1 running 'modules:final'\n"
            f"{prefix}-----BEGIN SSH HOST KEY FINGERPRINTS-----\n{prefix}256 SHA256:abc root@ip (ED25519)\n"
            f"{prefix}-----END SSH HOST KEY FINGERPRINTS-----\n"
            f"{prefix}-----BEGIN SSH HOST KEY KEYS-----\n{body}\n{prefix}-----END SSH HOST KEY KEYS-----\n"
            "[   12.0] cloud-init[812]: finished at ...\n")


def test_keys_in_console(tmp_path: Path) -> None:
    ed, ecdsa = _key(tmp_path, "a"), _key(tmp_path, "b", "ecdsa")
    assert known_hosts.keys_in_console(console(ed, ecdsa)) == [ed, ecdsa]
    assert known_hosts.keys_in_console(console(ed, prefix="ec2: ")) == [ed]
    # a reboot prints the block again: the last complete one counts; one still being printed gives nothing
    assert known_hosts.keys_in_console(console(ecdsa) + console(ed)) == [ed]
    assert known_hosts.keys_in_console("kernel: booting\n" + console(ed).split("-----END SSH HOST KEY KEYS")[0]) \
        == []
    assert known_hosts.keys_in_console("no keys here") == []


def test_console_keys_that_are_not_keys_are_dropped(tmp_path: Path) -> None:
    ed = _key(tmp_path, "a")
    wrong_type = "ssh-rsa " + ed.split()[1]  # an ed25519 blob under another name
    not_base64 = "ssh-ed25519 AAAA!!!!"
    assert known_hosts.keys_in_console(console(wrong_type, not_base64, ed)) == [ed]


def test_path_per_cluster_refuses_names_that_escape(tmp_path: Path) -> None:
    assert known_hosts.path_for("tfcluster-aws", tmp_path) == tmp_path / ".cache/tfcluster/known_hosts/tfcluster-aws"
    for bad in ("../etc", "a/b", "x;id"):
        with pytest.raises(known_hosts.KnownHostsError, match="cluster"):
            known_hosts.path_for(bad, tmp_path)


def test_write_and_remove(tmp_path: Path) -> None:
    ed = _key(tmp_path, "a")
    path = known_hosts.write(tmp_path / "kh" / "c1", {"10.42.0.9": [ed], "10.42.0.7": [ed, "[10.42.0.7]:2222 " + ed]})
    assert path.read_text() == f"10.42.0.7 {ed}\n[10.42.0.7]:2222 {ed}\n10.42.0.9 {ed}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert known_hosts.write(path, {"10.42.0.7": [ed]}, port=2200).read_text() == f"[10.42.0.7]:2200 {ed}\n"
    assert known_hosts.remove(path) is True and not path.exists()
    assert known_hosts.remove(path) is False


def test_written_file_is_what_ssh_keygen_finds(tmp_path: Path) -> None:
    ed = _key(tmp_path, "a")
    path = known_hosts.write(tmp_path / "c1", {"10.42.0.7": [ed]})
    found = subprocess.run(["ssh-keygen", "-F", "10.42.0.7", "-f", str(path)], capture_output=True, text=True,
                           check=False)
    assert found.returncode == 0 and ed in found.stdout


class FakeEc2:
    """GetConsoleOutput that prints keys after `ready_after` calls per instance."""

    def __init__(self, texts: dict[str, str], ready_after: int = 2) -> None:
        self.texts, self.ready_after, self.calls = texts, ready_after, {k: 0 for k in texts}

    def get_console_output(self, InstanceId: str, Latest: bool = False) -> dict[str, Any]:
        self.calls[InstanceId] += 1
        text = self.texts[InstanceId] if self.calls[InstanceId] > self.ready_after else "booting\n"
        return {"InstanceId": InstanceId, "Output": base64.b64encode(text.encode()).decode()}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_fetch_waits_for_every_instance_within_the_bound(tmp_path: Path) -> None:
    ed, ecdsa = _key(tmp_path, "a"), _key(tmp_path, "b", "ecdsa")
    ec2, clock = FakeEc2({"i-0": console(ed), "i-1": console(ecdsa)}), Clock()
    found, missing = known_hosts.fetch_console_keys(ec2, {"10.0.0.4": "i-0", "10.0.0.5": "i-1"}, timeout=60,
                                                    interval=10, clock=clock, sleep=clock.sleep)
    assert found == {"10.0.0.4": [ed], "10.0.0.5": [ecdsa]} and missing == []
    assert ec2.calls == {"i-0": 3, "i-1": 3} and clock.now == 20


def test_fetch_gives_up_at_the_bound_naming_what_is_missing(tmp_path: Path) -> None:
    ed = _key(tmp_path, "a")
    ec2, clock = FakeEc2({"i-0": console(ed), "i-1": "never any keys\n"}, ready_after=0), Clock()
    found, missing = known_hosts.fetch_console_keys(ec2, {"10.0.0.4": "i-0", "10.0.0.5": "i-1"}, timeout=30,
                                                    interval=10, clock=clock, sleep=clock.sleep)
    assert found == {"10.0.0.4": [ed]} and missing == ["10.0.0.5"]
    assert clock.now == 30 and ec2.calls["i-0"] == 1  # a host with keys is not asked again


def test_user_entries_finds_a_bastion_in_the_users_known_hosts(tmp_path: Path) -> None:
    ed, other = _key(tmp_path, "a"), _key(tmp_path, "b")
    user = tmp_path / "known_hosts"
    user.write_text(f"3.2.2.2 {ed}\n[3.2.2.2]:2222 {other}\nexample.org {other}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(user)], capture_output=True, check=True)  # hashed names too
    assert known_hosts.user_entries("3.2.2.2", 22, [user]) == [f"3.2.2.2 {ed}"]
    assert known_hosts.user_entries("3.2.2.2", 2222, [user]) == [f"[3.2.2.2]:2222 {other}"]
    assert known_hosts.user_entries("9.9.9.9", 22, [user, tmp_path / "missing"]) == []


def test_user_entries_rebuilds_every_line_and_drops_markers(tmp_path: Path) -> None:
    """Issue 18: a `@cert-authority *` line came out as `3.2.2.2 * ssh-ed25519`, a `@revoked` key as a garbled line;
    each line the user's file gives is now rebuilt by the checked builder, or dropped."""
    ed, other, third = _key(tmp_path, "a"), _key(tmp_path, "b"), _key(tmp_path, "c")
    user = tmp_path / "known_hosts"
    user.write_text(f"3.2.2.2 {ed}\n@cert-authority * {other}\n@revoked 3.2.2.2 {third}\n3.2.2.2,other {third} c\n"
                    f"*.2.2 {other}\n3.2.2.2 ssh-dss AAAAB3NzaC1kc3MAAACBAP\n")
    assert known_hosts.user_entries("3.2.2.2", 22, [user]) == [f"3.2.2.2 {ed}", f"3.2.2.2 {other}"]
    subprocess.run(["ssh-keygen", "-H", "-f", str(user)], capture_output=True, check=True)
    assert "|1|" in user.read_text()
    assert known_hosts.user_entries("3.2.2.2", 22, [user]) == [f"3.2.2.2 {ed}", f"3.2.2.2 {other}"]


@pytest.mark.parametrize("address", ["fe80::1%eth0", f"fe80::1%\n* {ED}", "*", "3.2.2.2 *", "-oProxyCommand=id"])
def test_user_entries_refuses_an_address_that_is_not_one(tmp_path: Path, address: str) -> None:
    with pytest.raises(known_hosts.KnownHostsError, match=r"^bastion\.address: address .* Fix: "):
        known_hosts.user_entries(address, 22, [tmp_path / "none"])


@pytest.mark.parametrize("entries", [
    {"fe80::1%\n*": [ED]},  # the finding: one address wrote `*` lines
    {"10.0.0.1": [f"@cert-authority * {ED}"]},
    {"10.0.0.1": [f"* {ED}"]},
    {"10.0.0.1": [f"|1|abc=|def= {ED}"]},
    {"10.0.0.1": [f"[1.2.3.4]:2222 {ED}"]},  # a ready line of another host
    {"10.0.0.1": [f"[10.0.0.1]:0 {ED}"]},
    {"10.0.0.1": [f"[10.0.0.1]:\u00b2 {ED}"]},  # a digit to str.isdigit, not to int()
    {"10.0.0.1": [f"{ED}\n* {ED}"]},
    {"10.0.0.1": ["ssh-ed25519 AAAA"]},
])
def test_render_refuses_what_would_not_be_pattern_type_base64(tmp_path: Path, entries: dict[str, list[str]]) -> None:
    with pytest.raises(known_hosts.KnownHostsError, match="Fix: "):
        known_hosts.render(entries)
    with pytest.raises(known_hosts.KnownHostsError):
        known_hosts.write(tmp_path / "c1", entries)
    assert not (tmp_path / "c1").exists()  # never written


BAD_ADDRESS = st.one_of(st.sampled_from(["fe80::1%eth0", "::1%\n*", "*", "a b", "!x", "|1|x", "[::1]:22"]),
                        st.text(max_size=12))
ADDRESS = st.integers(0, 9).flatmap(lambda n: BAD_ADDRESS if n < 2 else st.ip_addresses().map(str))
HOSTILE_ITEM = st.one_of(st.sampled_from([f"@cert-authority * {ED}", f"* {ED}", f"@revoked x {ED}", f"|1|a=|b= {ED}",
                                          f"{ED}\n* {ED}", "ssh-ed25519 AAAA"]), st.text(max_size=20))


def _items(address: str) -> st.SearchStrategy[list[str]]:
    """An address's keys and ready lines (its own, at 22 or another port), now and then a hostile one."""
    own = st.sampled_from([ED, f"{address} {ED}", f"[{address}]:2222 {ED}", f"{ED} root@host"])
    return st.lists(st.integers(0, 9).flatmap(lambda n: HOSTILE_ITEM if n < 1 else own), max_size=3)


ENTRIES = st.lists(ADDRESS.flatmap(lambda a: st.tuples(st.just(a), _items(a))), max_size=3).map(dict)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ENTRIES, st.one_of(st.integers(-1, 70000), st.just(22)))
def test_rendered_text_is_only_pattern_type_base64(entries: dict[str, list[str]], port: int) -> None:
    try:
        text = known_hosts.render(entries, port)
    except known_hosts.KnownHostsError:
        event("refused")
        return
    event("rendered lines" if text else "empty")
    assert text == "" or text.endswith("\n")
    for line in text.split("\n")[:-1]:
        assert line[0] not in "*@|!#" and line.isprintable() and line.isascii(), line
        pattern, key_type, blob = line.split(" ")  # exactly 3 fields
        host = pattern[1:pattern.index("]")] if pattern.startswith("[") else pattern
        assert host in entries and not set("*?!%, ") & set(pattern), line
        assert f"{key_type} {blob}" == ED, line
