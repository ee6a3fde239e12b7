"""A test's ``xdist_group``: read by the collision check (tests/conftest.py) and the clock of --cpu-report."""

from __future__ import annotations

import pytest


def group_of(item: pytest.Item) -> str | None:
    """The name in the test's xdist_group mark (its node id's ``@`` suffix cannot say: a parameter id may hold an
    ``@`` too), or None."""
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else None
