"""local source: TFCLUSTER_WORKERS training processes on 127.0.0.1 with distinct ports, run by Ansible locally.

Slot i (chief, ps, then workers) listens on TFCLUSTER_BASE_PORT (default contract.LOCAL_BASE_PORT) + i.
"""

from __future__ import annotations

from tfcluster.core.contract import CHIEF, PS, WORKER
from tfcluster.inventory.model import HostSpec, SourceResult

LOCAL_ADDRESS = "127.0.0.1"


def local_slots(workers: int, strategy: str) -> list[tuple[str, int]]:
    """Slots in port order: parameter_server adds one chief and one ps in front of the workers."""
    slots: list[tuple[str, int]] = []
    if strategy == "parameter_server":
        slots += [(CHIEF, 0), (PS, 0)]
    slots += [(WORKER, i) for i in range(workers)]
    return slots


def local_hosts(workers: int, base_port: int, strategy: str) -> SourceResult:
    """One HostSpec per slot; slot i (in port order) listens on base_port + i."""
    specs = [
        HostSpec(label=f"{task_type}-{index}", name=f"{task_type}-{index}", task_type=task_type, task_index=index,
                 address=LOCAL_ADDRESS, port=base_port + ordinal, connection="local")
        for ordinal, (task_type, index) in enumerate(local_slots(workers, strategy))
    ]
    return SourceResult(specs=tuple(specs), empty_fix="set TFCLUSTER_WORKERS to 1 or more")
