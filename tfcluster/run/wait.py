"""The wait decision: from every task's status, is the job running, done, or over (failed, stalled, preempted,
timed out, stopped)? A pure function of its input; the wait loop (the ``tfcluster.cluster.wait`` action plugin)
polls the hosts and calls it once per round.

Precedence: a failure anywhere (a failed or lost task, an unreachable host, an unreadable status, a task stopped
while others run) > a task that reached the job's deadline > a preempted task > every task stopped > every task
ended (done, or the chief's DONE is missing) > the wait's own time limit > a task without progress for the stall
time. The first host (in slot order) with the reason is the culprit.

A task's exit record lives in /run, so a reboot erases it: a task seen running (or restarting) at the previous round
and now ``inactive`` was lost with its host (:func:`remembered_state`).

A host's answer is data: any JSON value. One that is not the expected shape (:func:`status_problem`: not an object,
a state that is not a job state, a field of the wrong type) makes its host the culprit of a ``failed`` decision
("status unreadable: ..."), so the playbook's stop of every other task still runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tfcluster.core.contract import EXIT_PREEMPTED, JOB_STATES
from tfcluster.host.jobspec import (
    ACTIVE_STATES,
    FAILED,
    INACTIVE,
    LOST,
    PREEMPTED,
    RESTARTING,
    RUNNING,
    STOPPED,
    SUCCEEDED,
    TIMEOUT,
)

# Decisions (RUNNING, PREEMPTED, TIMEOUT and STOPPED share the state names).
DONE_DECISION, FAILED_DECISION, STALLED = "done", FAILED, "stalled"
DECISIONS = (RUNNING, DONE_DECISION, FAILED_DECISION, STALLED, PREEMPTED, TIMEOUT, STOPPED)
OVER = frozenset(DECISIONS) - {RUNNING, DONE_DECISION}  # the playbook stops every task and fails
PROGRESS_KEYS = ("epoch", "epochs", "step", "steps_per_epoch", "examples_per_sec", "loss", "accuracy", "eta_seconds")


SHOWN_LIMIT = 60  # characters of a wrong value quoted in a message


# --- the shape of an answer -----------------------------------------------------------------------------------------
def kind(value: object) -> str:
    """A JSON value's type in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, (list, tuple)) else ("a JSON object" if isinstance(value, Mapping)
                                                              else type(value).__name__)


def shown(value: object) -> str:
    """A value as JSON (ASCII only: no control character reaches a terminal), cut to SHOWN_LIMIT characters."""
    try:
        text = json.dumps(value, ensure_ascii=True, sort_keys=True, default=repr)
    except (ValueError, TypeError, RecursionError):
        text = ascii(value)
    return text if len(text) <= SHOWN_LIMIT else text[:SHOWN_LIMIT - 3] + "..."


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _lines(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(line, str) for line in value)


# Each field a decision or the view reads: what it must be (besides null).
FIELD_RULES: dict[str, tuple[Callable[[object], bool], str]] = {
    **{key: (_number, "a number") for key in ("now", "progress_mtime", "log_mtime", "started_at", "max_duration")},
    **{key: (_whole, "a whole number") for key in ("restarts", "exit_code", "pid", "signal")},
    **{key: (lambda v: isinstance(v, str), "a string") for key in ("name", "model_dir", "unit", "progress_error")},
    "progress": (lambda v: isinstance(v, Mapping), "an object"),
    "done": (lambda v: isinstance(v, bool), "true/false"),
    "log_tail": (_lines, "a list of strings"),
}


def status_problem(status: object) -> str | None:
    """What makes a host's status answer unusable (None: it is usable): see the module docstring."""
    if not isinstance(status, Mapping):
        return f"the status is {kind(status)}, not a JSON object"
    state = status.get("state")
    if not isinstance(state, str) or state not in JOB_STATES:
        return f"state is {shown(state)}, not a job state ({', '.join(JOB_STATES)})"
    for key, (valid, what) in FIELD_RULES.items():
        value = status.get(key)
        if value is not None and not valid(value):
            return f"{key} is {shown(value)}, not {what} or null"
    return None


