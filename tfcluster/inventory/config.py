"""Inventory settings from the environment; every bad value is collected before anything runs."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfcluster.core.contract import (
    CONNECT_MODES,
    LOCAL_BASE_PORT,
    STRATEGY_CHOICES,
    TAG_KEYS,
    TF_PORT,
    Problem,
    is_digits,
    name_problem,
)
from tfcluster.core.paths import REPO_ROOT
from tfcluster.inventory.access import HOST_KEY_CHECKING, SshTrust, parse_bastion_text
from tfcluster.inventory.fields import absolute, path_problem
from tfcluster.inventory.model import DEFAULT_TF_DIR, DEFAULT_WORKERS, SOURCES, Bastion, InventoryError

DEFAULT_CLUSTER_NAMES = {"local": "local", "static": "onprem", "terraform": "tfcluster"}
CLOUD_SOURCES = ("terraform", "aws")  # the sources that know public and private IPs (TFCLUSTER_CONNECT)


@dataclass(frozen=True)
class Settings:
    source: str
    tf_dir: Path
    hosts_file: Path | None
    cluster: str | None
    workers: int
    strategy: str
    base_port: int = LOCAL_BASE_PORT  # local source: slot i listens on base_port + i
    port: int = TF_PORT  # other sources: the training port of a host that states none
    connect: str | None = None  # TFCLUSTER_CONNECT (aws, terraform); None: the source's own (terraform) or public
    bastion: Bastion | None = None  # TFCLUSTER_BASTION
    trust: SshTrust = field(default_factory=SshTrust)
    identity: str | None = None  # ANSIBLE_PRIVATE_KEY_FILE as given (checked when a bastion uses it)
    kind: str | None = None  # TFCLUSTER_KIND: the cluster kind the `tfcluster` command runs (a fact for the roles)
    kind_traits: Mapping[str, Any] = field(default_factory=dict)  # TFCLUSTER_KIND_TRAITS: what roles read of it


def _int_env(env: Mapping[str, str], key: str, default: int, bounds: tuple[int, int],
             problems: list[Problem]) -> int:
    low, high = bounds
    raw = env.get(key, "").strip()
    if not raw:
        return default
    if is_digits(raw) and low <= int(raw) <= high:
        return int(raw)
    problems.append(Problem(key, f"{raw!r} is not a whole number in {low}..{high}",
                            f"set {key} to a number in {low}..{high}, or unset it for {default}"))
    return default


def _choice_env(env: Mapping[str, str], key: str, choices: tuple[str, ...], what: str,
                problems: list[Problem]) -> str | None:
    raw = env.get(key, "").strip()
    if raw and raw not in choices:
        problems.append(Problem(key, f"unknown {what} {raw!r}", f"use one of {', '.join(choices)}"))
        return None
    return raw or None


def _ports(env: Mapping[str, str], source: str, strategy: str, workers: int,
           problems: list[Problem]) -> tuple[int, int]:
    base_port = _int_env(env, "TFCLUSTER_BASE_PORT", LOCAL_BASE_PORT, (1, 65535), problems)
    port = _int_env(env, "TFCLUSTER_PORT", TF_PORT, (1, 65535), problems)
    if source == "local":
        extra = 2 if strategy == "parameter_server" else 0
        last = base_port + workers + extra - 1
        if last > 65535:
            problems.append(Problem("TFCLUSTER_BASE_PORT", f"{workers + extra} local tasks from port {base_port} "
                                    f"would need port {last}", "lower TFCLUSTER_BASE_PORT or TFCLUSTER_WORKERS"))
    return base_port, port


def _reach(env: Mapping[str, str], source: str, problems: list[Problem]) -> tuple[str | None, Bastion | None]:
    """TFCLUSTER_CONNECT and TFCLUSTER_BASTION (aws and terraform sources only)."""
    connect = _choice_env(env, "TFCLUSTER_CONNECT", CONNECT_MODES, "connect mode", problems)
    raw_bastion = env.get("TFCLUSTER_BASTION", "").strip()
    bastion, found = parse_bastion_text("TFCLUSTER_BASTION", raw_bastion) if raw_bastion else (None, [])
    problems.extend(found)
    if source not in CLOUD_SOURCES:
        fix = ("unset it: a host file's hosts are reached at their `address` (add `bastion:` to the file for a jump "
               "host)" if source == "static" else "unset it: local slots need no SSH")
        problems.extend(Problem(key, f"applies to the {' and '.join(CLOUD_SOURCES)} sources, not {source}", fix)
                        for key in ("TFCLUSTER_CONNECT", "TFCLUSTER_BASTION") if env.get(key, "").strip())
        return None, None
    if source == "aws" and connect is None and not found:
        connect = "bastion" if bastion else "public"
    if bastion is not None and connect not in (None, "bastion"):
        problems.append(Problem("TFCLUSTER_BASTION", f"is set, but TFCLUSTER_CONNECT={connect} does not use it",
                                "set TFCLUSTER_CONNECT=bastion, or unset TFCLUSTER_BASTION"))
    if source == "aws" and connect == "bastion" and bastion is None and not found:
        problems.append(Problem("TFCLUSTER_CONNECT", "is bastion, but TFCLUSTER_BASTION is not set",
                                "export TFCLUSTER_BASTION=user@host[:port] (the jump host)"))
    return connect, bastion


def _trust(env: Mapping[str, str], problems: list[Problem]) -> SshTrust:
    """TFCLUSTER_KNOWN_HOSTS and TFCLUSTER_HOST_KEY_CHECKING."""
    checking = _choice_env(env, "TFCLUSTER_HOST_KEY_CHECKING", HOST_KEY_CHECKING, "host key checking", problems)
    raw = env.get("TFCLUSTER_KNOWN_HOSTS", "").strip()
    if not raw:
        return SshTrust(checking=checking)
    problem = path_problem("TFCLUSTER_KNOWN_HOSTS", raw)
    if problem:
        problems.append(problem)
        return SshTrust(checking=checking)
    return SshTrust(known_hosts=absolute(raw), checking=checking or "yes")


def _cluster(env: Mapping[str, str], source: str, problems: list[Problem]) -> str | None:
    cluster = env.get("TFCLUSTER_CLUSTER", "").strip() or None
    if cluster is not None:
        problems.extend(filter(None, [name_problem("cluster", cluster, "TFCLUSTER_CLUSTER")]))
    elif source == "aws":
        problems.append(Problem("TFCLUSTER_CLUSTER", "is not set, but TFCLUSTER_SOURCE=aws filters instances by "
                                f"the {TAG_KEYS['cluster']} tag", "export TFCLUSTER_CLUSTER=<cluster_name>"))
    return cluster


KIND_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
# The traits a kind hands the roles (tfcluster.kinds.base.Traits), each with its type and bounds.
KIND_TRAITS: dict[str, tuple[type, int, int]] = {"autostop": (bool, 0, 1), "firewall": (bool, 0, 1),
                                                 "boot_wait": (int, 1, 86_400)}


def _trait_problem(key: str, value: object) -> str | None:
    kind, low, high = KIND_TRAITS[key]
    if kind is bool:
        return None if isinstance(value, bool) else f"{key} must be true or false, got {value!r}"
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    return None if ok else f"{key} must be a whole number in {low}..{high}, got {value!r}"


def _kind(env: Mapping[str, str], problems: list[Problem]) -> tuple[str | None, dict[str, Any]]:
    """TFCLUSTER_KIND and TFCLUSTER_KIND_TRAITS (both set by the `tfcluster` command; absent: no kind facts)."""
    kind = env.get("TFCLUSTER_KIND", "").strip() or None
    if kind is not None and not KIND_NAME.fullmatch(kind):
        problems.append(Problem("TFCLUSTER_KIND", f"{kind[:40]!r} is not a cluster kind's name",
                                "let the `tfcluster` command set it (make train CLUSTER=...), or unset it"))
        kind = None
    raw = env.get("TFCLUSTER_KIND_TRAITS", "").strip()
    if not raw:
        return kind, {}
    fix = 'let the `tfcluster` command set it, e.g. {"autostop": false, "boot_wait": 60, "firewall": true}'
    try:
        traits = json.loads(raw)
    except ValueError:
        traits = None
    if not isinstance(traits, dict) or set(traits) - set(KIND_TRAITS):
        problems.append(Problem("TFCLUSTER_KIND_TRAITS", f"is not an object of {', '.join(KIND_TRAITS)}", fix))
        return kind, {}
    wrong = [why for key, value in sorted(traits.items()) if (why := _trait_problem(key, value))]
    problems.extend(Problem("TFCLUSTER_KIND_TRAITS", why, fix) for why in wrong)
    return kind, ({} if wrong else dict(traits))


def load_settings(env: Mapping[str, str]) -> Settings:
    """Settings from environment variables (see the inventory/slots.py docstring)."""
    problems: list[Problem] = []
    source = env.get("TFCLUSTER_SOURCE", "").strip() or "terraform"
    if source not in SOURCES:
        problems.append(Problem("TFCLUSTER_SOURCE", f"unknown source {source!r}", f"use one of {', '.join(SOURCES)}"))
    strategy = _choice_env(env, "TFCLUSTER_STRATEGY", STRATEGY_CHOICES, "strategy", problems) or "auto"
    workers = _int_env(env, "TFCLUSTER_WORKERS", DEFAULT_WORKERS, (1, 10_000), problems)
    base_port, port = _ports(env, source, strategy, workers, problems)
    tf_dir_raw = env.get("TFCLUSTER_TF_DIR", "").strip()
    hosts_raw = env.get("TFCLUSTER_HOSTS_FILE", "").strip()
    if source == "static" and not hosts_raw:
        problems.append(Problem("TFCLUSTER_HOSTS_FILE", "is not set, but TFCLUSTER_SOURCE=static needs a host file",
                                "export TFCLUSTER_HOSTS_FILE=path/to/hosts.yml (see inventory/onprem.example.yml)"))
    cluster = _cluster(env, source, problems)
    connect, bastion = _reach(env, source, problems)
    trust = _trust(env, problems)
    kind, kind_traits = _kind(env, problems)
    if problems:
        raise InventoryError(problems, "tfcluster inventory environment")
    return Settings(source=source, tf_dir=Path(tf_dir_raw) if tf_dir_raw else REPO_ROOT / DEFAULT_TF_DIR,
                    hosts_file=Path(hosts_raw) if hosts_raw else None, cluster=cluster, workers=workers,
                    strategy=strategy, base_port=base_port, port=port, connect=connect, bastion=bastion, trust=trust,
                    identity=env.get("ANSIBLE_PRIVATE_KEY_FILE", "").strip() or None, kind=kind,
                    kind_traits=kind_traits)
