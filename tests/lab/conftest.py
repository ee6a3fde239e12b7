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

from tools.lab import Lab

# Test labs use their own host names so they never clash with a lab started by `make lab-up` (chief-0, ...).
LAB3_NAMES = ("t-chief-0", "t-worker-0", "t-worker-1")


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