def log_lines(status: object) -> list[str]:
    """The log tail of a usable status answer ([] for any other)."""
    if status_problem(status) is not None:
        return []
    return list(status.get("log_tail") or [])  # type: ignore[union-attr]


@dataclass(frozen=True)
class Settings:
    chief: str
    require_done: bool = True
    timeout: float = 86400.0  # the wait's own limit (tf_job_wait_timeout)
    stall_timeout: float = 600.0
    max_duration: float = 0.0  # the job's deadline (tfcluster_max_duration), for the message


@dataclass(frozen=True)
class Verdict:
    decision: str
    culprit: str | None = None
    message: str = ""


def remembered_state(state: str | None, before: str | None) -> str | None:
    """A task's state given what the previous round saw (see the module docstring)."""
    if state != INACTIVE or before is None:
        return state
    if before in (RUNNING, RESTARTING, LOST):
        return LOST
    if before in (SUCCEEDED, PREEMPTED, STOPPED, FAILED, TIMEOUT):
        return before
    return state


def duration_text(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    return f"{seconds / 3600:.1f} h"


def task_entry(host: str, slot: str, status: Mapping[str, Any] | None, state: str) -> dict[str, Any]:
    """One task of the ``progress`` event (what tfcluster.run.view.task_line shows)."""
    status = status or {}
    progress = status.get("progress") if isinstance(status.get("progress"), dict) else {}
    shown = f"{state}/{progress['state']}" if state == RUNNING and isinstance(progress.get("state"), str) else state
    entry: dict[str, Any] = {"host": host, "slot": slot, "state": shown, "restarts": status.get("restarts") or 0}
    entry.update({key: progress[key] for key in PROGRESS_KEYS if progress.get(key) is not None})
    now, mark, started = status.get("now"), status.get("progress_mtime"), status.get("started_at")
    if not isinstance(now, (int, float)) or state not in ACTIVE_STATES:  # an ended task's age is no news
        return entry
    if isinstance(mark, (int, float)):
        entry["age_seconds"] = round(max(0.0, now - mark), 1)
    if isinstance(started, (int, float)):
        entry["elapsed_seconds"] = round(max(0.0, now - started), 1)
    return entry


def _marks(status: Mapping[str, Any]) -> list[Any]:
    """What changes while a task makes progress: its status.json and its log."""
    return [status.get("progress_mtime") or 0, status.get("log_mtime") or 0,
            json.dumps(status.get("progress"), sort_keys=True)]


def _failure(host: str, state: str, status: Mapping[str, Any], others_active: bool) -> str | None:
    if state == LOST and status.get("lost_after"):
        return (f"job lost on {host}: it was {status['lost_after']} at the previous poll and now has no unit and no "
                "exit record (the host rebooted, or its unit was removed)")
    if state in (FAILED, LOST):
        return "job {} on {} (exit code {}, restarts {})".format(state, host, status.get("exit_code"),
                                                               status.get("restarts"))
    if state in (STOPPED, INACTIVE) and others_active:
        return f"job is {state} on {host} while the others run (stopped outside this playbook?)"
    return None


def _first(states: Mapping[str, str], wanted: str) -> str | None:
    return next((host for host, state in states.items() if state == wanted), None)


def _ended(states: Mapping[str, str], statuses: Mapping[str, Mapping[str, Any]], settings: Settings) -> Verdict | None:
    """Every task stopped, or every task succeeded (done, unless the chief's DONE is missing)."""
    if states and all(state in (STOPPED, INACTIVE) for state in states.values()):
        return Verdict(STOPPED, settings.chief, "no task of the job is running (never started, or stopped)")
    if states and all(state == SUCCEEDED for state in states.values()):
        chief = statuses.get(settings.chief)
        if settings.require_done and chief is not None and not chief.get("done"):
            return Verdict(FAILED_DECISION, settings.chief, "every task exited 0 but the chief {} wrote no DONE "
                           "marker in {}".format(settings.chief, chief.get("model_dir")))
        return Verdict(DONE_DECISION, None, "every task finished")
    return None


def _over(states: Mapping[str, str], statuses: Mapping[str, Mapping[str, Any]], settings: Settings) -> Verdict | None:
    timed_out = _first(states, TIMEOUT)
    if timed_out:
        limit = duration_text(settings.max_duration) if settings.max_duration else "its limit"
        return Verdict(TIMEOUT, timed_out, f"the job reached its deadline (MAX_DURATION {limit}, "
                       f"tfcluster_max_duration) on {timed_out} and was stopped after saving a backup: run it again "
                       "with a longer MAX_DURATION to resume from the backup")
    preempted = _first(states, PREEMPTED)
    if preempted:
        return Verdict(PREEMPTED, preempted, f"{preempted} was preempted (exit {EXIT_PREEMPTED}, a backup was saved): "
                       "run the same job again to resume from it")
    return _ended(states, statuses, settings)


def _poll_problem(poll: object) -> str | None:
    """Why one poll gives no usable status (None: it does)."""
    if not isinstance(poll, Mapping):
        return f"the poll answer is {kind(poll)}, not a JSON object"
    if "status" not in poll or poll["status"] is None:
        error = poll.get("error")
        return (error if isinstance(error, str) else shown(error)) if error else "no answer"
    return status_problem(poll["status"])


def decide(polls: Mapping[str, Mapping[str, Any]], slots: Mapping[str, str], seen: Mapping[str, Any], *, now: float,
           started: float, settings: Settings) -> dict[str, Any]:
    """One round. ``polls``: {host: {"status": {...}} or {"error": text, "unreachable": bool}}, in slot order;
    ``seen``: the previous round's ``seen``. Returns decision, culprit, message, seen, tasks, statuses, elapsed."""
    failures: list[tuple[str, str]] = []
    statuses: dict[str, dict[str, Any]] = {}
    states: dict[str, str] = {}
    new_seen: dict[str, Any] = {}
    tasks = []
    for host, poll in polls.items():
        problem = _poll_problem(poll)
        if problem is not None:
            unreachable = isinstance(poll, Mapping) and poll.get("unreachable") is True
            what = "unreachable" if unreachable else "status unreadable"
            failures.append((host, f"host {what}: {problem}"))
            tasks.append(task_entry(host, slots.get(host, ""), None, what))
            continue
        status = dict(poll["status"])
        previous = seen.get(host) if isinstance(seen, Mapping) else None
        previous = previous if isinstance(previous, Mapping) else {}
        before = previous.get("state") if isinstance(previous.get("state"), str) else None
        state = remembered_state(status["state"], before) or INACTIVE
        if state == LOST and status["state"] == INACTIVE:
            status["lost_after"] = before
        statuses[host], states[host] = status, state
        tasks.append(task_entry(host, slots.get(host, ""), status, state))
        marks = _marks(status)
        since = previous.get("since") if _number(previous.get("since")) else now
        new_seen[host] = {"marks": marks, "state": state, "since": since if previous.get("marks") == marks else now}
    active = {host for host, state in states.items() if state in ACTIVE_STATES}
    for host, state in states.items():
        text = _failure(host, state, statuses[host], bool(active - {host}))
        if text:
            failures.append((host, text))
    verdict = Verdict(FAILED_DECISION, *failures[0]) if failures else _over(states, statuses, settings)
    if verdict is None and now - started > settings.timeout:
        verdict = Verdict(TIMEOUT, settings.chief, f"the job did not finish within {duration_text(settings.timeout)} "
                          "(tf_job_wait_timeout): every task was stopped")
    if verdict is None:
        stalled = [h for h in states if h in active and now - float(new_seen[h]["since"]) > settings.stall_timeout]
        verdict = Verdict(STALLED, stalled[0], f"{stalled[0]} made no progress for {settings.stall_timeout:.0f}s "
                          "(tf_job_stall_timeout)") if stalled else Verdict(RUNNING)
    return {"decision": verdict.decision, "culprit": verdict.culprit, "message": verdict.message, "seen": new_seen,
            "tasks": tasks, "statuses": statuses, "elapsed": round(now - started, 1)}
