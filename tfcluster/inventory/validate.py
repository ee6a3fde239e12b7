"""Host-level validation: turns HostSpecs into Hosts or collects every problem with them.

Cluster, strategy and task rules are not repeated here: they come from ``tfcluster.core.contract`` (see ``build.py``).
This layer covers what only the inventory knows: slots, addresses, ports, names, keys, and which host is which.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import islice

from tfcluster.core.addresses import address_problem, is_int, port_problem
from tfcluster.core.contract import TASK_TYPES, Problem, name_problem
from tfcluster.core.sshkeys import parse_host_keys
from tfcluster.inventory.fields import count_problem, optional_name_problem
from tfcluster.inventory.model import CONNECTIONS, Host, HostSpec

INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9]+")


def _task_type(label: str, spec: HostSpec) -> Problem | None:
    if spec.task_type in TASK_TYPES:
        return None
    what = "is missing" if spec.task_type in (None, "") else f"{spec.task_type!r} is not a task type"
    return Problem(f"{label}.task_type", f"task_type {what}", f"use one of {', '.join(TASK_TYPES)}")


def _task_index(label: str, spec: HostSpec) -> Problem | None:
    if is_int(spec.task_index) and spec.task_index >= 0:  # type: ignore[operator]
        return None
    what = "is missing" if spec.task_index is None else f"{spec.task_index!r} is not a whole number >= 0"
    return Problem(f"{label}.task_index", f"task_index {what}",
                   "give the host's index within its task type, counting from 0")


def _address(label: str, spec: HostSpec) -> Problem | None:
    field = spec.address_field
    return address_problem(f"{label}.{field}", spec.address, spec.address_fix, what=field)


def _tf_address(label: str, spec: HostSpec) -> Problem | None:
    if spec.tf_address is None:
        return None
    field = spec.tf_address_field
    fix = ("give the address peers use for training, or leave it out to use address" if field == "tf_address" else
           f"give the instance a {field} that is an IP address (peers train over it)")
    return address_problem(f"{label}.{field}", spec.tf_address, fix, field)


def _connection(label: str, spec: HostSpec) -> Problem | None:
    if spec.connection in CONNECTIONS:
        return None
    return Problem(f"{label}.connection", f"connection {spec.connection!r} is not supported",
                   f"use one of {', '.join(CONNECTIONS)}")


CHECKS: tuple[Callable[[str, HostSpec], Problem | None], ...] = (
    _task_type,
    _task_index,
    _address,
    _tf_address,
    lambda label, s: port_problem(f"{label}.port", s.port, "give the training port, a whole number in 1..65535"),
    lambda label, s: None if s.ssh_port is None else port_problem(
        f"{label}.ssh_port", s.ssh_port, "give the SSH port in 1..65535 or leave it out", "ssh_port"),
    lambda label, s: count_problem(f"{label}.gpus", s.gpus, "give the host's GPU count (0 for none)", "gpus"),
    _connection,
    lambda label, s: optional_name_problem("ssh_user", f"{label}.ssh_user", s.ssh_user),
    lambda label, s: optional_name_problem("host", f"{label}.name", s.name),
    lambda label, s: None if s.instance_type is None or (isinstance(s.instance_type, str) and INSTANCE_TYPE.fullmatch(
        s.instance_type)) else Problem(f"{label}.instance_type", f"{s.instance_type!r} is not an EC2 instance type",
                                       "give a type like g5.xlarge, or leave it out"),
)


def spec_problems(spec: HostSpec) -> list[Problem]:
    """Problems of one host taken alone."""
    problems = [p for check in CHECKS if (p := check(spec.label, spec))]
    problems += parse_host_keys(f"{spec.label}.host_keys", spec.host_keys)[1]
    return problems


def _to_host(spec: HostSpec) -> Host:
    task_type = str(spec.task_type)
    index = int(spec.task_index)  # type: ignore[call-overload]
    return Host(
        name=str(spec.name) if spec.name is not None else f"{task_type}-{index}",
        task_type=task_type,
        task_index=index,
        address=str(spec.address),
        tf_address=str(spec.tf_address if spec.tf_address is not None else spec.address),
        port=int(spec.port),  # type: ignore[call-overload]
        gpus=int(spec.gpus),  # type: ignore[call-overload]
        connection=str(spec.connection),
        ssh_user=str(spec.ssh_user) if spec.ssh_user is not None else None,
        ssh_port=int(spec.ssh_port) if spec.ssh_port is not None else None,  # type: ignore[call-overload]
        host_keys=parse_host_keys("", spec.host_keys)[0],
        instance_type=str(spec.instance_type) if spec.instance_type is not None else None,
    )


class _Seen:
    """What the hosts checked so far hold: slots, TF endpoints and names, each with the first host holding it."""

    def __init__(self, labels: dict[int, str]) -> None:
        self.labels = labels
        self.slots: dict[tuple[str, int], Host] = {}
        self.endpoints: dict[str, Host] = {}
        self.names: dict[str, Host] = {}
        self.indices: dict[str, dict[int, Host]] = defaultdict(dict)

    def add(self, host: Host) -> list[Problem]:
        """Record the host; the problems of a slot, endpoint or name that an earlier host already holds."""
        label, problems = self.labels[id(host)], []
        slot = (host.task_type, host.task_index)
        taken = self.slots.setdefault(slot, host)
        if taken is not host:
            problems.append(Problem(f"{label}.task_index", f"slot {slot[0]} {slot[1]} is also taken by "
                                    f"{self.labels[id(taken)]}", f"give each {slot[0]} host its own task_index "
                                    "(0, 1, 2, ...)"))
        else:
            self.indices[host.task_type][host.task_index] = host
        used = self.endpoints.setdefault(host.endpoint, host)
        if used is not host:
            problems.append(Problem(f"{label}.port", f"address {host.endpoint} is also used by "
                                    f"{self.labels[id(used)]}", "give hosts that share an address different "
                                    "training ports"))
        named = self.names.setdefault(host.name, host)
        derived_clash = taken is not host and host.name == f"{slot[0]}-{slot[1]}"  # reported as the slot already
        if named is not host and not derived_clash:
            problems.append(Problem(f"{label}.name", f"host name {host.name!r} is also used by "
                                    f"{self.labels[id(named)]}", "give every host a unique name"))
        return problems

    def gap_problems(self) -> list[Problem]:
        """Index gaps of each task type, named at the first host after the gap."""
        problems: list[Problem] = []
        for task_type in TASK_TYPES:
            taken = self.indices.get(task_type)
            if not taken or max(taken) < len(taken):  # indices 0..n-1, each once: no gap
                continue
            missing = list(islice((i for i in range(max(taken)) if i not in taken), 10))  # the first ones, never all
            total = max(taken) + 1 - len(taken)
            gaps = ", ".join(map(str, missing)) + (f", ... ({total} in all)" if total > len(missing) else "")
            after = [self.labels[id(taken[i])] for i in sorted(taken) if i > missing[0]]
            problems.append(Problem(
                f"{after[0]}.task_index",
                f"{task_type} indices must run from 0 without gaps; missing {gaps} (hosts after the gap: "
                f"{', '.join(after)})",
                f"renumber the {task_type} hosts 0..{len(taken) - 1} or add the missing {task_type} {gaps}"))
        return problems


def cross_host_problems(hosts: Sequence[Host], labels: dict[int, str]) -> list[Problem]:
    """Duplicate slots, index gaps, address:port clashes and duplicate names across valid hosts.

    ``labels`` maps ``id(host)`` to the label used in messages.
    """
    seen = _Seen(labels)
    problems = [p for host in hosts for p in seen.add(host)]
    return problems + seen.gap_problems()


def validate_hosts(specs: Sequence[HostSpec], empty_fix: str) -> tuple[list[Host], list[Problem], dict[int, str]]:
    """Validate every host; returns (valid hosts, problems, labels by id(host)).

    ``empty_fix`` is the source-specific advice when there are no hosts at all.
    """
    if not specs:
        return [], [Problem("hosts", "no hosts found", empty_fix)], {}
    problems: list[Problem] = []
    hosts: list[Host] = []
    labels: dict[int, str] = {}
    for spec in specs:
        found = spec_problems(spec)
        if found:
            problems.extend(found)
            continue
        host = _to_host(spec)
        derived = name_problem("host", host.name, f"{spec.label}.name")  # TYPE-INDEX with an absurd index
        if derived:
            problems.append(Problem(derived.field, f"{derived.message} (derived from task_type and task_index)",
                                    f"give the host a name, or an index that fits: {derived.fix}"))
            continue
        hosts.append(host)
        labels[id(host)] = spec.label
    problems.extend(cross_host_problems(hosts, labels))
    return hosts, problems, labels
