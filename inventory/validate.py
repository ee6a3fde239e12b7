"""Host-level validation: turns HostSpecs into Hosts or collects every problem with them.

Cluster, strategy and task rules are not repeated here: they come from ``tfcluster.contract`` (see ``build.py``).
This layer covers what only the inventory knows: slots, addresses, ports, names, and which host is which.
"""

from __future__ import annotations

import ipaddress
import re
from collections import defaultdict
from collections.abc import Sequence

from inventory.model import CONNECTIONS, Host, HostSpec, is_int
from tfcluster.contract import TASK_TYPES, Problem

_HOSTNAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?$")


def _nonempty_str(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip()) and not any(c.isspace() for c in value)


def _is_address(value: object) -> bool:
    """An IPv4/IPv6 address or a DNS name (no port, no spaces)."""
    if not isinstance(value, str):
        return False
    if ":" in value:
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            return False
        return True
    return bool(_HOSTNAME.match(value))


def _address_problem(label: str, field: str, value: object, fix: str) -> Problem | None:
    if _is_address(value):
        return None
    if value in (None, ""):
        return Problem(f"{label}.{field}", f"{field} is missing", fix)
    if isinstance(value, str) and ":" in value and not value.startswith("["):
        return Problem(f"{label}.{field}", f"{field} {value!r} holds a ':' but is not an IPv6 address",
                       "give the port in `port`, and only the IP or DNS name as the address")
    return Problem(f"{label}.{field}", f"{field} {value!r} is not an IP address or DNS name", fix)


def _port_problem(label: str, field: str, value: object, fix: str) -> Problem | None:
    if is_int(value) and 1 <= value <= 65535:  # type: ignore[operator]
        return None
    return Problem(f"{label}.{field}", f"{field} {value!r} is not a whole number in 1..65535", fix)


def spec_problems(spec: HostSpec) -> list[Problem]:
    """Problems of one host taken alone."""
    label = spec.label
    problems: list[Problem] = []
    if spec.task_type not in TASK_TYPES:
        what = "is missing" if spec.task_type in (None, "") else f"{spec.task_type!r} is not a task type"
        problems.append(Problem(f"{label}.task_type", f"task_type {what}",
                                f"use one of {', '.join(TASK_TYPES)}"))
    if not (is_int(spec.task_index) and spec.task_index >= 0):  # type: ignore[operator]
        what = "is missing" if spec.task_index is None else f"{spec.task_index!r} is not a whole number >= 0"
        problems.append(Problem(f"{label}.task_index", f"task_index {what}",
                                "give the host's index within its task type, counting from 0"))
    for field, value, fix in (
            ("address", spec.address, "give the host an address (IP or DNS name) that Ansible can reach"),
            ("tf_address", spec.tf_address, "give the address peers use for training, or leave it out to use "
             "address")):
        if field == "tf_address" and value is None:
            continue
        found = _address_problem(label, field, value, fix)
        if found:
            problems.append(found)
    port = _port_problem(label, "port", spec.port, "give the training port, a whole number in 1..65535")
    if port:
        problems.append(port)
    if spec.ssh_port is not None:
        ssh = _port_problem(label, "ssh_port", spec.ssh_port, "give the SSH port in 1..65535 or leave it out")
        if ssh:
            problems.append(ssh)
    if not (is_int(spec.gpus) and spec.gpus >= 0):  # type: ignore[operator]
        problems.append(Problem(f"{label}.gpus", f"gpus {spec.gpus!r} is not a whole number >= 0",
                                "give the host's GPU count (0 for none)"))
    if spec.connection not in CONNECTIONS:
        problems.append(Problem(f"{label}.connection", f"connection {spec.connection!r} is not supported",
                                f"use one of {', '.join(CONNECTIONS)}"))
    if spec.ssh_user is not None and not _nonempty_str(spec.ssh_user):
        problems.append(Problem(f"{label}.ssh_user", f"ssh_user {spec.ssh_user!r} is not a user name",
                                "give a user name or leave ssh_user out"))
    if spec.name is not None and not _nonempty_str(spec.name):
        problems.append(Problem(f"{label}.name", f"name {spec.name!r} is not a valid inventory host name",
                                "give a name without spaces, or leave it out to use TYPE-INDEX"))
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
    )


def cross_host_problems(hosts: Sequence[Host], labels: dict[int, str]) -> list[Problem]:
    """Duplicate slots, index gaps, address:port clashes and duplicate names across valid hosts.

    ``labels`` maps ``id(host)`` to the label used in messages.
    """
    problems: list[Problem] = []
    by_slot: dict[tuple[str, int], Host] = {}
    by_endpoint: dict[str, Host] = {}
    by_name: dict[str, Host] = {}
    indices: dict[str, dict[int, Host]] = defaultdict(dict)
    for host in hosts:
        label = labels[id(host)]
        slot = (host.task_type, host.task_index)
        if slot in by_slot:
            problems.append(Problem(
                f"{label}.task_index",
                f"slot {host.task_type} {host.task_index} is also taken by {labels[id(by_slot[slot])]}",
                f"give each {host.task_type} host its own task_index (0, 1, 2, ...)"))
        else:
            by_slot[slot] = host
            indices[host.task_type][host.task_index] = host
        if host.endpoint in by_endpoint:
            problems.append(Problem(
                f"{label}.port",
                f"address {host.endpoint} is also used by {labels[id(by_endpoint[host.endpoint])]}",
                "give hosts that share an address different training ports"))
        else:
            by_endpoint[host.endpoint] = host
        derived_clash = slot in by_slot and by_slot[slot] is not host and host.name == f"{slot[0]}-{slot[1]}"
        if host.name in by_name and not derived_clash:
            problems.append(Problem(f"{label}.name", f"host name {host.name!r} is also used by "
                                    f"{labels[id(by_name[host.name])]}", "give every host a unique name"))
        elif host.name not in by_name:
            by_name[host.name] = host
    for task_type in TASK_TYPES:
        taken = indices.get(task_type)
        if not taken:
            continue
        missing = sorted(set(range(max(taken) + 1)) - set(taken))
        if missing:
            after = [labels[id(taken[i])] for i in sorted(taken) if i > missing[0]]
            problems.append(Problem(
                f"{after[0]}.task_index",
                f"{task_type} indices must run from 0 without gaps; missing {', '.join(map(str, missing))} "
                f"(hosts after the gap: {', '.join(after)})",
                f"renumber the {task_type} hosts 0..{len(taken) - 1} or add the missing "
                f"{task_type} {', '.join(map(str, missing))}"))
    return problems


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
        hosts.append(host)
        labels[id(host)] = spec.label
    problems.extend(cross_host_problems(hosts, labels))
    return hosts, problems, labels
