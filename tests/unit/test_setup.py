"""tools/setup.sh control: the ranges of requirements-control.txt by default, the hash-pinned
requirements-control.lock with TFCLUSTER_LOCKED=1 (pip --require-hashes). Run for real on a copy of the checkout
whose venv's pip only records what it was asked to do (every other step finds its work done)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FILES = ("tools/setup.sh", "requirements-control.txt", "requirements-control.lock", "requirements-dev.txt",
         "trainer/requirements.txt", "pyproject.toml")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, root / name)
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    log = root / "pip-calls.jsonl"
    (bin_dir / "pip").write_text(f"#!{sys.executable}\nimport json, sys\n"
                                 f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    for name in ("pip", "tfcluster", "terraform"):
        (bin_dir / name).touch()
        (bin_dir / name).chmod(0o755)
    project = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()
    (root / ".venv" / ".tfcluster-project").write_text(f"{project} {root}\n")
    for name in (".cache/terraform/terraformrc.registry", ".cache/datasets/mnist.npz",
                 ".cache/datasets/mnist-subset.npz"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    return root


def setup_control(root: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    calls = root / "pip-calls.jsonl"
    calls.unlink(missing_ok=True)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TFCLUSTER_")}
    proc = subprocess.run(["bash", str(root / "tools/setup.sh"), "control"], cwd=root, env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=False)
    return proc, [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def test_locked_control_setup_installs_the_hash_pinned_lock_once(checkout: Path) -> None:
    proc, calls = setup_control(checkout, TFCLUSTER_LOCKED="1")
    assert proc.returncode == 0, proc.stderr
    assert calls == [["install", "--require-hashes", "-r", "requirements-control.lock"]]
    assert "installing requirements-control.lock (hash-pinned" in proc.stderr
    proc, calls = setup_control(checkout, TFCLUSTER_LOCKED="1")
    assert proc.returncode == 0 and calls == [], proc.stderr  # the stamp: nothing to do
    proc, calls = setup_control(checkout)  # the default: the ranges again
    assert proc.returncode == 0 and calls == [["install", "-r", "requirements-control.txt"]], proc.stderr


def test_a_bad_locked_value_is_refused_with_the_fix(checkout: Path) -> None:
    proc, calls = setup_control(checkout, TFCLUSTER_LOCKED="yes")
    assert proc.returncode == 1 and calls == []
    assert "TFCLUSTER_LOCKED=yes: use 1 (install requirements-control.lock) or 0" in proc.stderr
