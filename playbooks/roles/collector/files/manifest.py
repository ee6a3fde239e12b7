#!/usr/bin/env python3
"""manifest: read and verify a model dir's MANIFEST.sha256 on the control machine. Standard library only.

  paths            read a manifest on stdin, print {"paths": [...]} (exit 1 on a malformed line or unsafe path)
  verify DIR       check DIR/DONE exists and every sha256 in DIR/MANIFEST.sha256; exit 1 naming each problem
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable

MANIFEST = "MANIFEST.sha256"
DONE = "DONE"


class ManifestError(Exception):
    """The manifest or the files it lists are wrong."""


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parse(text: str) -> list[tuple[str, str]]:
    """[(sha256, relpath)] from sha256sum lines; rejects malformed lines, absolute paths and '..'."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        parts = raw.split(None, 1)
        if len(parts) != 2 or len(parts[0]) != 64 or any(c not in "0123456789abcdefABCDEF" for c in parts[0]):
            raise ManifestError(f"{MANIFEST} line {number} is not '<sha256>  <path>': {raw!r}")
        rel = parts[1].strip()
        rel = rel[1:] if rel.startswith("*") else rel
        if not rel or os.path.isabs(rel) or ".." in rel.split("/") or rel in (MANIFEST, DONE):
            raise ManifestError(f"{MANIFEST} line {number} names an unsafe path: {rel!r}")
        entries.append((parts[0].lower(), rel))
    if not entries:
        raise ManifestError(f"{MANIFEST} lists no files")
    return entries


def verify(directory: str) -> int:
    if not os.path.isfile(os.path.join(directory, DONE)):
        raise ManifestError(f"{directory} has no {DONE} marker: refusing an unfinished checkpoint")
    try:
        with open(os.path.join(directory, MANIFEST)) as handle:
            entries = parse(handle.read())
    except OSError:
        raise ManifestError(f"{directory} has no {MANIFEST}") from None
    problems = []
    for expected, rel in entries:
        path = os.path.join(directory, rel)
        if not os.path.isfile(path):
            problems.append(f"missing {rel}")
        elif sha256_file(path) != expected:
            problems.append(f"sha256 mismatch: {rel}")
    if problems:
        raise ManifestError("{} failed verification: {}".format(directory, "; ".join(problems)))
    return len(entries)


def main(argv: Iterable[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args == ["paths"]:
            result = {"paths": [rel for _, rel in parse(sys.stdin.read())]}
        elif len(args) == 2 and args[0] == "verify":
            result = {"verified": verify(args[1]), "dir": args[1]}
        else:
            print("usage: manifest.py paths < MANIFEST | manifest.py verify DIR", file=sys.stderr)
            return 2
    except ManifestError as error:
        print(json.dumps({"failed": True, "msg": str(error)}))
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
