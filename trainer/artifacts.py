"""Model-dir files, written safely: atomic JSON/text, the sha256 manifest, the status file, the DONE marker.

No TensorFlow here. Layout of a model dir (docs/trainer.md)::

    config.json  status.json  checkpoints/  backup/<task>/  logs/  export/  metrics.json  MANIFEST.sha256  DONE
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG = "config.json"
STATUS = "status.json"
METRICS = "metrics.json"
MANIFEST = "MANIFEST.sha256"
DONE = "DONE"
CHECKPOINTS = "checkpoints"
BACKUP = "backup"
EXPORT = "export"
LOGS = "logs"
PS_SHUTDOWN = ".tfcluster-shutdown"
# What the manifest covers: the chief's deliverables. status.json and backup/ change after the fact; logs/ is
# TensorBoard's, appended while training.
MANIFEST_ENTRIES: tuple[str, ...] = (CONFIG, METRICS, CHECKPOINTS, EXPORT)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write via a temp file in the same directory + fsync + rename: readers see the old or the new file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def manifest_files(model_dir: str | os.PathLike[str], entries: Iterable[str] = MANIFEST_ENTRIES) -> list[str]:
    """Relative paths (POSIX, sorted) of every regular file under the manifest's entries."""
    root = Path(model_dir)
    found: list[str] = []
    for entry in entries:
        top = root / entry
        if top.is_file():
            found.append(entry)
        elif top.is_dir():
            found.extend(p.relative_to(root).as_posix() for p in top.rglob("*") if p.is_file())
    return sorted(found)


def manifest_text(model_dir: str | os.PathLike[str], entries: Iterable[str] = MANIFEST_ENTRIES) -> str:
    """``sha256sum`` format: ``HASH  RELPATH`` per line, so ``sha256sum -c MANIFEST.sha256`` verifies it."""
    root = Path(model_dir)
    return "".join(f"{sha256_file(root / rel)}  {rel}\n" for rel in manifest_files(root, entries))


def verify_manifest(model_dir: str | os.PathLike[str]) -> list[str]:
    """Problems found checking MANIFEST.sha256 against the files (empty list = all good)."""
    root = Path(model_dir)
    problems: list[str] = []
    lines = (root / MANIFEST).read_text().splitlines()
    listed = set()
    for line in lines:
        digest, _, rel = line.partition("  ")
        listed.add(rel)
        target = root / rel
        if not target.is_file():
            problems.append(f"{rel}: missing")
        elif sha256_file(target) != digest:
            problems.append(f"{rel}: sha256 mismatch")
    problems.extend(f"{rel}: not in manifest" for rel in manifest_files(root) if rel not in listed)
    return problems


def write_manifest(model_dir: str | os.PathLike[str]) -> None:
    atomic_write_text(Path(model_dir) / MANIFEST, manifest_text(model_dir))


def write_done(model_dir: str | os.PathLike[str], summary: Mapping[str, Any]) -> None:
    """The completion marker: last, atomic. Holds the manifest's sha256 so a collector can tie them together."""
    root = Path(model_dir)
    data = dict(summary)
    data["manifest_sha256"] = sha256_file(root / MANIFEST)
    atomic_write_json(root / DONE, data)


def clear_completion(model_dir: str | os.PathLike[str]) -> None:
    """A (re)started chief removes the old DONE first so nobody collects a half-rewritten dir."""
    (Path(model_dir) / DONE).unlink(missing_ok=True)


def backup_dir_for(model_dir: str | os.PathLike[str], task: str) -> str:
    """One backup directory per task (``backup/worker-1``): hosts share no disk, and a restarted task must find
    its own state on its own disk."""
    return str(Path(model_dir) / BACKUP / task.replace(":", "-"))


def worker_temp_dir(task: str, model_dir: str | os.PathLike[str]) -> Path:
    """Where a non-chief task writes what it must write but nobody keeps (TF's write_filepath pattern).

    Deterministic per (model dir, task), so a restart after a crash (SIGKILL leaves it behind) cleans it up."""
    key = hashlib.sha256(str(Path(model_dir).resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"tfcluster-{task.replace(':', '-')}-{key}"


def make_worker_temp_dir(task: str, model_dir: str | os.PathLike[str]) -> str:
    path = worker_temp_dir(task, model_dir)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, mode=0o700)
    return str(path)


def remove_tree(path: str | os.PathLike[str]) -> None:
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class StatusWriter:
    """status.json for the orchestration to poll; throttled, atomic."""

    path: str
    task: str
    interval: float = 2.0
    _last: float = field(default=0.0, init=False)
    _state: dict[str, Any] = field(default_factory=dict, init=False)

    def update(self, force: bool = False, **fields: Any) -> bool:
        self._state.update(fields)
        now = time.time()
        if not force and now - self._last < self.interval:
            return False
        self._last = now
        data = {"task": self.task, "pid": os.getpid(), "host": socket.gethostname(), "updated_at": now,
                "updated_at_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), **self._state}
        atomic_write_json(self.path, data)
        return True
