"""The straggler and the hang (tfcluster/run/health.py, issue 40): tables of fabricated status sequences, through the
wait's own decision (tfcluster.run.wait.decide), with the wait's clock and each host's clock apart."""

from __future__ import annotations

from typing import Any

import pytest

from tfcluster.run import health
from tfcluster.run.health import HealthSettings
from tfcluster.run.wait import RUNNING, STALLED, Settings, decide

SLOTS = {"w0": "worker:0", "w1": "worker:1", "w2": "worker:2"}
SETTINGS = Settings(chief="w0", stall_timeout=3600)


def training(**progress: Any) -> dict[str, Any]:
    return {"state": "training", "epoch": 1, "epochs": 3, "step": 40, "steps_per_epoch": 100, **progress}


def answer(progress: dict[str, Any] | None, *, host_now: float, state: str = "running") -> dict[str, Any]:
    status: dict[str, Any] = {"state": state, "restarts": 0, "now": host_now}
    if progress is not None:
        status["progress"] = progress
    return {"status": status}


def rounds(sequence: list[dict[str, dict[str, Any]]], *, start: float = 1000.0, every: float = 10.0,
           settings: Settings = SETTINGS, slots: dict[str, str] = SLOTS) -> list[dict[str, Any]]:
    """Each round's decision; the wait's clock runs from ``start`` by ``every``."""
    seen: dict[str, Any] = {}
    out = []
    for index, polls in enumerate(sequence):
        result = decide(polls, slots, seen, now=start + index * every, started=start, settings=settings)
        seen = result["seen"]
        out.append(result)
    return out


def entry(result: dict[str, Any], host: str) -> dict[str, Any]:
    return next(task for task in result["tasks"] if task["host"] == host)


@pytest.mark.parametrize(("statuses", "expected"), [
    # compute time a step when every compared task has one (1 / seconds): the all-reduce evens steps/s
    ({"w0": training(step_compute_s=0.1, steps_per_sec=5), "w1": training(step_compute_s=0.2, steps_per_sec=5)},
     {"w0": 10.0, "w1": 5.0}),
    # else steps/s
    ({"w0": training(steps_per_sec=4.0), "w1": training(step_compute_s=0.2, steps_per_sec=2.0)},
     {"w0": 4.0, "w1": 2.0}),
    # a ps and an evaluator are never compared; one task alone is not compared
    ({"w0": training(steps_per_sec=4.0), "p0": training(steps_per_sec=1.0), "e0": training(steps_per_sec=1.0)}, {}),
    # a task that has not started training (no phase, another phase, no rate yet) is not compared
    ({"w0": training(steps_per_sec=4.0), "w1": {"state": "starting"}, "w2": training()}, {}),
])
def test_the_pace_of_each_compared_task(statuses: dict[str, dict[str, Any]], expected: dict[str, float]) -> None:
    slots = {**SLOTS, "p0": "ps:0", "e0": "evaluator:0"}
    found = health.paces({h: {"progress": p} for h, p in statuses.items()}, slots)
    assert found == pytest.approx(expected)


def test_below_others_is_against_the_median_of_the_others() -> None:
    below = health.below_others({"w0": 10.0, "w1": 10.0, "w2": 6.9})
    assert below["w2"] == pytest.approx(0.31) and below["w0"] == pytest.approx(1 - 10 / 8.45)


def slow_round(host_now: float, slow: float = 0.3) -> dict[str, dict[str, Any]]:
    """w2's compute time is ``slow`` seconds against 0.2 for the others; each host has its own clock."""
    return {"w0": answer(training(step_compute_s=0.2), host_now=host_now),
            "w1": answer(training(step_compute_s=0.2), host_now=host_now + 3600),  # an hour ahead: never read
            "w2": answer(training(step_compute_s=slow), host_now=host_now - 7200)}


