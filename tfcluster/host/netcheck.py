"""The network check before a job starts: each host sends to the next one in a ring, all pairs at once, on the
training port each receiver will listen on (the path the job's gRPC traffic takes: the security group, the
firewall, the link). Standard library only; the net_probe module runs :func:`probe` on every host in parallel.

A host listens on its own port, accepts one sender, reads until the sender closes and answers one JSON line: the
bytes it read and the seconds from the first byte to the last. Meanwhile it connects to its peer (retrying while the
peer's listener is not up yet), sends for ``seconds`` (at most ``limit`` bytes), closes its side and reads the
peer's answer: the link's rate is what the receiver counted. A link that cannot be reached, or answers nonsense, is
an error of that link, never an exception.

    python3 -m tfcluster.host.netcheck PORT PEER_HOST PEER_PORT [--seconds 2]   one JSON line
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

CHUNK = 1 << 20
SEND_SECONDS = 2.0  # how long a host sends to its peer
SEND_LIMIT = 1 << 30  # bytes a host sends at most (a fast link reaches it before SEND_SECONDS)
CONNECT_WITHIN = 30.0  # seconds a host keeps trying to reach its peer's listener (the hosts start within seconds)
ANSWER_LIMIT = 4096  # bytes of the peer's answer read


def receive(server: socket.socket, timeout: float) -> dict[str, Any]:
    """Accept one sender, count what it sends until it closes, answer the count and the time; what was counted."""
    server.settimeout(timeout)
    conn, address = server.accept()
    with conn:
        conn.settimeout(timeout)
        first, count = None, 0
        while True:
            data = conn.recv(CHUNK)
            if not data:
                break
            first = time.monotonic() if first is None else first
            count += len(data)
        seconds = time.monotonic() - first if first is not None else 0.0
        answer = {"bytes": count, "seconds": round(seconds, 6)}
        conn.sendall((json.dumps(answer) + "\n").encode())
    return {"from": address[0], **answer}


def connect(host: str, port: int, within: float) -> socket.socket:
    """A connection to the peer's listener, tried until ``within`` seconds have passed (OSError after)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return socket.create_connection((host, port), timeout=min(5.0, max(0.5, deadline - time.monotonic())))
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def send(host: str, port: int, seconds: float, limit: int = SEND_LIMIT,
         within: float = CONNECT_WITHIN) -> dict[str, Any]:
    """Send to the peer for ``seconds`` (at most ``limit`` bytes); the peer's count and time, and the rate."""
    block = b"\0" * CHUNK
    with connect(host, port, within) as conn:
        conn.settimeout(max(30.0, 10 * seconds))
        sent, start = 0, time.monotonic()
        while time.monotonic() - start < seconds and sent < limit:
            conn.sendall(block)
            sent += len(block)
        conn.shutdown(socket.SHUT_WR)
        answer = conn.recv(ANSWER_LIMIT).decode("utf-8", "replace")
    data = json.loads(answer.strip().splitlines()[0]) if answer.strip() else None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), (int, float)) and not isinstance(data.get(k), bool)
                                             for k in ("bytes", "seconds")):
        raise ValueError(f"the peer answered {answer[:200]!r}, not its count")
    rate = data["bytes"] * 8 / data["seconds"] / 1e6 if data["seconds"] > 0 else 0.0
    return {"sent": sent, "received": data["bytes"], "seconds": data["seconds"], "mbit_s": round(rate, 1)}


def probe(port: int, peer_host: str, peer_port: int, seconds: float = SEND_SECONDS,
          within: float = CONNECT_WITHIN) -> dict[str, Any]:
    """Listen on ``port`` while sending to the peer: {"to": peer, "mbit_s", ...} or {"to": peer, "error": text};
    ``received`` says what this host's own listener counted from its sender."""
    received: dict[str, Any] = {}
    server = socket.create_server(("", port), family=socket.AF_INET, reuse_port=False)
    def listen() -> None:
        try:
            received.update(receive(server, within + 10 * seconds))
        except OSError as error:
            received["error"] = str(error)

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    result: dict[str, Any] = {"to": f"{peer_host}:{peer_port}"}
    try:
        result.update(send(peer_host, peer_port, seconds, within=within))
    except (OSError, ValueError) as error:
        result["error"] = f"{type(error).__name__}: {error}"
    listener.join(within + 10 * seconds + 5)
    server.close()
    result["listener"] = received
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tfcluster.host.netcheck", description=__doc__.split("\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("peer_host")
    parser.add_argument("peer_port", type=int)
    parser.add_argument("--seconds", type=float, default=SEND_SECONDS)
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.port, args.peer_host, args.peer_port, args.seconds), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
