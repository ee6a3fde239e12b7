"""CLUSTER=aws for `tfcluster.provision.local`: preflight, init from the registry (or the opt-in mirror), apply with AWS
errors explained, host keys from the console output, destroy with a check through the EC2 API.

Called by `python -m tfcluster.provision ACTION --backend aws` (tfcluster/provision/__main__.py); `make start` calls
:func:`start` through the aws kind.

Environment (the Makefile's variables, checked by the `tfcluster` command first): TTL (expires_at), DOWN
(autostop_down), IDLE (autostop_idle_minutes: the boot guard's idle time, 0 for off), AMI=refresh (apply and plan
with ``-replace`` of the kept AMI: every host is replaced with the newest image), ALL_OR_NOTHING=1 (an apply that
could not launch every slot tears down what did launch).

Capacity: an apply that fails with InsufficientInstanceCapacity (spot: capacity-not-available) is tried again in the
next zone of the region that offers the type (the root's ``offering_zones``), unless the zone is pinned
(availability_zone, subnet_id or a capacity reservation / Capacity Block); every zone tried is named.
"""

from __future__ import annotations

import json
import logging
import math
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from tfcluster.core.contract import WORKER
from tfcluster.core.duration import parse_time
from tfcluster.core.text import printable
from tfcluster.cost import clusters, prices
from tfcluster.provision import awscheck
from tfcluster.provision import known_hosts as hostkeys
from tfcluster.provision import terraform as terraform_toolchain
from tfcluster.provision.common import (
    TWIN_ENV,
    TWIN_OVERRIDE,
    Options,
    ProvisionError,
    hcl_value,
    planned_hosts,
    prepare,
    run_terraform,
    state_cluster_name,
    state_outputs,
    state_resources,
    var_args,
)

LOG = logging.getLogger("provision")
HOST_KEY_CHECKING_ENV = "TFCLUSTER_HOST_KEY_CHECKING"
DEFAULT_TTL = "24h"  # CLUSTER=aws: the tfcluster:expires tag unless TTL says otherwise (TTL=off: none)
AMI_RESOURCE = "module.cluster.terraform_data.ami"  # the kept AMI (infra/modules/gpu_cluster): AMI=refresh replaces it
AMI_REFRESH = "refresh"
# An apply that found no capacity in its zone: on-demand, and a one-time spot request's status code.
CAPACITY_ERRORS: tuple[str, ...] = ("InsufficientInstanceCapacity", "capacity-not-available")
# The slots' instances in a state listing or an error ("with module.cluster.aws_instance.this["worker-1"]").
_SLOT_RESOURCE = re.compile(r'aws_(?:instance|spot_instance_request)\.this\["([A-Za-z0-9_.-]+)"\]')
_SUBNET = re.compile(r"^(?:module\.[A-Za-z0-9_-]+\.)*aws_subnet\.this\[0\]$")
RESTARTED_AFTER = 300  # seconds between the root volume's attachment and the launch: stopped and started since


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


def restarted(instance: Mapping[str, Any], after: float = RESTARTED_AFTER) -> bool:
    """Whether an instance was stopped and started since its launch: EC2 moves LaunchTime to the last start, while
    its root volume keeps the time it was attached at the first launch."""
    launched = instance.get("LaunchTime")
    attached = [m.get("Ebs", {}).get("AttachTime") for m in instance.get("BlockDeviceMappings") or ()]
    attached = [a for a in attached if isinstance(a, datetime)]
    if not isinstance(launched, datetime) or not attached:
        return False
    return (launched - min(attached)).total_seconds() > after


def missing_keys_text(missing: Sequence[tuple[str, str, bool]], waited: float) -> str:
    """Why the hosts ``missing`` ([(instance id, address, restarted)]) have no trusted key, and what to do; it never
    tells a user to run it again when that cannot help (a restarted instance prints no keys)."""
    again = [f"{i} ({a})" for i, a, was in missing if not was]
    restarted_ids = [f"{i} ({a})" for i, a, was in missing if was]
    parts = []
    if restarted_ids:
        parts.append(f"no trusted SSH host key for {', '.join(restarted_ids)}: it was stopped and started since its "
                     "launch, and cloud-init prints the host keys on an instance's first boot only (the console shows "
                     "none now), while this cluster's known_hosts holds none for it. Fix: start a stopped cluster "
                     f"with `make start` (it keeps the keys it trusts); for this one, {HOST_KEY_CHECKING_ENV}="
                     "accept-new trusts its keys on first use")
    if again:
        parts.append(f"no SSH host keys in the console output of {', '.join(again)} after {waited:.0f} s (a new "
                     "instance prints them 1-4 min after it runs). Fix: check that it boots (aws ec2 "
                     "get-console-output --instance-id ID); `make provision` again only fetches the keys "
                     f"(TFCLUSTER_HOST_KEY_TIMEOUT=1200 waits longer), or {HOST_KEY_CHECKING_ENV}=accept-new trusts "
                     "them on first use")
    return "; ".join(parts)


