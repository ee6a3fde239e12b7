"""Validated hosts -> the Ansible inventory dict (groups, group vars, ``_meta.hostvars``).

Cluster, strategy and task rules, the chief rule and the TF_CONFIG of a host come from ``tfcluster.core.contract`` — the
same module the trainer validates its environment with.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfcluster.core import sshkeys
from tfcluster.core.contract import (
    ANSIBLE_UNSAFE,
    CLUSTER_TASK_TYPES,
    INVENTORY_GROUP,
    NO_TF_CONFIG_STRATEGIES,
    SLOT_ORDER,
    Problem,
    chief_of,
    cluster_problems,
    resolve_strategy,
    strategy_problems,
    task_problems,
    tf_config_json,
    unsafe,
)
from tfcluster.inventory.access import NO_TRUST, SshTrust, ssh_args
from tfcluster.inventory.model import DIRECT, Access, Host, HostSpec, InventoryError, SourceResult
from tfcluster.inventory.validate import validate_hosts

_CLUSTER_FIELD = re.compile(rf"^cluster\.({'|'.join(CLUSTER_TASK_TYPES)})\[(\d+)\]")


@dataclass(frozen=True)
class Cluster:
    """A validated cluster: hosts in slot order, the TF cluster spec, the resolved strategy, how hosts are reached."""

    name: str
    strategy: str
    hosts: tuple[Host, ...]
    spec: Mapping[str, tuple[str, ...]]
    access: Access = DIRECT
    trust: SshTrust = NO_TRUST
    kind: str | None = None  # the cluster kind, and the traits its roles read (tfcluster.kinds), when given
    kind_traits: Mapping[str, Any] = field(default_factory=dict)

    def tf_config(self, host: Host) -> str:
        """The host's TF_CONFIG JSON; '' where the strategy runs without one (mirrored, tpu)."""
        if self.strategy in NO_TF_CONFIG_STRATEGIES:
            return ""
        return tf_config_json(self.spec, host.task_type, host.task_index)

    @property
    def chief(self) -> Host:
        """The host that writes the artifacts (contract.chief_of: the chief, else worker 0)."""
        slot = chief_of(self.spec)
        return next(h for h in self.hosts if (h.task_type, h.task_index) == slot)

    @property
    def all_gpus(self) -> bool:
        """Every host in the cluster spec (the evaluator is not in the collective) declares GPUs: NCCL is usable."""
        return all(h.gpus > 0 for h in self.hosts if h.task_type in CLUSTER_TASK_TYPES)

    def ssh_args(self) -> list[str]:
        """The options Ansible's ssh gets (known hosts, the jump); none when no host is reached over SSH."""
        if not any(h.connection == "ssh" for h in self.hosts):
            return []
        return ssh_args(self.access, self.trust)


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


def validate_cluster(found: SourceResult, strategy: str, name: str, trust: SshTrust = NO_TRUST) -> Cluster:
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
    return Cluster(name=name, strategy=resolve_strategy(spec, strategy), hosts=ordered, spec=spec,
                   access=found.access, trust=trust)


def _slot_counts(specs: Sequence[HostSpec]) -> dict[str, tuple[str, ...]]:
    """A stand-in cluster with one placeholder per host of each cluster task type (for counting rules only)."""
    counts: dict[str, int] = {}
    for s in specs:
        if isinstance(s.task_type, str) and s.task_type in CLUSTER_TASK_TYPES:
            counts[s.task_type] = counts.get(s.task_type, 0) + 1
    return {t: ("?",) * n for t, n in counts.items()}


