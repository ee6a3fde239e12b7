"""S3 for the trainer: data objects (``--data s3://BUCKET/KEY``) and checkpoint_s3 (backups and the model dir).

No TensorFlow; boto3 is imported only when S3 is used (it costs ~0.3 s of start-up).

checkpoint_s3 layout under ``--checkpoint-s3 s3://BUCKET/PREFIX`` (env TFCLUSTER_CHECKPOINT_S3; the job area sets
the job's own prefix)::

    PREFIX/backup/<task>/checkpoint                  each task's resume state (``<task>`` as in the model dir's
    PREFIX/backup/<task>/backup-N.index              backup/<task>/, e.g. worker-1): the files of the checkpoints
    PREFIX/backup/<task>/backup-N.data-00000-of-1    that ``checkpoint`` lists, uploaded before it
    PREFIX/model/<every file MANIFEST.sha256 lists>  the chief's finished model dir:
    PREFIX/model/MANIFEST.sha256                     the files, then the manifest,
    PREFIX/model/DONE                                then DONE, last (removed first when a chief starts again)
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfcluster.core import contract, files

LOG = logging.getLogger("trainer.s3")

_BUCKET = r"(?P<bucket>[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])"
_OBJECT_RE = re.compile(rf"^s3://{_BUCKET}/(?P<key>.+)$")
_PREFIX_RE = re.compile(rf"^s3://{_BUCKET}(?:/(?P<prefix>.*))?$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
STATE_FILE = "checkpoint"  # tf.train.CheckpointManager's index of its checkpoints (written after them)
_STATE_PATH_RE = re.compile(r'^(?:model_checkpoint_path|all_model_checkpoint_paths):\s*"(?P<path>[^"]+)"\s*$')


def parse_object_uri(uri: str) -> tuple[str, str]:
    """``s3://BUCKET/KEY`` -> (bucket, key); raises ValueError."""
    match = _OBJECT_RE.match(uri)
    if not match:
        raise ValueError(f"{uri!r} is not an s3://BUCKET/KEY URI")
    return match["bucket"], match["key"]


def is_sha256(value: str) -> bool:
    return bool(_SHA_RE.match(value))


@dataclass(frozen=True)
class Location:
    """``s3://BUCKET/PREFIX``: where one job's backups and model dir go."""

    bucket: str
    prefix: str = ""

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def uri(self, *parts: str) -> str:
        return f"s3://{self.bucket}/{self.key(*parts)}"


def parse_prefix_uri(uri: str) -> Location:
    """``s3://BUCKET[/PREFIX]`` -> Location; raises ValueError."""
    match = _PREFIX_RE.match(uri.strip())
    prefix = (match["prefix"] or "").strip("/") if match else ""
    if not match or any(part in ("", ".", "..") for part in prefix.split("/") if prefix):
        raise ValueError(f"{uri!r} is not an s3://BUCKET/PREFIX URI")
    return Location(match["bucket"], prefix)


def client(endpoint_url: str | None = None) -> Any:
    import boto3  # only when S3 is used

    return boto3.client("s3", endpoint_url=endpoint_url)


def _keys(s3: Any, bucket: str, prefix: str) -> Iterator[str]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", ()):
            yield item["Key"]


def checkpoint_prefixes(state: str) -> list[str]:
    """The checkpoint names (``backup-12``) a CheckpointManager state file lists, newest last."""
    names: list[str] = []
    for line in state.splitlines():
        match = _STATE_PATH_RE.match(line.strip())
        if match:
            name = match["path"].replace("\\", "/").rsplit("/", 1)[-1]
            if name not in names:
                names.append(name)
    return names


def checkpoint_files(names: list[str], state: str) -> list[str]:
    """Those of ``names`` (files of a backup dir) that belong to a checkpoint the state file lists."""
    prefixes = tuple(prefix + "." for prefix in checkpoint_prefixes(state))
    return sorted(name for name in names if name.startswith(prefixes))


