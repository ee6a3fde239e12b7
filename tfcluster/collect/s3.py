"""The collector's S3 source: take a finished model dir from the job's S3 prefix when the chief is gone.

The trainer uploads the chief's model dir to ``s3://BUCKET/PREFIX/model/`` (``checkpoint_s3``; DONE is written
last, after every file and the manifest). The request (JSON) names ``uri`` (``s3://BUCKET/PREFIX``), ``dest``,
``max_bytes``, ``slack``, ``optional_names`` (``collector_optional_files``: names taken when present) and
``endpoint_url`` (an S3-compatible endpoint; empty: AWS). The same limits, checks and versions as
:mod:`tfcluster.collect.ssh`: every byte against a cap, every sha256 of the manifest, fsync, then the ``current`` link
swapped. Only the keys of the manifest's names (each checked by the name rule; the manifest is bucket data), the
manifest, DONE and the configured optional names are fetched; any other key under the prefix is never mapped to a
file, and every file is written through :func:`tfcluster.collect.transfer.open_inside`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
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
from tfcluster.collect.transfer import Budget, CollectError, write_hashed
from tfcluster.core.contract import DONE, MANIFEST
from tfcluster.core.files import ManifestError, check_received, parse_manifest

MODEL = "model"
MAX_MANIFEST_BYTES = 16 << 20


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, key prefix of the model dir, ending in '/') of ``s3://BUCKET/PREFIX``."""
    if not uri.startswith("s3://") or "/" not in uri[5:].strip("/"):
        raise CollectError(f"checkpoint_s3 {uri!r} is not s3://BUCKET/PREFIX. Fix: set tfcluster_checkpoint_s3")
    bucket, _, prefix = uri[5:].partition("/")
    return bucket, f"{prefix.strip('/')}/{MODEL}/"


def listing(client: Any, bucket: str, prefix: str) -> dict[str, int]:
    """{relative key: size} of every object under ``prefix``."""
    sizes: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", ()):
            sizes[item["Key"][len(prefix):]] = int(item["Size"])
    return sizes


def _client(request: Mapping[str, Any]) -> Any:
    import boto3  # the control machine's venv has it; imported only for an S3 pull

    return boto3.client("s3", endpoint_url=request.get("endpoint_url") or None)


def pull_s3(request: Mapping[str, Any], client: Any = None) -> dict[str, Any]:
    bucket, prefix = split_uri(str(request["uri"]))
    where = f"s3://{bucket}/{prefix}"
    client = client or _client(request)
    sizes = listing(client, bucket, prefix)
    if DONE not in sizes or MANIFEST not in sizes:
        raise CollectError(f"{where} holds no finished model dir ({DONE} and {MANIFEST} missing): nothing can be "
                           "collected from S3. Fix: wait for the job, or collect from the chief")
    if sizes[MANIFEST] > MAX_MANIFEST_BYTES:
        raise CollectError(f"{where}{MANIFEST} is {sizes[MANIFEST]:,} bytes: refusing it")
    raw = client.get_object(Bucket=bucket, Key=prefix + MANIFEST)["Body"].read(MAX_MANIFEST_BYTES + 1)
    try:
        manifest = raw.decode("utf-8")
        entries = {rel: sha for sha, rel in parse_manifest(manifest)}
        optional = optional_names(request)
    except (ManifestError, CollectError, UnicodeDecodeError) as error:
        raise CollectError(f"collecting {where} failed: {error}. Nothing was written") from None
    missing = [rel for rel in entries if rel not in sizes]
    if missing:
        raise CollectError(f"{where} lacks {', '.join(missing[:5])} listed in {MANIFEST}")
    names = [*entries, MANIFEST, DONE] + [n for n in optional if n in sizes and n not in entries]
    root = Path(str(request["dest"])).absolute()
    version = manifest_digest(manifest)
    started = time.monotonic()
    if verified_copy(root, version, manifest):
        return result_of(root, version, files=0, size=0, changed=swap_current(root, version), entries=len(entries),
                         seconds=0.0, host=where)
    declared = sum(sizes[n] for n in names)
    try:
        budget = Budget(byte_cap(root, declared, int(request.get("max_bytes") or 0),
                                 int(request.get("slack") or DEFAULT_SLACK)), where)
        with staging_dir(root) as staging:
            digests = {}
            for name in names:
                budget.take(sizes[name])
                body = client.get_object(Bucket=bucket, Key=prefix + name)["Body"]
                digests[name] = write_hashed(body, staging, name, sizes[name])
            check_received({**entries, MANIFEST: None, DONE: None}, digests)
            if (staging / MANIFEST).read_text(encoding="utf-8") != manifest:
                raise CollectError(f"{MANIFEST} changed while it was being collected: run again")
            install(staging, root, version)
    except (CollectError, ManifestError, OSError) as error:
        raise CollectError(f"collecting {where} failed: {error}. Nothing was written to {root}") from None
    return result_of(root, version, files=len(names), size=declared, changed=True, entries=len(entries),
                   seconds=time.monotonic() - started, host=where)
