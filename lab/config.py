"""Pure parts of the lab: names, slots, addresses, users and the spec of a lab (lab/render.py writes its files).

Nothing here touches the machine; `lab.lab` does that with these values.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from tfcluster.core.contract import CHIEF, TASK_TYPES, WORKER

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
_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
BASTION = "bastion"  # task type of a lab's jump host (no member of the cluster)
MAX_SSHD_DELAY = 80


class LabError(RuntimeError):
    """The lab cannot do what was asked; the message says what to do instead."""


@dataclass(frozen=True)
class LabHost:
    """One lab host: its slot, its address on the lab bridge and its training port.

    A bastion (``task_type`` BASTION) is no member of the cluster: a jump host with a second leg on the front bridge
    (``front_address``), the only way in once the lab is isolated. ``sshd_delay``: sshd starts that many seconds
    after boot (a fresh cloud instance)."""

    name: str
    address: str
    task_type: str
    index: int
    port: int = DEFAULT_PORT
    gpus: int = 0
    sshd_delay: int = 0
    front_address: str | None = None
    # systemd-nspawn's machine name (-M), which names the host's links on the outer machine: the host name unless the
    # lab gives its machines a prefix (two labs with the same host names side by side: make_spec's machine_prefix).
    machine: str = ""

    @property
    def machine_name(self) -> str:
        return self.machine or self.name

    @property
    def veth(self) -> str:
        """The outer end of the host's link (created by systemd-nspawn --network-bridge)."""
        return f"vb-{self.machine_name}"

    @property
    def front_veth(self) -> str:
        """The outer end of a bastion's front link (systemd-nspawn --network-veth-extra)."""
        return f"vf-{self.machine_name}"

    @property
    def member(self) -> bool:
        return self.task_type in TASK_TYPES


@dataclass(frozen=True)
class LabSpec:
    """Everything that describes a lab before it boots.

    ``user``/``user_key``: a login user with passwordless sudo on every host, authorized for that public key (as on
    a cloud image: ubuntu with the key pair's key); root keeps the lab's own key. ``front_subnet``: the network of
    the front bridge, where the control machine reaches the bastion."""

    name: str
    subnet: str
    hosts: tuple[LabHost, ...]
    bind_ro: tuple[str, ...] = field(default=())
    # Read-write binds into every host, ``PATH`` or ``SOURCE:DEST`` (a directory every host shares: NFS's stand-in).
    bind: tuple[str, ...] = field(default=())
    front_subnet: str | None = None
    user: str | None = None
    user_key: str | None = None

    @property
    def bridge(self) -> str:
        return bridge_name(self.name)

    @property
    def front_bridge(self) -> str:
        return front_bridge_name(self.name)

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    @property
    def control_address(self) -> str:
        return str(self.network.network_address + 1)

    @property
    def front_subnet_prefix(self) -> int | None:
        return ipaddress.IPv4Network(self.front_subnet).prefixlen if self.front_subnet else None

    @property
    def front_control_address(self) -> str | None:
        return str(ipaddress.IPv4Network(self.front_subnet).network_address + 1) if self.front_subnet else None

    @property
    def members(self) -> tuple[LabHost, ...]:
        """The cluster's hosts (every host but the bastion)."""
        return tuple(h for h in self.hosts if h.member)

    @property
    def bastion(self) -> LabHost | None:
        return next((h for h in self.hosts if not h.member), None)

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
        hosts = tuple(LabHost(**h) for h in raw.pop("hosts"))
        return cls(hosts=hosts, **{**raw, "bind_ro": tuple(raw.get("bind_ro", ())), "bind": tuple(raw.get("bind", ()))})


def check_name(name: str, what: str = "host name") -> str:
    """Return ``name`` if it can name a host or lab (interface names are at most 15 characters)."""
    if not _NAME_RE.match(name):
        raise LabError(f"{what} {name!r} is not valid: use 1-12 characters a-z, 0-9 and '-', starting with a letter "
                       "(it becomes part of a 15-character network interface name)")
    return name


def bridge_name(lab: str) -> str:
    return f"br-{check_name(lab, 'lab name')}"


