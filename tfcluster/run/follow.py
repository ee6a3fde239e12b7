"""`make status` and `make logs` on the control machine: the status table, and following one task's job log.

logs.yml writes where each task is read from (``{"chief_host": host, "targets": {host: target}}``, a target
being what the wait loop polls: slot, spec, python, pythonpath, reach). :func:`follow` runs
``python3 -m tfcluster.host.jobstatus logs SPEC --follow`` on the host over the host's own SSH settings (or in this
process for a local slot); it ends when the task no longer runs, or on Ctrl-C.

What a host sends is data: the log is read here (ssh's stdout and stderr through one pipe, in chunks, lines broken
at FOLLOW_LINE_LIMIT) and printed line by line with every control character escaped (tfcluster.core.text); each cell
of the table is escaped and cut to CELL_LIMIT.
"""

from __future__ import annotations

import codecs
import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from tfcluster.core.duration import format_duration, parse_time
from tfcluster.core.text import PrintableWriter, printable
from tfcluster.run.reach import Reach, ReachError
from tfcluster.run.view import duration, number, rate

LOG_LINES = 100  # lines shown before following
READ_CHUNK = 64 * 1024  # bytes read from the host's log stream at a time
FOLLOW_LINE_LIMIT = 8192  # characters of one log line printed; a longer one is broken (never held whole)
CELL_LIMIT = 60  # characters of one cell of the status table
AUTOSTOP_FILE_LIMIT = 1024 * 1024  # bytes of the autostop file status.yml wrote (each host's answer) read
AUTOSTOP_LINE_LIMIT = 4096  # characters of one host's autostop status line parsed
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
    """Print the task's log until it no longer runs, every line escaped; the exit status of the reader."""
    shown = PrintableWriter(out or sys.stdout, FOLLOW_LINE_LIMIT)
    try:
        reach = Reach.from_info(target["reach"])
        argv = None if reach.local else reach.argv(logs_words(target))
    except (ReachError, KeyError, TypeError, ValueError) as exc:
        raise FollowError(f"{name}: cannot reach it ({exc}). Fix: check its inventory entry") from None
    try:
        if argv is None:
            from tfcluster.host import jobstatus

            return jobstatus.logs(str(target["spec"]), target.get("unit") or None, LOG_LINES, follow=True, out=shown)
        return stream(name, argv, shown)
    finally:
        shown.close()


def stream(name: str, argv: Sequence[str], shown: PrintableWriter) -> int:
    """Run ``argv`` (ssh) and copy its stdout and stderr onto ``shown`` as they come, decoded (a bad byte becomes
    U+FFFD); its exit status once it ends. On Ctrl-C (or any error) the command is ended too."""
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
    except OSError as exc:
        raise FollowError(f"{name}: cannot run {argv[0]} ({exc}). Fix: install the OpenSSH client") from None
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pipe = proc.stdout
    assert pipe is not None
    try:
        for chunk in iter(lambda: pipe.read1(READ_CHUNK), b""):
            shown.write(decoder.decode(chunk))
        shown.write(decoder.decode(b"", final=True))
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        pipe.close()


def _cell(task: Mapping[str, Any], key: str, total: str) -> str:
    value, whole = task.get(key), task.get(total)
    return "-" if value is None else f"{printable(value)}/{printable(whole) if whole is not None else '?'}"


def read_autostop(path: Path) -> dict[str, str]:
    """{host: the autostop status JSON line (or '': not installed there)} that status.yml wrote; {} when absent,
    unreadable or over AUTOSTOP_FILE_LIMIT bytes (the hosts' answers: the table then shows ``-``)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(AUTOSTOP_FILE_LIMIT + 1)
        data = json.loads(raw) if len(raw) <= AUTOSTOP_FILE_LIMIT else None
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(host): line if isinstance(line, str) else "" for host, line in data.items()}


def _expiry_text(status: Mapping[str, Any], now: float | None) -> str:
    """``, exp. in 20h``, ``, EXPIRED`` (past it; the host is held or about to power off), or '' (no expiry)."""
    expires = parse_time(status.get("expires_at"))
    if expires is None:
        return ""
    if status.get("expired") is True or (now is not None and expires.timestamp() <= now):
        return ", EXPIRED"
    return f", exp. in {format_duration(expires.timestamp() - now)}" if now is not None else ""


def autostop_cell(line: str | None, now: float | None = None) -> str:
    """``off``, ``30 min (idle 4m05s)``, each with the expiry (``, exp. in 20h``) and the guard that runs it
    (``boot: ...``: the user data's boot guard, on a host never prepared), or ``-`` where autostop is not installed
    (local slots, hosts of no cloud)."""
    if not line or len(line) > AUTOSTOP_LINE_LIMIT:
        return "-"
    try:
        status = json.loads(line)
    except ValueError:
        return "-"
    if not isinstance(status, dict) or not status.get("installed", True):
        return "-"
    guard = "boot: " if status.get("guard") == "boot" else ""
    expiry = _expiry_text(status, now)
    if not status.get("enabled"):
        return f"{guard}off{expiry}"
    idle = number(status.get("idle_seconds"))
    mode = "" if status.get("mode") == "jobs" else f", {printable(status.get('mode'))}"
    return (f"{guard}{printable(status.get('idle_minutes'))} min{mode} "
            f"(idle {duration(idle) if idle is not None else '?'}){expiry}")


def table_row(task: Mapping[str, Any], now: float, autostop: Mapping[str, str] | None = None) -> list[str]:
    """HOST, SLOT, STATE, EPOCH, STEP, EX/S, LAST UPDATE (wall clock and age), AUTOSTOP of one task."""
    age = number(task.get("age_seconds"))
    if age is not None and abs(age) < 1e9:
        updated = f"{time.strftime('%H:%M:%S', time.localtime(now - age))} ({duration(age)} ago)"
    else:
        updated = "-"
    cells = [task.get("host", "?"), task.get("slot", ""), task.get("state", "?"),
             _cell(task, "epoch", "epochs"), _cell(task, "step", "steps_per_epoch"),
             rate(task.get("examples_per_sec")).replace(" ex/s", "") or "-", updated,
             autostop_cell((autostop or {}).get(str(task.get("host"))), now)]
    return [printable(cell, CELL_LIMIT) for cell in cells]


def status_table(tasks: Sequence[Mapping[str, Any]], now: float | None = None,
                 autostop: Mapping[str, str] | None = None) -> list[str]:
    """The `make status` table, columns aligned; every cell escaped and cut (CELL_LIMIT)."""
    now = time.time() if now is None else now
    rows = [list(TABLE_COLUMNS), *(table_row(task, now, autostop) for task in tasks)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_COLUMNS))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
