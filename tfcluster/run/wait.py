"""The wait decision: from every task's status, is the job running, done, or over (failed, stalled, preempted,
timed out, stopped)? A pure function of its input; the wait loop (the ``tfcluster.cluster.wait`` action plugin)
polls the hosts and calls it once per round.

The job belongs to the hosts, not to this machine. A host the control machine cannot reach (an ssh that fails to
connect or times out) is *unreachable from here*, not failed: the wait keeps the task's last known state, retries,
and says so on the progress line; only evidence from the hosts fails the job at once (a failed unit, a task that
was running and is gone, a peer's failure), or a host unreachable for longer than the grace
(``Settings.unreachable_grace``: UNREACHABLE_GRACE, tfcluster_unreachable_grace). When every host is unreachable
beyond the grace (this machine's network is down) the decision is ``unreachable``: nothing is stopped (it could not
be), and ``make wait`` re-attaches later.

Precedence: a failure seen on a host (a failed or lost task, an unreadable status, a task stopped while others run)
> a task that reached the job's deadline > a preempted task > a host unreachable beyond the grace > every task
stopped > every task ended (done, or the chief's DONE is missing; never while a host is unreachable) > the wait's
own time limit (none unless set: ``Settings.timeout``) > a task without progress for the stall time. The first host
(in slot order) with the reason is the culprit.

A stall is judged by the task's own phase (``state`` in its status.json, :func:`stall_marks`): the built-in trainer
counts only while it says ``training``, and then its epoch and step must advance (at an epoch boundary - the first
step, the epoch's backup and checkpoint - it gets twice the stall time plus the longest epoch seen), and while it
says ``connecting`` it may wait for its peers for the stall time (a peer cut from the others never comes); every other
phase (starting, which loads and downloads the data, exporting, serving) is progress. A task
that names no phase (a SCRIPT that writes no status.json) is judged by its output (status.json and log unchanged).
``stall_timeout`` 0 turns the stall off (STALL=off; the default of a SCRIPT job).

A task's exit record lives in /run, so a reboot erases it: a task seen running (or restarting) at the previous round
and now ``inactive`` was lost with its host (:func:`remembered_state`).

A host's answer is data: any JSON value. One that is not the expected shape (:func:`status_problem`: not an object,
a state that is not a job state, a field of the wrong type) makes its host the culprit of a ``failed`` decision
("status unreadable: ..."), so the playbook's stop of every other task still runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfcluster.core.contract import EXIT_PREEMPTED, PS, WORKER
from tfcluster.core.duration import duration_text
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
from tfcluster.run import health
from tfcluster.run.answer import number, poll_problem
from tfcluster.run.health import HealthSettings

# Decisions (RUNNING, PREEMPTED, TIMEOUT and STOPPED share the state names).
DONE_DECISION, FAILED_DECISION, STALLED, UNREACHABLE = "done", FAILED, "stalled", "unreachable"
CONNECTING = "connecting"  # the trainer's phase while it waits for its peers (trainer/train.py)
DECISIONS = (RUNNING, DONE_DECISION, FAILED_DECISION, STALLED, PREEMPTED, TIMEOUT, STOPPED, UNREACHABLE)
# The playbook stops every task and fails; on UNREACHABLE it only fails (no host can be reached to stop).
OVER = frozenset(DECISIONS) - {RUNNING, DONE_DECISION, UNREACHABLE}
TRAINING = "training"  # the trainer's phase in which its step must advance (trainer/callbacks.py)
PROGRESS_KEYS = ("epoch", "epochs", "step", "steps_per_epoch", "examples_per_sec", "loss", "accuracy", "eta_seconds",
                 "steps_per_sec", "step_compute_s")


# A ParameterServer job ends with its chief: its ps and worker tasks serve until they are told (the built-in
# trainer's chief tells them, and they exit 0 within seconds) or stopped (a script's `server.join()` never returns).
SERVER_TYPES = (PS, WORKER)
SERVERS_GRACE_S = 30.0  # how long the built-in trainer's servers get to exit by themselves after their chief


@dataclass(frozen=True)
class Settings:
    chief: str
    require_done: bool = True
    timeout: float = 0.0  # the wait's own limit (tf_job_wait_timeout); 0: none (the hosts enforce MAX_DURATION)
    stall_timeout: float = 600.0  # tf_job_stall_timeout (STALL); 0: off
    max_duration: float = 0.0  # the job's deadline (tfcluster_max_duration), for the message
    unreachable_grace: float = 1800.0  # tf_job_unreachable_grace (UNREACHABLE_GRACE)
    retrying: bool = True  # the wait polls again (False: make status's one poll)
    health: HealthSettings = field(default_factory=HealthSettings)  # STRAGGLER, HANG: tfcluster/run/health.py


@dataclass(frozen=True)
class Verdict:
    decision: str
    culprit: str | None = None
    message: str = ""
    servers: tuple[str, ...] = ()  # done: the ps/worker tasks still serving after their chief, for the playbook to stop


def remembered_state(state: str | None, before: str | None) -> str | None:
    """A task's state given what the previous round saw (see the module docstring)."""
    if state != INACTIVE or before is None:
        return state
    if before in (RUNNING, RESTARTING, LOST):
        return LOST
    if before in (SUCCEEDED, PREEMPTED, STOPPED, FAILED, TIMEOUT):
        return before
    return state


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
            json.dumps(status.get("progress"), sort_keys=True, default=repr)]


