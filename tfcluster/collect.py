"""The collector's control side: bring a finished model dir home, verified, bounded and versioned.

    python -m tfcluster.collect pull < REQUEST.json     # from the chief (one tar stream over one SSH connection)
    python -m tfcluster.collect s3 < REQUEST.json       # from the job's S3 prefix when the chief is gone
    python -m tfcluster.collect verify DIR              # DONE present and every sha256 of its manifest

The chief's side is the ``tfcluster.cluster.manifest_info`` module, run as the job's user: it reads the manifest
without following a symlink and returns every listed file with its size (regular files only). The pull request
(JSON, written by the collector role) carries that answer, the configured optional names (``optional_names``,
``collector_optional_files``), the host's resolved Ansible connection settings and the limits. The answer is data:
which files are taken is decided here -- the manifest's names (every one checked by the name rule,
:func:`tfcluster.files.rel_problem`), the manifest, DONE and the configured optional names; the answer only gives
their sizes, and a name in it that was not asked for fails the collect, naming the host and the name (escaped).
``tar`` runs on the chief as the job's user too (``sudo -n -u USER``, :class:`tfcluster.reach.Reach`), with the
explicit file list, no recursion and no dereference.

Every byte counts against one cap: the manifest's total + slack, ``max_bytes`` when set, and the free space of the
destination's filesystem; a member whose size differs from the one the chief reported, a sparse member, a link or
anything not asked for stops the run. A timeout bounds it. Nothing is left behind on failure.

Artifacts are versioned: ``DEST/<manifest sha256>/`` holds one verified copy; ``DEST/current`` is a symlink to the
newest, swapped by renaming a temporary link after the new copy is fsynced. Older copies stay until the user
removes them. An empty manifest (a script that wrote nothing) is a success with nothing to collect.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tfcluster import events
from tfcluster.contract import DONE, MANIFEST, is_digits
from tfcluster.files import (
    ManifestError,
    fsync_dir,
    fsync_tree,
    parse_manifest,
    quote_name,
    rel_problem,
    verify_dir,
)
from tfcluster.reach import Reach, ReachError
from tfcluster.transfer import (
    Budget,
    CollectError,
    Wanted,
    copy_local,
    stream_from,
    tar_overhead,
)

CURRENT = "current"
RESERVE_BYTES = 64 << 20  # left free on the destination's filesystem
DEFAULT_SLACK = 1 << 20
DEFAULT_TIMEOUT = 3600


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


def _size(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and is_digits(value):
        return int(value)
    return value if isinstance(value, int) and value >= 0 else None


def answered_sizes(answer: Any, asked: Collection[str], host: str, field: str) -> dict[str, int]:
    """{name: size} of the host's answer ``field`` (``[{path, size}]``): only names the control side asked for,
    each once, each with a whole size >= 0; anything else fails naming the host and the name (escaped)."""
    sizes: dict[str, int] = {}
    for item in answer or ():
        name = item.get("path") if isinstance(item, Mapping) else None
        size = _size(item.get("size")) if isinstance(item, Mapping) else None
        if not isinstance(name, str) or name not in asked:
            raise CollectError(f"{host} answered {quote_name(name)} in its {field}, which was not asked for (the "
                               f"control side asks for the manifest's names, {MANIFEST}, {DONE} and "
                               "collector_optional_files only): refusing it")
        if name in sizes or size is None:
            raise CollectError(f"{host} answered {quote_name(name)} in its {field} twice or without a size: "
                               "refusing it")
        sizes[name] = size
    return sizes


def wanted_files(request: Mapping[str, Any]) -> tuple[dict[str, Wanted], int]:
    """The files to bring and their declared total size. Which files comes from the control side only: the
    manifest's names (its text is host data, so :func:`tfcluster.files.parse_manifest` checks every name), MANIFEST,
    DONE and the configured optional names; the host's answer (``files``, ``optional``) only supplies their sizes."""
    host = str(request.get("name") or "the chief")
    entries = {rel: sha for sha, rel in parse_manifest(str(request["manifest"]))}
    required = [*entries, MANIFEST, DONE]
    optional = optional_names(request)
    sizes = answered_sizes(request.get("files"), set(required), host, "files")
    extra = answered_sizes(request.get("optional"), set(optional), host, "optional files")
    wanted: dict[str, Wanted] = {}
    for name in required:
        if name not in sizes:
            raise CollectError(f"{name} is listed but {host} reported no size for it (not a regular file?)")
        wanted[name] = Wanted(entries.get(name), sizes[name])
    for name in optional:
        if name not in wanted and name in extra:
            wanted[name] = Wanted(None, extra[name], required=False)
    return wanted, sum(w.size for w in wanted.values())


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


