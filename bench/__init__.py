"""Benchmarks (`make bench`): each measures what it is about in one run and prints its figures and ratios."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any


def emit(result: dict[str, Any], path: Path | None) -> None:
    """A bench's figures: written to ``path`` (its ``--json``) when given, and printed as one JSON line last."""
    if path is not None:
        path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


def free_ports(n: int) -> list[int]:
    """``n`` loopback ports free now (bound together, then released) for a bench's own cluster."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports
