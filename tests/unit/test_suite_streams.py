"""`make test`'s two pytest processes (tools/suite.py): what goes where, and one exit status for both."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools import suite as streams

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
USES_FLOW_LAB = re.compile(r"\bflow_lab\b")


def test_every_user_of_the_flow_lab_runs_in_the_side_stream() -> None:
    """A flow-lab test left in the main stream would boot a second lab named `flow` beside the side stream's."""
    users = {str(path.relative_to(REPO)) for path in (TESTS / "lab").glob("test_*.py")
             if USES_FLOW_LAB.search(path.read_text())}
    assert users, "no test uses the flow lab: the pattern is stale"
    assert users <= set(streams.SIDE), sorted(users - set(streams.SIDE))
    assert all((REPO / path).is_file() for path in streams.SIDE)


def test_nothing_in_the_side_stream_shares_the_checkout_state_of_the_main_stream() -> None:
    """make, Terraform and the AWS twin write the checkout's own state (ledger, artifacts/, infra/aws)."""
    for path in streams.SIDE:
        text = (REPO / path).read_text()
        assert not re.search(r"\bmake\(|\"make\"|Twin\b|terraform", text), path


@pytest.mark.parametrize(("args", "named"), [
    ([], False),
    (["-ra", "--durations=25"], False),
    (["-k", "inventory", "-x"], False),
    (["-m", "not lab", "--timeout", "60"], False),
    (["tests/unit"], True),
    (["-x", "tests/lab/test_lab.py::test_cut_makes_one_host_unreachable_and_restore_brings_it_back"], True),
    (["-k", "x", "tests/unit"], True),
])
def test_a_test_path_runs_one_pytest_else_two_streams(args: list[str], named: bool) -> None:
    assert streams.has_test_path(args) is named


def test_each_stream_gets_the_user_arguments_and_the_side_files_only_once() -> None:
    main = streams.main_argv(["-k", "x"])
    side = streams.side_argv(["-k", "x"])
    assert main[-2:] == side[-2:] == ["-k", "x"]
    assert [a for a in main if a.startswith("--ignore=")] == [f"--ignore={p}" for p in streams.SIDE]
    assert [a for a in side if a in streams.SIDE] == list(streams.SIDE)


@pytest.mark.parametrize(("main_rc", "side_rc", "want"), [
    (0, 0, 0), (1, 0, 1), (0, 1, 1), (2, 1, 2), (0, 5, 0), (5, 0, 0), (5, 5, 5), (5, 1, 1), (1, 5, 1)])
def test_one_exit_status_for_both_streams(main_rc: int, side_rc: int, want: int) -> None:
    assert streams.combined(main_rc, side_rc) == want
