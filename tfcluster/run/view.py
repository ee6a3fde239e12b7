"""The terminal view of a `tfcluster` command: one line per stage with its duration, the live progress of every task
(refreshed in place on a terminal; otherwise, in a CI log or a pipe, reprinted when a task's state, epoch or the
note changes, at most every 10 s, and at least every minute), and what failed. A log grows with what happened, not
with how long the job ran: an hour of one epoch prints 60 blocks, not 360.

It renders the events of tfcluster/run/events.py; everything else (Terraform's and Ansible's own output) goes to the
log file whose path the header prints. Every field a host wrote (status.json, its log, its exception) is printed
through tfcluster.core.text.printable and cut to a limit; only the view's own cursor codes reach the terminal raw.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from tfcluster.core.text import printable, printable_lines

PRINT_EVERY = 10.0  # least seconds between progress prints when the output is not a terminal
HEARTBEAT = 60.0  # most seconds between them: the block is reprinted though nothing moved to the next state
PACE_EVERY = 10.0  # seconds between two samples of a task's examples/s for its pace line (the view's own clock)
PACE_KEPT = 30  # samples kept per task: the last 5 minutes
SPARKS = "▁▂▃▄▅▆▇█"
LOG_TAIL = 15  # lines of a failing host's job log shown without VERBOSE
FIELD_LIMIT = 40  # characters of one host-written field of a progress line (state, epoch, step...)
TEXT_LIMIT = 500  # characters of one host-written line of the failure summary (a message, a log line)
# The events the view renders (tfcluster/run/events.py), each by its View._on_<kind>.
HANDLED = ("stage_end", "task_failed", "progress", "decision", "stacks", "collected", "notice")


def number(value: Any) -> float | None:
    """A finite number a host wrote, else None (a string, a bool, NaN, infinity, an int too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def duration(seconds: float | None) -> str:
    """``0.4 s``, ``12.3 s``, ``2m05s``, ``1h02m``; ``-`` for what is not a finite number."""
    seconds = number(seconds)
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
    value = number(value)
    if value is None:
        return ""
    return f"{value / 1000:.1f}k ex/s" if value >= 1000 else f"{value:.0f} ex/s"


def _of(value: Any, total: Any) -> str:
    return f"{printable(value, FIELD_LIMIT)}/{printable(total, FIELD_LIMIT) if total is not None else '?'}"


def sparkline(values: Sequence[float], tty: bool = True) -> str:
    """A task's recent examples/s: ``▃▅▇█▇▂`` scaled between its own least and most (a terminal), else the last five
    as plain numbers (``pace 5.1k 5.3k 4.9k``); '' under two samples."""
    if len(values) < 2:
        return ""
    if not tty:
        return "pace " + " ".join(rate(v).removesuffix(" ex/s") for v in values[-5:])
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARKS[min(len(SPARKS) - 1, int((v - low) / span * len(SPARKS)))] for v in values)


def task_line(task: Mapping[str, Any], pace: str = "") -> str:
    """One task of the progress view: host, slot, state, epoch/step, examples/s (and ``pace``: its sparkline), loss,
    ETA (what is known). The fields come from the host's status.json: any type, escaped and cut (FIELD_LIMIT)."""
    host, slot = printable(task.get("host", "?"), FIELD_LIMIT), printable(task.get("slot", ""), FIELD_LIMIT)
    parts = [f"{host:<14}", f"{slot:<10}", f"{printable(task.get('state', '?'), FIELD_LIMIT):<18}"]
    if task.get("epoch") is not None:
        parts.append(f"epoch {_of(task['epoch'], task.get('epochs'))}")
    if task.get("step") is not None:
        parts.append(f"step {_of(task['step'], task.get('steps_per_epoch'))}")
    loss, eta = number(task.get("loss")), number(task.get("eta_seconds"))
    for text in (rate(task.get("examples_per_sec")), pace,
                 f"loss {loss:.4f}" if loss is not None else "",
                 f"ETA {duration(eta)}" if eta is not None else "",
                 f"restarts {printable(task['restarts'], FIELD_LIMIT)}" if task.get("restarts") else ""):
        if text:
            parts.append(printable(text, FIELD_LIMIT))
    age = number(task.get("age_seconds"))
    if age is not None and age >= 30:
        parts.append(printable(f"(no update for {duration(age)})", FIELD_LIMIT))
    straggler = straggler_mark(task.get("straggler"))
    if straggler:
        parts.append(straggler)
    return "  ".join(parts).rstrip()


