"""pytest imports test files without packages by their base name: two test files with one name make the whole run
(`make test`) stop at collection, even when each suite alone passes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_name_is_unique_across_the_suites() -> None:
    names = Counter(path.name for path in TESTS.rglob("*.py") if path.name not in ("__init__.py", "conftest.py"))
    assert [name for name, count in names.items() if count > 1] == []