def _restarted_ids(ec2: Any, ids: Sequence[str]) -> set[str]:
    if not ids:
        return set()
    try:
        pages = ec2.get_paginator("describe_instances").paginate(InstanceIds=list(ids))
        return {i["InstanceId"] for page in pages for r in page.get("Reservations", []) for i in r.get("Instances", [])
                if restarted(i)}
    except Exception:  # the advice only: never fail the step for it
        return set()


def fill_known_hosts(tf_dir: Path, env: Mapping[str, str], extra: Sequence[str], *,
                     timeout: float | None = None, before: Mapping[str, Any] | None = None) -> Path | None:
    """Write the cluster's known_hosts from the instances' console output (and the bastion's from the user's own).

    ``before``: the outputs before this step. An instance it held (the same instance id, at any address) keeps the
    keys the file trusted for it, without a console read: a host key survives a stop and start, and cloud-init
    prints it on the first boot only."""
    out = outputs(tf_dir, env)
    name = out.get("cluster_name")
    if not name:
        return None
    path = hostkeys.path_for(str(name))
    instances = ssh_addresses(out)
    carried = hostkeys.carried_keys(hostkeys.read(path), ssh_addresses(before), instances) if before else {}
    fetch = {address: iid for address, iid in instances.items() if address not in carried}
    ec2 = ec2_client(target_for(tf_dir, env, extra, out))
    found, missing = hostkeys.fetch_console_keys(ec2, fetch, timeout=timeout) if fetch else ({}, [])
    if carried:
        LOG.info("kept the trusted host keys of %d instance(s) that were there before", len(carried))
    entries: dict[str, list[str]] = {**carried, **found}
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
        again = _restarted_ids(ec2, [instances[a] for a in missing])
        waited = hostkeys.DEFAULT_TIMEOUT if timeout is None else timeout
        text = missing_keys_text([(instances[a], a, instances[a] in again) for a in missing], waited)
        if env.get(HOST_KEY_CHECKING_ENV) != "accept-new":
            raise ProvisionError(text)
        LOG.warning("%s", text)
    return path


def remaining(ec2: Any, cluster_name: str, out: Mapping[str, Any]) -> clusters.Members:
    """After a destroy: which instances of the state (``out``: the outputs read before it) are still live, and
    what else carries the cluster tag (not ours: Terraform destroys only what its state holds)."""
    return clusters.remaining_instances(ec2, cluster_name, clusters.state_slots(out.get("hosts")))


# ---- capacity: the next zone, and what launched -------------------------------------------------------------------
@dataclass(frozen=True)
class CapacityStep:
    """What to do after a failed apply: try ``zone``, or stop (``zone`` None) because of ``reason``."""

    zone: str | None
    reason: str


def capacity_error(text: str) -> str | None:
    """The capacity error in Terraform's output, or None."""
    return next((code for code in CAPACITY_ERRORS if code in text), None)


def capacity_step(output: str, pins: Sequence[str], offering: Sequence[str], tried: Sequence[str]) -> CapacityStep:
    """Pure: the next zone to apply in after a failed apply (its output), or why not. ``pins``: what pins the zone
    (availability_zone, subnet_id, a capacity reservation); ``offering``: the zones that offer the type, in the
    root's order; ``tried``: the zones tried so far."""
    code = capacity_error(output)
    if code is None:
        return CapacityStep(None, "not a capacity error")
    if pins:
        return CapacityStep(None, f"{code}: the zone is pinned ({', '.join(pins)}), so no other zone is tried")
    left = [zone for zone in offering if zone not in tried]
    if not left:
        return CapacityStep(None, f"{code} in every zone that offers the type: {', '.join(tried) or 'none'} tried")
    return CapacityStep(left[0], f"{code} in {', '.join(tried) or 'the first zone'}")


def _tfvars_texts(tf_dir: Path) -> list[str]:
    files = [tf_dir / "terraform.tfvars", *sorted(tf_dir.glob("*.auto.tfvars"))]
    return [path.read_text(errors="replace") for path in files if path.is_file()]


