"""The AWS twin's EC2 endpoint: moto_server with two behaviours of a real account that moto does not have.

    python -m lab.twin_moto -H 127.0.0.1 -p PORT        (started by lab/twin.py through tfcluster.provision.localaws)

1. Console output: GetConsoleOutput of an instance returns the file TFCLUSTER_TWIN_CONSOLE_DIR/<instance id>
   when the twin has written it (the lab host that plays the instance has booted and "cloud-init" printed its
   host keys), else a kernel log without keys (still booting) — as a real instance's console does.
2. Private addresses: AWS gives an instance a free address of its subnet, never the first four or the last one;
   moto draws any address at random (duplicates, .0 and .255 included). Here: a random free one in the AWS range.
3. Detailed monitoring: the aws provider calls MonitorInstances after launch (the root's default); moto answers
   NotImplemented and the provider retries until its timeout. Here it switches monitoring on, as AWS does.

Everything else is moto as it is; MOTO_AMIS_PATH (set by the twin) seeds the images before moto is imported.
"""

from __future__ import annotations

import ipaddress
import os
import random
import sys
import threading
from pathlib import Path
from typing import Any

CONSOLE_ENV = "TFCLUSTER_TWIN_CONSOLE_DIR"
AWS_RESERVED_LOW = 4  # network, VPC router, DNS, future use

_used: dict[str, set[str]] = {}
_lock = threading.Lock()


def aws_private_ip(cidr: str | None = None, ipv6: bool = False) -> str:
    """A free IPv4 address of `cidr` in the range AWS hands out (moto's signature; other calls pass through)."""
    from moto.ec2 import utils

    if ipv6 or not cidr:
        return utils.random_private_ip(cidr, ipv6)
    network = ipaddress.IPv4Network(cidr)
    with _lock:
        used = _used.setdefault(cidr, set())
        free = [str(network.network_address + i) for i in range(AWS_RESERVED_LOW, network.num_addresses - 1)
                if str(network.network_address + i) not in used]
        if not free:
            raise RuntimeError(f"subnet {cidr} has no free address")
        address = random.choice(free)
        used.add(address)
        return address


def console_output(self: Any) -> Any:
    """GetConsoleOutput: the twin's file for the instance, else moto's sample (no host keys yet)."""
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow
    from moto.ec2.responses.general import SAMPLE_CONSOLE_OUTPUT
    from moto.ec2.utils import Base64EncodedString

    instance = self.ec2_backend.get_instance(self._get_param("InstanceId"))
    text = SAMPLE_CONSOLE_OUTPUT
    directory = os.environ.get(CONSOLE_ENV)
    if directory:
        path = Path(directory) / instance.id
        if path.is_file():
            text = path.read_text()
    return ActionResult({"InstanceId": instance.id, "Timestamp": utcnow(),
                         "Output": Base64EncodedString.from_raw_string(text)})


def set_monitoring(self: Any, state: str) -> Any:
    from moto.core.responses import ActionResult

    found = []
    for instance_id in self._get_param("InstanceIds", []):
        instance = self.ec2_backend.get_instance(instance_id)
        instance.monitoring_state = state
        found.append({"InstanceId": instance.id, "Monitoring": {"State": state}})
    return ActionResult({"InstanceMonitorings": found})


def patch() -> None:
    from moto.ec2.models import elastic_network_interfaces
    from moto.ec2.responses import general, monitoring

    elastic_network_interfaces.random_private_ip = aws_private_ip
    general.General.get_console_output = console_output
    monitoring.Monitoring.monitor_instances = lambda self: set_monitoring(self, "enabled")
    monitoring.Monitoring.unmonitor_instances = lambda self: set_monitoring(self, "disabled")


def main(argv: list[str] | None = None) -> None:
    patch()
    from moto import server

    server.main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
