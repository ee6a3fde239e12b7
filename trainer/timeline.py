"""Time: the start-up timeline (seconds from the process's start, by the kernel's clock so that interpreter start-up
and imports count, to each phase of a run: ``startup_s`` in status.json and metrics.json) and the ETA of a run.
No TensorFlow here."""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from dataclasses import dataclass, field


def process_age() -> float:
    """Seconds since this process started (Linux /proc); 0.0 where that is unknown."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, IndexError, ValueError):
        return 0.0
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: starttime, in clock ticks after boot
    return max(0.0, uptime - started)


class Timeline:
    """``mark(name)`` records the seconds since the process started; ``marks`` keeps them in order."""

    def __init__(self) -> None:
        self._origin = time.monotonic() - process_age()
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> float:
        self.marks.setdefault(name, round(time.monotonic() - self._origin, 3))
        return self.marks[name]


@dataclass(frozen=True)
class Plan:
    """The shape of the run: epochs in total, steps per epoch, the global batch, the first epoch of this run."""

    epochs: int
    steps: int
    global_batch: int
    initial_epoch: int = 0


def plan_for(epochs: int, steps_per_epoch: int | None, batch_size_per_replica: int, replicas: int,
             num_train: int | None) -> Plan:
    """The run's shape: ``steps_per_epoch``, else the training examples // the global batch (at least 1 step)."""
    global_batch = batch_size_per_replica * replicas
    return Plan(epochs, steps_per_epoch or max(1, (num_train or 0) // global_batch), global_batch)


def eta_seconds(plan: Plan, epoch: int, step: int, steps_per_sec: float) -> float | None:
    """Seconds to the end of training from ``step`` steps into 0-based ``epoch`` at ``steps_per_sec``."""
    if steps_per_sec <= 0:
        return None
    remaining = (plan.epochs - epoch - 1) * plan.steps + (plan.steps - step)
    return round(max(0, remaining) / steps_per_sec, 1)


PACE_WINDOW_S = 60.0  # the recent window of a task's pace in status.json


@dataclass
class Pace:
    """A task's recent pace, for status.json: steps/s and examples/s over the last ``window`` seconds, the time of
    its last completed step (this host's clock) and the mean compute time of a step over the window (the time a
    step spends before its gradient all-reduce, where the trainer can time it). ``step`` is called with the steps
    done so far at each report; clocks are passed in."""

    global_batch: int
    window: float = PACE_WINDOW_S
    _steps: deque[tuple[float, int]] = field(default_factory=deque)
    _compute: deque[tuple[float, float]] = field(default_factory=deque)
    last_step_at: float | None = None

    def step(self, mono: float, wall: float, steps_done: int, compute_s: float | None = None) -> None:
        if self._steps and steps_done <= self._steps[-1][1]:
            return
        self._steps.append((mono, steps_done))
        self.last_step_at = wall
        if compute_s is not None and compute_s >= 0:
            self._compute.append((mono, compute_s))
        for kept in (self._steps, self._compute):
            while len(kept) > 1 and kept[0][0] < mono - self.window:
                kept.popleft()

    def steps_per_sec(self) -> float | None:
        if len(self._steps) < 2 or self._steps[-1][0] <= self._steps[0][0]:
            return None
        (t0, s0), (t1, s1) = self._steps[0], self._steps[-1]
        return (s1 - s0) / (t1 - t0)

    def fields(self) -> dict[str, float | None]:
        """``steps_per_sec``, ``examples_per_sec`` (the window's; None until two reports), ``last_step_at``,
        ``step_compute_s`` (the window's mean; None where steps are not timed)."""
        rate = self.steps_per_sec()
        return {"steps_per_sec": None if rate is None else round(rate, 3),
                "examples_per_sec": None if rate is None else round(rate * self.global_batch, 1),
                "last_step_at": self.last_step_at,
                "step_compute_s": round(statistics.fmean(c for _, c in self._compute), 6) if self._compute else None}
