"""A private network namespace for the local slots of one job (the process backend, ``CLUSTER=local``).

TensorFlow's gRPC server has no authentication and listens on every interface whatever its TF_CONFIG address. The
local slots of one job therefore run in one network namespace of their own, with only loopback, up: their ports
are reachable from inside it only, never from another local user or from the LAN. The control side needs no
network into it (it reads the slots' files).

A *holder* process creates the namespace and keeps it while the job needs it: as root ``unshare --net``; as any
other user ``unshare --user --map-current-user --keep-caps --net`` (util-linux >= 2.38; ``--keep-caps`` lets the
holder, uid unchanged, bring ``lo`` up). It brings ``lo`` up with an ioctl, says ``ready`` and waits; it ends on its
own once no other process has been in its namespace for ``IDLE_S`` seconds (and not before ``GRACE_S``).

``entering(state_dir, pythonpath)`` takes the state dir's lock, reuses the running holder or starts one, and yields
it; inside the block the caller starts its process with ``wrap(argv, holder)`` (``nsenter``) and waits for
``joined``: a holder ends only under that lock, so it never ends between the two. Where no namespace can be made
(no util-linux, user namespaces disabled, a container that forbids it) ``NetnsUnavailable`` says why and the fix;
``probe(pythonpath)`` finds that out up front with a throwaway namespace (nothing stays). The slots are then refused
(``refusal``) unless the job spec allows the shared network (``allow_shared_network``: ALLOW_SHARED_NETWORK=1).
Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .jobspec import pid_alive, read_int

HOLD_MARK = "tfcluster-netns-hold"  # on the holder's command line (guards pid reuse)
LOCK, PID_FILE, LOG = "lock", "holder.pid", "holder.log"
IDLE_S = 10.0  # the holder ends this long after the last other process left its namespace
GRACE_S = 30.0  # ... but never sooner after its start (nobody may have joined yet)
SCAN_S = 2.0
READY_S = 10.0  # how long a new holder may take to say ready
JOIN_S = 10.0  # how long a wrapped process may take to enter the namespace
ROOT_UNSHARE = ("unshare", "--net")
USER_UNSHARE = ("unshare", "--user", "--map-current-user", "--keep-caps", "--net")
# sysctl files that forbid an unprivileged user namespace when they hold the value, and the fix for each.
USERNS_SYSCTLS: tuple[tuple[str, str, str], ...] = (
    ("/proc/sys/kernel/unprivileged_userns_clone", "0", "sudo sysctl -w kernel.unprivileged_userns_clone=1"),
    ("/proc/sys/user/max_user_namespaces", "0", "sudo sysctl -w user.max_user_namespaces=15000"),
    ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
     "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
)
_IFREQ = "16sH14x"  # struct ifreq: the name, then ifr_flags
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


class NetnsUnavailable(RuntimeError):
    """No private namespace can be made here: ``reason`` says why, ``fix`` what to do."""

    def __init__(self, reason: str, fix: str) -> None:
        super().__init__(f"{reason}. Fix: {fix}")
        self.reason = reason
        self.fix = fix


@dataclass(frozen=True)
class Holder:
    pid: int
    inode: int  # of its network namespace
    userns: bool  # the namespace belongs to a user namespace of its own (a non-root holder): nsenter joins both


# --- small pure parts -----------------------------------------------------------------------------------------------
def unshare_candidates(root: bool, help_text: str) -> list[tuple[str, ...]]:
    """The unshare command lines to try, in order (root: a plain one, then a user namespace, as in a container)."""
    user_ok = all(option in help_text for option in ("--map-current-user", "--keep-caps"))
    if not root and not user_ok:
        raise NetnsUnavailable("unshare lacks --map-current-user/--keep-caps (util-linux older than 2.38)",
                               "install util-linux 2.38 or newer, or run as root")
    return [ROOT_UNSHARE, *([USER_UNSHARE] if user_ok else [])] if root else [USER_UNSHARE]


def userns_fix(read: Callable[[str], str | None]) -> str:
    """How to allow an unprivileged user namespace here (``read`` returns a sysctl file's value, None if absent)."""
    found = [fix for path, bad, fix in USERNS_SYSCTLS if read(path) == bad]
    if found:
        return " and ".join(found) + " (or run as root)"
    return "allow user namespaces for your user (a container must permit unshare(2)), or run as root"


def wrap(argv: Sequence[str], holder: Holder) -> list[str]:
    """``argv`` run inside the holder's namespace (with the caller's own uid, gid and groups)."""
    joins = ["--user", "--net", "--preserve-credentials"] if holder.userns else ["--net"]
    return ["nsenter", "--target", str(holder.pid), *joins, "--", *argv]


# --- /proc ----------------------------------------------------------------------------------------------------------
def ns_inode(pid: int | str = "self", kind: str = "net") -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def others_in(inode: int, me: int) -> bool:
    """Whether a process other than ``me`` is in the network namespace ``inode``."""
    return any(entry.isdigit() and int(entry) != me and ns_inode(entry) == inode for entry in os.listdir("/proc"))


def joined(proc: subprocess.Popen[bytes], holder: Holder, timeout: float = JOIN_S) -> bool:
    """Wait until ``proc`` (started through :func:`wrap`) is in the holder's namespace; False when it exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ns_inode(proc.pid) == holder.inode:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    return False


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


# --- the control side -----------------------------------------------------------------------------------------------
def running(state_dir: str) -> Holder | None:
    """The live holder of ``state_dir``, if any (its pid file, its command line, a namespace not ours)."""
    pid = read_int(os.path.join(state_dir, PID_FILE))
    if not (pid and pid_alive(pid, HOLD_MARK) and pid_alive(pid, os.path.abspath(state_dir))):
        return None
    inode = ns_inode(pid)
    if inode is None or inode == ns_inode():
        return None
    return Holder(pid, inode, ns_inode(pid, "user") != ns_inode("self", "user"))


def _wait_ready(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = b""
    while time.monotonic() < deadline and not line.endswith(b"\n"):
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(proc.stdout.fileno(), 64)
        if not chunk:
            break
        line += chunk
    proc.stdout.close()
    return line.strip() == b"ready"


def _try_start(state_dir: str, unshare: Sequence[str], pythonpath: str, python: str,
               times: tuple[float, float]) -> Holder | str:
    """Start a holder with one unshare command line: the holder, or what went wrong."""
    log_path = os.path.join(state_dir, LOG)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": pythonpath, "LANG": "C.UTF-8"}
    argv = [*unshare, "--", python, "-m", "tfcluster.host.netns", "hold", os.path.abspath(state_dir), HOLD_MARK,
            *(str(t) for t in times)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env,
                                cwd="/", start_new_session=True, close_fds=True)
    if _wait_ready(proc, READY_S):
        inode = ns_inode(proc.pid)
        if inode is not None:
            pid_file = os.path.join(state_dir, PID_FILE)
            with open(pid_file + ".new", "w", encoding="utf-8") as handle:
                handle.write(f"{proc.pid}\n")
            os.replace(pid_file + ".new", pid_file)
            return Holder(proc.pid, inode, unshare == USER_UNSHARE)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    text = (_read(log_path) or "").splitlines()
    return text[-1][:300] if text else f"exit code {proc.returncode}"


def _candidates() -> tuple[bool, list[tuple[str, ...]]]:
    """(root, the unshare command lines to try here); NetnsUnavailable when util-linux cannot make one."""
    missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
    if missing:
        raise NetnsUnavailable(f"{' and '.join(missing)} not found", "install util-linux (2.38 or newer)")
    helped = subprocess.run(["unshare", "--help"], capture_output=True, text=True, check=False)
    root = os.geteuid() == 0
    return root, unshare_candidates(root, helped.stdout + helped.stderr)


def _unavailable(root: bool, errors: list[str]) -> NetnsUnavailable:
    fix = userns_fix(_read) if not root else ("run where namespaces may be created (a container needs "
                                              "CAP_SYS_ADMIN, e.g. docker run --cap-add SYS_ADMIN)")
    return NetnsUnavailable("no network namespace could be made (" + "; ".join(errors) + ")", fix)


def start_holder(state_dir: str, pythonpath: str, python: str = sys.executable,
                 times: tuple[float, float] = (IDLE_S, GRACE_S)) -> Holder:
    """Start a holder for ``state_dir`` (the caller holds its lock); NetnsUnavailable when none can be made."""
    root, candidates = _candidates()
    errors: list[str] = []
    for unshare in candidates:
        started = _try_start(state_dir, unshare, pythonpath, python, times)
        if isinstance(started, Holder):
            return started
        errors.append(f"`{' '.join(unshare)}`: {started}")
    raise _unavailable(root, errors)


def probe(pythonpath: str, python: str = sys.executable) -> None:
    """Make a namespace the way a holder does (unshare, ``lo`` up) and leave it at once: NetnsUnavailable when
    none can be made here. One short process per unshare line; nothing stays."""
    root, candidates = _candidates()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": pythonpath, "LANG": "C.UTF-8"}
    errors: list[str] = []
    for unshare in candidates:
        argv = [*unshare, "--", python, "-m", "tfcluster.host.netns", "probe"]
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env, cwd="/",
                                  timeout=READY_S, check=False)
        except subprocess.TimeoutExpired:
            errors.append(f"`{' '.join(unshare)}`: no answer in {READY_S:.0f} s")
            continue
        if done.returncode == 0 and done.stdout.strip() == b"ready":
            return
        text = done.stderr.decode("utf-8", "replace").strip().splitlines()
        errors.append(f"`{' '.join(unshare)}`: {text[-1][:300] if text else f'exit code {done.returncode}'}")
    raise _unavailable(root, errors)


# --- the policy: refuse the shared network unless the job allows it ---------------------------------------------------
ALLOW_FIELD = "allow_shared_network"  # the job spec's field (the tf_job role: tf_job_allow_shared_network)
ALLOW_HINT = "or ALLOW_SHARED_NETWORK=1 to run with the training ports open to this machine's users and network"


def shared_allowed(spec: Mapping[str, Any]) -> bool:
    """Whether the spec lets its local slots run in the shared network when no namespace can be made."""
    value = spec.get(ALLOW_FIELD)
    return value is True or str(value).strip().lower() in ("1", "true")


def refusal(job: str, error: Exception) -> str:
    """Why the local slots of ``job`` are not started (``error``: a NetnsUnavailable), and the two ways on."""
    reason, fix = getattr(error, "reason", str(error)), getattr(error, "fix", "run as root")
    return (f"the local slots of job {job} were not started: they run only in a private network namespace, and none "
            f"can be made here ({reason}); TensorFlow's gRPC server has no authentication and listens on every "
            f"interface. Fix: {fix}, {ALLOW_HINT}")


@contextlib.contextmanager
def entering(state_dir: str, pythonpath: str, python: str = sys.executable,
             times: tuple[float, float] = (IDLE_S, GRACE_S)) -> Iterator[Holder]:
    """Hold ``state_dir``'s lock, yield its holder (started when none runs): start the joining process inside."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(state_dir, LOCK), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield running(state_dir) or start_holder(state_dir, pythonpath, python, times)
    finally:
        os.close(fd)


def ensure(state_dir: str, pythonpath: str, python: str = sys.executable,
           times: tuple[float, float] = (IDLE_S, GRACE_S)) -> Holder:
    """The holder of ``state_dir``, started when none runs (for a caller that joins it at once)."""
    with entering(state_dir, pythonpath, python, times) as holder:
        return holder


# --- the holder -----------------------------------------------------------------------------------------------------
def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | IFF_UP))


