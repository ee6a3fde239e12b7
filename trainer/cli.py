"""``python -m trainer``: validate everything, watch SIGTERM, select legacy Keras, import TensorFlow, check the GPUs,
train.

Exit codes (tfcluster.core.contract): 0 done, 1 training failure, 2 bad input (found before any server starts),
3 stopped after a backup (a spot notice or SIGTERM; re-run to resume).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tfcluster.core import contract, files
from tfcluster.host.tfthreads import interop_floor, usable_cpus
from trainer import artifacts, devices, memory, stop
from trainer.config import ConfigError, Invocation, parse_invocation
from trainer.timeline import Timeline

LOG = logging.getLogger("trainer")

# Legacy Keras (tf_keras) is the Keras that runs fit() under MultiWorkerMirrored and ParameterServer strategies
# (docs/trainer.md). TensorFlow reads this when it is first imported, so it is set before that import.
LEGACY_KERAS_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "1"}


def select_legacy_keras(env: Mapping[str, str] | None = None) -> None:
    if "tensorflow" in sys.modules and os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise RuntimeError("TensorFlow was imported before legacy Keras was selected")
    for key, value in (env or LEGACY_KERAS_ENV).items():
        os.environ.setdefault(key, value) if key == "TF_CPP_MIN_LOG_LEVEL" else os.environ.__setitem__(key, value)


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level, logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s", stream=sys.stderr)


def prepare(argv: Sequence[str] | None, env: Mapping[str, str]) -> Invocation:
    """Validate argv + TF_CONFIG, create the model dir, write config.json (chief) — no TensorFlow."""
    inv = parse_invocation(argv, env)
    model_dir = Path(inv.config.model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    if inv.is_chief:
        artifacts.clear_completion(model_dir)
        files.atomic_write_json(model_dir / contract.CONFIG, inv.to_dict())
    return inv


def _bad_input(message: str, status: artifacts.StatusWriter | None = None) -> int:
    if not logging.getLogger().handlers:
        _setup_logging("INFO")
    LOG.error("%s", message)
    if status is not None:
        status.update(force=True, state="failed", error=message)
    return contract.EXIT_BAD_INPUT


def _exit_now(status: artifacts.StatusWriter, request: stop.StopRequest) -> None:
    """SIGTERM before training: nothing new to save; say so and leave (no TensorFlow teardown)."""
    LOG.warning("%s: exiting %d", request.detail, contract.EXIT_PREEMPTED)
    status.update(force=True, state=request.reason, stop_reason=request.detail)
    logging.shutdown()
    os._exit(contract.EXIT_PREEMPTED)


def main(argv: Sequence[str] | None = None) -> int:
    timeline = Timeline()
    try:
        inv = prepare(argv, os.environ)
    except ConfigError as exc:
        return _bad_input(str(exc))
    except OSError as exc:
        return _bad_input(f"--model-dir: cannot create it ({exc}). Fix: choose a writable directory")
    _setup_logging(inv.config.reporting.log_level)
    status = artifacts.StatusWriter(inv.config.status_path, inv.task, inv.config.reporting.status_interval)
    status.update(force=True, state="starting", strategy=inv.strategy, collective=inv.collective)
    request = stop.StopRequest()
    stop.watch_sigterm(request, lambda: _exit_now(status, request))  # before any other thread exists
    try:
        pad = memory.keep_freed_memory(os.environ)  # before TensorFlow allocates (trainer/memory.py)
    except memory.PadError as exc:
        return _bad_input(str(exc), status)
    LOG.debug("malloc top pad: %d bytes", pad)
    timeline.mark("imports")
    loading = None if inv.serves_only else _load_in_background(inv)  # while TensorFlow is imported
    select_legacy_keras()
    # Before TensorFlow sizes its pools: one inter-op thread deadlocks ParameterServer (tfcluster/host/tfthreads.py).
    os.environ.update(interop_floor(os.environ, usable_cpus()))
    return _train(inv, status, request, timeline, loading)


def _load(inv: Invocation) -> Any:
    from trainer.source import load_source  # numpy: imported here, beside TensorFlow's import in the main thread

    return load_source(inv.config.data, inv.config.s3.endpoint_url,
                       count_records=inv.config.optimisation.steps_per_epoch is None)


def _load_in_background(inv: Invocation) -> Future[Any]:
    """The training data, read in a thread of its own (decompression and hashing release the GIL; TFRecords are
    counted there too, from their framing)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="data")
    future = pool.submit(_load, inv)
    pool.shutdown(wait=False)
    return future


def _train(inv: Invocation, status: artifacts.StatusWriter, request: stop.StopRequest, timeline: Timeline,
           loading: Future[Any] | None) -> int:
    from trainer import datasets

    try:
        with memory.import_without_collections():  # TensorFlow's import: trainer/memory.py
            from trainer import strategy as strategies
            from trainer import train
    except ImportError as exc:
        LOG.error("cannot import TensorFlow/tf_keras: %s. Fix: install trainer/requirements.txt", exc)
        status.update(force=True, state="failed", error=str(exc))
        return contract.EXIT_FAILURE
    timeline.mark("tensorflow")
    problem = devices.gpu_problem(socket.gethostname(), inv.config.distribution.gpus, train.visible_gpus(),
                                  inv.require_gpu, inv.collective)
    if problem is not None:
        return _bad_input(str(problem), status)
    try:
        return train.run(inv, status, request, timeline, loading)
    except datasets.DatasetError as exc:
        return _bad_input(f"data: {exc}", status)
    except strategies.StrategyError as exc:
        LOG.error("%s", exc)
        status.update(force=True, state="failed", error=str(exc))
        return contract.EXIT_FAILURE
    except Exception as exc:
        LOG.exception("training failed")
        status.update(force=True, state="failed", error=f"{type(exc).__name__}: {str(exc)[:500]}")
        return contract.EXIT_FAILURE
