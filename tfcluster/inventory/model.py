"""Data types shared by the inventory's sources, validation and builder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfcluster.core.contract import SLOT_ORDER, Problem, TFConfigError

SOURCES: tuple[str, ...] = ("terraform", "static", "aws", "local")
DEFAULT_WORKERS = 2
DEFAULT_TF_DIR = "infra/aws"
CONNECTIONS: tuple[str, ...] = ("ssh", "local")
ADDRESS_FIX = "give the host an address (IP or DNS name) that Ansible can reach"


@dataclass(frozen=True)
class HostSpec:
    """A host as a source reported it, before validation. Values may be missing or of the wrong type.

    ``label`` names the host in error messages (e.g. ``hosts[2] (10.0.0.7)`` or ``i-0abc (10.0.0.7)``).
    ``address`` is where Ansible connects; ``tf_address`` is the address peers use in TF_CONFIG
    (defaults to ``address``). ``address_field``/``address_fix`` say where a missing address should have come
    from (e.g. ``private_ip`` when hosts are reached by private IP) and how to give it; ``tf_address_field`` names the
    source field of ``tf_address``.
    """

    label: str
    task_type: object
    task_index: object
    address: object
    port: object
    tf_address: object = None
    name: object = None
    gpus: object = 0
    connection: object = "ssh"
    ssh_user: object = None
    ssh_port: object = None
    host_keys: object = None
    instance_type: object = None
    address_field: str = "address"
    address_fix: str = ADDRESS_FIX
    tf_address_field: str = "tf_address"


@dataclass(frozen=True)
class Host:
    """A validated host with its slot."""

    name: str
    task_type: str
    task_index: int
    address: str
    tf_address: str
    port: int
    gpus: int
    connection: str
    ssh_user: str | None = None
    ssh_port: int | None = None
    host_keys: tuple[str, ...] = ()
    instance_type: str | None = None  # the EC2 type (terraform and aws sources): the driver role reads it

    @property
    def slot(self) -> tuple[int, int]:
        return (SLOT_ORDER.index(self.task_type), self.task_index)

    @property
    def endpoint(self) -> str:
        """``host:port`` as written in TF_CONFIG (IPv6 addresses in brackets)."""
        host = f"[{self.tf_address}]" if ":" in self.tf_address else self.tf_address
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class Bastion:
    """A jump host Ansible goes through (ProxyCommand); ``host_keys`` its known keys (static host files only)."""

    address: str
    port: int = 22
    user: str | None = None
    host_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Access:
    """How Ansible reaches the hosts: ``public``/``private`` IP, or ``bastion`` (private IP through the jump host).

    A static host file has no mode of its own (each host's ``address`` is where Ansible connects): ``direct``.
    """

    mode: str = "public"
    bastion: Bastion | None = None


DIRECT = Access(mode="direct")
PUBLIC = Access()


class InventoryError(TFConfigError):
    """Every problem that stops the inventory from being built; str() lists them all."""

    def __init__(self, problems: Sequence[Problem], source: str = "tfcluster inventory") -> None:
        super().__init__(problems, source)


@dataclass(frozen=True)
class SourceResult:
    """What a source found: hosts, problems it saw while reading them, the cluster name if it knows one, and how
    Ansible reaches the hosts.

    ``empty_fix`` is the advice to give when there are no hosts at all.
    """

    specs: tuple[HostSpec, ...]
    empty_fix: str
    problems: tuple[Problem, ...] = ()
    cluster_name: str | None = None
    access: Access = DIRECT
