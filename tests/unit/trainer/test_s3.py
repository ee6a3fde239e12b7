"""trainer/s3.py against moto's S3 (in-process): URIs, the data-object cache, the backup mirror and the model dir's
upload order (DONE last)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tfcluster.core import files
from trainer import s3

moto = pytest.importorskip("moto")

STATE = """model_checkpoint_path: "backup-11"
all_model_checkpoint_paths: "backup-10"
all_model_checkpoint_paths: "backup-11"
all_model_checkpoint_timestamps: 1.0
last_preserved_timestamp: 0.5
"""


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    with moto.mock_aws():
        c = s3.client()
        c.create_bucket(Bucket="job-bucket")
        yield c


class Recorder:
    """A client that records (operation, key) of every write, in order."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(*args: Any, **kw: Any) -> Any:
            if name in ("upload_file", "put_object", "delete_object", "download_file"):
                self.calls.append((name, kw.get("Key") or args[2 if name == "upload_file" else 1]))
            return method(*args, **kw)

        return call


def keys(c: Any, prefix: str = "") -> list[str]:
    return sorted(o["Key"] for o in c.list_objects_v2(Bucket="job-bucket", Prefix=prefix).get("Contents", []))


@pytest.mark.parametrize(("uri", "expected"), [
    ("s3://job-bucket", s3.Location("job-bucket", "")),
    ("s3://job-bucket/", s3.Location("job-bucket", "")),
    ("s3://job-bucket/jobs/mnist-2/", s3.Location("job-bucket", "jobs/mnist-2")),
])
def test_parse_prefix_uri(uri: str, expected: s3.Location) -> None:
    assert s3.parse_prefix_uri(uri) == expected
    assert expected.uri("model", "DONE") == f"s3://job-bucket/{expected.key('model', 'DONE')}"


@pytest.mark.parametrize("uri", ["s3://", "s3://Bucket/p", "http://bucket/p", "s3://b/../x", "s3://bucket/a//b"])
def test_parse_prefix_uri_rejects(uri: str) -> None:
    with pytest.raises(ValueError, match="s3://BUCKET/PREFIX"):
        s3.parse_prefix_uri(uri)


@pytest.mark.parametrize("uri", ["s3://", "s3://Bucket/key", "s3://bucket", "http://bucket/key"])
def test_parse_object_uri_rejects(uri: str) -> None:
    with pytest.raises(ValueError, match="s3://BUCKET/KEY"):
        s3.parse_object_uri(uri)


def test_checkpoint_files_follow_the_state() -> None:
    assert s3.checkpoint_prefixes(STATE) == ["backup-11", "backup-10"]
    names = ["checkpoint", "backup-10.index", "backup-10.data-00000-of-00001", "backup-11.index",
             "backup-1.index", "backup-110.index", "backup-11_temp", ".tmp-x"]
    assert s3.checkpoint_files(names, STATE) == ["backup-10.data-00000-of-00001", "backup-10.index",
                                                 "backup-11.index"]


class FakeS3:
    def __init__(self, body: bytes, etag: str = "e1", sha: str | None = None) -> None:
        self.body, self.etag, self.sha, self.downloads = body, etag, sha, 0

    def head_object(self, Bucket: str, Key: str) -> dict[str, object]:
        return {"ETag": f'"{self.etag}"', "Metadata": {"sha256": self.sha} if self.sha else {}}

    def download_file(self, bucket: str, key: str, path: str) -> None:
        self.downloads += 1
        Path(path).write_bytes(self.body)


def test_fetch_object_caches_and_verifies(tmp_path: Path) -> None:
    body = b"payload"
    (tmp_path / "p").write_bytes(body)
    sha = files.sha256_file(tmp_path / "p")
    fake = FakeS3(body, sha=sha)
    path = s3.fetch_object("s3://bucket/dir/f.npz", tmp_path, s3=fake)
    assert path == tmp_path / "s3" / "bucket" / "dir" / "f.npz" and path.read_bytes() == body
    assert json.loads(path.with_name("f.npz.meta.json").read_text())["sha256"] == sha
    s3.fetch_object("s3://bucket/dir/f.npz", tmp_path, s3=fake)
    assert fake.downloads == 1  # cached
    fake.etag = "e2"
    s3.fetch_object("s3://bucket/dir/f.npz", tmp_path, s3=fake)
    assert fake.downloads == 2  # object changed
    with pytest.raises(ValueError, match=r"sha256 .* != expected"):
        s3.fetch_object("s3://bucket/dir/g.npz", tmp_path, expected_sha256="0" * 64, s3=FakeS3(body))
    assert not (tmp_path / "s3" / "bucket" / "dir" / "g.npz").exists()