def _tfvars_json(tf_dir: Path) -> list[dict[str, Any]]:
    found = []
    for path in [tf_dir / "terraform.tfvars.json", *sorted(tf_dir.glob("*.auto.tfvars.json"))]:
        try:
            data = json.loads(path.read_text()) if path.is_file() else None
        except ValueError:
            data = None
        if isinstance(data, dict):
            found.append(data)
    return found


_SUBNET_SET = re.compile(r'^\s*subnet_id\s*=\s*"[^"]+"', re.M)
_RESERVED = re.compile(r'reservation_id\s*=\s*"[^"]+"|capacity_block\s*=\s*true')


def zone_pins(tf_dir: Path, env: Mapping[str, str], extra: Sequence[str]) -> list[str]:
    """What pins the zone of the root (TF_VAR_*, terraform.tfvars[.json], *.auto.tfvars, -var; simple assignments,
    as awscheck reads them): availability_zone, subnet_id, or a capacity reservation or Capacity Block (both live in
    one zone)."""
    pins = []
    zone = awscheck.root_settings(tf_dir, env, extra).get("availability_zone")
    if zone:
        pins.append(f"availability_zone = {zone}")
    texts = _tfvars_texts(tf_dir)
    data = _tfvars_json(tf_dir)
    pairs = dict(pair.partition("=")[::2] for pair in extra)
    subnet = (env.get("TF_VAR_subnet_id") or pairs.get("subnet_id") or any(_SUBNET_SET.search(t) for t in texts)
              or any(d.get("subnet_id") for d in data))
    if subnet and pairs.get("subnet_id") != "null":
        pins.append("subnet_id")
    capacity = [env.get("TF_VAR_capacity", ""), pairs.get("capacity", ""), *texts]
    json_capacity = [d.get("capacity") for d in data if isinstance(d.get("capacity"), dict)]
    if any(_RESERVED.search(text) for text in capacity) or any(
            c.get("reservation_id") or c.get("capacity_block") is True for c in json_capacity):
        pins.append("capacity (a reservation or Capacity Block)")
    return pins


def slots_in(lines: Sequence[str] | str) -> list[str]:
    """The slots (``worker-1``) whose instance a state listing holds, or an error names, in order, once each."""
    text = lines if isinstance(lines, str) else "\n".join(lines)
    return list(dict.fromkeys(_SLOT_RESOURCE.findall(text)))


def subnet_address(resources: Sequence[str]) -> str | None:
    """The created subnet's address in the state (None: none, e.g. subnet_id given)."""
    return next((r for r in resources if _SUBNET.match(r)), None)


def partial_text(launched: Sequence[str], failed: Sequence[str], instance_type: str, teardown: str) -> str:
    """Not every slot launched: which did (and bill), which did not, and the one command that tears it down."""
    cost = prices.estimate([instance_type] * len(launched)).text()
    missing = f"; not launched: {', '.join(failed)}" if failed else ""
    return (f"not every slot launched. Launched and billed now (about {cost} per hour): {', '.join(launched)}"
            f"{missing}. Fix: tear down what launched: {teardown} (ALL_OR_NOTHING=1 on `make provision` does it at "
            "once), or run `make provision` again later to add the missing slots")


def _zone_of(out: Mapping[str, Any], asked: str | None, offering: Sequence[str]) -> str | None:
    zone = out.get("availability_zone")
    return zone if isinstance(zone, str) and zone else asked or (offering[0] if offering else None)


def _offering(out: Mapping[str, Any], ec2: Any, instance_type: str) -> list[str]:
    zones = out.get("offering_zones")
    if isinstance(zones, list) and zones:
        return [str(z) for z in zones]
    try:
        return awscheck.offered_zones(ec2, [instance_type]).get(instance_type, [])
    except Exception as exc:  # only the failover needs it
        LOG.warning("cannot list the zones that offer %s (%s): no other zone is tried", instance_type, exc)
        return []


