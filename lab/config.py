"""Pure parts of the lab: names, slots, addresses and the text of every file the lab writes.

Nothing here touches the machine; `lab.lab` does that with these values.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from tfcluster.contract import TASK_TYPES

DEFAULT_LAB = "tfclab"
DEFAULT_PORT = 12345  # training port; every lab host has its own address, so all use the same port
SSH_USER = "root"
SSH_PORT = 22
CONTROL_NAME = "lab-control"  # the outer machine, as the hosts see it (the bridge's address)
HOST_OFFSET = 10  # hosts get .11, .12, ... ; the bridge (control machine) gets .1
# Private /24s tried in order; the first that overlaps nothing on this machine is used.
SUBNET_CANDIDATES: tuple[str, ...] = tuple(f"10.247.{n}.0/24" for n in range(61, 121))

# nspawn names the outer end of a host's veth "vb-" + machine name and interface names have at most 15
# characters, so host names stay within 12. The bridge is "br-" + lab name, same limit.
_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,11}$")


class LabError(RuntimeError):
    """The lab cannot do what was asked; the message says what to do instead."""


@dataclass(frozen=True)
class LabHost:
    """One lab host: its slot, its address on the lab bridge and its training port."""

    name: str
    address: str
    task_type: str
    index: int
    port: int = DEFAULT_PORT
    gpus: int = 0

    @property
    def veth(self) -> str:
        """The outer end of the host's link (created by systemd-nspawn --network-bridge)."""
        return f"vb-{self.name}"


@dataclass(frozen=True)
class LabSpec:
    """Everything that describes a lab before it boots."""

    name: str
    subnet: str
    hosts: tuple[LabHost, ...]
    bind_ro: tuple[str, ...] = field(default=())

    @property
    def bridge(self) -> str:
        return bridge_name(self.name)

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    @property
    def control_address(self) -> str:
        return str(self.network.network_address + 1)

    def host(self, name: str) -> LabHost:
        for host in self.hosts:
            if host.name == name:
                return host
        known = ", ".join(h.name for h in self.hosts)
        raise LabError(f"lab {self.name!r} has no host {name!r}; its hosts are: {known}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LabSpec:
        raw = json.loads(text)
        hosts = tuple(LabHost(**h) for h in raw["hosts"])
        return cls(name=raw["name"], subnet=raw["subnet"], hosts=hosts, bind_ro=tuple(raw.get("bind_ro", ())))


def check_name(name: str, what: str = "host name") -> str:
    """Return ``name`` if it can name a host or lab (interface names are at most 15 characters)."""
    if not _NAME_RE.match(name):
        raise LabError(f"{what} {name!r} is not valid: use 1-12 characters a-z, 0-9 and '-', starting with a letter "
                       "(it becomes part of a 15-character network interface name)")
    return name


def bridge_name(lab: str) -> str:
    return f"br-{check_name(lab, 'lab name')}"


def parse_slots(text: str) -> tuple[str, ...]:
    """``"chief,worker,worker"`` -> ``("chief", "worker", "worker")``; task types are checked."""
    slots = tuple(part.strip() for part in text.split(",") if part.strip())
    if not slots:
        raise LabError(f"--slots {text!r} names no host; give task types, e.g. chief,worker,worker")
    return check_slots(slots)


def check_slots(slots: Sequence[str]) -> tuple[str, ...]:
    unknown = sorted({s for s in slots if s not in TASK_TYPES})
    if unknown:
        raise LabError(f"unknown task type(s) {', '.join(unknown)}; use {', '.join(TASK_TYPES)}")
    if not slots:
        raise LabError("a lab needs at least one host")
    return tuple(slots)


def default_slots(count: int) -> tuple[str, ...]:
    """A chief and ``count - 1`` workers: valid for MultiWorkerMirrored and the usual first layout."""
    if count < 1:
        raise LabError(f"--hosts {count}: a lab needs at least one host")
    return ("chief",) + ("worker",) * (count - 1)


def slot_names(slots: Sequence[str]) -> list[tuple[str, str, int]]:
    """``(name, task_type, index)`` per slot, indices counted per task type from 0: ``worker-0``, ``worker-1``."""
    seen: dict[str, int] = {}
    out = []
    for task_type in slots:
        index = seen.get(task_type, 0)
        seen[task_type] = index + 1
        out.append((f"{task_type}-{index}", task_type, index))
    return out


def pick_subnet(used: Iterable[str], candidates: Sequence[str] = SUBNET_CANDIDATES) -> str:
    """The first candidate network that overlaps none of ``used`` (addresses or networks in CIDR form)."""
    taken = [ipaddress.ip_network(u, strict=False) for u in used]
    for cand in candidates:
        net = ipaddress.IPv4Network(cand)
        if not any(net.overlaps(t) for t in taken if t.version == 4):
            return cand
    raise LabError("every candidate lab subnet overlaps a network on this machine; pass --subnet with a free /24")


def check_subnet(subnet: str, count: int, used: Iterable[str] = ()) -> str:
    try:
        net = ipaddress.IPv4Network(subnet)
    except ValueError as exc:
        raise LabError(f"--subnet {subnet!r} is not an IPv4 network in CIDR form, e.g. 10.247.61.0/24 ({exc})") \
            from None
    if not net.is_private:
        raise LabError(f"--subnet {subnet} is not a private network; use one from 10.0.0.0/8 or 172.16.0.0/12")
    if net.num_addresses - 2 < HOST_OFFSET + count:
        raise LabError(f"--subnet {subnet} is too small for {count} hosts; use a /24")
    for u in used:
        other = ipaddress.ip_network(u, strict=False)
        if other.version == 4 and net.overlaps(other):
            raise LabError(f"--subnet {subnet} overlaps {u}, already on this machine; pick another or leave it out")
    return str(net)


def make_spec(name: str, slots: Sequence[str], subnet: str, *, port: int = DEFAULT_PORT,
              names: Sequence[str] | None = None, bind_ro: Sequence[str] = ()) -> LabSpec:
    """The lab's hosts: slot names (or ``names``), addresses .11, .12, ... in ``subnet``."""
    check_name(name, "lab name")
    slots = check_slots(slots)
    subnet = check_subnet(subnet, len(slots))
    if not 1 <= port <= 65535:
        raise LabError(f"--port {port} is not a TCP port (1..65535)")
    per_slot = slot_names(slots)
    if names is None:
        names = [n for n, _, _ in per_slot]
    if len(names) != len(slots):
        raise LabError(f"{len(names)} host names for {len(slots)} slots; give one name per slot")
    if len(set(names)) != len(names):
        raise LabError(f"host names repeat: {', '.join(names)}; give each host its own name")
    base = ipaddress.IPv4Network(subnet).network_address + HOST_OFFSET + 1
    hosts = tuple(
        LabHost(name=check_name(host_name), address=str(base + i), task_type=task_type, index=index, port=port)
        for i, (host_name, (_, task_type, index)) in enumerate(zip(names, per_slot, strict=True))
    )
    for path in bind_ro:
        if not path.startswith("/"):
            raise LabError(f"--bind-ro {path!r} must be an absolute path")
    return LabSpec(name=name, subnet=subnet, hosts=hosts, bind_ro=tuple(bind_ro))


# ---- files written into each host ---------------------------------------------------------------------------

def render_etc_hosts(spec: LabSpec) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             f"{spec.control_address}\t{CONTROL_NAME}"]
    lines += [f"{h.address}\t{h.name}" for h in spec.hosts]
    return "\n".join(lines) + "\n"