def _backup_dir(root: Path, numbers: list[int]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for n in numbers:
        (root / f"backup-{n}.index").write_bytes(f"index {n}".encode())
        (root / f"backup-{n}.data-00000-of-00001").write_bytes(f"data {n}".encode() * 100)
    lines = [f'model_checkpoint_path: "backup-{numbers[-1]}"'] + \
        [f'all_model_checkpoint_paths: "backup-{n}"' for n in numbers]
    (root / "checkpoint").write_text("\n".join(lines) + "\n")
    return root


def test_backup_sync_mirrors_uploads_state_last_and_prunes(client: Any, tmp_path: Path) -> None:
    local = _backup_dir(tmp_path / "m" / "backup" / "worker-1", [10, 11])
    rec = Recorder(client)
    sync = s3.BackupSync(s3.Location("job-bucket", "jobs/j1"), local, lambda: rec)
    assert sync.upload() == 5
    prefix = "jobs/j1/backup/worker-1/"
    assert keys(client) == sorted(prefix + n for n in os_names(local))
    assert rec.calls[-1] == ("put_object", prefix + "checkpoint")  # the state after the files it lists
    assert sync.upload() == 1  # nothing changed: only the state again
    # the manager keeps 3: a new save drops backup-10
    for name in ("backup-10.index", "backup-10.data-00000-of-00001"):
        (local / name).unlink()
    _backup_dir(local, [11, 20])
    sync.upload_later()
    assert sync.flush()
    assert keys(client) == sorted(prefix + n for n in os_names(local))
    assert client.get_object(Bucket="job-bucket", Key=prefix + "checkpoint")["Body"].read() == \
        (local / "checkpoint").read_bytes()


def os_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_replacement_host_downloads_its_backup(client: Any, tmp_path: Path) -> None:
    location = s3.Location("job-bucket", "jobs/j1")
    old = _backup_dir(tmp_path / "old" / "backup" / "local-0", [10, 11])
    s3.BackupSync(location, old, lambda: client).upload()
    fresh = tmp_path / "new" / "backup" / "local-0"
    assert s3.BackupSync(location, tmp_path / "new" / "backup" / "other-0", lambda: client).download() == 0
    assert s3.BackupSync(location, fresh, lambda: client).download() == 4
    assert {n: (fresh / n).read_bytes() for n in os_names(fresh)} == {n: (old / n).read_bytes() for n in os_names(old)}
    assert s3.BackupSync(location, fresh, lambda: client).download() == 0  # a local backup wins: nothing fetched


def test_a_cut_short_download_leaves_no_state(client: Any, tmp_path: Path) -> None:
    location = s3.Location("job-bucket", "p")
    s3.BackupSync(location, _backup_dir(tmp_path / "a" / "local-0", [10]), lambda: client).upload()

    class Failing(Recorder):
        def download_file(self, *args: Any) -> None:
            raise OSError("connection reset")

    fresh = tmp_path / "b" / "local-0"
    with pytest.raises(OSError, match="connection reset"):
        s3.BackupSync(location, fresh, lambda: Failing(client)).download()
    assert not (fresh / "checkpoint").exists() and not list(fresh.glob(".tmp-*"))


def test_flush_reports_a_failed_upload(client: Any, tmp_path: Path) -> None:
    sync = s3.BackupSync(s3.Location("no-such-bucket", "p"), _backup_dir(tmp_path / "local-0", [10]),
                         lambda: client)
    sync.upload_later()
    assert sync.flush() is False


def test_model_dir_lands_with_manifest_then_done_last(client: Any, tmp_path: Path) -> None:
    root = tmp_path / "model"
    (root / "export" / "variables").mkdir(parents=True)
    (root / "export" / "saved_model.pb").write_bytes(b"pb")
    (root / "export" / "variables" / "v.index").write_bytes(b"v")
    (root / "config.json").write_text("{}")
    (root / "metrics.json").write_text("{}")
    (root / "status.json").write_text("{}")  # not in the manifest: not uploaded
    files.write_manifest(root, entries=["config.json", "metrics.json", "export"])
    files.atomic_write_json(root / "DONE", {})
    location = s3.Location("job-bucket", "jobs/j1")
    client.put_object(Bucket="job-bucket", Key="jobs/j1/model/export/stale.pb", Body=b"old run")
    client.put_object(Bucket="job-bucket", Key="jobs/j1/model/DONE", Body=b"old run")
    s3.clear_model_done(location, client)
    assert "jobs/j1/model/DONE" not in keys(client)
    rec = Recorder(client)
    assert s3.upload_model_dir(location, root, rec) == 6
    model = "jobs/j1/model/"
    assert keys(client, model) == [model + n for n in ("DONE", "MANIFEST.sha256", "config.json",
                                                       "export/saved_model.pb", "export/variables/v.index",
                                                       "metrics.json")]
    assert rec.calls[-1] == ("upload_file", model + "DONE")
    assert rec.calls[-2] == ("delete_object", model + "export/stale.pb")
    uploads = [k for op, k in rec.calls if op == "upload_file"]
    assert uploads.index(model + "MANIFEST.sha256") == len(uploads) - 2  # after every file it lists

