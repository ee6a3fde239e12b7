"""Files written safely and checked: sha256, atomic writes with fsync, tree digests, the sha256 manifest.

Standard library only. The one copy of these helpers for the trainer, the host code (the Ansible collection ships
this file as module_utils), the release tool and the collector.

The manifest is ``sha256sum`` format, ``HASH  RELPATH`` per line, so ``sha256sum -c MANIFEST.sha256`` verifies it.
Every name of a model dir that crosses a machine (a manifest line, an optional name, a tar member, an S3 key) passes
one rule, :func:`rel_problem`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from .contract import DONE, MANIFEST

BLOCK = 1 << 20
# Never part of a tree listing: caches Python and tools write next to code, and our own temp files.
SKIP_DIRS: frozenset[str] = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
TEMP_PREFIX = ".tmp-"

class ManifestError(ValueError):
    """A manifest, or the files it lists, is wrong; the message names each problem."""


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Temp file in the same directory, fsync, rename, fsync the directory: readers see the old or the new file,
    and after a crash the new one is either whole or absent. ``durable=False`` skips both fsyncs (a progress file
    rewritten every few seconds: readers still never see half a file)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=TEMP_PREFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(directory)


def atomic_write_text(path: str | os.PathLike[str], text: str, mode: int = 0o644, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode, durable)


def atomic_write_json(path: str | os.PathLike[str], data: Mapping[str, Any], mode: int = 0o644,
                      durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode, durable)


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON in ``path``, or None when it is missing or not JSON."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def tree_files(root: str | os.PathLike[str]) -> list[str]:
    """Relative POSIX paths of the regular files under ``root``, sorted; no links, caches or temp files."""
    found: list[str] = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not os.path.islink(os.path.join(directory, d)))
        for name in files:
            path = os.path.join(directory, name)
            if name.endswith((".pyc", ".pyo")) or name.startswith(TEMP_PREFIX) or os.path.islink(path):
                continue
            if os.path.isfile(path):
                found.append(os.path.relpath(path, root).replace(os.sep, "/"))
    return sorted(found)


def fsync_tree(root: str | os.PathLike[str]) -> int:
    """fsync every regular file and directory under ``root`` (files first, then their directories); returns the
    number of files. Called before a completion marker, so DONE never stands beside files still in the page cache."""
    count = 0
    for directory, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:  # renamed away meanwhile (another writer's atomic replace)
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                count += 1
        fsync_dir(directory)
    return count


def tree_digest(root: str | os.PathLike[str]) -> str:
    """sha256 over ``RELPATH NUL sha256(content) LF`` of every file of :func:`tree_files`: a release's identity."""
    digest = hashlib.sha256()
    for rel in tree_files(root):
        digest.update(f"{rel}\0{sha256_file(os.path.join(root, rel))}\n".encode())
    return digest.hexdigest()


def manifest_entries(root: str | os.PathLike[str], entries: Iterable[str] | None = None) -> list[str]:
    """The files a manifest lists: every file under the named entries (files or directories), or, with None,
    every file of the tree but the manifest and the marker themselves."""
    if entries is None:
        return [rel for rel in tree_files(root) if rel not in (MANIFEST, DONE)]
    found: list[str] = []
    for entry in entries:
        top = os.path.join(root, entry)
        if os.path.isfile(top) and not os.path.islink(top):
            found.append(entry)
        elif os.path.isdir(top) and not os.path.islink(top):
            found.extend(f"{entry}/{rel}" for rel in tree_files(top))
    return sorted(found)


def manifest_text(root: str | os.PathLike[str], rels: Iterable[str]) -> str:
    return "".join(f"{sha256_file(os.path.join(root, rel))}  {rel}\n" for rel in rels)


def write_manifest(root: str | os.PathLike[str], entries: Iterable[str] | None = None) -> int:
    """Write ``root/MANIFEST.sha256`` (see :func:`manifest_entries`); returns how many files it lists. A file whose
    name the collector would refuse (a control character, a backslash: :func:`rel_problem`) fails here, named, rather
    than in a manifest nobody can collect."""
    rels = manifest_entries(root, entries)
    refused = [f"{quote_name(rel)} holds {why}" for rel in rels if (why := rel_problem(rel))]
    if refused:
        raise ManifestError(f"{os.fspath(root)}: cannot list {'; '.join(refused[:5])}. Fix: rename the file(s) (no "
                            "control characters or backslashes in names under the model dir)")
    atomic_write_text(os.path.join(root, MANIFEST), manifest_text(root, rels))
    return len(rels)


