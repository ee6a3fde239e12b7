"""Watching a job that a scheduler runs (CLUSTER=slurm): the same decision (tfcluster.run.wait.decide) and the same
view (tfcluster.run.view) as a playbook's wait; only where the statuses come from differs (a transport's poll).

A round polls once: ``poll() -> (scheduler, polls, slots)``, ``scheduler`` being the scheduler's own view of the
job (``phase`` pending, running, settling, ended or unknown; ``state``; ``reason``; ``restarts``). While the job is
pending (queued, or held after a requeue) it is pending, not stalled: the view says why the scheduler holds it, and
the stall clock starts when it runs again. While it settles (the step being torn down: a requeue or its end) no
decision is taken. Otherwise ``decide`` decides on every task's status, exactly as for hosts.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from tfcluster.core.text import printable
from tfcluster.run import answer, wait

Poll = tuple[Mapping[str, Any], Mapping[str, Mapping[str, Any]], Mapping[str, str]]
WAITING = ("pending", "settling")
REASON_LIMIT = 120


def scheduler_line(scheduler: Mapping[str, Any]) -> str:
    """``pending (Resources)``, ``running``, ``requeued 1x, pending (BeginTime)``: the scheduler's view in words,
    every field escaped and cut (it is the login node's text)."""
    phase = printable(scheduler.get("phase") or "unknown", 20)
    state = printable(scheduler.get("state") or "", 40)
    reason = printable(scheduler.get("reason") or "", REASON_LIMIT)
    restarts = scheduler.get("restarts")
    text = f"{phase} ({reason})" if phase == "pending" and reason and reason != "None" else phase
    if state and state.lower() != phase:
        text += f" [{state}]"
    if isinstance(restarts, int) and not isinstance(restarts, bool) and restarts > 0:
        text = f"requeued {restarts}x, {text}"
    if phase == "unknown" and reason:
        text += f": {reason}"
    return text


def waiting_tasks(scheduler: Mapping[str, Any], slots: Mapping[str, str]) -> list[dict[str, Any]]:
    """The progress view's tasks while the scheduler holds the job: each task's slot and why it waits."""
    line = scheduler_line(scheduler)
    return [{"host": key, "slot": slot, "state": line} for key, slot in slots.items()]


def chief_key(slots: Mapping[str, str], chief_slot: str) -> str:
    """The chief's name this round: the key of its slot (its node once the scheduler placed it, else the slot)."""
    return next((key for key, slot in slots.items() if slot == chief_slot), chief_slot)


def watch(poll: Callable[[], Poll], view: Any, settings: wait.Settings, *, chief_slot: str | None = None,
          interval: float = 2.0, clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
          on_round: Callable[[Mapping[str, Any], Mapping[str, Any] | None], None] | None = None) -> dict[str, Any]:
    """Poll until the decision is no longer ``running``; the last decision (``decide``'s dict) with the
    scheduler's view under ``scheduler`` and the seconds it was pending under ``pending_seconds``. ``chief_slot``
    (``chief-0``): the decision's chief is that slot's task, by whatever name the round gives it.
    ``on_round(scheduler, decision or None)`` sees every round (a measurement, a test)."""
    seen: Mapping[str, Any] = {}
    started: float | None = None
    pending = 0.0
    first = clock()
    while True:
        scheduler, polls, slots = poll()
        now = clock()
        if scheduler.get("phase") in WAITING:
            if scheduler.get("phase") == "pending":
                seen, started = {}, None  # a pending job is not stalled; its run starts anew
            view.handle({"event": "progress", "tasks": waiting_tasks(scheduler, slots), "elapsed": now - first})
            if on_round is not None:
                on_round(scheduler, None)
            sleep(interval)
            pending += interval
            continue
        started = now if started is None else started
        chief = settings if chief_slot is None else dataclasses.replace(settings, chief=chief_key(slots, chief_slot))
        result = wait.decide(polls, slots, seen, now=now, started=started, settings=chief)
        result.update(scheduler=dict(scheduler), pending_seconds=round(pending, 1))
        view.handle({"event": "progress", "tasks": result["tasks"], "elapsed": now - first})
        if result.get("note"):
            view.handle({"event": "notice", "msg": result["note"]})
        if on_round is not None:
            on_round(scheduler, result)
        if result["decision"] != wait.RUNNING:
            return result
        seen = result["seen"]
        sleep(interval)


def decision_event(result: Mapping[str, Any]) -> dict[str, Any]:
    """The ``decision`` event of a watch's end (what tfcluster.run.view.failure_lines and the ledger read): the
    culprit's log tail and the program's error from its status.json, as the playbook's wait gives them."""
    culprit = result.get("culprit")
    status = (result.get("statuses") or {}).get(culprit) or {}
    progress = status.get("progress") if isinstance(status.get("progress"), Mapping) else {}
    error = progress.get("error")
    event: dict[str, Any] = {"event": "decision", "decision": result.get("decision"), "culprit": culprit,
                             "message": result.get("message"), "log_tail": answer.log_lines(status),
                             "servers": list(result.get("servers") or []),
                             "stragglers": dict(result.get("stragglers") or {})}
    if isinstance(error, str) and error:
        event["error"] = {"type": "error", "message": error}
    return event