def _unique(problems: Sequence[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def _unsafe_flat(values: dict[str, Any]) -> dict[str, Any]:
    """``unsafe()`` for a dict of scalars (host vars): the same marks, four times faster at 10,000 hosts."""
    return {k: {ANSIBLE_UNSAFE: v} if type(v) is str else v for k, v in values.items()}


def unmarked(value: Any) -> Any:
    """What Ansible sees: ``value`` with the unsafe marks of ``unsafe()`` taken off."""
    if isinstance(value, Mapping):
        if set(value) == {ANSIBLE_UNSAFE}:
            return value[ANSIBLE_UNSAFE]
        return {k: unmarked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def host_vars(host: Host) -> dict[str, Any]:
    """The host vars of the contract (docs/inventory.md), unmarked."""
    out: dict[str, Any] = {
        "ansible_host": host.address,
        "ansible_connection": host.connection,
        "tfcluster_task_type": host.task_type,
        "tfcluster_task_index": host.task_index,
        "tfcluster_port": host.port,
        "tfcluster_address": host.endpoint,
        "tfcluster_gpus": host.gpus,
    }
    if host.ssh_user is not None:
        out["ansible_user"] = host.ssh_user
    if host.ssh_port is not None:
        out["ansible_port"] = host.ssh_port
    if host.instance_type is not None:
        out["tfcluster_instance_type"] = host.instance_type
    return out


def group_vars(cluster: Cluster) -> dict[str, Any]:
    """The vars of the group ``tfcluster`` (every host), unmarked."""
    out: dict[str, Any] = {
        "tfcluster_cluster_spec": {t: list(a) for t, a in cluster.spec.items()},
        "tfcluster_strategy": cluster.strategy,
        "tfcluster_cluster_name": cluster.name,
        "tfcluster_chief": cluster.chief.name,
        "tfcluster_all_gpus": cluster.all_gpus,
    }
    if cluster.kind is not None:  # a fact, decided once by the kind: roles test its traits, never its name
        out["tfcluster_kind"] = cluster.kind
    if cluster.kind_traits:
        out["tfcluster_kind_traits"] = dict(cluster.kind_traits)
    args = cluster.ssh_args()
    if args:
        out["ansible_ssh_common_args"] = shlex.join(args)
    if cluster.trust.checking is not None and args:
        out["ansible_host_key_checking"] = True  # also when ansible.cfg or the environment turned checking off
    return out


def build_inventory(cluster: Cluster) -> dict[str, Any]:
    """The ``--list`` document. Host lists are in slot order; ``_meta.hostvars`` is always present.

    ``tfcluster`` holds every host through its children chief, ps, worker and evaluator (always present, maybe
    empty), and carries the cluster-wide group vars. Every string variable is marked unsafe. A host's TF_CONFIG is
    not here: the role builds it from ``tfcluster_cluster_spec`` and the host's slot, so the size grows linearly.
    """
    inventory: dict[str, Any] = {
        "_meta": {"hostvars": {h.name: _unsafe_flat(host_vars(h)) for h in cluster.hosts}},
        INVENTORY_GROUP: {"children": list(SLOT_ORDER), "vars": unsafe(group_vars(cluster))},
    }
    for task_type in SLOT_ORDER:
        inventory[task_type] = {"hosts": [h.name for h in cluster.hosts if h.task_type == task_type]}
    return inventory


def dumps(document: Mapping[str, Any], compact: bool = False) -> str:
    """Deterministic JSON (sorted keys) as the CLI prints it: indented for a person, or compact (``--list``, read by
    Ansible: at 10,000 hosts a third smaller and five times faster to write)."""
    if compact:
        return json.dumps(document, sort_keys=True, separators=(",", ":"))
    return json.dumps(document, sort_keys=True, indent=2)


def render_known_hosts(cluster: Cluster) -> str:
    """known_hosts text for every host (and the bastion) that lists keys; '' when none does."""
    entries = [(h.address, h.ssh_port, h.host_keys) for h in cluster.hosts]
    bastion = cluster.access.bastion
    if bastion is not None:
        entries.insert(0, (bastion.address, bastion.port, bastion.host_keys))
    try:
        found = sshkeys.lines(entries)
    except sshkeys.KnownHostsLineError as exc:  # hosts were validated: only a bug gets here, and it prints nothing
        raise InventoryError([exc.problem]) from exc
    return "".join(f"{line}\n" for line in found)
