"""The lab as a cloud: hosts at given addresses, an image's login user with sudo and a key pair, an sshd that starts
late, a bastion as the only way in, and a host whose key changes (what the AWS twin and the host-key tests need)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab import Lab, LabError, leftovers
from lab.access import port_open

# its module's labs (fixed names): one worker
pytestmark = [pytest.mark.xdist_group("labcloud"), pytest.mark.lab]
LATE = 60  # seconds: sshd of c-w1 starts this late (the others boot in 32 s at load 12: start() returns first)


@pytest.fixture(scope="module")
def user_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = tmp_path_factory.mktemp("keypair") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "keypair", "-f", str(key)], check=True)
    return key


@pytest.fixture(scope="module")
def cloud(request: pytest.FixtureRequest, user_key: Path) -> Iterator[Lab]:
    lab = Lab(slots=("worker", "worker"), name="ptcloud", names=("c-w0", "c-w1"), subnet="10.42.250.0/24",
              addresses=("10.42.250.77", "10.42.250.5"), bastion="c-bastion", user="ubuntu",
              user_key=user_key.with_suffix(".pub").read_text(), sshd_delay={"c-w1": LATE})
    request.addfinalizer(lab.down)
    started = time.monotonic()
    lab.start()
    lab.boot_seconds = time.monotonic() - started
    yield lab


def _ssh(key: Path, known_hosts: Path, target: str, command: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                           "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}",
                           "-o", "ConnectTimeout=5", *extra, target, command],
                          capture_output=True, text=True, timeout=60, check=False)


def test_late_sshd_refuses_then_answers(cloud: Lab) -> None:
    late = cloud.host("c-w1")
    assert cloud.boot_seconds is not None and cloud.boot_seconds < LATE, "start() must not wait for a late sshd"
    assert not port_open(late.address, 22, 1.0)
    waited = time.monotonic()
    while not port_open(late.address, 22, 1.0):
        assert time.monotonic() - waited < LATE + 60, "the late sshd never came up"
        time.sleep(0.5)
    assert cloud.ssh("c-w1", "systemctl is-active ssh.service").stdout.strip() == "active"


def test_hosts_are_at_the_given_addresses_with_the_images_user(cloud: Lab, user_key: Path) -> None:
    cloud.wait_ready(["c-w1"])
    for host in cloud.members:
        assert cloud.ssh(host.name, "ip -4 -o addr show dev host0").stdout.split()[3] == f"{host.address}/24"
        proc = _ssh(user_key, cloud.known_hosts, f"ubuntu@{host.address}", "id -un; sudo -n id -un")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["ubuntu", "root"]
    # the key pair's key is the user's, not root's
    assert _ssh(user_key, cloud.known_hosts, f"root@{cloud.host('c-w0').address}", "true").returncode != 0
    assert [h.name for h in cloud.members] == ["c-w0", "c-w1"]
    assert cloud.bastion is not None and cloud.bastion.address == "10.42.250.254"


def test_isolated_hosts_are_reached_only_through_the_bastion(cloud: Lab, user_key: Path) -> None:
    bastion = cloud.bastion
    assert bastion is not None and bastion.front_address is not None
    member = cloud.host("c-w0")
    cloud.isolate()
    try:
        assert not port_open(member.address, 22, 1.0)
        assert port_open(bastion.front_address, 22, 1.0)
        assert cloud.ssh("c-w0", "hostname").stdout.strip() == "c-w0"  # the lab's own ssh goes through it
        jump = f"ssh -i {user_key} -o BatchMode=yes -o StrictHostKeyChecking=yes " \
               f"-o UserKnownHostsFile={cloud.known_hosts} -W %h:%p ubuntu@{bastion.front_address}"
        proc = _ssh(user_key, cloud.known_hosts, f"ubuntu@{member.address}", "hostname", "-o", f"ProxyCommand={jump}")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "c-w0"
        assert "bastion:" in cloud.hosts_file.read_text()
    finally:
        cloud.rejoin()
    assert port_open(member.address, 22, 2.0)
    assert "bastion:" not in cloud.hosts_file.read_text()


def test_a_changed_host_key_is_refused_naming_the_host(cloud: Lab, tmp_path: Path) -> None:
    before = tmp_path / "known_hosts"
    before.write_text(cloud.known_hosts.read_text())
    old = cloud.host_keys()["c-w0"]
    new = cloud.rekey("c-w0")
    assert new != old and cloud.host_keys()["c-w0"] == new
    address = cloud.host("c-w0").address
    proc = _ssh(cloud.private_key, before, f"root@{address}", "true")
    assert proc.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in proc.stderr and address in proc.stderr
    assert cloud.ssh("c-w0", "hostname").stdout.strip() == "c-w0"  # the lab itself knows the new key
    assert new.split()[1] in cloud.hosts_file.read_text()


def test_a_bastion_needs_a_bastion() -> None:
    lab = Lab(slots=("worker",), name="ptnob", names=("n-w0",))
    lab.spec = lab._make_spec([])
    with pytest.raises(LabError, match="has no bastion"):
        lab.isolate()


def test_down_while_isolated_leaves_nothing(cloud: Lab) -> None:
    """Last in this module: an isolated lab torn down leaves no route, bridge, mount or process behind."""
    subnet = cloud._spec().subnet
    cloud.isolate()
    cloud.down()
    routes = subprocess.run(["ip", "-4", "route", "show", "type", "unreachable"], capture_output=True, text=True,
                            check=True).stdout
    assert subnet not in routes
    assert leftovers(lab=cloud.paths.lab) == []
