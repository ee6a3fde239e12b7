"""Ansible callback for the lab flows: one line per task with its wall time (``TIMING <seconds> <task>``).

Enabled by lab/flows.py (ANSIBLE_CALLBACK_PLUGINS + ANSIBLE_CALLBACKS_ENABLED=flow_timing) so a slow
flow shows which task took the time; the bench scripts use it to split a run into phases.
"""

from __future__ import annotations

import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: flow_timing
type: aggregate
short_description: wall time of each task (tfcluster lab flows)
description: Prints C(TIMING seconds task) after each task and C(TIMING_TOTAL seconds) at the end.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "flow_timing"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._t0 = time.monotonic()
        self._task: str | None = None
        self._start = self._t0

    def _flush(self) -> None:
        if self._task is not None:
            self._display.display(f"TIMING {time.monotonic() - self._start:8.2f} {self._task}")
        self._task = None

    def v2_playbook_on_task_start(self, task, is_conditional):  # type: ignore[no-untyped-def]
        self._flush()
        self._task, self._start = task.get_name(), time.monotonic()

    def v2_playbook_on_handler_task_start(self, task):  # type: ignore[no-untyped-def]
        self.v2_playbook_on_task_start(task, False)

    def v2_playbook_on_stats(self, stats):  # type: ignore[no-untyped-def]
        self._flush()
        self._display.display(f"TIMING_TOTAL {time.monotonic() - self._t0:.2f}")
