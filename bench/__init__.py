"""Benchmarks (`make bench`): each measures what it is about in one run and prints its figures and ratios."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(result: dict[str, Any], path: Path | None) -> None:
    """A bench's figures: written to ``path`` (its ``--json``) when given, and printed as one JSON line last."""
    if path is not None:
        path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