def straggler_mark(episode: Any) -> str:
    """``STRAGGLER 31% slower 6m05s``: a task the wait names (tfcluster/run/health.py); ``STRAGGLER 31% slower
    now`` from one poll (`make status`: no history to time it); '' for anything else."""
    below = number(episode.get("below")) if isinstance(episode, Mapping) else None
    if below is None:
        return ""
    seconds = number(episode.get("seconds"))
    return f"STRAGGLER {round(100 * below)}% slower {'now' if seconds is None else duration(seconds)}"


def straggler_notes(tasks: Sequence[Mapping[str, Any]]) -> list[str]:
    """``f-w2: STRAGGLER 31% slower now``: the tasks marked in a progress event (`make status` under its table)."""
    return [f"{printable(task.get('host', '?'), FIELD_LIMIT)}: {mark}" for task in tasks
            if (mark := straggler_mark(task.get("straggler")))]


def progress_steps(tasks: Sequence[Mapping[str, Any]]) -> int | None:
    """The furthest step any task reports: (epoch - 1) x steps_per_epoch + step; None when none reports one."""
    best = None
    for task in tasks:
        epoch, step, steps = task.get("epoch"), task.get("step"), task.get("steps_per_epoch")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (epoch, step, steps)):
            value = (epoch - 1) * steps + step
            best = value if best is None else max(best, value)
    return best


@dataclass
class View:
    """Renders events onto ``out``. ``tty``: redraw the progress block in place; else reprint it on a change of
    what it says (`milestones`), at most every PRINT_EVERY and at least every HEARTBEAT seconds."""

    out: TextIO
    tty: bool
    clock: Any = time.monotonic
    _drawn: int = 0  # lines of the progress block on screen (tty)
    _last_print: float = field(default=-1e9)
    _printed: tuple[Any, ...] | None = None  # the milestones of the block printed last (not a terminal)
    failures: list[dict[str, Any]] = field(default_factory=list)
    decision: dict[str, Any] | None = None
    stages: list[dict[str, Any]] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)  # the last progress event's tasks
    show_progress: bool = True  # make status prints its table at the end instead
    first_training: list[dict[str, Any]] = field(default_factory=list)  # the first progress that shows a step
    first_training_at: float | None = None  # when it came (self.clock)
    furthest: int | None = None  # the furthest step any task reported so far (progress_steps)
    paces: dict[str, list[float]] = field(default_factory=dict)  # each task's examples/s, a sample every PACE_EVERY
    _paced: float = field(default=-1e9)

    def line(self, text: str = "") -> None:
        self._drawn = 0
        self.out.write(text + "\n")
        self.out.flush()

    def handle(self, event: Mapping[str, Any]) -> None:
        handler = getattr(self, f"_on_{event.get('event')}", None)
        if handler is not None and str(event.get("event")) in HANDLED:
            handler(event)

    def _on_stage_end(self, event: Mapping[str, Any]) -> None:
        self.stages.append(dict(event))
        mark = "ok  " if event.get("ok") else "FAIL"
        name = printable(event.get("name", ""), TEXT_LIMIT)
        self.line(f"  {mark} {name:<58} {duration(event.get('seconds')):>8}")

    def _on_task_failed(self, event: Mapping[str, Any]) -> None:
        self.failures.append(dict(event))

    def _on_progress(self, event: Mapping[str, Any]) -> None:
        self.tasks = [dict(task) for task in event.get("tasks") or []]
        reached = progress_steps(self.tasks)
        if reached is not None and (self.furthest is None or reached > self.furthest):
            self.furthest = reached
        if not self.first_training and any(number(t.get("step")) for t in self.tasks):
            self.first_training, self.first_training_at = self.tasks, self.clock()
        if self.show_progress:
            self.progress(self.tasks, event.get("elapsed"), event.get("note"))

    def _on_decision(self, event: Mapping[str, Any]) -> None:
        self.decision = dict(event)
        if event.get("decision") == "done" and event.get("servers"):  # a ParameterServer chief's end
            self.line(f"       {printable(event.get('message'), TEXT_LIMIT)}")

    def _on_stacks(self, event: Mapping[str, Any]) -> None:  # escaped and cut on the control side already
        for text in printable_lines(event.get("lines") or [], TEXT_LIMIT):
            self.line(f"       {text}")

    def _on_collected(self, event: Mapping[str, Any]) -> None:
        self.line(f"       {_collected(event)}")

    def _on_notice(self, event: Mapping[str, Any]) -> None:  # one line per line of it (the network check's links)
        for index, text in enumerate(printable_lines(str(event.get("msg", "")), TEXT_LIMIT)):
            self.line(f"       {'note: ' if index == 0 else '      '}{text}")

    def progress(self, tasks: Sequence[Mapping[str, Any]], elapsed: float | None, note: Any = None) -> None:
        """The progress block; ``note`` (hosts unreachable from here, with ssh's error) under its header."""
        now = self.clock()
        self._sample_paces(tasks, now)
        lines = [f"       job running for {duration(elapsed)}:",
                 *([f"         note: {printable(note, TEXT_LIMIT)}"] if note else []),
                 *(f"         {task_line(t, sparkline(self.paces.get(str(t.get('host')), []), self.tty))}"
                   for t in tasks)]
        if self.tty:
            if self._drawn:
                self.out.write(f"\x1b[{self._drawn}F")  # back to the first line of the block
                lines += [""] * (self._drawn - len(lines))  # a shorter block (a note gone) blanks the old lines
            self.out.write("".join(f"\x1b[2K{text}\n" for text in lines))
            self.out.flush()
            self._drawn = len(lines)
        else:
            shown = milestones(tasks, note)
            since = now - self._last_print
            if since >= HEARTBEAT or (since >= PRINT_EVERY and shown != self._printed):
                self._last_print, self._printed = now, shown
                for text in lines:
                    self.line(text)

    def _sample_paces(self, tasks: Sequence[Mapping[str, Any]], now: float) -> None:
        if now - self._paced < PACE_EVERY:
            return
        self._paced = now
        for task in tasks:
            value = number(task.get("examples_per_sec"))
            if value is not None and value >= 0:
                kept = self.paces.setdefault(str(task.get("host")), [])
                kept.append(value)
                del kept[:-PACE_KEPT]