MAX_REL_BYTES = 4096  # PATH_MAX
MAX_PART_BYTES = 255  # NAME_MAX
# Never in a name: C0/C1 controls and DEL (Cc), format characters such as bidi overrides (Cf), surrogates (Cs, an
# undecodable byte), line and paragraph separators (Zl, Zp): each could break a line or reach a terminal raw.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def quote_name(name: object) -> str:
    """A name as it may be printed: repr (every control character escaped), at most 200 characters of it."""
    return repr(name[:200]) if isinstance(name, str) else repr(name)


def _control_char(text: str) -> str | None:
    return next((c for c in text if unicodedata.category(c) in _UNSAFE_CATEGORIES), None)


def rel_problem(rel: object) -> str | None:
    """Why ``rel`` cannot name a file inside a model dir (None: it can). The one rule for every member name the
    collector and the host read or write: relative, normalised (no empty, ``.`` or ``..`` component), no backslash,
    no control character, at most PATH_MAX bytes (NAME_MAX a component). The reasons hold no ': '."""
    if not isinstance(rel, str) or not rel:
        return "an empty name"
    if rel.startswith("/"):
        return "an absolute path"
    bad = _control_char(rel)
    if bad is not None:
        return f"a control character, {bad!r}"
    if "\\" in rel:
        return "a backslash"
    parts = rel.split("/")
    if ".." in parts:
        return "a '..' component"
    if "." in parts:
        return "a '.' component"
    if "" in parts:
        return "an empty component (a doubled or trailing '/')"
    encoded = rel.encode("utf-8", "surrogatepass")
    if len(encoded) > MAX_REL_BYTES or any(len(p.encode("utf-8", "surrogatepass")) > MAX_PART_BYTES for p in parts):
        return f"too long a name (over {MAX_REL_BYTES} bytes, or {MAX_PART_BYTES} a component)"
    return None


def parse_manifest(text: str) -> list[tuple[str, str]]:
    """[(sha256, relpath)] of sha256sum lines (split at LF only; a CR before it is dropped); rejects malformed
    lines, any control character in a line, and every path :func:`rel_problem` refuses or that names the manifest
    or marker themselves. An empty manifest is an empty list (a job may have written nothing)."""
    entries = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if not line.strip(" "):
            continue
        bad = _control_char(line)
        if bad is not None:
            raise ManifestError(f"{MANIFEST} line {number} holds a control character ({bad!r}), refused: "
                                f"{quote_name(line)}")
        parts = line.split(None, 1)
        if len(parts) != 2 or len(parts[0]) != 64 or any(c not in "0123456789abcdefABCDEF" for c in parts[0]):
            raise ManifestError(f"{MANIFEST} line {number} is not '<sha256>  <path>': {quote_name(line)}")
        rel = parts[1].strip()
        rel = rel[1:] if rel.startswith("*") else rel
        problem = rel_problem(rel) or (f"the {rel} itself" if rel in (MANIFEST, DONE) else None)
        if problem is not None:
            raise ManifestError(f"{MANIFEST} line {number} names an unsafe path ({problem}): {quote_name(rel)}")
        entries.append((parts[0].lower(), rel))
    return entries


def check_received(expected: Mapping[str, str | None], digests: Mapping[str, str]) -> None:
    """Every expected file (path -> sha256, None: any content) is in ``digests`` with that sha256; raises naming
    each one that is not, in the manifest's order."""
    problems = []
    for name, want in expected.items():
        if name not in digests:
            problems.append(f"missing {name}")
        elif want is not None and digests[name] != want:
            problems.append(f"sha256 mismatch: {name}")
    if problems:
        raise ManifestError("; ".join(problems))


def verify_dir(root: str | os.PathLike[str]) -> int:
    """``root`` holds DONE, and every file of its manifest with the listed sha256; returns how many it lists."""
    if not os.path.isfile(os.path.join(root, DONE)):
        raise ManifestError(f"{root} has no {DONE} marker: refusing an unfinished checkpoint")
    try:
        with open(os.path.join(root, MANIFEST), encoding="utf-8") as handle:
            entries = parse_manifest(handle.read())
    except OSError:
        raise ManifestError(f"{root} has no {MANIFEST}") from None
    digests = {rel: sha256_file(os.path.join(root, rel)) for _, rel in entries
               if os.path.isfile(os.path.join(root, rel)) and not os.path.islink(os.path.join(root, rel))}
    try:
        check_received({rel: digest for digest, rel in entries}, digests)
    except ManifestError as error:
        raise ManifestError(f"{root} failed verification: {error}") from None
    return len(entries)
