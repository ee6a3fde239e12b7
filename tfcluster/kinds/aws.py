"""CLUSTER=aws: GPU instances on AWS from infra/aws (the public registry's provider), reached over SSH with the host
keys their console output printed at provision; idle autostop and the firewall on by default."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from tfcluster.core.duration import parse_time
from tfcluster.kinds.base import Kind, KindError, Target, Traits
from tfcluster.provision import aws as provision_aws
from tfcluster.provision import awscheck, known_hosts, recover
from tfcluster.provision import terraform as toolchain
from tfcluster.provision.common import ProvisionError, state_cluster_name


class Aws(Kind):
    name: ClassVar[str] = "aws"
    summary: ClassVar[str] = "GPU instances on AWS (infra/aws + terraform.tfvars)"
    backend: ClassVar[str | None] = "aws"
    provider: ClassVar[str] = toolchain.REGISTRY
    has_instances: ClassVar[bool] = True
    asks_before_apply: ClassVar[bool] = True
    traits: ClassVar[Traits] = Traits(autostop=True, firewall=True, boot_wait=600)  # instances print keys in 1-4 min

    def outputs(self, target: Target) -> dict[str, Any]:
        """The applied root's outputs ({} before the first apply). Terraform itself finds the state: a workspace's
        (terraform.tfstate.d/, TF_WORKSPACE, TF_DATA_DIR) or a remote backend's as well as ./terraform.tfstate."""
        tf_dir = self.tf_dir(target)
        if tf_dir is None or not tf_dir.is_dir():
            return {}
        return provision_aws.outputs(tf_dir, toolchain.terraform_env(provider=self.provider))

    def known_hosts(self, target: Target, env: Mapping[str, str]) -> Path | None:
        """The file `make provision` filled from the instances' console output."""
        tf_dir = self.tf_dir(target)
        tf_env = toolchain.terraform_env(dict(env), provider=self.provider)
        name = state_cluster_name(tf_dir, tf_env) if tf_dir else None
        path = known_hosts.path_for(name or target.name)
        return path if path.is_file() else None

    def playbook_vars(self, target: Target) -> dict[str, Any]:
        """Where backups go (checkpoint_s3), what an idle host's power-off does (autostop_down: stop | terminate; a
        terminating host waits for an uncollected job), when the cluster expires (expires_at: the autostop role
        keeps each host's expiry current; absent: none), and each host's instance and the region (the wait asks EC2
        about a host it cannot reach)."""
        outputs = self.outputs(target)
        found = {"tfcluster_checkpoint_s3": outputs.get("checkpoint_s3"),
                 "tfcluster_autostop_down": outputs.get("autostop_down"),
                 "tfcluster_expires_at": outputs.get("expires_at"), "tfcluster_region": outputs.get("region")}
        out: dict[str, Any] = {key: value for key, value in found.items() if isinstance(value, str) and value}
        instances = {name: instance_id for instance_id, name in recover.slot_names(outputs).items()}
        if instances:  # the wait asks EC2 about a host it cannot reach: an instance that is gone fails it at once
            out["tfcluster_instances"] = instances
        return out

    def expires_at(self, target: Target) -> datetime | None:
        return parse_time(self.outputs(target).get("expires_at"))

    def start(self, target: Target, env: Mapping[str, str] | None = None) -> list[str]:
        """Start the state's stopped instances (EC2 StartInstances), wait until they run, `terraform apply
        -refresh-only` for their new addresses, and re-key the cluster's known_hosts by instance id."""
        from tfcluster.cost.clusters import StartError

        tf_dir = self.tf_dir(target)
        assert tf_dir is not None
        tf_env = toolchain.terraform_env(dict(os.environ if env is None else env), provider=self.provider)
        try:
            return provision_aws.start(tf_dir, tf_env)
        except (ProvisionError, StartError, known_hosts.KnownHostsError, awscheck.AwsCheckError,
                toolchain.ToolchainError) as exc:
            raise KindError(str(exc)) from None

    def recover_default(self, target: Target) -> int:
        """1 on a spot cluster (AWS reclaims its hosts with two minutes' notice), else 0."""
        return 1 if self.outputs(target).get("spot") is True else 0

    def lost_slots(self, target: Target) -> dict[str, str]:
        return recover.lost_slots(self.ec2(target), self.outputs(target))

    def replace_slot(self, target: Target, slot: str) -> list[str]:
        tf_dir = self.tf_dir(target)
        assert tf_dir is not None
        try:
            return recover.replace_slot(tf_dir, toolchain.terraform_env(dict(os.environ), provider=self.provider),
                                        slot)
        except (ProvisionError, known_hosts.KnownHostsError, awscheck.AwsCheckError, toolchain.ToolchainError) as exc:
            raise KindError(str(exc)) from None

    def instance_slots(self, target: Target) -> dict[str, str]:
        from tfcluster.cost import clusters

        return clusters.state_slots(self.outputs(target).get("hosts"))

    def still_running(self, target: Target) -> list[str]:
        from tfcluster.cost import clusters

        try:
            return clusters.running_summary(self.ec2(target), target.name).splitlines()
        except Exception as exc:  # the summary must never turn a finished job into a failure
            return [f"could not list what is still running ({type(exc).__name__}: {exc}). Check: make clusters "
                    "CLUSTER=aws"]

    def ec2(self, target: Target) -> Any:
        """The region of the applied root, else AWS_REGION / AWS_DEFAULT_REGION / the profile's."""
        import boto3

        region = self.outputs(target).get("region")
        return boto3.session.Session().client("ec2", region_name=region or os.environ.get("AWS_REGION") or None)
