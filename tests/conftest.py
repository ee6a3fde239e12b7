"""Shared pytest fixtures: the repo root and the project venv's executables."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.xdist_groups import group_of

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = ["tests.cpu_report"]  # --cpu-report N: where the CPU goes, per test and per lab


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def venv_bin() -> Path:
    """Directory of the interpreter running the tests (the project venv under `make test`)."""
    return Path(sys.executable).parent


# --- what must not run side by side: a mark on the test, checked here ----------------------------------------------
# `make test` runs pytest-xdist with --dist loadgroup: tests carrying xdist_group("NAME") all run, in order, in the one
# worker that takes the group; the rest are spread over every worker. A lab module boots labs with fixed names and a
# module- or session-scoped lab fixture (two workers would boot the same lab twice), so each lab module names its
# group; every user of a shared session fixture is in one of that fixture's groups, so that the worker of a group
# builds it once for all of the group. The flow tests are two groups (their chains run side by side), on a flow lab
# each (tests/lab/conftest.py).
FLOW_GROUPS = ("flowlab", "flowlab2")
SHARED_FIXTURES: dict[str, tuple[tuple[str, ...], str]] = {  # fixture: (its groups, what it is)
    "flow_lab": (FLOW_GROUPS, "the flow lab"),
    "prepared_slots": (("byoslots",), "the prepared local slots"),
}


def group_problems(items: list[pytest.Item], root: Path) -> list[str]:
    """Every test of tests/lab/ in a group, and every user of a shared fixture (SHARED_FIXTURES) in its group."""
    problems = []
    for item in items:
        where = Path(str(item.path)).resolve()
        group = group_of(item)
        wrong = [(want, what) for name, (want, what) in SHARED_FIXTURES.items()
                 if name in getattr(item, "fixturenames", ()) and group not in want]
        if wrong:
            problems += [f"{item.nodeid}: uses {what} but is not marked xdist_group() with one of {', '.join(want)}"
                         for want, what in wrong]
        elif where.is_relative_to(root / "tests" / "lab") and group is None:
            problems.append(f"{item.nodeid}: a lab test without an xdist_group mark (its labs have fixed names)")
    return problems


def ungrouped(items: list[pytest.Item]) -> list[str]:
    """Under --dist loadgroup, the grouped tests whose node id pytest-xdist did not suffix with ``@GROUP``: xdist
    schedules by that suffix, so without it the groups' tests would run side by side (pytest 9.2 with xdist 3.8)."""
    return [item.nodeid for item in items if group_of(item) and "@" not in item.nodeid]


LOST_GROUPS = ("pytest-xdist's --dist loadgroup did not take the xdist_group marks ({first} and {more} more have no "
               "@GROUP in their node id), so tests that must not overlap would run side by side. Fix: a pytest that "
               "this pytest-xdist supports (requirements-dev.txt pins both)")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """On the controller: every lab test is grouped (checked below), so a worker's lab ids without a suffix mean
    xdist could not group them."""
    lab = [i for i in ids if i.startswith("tests/lab/")]
    if node.config.getvalue("dist") == "loadgroup" and lab and not any("@" in i for i in lab):
        raise pytest.UsageError(LOST_GROUPS.format(first=lab[0], more=len(lab) - 1))


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook, which adds the @GROUP suffix on each worker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if getattr(config.option, "loadgroup", False) and (lost := ungrouped(items)):
        raise pytest.UsageError(LOST_GROUPS.format(first=lost[0], more=len(lost) - 1))
    problems = group_problems(items, REPO)
    if problems:
        raise pytest.UsageError("tests that could collide when run side by side:\n  " + "\n  ".join(problems)
                                + "\nFix: add pytestmark = [pytest.mark.xdist_group(NAME)] to the module "
                                "(tests/conftest.py says why)")
