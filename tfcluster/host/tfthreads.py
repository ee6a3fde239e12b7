"""TensorFlow's inter-op thread pool on a task with few CPUs. Standard library only.

TensorFlow sizes its inter-op pool from the CPUs the process may use (``sched_getaffinity``: systemd's
``CPUAffinity=``, ``taskset``, a Slurm cgroup's cpuset), so a task pinned to one CPU gets one inter-op thread. A
ParameterServer worker then hangs at its first step: the coordinator's function arrives over gRPC and runs on that
thread (``EagerServiceImpl::Enqueue`` -> ``KernelAndDeviceFunc::Run``), which waits for the function's own ops, and
they are queued on the same pool (tensorflow#38969; docs/jobs.md "Threads"). Every job's environment therefore gets
``TF_NUM_INTEROP_THREADS`` = :data:`INTEROP_THREADS_MIN` when its task has fewer CPUs than that and nobody set the
variable: the job module when it writes the env file (systemd units and local slots), the Slurm task launcher in
its step (the step's cpuset), the trainer for itself.

    env = with_interop_floor(env, usable_cpus(affinity))
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ..core.contract import ENV_INTEROP_THREADS, INTEROP_THREADS_MIN


def usable_cpus(affinity: Iterable[object] = ()) -> int:
    """The CPUs a task may use: its pinned CPUs when it is pinned (``affinity``), else this process's."""
    pinned = {str(cpu) for cpu in affinity}
    if pinned:
        return len(pinned)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def interop_floor(env: Mapping[str, str], cpus: int) -> dict[str, str]:
    """What to add to ``env`` for a task with ``cpus`` CPUs: the floor when it has fewer and ``env`` names no inter-op
    size of its own (the user's value wins, whatever it is), else nothing."""
    if ENV_INTEROP_THREADS in env or cpus >= INTEROP_THREADS_MIN:
        return {}
    return {ENV_INTEROP_THREADS: str(INTEROP_THREADS_MIN)}


def with_interop_floor(env: Mapping[str, str], cpus: int) -> dict[str, str]:
    """``env`` with :func:`interop_floor` added."""
    return {**env, **interop_floor(env, cpus)}
