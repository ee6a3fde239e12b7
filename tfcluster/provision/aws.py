"""CLUSTER=aws for `tfcluster.provision.local`: preflight, init from the registry (or the opt-in mirror), apply with AWS
errors explained, host keys from the console output, destroy with a check through the EC2 API.

Called by `python -m tfcluster.provision ACTION --backend aws` (tfcluster/provision/__main__.py).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from tfcluster.core.contract import WORKER
from tfcluster.cost import clusters
from tfcluster.provision import awscheck
from tfcluster.provision import known_hosts as hostkeys
from tfcluster.provision import terraform as terraform_toolchain
from tfcluster.provision.common import (
    TWIN_ENV,
    TWIN_OVERRIDE,
    Options,
    ProvisionError,
    hcl_value,
    prepare,
    run_terraform,
    state_cluster_name,
    state_outputs,
    var_args,
    write_planned_hosts,
)

LOG = logging.getLogger("provision")
HOST_KEY_CHECKING_ENV = "TFCLUSTER_HOST_KEY_CHECKING"
DEFAULT_TTL = "24h"  # CLUSTER=aws: the tfcluster:expires tag unless TTL says otherwise (TTL=off: none)


def guard_twin_override(tf_dir: Path, env: Mapping[str, str]) -> None:
    """Refuse a real run while the AWS twin's override (an emulator endpoint) sits in the root."""
    override = tf_dir / TWIN_OVERRIDE
    if override.exists() and env.get(TWIN_ENV) != "1":
        raise ProvisionError(f"{override} points the aws provider at an emulator (the AWS twin test writes it while "
                             f"it runs). Fix: if no twin test is running, remove it: rm {override}")


