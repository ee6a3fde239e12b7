"""The trainer release and the prepare digest, built on the control machine. Standard library only.

    python -m tfcluster.prepare.release stage --dest DIR [--repo ROOT] [--script PATH] [--requirements FILE]
                                      [--inputs PATH ...] [--listing DIR ...] [--dataset NAME=FILE ...]

A release is what the hosts run, and nothing else:

    trainer/                the built-in trainer package
    tfcluster/__init__.py   (imports nothing)
    tfcluster/core/         the ground floor the trainer and the host runtime import (contract, files, ...)
    tfcluster/host/         the host runtime (job supervisor, status, preflight, autostop)
    user/                   a user's script (a .py file or a package directory) and its requirements file
                            (hash-pinned, without the runtime's packages: tfcluster.prepare.lock.script_lock_problem)

The control-machine modules (provision, terraform, ...) are left out, so a change to them leaves the release's
digest alone. The digest is :func:`tfcluster.core.files.tree_digest` of the staged tree; the release is staged once into
``DIR/<digest>/`` and packed into ``DIR/<digest>.tar.gz`` (reproducible: sorted, owner root, mtime 0).

``--inputs`` (files or directories, digested by content), ``--listing`` (directories digested by name and size: a
wheelhouse of GBs costs a directory listing) and ``--dataset`` (NAME=FILE, by content) make the *prepare digest*:
with each host's own settings and the release's digest it names everything site.yml would put on a host. A prepared
host keeps both digests (the host_ready role): an unchanged cluster skips the whole prepare stage after one probe,
and one whose release alone changed (a new SCRIPT) runs only the trainer role.
Prints one JSON object: digest (the release's), path, archive, prepare, datasets ({NAME: {src, sha256, size}}).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tfcluster.core.files import TEMP_PREFIX, atomic_write_json, sha256_file, tree_digest, tree_files
from tfcluster.core.paths import REPO_ROOT
from tfcluster.prepare.lock import script_lock_problem

REPO = REPO_ROOT
# What a host runs (relative to the repository): whole folders, the shipped floors of the package (the import-graph
# test keeps them standard library only and free of imports from the rest of tfcluster).
RELEASE_TREES: tuple[str, ...] = ("trainer", "tfcluster/core", "tfcluster/host")
RELEASE_FILES: tuple[str, ...] = ("tfcluster/__init__.py",)
USER_DIR = "user"


class ReleaseError(ValueError):
    """A problem the caller can act on; the message names the path and the fix."""


def release_sources(repo: Path, script: str = "", requirements: str = "") -> list[tuple[str, Path]]:
    """(path in the release, source path) of every tree or file a release holds, in a fixed order."""
    sources: list[tuple[str, Path]] = []
    for rel in RELEASE_TREES:
        if (repo / rel).is_dir():
            sources.append((rel, repo / rel))
        elif rel == "trainer":
            raise ReleaseError(f"{repo / rel} is not a directory. Fix: run from a tfcluster checkout")
    sources += [(rel, repo / rel) for rel in RELEASE_FILES]
    for extra in (script, requirements):
        if not extra:
            continue
        path = Path(extra)
        if not path.exists():
            raise ReleaseError(f"{path} does not exist on the control machine. Fix: check SCRIPT / "
                               "SCRIPT_REQUIREMENTS")
        sources.append((f"{USER_DIR}/{path.name}", path.resolve()))
    problem = script_lock_problem(Path(requirements)) if requirements else None
    if problem:  # hosts install it with pip --require-hashes: refused here, before anything reaches a host
        raise ReleaseError(str(problem))
    return sources


def _copy_into(tmp: Path, sources: Sequence[tuple[str, Path]]) -> None:
    for rel, path in sources:
        if path.is_dir():
            for name in tree_files(path):
                target = tmp / rel / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path / name, target)
        elif path.is_file():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, tmp / rel)
        else:
            raise ReleaseError(f"release source {path} does not exist. Fix: check the checkout")


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    info.mode = 0o755 if info.isdir() else 0o644
    return info


def pack(root: Path, archive: Path) -> None:
    """A reproducible tar.gz of ``root``'s files, written atomically."""
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=archive.parent)
    os.close(fd)
    try:
        # gzip without the file's name and time in its header: the same files give the same bytes anywhere
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed, \
                tarfile.open(fileobj=packed, mode="w") as tar:
            for rel in tree_files(root):
                tar.add(root / rel, arcname=rel, recursive=False, filter=_normalise)
        os.chmod(tmp, 0o644)
        os.replace(tmp, archive)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _staged(final: Path, digest: str) -> bool:
    return final.is_dir() and tree_digest(final) == digest


