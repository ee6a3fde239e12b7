"""Events from a running playbook to the `tfcluster` command's terminal view: one JSON object per line.

The `tfcluster` command sets ``TFCLUSTER_EVENTS`` to a file before it runs ansible-playbook; the events callback
plugin (stages, failures) and the wait loop (progress) append to it, and the command renders them (one line per
stage, one refreshed line per task). Without the variable nothing is written: a plain ``ansible-playbook`` run is
unaffected.

Kinds and their fields (every event also has ``event`` and ``t``, the Unix time):
  stage_start   name                                a play started
  stage_end     name, seconds, ok (bool), tasks     a play ended; tasks: how many of its tasks started
  task_failed   host, task, msg                     a task failed or a host was unreachable
  progress      elapsed, decision, note, tasks: [{host, slot, state, epoch, epochs, step, steps_per_epoch,
                examples_per_sec, loss, accuracy, eta_seconds, age_seconds, restarts, steps_per_sec,
                step_compute_s, straggler: {below, seconds}}]
                note: the hosts unreachable from here, with ssh's error ("" when every host answered)
  decision      decision, culprit, message, log_tail: [str], error: {type, message, frame} | null, servers: [str],
                stragglers: {host: {below, seconds}}
                decision: one of run/wait.py's DECISIONS; ``unreachable`` (no host answered beyond the grace)
                stopped nothing, and the job may still run; servers: the ParameterServer tasks stopped after their
                chief; stragglers: each task's longest named episode (tfcluster/run/health.py)
  stacks        lines: [str]                        every task's Python stacks, escaped (tfcluster/run/stacks.py)
  collected     dest, files, bytes, changed (bool)
  notice        msg[, host]                         text for the terminal (a tfcluster_notice task, the wait)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

ENV = "TFCLUSTER_EVENTS"
KINDS = ("stage_start", "stage_end", "task_failed", "progress", "decision", "collected", "notice", "stacks")
NOTICE_TAG = "tfcluster_notice"  # a debug task with this tag: its msg reaches the terminal as a notice


def emit(kind: str, path: str | None = None, **fields: Any) -> bool:
    """Append one event to ``path`` (default: $TFCLUSTER_EVENTS); returns whether it wrote one."""
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}: one of {', '.join(KINDS)}")
    target = path or os.environ.get(ENV)
    if not target:
        return False
    line = json.dumps({"event": kind, "t": round(time.time(), 3), **fields}, sort_keys=True, default=str)
    with open(target, "a", encoding="utf-8") as handle:  # one write() per line: appends stay whole lines
        handle.write(line + "\n")
    return True


def read_new(path: str, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Events written since ``offset`` (bytes) and the new offset; a partly written last line waits."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    events = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
    return events, offset + end


def iter_file(path: str) -> Iterator[dict[str, Any]]:
    events, _ = read_new(path, 0)
    yield from events
