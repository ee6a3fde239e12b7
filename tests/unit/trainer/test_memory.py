"""trainer/memory.py: the malloc pad the trainer sets in its own process."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainer import memory

REPO = Path(__file__).resolve().parents[3]


def test_the_default_pad_is_64_mib() -> None:
    assert memory.pad_bytes({}) == 64 << 20 == memory.TOP_PAD_BYTES


@pytest.mark.parametrize(("env", "pad"), [({"TFCLUSTER_MALLOC_TOP_PAD": "0"}, 0),
                                          ({"TFCLUSTER_MALLOC_TOP_PAD": " 1048576 "}, 1 << 20),
                                          ({"MALLOC_TOP_PAD_": "4096"}, 0),
                                          ({"MALLOC_TOP_PAD_": "4096", "TFCLUSTER_MALLOC_TOP_PAD": "9"}, 0)])
def test_the_users_choice_wins(env: dict[str, str], pad: int) -> None:
    assert memory.pad_bytes(env) == pad


def test_a_pad_that_is_not_bytes_names_the_variable_and_the_fix() -> None:
    with pytest.raises(memory.PadError, match=r"TFCLUSTER_MALLOC_TOP_PAD='64M' is not a number of bytes\. Fix"):
        memory.pad_bytes({"TFCLUSTER_MALLOC_TOP_PAD": "64M"})


def test_it_calls_mallopt_with_m_top_pad_and_says_what_it_set() -> None:
    calls: list[tuple[int, int]] = []

    def mallopt(option: int, value: int) -> int:
        calls.append((option, value))
        return 1

    assert memory.keep_freed_memory({}, lambda: mallopt) == 64 << 20
    assert calls == [(-2, 64 << 20)]
    assert memory.keep_freed_memory({"TFCLUSTER_MALLOC_TOP_PAD": "0"}, lambda: mallopt) == 0
    assert len(calls) == 1  # turned off: not called
    assert memory.keep_freed_memory({}, lambda: None) == 0  # no glibc
    assert memory.keep_freed_memory({}, lambda: lambda option, value: 0) == 0  # glibc refused it


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="M_TOP_PAD is glibc's")
def test_with_the_pad_a_thread_that_frees_and_allocates_again_stops_faulting_fresh_pages() -> None:
    """The real outcome, in a child process: a thread (its own arena, as TensorFlow's kernels) allocates and frees
    16 MB ten times in a loop of 200; with glibc's defaults each allocation takes fresh pages from the kernel."""
    script = textwrap.dedent("""
        import ctypes, resource, sys, threading
        from trainer import memory
        pad = memory.keep_freed_memory({} if sys.argv[1] == "on" else {"TFCLUSTER_MALLOC_TOP_PAD": "0"})
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]
        def work():
            for _ in range(200):
                blocks = [libc.malloc(1 << 20) for _ in range(16)]
                for block in blocks:
                    ctypes.memset(block, 1, 1 << 20)
                for block in blocks:
                    libc.free(block)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        print(pad, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | {"PYTHONPATH": str(REPO)}
    faults = {}
    for mode in ("off", "on"):
        out = subprocess.run([sys.executable, "-c", script, mode], env=env, capture_output=True, text=True,
                             check=True, timeout=60).stdout.split()
        faults[mode] = (int(out[0]), int(out[1]))
    assert faults["off"][0] == 0 and faults["on"][0] == 64 << 20
    assert faults["off"][1] > 200 * 4096 // 2, faults  # ~4,096 fresh pages a round without the pad
    assert faults["on"][1] < faults["off"][1] / 20, faults


def test_the_import_runs_without_collections_and_what_it_made_is_frozen_out_of_later_ones() -> None:
    """In a child process (a freeze would stay in this worker): no collection runs in the block, what the block made
    is frozen after it, and the collector is on again only where it was on before."""
    script = textwrap.dedent("""
        import gc, json
        from trainer import memory
        seen = []
        gc.callbacks.append(lambda phase, info: seen.append(phase) if phase == "start" else None)
        gc.collect()
        seen.clear()
        frozen = gc.get_freeze_count()
        with memory.import_without_collections():
            inside = gc.isenabled()
            made = [[i] for i in range(100_000)]  # past every generation's threshold
        collections_inside = len(seen)
        after = gc.isenabled()
        newly_frozen = gc.get_freeze_count() - frozen
        gc.disable()
        with memory.import_without_collections():
            pass
        print(json.dumps([inside, collections_inside, after, newly_frozen, gc.isenabled()]))
    """)
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, check=True, timeout=60).stdout
    inside, collections_inside, after, newly_frozen, still_off = json.loads(out)
    assert (inside, collections_inside, after) == (False, 0, True)
    assert newly_frozen >= 100_000  # the block's lists, now out of every later collection
    assert still_off is False  # a caller that had turned the collector off keeps it off
