"""Molecule scenario `default` (delegated driver, localhost): syntax, prepare, check, converge, idempotence, verify."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(1500)  # eight steps of Ansible on a loaded 2-core machine (one run took 610 s)
def test_molecule_default_scenario(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    # a private ephemeral directory: molecule's default one (~/.ansible/tmp/molecule.<hash of the checkout's folder
    # name>.default) is shared by every checkout named alike, and a stale state file there skips prepare.
    env.update({"PATH": f"{BIN}:{env.get('PATH', '')}", "NO_COLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "molecule")})
    proc = subprocess.run([str(BIN / "molecule"), "test", "-s", "default"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1200, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for step in ("destroy", "syntax", "prepare", "check", "converge", "idempotence", "verify", "cleanup"):
        assert f"{step}: Executed: Successful" in out, f"{step} did not succeed:\n{out[-4000:]}"
    assert "failed=1" not in out
