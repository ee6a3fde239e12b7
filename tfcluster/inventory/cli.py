"""Command line of the inventory: argparse, source selection, printing. Only ``main()`` exits."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TextIO

from tfcluster.core.contract import EXIT_BAD_INPUT, EXIT_OK, TF_PORT, Problem, unsafe
from tfcluster.inventory.access import SshTrust
from tfcluster.inventory.build import Cluster, build_inventory, dumps, host_vars, render_known_hosts, validate_cluster
from tfcluster.inventory.config import DEFAULT_CLUSTER_NAMES, Settings, load_settings
from tfcluster.inventory.fields import absolute, path_problem
from tfcluster.inventory.model import Access, InventoryError, SourceResult
from tfcluster.inventory.sources.aws import fetch_aws
from tfcluster.inventory.sources.local import local_hosts
from tfcluster.inventory.sources.static import fetch_static
from tfcluster.inventory.sources.terraform import Overrides, TerraformRunner, fetch_terraform, terraform_hosts

LOG = logging.getLogger("tfcluster.inventory")


@dataclass(frozen=True)
class Injected:
    """Test seams: a `terraform output -json` runner, an EC2 client, the DescribeInstances page size."""

    terraform_runner: TerraformRunner | None = None
    ec2_client: Any = None
    aws_page_size: int | None = None


NOTHING_INJECTED = Injected()


def describe_source(settings: Settings) -> str:
    where = {
        "terraform": f"TFCLUSTER_TF_DIR={settings.tf_dir}",
        "static": f"TFCLUSTER_HOSTS_FILE={settings.hosts_file}",
        "aws": f"TFCLUSTER_CLUSTER={settings.cluster}",
        "local": f"TFCLUSTER_WORKERS={settings.workers}",
    }[settings.source]
    return f"source {settings.source}, {where}"


def collect(settings: Settings, injected: Injected = NOTHING_INJECTED) -> SourceResult:
    """Ask the configured source for its hosts."""
    if settings.source == "terraform":
        overrides = Overrides(port=settings.port, connect=settings.connect, bastion=settings.bastion)
        return fetch_terraform(settings.tf_dir, overrides, injected.terraform_runner)
    if settings.source == "static":
        assert settings.hosts_file is not None  # load_settings guarantees it
        return fetch_static(settings.hosts_file, settings.port)
    if settings.source == "aws":
        assert settings.cluster is not None  # load_settings guarantees it
        access = Access(mode=settings.connect or "public", bastion=settings.bastion)
        return fetch_aws(settings.cluster, settings.port, access, injected.ec2_client, injected.aws_page_size)
    return local_hosts(settings.workers, settings.base_port, settings.strategy)


def _trust(settings: Settings, found: SourceResult) -> SshTrust:
    """The host-key settings, with the jump host's key file when a bastion is used (checked then, not before)."""
    if found.access.bastion is None or settings.identity is None:
        return settings.trust
    problem = path_problem("ANSIBLE_PRIVATE_KEY_FILE", settings.identity)
    if problem:
        raise InventoryError([problem])
    return replace(settings.trust, identity=absolute(settings.identity))


def load_cluster(settings: Settings, injected: Injected = NOTHING_INJECTED) -> Cluster:
    """Fetch and validate; raises InventoryError listing every problem."""
    found = collect(settings, injected)
    name = settings.cluster or found.cluster_name or DEFAULT_CLUSTER_NAMES.get(settings.source, "tfcluster")
    cluster = validate_cluster(found, settings.strategy, name, _trust(settings, found))
    return replace(cluster, kind=settings.kind, kind_traits=settings.kind_traits)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="inventory/slots.py",
        description="Ansible dynamic inventory for tfcluster (configured by TFCLUSTER_* environment variables).")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="print the whole inventory as JSON (with _meta.hostvars)")
    mode.add_argument("--host", metavar="HOST", help="print one host's variables as JSON")
    mode.add_argument("--tf-config", metavar="all|HOST",
                      help="plan view: print the TF_CONFIG of every host (all) or of one host; contacts no host")
    mode.add_argument("--known-hosts", action="store_true",
                      help="print known_hosts lines for the hosts whose keys the host file lists")
    return parser.parse_args(argv)


def render_tf_config(cluster: Cluster, which: str) -> str:
    """`all`: one `HOST TF_CONFIG='...'` line per host in slot order; a host name: that host's raw JSON."""
    if which == "all":
        return "\n".join(f"{h.name} TF_CONFIG={shlex.quote(cluster.tf_config(h))}" for h in cluster.hosts)
    return cluster.tf_config(next(h for h in cluster.hosts if h.name == which))


