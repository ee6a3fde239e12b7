"""Command line of the inventory: argparse, source selection, printing. Only ``main()`` exits."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from inventory.build import Cluster, build_inventory, dumps, host_vars, tf_config_strings, validate_cluster
from inventory.config import DEFAULT_CLUSTER_NAMES, Settings, load_settings
from inventory.model import InventoryError, SourceResult
from inventory.sources.aws import fetch_aws
from inventory.sources.local import local_hosts
from inventory.sources.static import fetch_static
from inventory.sources.terraform import TerraformRunner, fetch_terraform
from tfcluster.contract import Problem

LOG = logging.getLogger("tfcluster.inventory")
EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2


@dataclass(frozen=True)
class Injected:
    """Test seams: a `terraform output -json` runner, an EC2 client, the DescribeInstances page size."""

    terraform_runner: TerraformRunner | None = None
    ec2_client: Any = None
    aws_page_size: int | None = None


def describe_source(settings: Settings) -> str:
    where = {
        "terraform": f"TFCLUSTER_TF_DIR={settings.tf_dir}",
        "static": f"TFCLUSTER_HOSTS_FILE={settings.hosts_file}",
        "aws": f"TFCLUSTER_CLUSTER={settings.cluster}",
        "local": f"TFCLUSTER_WORKERS={settings.workers}",
    }[settings.source]
    return f"source {settings.source}, {where}"


def collect(settings: Settings, injected: Injected = Injected()) -> SourceResult:
    """Ask the configured source for its hosts."""
    if settings.source == "terraform":
        return fetch_terraform(settings.tf_dir, settings.base_port, injected.terraform_runner)
    if settings.source == "static":
        assert settings.hosts_file is not None  # load_settings guarantees it
        return fetch_static(settings.hosts_file, settings.base_port)
    if settings.source == "aws":
        assert settings.cluster is not None  # load_settings guarantees it
        return fetch_aws(settings.cluster, settings.base_port, injected.ec2_client, injected.aws_page_size)
    return local_hosts(settings.workers, settings.base_port, settings.strategy)


def load_cluster(settings: Settings, injected: Injected = Injected()) -> Cluster:
    """Fetch and validate; raises InventoryError listing every problem."""
    found = collect(settings, injected)
    name = settings.cluster or found.cluster_name or DEFAULT_CLUSTER_NAMES.get(settings.source, "tfcluster")
    return validate_cluster(found, settings.strategy, name)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="inventory/tfcluster.py",
        description="Ansible dynamic inventory for tfcluster (configured by TFCLUSTER_* environment variables).")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="print the whole inventory as JSON (with _meta.hostvars)")
    mode.add_argument("--host", metavar="HOST", help="print one host's variables as JSON")
    mode.add_argument("--tf-config", metavar="all|HOST",
                      help="plan view: print the TF_CONFIG of every host (all) or of one host; contacts no host")
    return parser.parse_args(argv)


def render_tf_config(cluster: Cluster, which: str) -> str:
    """`all`: one `HOST TF_CONFIG='...'` line per host in slot order; a host name: that host's raw JSON."""
    configs = tf_config_strings(cluster)
    if which == "all":
        return "\n".join(f"{h.name} TF_CONFIG={shlex.quote(configs[h.name])}" for h in cluster.hosts)
    return configs[which]


def _unknown_host(cluster: Cluster, option: str, name: str) -> InventoryError:
    known = ", ".join(h.name for h in cluster.hosts)
    extra = "all, " if option == "--tf-config" else ""
    return InventoryError([Problem(option, f"no host named {name!r} in the inventory", f"use one of: {extra}{known}")])


def run(args: argparse.Namespace, env: Mapping[str, str], out: TextIO, injected: Injected = Injected()) -> int:
    """Do what the arguments ask; raises InventoryError on any problem (nothing is printed then)."""
    settings = load_settings(env)
    try:
        cluster = load_cluster(settings, injected)
    except InventoryError as exc:
        raise InventoryError(exc.problems, f"tfcluster inventory ({describe_source(settings)})") from exc
    names = {h.name: h for h in cluster.hosts}
    if args.list:
        text = dumps(build_inventory(cluster))
    elif args.host is not None:
        if args.host not in names:
            raise _unknown_host(cluster, "--host", args.host)
        text = dumps(host_vars(names[args.host], tf_config_strings(cluster)[args.host]))
    else:
        if args.tf_config != "all" and args.tf_config not in names:
            raise _unknown_host(cluster, "--tf-config", args.tf_config)
        text = render_tf_config(cluster, args.tf_config)
    out.write(text + "\n")
    return EXIT_OK


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None, out: TextIO | None = None,
         injected: Injected = Injected()) -> int:
    """Entry point: exit 0 with the requested output, 1 with every problem on stderr, 2 on bad arguments."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    args = parse_args(argv)
    try:
        return run(args, os.environ if env is None else env, out or sys.stdout, injected)
    except InventoryError as exc:
        LOG.error("%s\nNo inventory was printed.", exc)
        return EXIT_INVALID
    except ModuleNotFoundError as exc:
        LOG.error("tfcluster inventory: Python package %r is missing (%s runs this script). Fix: run it with the "
                  "project venv first on PATH: `make setup`, then PATH=$PWD/.venv/bin:$PATH\nNo inventory was printed.",
                  exc.name, sys.executable)
        return EXIT_INVALID