def render_network(host: LabHost, spec: LabSpec) -> str:
    """systemd-networkd file for host0 (the container end of the veth): a static address that survives a cut.

    No gateway: the lab is air-gapped, anything off the bridge fails at once with "Network is unreachable".
    """
    return (
        "# Written by lab: a static address on the lab bridge.\n"
        "[Match]\nName=host0\n\n"
        "[Link]\nRequiredForOnline=yes\n\n"
        "[Network]\n"
        f"Address={host.address}/{spec.network.prefixlen}\n"
        "LinkLocalAddressing=no\nIPv6AcceptRA=no\n"
        "ConfigureWithoutCarrier=yes\nIgnoreCarrierLoss=yes\n"
    )


SSHD_CONFIG = (
    "# Written by lab.\n"
    "HostKey /etc/ssh/ssh_host_ed25519_key\n"
    "PermitRootLogin prohibit-password\n"
    "PasswordAuthentication no\n"
    "KbdInteractiveAuthentication no\n"
    "UseDNS no\n"
    "MaxStartups 64:30:128\n"
    "MaxSessions 64\n"
)


# ---- files written for the control machine -------------------------------------------------------------------

def render_hosts_file(spec: LabSpec, private_key: str) -> str:
    """The on-prem host file for the inventory's static source (TFCLUSTER_SOURCE=static, TFCLUSTER_HOSTS_FILE).

    Format of inventory/onprem.example.yml. The static source accepts no key path, so Ansible gets the private key
    from ANSIBLE_PRIVATE_KEY_FILE (``Lab.inventory_env()``); the comment names it for a reader.
    Hand-written YAML (every value is a checked name, address or number) so the tool needs no PyYAML.
    """
    lines = [
        f"# On-prem host file written by lab for lab {spec.name!r}; `python -m lab down` removes it.",
        f"# SSH key: ANSIBLE_PRIVATE_KEY_FILE={private_key}  (`python -m lab env --name {spec.name}`)",
        f"cluster_name: {spec.name}",
        "hosts:",
    ]
    for h in spec.hosts:
        lines += [
            f"  - name: {h.name}",
            f"    address: {h.address}",
            f"    ssh_user: {SSH_USER}",
            f"    ssh_port: {SSH_PORT}",
            f"    task_type: {h.task_type}",
            f"    task_index: {h.index}",
            f"    port: {h.port}",
            f"    gpus: {h.gpus}",
        ]
    return "\n".join(lines) + "\n"


def render_ssh_config(spec: LabSpec, private_key: str, known_hosts: str) -> str:
    """``ssh -F FILE HOST`` reaches a lab host by name with strict host key checking against our known_hosts."""
    blocks = [f"# ssh config written by lab for lab {spec.name!r}"]
    for h in spec.hosts:
        blocks.append(
            f"Host {h.name} {h.address}\n"
            f"  HostName {h.address}\n"
            f"  User {SSH_USER}\n"
            f"  Port {SSH_PORT}\n"
            f"  IdentityFile {private_key}\n"
            "  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking yes\n"
            f"  UserKnownHostsFile {known_hosts}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  ConnectTimeout 5\n"
            "  ServerAliveInterval 5\n"
            "  ServerAliveCountMax 3\n"
            "  BatchMode yes\n"
            "  LogLevel ERROR"
        )
    return "\n\n".join(blocks) + "\n"


def render_known_hosts(entries: Iterable[tuple[LabHost, str]]) -> str:
    """``known_hosts`` lines from each host's public host key (``"ssh-ed25519 AAAA... comment"``)."""
    lines = []
    for host, public_key in entries:
        kind, blob = public_key.split()[:2]
        lines.append(f"{host.name},{host.address} {kind} {blob}")
    return "\n".join(lines) + "\n"
