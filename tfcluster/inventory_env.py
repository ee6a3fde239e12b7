"""The environment the inventory script runs in, per cluster kind: the source (Terraform state or the host file),
the Terraform CLI config provision used, and the cluster's own known_hosts (issue 14)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tfcluster import paths
from tfcluster.settings import Settings


def inventory_env(settings: Settings) -> dict[str, str]:
    """What the inventory script reads (inventory/tfcluster.py documents each variable)."""
    from tfcluster import terraform as toolchain

    env = {"TFCLUSTER_CLUSTER": settings.cluster_name, "TFCLUSTER_STRATEGY": settings.strategy,
           "TFCLUSTER_WORKERS": str(settings.workers)}
    if settings.cluster == "onprem":
        env |= {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(settings.hosts_file)}
    else:
        env |= {"TFCLUSTER_SOURCE": "terraform", "TFCLUSTER_TF_DIR": str(tf_dir_of(settings))}
    # The same CLI config `python -m tfcluster.provision` uses (it reads TFCLUSTER_TF_MIRROR from the environment).
    env["TF_CLI_CONFIG_FILE"] = toolchain.terraform_env(cluster=settings.cluster)["TF_CLI_CONFIG_FILE"]
    known = known_hosts_file(settings, {**os.environ, **env})
    if known is not None:
        env["TFCLUSTER_KNOWN_HOSTS"] = str(known)
    return env


def tf_dir_of(settings: Settings) -> Path:
    return settings.tf_dir or paths.REPO_ROOT / "infra" / settings.cluster


def known_hosts_file(settings: Settings, env: Mapping[str, str]) -> Path | None:
    """The cluster's own known_hosts (issue 14): on AWS the file `make provision` filled from the console output; on
    premises the host file's `host_keys`, written now (none given: the user's own known_hosts, via Ansible)."""
    from tfcluster import known_hosts

    if settings.cluster == "aws":
        from tfcluster import provision, terraform

        name = provision.state_cluster_name(tf_dir_of(settings), terraform.terraform_env(dict(env), cluster="aws"))
        path = known_hosts.path_for(name or settings.cluster_name)
        return path if path.is_file() else None
    if settings.cluster != "onprem":
        return None
    from inventory import cli as inventory_cli
    from inventory import config as inventory_config
    from inventory import known_hosts as inventory_keys
    from inventory.model import InventoryError

    try:
        cluster = inventory_cli.load_cluster(inventory_config.load_settings(env))
    except InventoryError:
        return None  # the inventory itself reports every problem when Ansible runs it
    text = inventory_keys.render(cluster)
    if not text:
        return None
    path = known_hosts.path_for(cluster.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    from tfcluster.files import atomic_write_text

    atomic_write_text(path, text, mode=0o600)
    return path
