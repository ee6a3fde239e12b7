"""The prepare stage installs the runtime on a fresh host, air-gapped, from the wheelhouse: the python_runtime role
from nothing, and a second run finds it in place. That fresh install is the runtime layer's build (lab/layers.py:
every other lab boots on the layer it leaves), once per test run: the build keeps what it saw, asserted here."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lab import Lab
from lab.flows import Flows
from lab.layers import PLAYBOOK, build_record, runtime_layer
from tfcluster.prepare.wheelhouse import DEFAULT_DEST, build

# its hosts have fixed names
pytestmark = [pytest.mark.xdist_group("runtimelab"), pytest.mark.lab, pytest.mark.slow]


@pytest.mark.timeout(1500)
def test_a_fresh_host_installs_the_runtime_from_the_wheelhouse_then_finds_it_in_place() -> None:
    build(dest=DEFAULT_DEST)
    record = build_record(runtime_layer(DEFAULT_DEST))
    first, again = record["first"], record["again"]
    assert first["recap"]["changed"] > 0 and first["recap"]["failed"] == 0, first["output"][-4000:]
    assert "Install the hash-pinned requirements" in first["output"]
    # Air-gapped: no route off the bridge, yet the venv imports TensorFlow: it came from the wheelhouse.
    assert record["route_off_bridge"] is False
    assert record["tensorflow_wheels"] == "1"
    assert record["imports"] == "2.21.0"
    assert again["recap"]["changed"] == 0 and again["recap"]["failed"] == 0, again


def test_a_host_on_the_runtime_layer_finds_the_runtime_in_place(start_lab: Callable[..., Lab],
                                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    """What the flow lab and the twin boot on: the same role, run there, installs nothing."""
    layer = runtime_layer(DEFAULT_DEST)
    lab = start_lab(slots=("worker",), name="ptlayered", names=("layered-0",), layers=(layer,))
    flows = Flows(lab, tmp_path_factory.mktemp("layered"), DEFAULT_DEST)
    run = flows.run(str(PLAYBOOK), flows.hosts_file("layered", (("layered-0", "worker", 0),)), job="runtime",
                    timeout=600)
    assert run.returncode == 0 and run.recap["layered-0"]["changed"] == 0, run.describe(60)
