"""The process backend: a job's task as a supervised background process (hosts without systemd, local slots).

``start`` launches ``python3 -m tfcluster.host.supervisor supervise SPEC`` in its own session; the supervisor runs
the task with systemd's Restart=on-failure semantics (``max_restarts``, ``restart_sec``; exit 3 is a success that
is never restarted), a deadline (``max_duration``: SIGTERM, then SIGKILL after ``stop_timeout``, state ``timeout``),
pid files and a state file that :mod:`tfcluster.host.jobstatus` reads. Run as root, it drops the task to the spec's
user and group (a local slot runs as you). ``stop`` ends it; ``finalize`` writes the manifest and DONE for a script
that wrote none. Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from ..core.contract import DONE
from ..core.files import atomic_write_text, fsync_tree, write_manifest
from . import netns
from .asuser import run_as
from .jobspec import (
    FAILED,
    PREEMPTED,
    RESTARTING,
    RUNNING,
    STARTING,
    STOPPED,
    SUCCEEDED,
    SUPERVISE_MARK,
    TIMEOUT,
    JobError,
    dumps,
    load_spec,
    main_pid_path,
    parse_env_file,
    pid_alive,
    read_int,
    read_state,
    state_path,
    supervisor_pid_path,
)

FAILURE = "failure"  # an exit that counts against the restart budget


def write_state(spec: Mapping[str, Any], **fields: Any) -> None:
    current = read_state(spec)
    current.update(fields)
    current["updated_at"] = time.time()
    atomic_write_text(state_path(spec), dumps(current) + "\n")


def supervisor_alive(spec: Mapping[str, Any]) -> tuple[bool, int | None]:
    pid = read_int(supervisor_pid_path(spec))
    return pid_alive(pid, SUPERVISE_MARK) and pid_alive(pid, spec["run_dir"]), pid


def child_env(spec: Mapping[str, Any]) -> dict[str, str]:
    """A clean environment like systemd gives a unit: a base set plus the env file (never the caller's env)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": os.environ.get("HOME", "/")}
    env.update({str(k): str(v) for k, v in (spec.get("base_env") or {}).items()})
    with open(spec["env_file"], encoding="utf-8") as handle:
        env.update(parse_env_file(handle.read()))
    return env


def classify_exit(returncode: int, spec: Mapping[str, Any]) -> tuple[str, int, int | None]:
    """(outcome, exit_code, signal): outcome succeeded, preempted or failure (a signal reads like a shell's 128+N)."""
    if returncode < 0:
        return FAILURE, 128 - returncode, -returncode
    if returncode in spec["success_exit_status"]:
        prevented = returncode in spec["restart_prevent_exit_status"] and returncode != 0
        return (PREEMPTED if prevented else SUCCEEDED), returncode, None
    return FAILURE, returncode, None


def drop_to(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Popen arguments that run the task as the spec's user when we are root (nothing otherwise)."""
    if os.geteuid() != 0 or not spec.get("user"):
        return {}
    try:
        user = pwd.getpwnam(spec["user"])
        gid = grp.getgrnam(spec["group"]).gr_gid if spec.get("group") else user.pw_gid
    except KeyError as error:
        raise JobError(f"job user/group {spec.get('user')}:{spec.get('group')} does not exist on this host. Fix: run "
                       "site.yml (the trainer role creates them)") from error
    return {"user": user.pw_uid, "group": gid, "extra_groups": []}


def open_log(path: str) -> Any:
    """The task's log for appending, never through a link nor a second name of another file (root opens it)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise JobError(f"log {path} is a symbolic link: the job's output is never written through one. Fix: remove "
                       "it and start the job again") from error
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise JobError(f"log {path} is not a plain file of its own (a link count of {info.st_nlink}). Fix: remove "
                       "it and start the job again")
    return os.fdopen(fd, "ab")


class Supervisor:
    """One supervised task: run, restart on failure within the budget, honour stop requests and the deadline."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.stopping = False
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        duration = float(spec.get("max_duration") or 0)
        self.deadline = time.time() + duration if duration > 0 else None

    def on_signal(self, _signum: int, _frame: Any) -> None:
        self.stopping = True
        self.terminate()

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, sig)

    def launch(self) -> subprocess.Popen[bytes]:
        with open_log(self.spec["log"]) as log:
            proc = subprocess.Popen(
                self.spec["argv"], env=child_env(self.spec), cwd=self.spec["workdir"], stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **drop_to(self.spec))
        self.proc = proc
        atomic_write_text(main_pid_path(self.spec), f"{proc.pid}\n")
        write_state(self.spec, state=RUNNING, pid=proc.pid, restarts=self.restarts)
        if self.stopping:
            self.terminate()
        return proc

    def wait_child(self, proc: subprocess.Popen[bytes]) -> tuple[int, bool]:
        """(returncode, hit the deadline)."""
        while True:
            remaining = None if self.deadline is None else self.deadline - time.time()
            if remaining is not None and remaining <= 0:
                self.terminate()
                try:
                    return proc.wait(timeout=float(self.spec["stop_timeout"])), True
                except subprocess.TimeoutExpired:
                    self.terminate(signal.SIGKILL)
                    return proc.wait(), True
            try:
                return proc.wait(timeout=None if remaining is None else min(remaining, 1.0)), False
            except subprocess.TimeoutExpired:
                continue

    def pause(self, seconds: float) -> bool:
        """Sleep before a restart; False when a stop request or the deadline came first."""
        until = time.time() + seconds
        while time.time() < until and not self.stopping:
            if self.deadline is not None and time.time() >= self.deadline:
                return False
            time.sleep(0.2)
        return not self.stopping

    def record_end(self, returncode: int, timed_out: bool) -> bool:
        """Record how the task ended; True when it is to be restarted."""
        code, signum = (returncode, None) if returncode >= 0 else (128 - returncode, -returncode)
        if timed_out:
            write_state(self.spec, state=TIMEOUT, exit_code=code, signal=signum)
            return False
        if self.stopping:
            write_state(self.spec, state=STOPPED, exit_code=code, signal=signum)
            return False
        outcome, code, signum = classify_exit(returncode, self.spec)
        if outcome != FAILURE:
            write_state(self.spec, state=outcome, exit_code=code, signal=signum)
            return False
        if self.restarts >= int(self.spec["max_restarts"]) or code in self.spec["restart_prevent_exit_status"]:
            write_state(self.spec, state=FAILED, exit_code=code, signal=signum)
            return False
        self.restarts += 1
        write_state(self.spec, state=RESTARTING, exit_code=code, signal=signum, restarts=self.restarts)
        return True

    def run(self) -> int:
        write_state(self.spec, state=RUNNING, restarts=0, exit_code=None, signal=None, started_at=time.time(),
                    deadline=self.deadline)
        while True:
            returncode, timed_out = self.wait_child(self.launch())
            if not self.record_end(returncode, timed_out):
                return 0
            if not self.pause(float(self.spec["restart_sec"])):
                write_state(self.spec, state=STOPPED if self.stopping else TIMEOUT)
                return 0


def supervise(spec_file: str) -> int:
    """The supervisor process (``start`` launches it): run the task until it ends for good."""
    spec = load_spec(spec_file)
    os.makedirs(spec["run_dir"], exist_ok=True)
    atomic_write_text(supervisor_pid_path(spec), f"{os.getpid()}\n")
    supervisor = Supervisor(spec)
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    affinity = [int(cpu) for cpu in spec["cpu_affinity"]]
    if affinity and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, affinity)  # the task inherits it (like systemd's CPUAffinity=)
    try:
        return supervisor.run()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(supervisor_pid_path(spec))


