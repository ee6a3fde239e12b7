"""The ring network check's probe (tfcluster/host/netcheck.py, issue 40): three hosts' probes on loopback, each
sending to the next at once; a peer that never listens or answers nonsense is that link's error."""

from __future__ import annotations

import socket
import threading
from concurrent.futures import ThreadPoolExecutor

from tests.ports import free_port_block
from tfcluster.host import netcheck


def test_a_ring_of_three_measures_every_link_at_once() -> None:
    base = free_port_block(3)
    ports = [base, base + 1, base + 2]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda i: netcheck.probe(ports[i], "127.0.0.1", ports[(i + 1) % 3], seconds=0.3,
                                                         within=10), range(3)))
    for index, link in enumerate(results):
        assert "error" not in link, link
        assert link["to"] == f"127.0.0.1:{ports[(index + 1) % 3]}"
        assert link["received"] == link["sent"] > 0 and link["mbit_s"] > 0
        assert link["listener"]["bytes"] > 0 and "error" not in link["listener"]  # its own sender's bytes came


def test_a_peer_that_never_listens_is_that_links_error() -> None:
    base = free_port_block(2)
    link = netcheck.probe(base, "127.0.0.1", base + 1, seconds=0.1, within=1)
    assert link["to"] == f"127.0.0.1:{base + 1}" and link["error"].startswith("ConnectionRefusedError")
    assert "mbit_s" not in link


def test_a_peer_that_answers_nonsense_is_that_links_error() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def nonsense() -> None:
        conn, _ = server.accept()
        with conn:
            while conn.recv(1 << 20):
                pass
            conn.sendall(b'{"bytes": "all of them"}\n')

    threading.Thread(target=nonsense, daemon=True).start()
    try:
        link = netcheck.probe(free_port_block(1), "127.0.0.1", port, seconds=0.1, within=2)
    finally:
        server.close()
    assert link["error"].startswith("ValueError: the peer answered") and "all of them" in link["error"]
