"""A host this machine cannot reach whose cloud instance is gone: the wait asks EC2 (CLUSTER=aws) instead of
retrying it for the unreachable grace. A host unreachable for ``after`` consecutive polls, and no more than once every
``every`` seconds for the whole cluster, is looked up (only the state's instances); a terminated, stopped or
impaired instance marks its host's poll ``gone`` with why, and the wait's decision fails the job naming it at once
(tfcluster/run/wait.py): `make train` then replaces the slot (RECOVER). EC2 that cannot be asked changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from tfcluster.provision.recover import lost_instances

LOG = logging.getLogger(__name__)
AFTER = 2  # consecutive unreachable polls before EC2 is asked
EVERY = 15.0  # seconds between two questions to EC2


class InstanceCheck:
    def __init__(self, instances: Mapping[str, str], region: str | None, *, after: int = AFTER,
                 every: float = EVERY, client: Callable[[], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.instances = {str(host): str(iid) for host, iid in instances.items() if iid}
        self.region, self.after, self.every, self.clock = region or None, after, every, clock
        self.client = client or self._boto3
        self.asked = -float("inf")
        self.gone: dict[str, str] = {}

    def _boto3(self) -> Any:
        import boto3

        return boto3.session.Session().client("ec2", region_name=self.region)

    def mark(self, polls: Mapping[str, dict[str, Any]], failures: Mapping[str, int]) -> dict[str, dict[str, Any]]:
        """``polls`` with ``gone`` set on each unreachable host whose instance EC2 says is lost."""
        away = [host for host in polls if host in self.instances and failures.get(host, 0) >= self.after]
        if away and self.clock() - self.asked >= self.every:
            self.asked = self.clock()
            try:
                self.gone.update(lost_instances(self.client(), {self.instances[h]: h for h in away}))
            except Exception as exc:  # EC2 out of reach (this machine's network is down): keep retrying the host
                LOG.debug("EC2 not asked: %s", exc)
        return {host: ({**poll, "gone": self.gone[host]} if host in self.gone and host in away else poll)
                for host, poll in polls.items()}
