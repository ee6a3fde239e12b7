"""Input pipelines. Imports TensorFlow: only call after :func:`trainer.cli.main` has chosen legacy Keras.

One ``dataset_fn(input_context)`` serves every strategy: ``distribute_datasets_from_function`` (mirrored,
multi-worker, TPU) and ``DatasetCreator`` (parameter server) both call it once per input pipeline. Sharding is
explicit and done here, so tf.distribute's auto-sharding is switched OFF on the result:

* npz / synthetic arrays: each pipeline takes every n-th example (DATA sharding, exact and cheap in memory), then
  shuffles and batches indices and gathers each batch in one op;
* TFRecord: each pipeline takes every n-th *file* (FILE sharding; needs at least as many files as pipelines).

The training stream is infinite (``repeat()`` before ``batch``) and ``fit`` runs a fixed ``steps_per_epoch``: Keras
then keeps one iterator for the whole run instead of tearing down and rebuilding it at every epoch boundary, which
stalled MultiWorkerMirrored workers for 5-14 s per epoch (measured; docs/trainer.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from trainer.source import IMAGE_SHAPE, NUM_CLASSES, Source

__all__ = ["IMAGE_SHAPE", "NUM_CLASSES", "HeldIterators", "Source", "make_dataset_fn", "test_dataset",
           "write_tfrecords"]

LOG = logging.getLogger("trainer.data")


class HeldIterators(tf.distribute.DistributedDataset):
    """A distributed (or per-worker) dataset that keeps every iterator it hands out (``iterators``).

    Deleting a tf.data iterator joins its autotune thread (``RootDataset::Iterator`` -> the ``tf_data_model``
    thread, in a timed wait in ``Model::OptimizeLoop`` until its next optimisation is due): at the end of ``fit``
    that join took 0-86 s (measured; docs/trainer.md). The trainer holds this object until the process leaves with
    ``os._exit`` (trainer.train.holding_data_handlers), so that destructor never runs."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.iterators: list[tf.distribute.DistributedIterator] = []

    def __iter__(self) -> tf.distribute.DistributedIterator:
        iterator = iter(self.dataset)
        self.iterators.append(iterator)
        return iterator

    @property
    def element_spec(self) -> object:
        return self.dataset.element_spec

    def reduce(self, initial_state: object, reduce_func: Callable[..., object]) -> object:
        return self.dataset.reduce(initial_state, reduce_func)

    def __getattr__(self, name: str) -> object:
        if name == "dataset":  # not set yet (copy, unpickling)
            raise AttributeError(name)
        return getattr(self.dataset, name)


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
