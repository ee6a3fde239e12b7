"""`make status` and `make logs` on the control machine: the status table, and following one task's job log.

logs.yml writes where each task is read from (``{"chief_host": host, "targets": {host: target}}``, a target
being what the wait loop polls: slot, spec, python, pythonpath, reach). :func:`follow` runs
``python3 -m tfcluster.host.jobstatus logs SPEC --follow`` on the host over the host's own SSH settings (or in this
process for a local slot); it ends when the task no longer runs, or on Ctrl-C.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from tfcluster.reach import Reach, ReachError
from tfcluster.view import duration, rate

LOG_LINES = 100  # lines shown before following
TABLE_COLUMNS = ("HOST", "SLOT", "STATE", "EPOCH", "STEP", "EX/S", "LAST UPDATE", "AUTOSTOP")


class FollowError(RuntimeError):
    """The log cannot be followed; the message names the host or file and the fix."""


def read_targets(path: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """(chief, {host: target}) from the file logs.yml wrote."""
    try:
        doc = json.loads(path.read_text())
        return str(doc["chief_host"]), dict(doc["targets"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FollowError(f"{path}: no job targets ({exc}); see the log above") from None


def pick(chief: str, targets: Mapping[str, Mapping[str, Any]], host: str | None) -> tuple[str, Mapping[str, Any]]:
    """The target of HOST, else the chief's; an unknown HOST names the hosts there are."""
    name = host or chief
    if name not in targets:
        raise FollowError(f"HOST={name} is not a host of this cluster. Fix: HOST= one of {', '.join(sorted(targets))}")
    return name, targets[name]


def logs_words(target: Mapping[str, Any], lines: int = LOG_LINES, follow: bool = True) -> list[str]:
    """The command that prints (and follows) the task's log on its host."""
    words = ["env", f"PYTHONPATH={target['pythonpath']}", str(target["python"]), "-m", "tfcluster.host.jobstatus",
             "logs", str(target["spec"]), "--lines", str(lines)]
    words += ["--follow"] if follow else []
    return words + (["--unit", str(target["unit"])] if target.get("unit") else [])


def follow(name: str, target: Mapping[str, Any], out: TextIO | None = None) -> int:
    """Print the task's log until it no longer runs; the exit status of the reader."""
    out = out or sys.stdout
    try:
        reach = Reach.from_info(target["reach"])
    except (ReachError, KeyError, TypeError) as exc:
        raise FollowError(f"{name}: cannot reach it ({exc})") from None
    if reach.local:
        from tfcluster.host import jobstatus

        return jobstatus.logs(str(target["spec"]), target.get("unit") or None, LOG_LINES, follow=True, out=out)
    argv = reach.argv(logs_words(target))
    try:
        out.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):  # not a real file (a test's buffer)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        out.write(proc.stdout)
        return proc.returncode
    return subprocess.run(argv, stdout=out, check=False).returncode


def _cell(task: Mapping[str, Any], key: str, total: str) -> str:
    value = task.get(key)
    return "-" if value is None else f"{value}/{task.get(total) if task.get(total) is not None else '?'}"


def read_autostop(path: Path) -> dict[str, str]:
    """{host: the autostop status JSON line (or '': not installed there)} that status.yml wrote; {} when absent."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(host): str(line) for host, line in data.items()} if isinstance(data, dict) else {}


def autostop_cell(line: str | None) -> str:
    """``off``, ``30 min (idle 4m05s)``, or ``-`` where autostop is not installed (local slots, never prepared)."""
    try:
        status = json.loads(line or "")
    except ValueError:
        return "-"
    if not isinstance(status, dict) or not status.get("installed", True):
        return "-"
    if not status.get("enabled"):
        return "off"
    idle = status.get("idle_seconds")
    mode = "" if status.get("mode") == "jobs" else f", {status.get('mode')}"
    return f"{status.get('idle_minutes')} min{mode} (idle {duration(idle) if isinstance(idle, (int, float)) else '?'})"


def table_row(task: Mapping[str, Any], now: float, autostop: Mapping[str, str] | None = None) -> list[str]:
    """HOST, SLOT, STATE, EPOCH, STEP, EX/S, LAST UPDATE (wall clock and age), AUTOSTOP of one task."""
    age = task.get("age_seconds")
    if isinstance(age, (int, float)):
        updated = f"{time.strftime('%H:%M:%S', time.localtime(now - age))} ({duration(age)} ago)"
    else:
        updated = "-"
    return [str(task.get("host", "?")), str(task.get("slot", "")), str(task.get("state", "?")),
            _cell(task, "epoch", "epochs"), _cell(task, "step", "steps_per_epoch"),
            rate(task.get("examples_per_sec")).replace(" ex/s", "") or "-", updated,
            autostop_cell((autostop or {}).get(str(task.get("host"))))]


def status_table(tasks: Sequence[Mapping[str, Any]], now: float | None = None,
                 autostop: Mapping[str, str] | None = None) -> list[str]:
    """The `make status` table, columns aligned."""
    now = time.time() if now is None else now
    rows = [list(TABLE_COLUMNS), *(table_row(task, now, autostop) for task in tasks)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_COLUMNS))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