def plan_lines(planned: Sequence[Mapping[str, Any]], strategy: str, cluster_name: str) -> list[str]:
    """`make plan`: each planned host (a Terraform plan's `hosts` output) with its slot, address and the TF_CONFIG the
    inventory will give it: the same code as ``--tf-config all`` on an applied cluster. Addresses not known before
    the apply are shown by the slot's name."""
    if not planned:
        return ["no hosts in the plan"]
    hosts = [{**h, "private_ip": h.get("private_ip") or h.get("name"), "public_ip": h.get("public_ip") or h.get("name")}
             for h in planned if isinstance(h, Mapping)]
    try:
        cluster = validate_cluster(terraform_hosts({"hosts": hosts}, Overrides(port=TF_PORT, connect="private")),
                                   strategy, cluster_name)
    except InventoryError as exc:
        return ["the planned hosts do not make a valid cluster:", *(f"  - {p}" for p in exc.problems)]
    lines = [f"{'slot':<14} {'task':<14} {'address':<24} gpus"]
    lines += [f"{h.name:<14} {h.task_type + ':' + str(h.task_index):<14} {h.endpoint:<24} {h.gpus}"
              for h in cluster.hosts]
    lines += ["", "TF_CONFIG per host (addresses shown by slot name are known only after apply):"]
    return lines + [f"  {line}" for line in render_tf_config(cluster, "all").splitlines()]


def _unknown_host(cluster: Cluster, option: str, name: str) -> InventoryError:
    known = ", ".join(h.name for h in cluster.hosts)
    extra = "all, " if option == "--tf-config" else ""
    return InventoryError([Problem(option, f"no host named {name!r} in the inventory", f"use one of: {extra}{known}")])


def _known_hosts_problem(cluster: Cluster) -> InventoryError | None:
    """Strict checking against a known_hosts file that does not exist would refuse every host: say so first."""
    path, checking = cluster.trust.known_hosts, cluster.trust.checking
    if path is None or checking != "yes" or path.is_file() or not cluster.ssh_args():
        return None
    return InventoryError([Problem("TFCLUSTER_KNOWN_HOSTS", f"{path} does not exist, so ssh with "
                                   "StrictHostKeyChecking=yes would refuse every host",
                                   "write the cluster's known_hosts first (`make provision` does), or export "
                                   "TFCLUSTER_HOST_KEY_CHECKING=accept-new to record each host's key on first "
                                   "contact")])


def render(args: argparse.Namespace, cluster: Cluster) -> str:
    """The text the arguments ask for, ending in a newline (nothing for no known keys); raises InventoryError for an
    unknown host."""
    names = {h.name: h for h in cluster.hosts}
    if args.known_hosts:
        return render_known_hosts(cluster)
    if args.tf_config is not None:
        if args.tf_config != "all" and args.tf_config not in names:
            raise _unknown_host(cluster, "--tf-config", args.tf_config)
        return render_tf_config(cluster, args.tf_config) + "\n"
    problem = _known_hosts_problem(cluster)
    if problem:
        raise problem
    if args.list:
        return dumps(build_inventory(cluster), compact=True) + "\n"
    if args.host not in names:
        raise _unknown_host(cluster, "--host", args.host)
    return dumps(unsafe(host_vars(names[args.host]))) + "\n"


def run(args: argparse.Namespace, env: Mapping[str, str], out: TextIO, injected: Injected = NOTHING_INJECTED) -> int:
    """Do what the arguments ask; raises InventoryError on any problem (nothing is printed then)."""
    settings = load_settings(env)
    try:
        cluster = load_cluster(settings, injected)
    except InventoryError as exc:
        raise InventoryError(exc.problems, f"tfcluster inventory ({describe_source(settings)})") from exc
    out.write(render(args, cluster))
    return EXIT_OK


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None, out: TextIO | None = None,
         injected: Injected = NOTHING_INJECTED) -> int:
    """Entry point: exit 0 with the requested output; contract.EXIT_BAD_INPUT (2) with every problem on stderr and
    nothing on stdout, as argparse does for bad arguments."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    args = parse_args(argv)
    try:
        return run(args, os.environ if env is None else env, out or sys.stdout, injected)
    except InventoryError as exc:
        LOG.error("%s\nNo inventory was printed.", exc)
        return EXIT_BAD_INPUT
    except ModuleNotFoundError as exc:
        LOG.error("tfcluster inventory: Python package %r is missing (%s runs this script). Fix: run it with the "
                  "project venv first on PATH: `make setup`, then PATH=$PWD/.venv/bin:$PATH\nNo inventory was printed.",
                  exc.name, sys.executable)
        return EXIT_BAD_INPUT
