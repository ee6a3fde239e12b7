"""The local slots' private network namespace (tfcluster/host/netns.py): the holder, nsenter, the idle end, the
fallback with its fix. The namespace tests run real unshare/nsenter; they skip, naming why, only where this kernel
or container forbids namespaces."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tfcluster.host import netns

REPO = Path(__file__).resolve().parents[3]
FAST = (0.5, 0.5)  # idle, grace: the holder ends half a second after its namespace empties

# A TCP server inside: it listens on 127.0.0.1:PORT, proves a client inside connects, says so, then serves on.
SERVER = ("import socket, sys, time\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
          "socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2).close()\n"
          "print('inside connected', flush=True)\n"
          "time.sleep(float(sys.argv[2]))\n")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def holder_or_skip(state_dir: Path, times: tuple[float, float] = FAST) -> netns.Holder:
    try:
        return netns.ensure(str(state_dir), str(REPO), times=times)
    except netns.NetnsUnavailable as error:
        pytest.skip(f"this kernel or container forbids network namespaces: {error}")


def wait_gone(state_dir: Path, timeout: float = 15) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if netns.running(str(state_dir)) is None:
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"the holder of {state_dir} never ended")


# --- pure parts -----------------------------------------------------------------------------------------------------
HELP_238 = " -c, --map-current-user    map current user to itself\n --keep-caps   retain capabilities\n"


@pytest.mark.parametrize(("root", "help_text", "expected"), [
    (True, HELP_238, [netns.ROOT_UNSHARE, netns.USER_UNSHARE]),
    (True, "old", [netns.ROOT_UNSHARE]),
    (False, HELP_238, [netns.USER_UNSHARE]),
])
def test_unshare_candidates(root: bool, help_text: str, expected: list) -> None:
    assert netns.unshare_candidates(root, help_text) == expected


def test_an_old_unshare_is_named_with_the_fix() -> None:
    with pytest.raises(netns.NetnsUnavailable, match=r"older than 2\.38\)\. Fix: install util-linux 2\.38"):
        netns.unshare_candidates(False, " -r, --map-root-user\n")


@pytest.mark.parametrize(("values", "fix"), [
    ({"/proc/sys/kernel/unprivileged_userns_clone": "0"}, "sudo sysctl -w kernel.unprivileged_userns_clone=1"),
    ({"/proc/sys/user/max_user_namespaces": "0"}, "sudo sysctl -w user.max_user_namespaces=15000"),
    ({"/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1"},
     "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
    ({"/proc/sys/kernel/unprivileged_userns_clone": "1"}, "allow user namespaces for your user"),
])
def test_userns_fix_names_the_sysctl_that_forbids_it(values: dict, fix: str) -> None:
    assert fix in netns.userns_fix(values.get)


@pytest.mark.parametrize(("userns", "expected"), [
    (False, ["nsenter", "--target", "42", "--net", "--", "prog", "a b"]),
    (True, ["nsenter", "--target", "42", "--user", "--net", "--preserve-credentials", "--", "prog", "a b"]),
])
def test_wrap(userns: bool, expected: list) -> None:
    assert netns.wrap(["prog", "a b"], netns.Holder(42, 7, userns)) == expected


# --- the real namespace ---------------------------------------------------------------------------------------------
def test_a_client_outside_cannot_reach_a_server_inside(tmp_path: Path) -> None:
    port = free_port()
    first = holder_or_skip(tmp_path / "ns", times=(0.5, 5.0))  # skips where namespaces are forbidden
    with netns.entering(str(tmp_path / "ns"), str(REPO)) as holder:  # the lock: as the process backend starts
        assert holder == first
        server = subprocess.Popen(netns.wrap([sys.executable, "-c", SERVER, str(port), "30"], holder),
                                  stdout=subprocess.PIPE, text=True)
        assert netns.joined(server, holder)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "inside connected"
        assert netns.ns_inode(server.pid) == holder.inode != netns.ns_inode()
        assert not connects(port), "a client outside the namespace must be refused"
        # ... while a second process inside reaches the same port.
        probe = subprocess.run(netns.wrap([sys.executable, "-c", "import socket, sys\n"
                                           "socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2)",
                                           str(port)], holder), capture_output=True, text=True, check=False)
        assert probe.returncode == 0, probe.stderr
        assert netns.ensure(str(tmp_path / "ns"), str(REPO)) == holder  # one holder per state dir
    finally:
        server.kill()
        server.wait()
    assert wait_gone(tmp_path / "ns") < 10  # nothing is left behind once the namespace is empty
    assert not (tmp_path / "ns" / netns.PID_FILE).exists()


def test_two_starters_at_once_share_one_holder(tmp_path: Path) -> None:
    holder_or_skip(tmp_path / "probe")
    code = ("import sys; sys.path.insert(0, sys.argv[2]); from tfcluster.host import netns\n"
            "print(netns.ensure(sys.argv[1], sys.argv[2], times=(5, 5)).pid)\n")
    starters = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "ns"), str(REPO)],
                                 stdout=subprocess.PIPE, text=True) for _ in range(3)]
    pids = {int(p.communicate(timeout=30)[0]) for p in starters}
    assert len(pids) == 1
    os.kill(pids.pop(), 15)


def test_the_holder_waits_for_its_first_process_then_ends_when_it_leaves(tmp_path: Path) -> None:
    holder = holder_or_skip(tmp_path / "ns", times=(0.5, 2.0))
    sleeper = subprocess.Popen(netns.wrap(["sleep", "3"], holder))
    assert netns.joined(sleeper, holder)
    time.sleep(2.5)
    assert netns.running(str(tmp_path / "ns")) == holder, "a holder never ends while a process is inside"
    sleeper.wait()
    assert wait_gone(tmp_path / "ns") < 5


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to act "
                    "as another user")
def test_a_normal_user_gets_a_namespace_of_its_own() -> None:
    """What a laptop does: unshare --user --map-current-user --keep-caps --net, then nsenter --user --net."""
    nobody = pwd.getpwnam("nobody")
    work = Path(tempfile.mkdtemp(prefix="tfc-netns-"))  # pytest's tmp_path is root's own (0700)
    os.chown(work, nobody.pw_uid, nobody.pw_gid)
    try:
        run_as_nobody(work, nobody)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_as_nobody(work: Path, nobody: pwd.struct_passwd) -> None:
    port = free_port()
    code = ("import subprocess, sys; sys.path.insert(0, sys.argv[2]); from tfcluster.host import netns\n"
            "try:\n    h = netns.ensure(sys.argv[1], sys.argv[2], times=(0.5, 0.5))\n"
            "except netns.NetnsUnavailable as e:\n    print('UNAVAILABLE', e); sys.exit(0)\n"
            "print('userns', h.userns, flush=True)\n"
            "subprocess.run(netns.wrap([sys.executable, '-c', sys.argv[3], sys.argv[4], '3'], h), check=True)\n")
    user = subprocess.Popen(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
                             sys.executable, "-c", code, str(work / "ns"), str(REPO), SERVER, str(port)],
                            stdout=subprocess.PIPE, text=True, cwd="/", env={"PATH": os.environ["PATH"],
                                                                             "HOME": str(work)})
    try:
        assert user.stdout is not None
        first = user.stdout.readline().strip()
        if first.startswith("UNAVAILABLE"):
            pytest.skip(f"unprivileged user namespaces are off here: {first}")
        assert first == "userns True"
        assert user.stdout.readline().strip() == "inside connected"
        assert not connects(port)
    finally:
        user.communicate(timeout=30)
    assert user.returncode == 0


def fake_util_linux(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """unshare as in a container that forbids unshare(2) (it says so and fails), first on PATH."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "unshare").write_text("#!/bin/sh\n[ \"$1\" = --help ] && { echo ' --map-current-user --keep-caps'; "
                                   "exit 0; }\necho 'unshare: unshare failed: Operation not permitted' >&2; exit 1\n")
    (tools / "nsenter").write_text("#!/bin/sh\nexit 1\n")
    for tool in tools.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")


def test_no_namespace_is_named_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A container that forbids unshare(2): the reason and the fix, no holder left."""
    fake_util_linux(tmp_path, monkeypatch)
    with pytest.raises(netns.NetnsUnavailable) as caught:
        netns.ensure(str(tmp_path / "ns"), str(REPO))
    assert "unshare failed: Operation not permitted" in caught.value.reason
    assert "run as root" in caught.value.fix or "CAP_SYS_ADMIN" in caught.value.fix
    assert netns.running(str(tmp_path / "ns")) is None


def test_missing_util_linux_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(netns.NetnsUnavailable, match=r"unshare and nsenter not found\. Fix: install util-linux"):
        netns.ensure(str(tmp_path / "ns"), str(REPO))
