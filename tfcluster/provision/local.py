"""The local backend of `python -m tfcluster.provision` (CLUSTER=local): infra/local, the same module as AWS,
applied against the emulated AWS endpoint on 127.0.0.1, which it starts once (tfcluster/provision/localaws.py);
placement groups stay off there. `destroy` checks that no live instance tagged tfcluster:cluster=<name> remains and
stops the endpoint. Actions: apply, plan, destroy, output.

Environment: TFCLUSTER_CLUSTER (cluster name), TFCLUSTER_WORKERS and TFCLUSTER_STRATEGY (local slots:
parameter_server adds a chief and a ps), TFCLUSTER_BASE_PORT (port of slot 0), TFCLUSTER_LOCALAWS_PORT /
TFCLUSTER_LOCALAWS_DIR (the endpoint), TFCLUSTER_TF_REGISTRY=1 (the registry instead of the offline mirror).
"""

from __future__ import annotations

import getpass
import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tfcluster.core.contract import CHIEF, PS, WORKER
from tfcluster.provision import localaws
from tfcluster.provision import terraform as terraform_toolchain
from tfcluster.provision.common import (
    LOG,
    Options,
    ProvisionError,
    hcl_value,
    prepare,
    run_terraform,
    state_cluster_name,
    state_resources,
    var_args,
    write_planned_hosts,
)


def local_slots(workers: int, strategy: str) -> dict[str, int]:
    """Local slots: N workers; parameter_server adds a chief and a ps (as the inventory's local source does)."""
    if workers < 1:
        raise ProvisionError(f"WORKERS={workers}: at least one worker is needed. Fix: WORKERS=2")
    slots = {WORKER: workers}
    if strategy == "parameter_server":
        slots |= {CHIEF: 1, PS: 1}
    return slots


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

ROOT = "local"  # infra/local
PROVIDER = terraform_toolchain.MIRROR
ACTIONS = ("apply", "plan", "destroy", "output")


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Terraform's environment for the emulator: the project's CLI config and dummy credentials (never real ones)."""
    env = terraform_toolchain.terraform_env(base, provider=PROVIDER)
    env |= localaws.DUMMY_CREDENTIALS  # the emulator accepts anything
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


def run(action: str, tf_dir: Path, env: dict[str, str], options: Options) -> int:
    """One action on infra/local (see the module docstring)."""
    workers, extra, keep_endpoint = options.workers, options.extra, options.keep_endpoint
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
    prepare(tf_dir, env, PROVIDER)
    if action == "plan":
        try:
            with tempfile.TemporaryDirectory() as tmp:
                plan_file = Path(tmp) / "plan.tfplan"
                run_terraform(["plan", "-input=false", f"-out={plan_file}", *tf_vars], tf_dir, env)
                write_planned_hosts(tf_dir, env, plan_file, options.plan_hosts)
        finally:
            if not was_running:  # a plan leaves nothing running that it did not find running
                localaws.stop(directory)
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
        prepare(tf_dir, env, PROVIDER)
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
