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

import json
import os
import re
from collections.abc import Mapping
from typing import Any

try:
    from tfcluster.contract import EXIT_BAD_INPUT, EXIT_PREEMPTED, JOB_STATES
    from tfcluster.files import read_json
except ImportError:  # inside an Ansible module: module_utils of the tfcluster.cluster collection
    from ansible_collections.tfcluster.cluster.plugins.module_utils.contract import (  # type: ignore
        EXIT_BAD_INPUT,
        EXIT_PREEMPTED,
        JOB_STATES,
    )
    from ansible_collections.tfcluster.cluster.plugins.module_utils.files import read_json  # type: ignore

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
}


class JobError(ValueError):
    """A problem the caller can act on (the message names the file and the fix). A ValueError: a module that runs
    where ``tfcluster`` is importable (a local slot) gets this class from there, not from its module_utils copy."""


def load_spec(path: str) -> dict[str, Any]:
    spec = read_json(path)
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


# --- small readers --------------------------------------------------------------------------------------------------
def read_state(spec: Mapping[str, Any]) -> dict[str, Any]:
    data = read_json(state_path(spec))
    return data if isinstance(data, dict) else {}


def read_int(path: str) -> int | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def tail(path: str, lines: int, window: int = 64 * 1024) -> list[str]:
    """The last ``lines`` lines of a file (reads at most its last ``window`` bytes)."""
    if lines <= 0:
        return []
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - window))
            data = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
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