def pull(request: Mapping[str, Any]) -> dict[str, Any]:
    """Collect per ``request`` (see the module docstring); the result dict, or CollectError."""
    manifest = str(request["manifest"])
    root = Path(str(request["dest"])).absolute()
    host = str(request.get("name") or "the chief")
    try:
        wanted, declared = wanted_files(request)
    except (CollectError, ManifestError) as error:
        raise _failed(request, host, root, error) from None
    entries = sum(1 for w in wanted.values() if w.sha256 is not None)
    version = manifest_digest(manifest)
    started = time.monotonic()
    if verified_copy(root, version, manifest):
        changed = swap_current(root, version)
        return result_of(root, version, files=0, size=0, changed=changed, entries=entries,
                         seconds=time.monotonic() - started, host=host)
    try:
        slack = int(request.get("slack") or DEFAULT_SLACK) + tar_overhead(len(wanted))
        budget = Budget(byte_cap(root, declared, int(request.get("max_bytes") or 0), slack), host)
        with staging_dir(root) as staging:
            files, size = _transfer(request, staging, wanted, budget, host)
            if (staging / MANIFEST).read_text(encoding="utf-8") != manifest:
                raise CollectError(f"{MANIFEST} on {host} changed while it was being collected: run again")
            install(staging, root, version)
    except (CollectError, ManifestError, ReachError, OSError) as error:
        raise _failed(request, host, root, error) from None
    return result_of(root, version, files=files, size=size, changed=True, entries=entries,
                     seconds=time.monotonic() - started, host=host)


def _failed(request: Mapping[str, Any], host: str, root: Path, error: Exception) -> CollectError:
    return CollectError(f"collecting {request.get('model_dir')} from {host} failed: {error}. Nothing was written to "
                        f"{root} (the previous copy, if any, is kept)")


def _transfer(request: Mapping[str, Any], staging: Path, wanted: Mapping[str, Wanted], budget: Budget,
              host: str) -> tuple[int, int]:
    """``request["reach"]``: the chief's connection as the ``tfcluster.cluster.reach_info`` action plugin resolved
    it, with become to the job's user (local slots: no become)."""
    reach = Reach.from_info({"name": host, **dict(request.get("reach") or {})})
    if reach.local:
        return copy_local(Path(str(request["model_dir"])), staging, wanted, budget)
    timeout = float(request.get("timeout") or DEFAULT_TIMEOUT)
    return stream_from(reach, str(request["model_dir"]), staging, wanted, budget, timeout=timeout,
                       ciphers=str(request.get("ciphers") or ""))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(args) == 2 and args[0] == "verify":
            result: dict[str, Any] = {"verified": verify_dir(args[1]), "dir": args[1]}
        elif args == ["pull"]:
            result = pull(json.loads(sys.stdin.read()))
        elif args == ["s3"]:
            from tfcluster.collect_s3 import pull_s3

            result = pull_s3(json.loads(sys.stdin.read()))
        else:
            print("usage: python -m tfcluster.collect pull|s3 < REQUEST.json | verify DIR", file=sys.stderr)
            return 2
    except (CollectError, ManifestError, OSError, KeyError, ValueError) as error:
        print(json.dumps({"failed": True, "msg": str(error)}))
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
