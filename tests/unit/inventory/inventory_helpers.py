"""Shared helpers of the inventory unit tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_json(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def runner_for(outputs: dict[str, Any], code: int = 0, err: str = "") -> Callable[[Path], tuple[int, str, str]]:
    """A fake `terraform output -json` that prints ``outputs``."""
    return lambda _tf_dir: (code, json.dumps(outputs), err)