def apply(tf_dir: Path, env: Mapping[str, str], tf_vars: list[str], approve: list[str],
          target: awscheck.Target, *, extra: Sequence[str] = (), before: Mapping[str, Any] | None = None) -> None:
    """`terraform apply`; on a capacity error, again in the next zone that offers the type (unless the zone is
    pinned, or hosts applied before would move: ``before``, the outputs before this apply); when it still fails,
    AWS's error explained and, when not every slot launched, what did, its cost and the teardown (ALL_OR_NOTHING=1:
    done here)."""
    pins = zone_pins(tf_dir, env, extra)
    if clusters.state_slots((before or {}).get("hosts")):
        pins.append("hosts applied before, which another zone would replace")
    tried: list[str] = []
    retry: list[str] = []
    asked: str | None = None
    offering: list[str] | None = None
    while True:
        try:
            run_terraform(["apply", *approve, *tf_vars, *retry], tf_dir, env)
        except ProvisionError as exc:
            out = outputs(tf_dir, env)
            if offering is None:
                offering = _offering(out, ec2_client(target), target.instance_type) if capacity_error(
                    exc.output) and not pins else []
            zone = _zone_of(out, asked, offering)
            tried += [zone] if zone and zone not in tried else []
            step = capacity_step(exc.output, pins, offering, tried)
            if step.zone is None:
                raise _apply_failure(tf_dir, env, exc, target=target, step=step, tried=tried, extra=extra) from None
            asked = step.zone
            subnet = subnet_address(state_resources(tf_dir, env))
            retry = ["-var", f"availability_zone={step.zone}", *([f"-replace={subnet}"] if subnet else [])]
            LOG.warning("%s: trying %s (zones tried: %s)", step.reason, step.zone, ", ".join(tried))
            continue
        if tried:
            LOG.info("launched in %s (no capacity in %s)", asked, ", ".join(tried))
        return


def _apply_failure(tf_dir: Path, env: Mapping[str, str], exc: ProvisionError, *, target: awscheck.Target,
                   step: CapacityStep, tried: Sequence[str], extra: Sequence[str]) -> ProvisionError:
    """The error of an apply that will not be tried again: AWS's meaning, the zones tried, what launched."""
    advice = awscheck.explain(exc.output, target.instance_type, target.region)
    if capacity_error(exc.output):
        advice.append(f"zones tried: {', '.join(tried) or '?'} ({step.reason}). Next: a capacity reservation or a "
                      "Capacity Block (capacity = { ... }, infra/examples/efa), another instance type, or later")
    launched = slots_in(state_resources(tf_dir, env))
    failed = [slot for slot in slots_in(exc.output) if slot not in launched]
    if launched and failed:
        name = str(outputs(tf_dir, env).get("cluster_name") or state_cluster_name(tf_dir, env) or "")
        if env.get("ALL_OR_NOTHING", "").strip() == "1":
            LOG.warning("ALL_OR_NOTHING=1: tearing down the %d instance(s) that launched: %s", len(launched),
                        ", ".join(launched))
            destroy(tf_dir, env, var_args(extra), ["-auto-approve"], extra)
            advice.append(f"ALL_OR_NOTHING=1: what launched ({', '.join(launched)}) was destroyed; nothing of the "
                          "cluster is left (checked through the EC2 API)")
        else:
            advice.append(partial_text(launched, failed, target.instance_type,
                                       clusters.TEARDOWN.format(name=name or "NAME")))
    if not advice:
        return exc
    return ProvisionError("terraform apply failed:\n  " + "\n  ".join(advice), exc.output)


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
    """-var pairs of the cost guard: expires_at from TTL (default 24 h), autostop_down from DOWN (1: terminate,
    0: stop) and the boot guard's autostop_idle_minutes from IDLE (minutes, rounded up; off: 0), for the variables
    the root declares. A bad TTL or IDLE is refused before anything runs."""
    from tfcluster.core.duration import IDLE, DurationError, expires_at, parse_duration

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
    idle = env.get("IDLE", "").strip()
    if "autostop_idle_minutes" in declared and idle:
        try:
            seconds = parse_duration(idle, IDLE)
        except DurationError as exc:
            raise ProvisionError(str(exc.problem)) from None
        pairs.append(f"autostop_idle_minutes={0 if seconds is None else math.ceil(seconds / 60)}")
    return pairs


def ami_args(env: Mapping[str, str]) -> list[str]:
    """AMI=refresh: replace the kept AMI (every host is replaced with the newest image, or ami_id)."""
    value = env.get("AMI", "").strip()
    if value == AMI_REFRESH:
        return [f"-replace={AMI_RESOURCE}"]
    if value:
        raise ProvisionError(f"AMI={value!r}: the only value is AMI=refresh (replace every host with the newest "
                             "image). Fix: leave AMI out to keep the image the hosts run, or pin one with ami_id")
    return []


