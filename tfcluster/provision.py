"""Provision, plan, destroy or show a tfcluster with Terraform: `make provision|plan|destroy CLUSTER=local|aws`.

Usage:
    python -m tfcluster.provision apply   --cluster local [--workers 2] [--var KEY=VALUE ...]
    python -m tfcluster.provision plan    --cluster aws
    python -m tfcluster.provision destroy --cluster local [--keep-endpoint]
    python -m tfcluster.provision output  --cluster local            # `terraform output -json`
    python -m tfcluster.provision upgrade --cluster aws              # `terraform init -upgrade` (make tf-upgrade)
    python -m tfcluster.provision known-hosts --cluster aws          # fetch the hosts' keys again (no apply)

CLUSTER=local applies infra/local (the same module) against the emulated AWS endpoint on 127.0.0.1, which it
starts once (tfcluster/localaws.py); placement groups stay off there. `destroy` then checks that no live instance
tagged tfcluster:cluster=<name> remains and stops the endpoint.

CLUSTER=aws runs infra/aws with your AWS credentials and terraform.tfvars; Terraform asks before it changes
anything unless --auto-approve. Before Terraform runs, tfcluster/awscheck.py refuses missing credentials or region
and an instance type or zone that cannot launch, naming the fix; an AWS capacity or quota error during apply is
explained with the next step. After apply, the hosts' SSH keys are read from their console output into the
cluster's known_hosts (tfcluster/known_hosts.py); `destroy` checks through the EC2 API that no instance tagged
with the cluster remains, says so, and removes that file. The provider comes from the public registry; the offline
3.39 mirror only with TFCLUSTER_TF_MIRROR=1 (tfcluster/terraform.py).

Environment: TFCLUSTER_TF_DIR (root module; default infra/<cluster>), TFCLUSTER_CLUSTER (cluster name, local),
TFCLUSTER_WORKERS and TFCLUSTER_STRATEGY (local slots: parameter_server adds a chief and a ps),
TFCLUSTER_BASE_PORT (local: port of slot 0), TFCLUSTER_LOCALAWS_PORT / TFCLUSTER_LOCALAWS_DIR (the endpoint),
TFCLUSTER_TF_REGISTRY=1 (local: the registry), TFCLUSTER_TF_MIRROR=1 (aws: the offline mirror),
TFCLUSTER_HOST_KEY_CHECKING=accept-new (aws: hosts whose keys are not in their console output in time are
trusted on first use instead of failing), TFCLUSTER_HOST_KEY_TIMEOUT (seconds, default 600).
Every Terraform call gets TF_CLI_CONFIG_FILE = the project's CLI config (tfcluster/terraform.py).
"""

from __future__ import annotations

import argparse
import collections
import getpass
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tfcluster import awscheck, localaws
from tfcluster import known_hosts as hostkeys
from tfcluster import terraform as terraform_toolchain
from tfcluster.contract import CHIEF, EVALUATOR, PS, WORKER

LOG = logging.getLogger("provision")
CLUSTERS = ("local", "aws")
ACTIONS = ("apply", "plan", "destroy", "output", "upgrade", "known-hosts")
# The AWS twin test (lab/twin.py) writes this into infra/aws while it runs: the provider then talks to an emulator.
TWIN_OVERRIDE = "tfcluster_twin_override.tf"
TWIN_ENV = "TFCLUSTER_TWIN"


