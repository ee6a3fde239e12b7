"""Provision, plan, destroy or show a tfcluster with Terraform: `make provision|plan|destroy CLUSTER=local|aws`.

Usage:
    python -m tfcluster.provision apply   --cluster local [--workers 2] [--var KEY=VALUE ...]
    python -m tfcluster.provision plan    --cluster aws
    python -m tfcluster.provision destroy --cluster local [--keep-endpoint]
    python -m tfcluster.provision output  --cluster local            # `terraform output -json`

CLUSTER=local applies infra/local (the same module) against the emulated AWS endpoint on 127.0.0.1, which it
starts once (tfcluster/localaws.py); placement groups stay off there. `destroy` then checks that no live instance
tagged tfcluster:cluster=<name> remains and stops the endpoint. CLUSTER=aws runs infra/aws with your AWS
credentials and terraform.tfvars; Terraform asks before it changes anything unless --auto-approve.

Environment: TFCLUSTER_TF_DIR (root module; default infra/<cluster>), TFCLUSTER_CLUSTER (cluster name, local),
TFCLUSTER_WORKERS and TFCLUSTER_STRATEGY (local slots: parameter_server adds a chief and a ps),
TFCLUSTER_BASE_PORT (local: port of slot 0), TFCLUSTER_LOCALAWS_PORT / TFCLUSTER_LOCALAWS_DIR (the endpoint),
TFCLUSTER_TF_REGISTRY=1 (use the Terraform registry instead of the offline provider mirror).
Every Terraform call gets TF_CLI_CONFIG_FILE = the project's CLI config (tfcluster/terraform.py).
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tfcluster import localaws
from tfcluster import terraform as terraform_toolchain

LOG = logging.getLogger("provision")
CLUSTERS = ("local", "aws")


class ProvisionError(RuntimeError):
    """A provisioning step failed; the message names the step and the fix."""


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def tf_dir_for(cluster: str, env: Mapping[str, str], override: str | None = None) -> Path:
    raw = override or env.get("TFCLUSTER_TF_DIR") or str(repo_root() / "infra" / cluster)
    path = Path(raw).resolve()
    if not (path / "main.tf").is_file():
        raise ProvisionError(f"{path} is not a Terraform root module (no main.tf). "
                             f"Fix: TFCLUSTER_TF_DIR=infra/{cluster}")
    return path


def local_slots(workers: int, strategy: str) -> dict[str, int]:
    """Local slots: N workers; parameter_server adds a chief and a ps (as the inventory's local source does)."""
    if workers < 1:
        raise ProvisionError(f"WORKERS={workers}: at least one worker is needed. Fix: WORKERS=2")
    slots = {"worker": workers}
    if strategy == "parameter_server":
        slots |= {"chief": 1, "ps": 1}
    return slots


def hcl_value(value: Any) -> str:
    """A Python value as an HCL literal for -var (JSON is valid HCL for maps, lists, numbers and strings)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def local_vars(env: Mapping[str, str], endpoint: str | None, workers: int | None) -> list[str]:
    """-var arguments of infra/local from the environment."""
    out: list[str] = []
    if endpoint:
        out.append(f"endpoint={endpoint}")
    if env.get("TFCLUSTER_CLUSTER"):
        out.append(f"cluster_name={env['TFCLUSTER_CLUSTER']}")
    count = workers if workers is not None else int(env.get("TFCLUSTER_WORKERS") or 2)
    out.append("slots=" + hcl_value(local_slots(count, env.get("TFCLUSTER_STRATEGY", "auto"))))
    if env.get("TFCLUSTER_BASE_PORT"):
        out.append(f"base_port={env['TFCLUSTER_BASE_PORT']}")
    out.append(f"local_user={env.get('USER') or getpass.getuser()}")
    return out


def var_args(pairs: Sequence[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("-var", pair)]


def run_terraform(args: Sequence[str], tf_dir: Path, env: Mapping[str, str], capture: bool = False,
                  check: bool = True) -> subprocess.CompletedProcess[str]:
    color = [] if sys.stdout.isatty() or args[0] in {"output", "state", "show"} else ["-no-color"]
    command = [*terraform_toolchain.terraform_command(), f"-chdir={tf_dir}", args[0], *color, *args[1:]]
    LOG.debug("running %s", " ".join(command))
    result = subprocess.run(command, env=dict(env), text=True, check=False,
                            capture_output=capture)
    if check and result.returncode != 0:
        detail = (result.stderr or "")[-4000:] if capture else ""
        raise ProvisionError(f"terraform {args[0]} in {tf_dir} failed (exit {result.returncode})"
                             f"{detail and ':'}\n{detail}")
    return result


def init(tf_dir: Path, env: Mapping[str, str], interactive: bool) -> None:
    args = ["init", "-upgrade=false"] if interactive else ["init", "-input=false"]
    run_terraform(args, tf_dir, env, capture=not interactive)


def state_resources(tf_dir: Path, env: Mapping[str, str]) -> list[str]:
    result = run_terraform(["state", "list"], tf_dir, env, capture=True, check=False)
    return [line for line in result.stdout.splitlines() if line.strip()] if result.returncode == 0 else []


def state_cluster_name(tf_dir: Path, env: Mapping[str, str]) -> str | None:
    """The cluster_name output of the applied state, if any."""
    result = run_terraform(["output", "-raw", "cluster_name"], tf_dir, env, capture=True, check=False)
    return result.stdout.strip() or None if result.returncode == 0 else None


def planned_hosts(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The `hosts` output of a `terraform show -json PLAN` document (unknown values are None)."""
    after = plan.get("output_changes", {}).get("hosts", {}).get("after")
    if not isinstance(after, list):  # no change: the planned value is complete
        after = plan.get("planned_values", {}).get("outputs", {}).get("hosts", {}).get("value")
    return [dict(h) for h in after] if isinstance(after, list) else []


def plan_view(hosts: Sequence[Mapping[str, Any]], strategy: str) -> str:
    """Each planned host with its slot, address and the TF_CONFIG it will get (placeholders before apply)."""
    if not hosts:
        return "no hosts in the plan"
    addresses = {h["name"]: f"{h.get('private_ip') or h['name']}:{h.get('port')}" for h in hosts}
    cluster: dict[str, list[str]] = {}
    for host in hosts:
        if host["task_type"] != "evaluator":
            cluster.setdefault(host["task_type"], []).append(addresses[host["name"]])
    lines = [f"{'slot':<14} {'task':<14} {'address':<24} connection  gpus"]
    for host in hosts:
        task = f"{host['task_type']}:{host['task_index']}"
        lines.append(f"{host['name']:<14} {task:<14} {addresses[host['name']]:<24} {host.get('connection')!s:<11} "
                     f"{host.get('gpus')}")
    try:
        from tfcluster.contract import TFConfigError, build_tf_config
    except ImportError:  # the plan view still works without the trainer package
        return "\n".join(lines)
    lines.append("")
    lines.append("TF_CONFIG per host (addresses shown by slot name are known only after apply):")
    for host in hosts:
        try:
            config = build_tf_config(cluster, host["task_type"], host["task_index"], strategy).to_json()
        except TFConfigError as exc:
            config = f"invalid: {exc}"
        lines.append(f"  {host['name']}: {config}")
    return "\n".join(lines)


def tf_env(cluster: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = terraform_toolchain.terraform_env(base)
    if cluster == "local":
        env |= localaws.DUMMY_CREDENTIALS  # the emulator accepts anything; never real credentials
        env.pop("AWS_PROFILE", None)
        env.pop("AWS_SESSION_TOKEN", None)
    return env


def do_local(action: str, tf_dir: Path, env: dict[str, str], *, workers: int | None, extra: Sequence[str],
             keep_endpoint: bool) -> int:
    directory = localaws.state_dir()
    if action == "output":
        print(run_terraform(["output", "-json"], tf_dir, env, capture=True).stdout, end="")
        return 0
    if action == "destroy":
        return destroy_local(tf_dir, env, directory, workers=workers, extra=extra, keep_endpoint=keep_endpoint)
    was_running = localaws.running(directory) is not None
    endpoint = localaws.start(directory, localaws.default_port())
    tf_vars = var_args([*local_vars(env, endpoint.url, workers), *extra])
    init(tf_dir, env, interactive=False)
    if action == "plan":
        try:
            with tempfile.TemporaryDirectory() as tmp:
                plan_file = Path(tmp) / "plan.tfplan"
                run_terraform(["plan", "-input=false", f"-out={plan_file}", *tf_vars], tf_dir, env)
                shown = run_terraform(["show", "-json", str(plan_file)], tf_dir, env, capture=True)
        finally:
            if not was_running:  # a plan leaves nothing running that it did not find running
                localaws.stop(directory)
        print(plan_view(planned_hosts(json.loads(shown.stdout)), env.get("TFCLUSTER_STRATEGY", "auto")))
        return 0
    started = time.monotonic()
    run_terraform(["apply", "-input=false", "-auto-approve", *tf_vars], tf_dir, env)
    LOG.info("applied %s in %.1f s against %s (emulated: these instances exist only in moto)", tf_dir,
             time.monotonic() - started, endpoint.url)
    return 0


def destroy_local(tf_dir: Path, env: dict[str, str], directory: Path, *, workers: int | None, extra: Sequence[str],
                  keep_endpoint: bool) -> int:
    cluster_name = state_cluster_name(tf_dir, env) or env.get("TFCLUSTER_CLUSTER") or "tfcluster-local"
    if state_resources(tf_dir, env) or localaws.running(directory) is not None:
        endpoint = localaws.start(directory, localaws.default_port())
        init(tf_dir, env, interactive=False)
        started = time.monotonic()
        tf_vars = var_args([*local_vars(env, endpoint.url, workers), *extra])
        run_terraform(["destroy", "-input=false", "-auto-approve", *tf_vars], tf_dir, env)
        left = localaws.live_instances(localaws.ec2_client(endpoint.url), cluster_name)
        if left:
            ids = ", ".join(i["InstanceId"] for i in left)
            raise ProvisionError(f"{len(left)} instance(s) tagged tfcluster:cluster={cluster_name} remain after "
                                 f"destroy: {ids}. Fix: inspect `terraform state list` in {tf_dir}")
        LOG.info("destroyed in %.1f s; 0 instances tagged tfcluster:cluster=%s remain", time.monotonic() - started,
                 cluster_name)
    if not keep_endpoint and localaws.stop(directory):
        LOG.info("emulated endpoint stopped")
    return 0


def do_aws(action: str, tf_dir: Path, env: dict[str, str], *, workers: int | None, extra: Sequence[str],
           auto_approve: bool) -> int:
    pairs = list(extra)
    if workers is not None:
        pairs.append("slots=" + hcl_value({"worker": workers}))
    tf_vars = var_args(pairs)
    if action == "output":
        print(run_terraform(["output", "-json"], tf_dir, env, capture=True).stdout, end="")
        return 0
    init(tf_dir, env, interactive=True)
    approve = ["-auto-approve"] if auto_approve else []
    if action == "plan":
        run_terraform(["plan", *tf_vars], tf_dir, env)
    elif action == "apply":
        run_terraform(["apply", *approve, *tf_vars], tf_dir, env)
    else:
        run_terraform(["destroy", *approve, *tf_vars], tf_dir, env)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("apply", "plan", "destroy", "output"))
    parser.add_argument("--cluster", default=os.environ.get("CLUSTER", "local"),
                        help="local (emulated AWS) or aws")
    parser.add_argument("--tf-dir", default=None, help="root module (default: $TFCLUSTER_TF_DIR or infra/<cluster>)")
    parser.add_argument("--workers", type=int, default=None,
                        help="number of workers (local default: $TFCLUSTER_WORKERS)")
    parser.add_argument("--var", action="append", default=[], metavar="KEY=VALUE", help="extra terraform -var")
    parser.add_argument("--auto-approve", action="store_true", help="aws: do not ask before apply/destroy")
    parser.add_argument("--keep-endpoint", action="store_true", help="local destroy: leave the endpoint running")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="[provision] %(message)s")
    if args.cluster not in CLUSTERS:
        LOG.error("CLUSTER=%s has nothing to provision. Fix: CLUSTER=local or CLUSTER=aws (onprem hosts exist "
                  "already: list them in the host file)", args.cluster)
        return 2
    try:
        env = tf_env(args.cluster)
        tf_dir = tf_dir_for(args.cluster, env, args.tf_dir)
        if args.cluster == "local":
            return do_local(args.action, tf_dir, env, workers=args.workers, extra=args.var,
                            keep_endpoint=args.keep_endpoint)
        return do_aws(args.action, tf_dir, env, workers=args.workers, extra=args.var, auto_approve=args.auto_approve)
    except (ProvisionError, localaws.LocalAwsError, terraform_toolchain.ToolchainError) as exc:
        LOG.error("%s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
