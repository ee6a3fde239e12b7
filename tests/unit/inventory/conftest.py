"""Helpers for the inventory unit tests."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest

from tfcluster.inventory.cli import Injected, main

CliRun = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(caplog: pytest.LogCaptureFixture) -> CliRun:
    """Run the inventory's main() in-process: returns (exit code, stdout, log text)."""

    def run(env: dict[str, str], *argv: str, injected: Injected = Injected()) -> tuple[int, str, str]:  # noqa: B008
        caplog.clear()
        out = io.StringIO()
        code = main(list(argv), env, out, injected)
        return code, out.getvalue(), caplog.text

    return run
