"""A task's status and log, for both backends (a systemd unit, or the process backend's supervisor).

    python3 -m tfcluster.host.jobstatus status SPEC [--unit UNIT] [--lines N]      one JSON line
    python3 -m tfcluster.host.jobstatus serve SPEC [--unit UNIT] [--lines N]       one JSON line per line read
    python3 -m tfcluster.host.jobstatus logs SPEC [--unit UNIT] [--lines N] [--follow]

``status`` prints the task's state (contract.JOB_STATES), exit code, restarts, pid, start time, the model dir's
facts (DONE, the program's status.json and its age) and the last log lines. ``serve`` answers the same line for
every line it reads on stdin, until end of input (or SERVE_IDLE seconds without a question): the wait keeps one per
host over one ssh session, so a poll costs the status, not a Python start, its imports and an ssh session (on a lab
host, 62 ms of CPU per poll went to the start and the imports; ``make bench``: bench.wait_poll). ``logs`` prints the
log; with ``--follow`` it keeps printing until the task no longer runs. The unit comes from ``--unit`` or the spec
(systemd backend). Standard library only: the wait loop runs it on every host (PYTHONPATH=<release>), ``make
status`` and ``make logs`` too, and the job_info module imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import select
import stat
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.contract import DONE, EXIT_PREEMPTED, STATUS, is_digits
from .jobspec import (
    ACTIVE_STATES,
    FAILED,
    INACTIVE,
    LOG_WINDOW,
    LOST,
    PREEMPTED,
    RESTARTING,
    RUNNING,
    SMALL_MAX_BYTES,
    STARTING,
    STATUS_MAX_BYTES,
    STOPPED,
    SUCCEEDED,
    SUPERVISE_MARK,
    TIMEOUT,
    JobError,
    UnsafeFile,
    dumps,
    last_exit_path,
    load_spec,
    main_pid_path,
    mtime,
    open_dir,
    open_regular,
    pid_alive,
    read_capped,
    read_fd,
    read_int,
    read_state,
    supervisor_pid_path,
    tail,
    unreadable_reason,
)

UNIT_KEYS = ("ActiveState", "SubState", "Result", "ExecMainStatus", "ExecMainCode", "NRestarts", "MainPID",
             "ExecMainStartTimestampMonotonic", "RuntimeMaxUSec")
NO_LIMIT = ("", "infinity", "0")
SERVE_IDLE = 900.0  # seconds `serve` waits for the next question (a wait whose ssh vanished), then ends


# --- the process backend --------------------------------------------------------------------------------------------
def process_status(spec: Mapping[str, Any], lines: int) -> dict[str, Any]:
    state = read_state(spec)
    pid = read_int(supervisor_pid_path(spec))
    alive = pid_alive(pid, SUPERVISE_MARK) and pid_alive(pid, spec["run_dir"])
    name = state.get("state") or INACTIVE
    if name == STARTING:
        name = RUNNING
    if name in ACTIVE_STATES and not alive:
        name = LOST
    return {
        "state": name,
        "exit_code": state.get("exit_code"),
        "signal": state.get("signal"),
        "restarts": state.get("restarts", 0),
        "pid": read_int(main_pid_path(spec)) if alive else None,
        "started_at": state.get("started_at"),
        "log_mtime": mtime(spec["log"]),
        "log_tail": tail(spec["log"], lines),
    }


# --- the systemd backend --------------------------------------------------------------------------------------------
def read_last_exit(run_dir: str) -> list[str] | None:
    """``SERVICE_RESULT EXIT_CODE EXIT_STATUS`` written by the unit's ExecStopPost (None: never ended here)."""
    try:
        fields = read_capped(last_exit_path(run_dir), SMALL_MAX_BYTES)[0].decode("utf-8", "replace").split()
    except OSError:
        return None
    return fields if len(fields) == 3 else None


def last_exit_state(fields: Sequence[str] | None, deadline: bool = False) -> tuple[str, int | None]:
    """State and exit code of a task whose unit systemd already unloaded (it forgets inactive units)."""
    if fields is None:
        return INACTIVE, None
    result, code, status = fields
    exit_code = int(status) if is_digits(status) else None
    if result == "timeout" and deadline:
        return TIMEOUT, exit_code
    if code == "exited" and exit_code == EXIT_PREEMPTED:
        return PREEMPTED, exit_code
    if result == "success" and code == "exited" and exit_code == 0:
        return SUCCEEDED, 0
    return STOPPED, exit_code


def systemd_state(props: Mapping[str, str]) -> str:
    """A unit's task state from ``systemctl show``."""
    active = props.get("ActiveState", "inactive")
    if active in ("active", "reloading"):
        return RUNNING
    if active in ("activating", "deactivating"):
        return RESTARTING if props.get("SubState") == "auto-restart" else RUNNING
    if props.get("Result") == "timeout" and props.get("RuntimeMaxUSec", "infinity") not in NO_LIMIT:
        return TIMEOUT  # RuntimeMaxSec= (the job's deadline) ended it
    if active == "failed":
        return FAILED
    if props.get("ExecMainStartTimestampMonotonic", "0") in ("", "0"):
        return INACTIVE
    status = props.get("ExecMainStatus", "0")
    if status == str(EXIT_PREEMPTED):
        return PREEMPTED
    if props.get("Result") == "success" and status == "0":
        return SUCCEEDED
    return STOPPED


