"""tfcluster/host/jobhome.py: the job's own writable home, its Keras dataset cache and the S3 dataset cache, made as
the job user (a real child process dropping to ``nobody`` when the tests run as root)."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfcluster.core.contract import JOB_HOME_ENV
from tfcluster.host import jobhome
from tfcluster.host.jobspec import JobError

REPO = Path(__file__).resolve().parents[3]
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="drops to another user: root only")


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A directory another user can traverse (pytest's own tmp dirs are root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="tfcluster-jobhome-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def keras_pin(open_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A datasets dir whose mnist.npz is, for this test, the file Keras pins (its sha256 set as the pin)."""
    datasets = open_tmp / "datasets"
    datasets.mkdir(mode=0o755)
    data = datasets / "mnist.npz"
    data.write_bytes(b"the arrays keras wants\n" * 100)
    data.chmod(0o644)
    monkeypatch.setitem(jobhome.KERAS_DATASETS, "mnist", ("mnist.npz", hashlib.sha256(data.read_bytes()).hexdigest()))
    return datasets


def test_home_env_is_the_contracts_layout() -> None:
    env = jobhome.home_env("/h")
    assert set(env) == set(JOB_HOME_ENV) and env["HOME"] == "/h" and env["KERAS_HOME"] == "/h/.keras"
    assert env["CUDA_CACHE_PATH"] == "/h/.cache/nv/ComputeCache" and env["TFDS_DATA_DIR"] == "/h/tensorflow_datasets"
    dirs = jobhome.home_dirs("/h")
    assert dirs[0] == "/h" and "/h/.keras/datasets" in dirs and set(env.values()) <= set(dirs)


def test_keras_takes_only_its_own_file(keras_pin: Path, tmp_path: Path) -> None:
    files, notes = jobhome.keras_files(str(keras_pin), ["mnist", "fashion", "tfrecord"])
    assert files == {str(keras_pin / "mnist.npz"): "mnist.npz"} and notes == []
    (keras_pin / "mnist.npz").write_bytes(b"the same arrays, another zip writer")
    files, notes = jobhome.keras_files(str(keras_pin), ["mnist"])
    assert files == {} and "is not the mnist.npz Keras pins" in notes[0] and "np.load" in notes[0]
    files, notes = jobhome.keras_files(str(tmp_path / "none"), ["mnist"])
    assert files == {} and "is missing" in notes[0]


def test_the_setup_mnist_is_not_the_file_keras_pins() -> None:
    """What makes the Keras cache stay empty offline: make setup's mnist.npz holds the same arrays as Keras' download
    in another zip, and Keras checks the file's own sha256 (731c5ac6...)."""
    ours = REPO / ".cache" / "datasets" / "mnist.npz"
    if not ours.is_file():
        pytest.skip("no .cache/datasets/mnist.npz (make setup)")
    files, notes = jobhome.keras_files(str(ours.parent), ["mnist"])
    assert files == {} and "731c5ac60275" in notes[0]


def test_prepare_as_yourself_makes_the_home_and_copies_once(keras_pin: Path, tmp_path: Path) -> None:
    home = tmp_path / "jobs/j1/home"
    first = jobhome.prepare(str(home), str(keras_pin), ["mnist"], None, None)
    assert first["changed"] and first["notes"] == []
    assert all(Path(p).is_dir() for p in jobhome.home_dirs(str(home)))
    cached = home / ".keras/datasets/mnist.npz"
    assert cached.read_bytes() == (keras_pin / "mnist.npz").read_bytes() and not cached.is_symlink()
    assert (keras_pin / "s3").is_dir()
    again = jobhome.prepare(str(home), str(keras_pin), ["mnist"], None, None)
    assert again == {"changed": False, "created": [], "copied": [], "notes": []}
    cached.write_bytes(b"a partial download")
    assert jobhome.prepare(str(home), str(keras_pin), ["mnist"], None, None)["copied"] == [str(cached)]


def test_check_mode_changes_nothing(keras_pin: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    dry = jobhome.prepare(str(home), str(keras_pin), ["mnist"], None, None, check=True)
    assert dry["changed"] and dry["copied"] == ["mnist.npz"] and not home.exists()
    assert not (keras_pin / "s3").exists()


@needs_root
def test_as_root_the_home_is_the_job_users_and_the_s3_cache_too(keras_pin: Path, open_tmp: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    area = open_tmp / "var-lib-tfcluster"  # the job user's own home, as the trainer role makes it
    area.mkdir()
    os.chown(area, nobody.pw_uid, nobody.pw_gid)
    home = area / "jobs/j1/home"
    result = jobhome.prepare(str(home), str(keras_pin), ["mnist"], "nobody", None)
    assert result["changed"] and str(home) in result["created"]
    for path in jobhome.home_dirs(str(home)):
        info = os.stat(path)
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (nobody.pw_uid, 0o750), path
    assert os.stat(home / ".keras/datasets/mnist.npz").st_uid == nobody.pw_uid
    s3 = os.stat(keras_pin / "s3")
    assert (s3.st_uid, s3.st_gid, stat.S_IMODE(s3.st_mode)) == (nobody.pw_uid, nobody.pw_gid, 0o750)
    assert os.stat(keras_pin).st_uid == 0  # the datasets dir stays root's
    assert not jobhome.prepare(str(home), str(keras_pin), ["mnist"], "nobody", None)["changed"]


@needs_root
def test_as_root_a_link_the_job_planted_is_never_followed(keras_pin: Path, open_tmp: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    area = open_tmp / "area"
    (area / "jobs/j1/home").mkdir(parents=True)
    for path in (area, area / "jobs", area / "jobs/j1", area / "jobs/j1/home"):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    victim = open_tmp / "etc"
    victim.mkdir(mode=0o755)
    os.symlink(victim, area / "jobs/j1/home/.keras")  # the job points its Keras dir at root's
    with pytest.raises(JobError, match="cannot be made as the job user"):
        jobhome.prepare(str(area / "jobs/j1/home"), str(keras_pin), ["mnist"], "nobody", None)
    assert list(victim.iterdir()) == [] and os.stat(victim).st_uid == 0


@needs_root
def test_the_s3_cache_refuses_a_linked_or_foreign_datasets_dir(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    os.symlink(real, tmp_path / "linked")
    with pytest.raises(JobError, match="not a directory of its own"):
        jobhome.own_dir(str(tmp_path / "linked"), "s3", nobody.pw_uid, nobody.pw_gid)
    os.chown(real, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(JobError, match="must belong to root"):
        jobhome.own_dir(str(real), "s3", nobody.pw_uid, nobody.pw_gid)
    assert not (real / "s3").exists()
