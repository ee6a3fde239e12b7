"""Shared pytest fixtures: the repo root and the project venv's executables."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def venv_bin() -> Path:
    """Directory of the interpreter running the tests (the project venv under `make test`)."""
    return Path(sys.executable).parent
