"""Free loopback ports for tests that start servers (moto, local slots, the demo's endpoint)."""

from __future__ import annotations

import random
import socket


def free_port() -> int:
    """One port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_block(count: int, low: int = 20000, high: int = 40000) -> int:
    """A base port with ``count`` consecutive ports free on 127.0.0.1 now (tests that need them run one at a time),
    in [low, high]."""
    for _ in range(200):
        base = random.randint(low, high)
        socks = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sock.bind(("127.0.0.1", port))
                socks.append(sock)
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no free port range")
