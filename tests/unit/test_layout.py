"""The suite is laid out like the code: tests/ is a tree of packages (so two files may share a name), and the unit
tests of each folder of the package live in the folder of the same name under tests/unit/."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
# Unit-test folders that are not a folder of tfcluster/: the other parts of the repository they test.
OTHER_PARTS = {"trainer": "trainer", "infra": "infra", "playbooks": "playbooks", "lab": "lab"}


def test_every_test_folder_is_a_package() -> None:
    folders = [p for p in TESTS.rglob("*") if p.is_dir() and p.name not in ("__pycache__", "fixtures")
               and not p.name.startswith(".")]
    assert folders  # the walk found the suite
    assert [str(p.relative_to(REPO)) for p in folders if not (p / "__init__.py").is_file()] == []


def test_unit_tests_are_laid_out_like_the_package() -> None:
    package = {p.name for p in (REPO / "tfcluster").iterdir() if (p / "__init__.py").is_file()}
    unit = {p.name for p in (TESTS / "unit").iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert unit - package <= set(OTHER_PARTS), f"unit test folders without a matching folder: {unit - package}"
    assert all((REPO / part).is_dir() for part in OTHER_PARTS.values())
    untested = package - unit
    assert not untested, f"tfcluster folders with no tests/unit/<folder>/: {sorted(untested)}"


def test_no_test_file_repeats_its_folder_in_its_name() -> None:
    """A file named test_inventory_build.py in tests/unit/inventory/ says inventory twice: the folder says it once."""
    repeated = [str(p.relative_to(REPO)) for p in TESTS.rglob("test_*.py")
                if p.parent.name not in ("unit", "integration", "lab", "tests")
                and p.stem.startswith(f"test_{p.parent.name}_")]
    assert repeated == []