class ProvisionError(RuntimeError):
    """A provisioning step failed; the message names the step and the fix (`output`: Terraform's stderr)."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


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
    slots = {WORKER: workers}
    if strategy == "parameter_server":
        slots |= {CHIEF: 1, PS: 1}
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
    """Run terraform in `tf_dir`. Not captured: the output goes to the terminal (prompts work) and the last lines of
    stderr still come back in `.stderr` (to explain AWS errors)."""
    color = [] if sys.stdout.isatty() or args[0] in {"output", "state", "show"} else ["-no-color"]
    command = [*terraform_toolchain.terraform_command(), f"-chdir={tf_dir}", args[0], *color, *args[1:]]
    LOG.debug("running %s", " ".join(command))
    if capture:
        result = subprocess.run(command, env=dict(env), text=True, check=False, capture_output=True)
    else:
        result = _run_teeing_stderr(command, env)
    if check and result.returncode != 0:
        detail = (result.stderr or "")[-4000:] if capture else ""
        raise ProvisionError(f"terraform {args[0]} in {tf_dir} failed (exit {result.returncode})"
                             f"{detail and ':'}\n{detail}", result.stderr or "")
    return result


def _run_teeing_stderr(command: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    tail: collections.deque[str] = collections.deque(maxlen=400)
    proc = subprocess.Popen(list(command), env=dict(env), text=True, stderr=subprocess.PIPE)

    def copy() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            tail.append(line)

    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    code = proc.wait()
    copier.join()
    return subprocess.CompletedProcess(list(command), code, stdout="", stderr="".join(tail))


def prepare(tf_dir: Path, env: Mapping[str, str], cluster: str, *, upgrade: bool = False) -> None:
    """`terraform init` (or `get` under the mirror override) the way the provider mode needs."""
    mode = terraform_toolchain.mode_for(cluster, env)
    config = Path(env.get("TF_CLI_CONFIG_FILE", ""))
    if not config.is_file():
        raise ProvisionError(f"the project's Terraform CLI config {config} is missing. Fix: `make setup` (or "
                             "`python -m tfcluster.terraform install`)")
    locked = terraform_toolchain.locked_version(tf_dir)
    args = terraform_toolchain.init_args(mode, locked, upgrade=upgrade)
    if "-upgrade" in args and not upgrade:
        LOG.info("the lock file pins hashicorp/aws %s (the offline mirror's); taking the newest version the root "
                 "allows from the registry (terraform init -upgrade)", locked)
    if mode == terraform_toolchain.OVERRIDE:
        LOG.info("aws provider %s from the offline mirror (TFCLUSTER_TF_MIRROR=1), as a development override: the "
                 "lock file is left as it is", terraform_toolchain.PROVIDER_VERSION)
    run_terraform(args, tf_dir, env, capture=True)


def state_resources(tf_dir: Path, env: Mapping[str, str]) -> list[str]:
    result = run_terraform(["state", "list"], tf_dir, env, capture=True, check=False)
    return [line for line in result.stdout.splitlines() if line.strip()] if result.returncode == 0 else []


def state_outputs(tf_dir: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """`terraform output -json` of the applied state as {name: value}; {} before the first apply or on any error
    (`output -raw` would print Terraform's "No outputs found" warning to stdout with exit 0)."""
    result = run_terraform(["output", "-json"], tf_dir, env, capture=True, check=False)
    try:
        found = json.loads(result.stdout) if result.returncode == 0 else {}
    except ValueError:
        return {}
    return {name: item.get("value") for name, item in found.items()} if isinstance(found, dict) else {}


def state_cluster_name(tf_dir: Path, env: Mapping[str, str]) -> str | None:
    """The cluster_name output of the applied state, if any."""
    name = state_outputs(tf_dir, env).get("cluster_name")
    return name if isinstance(name, str) and name else None


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
        if host["task_type"] != EVALUATOR:
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
    env = terraform_toolchain.terraform_env(base, cluster=cluster)
    if cluster == "local":
        env |= localaws.DUMMY_CREDENTIALS  # the emulator accepts anything; never real credentials
        env.pop("AWS_PROFILE", None)
        env.pop("AWS_SESSION_TOKEN", None)
    return env


def set_aside_stale_state(tf_dir: Path, stamp: str) -> Path | None:
    """The local root's state when its emulator is gone (a reboot, a killed moto): what it names lived only in that
    emulator's memory, and an apply against a fresh one fails on it (InvalidGroup.NotFound after minutes of
    retries). Renamed to terraform.tfstate.stale-STAMP (kept to look at, never read again); the path, or None when
    there is no state with resources."""
    state = tf_dir / "terraform.tfstate"
    try:
        resources = json.loads(state.read_text()).get("resources")
    except (OSError, ValueError, AttributeError):
        return None
    if not resources:
        return None
    aside = state.with_name(f"terraform.tfstate.stale-{stamp}")
    state.replace(aside)
    return aside


def drop_state_of_a_gone_emulator(tf_dir: Path, directory: Path) -> bool:
    """True when the emulator runs; else sets a stale state aside (saying so) and returns False."""
    if localaws.running(directory) is not None:
        return True
    aside = set_aside_stale_state(tf_dir, time.strftime("%Y%m%dT%H%M%S"))
    if aside is not None:
        LOG.warning("the emulated endpoint that held this local cluster is gone (a reboot?), and its resources "
                    "with it: its Terraform state is set aside as %s; starting from an empty state", aside)
    return False


def do_local(action: str, tf_dir: Path, env: dict[str, str], *, workers: int | None, extra: Sequence[str],
             keep_endpoint: bool) -> int:
    directory = localaws.state_dir()
    if action == "output":
        print(run_terraform(["output", "-json"], tf_dir, env, capture=True).stdout, end="")
        return 0
    was_running = drop_state_of_a_gone_emulator(tf_dir, directory)
    if action == "destroy":
        return destroy_local(tf_dir, env, directory, workers=workers, extra=extra, keep_endpoint=keep_endpoint,
                             was_running=was_running)
    endpoint = localaws.start(directory, localaws.default_port())
    tf_vars = var_args([*local_vars(env, endpoint.url, workers), *extra])
    prepare(tf_dir, env, "local")
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
                  keep_endpoint: bool, was_running: bool) -> int:
    cluster_name = state_cluster_name(tf_dir, env) or env.get("TFCLUSTER_CLUSTER") or "tfcluster-local"
    if state_resources(tf_dir, env) or was_running:
        endpoint = localaws.start(directory, localaws.default_port())
        prepare(tf_dir, env, "local")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=ACTIONS)
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
            if args.action in ("upgrade", "known-hosts"):
                raise ProvisionError(f"`{args.action}` is for CLUSTER=aws (local slots take the offline mirror and "
                                     "connect locally)")
            return do_local(args.action, tf_dir, env, workers=args.workers, extra=args.var,
                            keep_endpoint=args.keep_endpoint)
        from tfcluster.provision_aws import do_aws

        return do_aws(args.action, tf_dir, env, workers=args.workers, extra=args.var, auto_approve=args.auto_approve)
    except (ProvisionError, localaws.LocalAwsError, terraform_toolchain.ToolchainError, awscheck.AwsCheckError,
            hostkeys.KnownHostsError) as exc:
        LOG.error("%s", exc)
        return 1


if __name__ == "__main__":
    # Run the module's canonical copy: provision_aws imports tfcluster.provision, and `python -m` loads this file as
    # __main__, a second module whose ProvisionError main() would not catch.
    from tfcluster.provision import main as canonical_main

    sys.exit(canonical_main())