def test_a_straggler_is_named_after_the_threshold_time_by_the_waits_clock() -> None:
    settings = Settings(chief="w0", stall_timeout=3600, health=HealthSettings(below=0.15, after=120))
    results = rounds([slow_round(5.0 + i) for i in range(15)], settings=settings)  # every 10 s: 140 s
    named = [i for i, r in enumerate(results) if "straggler" in entry(r, "w2")]
    assert named[0] == 12  # slow from round 0 (t=1000): named at 120 s, not before
    assert entry(results[-1], "w2")["straggler"] == {"below": pytest.approx(1 / 3, abs=1e-3), "seconds": 140.0}
    assert all("straggler" not in entry(r, host) for r in results for host in ("w0", "w1"))
    assert results[-1]["decision"] == RUNNING  # named, not stopped
    assert results[-1]["stragglers"] == {"w2": {"below": pytest.approx(0.333, abs=1e-3), "seconds": 140.0}}
    assert health.straggler_text("w2", results[-1]["stragglers"]["w2"]) == "w2 ran 33 % below the others for 2 min 20 s"


def test_an_episode_ends_when_the_task_keeps_up_and_the_longest_is_kept() -> None:
    settings = Settings(chief="w0", stall_timeout=3600, health=HealthSettings(below=0.15, after=30))
    sequence = [slow_round(i) for i in range(6)] + [slow_round(i, slow=0.2) for i in range(3)] + \
        [slow_round(i) for i in range(4)]
    results = rounds(sequence, settings=settings)
    assert "straggler" not in entry(results[7], "w2")  # keeping up: not named any more
    assert "straggler" in entry(results[-1], "w2")  # 30 s into its second episode
    assert results[-1]["stragglers"]["w2"]["seconds"] == 50.0  # the first, longer episode (0..50 s)


@pytest.mark.parametrize("slow", [0.22, 0.2])  # 9 % slower, or not at all: below the 15 % threshold
def test_a_small_difference_names_nobody(slow: float) -> None:
    results = rounds([slow_round(i, slow=slow) for i in range(20)])
    assert all("straggler" not in t for r in results for t in r["tasks"]) and results[-1]["stragglers"] == {}


def test_straggler_off() -> None:
    settings = Settings(chief="w0", stall_timeout=3600, health=HealthSettings(below=0))
    results = rounds([slow_round(i) for i in range(20)], settings=settings)
    assert results[-1]["stragglers"] == {}


# --- the hang ------------------------------------------------------------------------------------------------------
def stepping(host_now: float, last_step_at: float, step: int = 40) -> dict[str, Any]:
    return answer(training(step=step, last_step_at=last_step_at, steps_per_sec=10.0), host_now=host_now)


def hang_sequence(stop_after: int, total: int, skew: dict[str, float], behind: str = "w1") -> list[dict[str, Any]]:
    """Each host reports a step every 2 s of its own clock until round ``stop_after``, then none (``behind`` stops
    one round earlier); rounds are 10 s apart; each host's clock is ``skew`` ahead."""
    sequence = []
    for index in range(total):
        t = 1000.0 + 10 * index
        polls = {}
        for host in SLOTS:
            last = min(index, stop_after - (host == behind)) * 10 + 1000.0 - 2.0
            polls[host] = stepping(t + skew[host], last + skew[host], step=40 + min(index, stop_after))
        sequence.append(polls)
    return sequence


def test_a_hang_is_found_before_the_stall_and_the_task_behind_named() -> None:
    skew = {"w0": 0.0, "w1": -3000.0, "w2": 500.0}  # clocks apart: each age is read on its own host's clock
    settings = Settings(chief="w0", stall_timeout=600, health=HealthSettings(hang_factor=5, hang_floor=30))
    results = rounds(hang_sequence(stop_after=5, total=14, skew=skew), settings=settings)
    decisions = [r["decision"] for r in results]
    first = decisions.index(STALLED)
    # reports every 10 s (gaps of 10 s): 5 x 10 = 50 s; the last steps 2 s before round 5 (w1: round 4), so at
    # round 10 every age is over 50 s
    assert first == 10, decisions
    assert results[first]["culprit"] == "w1"
    assert "the job hangs: every task is alive and none made a step for 50 s or more, 5x" in results[first]["message"]
    assert "w1 is behind (its last step 62 s ago)" in results[first]["message"]


