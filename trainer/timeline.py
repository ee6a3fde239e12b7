"""Time: the start-up timeline (seconds from the process's start, by the kernel's clock so that interpreter start-up
and imports count, to each phase of a run: ``startup_s`` in status.json and metrics.json) and the ETA of a run.
No TensorFlow here."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


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
