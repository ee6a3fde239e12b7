"""The collector's store on this machine: versioned copies by manifest digest behind ``current``, the byte cap,
the staging dir, the configured optional names and the result. Shared by the SSH and the S3 pull."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tfcluster.collect.transfer import CollectError
from tfcluster.core.contract import MANIFEST
from tfcluster.core.files import (
    ManifestError,
    fsync_dir,
    fsync_tree,
    quote_name,
    rel_problem,
    verify_dir,
)
from tfcluster.run import events

CURRENT = "current"

RESERVE_BYTES = 64 << 20  # left free on the destination's filesystem

DEFAULT_SLACK = 1 << 20

def manifest_digest(text: str) -> str:
    """The version of a collected copy: the sha256 of its manifest."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()

def byte_cap(dest_root: Path, declared: int, max_bytes: int = 0, slack: int = DEFAULT_SLACK) -> int:
    """The most bytes a pull may write: declared + slack, at most max_bytes and the free space less a reserve."""
    existing = next(p for p in (dest_root, *dest_root.parents) if p.exists())
    free = shutil.disk_usage(existing).free - RESERVE_BYTES
    cap = declared + slack
    if max_bytes:
        cap = min(cap, max_bytes)
    if declared > free:
        raise CollectError(f"the model dir holds {declared:,} bytes but {dest_root} has {max(free, 0):,} bytes free "
                           f"(less a {RESERVE_BYTES >> 20} MiB reserve). Fix: free space there")
    if max_bytes and declared > max_bytes:
        raise CollectError(f"the model dir holds {declared:,} bytes, more than collector_max_bytes={max_bytes:,}. "
                           "Fix: raise collector_max_bytes")
    return min(cap, free)

# --- versions -------------------------------------------------------------------------------------------------------
def current_version(root: Path) -> str:
    try:
        return os.readlink(root / CURRENT)
    except OSError:
        return ""

def swap_current(root: Path, version: str) -> bool:
    """Point ``root/current`` at ``version`` by renaming a temporary symlink over it; whether it changed."""
    if current_version(root) == version:
        return False
    tmp = root / f".{CURRENT}-{os.getpid()}-{time.monotonic_ns()}"
    os.symlink(version, tmp)
    try:
        os.replace(tmp, root / CURRENT)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(root)
    return True

def verified_copy(root: Path, version: str, manifest: str) -> bool:
    """``root/version`` holds exactly this manifest and every file of it checks out."""
    copy = root / version
    try:
        if (copy / MANIFEST).read_text(encoding="utf-8") != manifest:
            return False
        verify_dir(copy)
    except (OSError, ManifestError):
        return False
    return True

@contextmanager
def staging_dir(root: Path) -> Iterator[Path]:
    """A staging dir beside the copies in ``root``; afterwards it is gone, and on a failure so are the directories
    this run had to create for it (nothing is left behind)."""
    made = [p for p in (root, *root.parents) if not p.exists()]
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=root))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for directory in made:  # root first, then its new parents
            try:
                directory.rmdir()
            except OSError:
                break
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)

def install(staging: Path, root: Path, version: str) -> None:
    """fsync the new copy, move it to ``root/version`` (a broken copy there is replaced) and make it current."""
    fsync_tree(staging)
    final = root / version
    if final.exists() or final.is_symlink():
        broken = root / f".broken-{version[:12]}-{os.getpid()}"
        os.rename(final, broken)
        shutil.rmtree(broken, ignore_errors=True)
    os.rename(staging, final)
    fsync_dir(root)
    swap_current(root, version)

def result_of(root: Path, version: str, *, files: int, size: int, changed: bool, entries: int, seconds: float,
            host: str) -> dict[str, Any]:
    empty = entries == 0
    what = "nothing to collect: the job wrote no files to its model dir (an empty manifest). To have something " \
           "collected, write it under $TFCLUSTER_MODEL_DIR on the chief" if empty else \
        f"{entries} files, every sha256 verified"
    verb = "Collected" if changed else "Already collected"
    result = {"changed": changed, "files": files, "entries": entries, "bytes": size, "empty": empty,
              "dest": str(root / CURRENT), "version": version, "seconds": round(seconds, 2),
              "mb_per_s": round(size / 1e6 / seconds, 1) if seconds > 0 and size else None,
              "msg": f"{verb} from {host}: {what}, in {root / CURRENT} (version {version[:12]})"}
    events.emit("collected", dest=str(root / CURRENT), files=entries, bytes=size, changed=changed)
    return result


def optional_names(request: Mapping[str, Any]) -> list[str]:
    """The configured optional names (``collector_optional_files``, the request's ``optional_names``), each checked
    against the name rule."""
    names = request.get("optional_names") or ()
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise CollectError("collector_optional_files must be a list of names. Fix: list names relative to the "
                           "model dir, e.g. [status.json]")
    for name in names:
        problem = rel_problem(name)
        if problem is not None:
            raise CollectError(f"collector_optional_files holds {quote_name(name)}, not a plain path inside the "
                               f"model dir ({problem}). Fix: list names relative to the model dir, e.g. status.json")
    return list(names)
