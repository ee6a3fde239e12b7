"""A lost host replaced alone (`make train` with RECOVER, CLUSTER=aws): which slots of the applied state lost their
instance, and the replacement of one slot's instance by Terraform, with its new host keys.

    lost = lost_slots(ec2, outputs)          # {"worker-1": "terminated (Server.SpotInstanceTermination: ...)"}
    lines = replace_slot(tf_dir, env, "worker-1")

A slot is lost when its instance is gone from EC2, terminated or shutting down, stopped (a spot interruption that
stops, a host that powered off), or running while EC2 reports its instance or system status check impaired. Only
that slot's resource is replaced (``terraform apply -replace`` of the one ``aws_instance`` or
``aws_spot_instance_request``, with the cost guard's settings the state holds): every other instance keeps its id, its
disk and its prepared runtime. What EC2 answers is data: only instances of the state are read, states and reasons are
escaped before they are shown.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfcluster.core.text import printable
from tfcluster.cost import clusters
from tfcluster.provision import aws as provision_aws
from tfcluster.provision import awscheck
from tfcluster.provision.common import ProvisionError, run_terraform, var_args

LOG = logging.getLogger(__name__)
RUNNING = ("pending", "running")
MODULE = "module.cluster"  # the gpu_cluster module in the aws root (infra/aws/main.tf)


def slot_names(out: Mapping[str, Any]) -> dict[str, str]:
    """{instance id: slot name ("worker-1")} of the applied state's `hosts` output."""
    found = {}
    for instance_id, slot in clusters.state_slots(out.get("hosts")).items():
        task_type, _, index = slot.partition(":")
        found[instance_id] = f"{task_type}-{index}"
    return found


def _why(instance: Mapping[str, Any]) -> str:
    state = str((instance.get("State") or {}).get("Name") or "unknown")
    reason = instance.get("StateReason") or {}
    detail = reason.get("Message") or reason.get("Code") or ""
    return printable(f"{state} ({detail})" if detail else state, 300)


def lost_slots(ec2: Any, out: Mapping[str, Any]) -> dict[str, str]:
    """{slot name: why} of the state's slots whose instance is lost (see the module docstring)."""
    return lost_instances(ec2, slot_names(out))


def lost_instances(ec2: Any, names: Mapping[str, str]) -> dict[str, str]:
    """{name: why} of the instances ``names`` ({instance id: name}) whose instance is lost."""
    if not names:
        return {}
    seen: dict[str, Mapping[str, Any]] = {}
    for instance_id in names:  # one by one: an id EC2 no longer knows must not hide the others
        try:
            reply = ec2.describe_instances(InstanceIds=[instance_id])
        except Exception as exc:  # botocore's ClientError: InvalidInstanceID.NotFound (gone for good)
            if "NotFound" not in str(exc):
                raise
            continue
        for reservation in reply.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                if instance.get("InstanceId") == instance_id:
                    seen[instance_id] = instance
    lost = {names[i]: "gone from EC2" for i in names if i not in seen}
    lost.update({names[i]: _why(instance) for i, instance in seen.items()
                 if (instance.get("State") or {}).get("Name") not in RUNNING})
    running = [i for i, instance in seen.items() if (instance.get("State") or {}).get("Name") == "running"]
    if running:
        statuses = ec2.describe_instance_status(InstanceIds=running).get("InstanceStatuses", [])
        for status in statuses:
            failing = [kind for kind in ("InstanceStatus", "SystemStatus")
                       if (status.get(kind) or {}).get("Status") == "impaired"]
            if failing and status.get("InstanceId") in names:
                lost[names[status["InstanceId"]]] = f"running, {' and '.join(failing)} check impaired"
    return dict(sorted(lost.items()))


def resource_address(out: Mapping[str, Any], slot: str) -> str:
    """The Terraform address of ``slot``'s instance: the spot request when the state's hosts are spot."""
    kind = "aws_spot_instance_request" if out.get("spot") is True else "aws_instance"
    return f'{MODULE}.{kind}.this["{slot}"]'


def replace_slot(tf_dir: Path, env: Mapping[str, str], slot: str) -> list[str]:
    """Replace ``slot``'s instance alone and trust its new host keys (read from its console, as at provision; the
    other instances keep theirs). Lines to print."""
    before = provision_aws.outputs(tf_dir, env)
    if slot not in slot_names(before).values():
        raise ProvisionError(f"slot {slot} is not in the applied state of {tf_dir}. Fix: make provision")
    declared = awscheck.declared_variables(tf_dir)
    address = resource_address(before, slot)
    run_terraform(["apply", "-auto-approve", "-input=false", f"-replace={address}",
                   *var_args(provision_aws.refresh_vars(declared, before))], tf_dir, env, capture=True)
    after = provision_aws.outputs(tf_dir, env)
    new_id = next((i for i, name in slot_names(after).items() if name == slot), None)
    old_id = next((i for i, name in slot_names(before).items() if name == slot), None)
    if new_id is None or new_id == old_id:
        raise ProvisionError(f"terraform apply -replace={address} left slot {slot} without a new instance. Fix: "
                             "make provision, then make train")
    provision_aws.fill_known_hosts(tf_dir, env, (), before=before)
    return [f"replaced {slot}: {old_id} -> {new_id} ({address}); the other instances kept"]
