"""What this machine knows of a cluster's jobs: the ledger (artifacts/<cluster>/<job>/job.json: did the job finish,
was it collected) and the verified copies the collector keeps (``current`` and older ones)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tfcluster import contract, paths
from tfcluster.files import atomic_write_json

LEDGER = "job.json"


def read_ledger(directory: Path) -> dict[str, Any]:
    try:
        data = json.loads((directory / LEDGER).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def collected_dir(directory: Path) -> Path | None:
    """The verified copy of a job on this machine (``current``, or the job dir itself for older copies)."""
    for candidate in (directory / "current", directory):
        if (candidate / contract.DONE).is_file():
            return candidate
    return None


def write_ledger(directory: Path, cluster_name: str, decision: str | None) -> None:
    """Record that the job finished (the wait decided ``done``) and whether its artifacts are here."""
    record = read_ledger(directory)
    if decision == "done":
        record["finished"] = True
    record.update(cluster_name=cluster_name, collected=collected_dir(directory) is not None)
    atomic_write_json(directory / LEDGER, record)


def uncollected_jobs(cluster: str, cluster_name: str) -> list[str]:
    """Jobs of this cluster that finished but whose artifacts never came home."""
    root = paths.ARTIFACTS / cluster
    jobs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [p.name for p in jobs if (record := read_ledger(p)).get("finished") and not record.get("collected")
            and record.get("cluster_name", cluster_name) == cluster_name]



def dir_size(path: Path) -> int:
    """Bytes of the regular files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def old_copies(job_dir: Path) -> list[Path]:
    """Verified copies of a job other than the one ``current`` points at (the collector keeps them)."""
    current = (job_dir / "current").resolve() if (job_dir / "current").is_symlink() else None
    return sorted(p for p in job_dir.iterdir() if p.is_dir() and not p.is_symlink() and p.resolve() != current
                  and (p / contract.MANIFEST).is_file()) if job_dir.is_dir() else []
