"""Helpers of the inventory's integration tests (imported by name: pytest puts this folder on sys.path): run Ansible's
own tools against inventory/slots.py as a user would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "inventory" / "slots.py"
VENV_BIN = Path(sys.executable).parent


def ansible_env(extra: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The caller's environment without TFCLUSTER_* settings, plus ``extra``; the venv first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFCLUSTER_")}
    env.update(extra)
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env["ANSIBLE_LOCAL_TEMP"] = str(tmp_path / "ansible-tmp")
    env["ANSIBLE_HOME"] = str(tmp_path / "ansible-home")
    env["ANSIBLE_INVENTORY_UNPARSED_FAILED"] = "true"  # a broken script must fail, not give an empty inventory
    return env


def ansible(tool: str, env: dict[str, str], *args: str, inventory: Path = SCRIPT) -> subprocess.CompletedProcess[str]:
    """Run an Ansible command-line tool from the venv (or PATH) in the repository, with ``-i inventory``."""
    path = VENV_BIN / tool
    if not path.exists():
        found = shutil.which(tool)
        if not found:
            pytest.skip(f"{tool} not installed")
        path = Path(found)
    return subprocess.run([str(path), "-i", str(inventory), *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=180, check=False)


def script_problems(stderr: str) -> list[str]:
    """The `  - FIELD: MESSAGE. Fix: FIX` lines of the inventory script, as Ansible shows its stderr."""
    return [line.strip().removeprefix("- ") for line in stderr.splitlines() if line.startswith("  - ")]


def terraform_state(outputs: dict[str, Any]) -> dict[str, Any]:
    """A version-4 local state holding only outputs (``{name: {"value", "type"}}``): what `terraform output` reads
    after an apply."""
    return {"version": 4, "terraform_version": "1.5.0", "serial": 1,
            "lineage": "3f7f2c0e-0000-4000-8000-000000000000",
            "outputs": {k: {"value": v["value"], "type": v["type"]} for k, v in outputs.items()},
            "resources": [], "check_results": None}


def hcl_type(value: Any) -> Any:
    """Terraform's JSON type of a value, as a state file records it (null is given the type string)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return ["tuple", [hcl_type(v) for v in value]]
    if isinstance(value, dict):
        return ["object", {k: hcl_type(v) for k, v in value.items()}]
    return "string"