def image_line(plan: Mapping[str, Any]) -> str | None:
    """`make plan`'s newer-image line from a `terraform show -json PLAN` document: the lookup's newest image when
    the hosts run another (None: the same, none applied yet, or ami_id pins it). Image names are anyone's text:
    printable."""
    found = plan.get("planned_values", {}).get("outputs", {})
    latest = found.get("ami_latest", {}).get("value") if isinstance(found.get("ami_latest"), Mapping) else None
    in_use = found.get("ami_in_use", {}).get("value") if isinstance(found.get("ami_in_use"), Mapping) else None
    if not isinstance(latest, Mapping) or not latest.get("id") or not isinstance(in_use, list) or not in_use:
        return None
    if latest["id"] in in_use:
        return None
    return printable(f"newer image: {latest.get('name') or '?'} ({latest['id']}, {latest.get('creation_date') or '?'}"
                     f"); the hosts run {', '.join(map(str, in_use))}. make provision AMI=refresh replaces every host "
                     "with it (their disks are lost: collect first)", 600)


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
    tf_vars = var_args(pairs) + (ami_args(env) if action in ("apply", "plan") else [])
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
        before = outputs(tf_dir, env)
        apply(tf_dir, env, tf_vars, approve, target, extra=pairs, before=before)
        fill_known_hosts(tf_dir, env, pairs, before=before)
    else:
        destroy(tf_dir, env, tf_vars, approve, pairs)
    return 0


def plan(tf_dir: Path, env: Mapping[str, str], tf_vars: list[str], plan_hosts: Path | None) -> None:
    """`terraform plan` on the terminal, saved; its planned hosts for the plan view, and a newer image named."""
    with tempfile.TemporaryDirectory() as tmp:
        plan_file = Path(tmp) / "plan.tfplan"
        run_terraform(["plan", "-input=false", f"-out={plan_file}", *tf_vars], tf_dir, env)
        shown = json.loads(run_terraform(["show", "-json", str(plan_file)], tf_dir, env, capture=True).stdout)
    if plan_hosts is not None:
        plan_hosts.write_text(json.dumps(planned_hosts(shown), sort_keys=True))
    line = image_line(shown)
    if line:
        LOG.warning("%s", line)


# ---- make start ----------------------------------------------------------------------------------------------------
def refresh_vars(declared: set[str], out: Mapping[str, Any]) -> list[str]:
    """-var pairs that keep what the applied state says of the cost guard (a refresh recomputes the outputs from the
    configuration: without them expires_at would read null)."""
    pairs = []
    if "expires_at" in declared and isinstance(out.get("expires_at"), str) and out["expires_at"]:
        pairs.append(f"expires_at={out['expires_at']}")
    if "autostop_down" in declared and out.get("autostop_down") in clusters.SHUTDOWN_BEHAVIORS:
        pairs.append(f"autostop_down={out['autostop_down']}")
    guard = out.get("autostop") if isinstance(out.get("autostop"), Mapping) else {}
    settings = guard.get("settings") if isinstance(guard.get("settings"), Mapping) else {}
    idle = settings.get("idle_minutes")
    if "autostop_idle_minutes" in declared and isinstance(idle, int) and isinstance(settings.get("enabled"), bool):
        pairs.append(f"autostop_idle_minutes={idle if settings['enabled'] else 0}")
    return pairs


def start(tf_dir: Path, env: Mapping[str, str], ec2: Any | None = None, *, timeout: float = 600.0,
          interval: float = 5.0) -> list[str]:
    """`make start`: start the state's stopped instances, wait until they run, refresh the addresses through
    Terraform (`apply -refresh-only`), and re-key the cluster's known_hosts to the new addresses by instance id (a
    host key survives a stop and start). Lines to print."""
    guard_twin_override(tf_dir, env)
    before = outputs(tf_dir, env)
    name = str(before.get("cluster_name") or "")
    state = clusters.state_slots(before.get("hosts"))
    if not name or not state:
        raise ProvisionError(f"no applied cluster in {tf_dir} (no hosts in its Terraform state). Fix: `make "
                             "provision` creates one; `make start` starts a stopped one")
    ec2 = ec2 or ec2_client(target_for(tf_dir, env, (), before))
    result = clusters.start_instances(ec2, name, state, timeout=timeout, interval=interval)
    declared = awscheck.declared_variables(tf_dir)
    run_terraform(["apply", "-refresh-only", "-auto-approve", "-input=false",
                   *var_args(refresh_vars(declared, before))], tf_dir, env, capture=True)
    path = fill_known_hosts(tf_dir, env, (), timeout=0, before=before)
    lines = [clusters.start_text(name, result)]
    if path is not None:
        lines.append(f"known_hosts of {name}: {path} (the keys it trusted, at the new addresses)")
    expires = parse_time(before.get("expires_at"))
    if expires is not None and expires <= datetime.now(timezone.utc) + timedelta(minutes=1):
        lines.append(f"past its expiry {before['expires_at']}: started on purpose, so only the idle time powers the "
                     "hosts off this boot (make provision TTL=... sets a new expiry)")
    return lines