def stage(dest: Path, sources: Sequence[tuple[str, Path]]) -> dict[str, str]:
    """Stage ``sources`` into ``dest/<digest>/`` (reused when it exists) and pack it; {digest, path, archive}."""
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".stage-", dir=dest))
    try:
        _copy_into(tmp, sources)
        digest = tree_digest(tmp)
        final = dest / digest
        if not _staged(final, digest):
            for directory, _dirs, _files in os.walk(tmp):
                os.chmod(directory, 0o755)
            try:
                os.replace(tmp, final)  # atomic; fails when a tree of that name exists
            except OSError:
                # Another run (a second cluster's `make train` from this checkout) staged it first: use theirs.
                # A tree of that name with other content (edited by hand) is replaced.
                if not _staged(final, digest):
                    shutil.rmtree(final)
                    os.replace(tmp, final)
        archive = dest / f"{digest}.tar.gz"
        if not archive.is_file():
            pack(final, archive)
        return {"digest": digest, "path": str(final), "archive": str(archive)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def listing_digest(directory: Path) -> str:
    """sha256 of ``NAME SIZE`` of every file in ``directory`` (not its content); '' for no directory."""
    if not directory.is_dir():
        return ""
    digest = hashlib.sha256()
    for rel in tree_files(directory):
        digest.update(f"{rel} {(directory / rel).stat().st_size}\n".encode())
    return digest.hexdigest()


def content_digest(path: Path) -> str:
    """A file's sha256, a directory's tree digest, '' for a missing path."""
    if path.is_dir():
        return tree_digest(path)
    return sha256_file(path) if path.is_file() else ""


def verified(file: Path, sha256: str, cache: Path | None) -> None:
    """The trainer's own check of an npz (``python -m trainer.datasets verify``: every array's canonical sha256),
    run once per file content: the result is remembered in ``cache`` by sha256."""
    known: dict[str, Any] = {}
    if cache is not None and cache.is_file():
        try:
            known = json.loads(cache.read_text())
        except ValueError:
            known = {}
    if known.get(sha256) is True:
        return
    proc = subprocess.run([sys.executable, "-m", "trainer.datasets", "verify", str(file)], capture_output=True,
                          text=True, check=False, cwd=REPO)
    report: dict[str, Any] = {}
    try:
        report = json.loads(proc.stdout) if proc.returncode == 0 else {}
    except ValueError:
        report = {}
    if not report.get("canonical_mnist", False):
        raise ReleaseError(f"{file} is not the canonical MNIST ({(proc.stderr or proc.stdout).strip()[-300:]}). "
                           "Fix: remove it and run `make setup` (python -m trainer.datasets fetch)")
    if cache is not None:
        known[sha256] = True
        cache.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(cache, known)


def datasets(pairs: Iterable[str], cache: Path | None = None, verify: bool = False,
             source: Path | None = None) -> dict[str, dict[str, Any]]:
    """{NAME: {src, sha256, size, file}} of ``NAME=FILE`` pairs, or of names (``source/NAME.npz``); a missing file
    is an error naming the fix. ``verify``: each file must pass the trainer's canonical check (once per content,
    see :func:`verified`)."""
    found: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep and source is not None:
            path = str(source / f"{name}.npz")
        if not name or not path or "/" in name or name.startswith("."):
            raise ReleaseError(f"a dataset must be NAME or NAME=FILE, got {pair!r}")
        file = Path(path)
        if not file.is_file():
            raise ReleaseError(f"dataset {name}: {file} does not exist on the control machine. Fix: run `make setup` "
                               "(python -m trainer.datasets fetch) or pass the data with --data s3://...")
        digest = sha256_file(file)
        if verify:
            verified(file, digest, cache)
        found[name] = {"src": str(file.resolve()), "sha256": digest, "size": file.stat().st_size, "file": file.name}
    return found


def prepare_digest(release: str, inputs: Sequence[Path], listings: Sequence[Path],
                   data: Mapping[str, Mapping[str, Any]]) -> str:
    """One digest of everything the prepare stage puts on a host, but the host's own settings."""
    digest = hashlib.sha256(f"release {release}\n".encode())
    for path in inputs:
        digest.update(f"input {path} {content_digest(path)}\n".encode())
    for path in listings:
        digest.update(f"listing {path} {listing_digest(path)}\n".encode())
    for name in sorted(data):
        digest.update(f"dataset {name} {data[name]['sha256']}\n".encode())
    return digest.hexdigest()


def build(args: argparse.Namespace) -> dict[str, Any]:
    sources = release_sources(Path(args.repo), args.script, args.requirements)
    result: dict[str, Any] = dict(stage(Path(args.dest), sources))
    result["datasets"] = datasets(args.dataset, Path(args.dest) / "verified-datasets.json", args.verify_datasets,
                                  Path(args.datasets_dir))
    result["prepare"] = prepare_digest("", [Path(p) for p in args.inputs],
                                       [Path(p) for p in args.listing], result["datasets"])
    return result


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m tfcluster.prepare.release", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)
    p_stage = sub.add_parser("stage", help="stage the release and digest the prepare inputs")
    p_stage.add_argument("--dest", required=True, help="staging directory (releases by digest)")
    p_stage.add_argument("--repo", default=str(REPO), help="the tfcluster checkout")
    p_stage.add_argument("--script", default="", help="a user's script (.py file or package directory)")
    p_stage.add_argument("--requirements", default="", help="the script's requirements file")
    p_stage.add_argument("--inputs", nargs="*", default=[], help="files or directories digested by content")
    p_stage.add_argument("--listing", nargs="*", default=[], help="directories digested by name and size")
    p_stage.add_argument("--dataset", nargs="*", default=[], help="datasets the hosts get: NAME (--datasets-dir/"
                         "NAME.npz) or NAME=FILE")
    p_stage.add_argument("--datasets-dir", default=str(REPO / ".cache" / "datasets"),
                         help="the control machine's verified dataset cache")
    p_stage.add_argument("--verify-datasets", action="store_true",
                         help="check each dataset with the trainer's canonical check (once per content)")
    sub.add_parser("digest", help="the digest of a release directory").add_argument("dir")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "digest":
            if not Path(args.dir).is_dir():
                raise ReleaseError(f"{args.dir} is not a directory. Fix: deploy the trainer first (tag trainer)")
            result: dict[str, Any] = {"digest": tree_digest(args.dir)}
        else:
            result = build(args)
    except (ReleaseError, OSError) as error:
        print(json.dumps({"failed": True, "msg": str(error)}))
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
