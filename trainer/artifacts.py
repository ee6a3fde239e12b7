"""The model dir: config.json, the status file, the completion (fsync -> MANIFEST.sha256 -> DONE), per-task dirs.

No TensorFlow here. Names come from :mod:`tfcluster.core.contract`, safe writes and the manifest from
:mod:`tfcluster.core.files`. Layout of a model dir (docs/trainer.md)::

    config.json  status.json  checkpoints/  backup/<task>/  logs/  export/  metrics.json  MANIFEST.sha256  DONE
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfcluster.core import contract, files

# What the manifest covers: the chief's deliverables. status.json and backup/ change after the fact; logs/ is
# TensorBoard's, appended while training.
MANIFEST_ENTRIES: tuple[str, ...] = (contract.CONFIG, contract.METRICS, contract.CHECKPOINTS, contract.EXPORT)
# Directories the chief fsyncs before DONE (its own; backup/ may hold other local tasks' dirs, being written).
SYNCED_DIRS: tuple[str, ...] = (contract.CHECKPOINTS, contract.EXPORT, contract.LOGS)


def finalize(model_dir: str | os.PathLike[str], summary: Mapping[str, Any]) -> int:
    """Complete the chief's model dir, in this order: fsync every file and directory of the artifacts, write
    MANIFEST.sha256, write DONE (each atomic and fsynced). Returns how many files the manifest lists."""
    root = Path(model_dir)
    for name in SYNCED_DIRS:
        if (root / name).is_dir():
            files.fsync_tree(root / name)
    files.fsync_dir(root)
    listed = files.write_manifest(root, entries=MANIFEST_ENTRIES)
    write_done(root, summary)
    return listed


def write_done(model_dir: str | os.PathLike[str], summary: Mapping[str, Any]) -> None:
    """The completion marker: last, atomic. Holds the manifest's sha256 so a collector can tie them together."""
    root = Path(model_dir)
    files.atomic_write_json(root / contract.DONE,
                            {**summary, "manifest_sha256": files.sha256_file(root / contract.MANIFEST)})


def clear_completion(model_dir: str | os.PathLike[str]) -> None:
    """A (re)started chief removes the old DONE first so nobody collects a half-rewritten dir."""
    (Path(model_dir) / contract.DONE).unlink(missing_ok=True)


def backup_dir_for(model_dir: str | os.PathLike[str], task: str) -> str:
    """One backup directory per task (``backup/worker-1``): hosts share no disk, and a restarted task must find
    its own state on its own disk."""
    return str(Path(model_dir) / contract.BACKUP / task.replace(":", "-"))


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
    """status.json for the orchestration to poll; throttled, atomic. Every write holds every key of
    ``contract.STATUS_FIELDS`` (None while unknown), plus ``pid``, ``host`` and whatever the trainer adds."""

    path: str
    task: str
    interval: float = 2.0
    _last: float = field(default=0.0, init=False)
    _state: dict[str, Any] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._state = dict.fromkeys(contract.STATUS_FIELDS)

    def update(self, force: bool = False, **fields: Any) -> bool:
        self._state.update(fields)
        now = time.time()
        if not force and now - self._last < self.interval:
            return False
        self._last = now
        data = {**self._state, "task": self.task, "pid": os.getpid(), "host": socket.gethostname(),
                "updated_at": now, "updated_at_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}
        # Atomic (temp file + rename: a reader sees the old or the new file) but not fsynced: progress is rewritten
        # every few seconds, and two fsyncs per write stalled the training thread on a busy disk.
        directory, name = os.path.split(os.path.abspath(self.path))
        tmp = os.path.join(directory, f"{files.TEMP_PREFIX}{name}.{os.getpid()}.{threading.get_ident()}")
        os.makedirs(directory, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
        os.replace(tmp, self.path)
        return True
