"""The network check's report (the ring probe of tfcluster/host/netcheck.py, run on every host by the net_probe
module before the gang start): each link's rate, the slow ones named. A pure function of the hosts' answers, which
are data: a rate that is not a finite non-negative number is a link that could not be measured.

A link is slow when its rate is under half the median of the links (or under ``floor`` Mbit/s when one is set); a
link that could not be measured (no connection, no answer) is named too. NETCHECK=strict refuses to start on any.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfcluster.core.text import printable

SLOW_SHARE = 0.5  # a link under this share of the median is slow


@dataclass(frozen=True)
class Link:
    source: str
    to: str
    mbit_s: float | None  # None: not measured
    error: str = ""


@dataclass(frozen=True)
class Report:
    links: list[Link]
    median: float | None
    slow: list[Link] = field(default_factory=list)

    def lines(self) -> list[str]:
        """``network: f-w0 -> f-w1 (10.0.0.12:2222) 941 Mbit/s`` per link; the slow ones marked."""
        slow = {(link.source, link.to) for link in self.slow}
        out = []
        for link in self.links:
            figure = f"{link.mbit_s:,.0f} Mbit/s" if link.mbit_s is not None else f"not measured: {link.error}"
            mark = "  SLOW: under half the median" if (link.source, link.to) in slow and link.mbit_s is not None \
                else ""
            out.append(f"network: {printable(link.source, 60)} -> {printable(link.to, 80)} {printable(figure, 300)}"
                       f"{mark}")
        if self.median is not None:
            out.append(f"network: median {self.median:,.0f} Mbit/s over {len(self.links)} link(s)")
        return out

    def refusal(self) -> str:
        """Why NETCHECK=strict refuses to start ('' when every link is fine)."""
        if not self.slow:
            return ""
        names = ", ".join(f"{link.source} -> {link.to}" for link in self.slow)
        return (f"slow or unmeasured network link(s): {names} (median {self.median or 0:,.0f} Mbit/s). Nothing was "
                "started (NETCHECK=strict). Fix: check those hosts' links (an interface on a slower switch, a TCP "
                "fallback of EFA, a bad cable), or NETCHECK=on to start anyway")


def _rate(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def report(results: Mapping[str, Any], order: Sequence[str], floor: float = 0.0) -> Report:
    """The report of every host's probe answer (``results``: host -> answer, any shape), in ring ``order``."""
    links = []
    for host in order:
        answer = results.get(host)
        answer = answer if isinstance(answer, Mapping) else {}
        rate = _rate(answer.get("mbit_s"))
        error = answer.get("error") if isinstance(answer.get("error"), str) else ("no answer" if rate is None else "")
        links.append(Link(host, str(answer.get("to", "?")), rate if not error else None, error or ""))
    rates = [link.mbit_s for link in links if link.mbit_s is not None]
    median = statistics.median(rates) if rates else None
    limit = max(floor, SLOW_SHARE * median) if median is not None else floor
    slow = [link for link in links if link.mbit_s is None or link.mbit_s < limit]
    return Report(links, median, slow)
