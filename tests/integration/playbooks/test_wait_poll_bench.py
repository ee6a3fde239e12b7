"""`python -m bench.wait_poll` (make bench): the wait asks a host over one `jobstatus serve` session for less CPU per
poll than a `jobstatus status` command per poll (the wait plugin's Stream)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.integration]


def test_one_session_costs_less_per_poll_than_a_command_per_poll(tmp_path: Path) -> None:
    out = tmp_path / "poll.json"
    proc = subprocess.run([sys.executable, "-m", "bench.wait_poll", "--polls", "10", "--json", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = json.loads(out.read_text())
    # ~85 ms of CPU per command (a Python start and the imports), ~4 ms per answer of a running session
    assert figures["session_over_command_cpu"] < 0.5, figures
    assert figures["one_session"]["cpu_ms_per_poll"] > 0, figures  # the session's own process is counted
    assert "session / command" in proc.stdout
