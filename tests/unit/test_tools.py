"""The developers' quick path: `make test-changed` picks the unit tests of the folders a change touched."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("changed_tests", REPO / "tools/changed_tests.py")
assert _spec and _spec.loader
changed = importlib.util.module_from_spec(_spec)
sys.modules["changed_tests"] = changed
_spec.loader.exec_module(changed)


@pytest.mark.parametrize(("files", "paths"), [
    (["tfcluster/run/wait.py"], ["tests/unit/run"]),
    (["tfcluster/run/wait.py", "tfcluster/collect/ssh.py", "README.md"], ["tests/unit/collect", "tests/unit/run"]),
    (["tfcluster/core/contract.py", "tfcluster/run/wait.py"], ["tests/unit"]),  # the ground floor: everything
    (["trainer/train.py", "playbooks/site.yml"], ["tests/unit/playbooks", "tests/unit/trainer"]),
    (["tests/unit/run/test_wait.py", "tfcluster/run/view.py"], ["tests/unit/run"]),  # the folder holds the file
    (["tests/unit/kinds/test_kinds.py"], ["tests/unit/kinds/test_kinds.py"]),
    (["docs/ARCHITECTURE.md", "Makefile"], []),
])
def test_a_change_selects_the_tests_of_its_folders(files: list[str], paths: list[str]) -> None:
    assert changed.test_paths(files) == paths


def test_a_lab_test_without_a_group_or_a_flow_test_outside_flowlab_is_refused(tmp_path: Path) -> None:
    """The guard of tests/conftest.py, on fake items: the mark on the test is the rule, checked at collection."""
    from tests.conftest import FLOW_GROUPS, group_problems

    class Item:
        def __init__(self, path: Path, group: str | None, fixtures: tuple[str, ...] = ()) -> None:
            self.path, self.nodeid, self.fixturenames, self._group = path, f"{path.name}::t", fixtures, group

        def get_closest_marker(self, name: str) -> object:
            return type("M", (), {"args": (self._group,), "kwargs": {}})() if self._group else None

    lab = tmp_path / "tests" / "lab"
    playbooks = tmp_path / "tests" / "integration" / "playbooks"
    items = [Item(lab / "test_a.py", None), Item(lab / "test_b.py", "b"),
             Item(lab / "test_c.py", "c", ("flow_lab",)), Item(lab / "test_d.py", FLOW_GROUPS[1], ("flow_lab",)),
             Item(tmp_path / "tests" / "unit" / "test_e.py", None),
             Item(playbooks / "test_f.py", None, ("prepared_slots",)), Item(playbooks / "test_g.py", "byoslots",
                                                                           ("prepared_slots",))]
    assert group_problems(items, tmp_path) == [  # type: ignore[arg-type]
        "test_a.py::t: a lab test without an xdist_group mark (its labs have fixed names)",
        "test_c.py::t: uses the flow lab but is not marked xdist_group() with one of flowlab, flowlab2",
        "test_f.py::t: uses the prepared local slots but is not marked xdist_group() with one of byoslots"]
