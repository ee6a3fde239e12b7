"""Validated hosts -> the Ansible inventory dict (groups, group vars, ``_meta.hostvars``).

Cluster, strategy and task rules, and the TF_CONFIG of every host, come from ``tfcluster.contract`` — the same
module the trainer validates its environment with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inventory.model import SLOT_ORDER, Host, HostSpec, InventoryError, SourceResult
from inventory.validate import validate_hosts
from tfcluster.contract import (
    CLUSTER_TASK_TYPES,
    Problem,
    TFConfig,
    cluster_problems,
    resolve_strategy,
    strategy_problems,
    task_problems,
)

GROUPS: tuple[str, ...] = ("tfcluster", "chief", "worker", "ps", "evaluator")
# Strategies that run one host without TF_CONFIG (DESIGN.md: mirrored; tpu uses a TPU cluster resolver).
NO_TF_CONFIG_STRATEGIES: frozenset[str] = frozenset({"mirrored", "tpu"})
_CLUSTER_FIELD = re.compile(r"^cluster\.(chief|worker|ps)\[(\d+)\]")


@dataclass(frozen=True)
class Cluster:
    """A validated cluster: hosts in slot order, the TF cluster spec and the resolved strategy."""

    name: str
    strategy: str
    hosts: tuple[Host, ...]
    spec: Mapping[str, tuple[str, ...]]

    def tf_config(self, host: Host) -> TFConfig | None:
        """The host's TF_CONFIG, or None where the strategy runs without one."""
        if self.strategy in NO_TF_CONFIG_STRATEGIES:
            return None
        return TFConfig(cluster=self.spec, task_type=host.task_type, task_index=host.task_index)


def cluster_spec(hosts: Sequence[Host]) -> dict[str, tuple[str, ...]]:
    """TF ``cluster`` dict from hosts: chief/worker/ps by index; evaluators are left out (TF requires it)."""
    spec: dict[str, list[tuple[int, str]]] = {}
    for host in hosts:
        if host.task_type in CLUSTER_TASK_TYPES:
            spec.setdefault(host.task_type, []).append((host.task_index, host.endpoint))
    return {t: tuple(addr for _, addr in sorted(spec[t])) for t in CLUSTER_TASK_TYPES if t in spec}


def _name_tfconfig_problem(problem: Problem, spec: Mapping[str, Sequence[str]],
                           by_slot: Mapping[tuple[str, int], str]) -> Problem:
    """Prefix a tfconfig problem about ``cluster.worker[3]`` with the label of the host in that slot."""
    match = _CLUSTER_FIELD.match(problem.field)
    if match:
        label = by_slot.get((match.group(1), int(match.group(2))))
        if label:
            return Problem(f"{label} ({problem.field})", problem.message, problem.fix)
    return problem


def validate_cluster(found: SourceResult, strategy: str, name: str) -> Cluster:
    """Validate hosts, cluster and strategy together; raise InventoryError listing every problem."""
    specs = found.specs
    hosts, host_problems, labels = validate_hosts(specs, found.empty_fix)
    problems = [*found.problems, *host_problems]
    spec = cluster_spec(hosts)
    by_slot = {(h.task_type, h.task_index): labels[id(h)] for h in hosts}
    if specs:
        # Counting rules (PS without chief, mirrored with many hosts, ...) are checked even when some hosts are
        # broken; then they count every host whose task type is known, so a ps with a bad address still counts.
        counted = spec if not problems else _slot_counts(specs)
        problems.extend(strategy_problems(counted, strategy))
    if not problems:
        problems.extend(_name_tfconfig_problem(p, spec, by_slot) for p in cluster_problems(spec))
    if not problems:
        for host in hosts:
            problems.extend(Problem(f"{labels[id(host)]}.{p.field}", p.message, p.fix)
                            for p in task_problems(spec, host.task_type, host.task_index))
    if problems:
        raise InventoryError(_unique(problems))
    ordered = tuple(sorted(hosts, key=lambda h: h.slot))
    return Cluster(name=name, strategy=resolve_strategy(spec, strategy), hosts=ordered, spec=spec)


