"""The Python code of the project passes ruff (the same check `make lint` runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_ruff_clean(repo: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=repo,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
