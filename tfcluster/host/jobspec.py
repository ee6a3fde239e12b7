"""The job spec the tf_job role renders (``<env dir>/<job>.json``), its files, the task states, small readers.

The spec describes one task of a job on one host: the command (``argv``), its environment file, directories, the
restart policy (Restart=on-failure semantics for the process backend), the deadline and, for the systemd backend,
the unit. Both backends and the status reader use it. Standard library only.

States (contract.JOB_STATES, the same names for systemd units and supervised processes): ``inactive`` (never
started), ``running``, ``restarting``, ``succeeded`` (exit 0), ``preempted`` (exit 3: a backup was saved; not
restarted), ``failed`` (a failure beyond the restart budget), ``stopped`` (by a stop), ``lost`` (it was running and
its supervisor or host vanished), ``timeout`` (it ran into its deadline, tfcluster_max_duration, and was stopped).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Mapping
from typing import Any

from ..core.contract import EXIT_BAD_INPUT, EXIT_PREEMPTED, JOB_STATES

# The contract's states by name (an added or renamed state fails here, loudly, at import).
INACTIVE, RUNNING, RESTARTING, SUCCEEDED, PREEMPTED, FAILED, STOPPED, LOST, TIMEOUT = JOB_STATES
ACTIVE_STATES = frozenset({RUNNING, RESTARTING})
ENDED_STATES = frozenset({SUCCEEDED, PREEMPTED, FAILED, STOPPED, TIMEOUT})
# The process backend's own state between `start` and the supervisor's first record (read as running).
STARTING = "starting"
# Marks the supervisor's command line (guards pid reuse).
SUPERVISE_MARK = "tfjob-supervise"

REQUIRED_KEYS = ("name", "argv", "env_file", "workdir", "run_dir", "log", "model_dir")
SPEC_DEFAULTS: dict[str, Any] = {
    "max_restarts": 3,
    "restart_sec": 5.0,
    "stop_timeout": 30.0,
    "max_duration": 0,  # seconds; 0 = no deadline
    "success_exit_status": [0, EXIT_PREEMPTED],
    # Bad input (nothing started) fails the same way every time: never restarted either.
    "restart_prevent_exit_status": [EXIT_PREEMPTED, EXIT_BAD_INPUT],
    "cpu_affinity": [],
    "log_tail_lines": 20,
    "base_env": {},
    "user": None,  # the process backend drops to this user (and group) when it runs as root
    "group": None,
    "pythonpath": None,  # the release holding tfcluster/host (the supervisor runs from it)
    "unit": None,  # systemd backend: the unit; None: the process backend
    # Process backend: the state dir of the job's private network namespace (netns.py; local slots share one, so
    # nothing outside it reaches their ports); None: the host's network.
    "netns_dir": None,
}


class JobError(ValueError):
    """A problem the caller can act on (the message names the file and the fix). A ValueError: a module that runs
    where ``tfcluster`` is importable (a local slot) gets this class from there, not from its module_utils copy."""


def load_spec(path: str) -> dict[str, Any]:
    spec = read_json_capped(path, SPEC_MAX_BYTES)
    if not isinstance(spec, dict):
        raise JobError(f"job spec {path} is missing or not a JSON object. Fix: render the job (train.yml)")
    missing = [key for key in REQUIRED_KEYS if key not in spec]
    if missing:
        raise JobError("job spec {} lacks {}. Fix: render the job again (train.yml)".format(path, ", ".join(missing)))
    merged = dict(SPEC_DEFAULTS)
    merged.update(spec)
    return merged


def state_path(spec: Mapping[str, Any]) -> str:
    return os.path.join(spec["run_dir"], "state.json")


def supervisor_pid_path(spec: Mapping[str, Any]) -> str:
    return os.path.join(spec["run_dir"], "supervisor.pid")


def main_pid_path(spec: Mapping[str, Any]) -> str:
    return os.path.join(spec["run_dir"], "main.pid")


def last_exit_path(run_dir: str) -> str:
    """Written by the unit's ExecStopPost: ``SERVICE_RESULT EXIT_CODE EXIT_STATUS``."""
    return os.path.join(run_dir, "last-exit")


# --- safe reads -----------------------------------------------------------------------------------------------------
# Root reads files in a job's area (its model dir, run dir, log) that the job, or its user, may have replaced: never
# through a symlink (O_NOFOLLOW), never blocking on a FIFO or a device (O_NONBLOCK, then fstat: a regular file
# only), never more than a cap. Relative to a directory's descriptor where a directory is opened first.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
STATUS_MAX_BYTES = 1 << 20  # a program's status.json
SMALL_MAX_BYTES = 64 * 1024  # pid files, state.json, last-exit, the job spec's neighbours
SPEC_MAX_BYTES = 1 << 20
LOG_WINDOW = 64 * 1024  # a log's tail: its last bytes only
BLOCK = 1 << 16
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"),
          (stat.S_ISREG, "a regular file"))


class UnsafeFile(OSError):
    """A file root refuses to read: not a regular file, hard-linked elsewhere, or larger than its cap."""


