"""Where a lab lives on the control machine: the shared rootfs and key pair, and each lab's state under run/LAB/."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def default_lab_dir() -> Path:
    return Path(os.environ.get("TFCLUSTER_LAB_DIR", REPO / ".cache" / "lab"))


@dataclass(frozen=True)
class LabPaths:
    """Where everything lives: the cached rootfs and key pair are shared; ``run/LAB/`` is one lab's state."""

    root: Path
    lab: str

    @property
    def rootfs(self) -> Path:
        return self.root / "rootfs"

    @property
    def private_key(self) -> Path:
        return self.root / "ssh" / "id_ed25519"

    @property
    def run(self) -> Path:
        return self.root / "run" / self.lab

    @property
    def spec(self) -> Path:
        return self.run / "spec.json"

    @property
    def hosts_file(self) -> Path:
        return self.run / "hosts.yml"

    @property
    def ssh_config(self) -> Path:
        return self.run / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.run / "known_hosts"

    def host_dir(self, host: str) -> Path:
        return self.run / "hosts" / host

    def merged(self, host: str) -> Path:
        return self.host_dir(host) / "merged"

    def log(self, host: str) -> Path:
        return self.run / "logs" / f"{host}.log"

    def pidfile(self, host: str) -> Path:
        return self.run / "logs" / f"{host}.nspawn.pid"

    def bootlog(self, host: str) -> Path:
        return self.run / "logs" / f"{host}.boots"
