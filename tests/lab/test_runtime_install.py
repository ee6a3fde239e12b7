"""The prepare stage installs the runtime on a fresh host, air-gapped, from the wheelhouse: the python_runtime role
from nothing (every other lab boots on the runtime layer this same role built once: lab/layers.py), and a second run
finds it in place."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from lab import Lab
from lab.flows import Flows
from lab.layers import PLAYBOOK, runtime_layer
from tfcluster.prepare.wheelhouse import DEFAULT_DEST, build

# one fresh host of its own, beside the flow lab (off its critical path)
pytestmark = [pytest.mark.xdist_group("runtimelab"), pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def fresh(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flows]:
    build(dest=DEFAULT_DEST)
    lab = Lab(slots=("worker",), name="ptfresh", names=("fresh-0",))
    request.addfinalizer(lab.down)
    lab.start()
    yield Flows(lab, tmp_path_factory.mktemp("fresh"), DEFAULT_DEST)


@pytest.mark.timeout(1500)
def test_a_fresh_host_installs_the_runtime_from_the_wheelhouse_then_finds_it_in_place(fresh: Flows) -> None:
    hosts = fresh.hosts_file("fresh", (("fresh-0", "worker", 0),))
    first = fresh.run(str(PLAYBOOK), hosts, job="runtime", timeout=1500)
    assert first.returncode == 0, first.describe(80)
    assert first.recap["fresh-0"]["changed"] > 0 and first.recap["fresh-0"]["failed"] == 0
    assert "Install the hash-pinned requirements" in first.output
    lab = fresh.lab
    # Air-gapped: no route off the bridge, yet the venv imports TensorFlow: it came from the wheelhouse.
    assert lab.ssh("fresh-0", "ip route get 192.0.2.1", check=False).returncode != 0
    assert lab.ssh("fresh-0", "ls /opt/tfcluster/wheelhouse | grep -c '^tensorflow-'").stdout.strip() == "1"
    probe = lab.ssh("fresh-0", "TF_CPP_MIN_LOG_LEVEL=3 /opt/tfcluster/venv/bin/python -c "
                               "'import tensorflow as tf, tf_keras; print(tf.__version__)'", timeout=300)
    assert probe.stdout.strip() == "2.21.0"
    again = fresh.run(str(PLAYBOOK), hosts, job="runtime", timeout=600)
    assert again.returncode == 0 and again.recap["fresh-0"]["changed"] == 0, again.describe(60)


def test_a_host_on_the_runtime_layer_finds_the_runtime_in_place(start_lab: Callable[..., Lab],
                                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    """What the flow lab and the twin boot on: the same role, run there, installs nothing."""
    layer = runtime_layer(DEFAULT_DEST)
    lab = start_lab(slots=("worker",), name="ptlayered", names=("layered-0",), layers=(layer,))
    flows = Flows(lab, tmp_path_factory.mktemp("layered"), DEFAULT_DEST)
    run = flows.run(str(PLAYBOOK), flows.hosts_file("layered", (("layered-0", "worker", 0),)), job="runtime",
                    timeout=600)
    assert run.returncode == 0 and run.recap["layered-0"]["changed"] == 0, run.describe(60)