def _pythonpath(spec: Mapping[str, Any]) -> str:
    """Where ``tfcluster.host`` lives for the supervisor: the spec's release, else this file's package root."""
    if spec.get("pythonpath"):
        return str(spec["pythonpath"])
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isfile(os.path.join(here, "tfcluster", "host", "supervisor.py")):
        return here
    raise JobError(f"job spec of {spec['name']} names no pythonpath (the release holding tfcluster/host). Fix: render "
                   "the job again (train.yml)")


def _prepare(spec: Mapping[str, Any]) -> None:
    for key in ("run_dir", "workdir", "model_dir"):
        os.makedirs(spec[key], exist_ok=True)
    os.makedirs(os.path.dirname(spec["log"]), exist_ok=True)
    if not os.path.isfile(spec["env_file"]):
        raise JobError("env file {} is missing. Fix: render the job (train.yml)".format(spec["env_file"]))
    drop_to(spec)  # fails early when the user is missing


def netns_note(spec: Mapping[str, Any], error: Exception) -> str:
    """What ``make train`` says once when the local slots could not get their own network namespace."""
    reason, fix = getattr(error, "reason", str(error)), getattr(error, "fix", "run as root")
    return (f"the local slots of job {spec['name']} run without a private network namespace ({reason}): their "
            "training ports are open to every user of this machine and, as TensorFlow listens on every interface, "
            f"to any machine that reaches it. Fix: {fix}")


