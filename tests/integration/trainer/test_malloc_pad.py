"""`python -m bench.malloc_pad` (make bench): the trainer's malloc pad, measured on a real job, saves the page
faults and kernel time it exists for (trainer/memory.py)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="M_TOP_PAD is glibc's")]


def test_the_pad_cuts_the_trainers_page_faults_and_system_time(tmp_path: Path) -> None:
    out = tmp_path / "pad.json"
    proc = subprocess.run([sys.executable, "-m", "bench.malloc_pad", "--steps", "100", "--json", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = json.loads(out.read_text())
    ratios = figures["pad_over_none"]
    # 100 steps: ~600 k faults without the pad, ~95 k with it (most of those are TensorFlow's import)
    assert ratios["minor_faults"] < 0.5, figures
    assert ratios["system_s"] < 0.8, figures
    assert ratios["peak_rss_mb"] < 1.5, figures
    assert "pad / none" in proc.stdout
