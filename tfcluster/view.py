"""The terminal view of a `tfcluster` command: one line per stage with its duration, the live progress of every task
(refreshed in place on a terminal, reprinted at least every 10 s otherwise), and what failed.

It renders the events of tfcluster/events.py; everything else (Terraform's and Ansible's own output) goes to the
log file whose path the header prints.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

PRINT_EVERY = 10.0  # seconds between progress prints when the output is not a terminal
LOG_TAIL = 15  # lines of a failing host's job log shown without VERBOSE


def duration(seconds: float | None) -> str:
    """``0.4 s``, ``12.3 s``, ``2m05s``, ``1h02m``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def rate(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return ""
    return f"{value / 1000:.1f}k ex/s" if value >= 1000 else f"{value:.0f} ex/s"


def _of(value: Any, total: Any) -> str:
    return f"{value}/{total if total is not None else '?'}"


def task_line(task: Mapping[str, Any]) -> str:
    """One task of the progress view: host, slot, state, epoch/step, examples/s, loss, ETA (what is known)."""
    parts = [f"{task.get('host', '?'):<14}", f"{task.get('slot', ''):<10}", f"{task.get('state', '?'):<18}"]
    if task.get("epoch") is not None:
        parts.append(f"epoch {_of(task['epoch'], task.get('epochs'))}")
    if task.get("step") is not None:
        parts.append(f"step {_of(task['step'], task.get('steps_per_epoch'))}")
    for text in (rate(task.get("examples_per_sec")),
                 f"loss {task['loss']:.4f}" if isinstance(task.get("loss"), (int, float)) else "",
                 f"ETA {duration(task['eta_seconds'])}" if isinstance(task.get("eta_seconds"), (int, float)) else "",
                 f"restarts {task['restarts']}" if task.get("restarts") else ""):
        if text:
            parts.append(text)
    age = task.get("age_seconds")
    if isinstance(age, (int, float)) and age >= 30:
        parts.append(f"(no update for {duration(age)})")
    return "  ".join(parts).rstrip()


@dataclass
class View:
    """Renders events onto ``out``. ``tty``: redraw the progress block in place; else reprint it every 10 s."""

    out: TextIO
    tty: bool
    clock: Any = time.monotonic
    _drawn: int = 0  # lines of the progress block on screen (tty)
    _last_print: float = field(default=-1e9)
    failures: list[dict[str, Any]] = field(default_factory=list)
    decision: dict[str, Any] | None = None
    stages: list[dict[str, Any]] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)  # the last progress event's tasks
    show_progress: bool = True  # make status prints its table at the end instead

    def line(self, text: str = "") -> None:
        self._drawn = 0
        self.out.write(text + "\n")
        self.out.flush()

    def handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("event")
        if kind == "stage_end":
            self.stages.append(dict(event))
            mark = "ok  " if event.get("ok") else "FAIL"
            self.line(f"  {mark} {event.get('name', ''):<58} {duration(event.get('seconds')):>8}")
        elif kind == "task_failed":
            self.failures.append(dict(event))
        elif kind == "progress":
            self.tasks = [dict(task) for task in event.get("tasks") or []]
            if self.show_progress:
                self.progress(self.tasks, event.get("elapsed"))
        elif kind == "decision":
            self.decision = dict(event)
        elif kind == "collected":
            self.line(f"       {_collected(event)}")

    def progress(self, tasks: Sequence[Mapping[str, Any]], elapsed: float | None) -> None:
        lines = [f"       job running for {duration(elapsed)}:", *(f"         {task_line(t)}" for t in tasks)]
        now = self.clock()
        if self.tty:
            if self._drawn:
                self.out.write(f"\x1b[{self._drawn}F")  # back to the first line of the block
            self.out.write("".join(f"\x1b[2K{text}\n" for text in lines))
            self.out.flush()
            self._drawn = len(lines)
        elif now - self._last_print >= PRINT_EVERY:
            self._last_print = now
            for text in lines:
                self.line(text)


def _collected(event: Mapping[str, Any]) -> str:
    if not event.get("files"):
        return "the job wrote nothing to $TFCLUSTER_MODEL_DIR: nothing to collect"
    size = event.get("bytes") or 0
    state = "collected" if event.get("changed") else "already collected"
    return f"{state}: {event['files']} files, {size / 1e6:.1f} MB, sha256-verified -> {event.get('dest')}"


def failure_lines(view: View, log: str) -> list[str]:
    """What failed, where, and the end of that host's job log — without VERBOSE."""
    lines: list[str] = []
    decision = view.decision or {}
    if decision.get("decision") not in (None, "done", "running"):
        lines.append(f"job {decision.get('decision')} on {decision.get('culprit') or '?'}: {decision.get('message')}")
        error = decision.get("error") or {}
        if error.get("type"):
            where = f"   ({error['frame']})" if error.get("frame") else ""
            lines.append(f"  error: {error['type']}: {error.get('message', '')}{where}")
        tail = list(decision.get("log_tail") or [])[-LOG_TAIL:]
        if tail:
            lines.append(f"  last lines of {decision.get('culprit')}'s job log:")
            lines += [f"    {text}" for text in tail]
    seen: set[tuple[str, str]] = set()
    for failure in view.failures:
        key = (failure.get("host", "?"), failure.get("task", "?"))
        if key in seen:
            continue
        seen.add(key)
        what = "unreachable" if failure.get("unreachable") else "failed"
        lines.append(f"{key[0]}: task '{key[1]}' {what}:")
        lines += [f"    {text}" for text in str(failure.get("msg", "")).strip().splitlines()[-LOG_TAIL:]]
    if not lines:  # it failed before any play ran (the inventory, the settings of ansible-playbook)
        lines.append("it failed before any step ran; the end of the log:")
        lines += [f"    {text}" for text in _tail(log, LOG_TAIL)]
    lines.append(f"full log: {log}")
    return lines


def _tail(path: str, count: int) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return [text for text in handle.read().splitlines() if text.strip()][-count:]
    except OSError:
        return []
