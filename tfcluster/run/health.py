"""A running job's health between "healthy" and a stall: the straggler and the hang. Pure functions of what the
tasks' status answers say and what the wait saw in earlier rounds (its ``seen``, per host); the wait's decision
(tfcluster/run/wait.py) calls them once a round. docs/jobs.md "Job health" says what each one measures.

**Pace.** A task's pace is the inverse of its compute time per step (``step_compute_s``: the time a step spends
before its gradient all-reduce, which the built-in trainer times) when every compared task reports one, else its
recent ``steps_per_sec``. Under a synchronous strategy the all-reduce evens the step rates, so only the compute time
tells a slow host; a SCRIPT that writes neither is not compared. Compared: the tasks that train (phase
``training``), not a ps, not an evaluator; at least two.

**Straggler.** A task whose pace stays at least ``below`` under the median of the others' for ``after`` seconds of
the wait's own clock (so hosts' clocks never meet) is named: ``worker-1 ran 31 % below the others for 6 min``. Each
round it is slower adds to its episode; a round it is not ends the episode. The longest episode is kept for the
end-of-job summary.

**Hang.** Every task alive, each training task past its first reports and between epoch boundaries, and none
reported a step for ``factor`` times its usual gap between step reports (at least ``floor`` seconds), each age read
on its own host's clock (the status answer's ``now`` against its ``last_step_at``): the job hangs. The task behind:
in a job stuck in a collective every task waits but one, so a task whose process is stopped comes first, then one
whose threads still run (it never entered the collective), then the one whose last step is oldest. A task whose
process is stopped (SIGSTOP, a debugger) past that limit is a hang on its own, whatever its peers do meanwhile
(MultiWorkerMirrored's health check may fail them and they restart, waiting for it).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfcluster.core.contract import EVALUATOR, PS
from tfcluster.core.duration import duration_text
from tfcluster.run.answer import number

TRAINING = "training"
PAST_FIRST_REPORTS = 3  # step reports a task must have made before it can hang (its first steps compile)
GAPS_KEPT = 20  # the gaps between step reports the wait keeps per task


@dataclass(frozen=True)
class HealthSettings:
    below: float = 0.15  # STRAGGLER: a pace this far under the others' median (0.15 = 15 %); 0 = off
    after: float = 120.0  # for this long (seconds)
    hang_factor: float = 10.0  # HANG: no step for this many times a task's usual gap between step reports; 0 = off
    hang_floor: float = 60.0  # and never less than this (seconds)


def _progress(status: Mapping[str, Any] | None) -> Mapping[str, Any]:
    progress = (status or {}).get("progress")
    return progress if isinstance(progress, Mapping) else {}


def _training(status: Mapping[str, Any] | None) -> bool:
    return _progress(status).get("state") == TRAINING


def _type(slot: str) -> str:
    return slot.partition(":")[0]


def paces(statuses: Mapping[str, Mapping[str, Any]], slots: Mapping[str, str]) -> dict[str, float]:
    """Each compared task's pace (higher is faster): 1 / its compute time a step when every compared task has one,
    else its steps/s; {} when fewer than two tasks can be compared."""
    hosts = [h for h, s in statuses.items() if _training(s) and _type(slots.get(h, "")) not in (PS, EVALUATOR)]
    compute = {h: _progress(statuses[h]).get("step_compute_s") for h in hosts}
    if hosts and all(number(v) and v > 0 for v in compute.values()):
        found = {h: 1.0 / float(v) for h, v in compute.items()}
    else:
        rates = {h: _progress(statuses[h]).get("steps_per_sec") for h in hosts}
        found = {h: float(v) for h, v in rates.items() if number(v) and v > 0}
    return found if len(found) >= 2 else {}


def below_others(pace: Mapping[str, float]) -> dict[str, float]:
    """How far each task's pace is under the median of the others' (0.31 = 31 % slower; <= 0: not slower)."""
    return {host: 1.0 - value / statistics.median([v for h, v in pace.items() if h != host])
            for host, value in pace.items()}


def straggler_round(previous: Mapping[str, Any], below: float | None, now: float,
                    settings: HealthSettings) -> dict[str, Any]:
    """One task's straggler record after this round: the episode in progress (``slow_since``, the mean shortfall so
    far) and the longest named episode (``straggled``: below, seconds)."""
    record = {key: previous[key] for key in ("slow_since", "slow_sum", "slow_rounds", "straggled") if key in previous}
    if settings.below <= 0 or below is None or below < settings.below:
        record.pop("slow_since", None), record.pop("slow_sum", None), record.pop("slow_rounds", None)
        return record
    since = float(record.get("slow_since", now))
    total, rounds = float(record.get("slow_sum", 0.0)) + below, int(record.get("slow_rounds", 0)) + 1
    record.update(slow_since=since, slow_sum=total, slow_rounds=rounds)
    if now - since >= settings.after:
        episode = {"below": round(total / rounds, 3), "seconds": round(now - since, 1)}
        if episode["seconds"] >= float((record.get("straggled") or {}).get("seconds", 0.0)):
            record["straggled"] = episode
    return record


def straggler_of(record: Mapping[str, Any], now: float, settings: HealthSettings) -> dict[str, float] | None:
    """The episode a task is named for now (in progress for ``after`` or longer), else None."""
    if "slow_since" not in record or now - float(record["slow_since"]) < settings.after:
        return None
    return {"below": round(float(record["slow_sum"]) / int(record["slow_rounds"]), 3),
            "seconds": round(now - float(record["slow_since"]), 1)}


def straggler_text(host: str, episode: Mapping[str, Any]) -> str:
    """``worker-1 ran 31 % below the others for 6 min``."""
    return f"{host} ran {round(100 * float(episode['below']))} % below the others for " \
           f"{duration_text(float(episode['seconds']))}"


def step_gaps(previous: Mapping[str, Any], status: Mapping[str, Any] | None) -> dict[str, Any]:
    """The task's last step report (``last_step_at``, its host's clock), how long ago that was on that clock
    (``step_age``), and the gaps between its reports so far."""
    at = _progress(status).get("last_step_at")
    gaps = [g for g in previous.get("gaps", []) if number(g)][-GAPS_KEPT:]
    last = previous.get("last_step_at")
    if number(at) and number(last) and at > last:
        gaps = [*gaps, float(at) - float(last)][-GAPS_KEPT:]
    host_now = (status or {}).get("now")
    age = float(host_now) - float(at) if number(host_now) and number(at) else None
    return {"last_step_at": at if number(at) else last, "step_age": age, "gaps": gaps,
            "reports": int(previous.get("reports", 0)) + (1 if number(at) and at != last else 0)}


def _at_boundary(status: Mapping[str, Any]) -> bool:
    progress = _progress(status)
    step, steps = progress.get("step"), progress.get("steps_per_epoch")
    return not number(step) or step <= 0 or (number(steps) and step >= steps)


def hang(statuses: Mapping[str, Mapping[str, Any]], states: Mapping[str, str], gaps: Mapping[str, Mapping[str, Any]],
         active: Sequence[str], settings: HealthSettings) -> tuple[str, str] | None:
    """(the task behind, the message) when the job hangs (see the module docstring), else None."""
    if settings.hang_factor <= 0 or not statuses:
        return None
    stopped = _stopped_too_long(statuses, gaps, active, settings)
    if stopped is not None:
        return stopped
    if set(active) != set(states):
        return None
    training = [h for h, s in statuses.items() if _training(s)]
    if not training:
        return None
    ages: dict[str, tuple[float, float]] = {}
    for host in training:
        over = None if _at_boundary(statuses[host]) else _past_limit(statuses[host], gaps.get(host, {}), settings)
        if over is None:
            return None
        ages[host] = over
    behind = max(ages, key=lambda h: (*_doing(statuses[h]), ages[h][0]))
    age, limit = ages[behind]
    stopped, computing = _doing(statuses[behind])
    why = ("its process is stopped (SIGSTOP, a debugger)" if stopped else
           "it still computes while the others wait" if computing else f"its last step {duration_text(age)} ago")
    return behind, (f"the job hangs: every task is alive and none made a step for {duration_text(limit)} or more, "
                    f"{settings.hang_factor:g}x its usual time between steps (HANG); {behind} is behind ({why}). "
                    "Fix: see each task's stacks below; a longer HANG= waits longer, HANG=off leaves it to STALL")


def _past_limit(status: Mapping[str, Any], seen: Mapping[str, Any],
                settings: HealthSettings) -> tuple[float, float] | None:
    """(its step age on its own host's clock, the hang limit) of a task past its first reports whose last step is
    older than the limit (``factor`` x its median gap between reports, at least ``floor``); else None."""
    now, last = status.get("now"), seen.get("last_step_at")
    if int(seen.get("reports", 0)) < PAST_FIRST_REPORTS or not seen.get("gaps") or not number(now) or not number(last):
        return None
    limit = max(settings.hang_floor, settings.hang_factor * statistics.median(seen["gaps"]))
    age = float(now) - float(last)
    return (age, limit) if age > limit else None


def _stopped_too_long(statuses: Mapping[str, Mapping[str, Any]], gaps: Mapping[str, Mapping[str, Any]],
                      active: Sequence[str], settings: HealthSettings) -> tuple[str, str] | None:
    """A training task whose process is stopped (SIGSTOP, a debugger) with no step for the hang limit: a hang
    whatever its peers do meanwhile (under MultiWorkerMirrored their own health check may fail and restart them,
    so they are no longer all alive and training, and only STALL would end it)."""
    for host in sorted(active):
        status = statuses.get(host) or {}
        over = _past_limit(status, gaps.get(host, {}), settings) if _doing(status)[0] and _training(status) else None
        if over is not None:
            limit = over[1]
            return host, (f"the job hangs: {host}'s process is stopped and it made no step for {duration_text(limit)} "
                          f"or more, {settings.hang_factor:g}x its usual time between steps (HANG); {host} is behind "
                          "(its process is stopped (SIGSTOP, a debugger)). Fix: see each task's stacks below; "
                          "`kill -CONT` it or detach the debugger; HANG=off leaves it to STALL")
    return None


def _doing(status: Mapping[str, Any]) -> tuple[bool, bool]:
    """(stopped, computing) from the host's ``process`` facts (tfcluster.host.jobstatus.process_facts; any shape):
    in a job stuck in a collective every task waits but the one behind, which is stopped or still running."""
    process = status.get("process")
    if not isinstance(process, Mapping):
        return False, False
    running = process.get("running_threads")
    return process.get("state") in ("T", "t"), number(running) and running > 0
