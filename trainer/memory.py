"""Keep the memory a training step frees for the next step (glibc's ``M_TOP_PAD``).

With glibc's defaults, TensorFlow's CPU kernels (run on its thread pools, so on glibc's per-thread arenas) hand the
top of an arena back to the kernel when a step frees its buffers, and take fresh zero pages again in the next step:
the reference CNN at 64 examples per replica page-faults ~6,000 times a step (~24 MB of pages), a third of its
training CPU in the kernel (300 steps on this project's 2-core machine: 1.79 M minor faults, 6.7 s system of 19.6
CPU-s; with a 64 MiB pad: 96 k faults, 1.3 s system, 15.3 CPU-s, peak RSS 650 -> 696 MB; ``make bench`` measures it
again: ``bench/malloc_pad.py``). How much a step gives back depends on the CPU's kernels: on an AVX-512 EPYC the
same 300 steps fault 168 k times (0.9 s system of 6.0 CPU-s), with the pad 85 k (0.6-0.7 s system).
``mallopt(M_TOP_PAD, pad)`` keeps ``pad`` bytes at the top of each arena instead.

The pad is the trainer's, set in its own process before TensorFlow allocates, so it holds wherever the trainer runs
(systemd unit, Slurm step, local workers) with nothing in their environments. ``MALLOC_TOP_PAD_`` set by the user
wins (glibc read it at start), and ``TFCLUSTER_MALLOC_TOP_PAD=0`` keeps glibc's default. Without glibc (macOS, musl)
there is nothing to set.

Python's cyclic collector is off while TensorFlow is imported (:func:`import_without_collections`): the import
leaves ~270 k tracked objects and no garbage worth collecting, yet with the collector on it runs ~680 collections
over them, 6 of them full (~0.5 CPU-s of an import that costs ~3.9 here). Then every object the import made is
frozen (``gc.freeze``: the modules live as long as the process, so no later collection need walk them again) and the
collector is on again for training: a 300-step job ran 841 collections for 0.49-0.52 CPU-s, now 160 for 0.02-0.03.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import platform
from collections.abc import Callable, Iterator, Mapping

M_TOP_PAD = -2  # glibc's malloc.h
TOP_PAD_BYTES = 64 << 20
PAD_ENV = "TFCLUSTER_MALLOC_TOP_PAD"  # bytes; 0 keeps glibc's default
GLIBC_ENV = "MALLOC_TOP_PAD_"


class PadError(ValueError):
    """A pad setting that is not a whole number of bytes."""


def pad_bytes(env: Mapping[str, str]) -> int:
    """The pad to set: 0 where the user chose glibc's own (``MALLOC_TOP_PAD_``) or turned it off."""
    if GLIBC_ENV in env:
        return 0
    raw = env.get(PAD_ENV, "").strip()
    if not raw:
        return TOP_PAD_BYTES
    if not raw.isdigit():
        raise PadError(f"{PAD_ENV}={raw!r} is not a number of bytes. Fix: a whole number such as "
                       f"{TOP_PAD_BYTES} (64 MiB), or 0 for glibc's default")
    return int(raw)


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return getattr(ctypes.CDLL(None), "mallopt", None)  # the process's own libc
    except OSError:
        return None


def keep_freed_memory(env: Mapping[str, str],
                      mallopt: Callable[[], Callable[[int, int], int] | None] = _glibc_mallopt) -> int:
    """Set the pad (:func:`pad_bytes`) in this process; returns the bytes set, 0 where nothing was set."""
    pad = pad_bytes(env)
    call = mallopt() if pad else None
    return pad if call is not None and call(M_TOP_PAD, pad) == 1 else 0


@contextlib.contextmanager
def import_without_collections() -> Iterator[None]:
    """Python's cyclic collector off for the block (TensorFlow's import), then what the block made frozen out of
    every later collection, and the collector as it was before (on, unless the caller had turned it off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
