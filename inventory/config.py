"""Inventory settings from the environment; every bad value is collected before anything runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from inventory.model import DEFAULT_BASE_PORT, DEFAULT_TF_DIR, DEFAULT_WORKERS, SOURCES, InventoryError
from tfcluster.contract import STRATEGY_CHOICES, Problem

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CLUSTER_NAMES = {"local": "local", "static": "onprem", "terraform": "tfcluster"}


@dataclass(frozen=True)
class Settings:
    source: str
    tf_dir: Path
    hosts_file: Path | None
    cluster: str | None
    workers: int
    strategy: str
    base_port: int


def _int_env(env: Mapping[str, str], key: str, default: int, bounds: tuple[int, int],
             problems: list[Problem]) -> int:
    low, high = bounds
    raw = env.get(key, "").strip()
    if not raw:
        return default
    if raw.isdigit() and low <= int(raw) <= high:
        return int(raw)
    problems.append(Problem(key, f"{raw!r} is not a whole number in {low}..{high}",
                            f"set {key} to a number in {low}..{high}, or unset it for {default}"))
    return default


def load_settings(env: Mapping[str, str]) -> Settings:
    """Settings from environment variables (see the inventory/tfcluster.py docstring)."""
    problems: list[Problem] = []
    source = env.get("TFCLUSTER_SOURCE", "").strip() or "terraform"
    if source not in SOURCES:
        problems.append(Problem("TFCLUSTER_SOURCE", f"unknown source {source!r}", f"use one of {', '.join(SOURCES)}"))
    strategy = env.get("TFCLUSTER_STRATEGY", "").strip() or "auto"
    if strategy not in STRATEGY_CHOICES:
        problems.append(Problem("TFCLUSTER_STRATEGY", f"unknown strategy {strategy!r}",
                                f"use one of {', '.join(STRATEGY_CHOICES)}"))
    workers = _int_env(env, "TFCLUSTER_WORKERS", DEFAULT_WORKERS, (1, 10_000), problems)
    base_port = _int_env(env, "TFCLUSTER_BASE_PORT", DEFAULT_BASE_PORT, (1, 65535), problems)
    if source == "local":
        extra = 2 if strategy == "parameter_server" else 0
        last = base_port + workers + extra - 1
        if last > 65535:
            problems.append(Problem("TFCLUSTER_BASE_PORT", f"{workers + extra} local tasks from port {base_port} "
                                    f"would need port {last}", "lower TFCLUSTER_BASE_PORT or TFCLUSTER_WORKERS"))
    tf_dir_raw = env.get("TFCLUSTER_TF_DIR", "").strip()
    tf_dir = Path(tf_dir_raw) if tf_dir_raw else REPO_ROOT / DEFAULT_TF_DIR
    hosts_raw = env.get("TFCLUSTER_HOSTS_FILE", "").strip()
    hosts_file = Path(hosts_raw) if hosts_raw else None
    if source == "static" and hosts_file is None:
        problems.append(Problem("TFCLUSTER_HOSTS_FILE", "is not set, but TFCLUSTER_SOURCE=static needs a host file",
                                "export TFCLUSTER_HOSTS_FILE=path/to/hosts.yml (see inventory/onprem.example.yml)"))
    cluster = env.get("TFCLUSTER_CLUSTER", "").strip() or None
    if source == "aws" and cluster is None:
        problems.append(Problem("TFCLUSTER_CLUSTER", "is not set, but TFCLUSTER_SOURCE=aws filters instances by "
                                "the tfcluster:cluster tag", "export TFCLUSTER_CLUSTER=<cluster_name>"))
    if problems:
        raise InventoryError(problems, "tfcluster inventory environment")
    return Settings(source=source, tf_dir=tf_dir, hosts_file=hosts_file, cluster=cluster, workers=workers,
                    strategy=strategy, base_port=base_port)
