"""Training data as arrays or file lists: read and verified without TensorFlow (TFRecords counted from their
framing), so the trainer loads it in a thread while TensorFlow is being imported (trainer/cli.py). Pipelines are
trainer/data.py's."""

from __future__ import annotations

import glob
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfcluster.core import files
from trainer import datasets, s3
from trainer.config import DataConfig

LOG = logging.getLogger("trainer.data")
IMAGE_SHAPE = (28, 28, 1)
NUM_CLASSES = 10


@dataclass(frozen=True)
class Source:
    """Training data: in-memory arrays or TFRecord files, plus an optional test split for the final evaluation."""

    name: str
    x_train: np.ndarray | None = None
    y_train: np.ndarray | None = None
    files: tuple[str, ...] = ()
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    num_train: int | None = None

    @property
    def has_test(self) -> bool:
        return self.x_test is not None and self.y_test is not None


def synthetic_arrays(n_train: int, n_test: int, seed: int) -> dict[str, np.ndarray]:
    """Learnable fake digits: one random template per class plus noise (uint8, MNIST layout)."""
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, size=(NUM_CLASSES, 28, 28)).astype(np.float32)
    out: dict[str, np.ndarray] = {}
    for split, n in (("train", n_train), ("test", n_test)):
        y = rng.integers(0, NUM_CLASSES, size=n).astype(np.uint8)
        noise = rng.normal(0, 60, size=(n, 28, 28)).astype(np.float32)
        out[f"x_{split}"] = np.clip(templates[y] * 0.6 + noise + 40, 0, 255).astype(np.uint8)
        out[f"y_{split}"] = y
    return out


TFRECORD_FRAME = struct.Struct("<QI")  # a record: length (uint64), its masked CRC-32C, the data, the data's CRC


def count_tfrecords(files: tuple[str, ...]) -> int:
    """Records in uncompressed TFRecord files, from their framing alone (no TensorFlow, no data read): cheap enough
    to run in the loading thread while TensorFlow is imported. Raises DatasetError on a file that does not end at a
    record boundary (truncated, compressed or not a TFRecord file)."""
    total = 0
    for name in files:
        size = os.path.getsize(name)
        with open(name, "rb") as handle:
            offset = 0
            while offset < size:
                header = handle.read(TFRECORD_FRAME.size)
                if len(header) < TFRECORD_FRAME.size:
                    offset = -1
                    break
                length, _ = TFRECORD_FRAME.unpack(header)
                offset += TFRECORD_FRAME.size + length + 4
                handle.seek(offset)
                total += 1
            if offset != size:
                raise datasets.DatasetError(f"{name} is not an uncompressed TFRecord file (it does not end at a record "
                                            "boundary). Fix: write plain TFRecords (trainer.data.write_tfrecords) or "
                                            "pass --steps-per-epoch")
    return total


def resolve_data_path(cfg: DataConfig, endpoint_url: str | None = None) -> Path:
    """The local npz for ``--dataset mnist`` (downloading an ``s3://`` object into the cache first, from
    ``endpoint_url``: --s3-endpoint-url)."""
    cache = Path(cfg.cache_dir) if cfg.cache_dir else datasets.default_cache_dir()
    if not cfg.path:
        path = cache / datasets.MNIST_FILE
        if not path.is_file():
            raise datasets.DatasetError(f"{path} does not exist. Fix: run `python -m trainer.datasets fetch` "
                                        "or pass --data")
        return path
    if cfg.path.startswith("s3://"):
        try:
            return s3.fetch_object(cfg.path, cache, cfg.sha256, endpoint_url)
        except ValueError as exc:
            raise datasets.DatasetError(str(exc)) from exc
    path = Path(cfg.path)
    if cfg.sha256 and files.sha256_file(path) != cfg.sha256:
        raise datasets.DatasetError(f"{path}: sha256 differs from --data-sha256. Fix: give the right file or digest")
    return path


def load_source(cfg: DataConfig, endpoint_url: str | None = None, count_records: bool = False) -> Source:
    """Read (and verify) the training data named by the config (``endpoint_url``: --s3-endpoint-url; TFRecords are
    counted when ``count_records``: without --steps-per-epoch). Raises DatasetError."""
    if cfg.dataset == "synthetic":
        arrays = synthetic_arrays(cfg.synthetic_examples, max(256, cfg.synthetic_examples // 8), cfg.seed)
    elif cfg.dataset == "mnist":
        path = resolve_data_path(cfg, endpoint_url)
        arrays = datasets.load_npz(path)
        if datasets.is_full_mnist(arrays):
            bad = [k for k in datasets.ARRAY_KEYS
                   if datasets.array_sha256(arrays[k]) != datasets.MNIST_ARRAY_SHA256[k]]
            if bad:
                raise datasets.DatasetError(f"{path}: {', '.join(bad)} differ from canonical MNIST. Fix: re-run "
                                            "`python -m trainer.datasets fetch`")
        LOG.info("loaded %s: %d train / %d test examples", path, len(arrays["y_train"]), len(arrays["y_test"]))
    else:
        files = tuple(sorted(glob.glob(cfg.path or "")))
        if not files:
            raise datasets.DatasetError(f"no TFRecord file matches {cfg.path!r}")
        return Source("tfrecord", files=files, num_train=count_tfrecords(files) if count_records else None)
    x, y = arrays["x_train"], arrays["y_train"]
    if cfg.max_examples:
        x, y = x[: cfg.max_examples], y[: cfg.max_examples]
    return Source(cfg.dataset, x_train=x, y_train=y, x_test=arrays["x_test"], y_test=arrays["y_test"],
                  num_train=len(y))
