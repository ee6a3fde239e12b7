"""``python -m trainer``: validate everything, then choose legacy Keras, then import TensorFlow and train.

Exit codes: 0 done, 1 training failure, 2 bad input (found before TensorFlow is imported), 3 spot preemption.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainer import artifacts
from trainer.config import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    ConfigError,
    Invocation,
    parse_invocation,
    write_config_json,
)

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
        write_config_json(inv, str(model_dir / artifacts.CONFIG))
    return inv


def main(argv: Sequence[str] | None = None) -> int:
    try:
        inv = prepare(argv, os.environ)
    except ConfigError as exc:
        _setup_logging("INFO")
        LOG.error("%s", exc)
        return EXIT_BAD_INPUT
    except OSError as exc:
        _setup_logging("INFO")
        LOG.error("--model-dir: cannot create it (%s). Fix: choose a writable directory", exc)
        return EXIT_BAD_INPUT
    _setup_logging(inv.config.log_level)
    status = artifacts.StatusWriter(inv.config.status_path, inv.task, inv.config.status_interval)
    status.update(force=True, state="starting", strategy=inv.strategy)
    select_legacy_keras()
    from trainer import datasets

    try:
        from trainer import strategy as strategies
        from trainer import train
    except ImportError as exc:
        LOG.error("cannot import TensorFlow/tf_keras: %s. Fix: install trainer/requirements.txt", exc)
        status.update(force=True, state="failed", error=str(exc))
        return EXIT_FAILURE
    try:
        return train.run(inv, status)
    except datasets.DatasetError as exc:
        LOG.error("data: %s", exc)
        status.update(force=True, state="failed", error=str(exc))
        return EXIT_BAD_INPUT
    except strategies.StrategyError as exc:
        LOG.error("%s", exc)
        status.update(force=True, state="failed", error=str(exc))
        return EXIT_FAILURE
    except Exception as exc:
        LOG.exception("training failed")
        status.update(force=True, state="failed", error=f"{type(exc).__name__}: {str(exc)[:500]}")
        return EXIT_FAILURE