def _run(argv: Sequence[str]) -> str:
    try:
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False,
                              timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def unit_props(unit: str) -> dict[str, str]:
    out = _run(["systemctl", "show", unit, "-p", ",".join(UNIT_KEYS)])
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal_tail(unit: str, lines: int) -> tuple[list[str], float | None]:
    """The unit's last ``lines`` journal messages and the time of the newest (one journalctl run)."""
    out = _run(["journalctl", "-u", unit, "-n", str(max(lines, 1)), "--no-pager", "-o", "json",
                "--output-fields=MESSAGE"])
    messages, newest = [], None
    for line in out.splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError):
            entry = json.loads(line)
            newest = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
            message = entry.get("MESSAGE")
            if isinstance(message, list):  # journald stores non-UTF-8 messages as byte arrays
                message = bytes(message).decode("utf-8", "replace")
            messages.append(str(message or ""))
    return (messages[-lines:] if lines > 0 else []), newest


def _started_at(monotonic_usec: str) -> float | None:
    """The wall-clock time of a CLOCK_MONOTONIC timestamp in microseconds (systemd's *TimestampMonotonic)."""
    if monotonic_usec in ("", "0"):
        return None
    with contextlib.suppress(ValueError):
        return time.time() - (time.monotonic() - int(monotonic_usec) / 1e6)
    return None


def unit_status(unit: str, lines: int, run_dir: str | None = None, deadline: bool = False) -> dict[str, Any]:
    props = unit_props(unit)
    log_tail, log_mtime = journal_tail(unit, lines)
    state = systemd_state(props)
    exit_code: int | None = int(props.get("ExecMainStatus", "0") or 0)
    if state == INACTIVE and run_dir:  # unloaded after it ended: how it ended is in run_dir/last-exit
        state, last_code = last_exit_state(read_last_exit(run_dir), deadline)
        exit_code = last_code if last_code is not None else exit_code
    main_pid = int(props.get("MainPID", "0") or 0)
    return {
        "state": state,
        "exit_code": exit_code,
        "signal": None,
        "restarts": int(props.get("NRestarts", "0") or 0),
        "pid": main_pid or None,
        "started_at": _started_at(props.get("ExecMainStartTimestampMonotonic", "0")),
        "log_mtime": log_mtime,
        "log_tail": log_tail,
        "unit": unit,
    }