def file_kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str, dir_fd: int | None = None, single_link: bool = False) -> int:
    """A read-only descriptor of the regular file ``path`` (relative to ``dir_fd`` when given). Raises OSError:
    ELOOP for a symlink, :class:`UnsafeFile` for anything else than a regular file (a FIFO is opened non-blocking,
    so it never waits for a writer) or, with ``single_link``, a file with other hard links (it may be someone
    else's file linked into the job's directory)."""
    fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(errno.EINVAL, f"{file_kind(info.st_mode)}, not a regular file")
        if single_link and info.st_nlink > 1:
            raise UnsafeFile(errno.EMLINK, f"a file with {info.st_nlink} hard links (maybe another's file)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_dir(path: str) -> int:
    """A descriptor of the directory ``path``, not through a symlink as its last component. Raises OSError: ELOOP
    for a symlink, :class:`UnsafeFile` for anything else than a directory."""
    try:
        return os.open(path, DIR_FLAGS)
    except NotADirectoryError:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            raise OSError(errno.ELOOP, "a symbolic link (not followed)", path) from None
        raise UnsafeFile(errno.ENOTDIR, f"{file_kind(mode)}, not a directory") from None


def read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes of ``fd``; raises UnsafeFile when it holds more (it grew after an fstat)."""
    chunks, size = [], 0
    while size <= limit:
        chunk = os.pread(fd, min(BLOCK, limit + 1 - size), size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    data = b"".join(chunks)
    if len(data) > limit:
        raise UnsafeFile(errno.EFBIG, f"larger than {limit} bytes")
    return data


def read_capped(path: str, limit: int, dir_fd: int | None = None, single_link: bool = False) -> tuple[bytes, float]:
    """(content, mtime) of a regular file of at most ``limit`` bytes (see :func:`open_regular`)."""
    fd = open_regular(path, dir_fd, single_link)
    try:
        info = os.fstat(fd)
        if info.st_size > limit:
            raise UnsafeFile(errno.EFBIG, f"larger than {limit} bytes ({info.st_size})")
        return read_fd(fd, limit), info.st_mtime
    finally:
        os.close(fd)


def unreadable_reason(error: OSError) -> str:
    """Why a safe read refused a file, in words (for a status answer)."""
    if isinstance(error, UnsafeFile):
        return str(error.strerror)
    if error.errno == errno.ELOOP:
        return "a symbolic link (not followed)"
    return error.strerror or str(error)


def read_json_capped(path: str, limit: int = SMALL_MAX_BYTES, dir_fd: int | None = None) -> Any:
    """The JSON of a regular file of at most ``limit`` bytes; None when missing, unsafe or not JSON."""
    try:
        return json.loads(read_capped(path, limit, dir_fd)[0])
    except (OSError, ValueError, RecursionError):
        return None


# --- small readers --------------------------------------------------------------------------------------------------
def read_state(spec: Mapping[str, Any]) -> dict[str, Any]:
    data = read_json_capped(state_path(spec))
    return data if isinstance(data, dict) else {}


def read_int(path: str) -> int | None:
    try:
        return int(read_capped(path, SMALL_MAX_BYTES)[0].decode("ascii").strip())
    except (OSError, ValueError):
        return None


def mtime(path: str) -> float | None:
    """The mtime of ``path`` itself (a symlink is not followed)."""
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None


def tail(path: str, lines: int, window: int = LOG_WINDOW) -> list[str]:
    """The last ``lines`` lines of a regular file (reads at most its last ``window`` bytes; a symlink, FIFO or
    device reads as empty)."""
    if lines <= 0:
        return []
    try:
        fd = open_regular(path)
    except OSError:
        return []
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, window, max(0, size - window)).decode("utf-8", "replace")
    except OSError:
        return []
    finally:
        os.close(fd)
    return data.splitlines()[-lines:]


def pid_alive(pid: int | None, marker: str | None = None) -> bool:
    """True when PID runs and is no zombie (and, with ``marker``, its command line contains it: pid reuse)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            if handle.read().rsplit(")", 1)[-1].split()[0] == "Z":
                return False
        if marker is None:
            return True
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return marker.encode() in handle.read()
    except OSError:
        return False


# --- environment files (systemd EnvironmentFile= syntax) -------------------------------------------------------------
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOUBLE_QUOTE_ESCAPES = '"\\`$'  # what systemd unescapes inside double quotes


def quote_env_value(value: str) -> str:
    """A value for an EnvironmentFile= line that systemd (and :func:`parse_env_file`) reads back verbatim."""
    if "'" not in value:
        return f"'{value}'"
    return '"' + "".join("\\" + c if c in _DOUBLE_QUOTE_ESCAPES else c for c in value) + '"'


def render_env_file(env: Mapping[str, Any], header: str = "") -> str:
    """``KEY=VALUE`` lines (sorted keys are the caller's choice: the mapping's order is kept)."""
    lines = [line for line in header.splitlines() if line.strip()]
    for key, value in env.items():
        if not _KEY.fullmatch(str(key)):
            raise JobError(f"environment variable name {key!r} is not valid. Fix: use letters, digits and '_', not "
                           "starting with a digit")
        text = "" if value is None else str(value)
        if "\n" in text or "\r" in text:
            raise JobError(f"environment variable {key} holds a line break. Fix: pass it without one")
        lines.append(f"{key}={quote_env_value(text)}")
    return "\n".join(lines) + "\n"


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == '"':
        out, chars = [], iter(value[1:-1])
        for char in chars:
            if char == "\\":
                nxt = next(chars, "")
                out.append(nxt if nxt in _DOUBLE_QUOTE_ESCAPES else "\\" + nxt)
            else:
                out.append(char)
        return "".join(out)
    return value


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines; ``#``/``;`` comments; values bare, in single quotes (verbatim) or in double quotes (with
    systemd's escapes). The subset :func:`render_env_file` writes."""
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            raise JobError(f"env file line {number} is not KEY=VALUE: {raw[:200]!r}. Fix: render the job again")
        env[key] = _unquote(value.strip())
    return env


def dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, sort_keys=True)
