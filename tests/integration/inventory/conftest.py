"""Fixtures of the inventory's integration tests: a moto EC2 endpoint on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ports import free_port


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """A moto server (EC2 and friends) on a free loopback port, for the module's tests."""
    moto_server = pytest.importorskip("moto.server")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