def outputs(tf_dir: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """`terraform output -json` as {name: value} ({} before the first apply)."""
    return state_outputs(tf_dir, env)


def ssh_addresses(out: Mapping[str, Any]) -> dict[str, str]:
    """{address Ansible connects to: instance id} from the outputs, by the connect mode (public unless the root
    says private or bastion; old state without `connect` counts as public)."""
    mode = out.get("connect") or "public"
    key = "public_ip" if mode == "public" else "private_ip"
    found = {}
    for host in out.get("hosts") or []:
        if host.get(key) and host.get("instance_id"):
            found[host[key]] = host["instance_id"]
    return found


def bastion_of(out: Mapping[str, Any]) -> tuple[str, int] | None:
    bastion = out.get("bastion") if (out.get("connect") or "public") == "bastion" else None
    if not isinstance(bastion, Mapping) or not bastion.get("address"):
        return None
    return str(bastion["address"]), int(bastion.get("port") or 22)


def ec2_client(target: awscheck.Target) -> Any:
    import boto3

    return boto3.Session(profile_name=target.profile, region_name=target.region).client("ec2")


def target_for(tf_dir: Path, env: Mapping[str, str], extra: Sequence[str], out: Mapping[str, Any]) -> awscheck.Target:
    """Region and profile of the applied cluster: the `region` output when the root has one, else the settings."""
    settings = awscheck.root_settings(tf_dir, env, extra)
    if out.get("region"):
        settings = {**settings, "region": str(out["region"])}
    return awscheck.target_of(settings, env, lambda _profile: None, tf_dir)


def fill_known_hosts(tf_dir: Path, env: Mapping[str, str], extra: Sequence[str], *,
                     timeout: float | None = None) -> Path | None:
    """Write the cluster's known_hosts from the instances' console output (and the bastion's from the user's own)."""
    out = outputs(tf_dir, env)
    name = out.get("cluster_name")
    if not name:
        return None
    path = hostkeys.path_for(str(name))
    instances = ssh_addresses(out)
    found, missing = hostkeys.fetch_console_keys(ec2_client(target_for(tf_dir, env, extra, out)), instances,
                                                 timeout=timeout)
    entries: dict[str, list[str]] = dict(found)
    bastion = bastion_of(out)
    if bastion is not None:
        lines = hostkeys.user_entries(*bastion)
        if lines:
            entries[bastion[0]] = lines
        else:
            LOG.warning("the bastion %s is not in %s: the first connection will be refused unless %s=accept-new",
                        bastion[0], hostkeys.user_known_hosts(), HOST_KEY_CHECKING_ENV)
    hostkeys.write(path, entries)
    LOG.info("known_hosts of %s: %s (%d host(s))", name, path, len(entries))
    if missing:
        by_id = ", ".join(f"{instances[a]} ({a})" for a in missing)
        text = (f"no SSH host keys in the console output of {by_id} yet. Fix: run `make provision` again in a minute "
                f"(it only fetches the keys), or {HOST_KEY_CHECKING_ENV}=accept-new to trust them on first use")
        if env.get(HOST_KEY_CHECKING_ENV) != "accept-new":
            raise ProvisionError(text)
        LOG.warning("%s", text)
    return path


def remaining(ec2: Any, cluster_name: str, out: Mapping[str, Any]) -> clusters.Members:
    """After a destroy: which instances of the state (``out``: the outputs read before it) are still live, and
    what else carries the cluster tag (not ours: Terraform destroys only what its state holds)."""
    return clusters.remaining_instances(ec2, cluster_name, clusters.state_slots(out.get("hosts")))


def apply(tf_dir: Path, env: Mapping[str, str], tf_vars: list[str], approve: list[str],
          target: awscheck.Target) -> None:
    try:
        run_terraform(["apply", *approve, *tf_vars], tf_dir, env)
    except ProvisionError as exc:
        advice = awscheck.explain(exc.output, target.instance_type, target.region)
        if advice:
            raise ProvisionError("terraform apply failed:\n  " + "\n  ".join(advice), exc.output) from None
        raise


def destroy(tf_dir: Path, env: Mapping[str, str], tf_vars: list[str], approve: list[str],
            extra: Sequence[str]) -> None:
    out = outputs(tf_dir, env)
    name = str(out.get("cluster_name") or state_cluster_name(tf_dir, env) or "")
    run_terraform(["destroy", *approve, *tf_vars], tf_dir, env)
    if not name:
        LOG.info("nothing was applied here: no cluster to check")
        return
    ec2 = ec2_client(target_for(tf_dir, env, extra, out))
    left = remaining(ec2, name, out)
    text = clusters.render_remaining(name, left, getattr(getattr(ec2, "meta", None), "region_name", None))
    if left.ours:
        raise ProvisionError(f"still live after destroy: {text}")
    for line in text.splitlines():
        (LOG.warning if left.not_ours else LOG.info)("%s", line)
    if hostkeys.remove(hostkeys.path_for(name)):
        LOG.info("removed the known_hosts of %s", name)


def lifecycle_vars(declared: set[str], env: Mapping[str, str], now: datetime | None = None) -> list[str]:
    """-var pairs of the cost guard: expires_at from TTL (default 24 h) and autostop_down from DOWN (1: terminate,
    0: stop), for the variables the root declares. A bad TTL is refused before anything runs."""
    from tfcluster.core.duration import DurationError, expires_at, parse_duration

    pairs = []
    if "expires_at" in declared:
        try:
            ttl = parse_duration(env.get("TTL", "").strip() or DEFAULT_TTL, "TTL")
        except DurationError as exc:
            raise ProvisionError(str(exc.problem)) from None
        at = expires_at(ttl, now)
        if at is not None:
            pairs.append(f"expires_at={at}")
    down = {"1": "terminate", "0": "stop"}.get(env.get("DOWN", "").strip())
    if "autostop_down" in declared and down is not None:
        pairs.append(f"autostop_down={down}")
    return pairs


ROOT = "aws"  # infra/aws
PROVIDER = terraform_toolchain.REGISTRY
ACTIONS = ("apply", "plan", "destroy", "output", "upgrade", "known-hosts")


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Terraform's environment for AWS: the project's CLI config (the registry; TFCLUSTER_TF_MIRROR=1 the offline
    mirror) and your own credentials."""
    return terraform_toolchain.terraform_env(base, provider=PROVIDER)


def run(action: str, tf_dir: Path, env: dict[str, str], options: Options) -> int:
    """One action on infra/aws (tfcluster/provision/__main__.py lists them)."""
    workers, extra, auto_approve = options.workers, options.extra, options.auto_approve
    guard_twin_override(tf_dir, env)
    pairs = list(extra)
    if workers is not None:
        pairs.append("slots=" + hcl_value({WORKER: workers}))
    if action in ("apply", "plan"):
        pairs += lifecycle_vars(awscheck.declared_variables(tf_dir), env)
    tf_vars = var_args(pairs)
    if action == "output":
        print(run_terraform(["output", "-json"], tf_dir, env, capture=True).stdout, end="")
        return 0
    if action == "known-hosts":
        fill_known_hosts(tf_dir, env, pairs)
        return 0
    mirror = terraform_toolchain.mode_for(PROVIDER, env) == terraform_toolchain.OVERRIDE
    if action == "upgrade" and mirror:
        raise ProvisionError(f"the offline mirror holds only aws {terraform_toolchain.PROVIDER_VERSION}: nothing to "
                             "upgrade to. Fix: unset TFCLUSTER_TF_MIRROR (upgrading takes the registry)")
    target = awscheck.preflight(tf_dir, env, pairs, mirror=mirror) if action in ("plan", "apply") else None
    prepare(tf_dir, env, PROVIDER, upgrade=action == "upgrade")
    approve = ["-auto-approve"] if auto_approve else []
    if action == "upgrade":
        LOG.info("upgraded: the lock file %s now selects hashicorp/aws %s", tf_dir / ".terraform.lock.hcl",
                 terraform_toolchain.locked_version(tf_dir))
    elif action == "plan":
        plan(tf_dir, env, tf_vars, options.plan_hosts)
    elif action == "apply":
        assert target is not None
        apply(tf_dir, env, tf_vars, approve, target)
        fill_known_hosts(tf_dir, env, pairs)
    else:
        destroy(tf_dir, env, tf_vars, approve, pairs)
    return 0


def plan(tf_dir: Path, env: Mapping[str, str], tf_vars: list[str], plan_hosts: Path | None) -> None:
    """`terraform plan` on the terminal, saved, and its planned hosts for the plan view."""
    with tempfile.TemporaryDirectory() as tmp:
        plan_file = Path(tmp) / "plan.tfplan"
        run_terraform(["plan", "-input=false", f"-out={plan_file}", *tf_vars], tf_dir, env)
        write_planned_hosts(tf_dir, env, plan_file, plan_hosts)
