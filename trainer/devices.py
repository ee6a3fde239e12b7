"""Devices: the collective of a multi-worker job, the GPU check and the TPU check. No TensorFlow (the caller counts
the GPUs TensorFlow lists, before any server starts; the TPU check runs before TensorFlow is imported)."""

from __future__ import annotations

import glob
import importlib.util
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tfcluster.core import contract
from tfcluster.core.contract import Problem

# A TPU VM's chips: /dev/accel0.. (TPU v2-v4) or /dev/vfio/0.. (v5e and later).
TPU_DEVICE_GLOBS: tuple[str, ...] = ("/dev/accel*", "/dev/vfio/[0-9]*")
LAST_TPU_TENSORFLOW = (2, 20)  # tensorflow-tpu on PyPI stops at 2.20.0; TensorFlow 2.21 has no TPU wheel


def resolve_collective(collective: str, strategy: str) -> str | None:
    """The all-reduce of a multi_worker_mirrored job: ``nccl`` or ``ring`` (``auto`` = ring: the job area sets
    TFCLUSTER_COLLECTIVE=nccl, the default of ``--collective``, when every task has GPUs). None for other strategies."""
    if strategy != "multi_worker_mirrored":
        return None
    return "nccl" if collective == "nccl" else "ring"


def gpu_problem(host: str, declared: int, seen: int, require: bool, collective: str | None) -> Problem | None:
    """Whether this host may train with the GPUs TensorFlow sees (checked before any server starts)."""
    fix = (f"check the NVIDIA driver on {host} (`nvidia-smi` as the job user), install the CUDA wheels "
           "(tensorflow[and-cuda], the python_runtime role does on GPU hosts), or declare tfcluster_gpus=0 for this "
           "host (--no-require-gpu trains on the CPU anyway)")
    if require and seen < max(declared, 1):
        return Problem(contract.ENV_GPUS, f"host {host}: {max(declared, 1)} GPU(s) declared but TensorFlow sees "
                       f"{seen}", fix)
    if collective == "nccl" and seen == 0:
        return Problem("--collective", f"host {host}: NCCL needs GPUs but TensorFlow sees none",
                       f"use --collective ring (env {contract.ENV_COLLECTIVE}=ring), or {fix}")
    return None


@dataclass(frozen=True)
class TpuHost:
    """What this host offers a TPUStrategy, read without importing TensorFlow (:func:`probe_tpu_host`)."""

    name: str
    devices: tuple[str, ...]  # TPU device nodes
    runtime: bool  # libtpu importable, or TPU_LIBRARY_PATH names a file
    tensorflow: str | None  # the installed tensorflow distribution's version
    tensorflow_tpu: str | None  # the installed tensorflow-tpu distribution's version


def _version(distribution: str) -> str | None:
    import importlib.metadata  # only under --strategy tpu

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_tpu_host(env: Mapping[str, str] | None = None,
                   devices: Callable[[str], list[str]] = glob.glob) -> TpuHost:
    """Look for a TPU without TensorFlow: device nodes, the libtpu runtime, TensorFlow's TPU wheel."""
    env = os.environ if env is None else env
    library = env.get("TPU_LIBRARY_PATH", "")
    runtime = bool(library and os.path.isfile(library)) or importlib.util.find_spec("libtpu") is not None
    nodes = tuple(sorted(path for pattern in TPU_DEVICE_GLOBS for path in devices(pattern)))
    return TpuHost(socket.gethostname(), nodes, runtime, _version("tensorflow"), _version("tensorflow-tpu"))


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def tpu_problem(host: TpuHost) -> Problem | None:
    """Whether ``--strategy tpu`` can run here: a single Cloud TPU VM (``tpu='local'``) with its chips, the libtpu
    runtime and a TensorFlow that has TPU support (tensorflow-tpu <= 2.20). None when it can."""
    missing = []
    if not host.devices:
        missing.append("no TPU device (" + " or ".join(TPU_DEVICE_GLOBS) + ")")
    if not host.runtime:
        missing.append("no TPU runtime (the libtpu package is not importable, TPU_LIBRARY_PATH names no file)")
    if host.tensorflow_tpu is None and (host.tensorflow is None
                                        or _release(host.tensorflow) > LAST_TPU_TENSORFLOW):
        missing.append(f"TensorFlow {host.tensorflow or '(none)'} has no TPU support (tensorflow-tpu is not "
                       "installed; it stops at 2.20.0 and TensorFlow 2.21 has no TPU wheel)")
    if not missing:
        return None
    return Problem("--strategy", f"host {host.name}: tpu runs only on a single Cloud TPU VM (tpu='local'), with "
                   f"TensorFlow <= 2.20 and its TPU runtime; here: {'; '.join(missing)}",
                   "run on a Cloud TPU VM with tensorflow-tpu and tf-keras 2.20 and libtpu installed (this project's "
                   "locks pin TensorFlow 2.21 and hold no TPU runtime), or use STRATEGY=mirrored / "
                   "multi_worker_mirrored (--strategy)")