def _progress(status: Mapping[str, Any]) -> Mapping[str, Any]:
    progress = status.get("progress")
    return progress if isinstance(progress, Mapping) else {}


def stall_marks(status: Mapping[str, Any]) -> list[Any] | None:
    """What must change for a task to count as making progress; None: it cannot stall in its phase (see the module
    docstring): ``training`` -> its epoch and step; ``connecting`` -> the phase itself; another phase -> None; no phase
    -> its status.json and log."""
    phase = _progress(status).get("state")
    if not isinstance(phase, str):
        return ["output", *_marks(status)]
    if phase == CONNECTING:
        return [CONNECTING]  # unchanged while it waits: peers that never come (a host cut from them) stall it
    if phase != TRAINING:
        return None
    progress = _progress(status)
    return ["steps", json.dumps([progress.get("epoch"), progress.get("step")], default=repr)]


def stall_allowance(status: Mapping[str, Any], entry: Mapping[str, Any], stall: float) -> float:
    """Seconds without progress that make a stall: ``stall``, and at an epoch boundary of a training task (no step
    yet, or the epoch's last step: the first step's compile, the epoch's backup and checkpoint) twice that plus the
    longest epoch seen."""
    progress = _progress(status)
    if progress.get("state") != TRAINING:
        return stall
    step, steps = progress.get("step"), progress.get("steps_per_epoch")
    boundary = not number(step) or step <= 0 or (number(steps) and step >= steps)
    longest = entry.get("longest_epoch") if number(entry.get("longest_epoch")) else 0.0
    return 2 * stall + float(longest) if boundary else stall


