"""CLUSTER=local (the `make demo` default): the same Terraform module as AWS, applied against an emulated AWS
endpoint on 127.0.0.1 (moto), whose root serves every slot from this machine as a local process."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from tfcluster.kinds.base import Kind, KindError, Target, Traits
from tfcluster.provision import localaws
from tfcluster.provision import terraform as toolchain


class Local(Kind):
    name: ClassVar[str] = "local"
    summary: ClassVar[str] = "emulated AWS on loopback; workers are local processes"
    backend: ClassVar[str | None] = "local"
    provider: ClassVar[str] = toolchain.MIRROR
    traits: ClassVar[Traits] = Traits(autostop=False, firewall=False, boot_wait=60)  # local slots: no host to guard

    def still_running(self, target: Target) -> list[str]:
        """Said only when the emulated endpoint runs (no endpoint: no local cluster exists, nothing to tear down)."""
        if localaws.running(localaws.state_dir()) is None:
            return []
        return [f"still running: the emulated cluster {target.name} (no cost: it exists only in moto). Tear it down: "
                "make destroy CLUSTER=local"]

    def ec2(self, target: Target) -> Any:
        endpoint = localaws.running(localaws.state_dir())
        if endpoint is None:
            raise KindError("the emulated AWS endpoint is not running: no local cluster exists. Fix: `make "
                            "provision` (CLUSTER=local)")
        return localaws.ec2_client(endpoint.url)

    def start(self, target: Target, env: Mapping[str, str] | None = None) -> list[str]:
        """The emulated instances (moto stops and starts them; the slots are local processes either way), then a
        refresh of infra/local's state."""
        from tfcluster.cost import clusters
        from tfcluster.provision import local as provision_local
        from tfcluster.provision.common import ProvisionError, run_terraform, state_outputs, var_args

        endpoint = localaws.running(localaws.state_dir())
        tf_dir = self.tf_dir(target)
        if endpoint is None or tf_dir is None:
            raise KindError("the emulated AWS endpoint is not running: no local cluster exists. Fix: `make "
                            "provision` (CLUSTER=local)")
        tf_env = provision_local.environment(dict(env) if env is not None else None)
        out = state_outputs(tf_dir, tf_env)
        state = clusters.state_slots(out.get("hosts"))
        name = str(out.get("cluster_name") or target.name)
        if not state:
            raise KindError(f"no applied local cluster in {tf_dir}. Fix: `make provision` (CLUSTER=local)")
        try:
            result = clusters.start_instances(localaws.ec2_client(endpoint.url), name, state, interval=0.5)
            tf_vars = var_args(provision_local.local_vars(tf_env, endpoint.url, target.workers))
            run_terraform(["apply", "-refresh-only", "-auto-approve", "-input=false", *tf_vars], tf_dir, tf_env,
                          capture=True)
        except (clusters.StartError, ProvisionError) as exc:
            raise KindError(str(exc)) from None
        return [clusters.start_text(name, result, cost="no cost (it exists only in moto)")]