# --- both -----------------------------------------------------------------------------------------------------------
def _is_regular_at(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _progress_at(dir_fd: int) -> tuple[Any, float | None, str | None]:
    """(the program's status.json as a dict or None, its mtime, why it was not read or None)."""
    try:
        fd = open_regular(STATUS, dir_fd, single_link=True)
    except FileNotFoundError:
        return None, None, None  # a script that writes none
    except OSError as error:
        return None, None, f"{STATUS} unreadable: {unreadable_reason(error)}"
    mark = None
    try:
        info = os.fstat(fd)
        mark = info.st_mtime
        if info.st_size > STATUS_MAX_BYTES:
            raise UnsafeFile(errno.EFBIG, f"larger than {STATUS_MAX_BYTES} bytes ({info.st_size})")
        raw = read_fd(fd, STATUS_MAX_BYTES)
    except OSError as error:
        return None, mark, f"{STATUS} unreadable: {unreadable_reason(error)}"
    finally:
        os.close(fd)
    try:
        progress = json.loads(raw)
    except (ValueError, RecursionError):
        return None, mark, f"{STATUS} unreadable: not JSON"
    return (progress if isinstance(progress, dict) else None), mark, None


def model_dir_facts(model_dir: str) -> dict[str, Any]:
    """DONE, the program's status.json and its mtime. Root reads this directory, which the job's user owns: no
    symlink is followed (neither the directory nor its files), a FIFO or device never blocks, status.json is read
    up to STATUS_MAX_BYTES; what is refused is named in ``progress_error``."""
    facts: dict[str, Any] = {"done": False, "progress": None, "progress_mtime": None, "progress_error": None}
    try:
        dir_fd = open_dir(model_dir)
    except FileNotFoundError:
        return facts  # not started yet
    except OSError as error:
        facts["progress_error"] = f"{model_dir} unreadable: {unreadable_reason(error)}"
        return facts
    try:
        facts["done"] = _is_regular_at(DONE, dir_fd)
        facts["progress"], facts["progress_mtime"], facts["progress_error"] = _progress_at(dir_fd)
    finally:
        os.close(dir_fd)
    return facts


def process_facts(pid: object, proc: str = "/proc") -> dict[str, Any] | None:
    """What the task's process is doing, from /proc: its main thread's state letter (``R`` running, ``S`` waiting,
    ``D`` in I/O, ``T`` stopped, ...) and how many of its threads are running. A job stuck in a collective waits in
    every task but the one behind: stopped, or still computing (tfcluster/run/health.py). None when unknown."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    letters = []
    try:
        tasks = os.listdir(f"{proc}/{pid}/task")[:4096]
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"{proc}/{pid}/task/{tid}/stat", "rb") as handle:
                letters.append(handle.read(4096).rsplit(b")", 1)[1].split()[0].decode("ascii", "replace"))
        except (OSError, IndexError):
            continue
    try:
        with open(f"{proc}/{pid}/stat", "rb") as handle:
            main = handle.read(4096).rsplit(b")", 1)[1].split()[0].decode("ascii", "replace")
    except (OSError, IndexError):
        return None
    return {"state": main[:1], "running_threads": sum(letter == "R" for letter in letters)}


def status(spec_file: str, unit: str | None = None, lines: int | None = None) -> dict[str, Any]:
    """The task's status (see the module docstring)."""
    spec = load_spec(spec_file)
    unit = unit or spec.get("unit")
    count = int(spec["log_tail_lines"] if lines is None else lines)
    deadline = float(spec.get("max_duration") or 0) > 0
    result = unit_status(unit, count, spec["run_dir"], deadline) if unit else process_status(spec, count)
    result.update(model_dir_facts(spec["model_dir"]))
    result.update(name=spec["name"], model_dir=spec["model_dir"], max_duration=spec.get("max_duration") or 0,
                  now=time.time(), process=process_facts(result.get("pid")))
    return result


def _follow_file(path: str, running: Any, out: Any, poll: float = 0.5) -> None:
    """Print what is appended to the log (a regular file, not through a symlink) until the task no longer runs."""
    try:
        fd = open_regular(path)
    except OSError:
        return
    with os.fdopen(fd, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        while True:
            chunk = handle.read(LOG_WINDOW)
            if chunk:
                out.write(chunk.decode("utf-8", "replace"))
                out.flush()
            elif not running():
                return
            else:
                time.sleep(poll)


def logs(spec_file: str, unit: str | None = None, lines: int = 100, follow: bool = False, out: Any = None) -> int:
    """Print the task's last ``lines`` log lines; with ``follow``, go on until the task no longer runs."""
    out = out or sys.stdout
    spec = load_spec(spec_file)
    unit = unit or spec.get("unit")

    def running() -> bool:
        now = systemd_state(unit_props(unit)) if unit else process_status(spec, 0)["state"]
        return now in ACTIVE_STATES

    if unit:
        if not follow:
            out.write(_run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"]))
            return 0
        out.flush()
        proc = subprocess.Popen(["journalctl", "-u", unit, "-n", str(lines), "-f", "--no-pager", "-o", "cat"])
        try:
            while proc.poll() is None and running():
                time.sleep(1.0)
            time.sleep(1.0)  # the last lines of a task that just ended
        finally:
            proc.terminate()
            proc.wait()
        return 0
    out.write("".join(line + "\n" for line in tail(spec["log"], lines)))
    out.flush()
    if follow:
        _follow_file(spec["log"], running, out)
    return 0


def answer(spec_file: str, unit: str | None, lines: int | None) -> tuple[str, int]:
    """One status line (status, or {"error": ...} for a job it cannot read) and its exit code."""
    try:
        return dumps(status(spec_file, unit, lines)) + "\n", 0
    except JobError as error:
        return dumps({"error": str(error)}) + "\n", 1


def serve(spec_file: str, unit: str | None, lines: int | None, *, stdin_fd: int = 0, out: Any = None,
          idle: float = SERVE_IDLE) -> int:
    """Answer a status line for every line read on ``stdin_fd`` (a question's text is not read: it only asks),
    until end of input or ``idle`` seconds without one. Exit 0."""
    out = out or sys.stdout
    while True:
        ready, _, _ = select.select([stdin_fd], [], [], idle)
        chunk = os.read(stdin_fd, 4096) if ready else b""
        if not chunk:
            return 0
        for _ in range(chunk.count(b"\n")):
            out.write(answer(spec_file, unit, lines)[0])
            out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tfcluster.host.jobstatus", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("status", "serve", "logs"):
        command = sub.add_parser(name)
        command.add_argument("spec", help="the job spec (<env dir>/<job>.json)")
        command.add_argument("--unit", default=None, help="read this systemd unit (default: the spec's)")
        command.add_argument("--lines", type=int, default=None, help="log lines (default: the spec's; logs: 100)")
    sub.choices["logs"].add_argument("--follow", action="store_true", help="follow until the task no longer runs")
    args = parser.parse_args(argv)
    try:
        if args.command == "status":
            text, code = answer(args.spec, args.unit, args.lines)
            sys.stdout.write(text)
            return code
        if args.command == "serve":
            return serve(args.spec, args.unit, args.lines)
        return logs(args.spec, args.unit, 100 if args.lines is None else args.lines, args.follow)
    except JobError as error:
        sys.stdout.write(dumps({"error": str(error)}) + "\n")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
