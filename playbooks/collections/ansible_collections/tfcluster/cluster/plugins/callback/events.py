"""Callback plugin: plays and failures as events for the `tfcluster` command's terminal view.

Writes nothing unless TFCLUSTER_EVENTS names a file (see tfcluster/run/events.py); the `tfcluster` command enables the
plugin and sets the variable, so a plain ansible-playbook run is unaffected.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: events
type: notification
author: tfcluster (@tfcluster)
short_description: Plays and failures as JSON lines for the tfcluster command
description:
  - Appends one JSON object per line to the file named by TFCLUSTER_EVENTS - a play started or ended (with its
    duration and whether a host failed in it), a task failed or a host was unreachable (host, task, message).
  - The tfcluster command reads them and prints one line per stage; the full output goes to its log file.
requirements:
  - the tfcluster package on the control machine (tfcluster.run.events)
"""

import time
from typing import Any

from ansible.plugins.callback import CallbackBase

MAX_MESSAGE = 2000


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "tfcluster.cluster.events"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        from tfcluster.run import events

        self._emit = events.emit
        self._notice_tag = events.NOTICE_TAG
        self._play: str | None = None
        self._started = 0.0
        self._failed = False
        self._tasks = 0  # tasks the play started: a play whose hosts all failed earlier starts none

    def _end_play(self) -> None:
        if self._play is not None:
            self._emit("stage_end", name=self._play, seconds=round(time.monotonic() - self._started, 2),
                       ok=not self._failed, tasks=self._tasks)
        self._play = None

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._end_play()
        self._play = play.get_name().strip() or "play"
        self._started = time.monotonic()
        self._failed = False
        self._tasks = 0
        self._emit("stage_start", name=self._play)

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._tasks += 1

    def _failure(self, result: Any, what: str) -> None:
        self._failed = True
        res = result._result
        message = res.get("msg") or res.get("stderr") or res.get("reason") or what
        self._emit("task_failed", host=result._host.get_name(), task=result._task.get_name().strip(),
                   msg=str(message)[-MAX_MESSAGE:], unreachable=what == "unreachable")

    def v2_runner_on_ok(self, result: Any) -> None:
        if self._notice_tag in (getattr(result._task, "tags", None) or ()) and result._result.get("msg"):
            self._emit("notice", host=result._host.get_name(), msg=str(result._result["msg"])[-MAX_MESSAGE:])

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        if not ignore_errors:
            self._failure(result, "failed")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        if not getattr(result._task, "ignore_unreachable", False):
            self._failure(result, "unreachable")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._end_play()