def _end_if_alone(state_dir: str, inode: int) -> bool:
    """Under the lock: still alone? Then give up the pid file and end (the lock goes with the process)."""
    fd = os.open(os.path.join(state_dir, LOCK), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # someone is about to join
        os.close(fd)
        return False
    if others_in(inode, os.getpid()):
        os.close(fd)
        return False
    pid_file = os.path.join(state_dir, PID_FILE)
    if read_int(pid_file) == os.getpid():
        os.unlink(pid_file)
    return True


def hold(state_dir: str, idle: float = IDLE_S, grace: float = GRACE_S, scan: float = SCAN_S) -> int:
    """The holder's loop (run inside the new namespace by :func:`start_holder`)."""
    loopback_up()
    inode = ns_inode()
    assert inode is not None
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the starter reads to the end of the line only; nothing more comes
    started = last_busy = time.monotonic()
    while True:
        time.sleep(scan)
        now = time.monotonic()
        if others_in(inode, os.getpid()):
            last_busy = now
        elif now - last_busy >= idle and now - started >= grace and _end_if_alone(state_dir, inode):
            return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["probe"]:  # run by probe() inside a throwaway namespace: lo comes up, then it ends
        loopback_up()
        sys.stdout.write("ready\n")
        return 0
    if len(args) >= 2 and args[0] == "hold":  # hold STATE_DIR [MARK [IDLE GRACE]]
        idle, grace = (float(args[3]), float(args[4])) if len(args) >= 5 else (IDLE_S, GRACE_S)
        return hold(args[1], idle=idle, grace=grace, scan=min(SCAN_S, max(0.1, idle / 4)))
    sys.stderr.write("usage: python3 -m tfcluster.host.netns hold STATE_DIR | probe (run by the process "
                     "backend)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
