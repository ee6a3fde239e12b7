"""Input pipelines. Imports TensorFlow: only call after :func:`trainer.cli.main` has chosen legacy Keras.

One ``dataset_fn(input_context)`` serves every strategy: ``distribute_datasets_from_function`` (mirrored,
multi-worker, TPU) and ``DatasetCreator`` (parameter server) both call it once per input pipeline. Sharding is
explicit and done here, so tf.distribute's auto-sharding is switched OFF on the result:

* npz / synthetic arrays: each pipeline takes every n-th example (DATA sharding, exact and cheap in memory), then
  shuffles and batches indices and gathers each batch in one op;
* TFRecord: each pipeline takes every n-th *file* (FILE sharding; needs at least as many files as pipelines).

The training stream is infinite (``repeat()`` before ``batch``) and ``fit`` runs a fixed ``steps_per_epoch``: Keras
then keeps one iterator for the whole run instead of tearing down and rebuilding it at every epoch boundary, which
stalled MultiWorkerMirrored workers for 5-14 s per epoch (DESIGN.md, measured).
"""

from __future__ import annotations

import glob
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from trainer import datasets
from trainer.config import TrainConfig

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


def resolve_data_path(cfg: TrainConfig) -> Path:
    """The local npz for ``--dataset mnist`` (downloading an ``s3://`` object into the cache first)."""
    cache = Path(cfg.cache_dir) if cfg.cache_dir else datasets.default_cache_dir()
    if not cfg.data:
        path = cache / datasets.MNIST_FILE
        if not path.is_file():
            raise datasets.DatasetError(f"{path} does not exist. Fix: run `python -m trainer.datasets fetch` "
                                        "or pass --data")
        return path
    if cfg.data.startswith("s3://"):
        return datasets.fetch_s3(cfg.data, cache, cfg.data_sha256, cfg.s3_endpoint_url)
    path = Path(cfg.data)
    if cfg.data_sha256 and datasets.sha256_file(path) != cfg.data_sha256:
        raise datasets.DatasetError(f"{path}: sha256 differs from --data-sha256. Fix: give the right file or digest")
    return path


