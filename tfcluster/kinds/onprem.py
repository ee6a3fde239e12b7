"""CLUSTER=onprem: hosts you already have, listed with their slots in a host file (HOSTS=...); nothing to provision,
reached over SSH with the host file's `host_keys` (or your own known_hosts); the firewall on by default."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from tfcluster.core.files import atomic_write_text
from tfcluster.inventory import cli as inventory_cli
from tfcluster.inventory import config as inventory_config
from tfcluster.inventory.build import render_known_hosts
from tfcluster.inventory.model import InventoryError
from tfcluster.kinds.base import Kind, Target, Traits
from tfcluster.provision import known_hosts


class OnPrem(Kind):
    name: ClassVar[str] = "onprem"
    summary: ClassVar[str] = "hosts you already have, listed in a host file (HOSTS=...)"
    needs_host_file: ClassVar[bool] = True
    traits: ClassVar[Traits] = Traits(autostop=False, firewall=True, boot_wait=60)

    def source_env(self, target: Target) -> dict[str, str]:
        return {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(target.hosts_file)}

    def known_hosts(self, target: Target, env: Mapping[str, str]) -> Path | None:
        """The host file's `host_keys`, written now (none given: the user's own known_hosts, via Ansible)."""
        try:
            cluster = inventory_cli.load_cluster(inventory_config.load_settings(env))
        except InventoryError:
            return None  # the inventory itself reports every problem when Ansible runs it
        text = render_known_hosts(cluster)
        if not text:
            return None
        path = known_hosts.path_for(cluster.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text, mode=0o600)
        return path

    def playbook_vars(self, target: Target) -> dict[str, Any]:
        """An air-gapped install from the wheelhouse, when it is there (WHEELHOUSE)."""
        if target.wheelhouse is not None and target.wheelhouse.is_dir():
            return {"python_runtime_wheelhouse": str(target.wheelhouse)}
        return {}

    def plan_lines(self, target: Target, env: Mapping[str, str], run: Any) -> tuple[int, list[str]]:
        """Nothing to plan in Terraform: every host's TF_CONFIG from the host file (the inventory's own view)."""
        try:
            cluster = inventory_cli.load_cluster(inventory_config.load_settings(env))
        except InventoryError as exc:
            return 2, [str(exc)]
        return 0, inventory_cli.render_tf_config(cluster, "all").splitlines()
