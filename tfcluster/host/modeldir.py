"""Read a finished model dir as the job's user, never following a symlink. Standard library only.

Run where the chief's model dir is: the Slurm kind's login node (``python3 -m tfcluster.host.slurm_task manifest``
reads the chief's model dir on the shared directory with it) and the ``tfcluster.cluster.manifest_info`` module on a
chief (module_utils/host/modeldir.py is this file). Every path below the model dir is opened component by component with
``O_NOFOLLOW`` (relative to the directory's own descriptor), so a link anywhere below it -- the manifest, a
directory, a file -- is refused instead of read. Sizes come from ``lstat``: regular files only.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable
from typing import Any

from ..core.contract import DONE, MANIFEST
from ..core.files import ManifestError, parse_manifest, quote_name, rel_problem

MAX_MANIFEST_BYTES = 16 << 20
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW


class ModelDirError(ValueError):
    """The model dir cannot be read safely; the message names the path, never a file's content."""


def _parent_fd(root_fd: int, rel: str) -> tuple[int, str]:
    """An fd of ``rel``'s parent directory (opened without following links) and ``rel``'s last component."""
    parts = rel.split("/")
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        raise
    return fd, parts[-1]


def regular_size(root_fd: int, rel: str) -> int | None:
    """The size of ``rel`` when it is a regular file reached through no link; None otherwise."""
    try:
        fd, name = _parent_fd(root_fd, rel)
    except OSError:
        return None
    try:
        info = os.lstat(name, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def read_manifest(root_fd: int, where: str) -> str:
    """The manifest's text, opened with O_NOFOLLOW; the error names the path and why, never the content."""
    try:
        fd = os.open(MANIFEST, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=root_fd)
    except OSError as error:
        raise ModelDirError(f"{where}/{MANIFEST} cannot be opened without following a link: {error.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ModelDirError(f"{where}/{MANIFEST} is not a regular file")
        if info.st_size > MAX_MANIFEST_BYTES:
            raise ModelDirError(f"{where}/{MANIFEST} is {info.st_size} bytes, more than {MAX_MANIFEST_BYTES}")
        data = handle.read(MAX_MANIFEST_BYTES + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelDirError(f"{where}/{MANIFEST} is not UTF-8 text") from None


def _entries(text: str, where: str) -> list[tuple[str, str]]:
    try:
        return parse_manifest(text)
    except ManifestError as error:  # its message quotes the line: keep only where and why
        raise ModelDirError(f"{where}/{str(error).split(': ', 1)[0]}") from None


def _checked_optional(optional: Iterable[str]) -> list[str]:
    """The optional names, each a plain path inside the model dir (the name rule of tfcluster.core.files); a name that
    could leave it is refused before anything is opened."""
    names = list(optional)
    for name in names:
        problem = rel_problem(name)
        if problem is not None:
            raise ModelDirError(f"the optional name {quote_name(name)} is not a plain path inside the model dir "
                                f"({problem}). Fix: list names relative to the model dir in collector_optional_files")
    return names


def describe(model_dir: str, optional: Iterable[str] = ()) -> dict[str, Any]:
    """What the collector needs of a model dir: DONE, the manifest, every listed file's size (regular files only).

    Returns ``{done, manifest, manifest_sha256, files: [{path, sha256, size}], optional: [{path, size}],
    problems: [str], total_bytes}``; ``done`` False (and nothing else read) when DONE or the dir itself is missing
    (a job that never ran there, or a dry run). Every name, listed or optional, passes the name rule of
    tfcluster.core.files (relative, no '..', no control character), or ModelDirError."""
    optional = _checked_optional(optional)
    not_done: dict[str, Any] = {"done": False, "manifest": "", "manifest_sha256": "", "files": [], "optional": [],
                                "problems": [], "total_bytes": 0}
    try:
        root_fd = os.open(model_dir, _DIR_FLAGS)
    except FileNotFoundError:
        return not_done
    except OSError as error:
        raise ModelDirError(f"{model_dir} cannot be opened as a directory without following a link: "
                            f"{error.strerror}") from None
    try:
        if regular_size(root_fd, DONE) is None:
            return not_done
        text = read_manifest(root_fd, model_dir)
        files: list[dict[str, Any]] = []
        problems: list[str] = []
        for digest, rel in [*_entries(text, model_dir), ("", MANIFEST), ("", DONE)]:
            size = regular_size(root_fd, rel)
            if size is None:
                problems.append(f"{rel} is missing, not a regular file, or reached through a symlink")
            else:
                files.append({"path": rel, "sha256": digest or None, "size": size})
        listed = {f["path"] for f in files}
        extra = [{"path": n, "size": s} for n in optional if n not in listed
                 for s in [regular_size(root_fd, n)] if s is not None]
    finally:
        os.close(root_fd)
    return {"done": True, "manifest": text, "manifest_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "files": files, "optional": extra, "problems": problems,
            "total_bytes": sum(f["size"] for f in files) + sum(f["size"] for f in extra)}
