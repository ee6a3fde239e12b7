"""The job module (state rendered) makes the job's home, its Keras cache and the S3 cache when the role passes
``home``, says which datasets Keras would download, and changes nothing on a second run; job_preflight adds EFA's
properties to its GPU check where it finds EFA and returns what it found."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

# the copy the module imports (module_utils/host links tfcluster/host, but it is another module object)
from ansible_collections.tfcluster.cluster.plugins.module_utils.host import jobhome

from tests.unit.playbooks.test_job_modules import fake_python, job, job_preflight, preflight_args, render_args, run


def home_args(tmp: Path, datasets: Path) -> dict[str, Any]:
    return render_args(tmp, ["/bin/true"], home={"path": str(tmp / "jobs/t/home"), "datasets_dir": str(datasets),
                                                 "keras_datasets": ["mnist"]})


def test_rendered_makes_the_home_with_the_keras_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    (datasets / "mnist.npz").write_bytes(b"keras' own bytes")
    monkeypatch.setitem(jobhome.KERAS_DATASETS, "mnist",
                        ("mnist.npz", hashlib.sha256(b"keras' own bytes").hexdigest()))
    first = run(job, home_args(tmp_path, datasets), capsys)
    assert first["changed"] and first["notes"] == []
    assert (tmp_path / "jobs/t/home/.keras/datasets/mnist.npz").read_bytes() == b"keras' own bytes"
    assert (tmp_path / "jobs/t/home/.cache/nv/ComputeCache").is_dir() and (datasets / "s3").is_dir()
    assert run(job, home_args(tmp_path, datasets), capsys)["changed"] is False


def test_rendered_notes_a_dataset_keras_would_download(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    (datasets / "mnist.npz").write_bytes(b"the same arrays in another zip")
    out = run(job, home_args(tmp_path, datasets), capsys)
    assert out["changed"] and "is not the mnist.npz Keras pins" in out["notes"][0]
    assert not (tmp_path / "jobs/t/home/.keras/datasets/mnist.npz").exists()


def test_preflight_adds_efa_properties_where_it_finds_efa(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = tmp_path / "ofi-nccl/lib"
    plugin.mkdir(parents=True)
    args = preflight_args(tmp_path, gpus=1, python=fake_python(tmp_path, gpus=1), efa="true",
                          efa_plugin_dirs=[str(tmp_path / "none"), str(plugin)],
                          sandbox={"properties": ["ProcSubset=all"], "efa_properties": ["X=efa"]})
    out = run(job_preflight, args, capsys)
    assert out["efa"] == {"enabled": True, "devices": [], "plugin_dir": str(plugin)}
    cpu = run(job_preflight, preflight_args(tmp_path, efa="true"), capsys)
    assert cpu["efa"]["enabled"] is False  # EFA serves NCCL: a CPU job never gets it
