#!/usr/bin/env python3
"""release: build and check a trainer release by content digest. Standard library only.

  stage --dest DIR NAME=PATH ...   copy each source (a directory tree or one file) into DIR/<digest>/NAME/,
                                   skipping caches, and pack it as DIR/<digest>.tar.gz (reproducible); reuse an
                                   existing identical release; print {"digest", "path", "archive"}.
  digest DIR                       print {"digest"} of a deployed release (the same algorithm as stage).

The digest is sha256 over "relative-path NUL sha256(content) LF" for every regular file, sorted, ignoring
__pycache__ and *.pyc (Python writes those next to the code when it runs from a writable directory).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Sequence

SKIP_DIRS = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")


class ReleaseError(Exception):
    """A problem the caller can act on."""


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_files(root: str) -> list[str]:
    found: list[str] = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in files:
            path = os.path.join(directory, name)
            if name.endswith((".pyc", ".pyo")) or not os.path.isfile(path) or os.path.islink(path):
                continue
            found.append(os.path.relpath(path, root))
    return sorted(found)


def tree_digest(root: str) -> str:
    if not os.path.isdir(root):
        raise ReleaseError(f"{root} is not a directory: deploy the trainer first (tag trainer)")
    digest = hashlib.sha256()
    for rel in tree_files(root):
        digest.update((f"{rel}\0{sha256_file(os.path.join(root, rel))}\n").encode())
    return digest.hexdigest()


def pack(root: str, archive: str) -> None:
    """A reproducible tar.gz of root's files (sorted, owner root, fixed mtime), written atomically."""

    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        info.mode = 0o755 if info.isdir() else 0o644
        return info

    tmp = archive + ".tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for rel in tree_files(root):
            tar.add(os.path.join(root, rel), arcname=rel, recursive=False, filter=normalise)
    os.replace(tmp, archive)


def stage(dest: str, sources: Sequence[str]) -> dict:
    os.makedirs(dest, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".stage-", dir=dest)
    try:
        for item in sources:
            name, sep, path = item.partition("=")
            if not sep or not name or "/" in name or name in (".", ".."):
                raise ReleaseError(f"a source must be NAME=PATH, got {item!r}")
            if os.path.isdir(path):
                for rel in tree_files(path):
                    target = os.path.join(tmp, name, rel)
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copyfile(os.path.join(path, rel), target)
            elif os.path.isfile(path):
                os.makedirs(os.path.join(tmp, name), exist_ok=True)
                shutil.copyfile(path, os.path.join(tmp, name, os.path.basename(path)))
            else:
                raise ReleaseError(f"source {path} does not exist")
        digest = tree_digest(tmp)
        final = os.path.join(dest, digest)
        if os.path.isdir(final):
            shutil.rmtree(tmp)
        else:
            for directory, _dirs, _files in os.walk(tmp):
                os.chmod(directory, 0o755)
            os.replace(tmp, final)
        archive = final + ".tar.gz"
        if not os.path.isfile(archive):
            pack(final, archive)
        return {"digest": digest, "path": final, "archive": archive}
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="release", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_stage = sub.add_parser("stage")
    p_stage.add_argument("--dest", required=True)
    p_stage.add_argument("sources", nargs="+")
    sub.add_parser("digest").add_argument("dir")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        result = stage(args.dest, args.sources) if args.command == "stage" else {"digest": tree_digest(args.dir)}
    except ReleaseError as error:
        print(json.dumps({"failed": True, "msg": str(error)}))
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