def load_source(cfg: TrainConfig) -> Source:
    """Read (and verify) the training data named by the config. Raises DatasetError."""
    if cfg.dataset == "synthetic":
        arrays = synthetic_arrays(cfg.synthetic_examples, max(256, cfg.synthetic_examples // 8), cfg.seed)
    elif cfg.dataset == "mnist":
        path = resolve_data_path(cfg)
        arrays = datasets.load_npz(path)
        if datasets.is_full_mnist(arrays):
            bad = [k for k in datasets.ARRAY_KEYS
                   if datasets.array_sha256(arrays[k]) != datasets.MNIST_ARRAY_SHA256[k]]
            if bad:
                raise datasets.DatasetError(f"{path}: {', '.join(bad)} differ from canonical MNIST. Fix: re-run "
                                            "`python -m trainer.datasets fetch`")
        LOG.info("loaded %s: %d train / %d test examples", path, len(arrays["y_train"]), len(arrays["y_test"]))
    else:
        files = tuple(sorted(glob.glob(cfg.data or "")))
        if not files:
            raise datasets.DatasetError(f"no TFRecord file matches {cfg.data!r}")
        return Source("tfrecord", files=files, num_train=count_tfrecords(files) if cfg.steps_per_epoch is None
                      else None)
    x, y = arrays["x_train"], arrays["y_train"]
    if cfg.max_examples:
        x, y = x[: cfg.max_examples], y[: cfg.max_examples]
    return Source(cfg.dataset, x_train=x, y_train=y, x_test=arrays["x_test"], y_test=arrays["y_test"],
                  num_train=len(y))


def count_tfrecords(files: tuple[str, ...]) -> int:
    return sum(1 for f in files for _ in tf.data.TFRecordDataset(f))


_FEATURES = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}


def _parse_record(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    parsed = tf.io.parse_single_example(record, _FEATURES)
    image = tf.reshape(tf.io.decode_raw(parsed["image"], tf.uint8), (28, 28))
    return image, tf.cast(parsed["label"], tf.uint8)


def _normalise(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Batch-level (vectorised) uint8 -> float32 in [0, 1], NHWC."""
    x = tf.cast(x, tf.float32) / 255.0
    return tf.expand_dims(x, -1), tf.cast(y, tf.int32)


def write_tfrecords(x: np.ndarray, y: np.ndarray, pattern: str, shards: int) -> list[str]:
    """Write arrays as ``shards`` TFRecord files (``pattern`` has one ``{}`` for the shard number)."""
    paths = []
    for shard in range(shards):
        path = pattern.format(f"{shard:05d}-of-{shards:05d}")
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(shard, len(y), shards):
                example = tf.train.Example(features=tf.train.Features(feature={
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[x[i].tobytes()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y[i])]))}))
                writer.write(example.SerializeToString())
        paths.append(path)
    return paths


def _batched(ds: tf.data.Dataset, batch: int, repeat: bool, total_batches: int | None) -> tf.data.Dataset:
    """Endless (``repeat``) fixed-size batches, cut at exactly ``total_batches`` when given."""
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch, drop_remainder=True)
    return ds.take(total_batches) if total_batches is not None else ds


def _gather(x: np.ndarray, y: np.ndarray) -> Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    """A map function from a batch of indices to that batch of normalised examples."""
    images, labels = tf.constant(x), tf.constant(y)

    def take(indices: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return _normalise(tf.gather(images, indices), tf.gather(labels, indices))

    return take


def make_dataset_fn(source: Source, global_batch: int, shuffle_buffer: int, seed: int, *, repeat: bool = True,
                    total_batches: int | None = None) -> Callable[[tf.distribute.InputContext | None],
                                                                  tf.data.Dataset]:
    """The per-pipeline dataset function (see the module docstring for sharding).

    ``total_batches``: end the stream after exactly the batches ``fit`` will take, so that when training ends the
    prefetch threads have already stopped at end-of-sequence instead of being cancelled mid-work by the iterator
    teardown."""

    def dataset_fn(ctx: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        pipelines = ctx.num_input_pipelines if ctx else 1
        pipeline = ctx.input_pipeline_id if ctx else 0
        batch = ctx.get_per_replica_batch_size(global_batch) if ctx else global_batch
        if source.files:
            files = source.files[pipeline::pipelines]
            if not files:
                raise ValueError(f"{len(source.files)} TFRecord files cannot be FILE-sharded over {pipelines} input "
                                 "pipelines: write at least one file per worker")
            ds = tf.data.Dataset.from_tensor_slices(list(files))
            ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(4, len(files)),
                               num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            ds = ds.map(_parse_record, num_parallel_calls=tf.data.AUTOTUNE).cache()
            ds = ds.shuffle(shuffle_buffer, seed=seed + pipeline, reshuffle_each_iteration=True)
            ds = _batched(ds, batch, repeat, total_batches).map(_normalise, num_parallel_calls=tf.data.AUTOTUNE)
        else:
            # Arrays are in memory: shuffle and batch *indices*, then gather each batch's rows in one vectorised
            # op. Shuffling the images themselves copies every 784-byte element through the shuffle buffer; this
            # took the trainer from ~0.8 to ~0.95 of the compute ceiling (bench/train_throughput.py).
            x, y = source.x_train[pipeline::pipelines], source.y_train[pipeline::pipelines]
            ds = tf.data.Dataset.range(len(y))
            ds = ds.shuffle(shuffle_buffer, seed=seed + pipeline, reshuffle_each_iteration=True)
            ds = _batched(ds, batch, repeat, total_batches).map(_gather(x, y), num_parallel_calls=tf.data.AUTOTUNE)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return ds.with_options(options).prefetch(tf.data.AUTOTUNE)

    return dataset_fn


def test_dataset(source: Source, batch: int = 1000) -> tf.data.Dataset | None:
    if not source.has_test:
        return None
    ds = tf.data.Dataset.from_tensor_slices((source.x_test, source.y_test)).batch(batch)
    return ds.map(_normalise, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