def test_no_hang_while_one_task_steps_in_its_first_steps_or_when_off() -> None:
    skew = {"w0": 0.0, "w1": 0.0, "w2": 0.0}
    settings = Settings(chief="w0", stall_timeout=3600, health=HealthSettings(hang_factor=5, hang_floor=30))
    still = hang_sequence(stop_after=5, total=14, skew=skew)
    for polls in still[6:]:  # w2 keeps stepping
        polls["w2"]["status"]["progress"]["last_step_at"] = polls["w2"]["status"]["now"] - 1
    assert STALLED not in [r["decision"] for r in rounds(still, settings=settings)]
    early = hang_sequence(stop_after=1, total=14, skew=skew)  # never past its first reports
    assert STALLED not in [r["decision"] for r in rounds(early, settings=settings)]
    off = Settings(chief="w0", stall_timeout=3600, health=HealthSettings(hang_factor=0))
    assert STALLED not in [r["decision"] for r in rounds(hang_sequence(5, 14, skew), settings=off)]


def test_no_hang_at_an_epoch_boundary_or_while_a_task_is_not_alive() -> None:
    skew = {"w0": 0.0, "w1": 0.0, "w2": 0.0}
    settings = Settings(chief="w0", stall_timeout=3600, health=HealthSettings(hang_factor=5, hang_floor=30))
    boundary = hang_sequence(stop_after=5, total=14, skew=skew)
    for polls in boundary[6:]:
        polls["w0"]["status"]["progress"]["step"] = 100  # the epoch's last step: its backup and checkpoint
    assert STALLED not in [r["decision"] for r in rounds(boundary, settings=settings)]
    assert health.hang({"w0": {"progress": training()}}, {"w0": "running", "w1": "failed"}, {}, ["w0"],
                       HealthSettings()) is None


@pytest.mark.parametrize(("process", "why"), [
    ({"state": "T", "running_threads": 0}, "w2 is behind (its process is stopped (SIGSTOP, a debugger))"),
    ({"state": "S", "running_threads": 3}, "w2 is behind (it still computes while the others wait)"),
])
def test_the_task_behind_is_the_stopped_or_computing_one_when_every_last_step_is_alike(process: dict[str, Any],
                                                                                       why: str) -> None:
    skew = {"w0": 0.0, "w1": 0.0, "w2": 0.0}
    sequence = hang_sequence(stop_after=5, total=14, skew=skew, behind="none")  # the same last step everywhere
    for polls in sequence:
        for host in SLOTS:
            polls[host]["status"]["process"] = process if host == "w2" else {"state": "S", "running_threads": 0}
    settings = Settings(chief="w0", stall_timeout=3600, health=HealthSettings(hang_factor=5, hang_floor=30))
    stalled = next(r for r in rounds(sequence, settings=settings) if r["decision"] == STALLED)
    assert stalled["culprit"] == "w2" and why in stalled["message"], stalled["message"]


def test_process_facts_read_this_process_and_refuse_what_is_not_a_pid() -> None:
    import os

    from tfcluster.host.jobstatus import process_facts

    facts = process_facts(os.getpid())
    assert facts is not None and facts["state"] == "R" and facts["running_threads"] >= 1  # this thread runs
    assert process_facts(None) is None and process_facts(True) is None and process_facts(-1) is None
    assert process_facts(2**22 + 12345) is None  # no such process


def test_a_stopped_task_is_a_hang_while_its_peers_restart() -> None:
    """MultiWorkerMirrored's own health check failed the chief, which restarts and waits (connecting): not every task
    is alive and training, yet the stopped one is past the hang limit."""
    seen = {"w2": {"last_step_at": 1000.0, "gaps": [2.0] * 10, "reports": 10}}
    stopped = {"now": 1100.0, "progress": training(), "process": {"state": "T", "running_threads": 0}}
    statuses = {"w0": {"now": 1100.0, "progress": {"state": "connecting"}}, "w2": stopped}
    states = {"w0": "restarting", "w1": "running", "w2": "running"}
    found = health.hang(statuses, states, seen, ["w1", "w2"], HealthSettings(hang_factor=5, hang_floor=60))
    assert found is not None and found[0] == "w2", found
    assert "w2 is behind (its process is stopped (SIGSTOP, a debugger))" in found[1] and "HANG" in found[1]
    young = {**seen, "w2": {**seen["w2"], "last_step_at": 1050.0}}  # 50 s: under the 60 s floor
    assert health.hang(statuses, states, young, ["w1", "w2"], HealthSettings(hang_factor=5, hang_floor=60)) is None
    running = {**statuses, "w2": {**stopped, "process": {"state": "S", "running_threads": 0}}}
    assert health.hang(running, states, seen, ["w1", "w2"], HealthSettings(hang_factor=5, hang_floor=60)) is None
