"""The collector's S3 source (moto): the job's PREFIX/model/ when the chief is gone."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from tfcluster.collect import s3 as collect_s3
from tfcluster.collect.transfer import CollectError

FILES = {"export/saved_model.pb": b"graph" * 100, "metrics.json": b'{"epochs": 1}'}


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "x")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket="bkt")
        yield client


def upload(client, files: dict[str, bytes], done: bool = True) -> str:
    manifest = "".join(f"{hashlib.sha256(d).hexdigest()}  {r}\n" for r, d in sorted(files.items()))
    for rel, data in {**files, "MANIFEST.sha256": manifest.encode()}.items():
        client.put_object(Bucket="bkt", Key=f"jobs/mnist/model/{rel}", Body=data)
    if done:
        client.put_object(Bucket="bkt", Key="jobs/mnist/model/DONE", Body=b"{}")
    return manifest


def test_pull_from_s3_is_verified_and_versioned(s3, tmp_path: Path) -> None:
    manifest = upload(s3, FILES)
    req = {"uri": "s3://bkt/jobs/mnist", "dest": str(tmp_path / "job"), "optional_names": ["status.json"]}
    out = collect_s3.pull_s3(req, client=s3)
    assert out["changed"] and out["entries"] == 2
    version = hashlib.sha256(manifest.encode()).hexdigest()
    assert os.readlink(tmp_path / "job" / "current") == version
    assert (tmp_path / "job" / version / "export/saved_model.pb").read_bytes() == FILES["export/saved_model.pb"]
    assert collect_s3.pull_s3(req, client=s3)["changed"] is False


def test_s3_without_done_collects_nothing(s3, tmp_path: Path) -> None:
    upload(s3, FILES, done=False)
    with pytest.raises(CollectError, match="no finished model dir"):
        collect_s3.pull_s3({"uri": "s3://bkt/jobs/mnist", "dest": str(tmp_path / "job")}, client=s3)


def test_a_corrupt_object_leaves_nothing(s3, tmp_path: Path) -> None:
    upload(s3, FILES)
    s3.put_object(Bucket="bkt", Key="jobs/mnist/model/metrics.json", Body=b'{"epochs": 2}')
    with pytest.raises(CollectError, match=r"sha256 mismatch: metrics\.json"):
        collect_s3.pull_s3({"uri": "s3://bkt/jobs/mnist", "dest": str(tmp_path / "job")}, client=s3)
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize("uri", ["bkt/jobs", "s3://bkt", "s3://bkt/"])
def test_a_bad_uri_names_the_fix(uri: str) -> None:
    with pytest.raises(CollectError, match="tfcluster_checkpoint_s3"):
        collect_s3.split_uri(uri)



def test_a_manifest_name_with_a_control_character_is_refused(s3, tmp_path: Path) -> None:
    name = "\x1b]52;c;AAAA\x07"
    upload(s3, {**FILES, name: b"x"})
    with pytest.raises(CollectError) as error:
        collect_s3.pull_s3({"uri": "s3://bkt/jobs/mnist", "dest": str(tmp_path / "job")}, client=s3)
    assert "control character" in str(error.value) and "s3://bkt/jobs/mnist/model/" in str(error.value)
    assert "\x1b" not in str(error.value) and not (tmp_path / "job").exists()


@pytest.mark.parametrize("name", ["../../../escaped", "a/./b", "a\\b"])
def test_an_optional_key_outside_the_model_dir_is_never_written(s3, tmp_path: Path, name: str) -> None:
    """S3 keys may hold '..': an optional name that would map such a key outside the staging dir is refused."""
    upload(s3, FILES)
    s3.put_object(Bucket="bkt", Key=f"jobs/mnist/model/{name}", Body=b"pwned\n")
    dest = tmp_path / "artifacts" / "job"
    with pytest.raises(CollectError, match="collector_optional_files") as error:
        collect_s3.pull_s3({"uri": "s3://bkt/jobs/mnist", "dest": str(dest), "optional_names": [name]}, client=s3)
    assert repr(name) in str(error.value)
    assert not (tmp_path / "escaped").exists() and not dest.exists()
