"""TensorFlow's inter-op floor (tfcluster/host/tfthreads.py, issue 36): a task on one CPU gets two inter-op threads
(one deadlocks a ParameterServer worker at its first step), a value the job sets wins."""

from __future__ import annotations

import os

import pytest

from tfcluster.core import contract
from tfcluster.host import tfthreads

FLOOR = {contract.ENV_INTEROP_THREADS: str(contract.INTEROP_THREADS_MIN)}


@pytest.mark.parametrize(("env", "cpus", "added"), [
    ({}, 1, FLOOR),  # a local slot, a Slurm task on one core, a 1-vCPU host
    ({"PATH": "/bin"}, 1, FLOOR),
    ({}, 2, {}),  # TensorFlow's own size is the floor or more: left to TensorFlow
    ({}, 96, {}),
    ({contract.ENV_INTEROP_THREADS: "1"}, 1, {}),  # the user's value wins, even one that can hang
    ({contract.ENV_INTEROP_THREADS: "8"}, 1, {}),
])
def test_the_floor_is_added_only_below_it_and_only_when_unset(env: dict[str, str], cpus: int, added: dict) -> None:
    assert tfthreads.interop_floor(env, cpus) == added
    assert tfthreads.with_interop_floor(env, cpus) == {**env, **added}


def test_usable_cpus_counts_the_pinned_cpus_else_this_process_s() -> None:
    assert tfthreads.usable_cpus([0]) == 1
    assert tfthreads.usable_cpus(["0", "1", 1]) == 2  # as Jinja may render them: strings, repeated
    assert tfthreads.usable_cpus() == len(os.sched_getaffinity(0))


def test_a_process_pinned_to_one_cpu_counts_one() -> None:
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert tfthreads.usable_cpus() == 1
    finally:
        os.sched_setaffinity(0, before)