def refuse_shared_network(spec: Mapping[str, Any]) -> None:
    """Up front (the job module's render, before any slot starts): JobError when the spec's local slots could get
    no private network namespace here and the spec does not allow the shared network. Nothing stays."""
    state_dir = spec.get("netns_dir")
    if not state_dir or netns.shared_allowed(spec) or netns.running(state_dir) is not None:
        return
    try:
        netns.probe(_pythonpath(spec))
    except netns.NetnsUnavailable as error:
        raise JobError(netns.refusal(spec["name"], error)) from error


def _launch(spec: Mapping[str, Any], argv: list[str], popen: dict[str, Any]) -> tuple[subprocess.Popen[bytes],
                                                                                      dict[str, Any]]:
    """Start the supervisor: inside the job's private network namespace when the spec names one (``netns_dir``:
    local slots; its task and every restart inherit it, and it keeps the namespace alive), else as it is. Where
    none can be made the start is refused (JobError, nothing launched) unless the spec allows the shared network."""
    state_dir = spec.get("netns_dir")
    if not state_dir:
        return subprocess.Popen(argv, **popen), {}
    try:
        with netns.entering(state_dir, popen["env"]["PYTHONPATH"]) as holder:
            proc = subprocess.Popen(netns.wrap(argv, holder), **popen)
            if not netns.joined(proc, holder):
                _kill_hard(proc.pid)
                raise JobError(f"the supervisor of job {spec['name']} could not enter the network namespace of "
                               f"{state_dir} (holder pid {holder.pid}): see {spec['log']}. Fix: stop the job "
                               f"(make stop), remove {state_dir} and start it again")
            return proc, {"netns": "private"}
    except netns.NetnsUnavailable as error:
        if not netns.shared_allowed(spec):
            raise JobError(netns.refusal(spec["name"], error)) from error
        note = netns_note(spec, error)
    return subprocess.Popen(argv, **popen), {"netns": "shared", "netns_note": note}


def start(spec_file: str, check: bool = False) -> dict[str, Any]:
    """Start the task unless its supervisor runs already (then: changed false)."""
    if check and not os.path.isfile(spec_file):  # a dry run on a fresh host: the spec is not rendered either
        return {"changed": True, "state": RUNNING, "msg": "would start"}
    spec = load_spec(spec_file)
    alive, pid = supervisor_alive(spec)
    if alive:
        return {"changed": False, "state": RUNNING, "supervisor_pid": pid, "msg": "already running"}
    if check:
        return {"changed": True, "state": RUNNING, "msg": "would start"}
    _prepare(spec)
    with contextlib.suppress(OSError):
        os.unlink(main_pid_path(spec))
    before = read_state(spec)
    atomic_write_text(state_path(spec), dumps({"state": STARTING, "updated_at": time.time()}) + "\n")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": _pythonpath(spec), "LANG": "C.UTF-8"}
    argv = [sys.executable, "-m", "tfcluster.host.supervisor", "supervise", os.path.abspath(spec_file),
            SUPERVISE_MARK, spec["run_dir"]]
    with open_log(spec["log"]) as log:
        log.write(("--- tfcluster job start {} ---\n".format(time.strftime("%Y-%m-%dT%H:%M:%S"))).encode())
        log.flush()
        try:
            proc, network = _launch(spec, argv, {"stdin": subprocess.DEVNULL, "stdout": log,
                                                 "stderr": subprocess.STDOUT, "start_new_session": True,
                                                 "close_fds": True, "env": env, "cwd": "/"})
        except JobError as error:  # nothing runs: the state says what it said before (none: no file), the log why
            _restore_state(spec, before)
            log.write(f"tfcluster: {error}\n".encode())
            raise
    deadline = time.time() + 10
    while time.time() < deadline:
        if read_int(main_pid_path(spec)) and read_state(spec).get("state") != STARTING:
            break
        if proc.poll() is not None:
            raise JobError("the supervisor exited at once (code {}): see {}".format(proc.returncode, spec["log"]))
        time.sleep(0.05)
    return {"changed": True, "state": RUNNING, "supervisor_pid": proc.pid, "pid": read_int(main_pid_path(spec)),
            **network}


def _restore_state(spec: Mapping[str, Any], before: Mapping[str, Any]) -> None:
    if before:
        atomic_write_text(state_path(spec), dumps(before) + "\n")
        return
    with contextlib.suppress(OSError):
        os.unlink(state_path(spec))


