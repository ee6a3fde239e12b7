"""CLUSTER=local (the `make demo` default): the same Terraform module as AWS, applied against an emulated AWS
endpoint on 127.0.0.1 (moto), whose root serves every slot from this machine as a local process."""

from __future__ import annotations

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
        return [f"still running: the emulated cluster {target.name} (no cost: it exists only in moto). Tear it down: "
                "make destroy CLUSTER=local"]

    def ec2(self, target: Target) -> Any:
        endpoint = localaws.running(localaws.state_dir())
        if endpoint is None:
            raise KindError("the emulated AWS endpoint is not running: no local cluster exists. Fix: `make "
                            "provision` (CLUSTER=local)")
        return localaws.ec2_client(endpoint.url)
