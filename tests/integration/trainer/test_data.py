"""The in-memory input pipeline (index shuffle + gather): sharding, batching, normalisation, seeding, coverage."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from trainer import data

pytestmark = [pytest.mark.integration]

N, BATCH = 103, 8


@pytest.fixture(scope="module")
def tf() -> ModuleType:
    """TensorFlow, imported by the worker that runs these tests (at collection every pytest-xdist worker paid ~4 CPU-s
    for it); trainer.data imports it too."""
    return pytest.importorskip("tensorflow")


def arrays() -> data.Source:
    from trainer import data

    # Every image is filled with its own index, so a batch tells which rows it holds; labels are index % 10.
    x = np.broadcast_to(np.arange(N, dtype=np.uint8)[:, None, None], (N, 28, 28)).copy()
    return data.Source(name="t", x_train=x, y_train=(np.arange(N) % 10).astype(np.uint8), num_train=N)


def rows(batch: tuple) -> list[int]:
    images, labels = batch
    ids = [round(float(v) * 255) for v in images.numpy()[:, 0, 0, 0]]
    assert labels.numpy().tolist() == [i % 10 for i in ids]  # labels gathered with their images
    return ids


def batches(pipelines: int, pipeline: int, *, seed: int = 1, take: int | None = None, repeat: bool = False) -> list:
    import tensorflow as tf

    from trainer import data

    ctx = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline,
                                     num_replicas_in_sync=pipelines)
    fn = data.make_dataset_fn(arrays(), BATCH * pipelines, shuffle_buffer=1000, seed=seed, repeat=repeat,
                              total_batches=take)
    return list(fn(ctx))


def test_one_epoch_is_a_permutation_of_this_pipelines_shard(tf: ModuleType) -> None:
    got = batches(2, 1)
    shard = list(range(1, N, 2))  # DATA sharding: pipeline 1 of 2 takes every other example from index 1
    assert len(got) == len(shard) // BATCH
    seen = [i for b in got for i in rows(b)]
    assert len(seen) == len(set(seen)) == (len(shard) // BATCH) * BATCH
    assert set(seen) <= set(shard)
    assert seen != sorted(seen)  # shuffled


def test_batches_are_normalised_float_nhwc_with_int_labels(tf: ModuleType) -> None:
    images, labels = batches(1, 0, take=1)[0]
    assert images.shape == (BATCH, 28, 28, 1) and images.dtype == tf.float32
    assert labels.dtype == tf.int32
    assert float(tf.reduce_min(images)) >= 0.0 and float(tf.reduce_max(images)) <= 1.0


def test_the_seed_fixes_the_order_and_repeat_reshuffles(tf: ModuleType) -> None:
    first = [rows(b) for b in batches(1, 0, seed=7)]
    assert first == [rows(b) for b in batches(1, 0, seed=7)]
    assert first != [rows(b) for b in batches(1, 0, seed=8)]
    per_epoch = N // BATCH
    endless = [rows(b) for b in batches(1, 0, seed=7, repeat=True, take=2 * per_epoch)]
    assert len(endless) == 2 * per_epoch  # total_batches cuts the endless stream exactly
    assert endless[:per_epoch] != endless[per_epoch:]  # each pass over the data is shuffled anew