def front_bridge_name(lab: str) -> str:
    """The bridge of a lab's front network (control machine and bastion)."""
    return f"bf-{check_name(lab, 'lab name')}"


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
    return (CHIEF,) + (WORKER,) * (count - 1)


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
              names: Sequence[str] | None = None, bind_ro: Sequence[str] = (), addresses: Sequence[str] | None = None,
              bastion: str | None = None, front_subnet: str | None = None, user: str | None = None,
              user_key: str | None = None, sshd_delay: Mapping[str, int] | None = None,
              bind: Sequence[str] = (), machine_prefix: str = "") -> LabSpec:
    """The lab's hosts: slot names (or ``names``) at ``addresses`` (default .11, .12, ... of ``subnet``), and a
    ``bastion`` host at the top of the subnet with a leg on ``front_subnet``. ``machine_prefix`` goes before each
    host's machine name (its links' names), so that labs with the same host names can run side by side."""
    check_name(name, "lab name")
    slots = check_slots(slots)
    subnet = check_subnet(subnet, len(slots))
    if not 1 <= port <= 65535:
        raise LabError(f"--port {port} is not a TCP port (1..65535)")
    per_slot = slot_names(slots)
    names = list(names) if names is not None else [n for n, _, _ in per_slot]
    if len(names) != len(slots):
        raise LabError(f"{len(names)} host names for {len(slots)} slots; give one name per slot")
    addresses = check_addresses(subnet, addresses, len(slots))
    delays = dict(sshd_delay or {})
    hosts = [LabHost(name=check_name(host_name), address=address, task_type=task_type, index=index, port=port,
                     sshd_delay=delays.pop(host_name, 0),
                     machine=check_name(machine_prefix + host_name, "machine name") if machine_prefix else "")
             for host_name, address, (_, task_type, index) in zip(names, addresses, per_slot, strict=True)]
    if bastion is not None:
        hosts.append(bastion_host(check_name(bastion), subnet, front_subnet, addresses, port=port,
                                  delay=delays.pop(bastion, 0)))
    all_names = [h.name for h in hosts]
    if len(set(all_names)) != len(all_names):
        raise LabError(f"host names repeat: {', '.join(all_names)}; give each host its own name")
    check_delays(delays, hosts)
    for path in bind_ro:
        if not path.startswith("/"):
            raise LabError(f"--bind-ro {path!r} must be an absolute path")
    for entry in bind:
        check_bind(entry)
    check_user(user, user_key)
    return LabSpec(name=name, subnet=subnet, hosts=tuple(hosts), bind_ro=tuple(bind_ro),
                   front_subnet=front_subnet if bastion else None, user=user, user_key=user_key, bind=tuple(bind))


def check_bind(entry: str) -> str:
    """A read-write bind, ``PATH`` or ``SOURCE:DEST``: both absolute, no option suffix (systemd-nspawn's --bind)."""
    parts = entry.split(":")
    if len(parts) > 2 or not all(part.startswith("/") for part in parts):
        raise LabError(f"--bind {entry!r} must be an absolute PATH or SOURCE:DEST (both absolute, no options)")
    return entry


def check_addresses(subnet: str, addresses: Sequence[str] | None, count: int) -> list[str]:
    """Given addresses (each in ``subnet``, none the network's, the broadcast or the control machine's .1, no
    repeats), or .11, .12, ... of ``subnet``."""
    network = ipaddress.IPv4Network(subnet)
    if addresses is None:
        return [str(network.network_address + HOST_OFFSET + 1 + i) for i in range(count)]
    if len(addresses) != count:
        raise LabError(f"{len(addresses)} addresses for {count} slots; give one address per slot")
    reserved = {network.network_address, network.broadcast_address, network.network_address + 1}
    for address in addresses:
        try:
            parsed = ipaddress.IPv4Address(address)
        except ValueError:
            raise LabError(f"address {address!r} is not an IPv4 address") from None
        if parsed not in network or parsed in reserved:
            raise LabError(f"address {address} is not a host address of {subnet} other than .1 (the control "
                           "machine's)")
    if len(set(addresses)) != len(addresses):
        raise LabError(f"addresses repeat: {', '.join(addresses)}")
    return list(addresses)


def bastion_host(name: str, subnet: str, front_subnet: str | None, taken: Sequence[str], *, port: int,
                 delay: int) -> LabHost:
    """The jump host: the highest free address of ``subnet``, and .11 of the front network."""
    if front_subnet is None:
        raise LabError("a bastion needs a front network (front_subnet) where the control machine reaches it")
    network = ipaddress.IPv4Network(subnet)
    front = ipaddress.IPv4Network(check_subnet(front_subnet, 1))
    if front.overlaps(network):
        raise LabError(f"the front network {front_subnet} overlaps the lab's {subnet}; pick another")
    address = next(str(a) for a in reversed(list(network.hosts())) if str(a) not in taken)
    return LabHost(name=name, address=address, task_type=BASTION, index=0, port=port, sshd_delay=delay,
                   front_address=str(front.network_address + HOST_OFFSET + 1))


def check_delays(unknown: Mapping[str, int], hosts: Sequence[LabHost]) -> None:
    if unknown:
        raise LabError(f"sshd_delay names no host of the lab: {', '.join(sorted(unknown))}")
    for host in hosts:
        if not 0 <= host.sshd_delay <= MAX_SSHD_DELAY:
            raise LabError(f"sshd_delay of {host.name} is {host.sshd_delay} s; use 0..{MAX_SSHD_DELAY} (systemd gives "
                           "a start 90 s)")


def check_user(user: str | None, key: str | None) -> None:
    if user is None and key is None:
        return
    if user is None or not _USER_RE.match(user) or user == SSH_USER:
        raise LabError(f"user {user!r} is not a login name for the lab to create: use lowercase letters, digits, _ "
                       "and - (not root)")
    parts = (key or "").split()
    if len(parts) < 2 or not parts[0].startswith(("ssh-", "ecdsa-", "sk-")):
        raise LabError(f"user_key of {user} is not an OpenSSH public key line (\"ssh-ed25519 AAAA... comment\")")
