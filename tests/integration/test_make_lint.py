"""`make lint` is a command a user types: it runs, from this checkout, exactly as the Makefile says (ruff with the
complexity rule, ansible-lint at the production profile, terraform fmt, checkov) and passes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

# Reads the checkout (ruff, ansible-lint, terraform fmt, checkov) and writes only ansible-test's scratch dir: beside
# any other test.
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_make_lint_passes(repo: Path) -> None:
    result = subprocess.run(["make", "lint"], cwd=repo, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, (result.stdout + result.stderr)[-8000:]
    for tool in ("ruff check", "ansible-lint", "terraform fmt", "checkov"):
        assert tool in result.stdout, f"`make lint` no longer runs {tool}:\n{result.stdout[-3000:]}"
    # The suite's one ansible-lint run (test_playbooks.py checks that .ansible-lint asks for this profile).
    assert "Profile 'production' was required, and it passed." in result.stdout + result.stderr, result.stderr[-3000:]