def _kill_hard(*pids: int | None) -> None:
    for victim in pids:
        if victim and pid_alive(victim):
            try:
                os.killpg(victim, signal.SIGKILL)
            except OSError:
                with contextlib.suppress(OSError):
                    os.kill(victim, signal.SIGKILL)


def stop(spec_file: str, check: bool = False) -> dict[str, Any]:
    """SIGTERM the task (through its supervisor), SIGKILL after stop_timeout; a no-op when nothing runs."""
    spec = load_spec(spec_file)
    alive, pid = supervisor_alive(spec)
    main_pid = read_int(main_pid_path(spec))
    if not alive and not pid_alive(main_pid):
        return {"changed": False, "state": read_state(spec).get("state") or STOPPED}
    if check:
        return {"changed": True, "state": STOPPED, "msg": "would stop"}
    if alive and pid:
        os.kill(pid, signal.SIGTERM)
    elif main_pid:
        with contextlib.suppress(OSError):
            os.killpg(main_pid, signal.SIGTERM)
    deadline = time.time() + float(spec["stop_timeout"])
    while time.time() < deadline and (supervisor_alive(spec)[0] or pid_alive(main_pid)):
        time.sleep(0.1)
    _kill_hard(main_pid, pid)
    if read_state(spec).get("state") in (RUNNING, RESTARTING, STARTING):
        write_state(spec, state=STOPPED)
    return {"changed": True, "state": STOPPED}


def _finalize_here(model_dir: str) -> dict[str, Any]:
    """fsync, MANIFEST (maybe empty), DONE, as whoever runs this (never root over a directory of the job's)."""
    if os.path.isfile(os.path.join(model_dir, DONE)):
        return {"changed": False, "files": None, "msg": f"{DONE} already present"}
    fsync_tree(model_dir)
    files = write_manifest(model_dir)
    done = {"finished_at": time.time(), "writer": "tfcluster.host.supervisor"}
    atomic_write_text(os.path.join(model_dir, DONE), dumps(done) + "\n")
    return {"changed": True, "files": files}


def _open_model_dir(model_dir: str) -> int:
    """The model dir as a directory fd, never through a link (its parent, the job user's home, is the job's)."""
    with contextlib.suppress(FileExistsError):
        os.makedirs(model_dir)  # mkdir follows no link: an existing link is left for the open to refuse
    try:
        return os.open(model_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise JobError(f"model dir {model_dir} is not a directory of its own ({error.strerror}): the manifest and "
                       f"{DONE} are never written through a link. Fix: remove {model_dir} and run the job "
                       "again") from error


def _as_owner(fd: int, model_dir: str) -> dict[str, Any]:
    """Run :func:`_finalize_here` in a child that works in the directory ``fd`` as the directory's owner (root
    stays root only for a root-owned one): every file it reads or writes is then the owner's own business."""
    owner = os.fstat(fd)
    result = run_as(owner.st_uid, owner.st_gid, lambda: _finalize_here("."), cwd_fd=fd,
                    what="the finalizing process")
    if "error" in result:
        raise JobError(f"finalize of model dir {model_dir} as its owner (uid {owner.st_uid}) failed: "
                       f"{result['error']}. Fix: every file in the model dir must be readable by the job user "
                       "(the user that owns the model dir); see make logs")
    return result


def finalize(model_dir: str, check: bool = False) -> dict[str, Any]:
    """A script that wrote no DONE: fsync its files, then MANIFEST (maybe empty), then DONE. A no-op after DONE.

    Run as root (the job module with become), it opens the model dir with O_NOFOLLOW and does the work as the
    directory's owner, the job user, in a child process: root never follows a path the job controls, and what it
    writes is the job user's own (the collector reads as that user)."""
    if check:
        done = os.path.isfile(os.path.join(model_dir, DONE))
        return ({"changed": False, "files": None, "msg": f"{DONE} already present"} if done else
                {"changed": True, "files": None, "msg": f"would write the manifest and {DONE}"})
    if os.geteuid() != 0:
        os.makedirs(model_dir, exist_ok=True)
        return _finalize_here(model_dir)
    fd = _open_model_dir(model_dir)
    try:
        return _as_owner(fd, model_dir)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) >= 2 and args[0] == "supervise":
        return supervise(args[1])
    sys.stderr.write("usage: python3 -m tfcluster.host.supervisor supervise SPEC (started by the job module)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
