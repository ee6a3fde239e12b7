"""Devices: the collective of a multi-worker job and the GPU check. Pure functions, no TensorFlow (the caller
counts the GPUs TensorFlow lists, before any server starts)."""

from __future__ import annotations

from tfcluster import contract
from tfcluster.contract import Problem


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
