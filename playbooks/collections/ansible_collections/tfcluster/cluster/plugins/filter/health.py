"""Filters of a job's health checks on the control machine (tfcluster/run/netcheck.py): the network check's report
from every host's net_probe answer."""

from __future__ import annotations

from typing import Any

from tfcluster.run.netcheck import report


def netcheck_report(results: Any, order: Any, floor: Any = 0) -> dict[str, Any]:
    """{"lines": each link and the median, "refusal": why NETCHECK=strict refuses ('' when fine)}."""
    found = report(dict(results or {}), [str(host) for host in order or []], float(floor or 0))
    return {"lines": found.lines(), "refusal": found.refusal(), "slow": [link.source for link in found.slow]}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"netcheck_report": netcheck_report}