def milestones(tasks: Sequence[Mapping[str, Any]], note: Any = None) -> tuple[Any, ...]:
    """What a new progress block is printed for off a terminal: each task's host, state (not its growing "(12 s,
    retrying)"), epoch and whether it is named a straggler, and the note (steps, rates, the loss and the ETA move on
    every poll: they wait for the heartbeat)."""
    return (tuple((str(t.get("host")), str(t.get("state")).partition(" (")[0], str(t.get("epoch")),
                   bool(t.get("straggler"))) for t in tasks), str(note or ""))


def _collected(event: Mapping[str, Any]) -> str:
    if not event.get("files"):
        return "the job wrote nothing to $TFCLUSTER_MODEL_DIR: nothing to collect"
    size = number(event.get("bytes")) or 0.0
    state = "collected" if event.get("changed") else "already collected"
    return (f"{state}: {printable(event['files'], FIELD_LIMIT)} files, {size / 1e6:.1f} MB, sha256-verified -> "
            f"{printable(event.get('dest'), TEXT_LIMIT)}")


def _decision_lines(decision: Mapping[str, Any]) -> list[str]:
    """The decision's verdict, the culprit's exception and its log tail (host text: escaped, cut)."""
    culprit = printable(decision.get("culprit") or "?", FIELD_LIMIT)
    lines = [f"job {printable(decision.get('decision'), FIELD_LIMIT)} on {culprit}: "
             f"{printable(decision.get('message'), TEXT_LIMIT)}"]
    error = decision.get("error") if isinstance(decision.get("error"), Mapping) else {}
    if error.get("type"):
        where = f"   ({printable(error['frame'], TEXT_LIMIT)})" if error.get("frame") else ""
        message = printable(error.get("message", ""), TEXT_LIMIT)
        lines.append(f"  error: {printable(error['type'], FIELD_LIMIT)}: {message}{where}")
    tail = printable_lines(decision.get("log_tail") or [], TEXT_LIMIT, last=LOG_TAIL)
    if tail:
        lines.append(f"  last lines of {culprit}'s job log:")
        lines += [f"    {text}" for text in tail]
    if any(mark in text for text in [str(error.get("message", "")), *tail] for mark in OFFLINE_MARKS):
        lines += OFFLINE_HINT
    return lines


