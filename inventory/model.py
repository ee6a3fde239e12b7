"""Data types shared by the inventory's sources, validation and builder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfcluster.contract import Problem, TFConfigError

TAG_CLUSTER = "tfcluster:cluster"
TAG_TASK_TYPE = "tfcluster:task_type"
TAG_TASK_INDEX = "tfcluster:task_index"
# Optional tags the aws source also reads (the Terraform module may write them).
TAG_PORT = "tfcluster:port"
TAG_GPUS = "tfcluster:gpus"
TAG_SSH_USER = "tfcluster:ssh_user"

SOURCES: tuple[str, ...] = ("terraform", "static", "aws", "local")
DEFAULT_BASE_PORT = 22220  # same as infra/local base_port
DEFAULT_WORKERS = 2
DEFAULT_TF_DIR = "infra/aws"
CONNECTIONS: tuple[str, ...] = ("ssh", "local")
# Order of slots in every list the inventory prints (same as the Terraform `hosts` output).
SLOT_ORDER: tuple[str, ...] = ("chief", "ps", "worker", "evaluator")


@dataclass(frozen=True)
class HostSpec:
    """A host as a source reported it, before validation. Values may be missing or of the wrong type.

    ``label`` names the host in error messages (e.g. ``hosts[2] (10.0.0.7)`` or ``i-0abc (10.0.0.7)``).
    ``address`` is where Ansible connects; ``tf_address`` is the address peers use in TF_CONFIG
    (defaults to ``address``).
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

    @property
    def slot(self) -> tuple[int, int]:
        return (SLOT_ORDER.index(self.task_type), self.task_index)

    @property
    def endpoint(self) -> str:
        """``host:port`` as written in TF_CONFIG (IPv6 addresses in brackets)."""
        host = f"[{self.tf_address}]" if ":" in self.tf_address else self.tf_address
        return f"{host}:{self.port}"


class InventoryError(TFConfigError):
    """Every problem that stops the inventory from being built; str() lists them all."""

    def __init__(self, problems: Sequence[Problem], source: str = "tfcluster inventory") -> None:
        super().__init__(problems, source)


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class SourceResult:
    """What a source found: hosts, problems it saw while reading them, and the cluster name if it knows one.

    ``empty_fix`` is the advice to give when there are no hosts at all.
    """

    specs: tuple[HostSpec, ...]
    empty_fix: str
    problems: tuple[Problem, ...] = ()
    cluster_name: str | None = None
