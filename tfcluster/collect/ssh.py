"""The collector's pull from the chief: bring a finished model dir home over SSH (or from a local slot's disk),
verified and bounded, into the store (:mod:`tfcluster.collect.store`). ``python -m tfcluster.collect pull`` runs it.

The chief's side is the ``tfcluster.cluster.manifest_info`` module, run as the job's user: it reads the manifest
without following a symlink and returns every listed file with its size (regular files only). The pull request
(JSON, written by the collector role) carries that answer, the configured optional names (``optional_names``,
``collector_optional_files``), the host's resolved Ansible connection settings and the limits. The answer is data:
which files are taken is decided here -- the manifest's names (every one checked by the name rule,
:func:`tfcluster.core.files.rel_problem`), the manifest, DONE and the configured optional names; the answer only gives
their sizes, and a name in it that was not asked for fails the collect, naming the host and the name (escaped).
``tar`` runs on the chief as the job's user too (``sudo -n -u USER``, :class:`tfcluster.run.reach.Reach`), with the
explicit file list, no recursion and no dereference; several big members go in parallel streams, one connection each
(``streams``, default :data:`tfcluster.collect.transfer.MAX_STREAMS`; :func:`tfcluster.collect.transfer.plan_streams`),
each checked like the one stream.

Every byte counts against one cap: the manifest's total + slack, ``max_bytes`` when set, and the free space of the
destination's filesystem; a member whose size differs from the one the chief reported, a sparse member, a link or
anything not asked for stops the run. A timeout bounds it. Nothing is left behind on failure.

Artifacts are versioned: ``DEST/<manifest sha256>/`` holds one verified copy; ``DEST/current`` is a symlink to the
newest, swapped by renaming a temporary link after the new copy is fsynced. Older copies stay until the user
removes them. An empty manifest (a script that wrote nothing) is a success with nothing to collect.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from tfcluster.collect.store import (
    DEFAULT_SLACK,
    byte_cap,
    install,
    manifest_digest,
    optional_names,
    result_of,
    staging_dir,
    swap_current,
    verified_copy,
)
from tfcluster.collect.transfer import (
    MAX_STREAMS,
    Budget,
    CollectError,
    Wanted,
    copy_local,
    stream_from,
    tar_overhead,
)
from tfcluster.core.contract import DONE, MANIFEST, is_digits
from tfcluster.core.files import (
    ManifestError,
    parse_manifest,
    quote_name,
)
from tfcluster.run.reach import Reach, ReachError

DEFAULT_TIMEOUT = 3600


















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
    manifest's names (its text is host data, so :func:`tfcluster.core.files.parse_manifest` checks every name),
    MANIFEST, DONE and the configured optional names; the host's answer (``files``, ``optional``) only supplies their
    sizes."""
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
                       ciphers=str(request.get("ciphers") or ""), streams=_streams(request.get("streams")))


def _streams(value: Any) -> int:
    """The request's ``streams`` (1..16), else MAX_STREAMS."""
    count = _size(value)
    return min(16, count) if count else MAX_STREAMS