def _epochs(status: Mapping[str, Any], previous: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The epoch a task is in, since when the wait sees it, and the longest epoch the wait saw (from one change of
    the epoch to the next)."""
    epoch = _progress(status).get("epoch")
    epoch = epoch if number(epoch) else None
    longest = float(previous["longest_epoch"]) if number(previous.get("longest_epoch")) else 0.0
    began = float(previous["epoch_since"]) if number(previous.get("epoch_since")) else now
    if "epoch" in previous and previous.get("epoch") != epoch:
        longest, began = max(longest, now - began), now
    return {"epoch": epoch, "epoch_since": began, "longest_epoch": round(longest, 1)}


def short_duration(seconds: float) -> str:
    """``12 s``, ``4m05s``, ``1h02m``: short enough for a progress line's state."""
    minutes, secs = divmod(max(0, round(seconds)), 60)
    if not minutes:
        return f"{secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def unreachable_state(seconds: float, retrying: bool = True) -> str:
    """The state a progress line shows for a host this machine cannot reach."""
    return f"unreachable from here ({short_duration(seconds)}{', retrying' if retrying else ''})"


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


@dataclass
class _Round:
    """What one round read: per answering host its status and state, per unreachable host (``away``) how long it
    has been unreachable and ssh's last words."""

    hosts: int = 0
    slots: Mapping[str, str] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    seen: dict[str, Any] = field(default_factory=dict)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    away: dict[str, tuple[float, str]] = field(default_factory=dict)

    def active(self) -> set[str]:
        """Hosts whose task runs: as answered now, or as last seen for an unreachable host."""
        return ({host for host, state in self.states.items() if state in ACTIVE_STATES}
                | {host for host in self.away if self.seen[host].get("state") in ACTIVE_STATES})


def _ended(r: _Round, settings: Settings, now: float) -> Verdict | None:
    """Every task stopped, or every task succeeded (done, unless the chief's DONE is missing), or a ParameterServer
    chief succeeded (:func:`_servers_left`); never decided while a host is unreachable (its task may still run)."""
    states, chief = r.states, r.statuses.get(settings.chief)
    if r.away or not states:
        return None
    if all(state in (STOPPED, INACTIVE) for state in states.values()):
        return Verdict(STOPPED, settings.chief, "no task of the job is running (never started, or stopped)")
    servers = _servers_left(r, settings, now)
    if servers is None:
        return None
    if settings.require_done and chief is not None and not chief.get("done"):
        return Verdict(FAILED_DECISION, settings.chief, "every task exited 0 but the chief {} wrote no DONE "
                       "marker in {}".format(settings.chief, chief.get("model_dir")))
    if not servers:
        return Verdict(DONE_DECISION, None, "every task finished")
    return Verdict(DONE_DECISION, None, f"the chief {settings.chief} finished; its ParameterServer tasks still serving "
                   f"({', '.join(servers)}) are stopped: their work ends with the chief's", servers=tuple(servers))


def _servers_left(r: _Round, settings: Settings, now: float) -> list[str] | None:
    """None: the job has not ended; else the tasks to stop before it is done ([]: none). Every task succeeded, or
    the job has a ps task (ParameterServer), its chief succeeded and each other task is a ps or worker task that
    succeeded, serves on (running, restarting) or was stopped after the chief. The built-in trainer's servers get
    SERVERS_GRACE_S to exit by themselves (they do, told by their chief); a script's are stopped at once."""
    states = r.states
    if all(state == SUCCEEDED for state in states.values()):
        return []
    types = {host: r.slots.get(host, "").partition(":")[0] for host in states}
    if PS not in types.values() or states.get(settings.chief) != SUCCEEDED:
        return None
    others = {host: state for host, state in states.items() if host != settings.chief}
    if any(types[host] not in SERVER_TYPES or state not in (SUCCEEDED, STOPPED, *ACTIVE_STATES)
           for host, state in others.items()):
        return None
    serving = [host for host, state in others.items() if state in ACTIVE_STATES]
    ended_at = r.seen[settings.chief].get("succeeded_since", now)
    if serving and settings.require_done and now - float(ended_at) < SERVERS_GRACE_S:
        return None
    return serving


def _gone(r: _Round, settings: Settings) -> Verdict | None:
    """A host unreachable for longer than the grace: failed naming it, or, when no host answers, unreachable."""
    beyond = [host for host, (seconds, _) in r.away.items() if seconds > settings.unreachable_grace]
    if not beyond:
        return None
    host, (seconds, error) = beyond[0], r.away[beyond[0]]
    grace = f"the grace of {duration_text(settings.unreachable_grace)} (UNREACHABLE_GRACE, tfcluster_unreachable_grace)"
    if len(r.away) == r.hosts:
        return Verdict(UNREACHABLE, host, f"every host is unreachable from here, {host} for {duration_text(seconds)}, "
                       f"longer than {grace}; last error: {error}. This machine's network is likely down: nothing "
                       "was stopped and the job may still run on the hosts. Fix: once they are reachable, `make wait` "
                       "re-attaches (waits and collects); `make stop` stops the job")
    return Verdict(FAILED_DECISION, host, f"{host} is unreachable from here for {duration_text(seconds)}, longer than "
                   f"{grace}, while other hosts answer; last error: {error}. Fix: check {host} (down, or its network "
                   "cut); a longer UNREACHABLE_GRACE waits longer")


def _over(r: _Round, settings: Settings, now: float) -> Verdict | None:
    timed_out = _first(r.states, TIMEOUT)
    if timed_out:
        limit = duration_text(settings.max_duration) if settings.max_duration else "its limit"
        return Verdict(TIMEOUT, timed_out, f"the job reached its deadline (MAX_DURATION {limit}, "
                       f"tfcluster_max_duration) on {timed_out} and was stopped after saving a backup: run it again "
                       "with a longer MAX_DURATION to resume from the backup")
    preempted = _first(r.states, PREEMPTED)
    if preempted:
        return Verdict(PREEMPTED, preempted, f"{preempted} was preempted (exit {EXIT_PREEMPTED}, a backup was saved): "
                       "run the same job again to resume from it")
    return _gone(r, settings) or _ended(r, settings, now)


def _previous(seen: object, host: str) -> Mapping[str, Any]:
    previous = seen.get(host) if isinstance(seen, Mapping) else None
    return previous if isinstance(previous, Mapping) else {}


def _answered(r: _Round, host: str, status: dict[str, Any], *, slot: str, previous: Mapping[str, Any],
              now: float) -> None:
    before = previous.get("state") if isinstance(previous.get("state"), str) else None
    state = remembered_state(status["state"], before) or INACTIVE
    if state == LOST and status["state"] == INACTIVE:
        status["lost_after"] = before
    r.statuses[host], r.states[host] = status, state
    r.tasks.append(task_entry(host, slot, status, state))
    marks = stall_marks(status)
    since = previous.get("since") if number(previous.get("since")) else now
    r.seen[host] = {"marks": marks, "state": state, "since": since if previous.get("marks") == marks else now,
                    **_epochs(status, previous, now)}
    if state == SUCCEEDED:  # since when the wait sees it ended (a ParameterServer chief's servers get a grace)
        r.seen[host]["succeeded_since"] = (previous["succeeded_since"] if number(previous.get("succeeded_since"))
                                           else now)


def _unreachable(r: _Round, host: str, error: str, *, slot: str, previous: Mapping[str, Any], now: float,
                 settings: Settings) -> None:
    """Keep what the previous rounds saw of the host (its state, its progress marks), add since when it is away."""
    since = float(previous["unreachable_since"]) if number(previous.get("unreachable_since")) else now
    r.seen[host] = {**previous, "unreachable_since": since, "error": error}
    r.away[host] = (now - since, error)
    r.tasks.append(task_entry(host, slot, None, unreachable_state(now - since, settings.retrying)))


def _note(r: _Round, settings: Settings) -> str:
    """What the progress line says while hosts are unreachable within the grace ('' when none is)."""
    if not r.away:
        return ""
    host, (seconds, error) = max(r.away.items(), key=lambda item: item[1][0])
    retry = (f"retrying for up to {duration_text(settings.unreachable_grace)} (UNREACHABLE_GRACE)"
             if settings.retrying else "not retried (one poll)")
    if len(r.away) == r.hosts:
        return (f"every host is unreachable from here ({duration_text(seconds)}: {error}); this machine's network "
                f"may be down, the job runs on without it; {retry}")
    names = ", ".join(r.away)
    return f"{names} unreachable from here ({host}: {duration_text(seconds)}, {error}); the job runs on; {retry}"


def _stall(r: _Round, now: float, settings: Settings) -> Verdict | None:
    if settings.stall_timeout <= 0:
        return None
    active = r.active()
    for host in r.states:
        entry = r.seen[host]
        if host not in active or entry["marks"] is None:
            continue
        allowed = stall_allowance(r.statuses[host], entry, settings.stall_timeout)
        if now - float(entry["since"]) <= allowed:
            continue
        what = ("its epoch and step did not advance while training" if entry["marks"][0] == "steps"
                else "its status.json and log did not change")
        away = (f", while {', '.join(r.away)} is unreachable from here (a host cut from its peers stalls them)"
                if r.away else "")
        return Verdict(STALLED, host, f"{host} made no progress for {allowed:.0f}s (tf_job_stall_timeout): {what}"
                       f"{away}. Fix: a longer STALL= waits longer, STALL=off turns the stall check off")
    return None


def _health(r: _Round, seen: Mapping[str, Any], now: float, settings: Settings) -> Verdict | None:
    """The round's straggler records and marks (tfcluster/run/health.py) in ``seen`` and the task entries; a hang's
    verdict."""
    below = health.below_others(health.paces(r.statuses, r.slots))
    for host, status in r.statuses.items():
        previous = _previous(seen, host)
        r.seen[host].update(health.step_gaps(previous, status))
        r.seen[host].update(health.straggler_round(previous, below.get(host), now, settings.health))
        episode = health.straggler_of(r.seen[host], now, settings.health)
        if not settings.retrying and below.get(host, 0.0) >= settings.health.below > 0:  # make status: one poll
            episode = {"below": round(below[host], 3), "seconds": None}
        if episode is not None:
            next(task for task in r.tasks if task["host"] == host)["straggler"] = episode
    found = health.hang(r.statuses, r.states, r.seen, sorted(r.active()), settings.health)
    return None if found is None else Verdict(STALLED, found[0], found[1])


def decide(polls: Mapping[str, Mapping[str, Any]], slots: Mapping[str, str], seen: Mapping[str, Any], *, now: float,
           started: float, settings: Settings) -> dict[str, Any]:
    """One round. ``polls``: {host: {"status": {...}} or {"error": text, "unreachable": bool}}, in slot order;
    ``seen``: the previous round's ``seen``. Returns decision, culprit, message, note (hosts unreachable from here,
    '' when none), seen, tasks, statuses, elapsed."""
    r = _Round(hosts=len(polls), slots=slots)
    for host, poll in polls.items():
        problem, slot, previous = poll_problem(poll), slots.get(host, ""), _previous(seen, host)
        if problem is None:
            _answered(r, host, dict(poll["status"]), slot=slot, previous=previous, now=now)
        elif isinstance(poll, Mapping) and isinstance(poll.get("gone"), str):  # the cloud says the machine is gone
            r.failures.append((host, f"{host} is lost: its instance is {poll['gone']}"))
            r.tasks.append(task_entry(host, slot, None, "lost (instance gone)"))
        elif isinstance(poll, Mapping) and poll.get("unreachable") is True:
            _unreachable(r, host, problem, slot=slot, previous=previous, now=now, settings=settings)
        else:
            r.failures.append((host, f"host status unreadable: {problem}"))
            r.tasks.append(task_entry(host, slot, None, "status unreadable"))
    active = r.active()
    hanging = _health(r, seen, now, settings)
    for host, state in r.states.items():
        text = _failure(host, state, r.statuses[host], bool(active - {host}))
        if text:
            r.failures.append((host, text))
    verdict = Verdict(FAILED_DECISION, *r.failures[0]) if r.failures else _over(r, settings, now)
    if verdict is None and settings.timeout > 0 and now - started > settings.timeout:
        verdict = Verdict(TIMEOUT, settings.chief, f"the job did not finish within {duration_text(settings.timeout)} "
                          "(tf_job_wait_timeout): every task was stopped")
    verdict = verdict or hanging or _stall(r, now, settings) or Verdict(RUNNING)
    stragglers = {host: entry["straggled"] for host, entry in r.seen.items() if entry.get("straggled")}
    return {"decision": verdict.decision, "culprit": verdict.culprit, "message": verdict.message,
            "servers": list(verdict.servers), "stragglers": stragglers, "note": _note(r, settings), "seen": r.seen,
            "tasks": r.tasks, "statuses": r.statuses, "elapsed": round(now - started, 1)}
