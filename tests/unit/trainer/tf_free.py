"""A check that a piece of the trainer runs without TensorFlow."""

from __future__ import annotations

import subprocess
import sys


def loads_tensorflow(code: str) -> bool:
    """Whether ``code`` imports TensorFlow, in a fresh interpreter (this one may hold it from another test)."""
    probe = f"import sys\n{code}\nprint('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip().splitlines()[-1] == "True"