class BackupSync:
    """One task's backup dir mirrored to ``PREFIX/backup/<task>/``: uploads run in one background thread (a save
    queues one; ``flush`` waits for all of them), so training does not wait for S3."""

    def __init__(self, location: Location, task_dir: str | os.PathLike[str],
                 make_client: Callable[[], Any]) -> None:
        self.location, self.dir = location, Path(task_dir)
        self.remote = location.key(contract.BACKUP, self.dir.name) + "/"
        self._make_client = make_client
        self._client: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[Future[int]] = []
        self._uploaded: dict[str, tuple[int, int]] = {}  # name -> (size, mtime_ns) already in S3

    @property
    def s3(self) -> Any:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def download(self) -> int:
        """Fetch this task's newest backups when the local dir has none (a replacement host); returns the number of
        files fetched. The state file is written last, so a cut-short download looks like no backup at all."""
        if (self.dir / STATE_FILE).is_file():
            return 0
        try:
            state = self.s3.get_object(Bucket=self.location.bucket, Key=self.remote + STATE_FILE)["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            return 0
        names = checkpoint_files(self._remote_names(), state.decode())
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in names:
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=files.TEMP_PREFIX)
            os.close(fd)
            try:
                self.s3.download_file(self.location.bucket, self.remote + name, tmp)
                os.replace(tmp, self.dir / name)
            finally:
                Path(tmp).unlink(missing_ok=True)
        files.atomic_write_bytes(self.dir / STATE_FILE, state)
        LOG.info("fetched %d backup file(s) from %s%s", len(names), self.location.uri(), self.remote)
        return len(names)

    def _remote_names(self) -> list[str]:
        return [key[len(self.remote):] for key in _keys(self.s3, self.location.bucket, self.remote)]

    def upload(self) -> int:
        """Mirror the local backups now: the listed checkpoints' files, then the state file, then remove what the
        state no longer lists. Returns the number of files sent."""
        state_path = self.dir / STATE_FILE
        if not state_path.is_file():
            return 0
        state = state_path.read_bytes()  # a snapshot: later saves are the next upload's work
        wanted = checkpoint_files(os.listdir(self.dir), state.decode())
        sent = 0
        for name in wanted:
            stat = (self.dir / name).stat()
            if self._uploaded.get(name) != (stat.st_size, stat.st_mtime_ns):
                self.s3.upload_file(str(self.dir / name), self.location.bucket, self.remote + name)
                self._uploaded[name] = (stat.st_size, stat.st_mtime_ns)
                sent += 1
        self.s3.put_object(Bucket=self.location.bucket, Key=self.remote + STATE_FILE, Body=state)
        stale = [n for n in self._remote_names() if n not in wanted and n != STATE_FILE]
        for name in stale:
            self.s3.delete_object(Bucket=self.location.bucket, Key=self.remote + name)
            self._uploaded.pop(name, None)
        return sent + 1

    def upload_later(self) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="backup-s3")
        self._pending.append(self._pool.submit(self.upload))

    def flush(self) -> bool:
        """Wait for every queued upload; False (logged) when one failed."""
        ok = True
        for future in self._pending:
            try:
                future.result()
            except Exception as exc:
                LOG.error("backup upload to %s%s failed: %s", self.location.uri(), self.remote, exc)
                ok = False
        self._pending.clear()
        return ok


def clear_model_done(location: Location, s3: Any) -> None:
    """A (re)started chief removes ``PREFIX/model/DONE`` first: nobody collects a model dir being rewritten."""
    s3.delete_object(Bucket=location.bucket, Key=location.key("model", contract.DONE))


def upload_model_dir(location: Location, model_dir: str | os.PathLike[str], s3: Any) -> int:
    """The finished model dir to ``PREFIX/model/``: every file MANIFEST.sha256 lists, then the manifest, then
    removal of objects it does not list, then DONE last. Returns the number of files uploaded."""
    root = Path(model_dir)
    rels = [rel for _, rel in files.parse_manifest((root / contract.MANIFEST).read_text(encoding="utf-8"))]
    for rel in [*rels, contract.MANIFEST]:
        s3.upload_file(str(root / rel), location.bucket, location.key("model", rel))
    keep = {location.key("model", rel) for rel in [*rels, contract.MANIFEST]}
    for key in list(_keys(s3, location.bucket, location.key("model") + "/")):
        if key not in keep:
            s3.delete_object(Bucket=location.bucket, Key=key)
    s3.upload_file(str(root / contract.DONE), location.bucket, location.key("model", contract.DONE))
    LOG.info("uploaded the model dir (%d files) to %s", len(rels) + 2, location.uri("model"))
    return len(rels) + 2


# --- data objects ---------------------------------------------------------------------------------------------------

def fetch_object(uri: str, cache_dir: Path, expected_sha256: str | None = None, endpoint_url: str | None = None,
                 s3: Any = None) -> Path:
    """Download ``s3://bucket/key`` into ``cache_dir/s3/bucket/key`` once; verify its sha256. Raises ValueError.

    The expected digest is ``expected_sha256`` (``--data-sha256``) or else the object's ``sha256`` user metadata;
    with neither, the file is still cached but only the array checks of the loader protect it. A cached file is
    reused while its ETag matches the object's.
    """
    bucket, key = parse_object_uri(uri)
    s3 = s3 if s3 is not None else client(endpoint_url)
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except Exception as exc:
        raise ValueError(f"cannot read {uri}: {exc}. Fix: check the bucket/key, credentials and "
                         "--s3-endpoint-url") from exc
    etag = str(head.get("ETag", "")).strip('"')
    want = expected_sha256 or (head.get("Metadata") or {}).get("sha256")
    target = cache_dir / "s3" / bucket / key
    sidecar = target.with_name(target.name + ".meta.json")
    meta = files.read_json(sidecar) if target.exists() else None
    if isinstance(meta, dict) and meta.get("etag") == etag and (not want or meta.get("sha256") == want) and \
            files.sha256_file(target) == meta.get("sha256"):
        LOG.info("using cached %s for %s", target, uri)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=files.TEMP_PREFIX)
    os.close(fd)
    try:
        s3.download_file(bucket, key, tmp)
        digest = files.sha256_file(tmp)
        if want and digest != want:
            raise ValueError(f"{uri}: sha256 {digest} != expected {want}. Fix: upload the right file or correct "
                             "--data-sha256")
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    files.atomic_write_text(sidecar, json.dumps({"uri": uri, "etag": etag, "sha256": digest}, sort_keys=True))
    LOG.info("downloaded %s to %s (sha256 %s)", uri, target, digest)
    return target