def _slot_counts(specs: Sequence[HostSpec]) -> dict[str, tuple[str, ...]]:
    """A stand-in cluster with one placeholder per host of each cluster task type (for counting rules only)."""
    counts: dict[str, int] = {}
    for s in specs:
        if isinstance(s.task_type, str) and s.task_type in CLUSTER_TASK_TYPES:
            counts[s.task_type] = counts.get(s.task_type, 0) + 1
    return {t: ("?",) * n for t, n in counts.items()}


def _unique(problems: Sequence[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def _tf_config_json(spec_json: str, host: Host) -> str:
    """Byte-identical to ``TFConfig(spec, type, index).to_json()`` without re-serialising the spec per host."""
    task = json.dumps({"type": host.task_type, "index": host.task_index}, sort_keys=True, separators=(",", ":"))
    return f'{{"cluster":{spec_json},"task":{task}}}'


def tf_config_strings(cluster: Cluster) -> dict[str, str]:
    """Each host's TF_CONFIG JSON ('' where the strategy runs without TF_CONFIG), by host name."""
    if cluster.strategy in NO_TF_CONFIG_STRATEGIES:
        return {h.name: "" for h in cluster.hosts}
    spec_json = json.dumps(TFConfig(cluster=cluster.spec).to_dict()["cluster"], sort_keys=True,
                           separators=(",", ":"))
    return {h.name: _tf_config_json(spec_json, h) for h in cluster.hosts}


def host_vars(host: Host, tf_config: str | None) -> dict[str, Any]:
    """The host vars of the contract (docs/ARCHITECTURE.md). ``tf_config`` None leaves tfcluster_tf_config out."""
    out: dict[str, Any] = {
        "ansible_host": host.address,
        "ansible_connection": host.connection,
        "tfcluster_task_type": host.task_type,
        "tfcluster_task_index": host.task_index,
        "tfcluster_port": host.port,
        "tfcluster_address": host.endpoint,
        "tfcluster_gpus": host.gpus,
    }
    if tf_config is not None:
        out["tfcluster_tf_config"] = tf_config
    if host.ssh_user is not None:
        out["ansible_user"] = host.ssh_user
    if host.ssh_port is not None:
        out["ansible_port"] = host.ssh_port
    return out


def build_inventory(cluster: Cluster, embed_tf_config: bool = True) -> dict[str, Any]:
    """The ``--list`` document. Host lists are in slot order; ``_meta.hostvars`` is always present.

    ``tfcluster`` holds every host through its children chief, ps, worker and evaluator (always present, maybe
    empty), and carries the cluster-wide group vars.

    ``embed_tf_config=False`` leaves out ``tfcluster_tf_config`` (its size grows with hosts squared; used by the
    benchmark to time everything else).
    """
    tf_configs = tf_config_strings(cluster) if embed_tf_config else {}
    inventory: dict[str, Any] = {
        "_meta": {"hostvars": {h.name: host_vars(h, tf_configs.get(h.name)) for h in cluster.hosts}},
        "tfcluster": {
            "children": list(SLOT_ORDER),
            "vars": {
                "tfcluster_cluster_spec": {t: list(a) for t, a in cluster.spec.items()},
                "tfcluster_strategy": cluster.strategy,
                "tfcluster_cluster_name": cluster.name,
            },
        },
    }
    for task_type in SLOT_ORDER:
        inventory[task_type] = {"hosts": [h.name for h in cluster.hosts if h.task_type == task_type]}
    return inventory


def dumps(document: Mapping[str, Any]) -> str:
    """Deterministic JSON (sorted keys) as the CLI prints it."""
    return json.dumps(document, sort_keys=True, indent=2)
