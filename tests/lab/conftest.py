"""Fixtures for the lab suite: labs that are always torn down, whatever the test did.

`start_lab(request, ...)` registers `down()` as a finalizer *before* booting, so a lab whose boot fails half-way,
a failing test and a pytest-timeout all leave nothing behind. A lab left by a killed pytest run is cleaned up by
the next `Lab.start()` with the same name.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator

import pytest

from lab import Lab, LabError
from lab.flows import FLOW_LAB, FLOW_NAMES, FLOW_VARS, PS_SLOTS, Flows
from lab.layers import runtime_layer
from tfcluster.prepare.wheelhouse import DEFAULT_DEST, build

# Test labs use their own host names so they never clash with a lab started by `make lab-up` (chief-0, ...).
LAB3_NAMES = ("t-chief-0", "t-worker-0", "t-worker-1")
# The flow lab's share of contended CPU against the other labs (Lab.weigh_cpu; each lab's default is 100): its group
# is the suite's longest chain of tests, in one worker, so its hosts go first when the cores are busy.
FLOW_CPU_WEIGHT = 400


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the flow tests (tests/lab/test_flow_*.py) last: their session lab (4 hosts with TensorFlow) then lives
    only while they run, and the lab tool's own tests run first, on a quiet machine."""
    items.sort(key=lambda item: item.path.name.startswith("test_flow_"))  # stable: keeps the order otherwise


def _start(request: pytest.FixtureRequest, **kwargs: object) -> Lab:
    lab = Lab(**kwargs)  # type: ignore[arg-type]
    request.addfinalizer(lab.down)
    return lab.start()


@pytest.fixture
def start_lab(request: pytest.FixtureRequest) -> Callable[..., Lab]:
    """``start_lab(slots=..., name=..., names=...)``: a booted lab, downed when the test ends (pass or fail)."""
    return functools.partial(_start, request)


@pytest.fixture(scope="session", autouse=True)
def _lab_needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the lab suite needs root (bridge, overlay mounts, systemd-nspawn)")


@pytest.fixture(scope="module")
def lab3(request: pytest.FixtureRequest) -> Iterator[Lab]:
    """chief + 2 workers, shared by a module's tests (each test leaves the hosts as it found them)."""
    lab = _start(request, slots=("chief", "worker", "worker"), name="pt3", names=LAB3_NAMES)
    yield lab
    assert not [h.name for h in lab.hosts if lab.is_cut(h.name)], "a test left a host cut"




def flow_lab_name(worker: str) -> tuple[str, str]:
    """The flow lab of a pytest-xdist worker (``gw3``), and its machines' prefix: each worker that takes one of the
    FLOW_GROUPS boots its own, with the same host names (the tests name them) on links of their own."""
    if not worker:
        return FLOW_LAB, ""
    return f"{FLOW_LAB}-{worker}", worker


@pytest.fixture(scope="session")
def flow_lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flows]:
    """The prepared flow lab, once per session and worker: 4 hosts (f-chief, f-w0, f-w1, f-ps) on the runtime layer
    (TensorFlow installed once from the wheelhouse by the python_runtime role: lab/layers.py), and site.yml run over
    SSH on all of them (driver role skips, the runtime found in place, trainer deployed). Every flow test of the
    worker's group reuses it; each writes its own host file and job id. ``flows.prepare_run`` is that first site.yml
    run (the on-prem flow asserts on it)."""
    build(dest=DEFAULT_DEST)
    layer = runtime_layer(DEFAULT_DEST)  # the runtime installed once (lab/layers.py); the fresh install has its test
    slots = ("chief", "worker", "worker", "ps")
    if os.environ.get("TFCLUSTER_FLOW_REUSE") == "1":  # development only: keep the prepared lab between runs
        try:
            lab = Lab.attach(FLOW_LAB)
        except LabError:
            lab = Lab(slots=slots, name=FLOW_LAB, names=FLOW_NAMES, layers=(layer,)).start()
    else:
        name, prefix = flow_lab_name(os.environ.get("PYTEST_XDIST_WORKER", ""))
        lab = _start(request, slots=slots, name=name, names=FLOW_NAMES, layers=(layer,), machine_prefix=prefix)
    lab.weigh_cpu(FLOW_CPU_WEIGHT)
    flows = Flows(lab, tmp_path_factory.mktemp("flows"), DEFAULT_DEST, common_vars=dict(FLOW_VARS))
    flows.prepare_run = flows.run("site.yml", flows.hosts_file("prepare-all", PS_SLOTS), job="prepare",
                                  timeout=1500)
    if flows.prepare_run.returncode != 0:
        pytest.fail("preparing the flow lab (site.yml on 4 hosts) failed:\n" + flows.prepare_run.describe(80))
    yield flows
    left = [h for h in FLOW_NAMES if lab.is_cut(h)]
    assert not left, f"a flow test left hosts cut: {left}"
