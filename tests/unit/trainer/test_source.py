"""Reading the training data without TensorFlow: TFRecords counted from their framing in the loading thread (so no
tf.data pass is needed after the strategy started), and the data config group."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.unit.trainer.tf_free import loads_tensorflow
from trainer import datasets
from trainer.config import DataConfig
from trainer.source import count_tfrecords, load_source


def write_framed(path: Path, payloads: list[bytes]) -> Path:
    """TFRecord framing (length, its CRC, data, the data's CRC); the counter reads the lengths only."""
    with open(path, "wb") as handle:
        for payload in payloads:
            handle.write(struct.pack("<QI", len(payload), 0) + payload + b"\0\0\0\0")
    return path


def test_count_tfrecords_from_framing(tmp_path: Path) -> None:
    a = write_framed(tmp_path / "train-0.tfrecord", [b"x" * 800, b"", b"y" * 3])
    b = write_framed(tmp_path / "train-1.tfrecord", [b"z" * 10] * 5)
    empty = write_framed(tmp_path / "train-2.tfrecord", [])
    assert count_tfrecords((str(a), str(b), str(empty))) == 8
    assert not loads_tensorflow(f"from trainer.source import count_tfrecords; count_tfrecords(({str(a)!r},))")


@pytest.mark.parametrize("cut", [1, 5, 13])
def test_count_tfrecords_refuses_a_file_cut_short(tmp_path: Path, cut: int) -> None:
    path = write_framed(tmp_path / "train-0.tfrecord", [b"x" * 100, b"y" * 100])
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(datasets.DatasetError, match=r"not an uncompressed TFRecord file.*Fix: "):
        count_tfrecords((str(path),))


def test_load_source_counts_tfrecords_only_when_asked(tmp_path: Path) -> None:
    for shard in range(2):
        write_framed(tmp_path / f"train-{shard}.tfrecord", [b"r"] * (3 + shard))
    cfg = DataConfig(dataset="tfrecord", path=str(tmp_path / "train-*.tfrecord"))
    counted = load_source(cfg, count_records=True)
    assert counted.num_train == 7 and len(counted.files) == 2
    assert load_source(cfg).num_train is None  # --steps-per-epoch given: nothing read


def test_load_source_synthetic_uses_the_data_group() -> None:
    source = load_source(DataConfig(dataset="synthetic", synthetic_examples=300, max_examples=100, seed=1))
    assert source.num_train == 100 and source.x_train is not None and source.x_train.shape == (100, 28, 28)
    assert source.has_test
