"""Local slots prepared once for the bring-your-own-script tests that start from a prepared cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.playbooks.local_cluster import Cluster, assert_ok, byo_vars
from tests.ports import free_port_block


@pytest.fixture(scope="session")
def prepared_slots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two local slots that site.yml prepared once (the runtime checks, the release with byo_job.py), for the tests
    of group "byoslots": each one's train.yml then takes the prepared path, as a user's next job on a cluster does
    (one probe per host), instead of preparing fresh hosts again (~12 CPU-s each). A test that asserts on fresh
    hosts or on the prepare itself keeps slots of its own. The ports lie below the kernel's ephemeral range: they
    must stay free for the whole session."""
    slots = Cluster(tmp_path_factory.mktemp("byoslots"), base_port=free_port_block(2, 10000, 19999))
    assert_ok(slots.playbook("site.yml", "prepare", extra_vars=byo_vars("--steps 1")))
    yield slots
    slots.stop_everything()


@pytest.fixture
def slots(prepared_slots: Cluster, tmp_path: Path) -> Iterator[Cluster]:
    """The prepared slots for one test: its own vars files and artifacts; whatever it started is stopped after."""
    slots = prepared_slots.sharing(tmp_path)
    yield slots
    slots.stop_everything()
