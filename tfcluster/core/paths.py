"""Where things live on the control machine: the checkout, artifacts, logs, locks. Standard library only."""

from __future__ import annotations

import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "artifacts"
CACHE = REPO_ROOT / ".cache"
INVENTORY_SCRIPT = REPO_ROOT / "inventory" / "slots.py"
PLAYBOOKS = REPO_ROOT / "playbooks"
COLLECTION = PLAYBOOKS / "collections" / "ansible_collections" / "tfcluster" / "cluster"  # tfcluster.cluster
ROLES = COLLECTION / "roles"
ANSIBLE_CFG = REPO_ROOT / "ansible.cfg"


def job_dir(cluster: str, job: str) -> Path:
    """artifacts/<cluster>/<job>/: the collected copies (by manifest digest), ``current``, ``logs/``, the job's
    lock (``.lock``) and ledger (``job.json``)."""
    return ARTIFACTS / cluster / job


def cluster_lock_file(cluster: str, cluster_name: str) -> Path:
    """artifacts/<cluster>/.cluster-<name>.lock: train, collect and stop share it, destroy takes it alone (a dot
    name: never a job's dir)."""
    return ARTIFACTS / cluster / f".cluster-{cluster_name}.lock"


def log_file(directory: Path, action: str, now: float | None = None) -> Path:
    """``<directory>/logs/<UTC time>-<action>.log``, one per run: a job dir for job actions, artifacts/<cluster>
    for provision and destroy."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))
    return directory / "logs" / f"{stamp}-{action}.log"