# What a download from a host without internet ends with (Keras' get_file, urllib, pip, requests).
OFFLINE_MARKS = ("Temporary failure in name resolution", "Name or service not known", "URL fetch failure",
                 "Network is unreachable", "nodename nor servname provided")
OFFLINE_HINT = [
    "  the hosts cannot reach that address (a download from the internet, it seems: its name did not resolve or "
    "its network is unreachable).",
    "  Fix: give the job its data instead: DATASETS=mnist puts mnist.npz at $TFCLUSTER_DATASETS/mnist.npz on every "
    "host, read with numpy.load(os.path.join(os.environ['TFCLUSTER_DATASETS'], 'mnist.npz')) (x_train, y_train, "
    "x_test, y_test); Keras' load_data() accepts only its own download (docs/jobs.md \"Script jobs and Keras\")"]


def failure_lines(view: View, log: str) -> list[str]:
    """What failed, where, and the end of that host's job log — without VERBOSE. Every text a host wrote (the
    decision's message, the exception, log lines, a task's failure message) is escaped and cut (TEXT_LIMIT)."""
    lines: list[str] = []
    decision = view.decision or {}
    if decision.get("decision") not in (None, "done", "running"):
        lines += _decision_lines(decision)
    seen: set[tuple[str, str]] = set()
    for failure in view.failures:
        key = (failure.get("host", "?"), failure.get("task", "?"))
        if key in seen:
            continue
        seen.add(key)
        what = "unreachable" if failure.get("unreachable") else "failed"
        lines.append(f"{printable(key[0], FIELD_LIMIT)}: task '{printable(key[1], TEXT_LIMIT)}' {what}:")
        lines += [f"    {text}" for text in printable_lines(str(failure.get("msg", "")).strip(), TEXT_LIMIT,
                                                             last=LOG_TAIL)]
    if not lines:  # it failed before any play ran (the inventory, the settings of ansible-playbook)
        said = inventory_said(_read(log))
        if said:  # the inventory's own words (what is wrong, the fix), not Ansible's parser fallbacks
            lines.append("the inventory could not be read, so nothing ran:")
            lines += [f"    {text}" for text in printable_lines(said, TEXT_LIMIT, last=LOG_TAIL)]
        else:
            lines.append("it failed before any step ran; the end of the log:")
            lines += [f"    {text}" for text in _tail(log, LOG_TAIL)]
    lines.append(f"full log: {log}")
    return lines


INVENTORY_STDERR = "Standard error from inventory script:"  # Ansible's script plugin, before what ours wrote
INVENTORY_END = ("No inventory was printed.", "[WARNING]", "[ERROR]")


def inventory_said(log_text: str) -> list[str]:
    """What the inventory script wrote to stderr when Ansible could not use it (Ansible's script plugin quotes it
    in the log, then its ini parser's fallback complains about the script's own text); [] if it is not there."""
    _, found, rest = log_text.partition(INVENTORY_STDERR)
    said: list[str] = []
    for text in rest.split("\n") if found else []:
        if text.strip().startswith(INVENTORY_END):
            break
        if text.strip():
            said.append(_keep_fix(text.rstrip(), TEXT_LIMIT))
    return said


def _keep_fix(text: str, limit: int) -> str:
    """A line over ``limit`` cut in its middle, so that its ``Fix: ...`` end is kept."""
    head, mark, fix = text.rpartition(" Fix: ")
    if len(text) <= limit or not mark or len(fix) > limit // 2:
        return text
    return head[:limit - len(fix) - len(mark) - 4] + " ..." + mark + fix


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _tail(path: str, count: int) -> list[str]:
    """The last ``count`` non-blank lines of the log (it holds host output: escaped, cut)."""
    return printable_lines([text for text in _read(path).split("\n") if text.strip()], TEXT_LIMIT, last=count)
