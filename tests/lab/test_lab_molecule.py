"""Molecule scenario `lab`: the delegated driver's create/destroy boot and tear down lab hosts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lab import Lab, leftovers

# the molecule lab scenario (fixed names): one worker
pytestmark = [pytest.mark.xdist_group("moleculelab"), pytest.mark.lab, pytest.mark.slow]


def test_molecule_lab_scenario_converges_idempotently_and_cleans_up(repo: Path, venv_bin: Path, tmp_path: Path) -> None:
    if not (venv_bin / "molecule").exists():
        pytest.fail(f"molecule is not installed in {venv_bin}; run `make setup`")
    env = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}", "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1",
           "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "molecule")}  # not the shared ~/.ansible/tmp one
    try:
        proc = subprocess.run([str(venv_bin / "molecule"), "test", "-s", "lab"], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        left = leftovers(lab="molecule")  # what molecule's destroy left, before the safety net below
    finally:
        Lab(name="molecule").down()  # molecule destroys on failure too; this covers a timeout
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for step in ("create", "converge", "idempotence", "verify", "destroy"):
        assert f"{step}: Executed: Successful" in out, f"step {step} did not run:\n{out[-4000:]}"
    assert left == []
