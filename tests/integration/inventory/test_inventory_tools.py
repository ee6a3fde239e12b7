"""The inventory with real tools: `terraform output -json` through python-terraform, and Ansible's
`ansible-inventory --list/--graph` running inventory/tfcluster.py as a subprocess (static and local sources)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from inventory.model import InventoryError
from inventory.sources.terraform import fetch_terraform, find_terraform, python_terraform_runner

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "inventory" / "tfcluster.py"
VENV_BIN = Path(sys.executable).parent


def _terraform_or_skip() -> str:
    try:
        return find_terraform()
    except InventoryError:
        pytest.skip("no terraform executable (make setup provides one)")


def _state(outputs: dict[str, Any]) -> dict[str, Any]:
    """A version-4 local state holding only outputs: what `terraform output` reads after an apply."""
    return {"version": 4, "terraform_version": "1.5.0", "serial": 1,
            "lineage": "3f7f2c0e-0000-4000-8000-000000000000",
            "outputs": {k: {"value": v["value"], "type": v["type"]} for k, v in outputs.items()},
            "resources": [], "check_results": None}


def test_real_terraform_output_through_python_terraform(tmp_path: Path) -> None:
    _terraform_or_skip()
    fixture = json.loads((REPO / "tests/unit/inventory/fixtures/terraform_output_aws.json").read_text())
    (tmp_path / "terraform.tfstate").write_text(json.dumps(_state(fixture)))
    found = fetch_terraform(tmp_path, 22220, python_terraform_runner)
    assert [(s.task_type, s.task_index) for s in found.specs] == [
        ("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1), ("evaluator", 0)]
    assert found.cluster_name == "demo"


def test_real_terraform_without_state_says_provision(tmp_path: Path) -> None:
    _terraform_or_skip()
    with pytest.raises(InventoryError) as info:
        fetch_terraform(tmp_path, 22220, python_terraform_runner)
    assert str(info.value.problems[0]).endswith("(missing or empty state). Fix: run `make provision` first")


def _ansible_env(extra: dict[str, str], tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFCLUSTER_")}
    env.update(extra)
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env["ANSIBLE_LOCAL_TEMP"] = str(tmp_path / "ansible-tmp")
    env["ANSIBLE_HOME"] = str(tmp_path / "ansible-home")
    env["ANSIBLE_INVENTORY_UNPARSED_FAILED"] = "true"  # a broken script must fail, not give an empty inventory
    return env


def _ansible_inventory(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    tool = VENV_BIN / "ansible-inventory"
    if not tool.exists():
        found = shutil.which("ansible-inventory")
        if not found:
            pytest.skip("ansible-inventory not installed")
        tool = Path(found)
    return subprocess.run([str(tool), "-i", str(SCRIPT), *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)


SOURCES = {
    "local": ({"TFCLUSTER_SOURCE": "local", "TFCLUSTER_WORKERS": "2", "TFCLUSTER_STRATEGY": "parameter_server"},
              {"chief": ["chief-0"], "ps": ["ps-0"], "worker": ["worker-0", "worker-1"]}),
    "static": ({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(REPO / "inventory/onprem.example.yml")},
               {"chief": ["gpu-a"], "worker": ["gpu-b", "gpu-c"]}),
}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_ansible_inventory_list_round_trip(source: str, tmp_path: Path) -> None:
    extra, groups = SOURCES[source]
    env = _ansible_env(extra, tmp_path)
    direct = json.loads(subprocess.run([sys.executable, str(SCRIPT), "--list"], env=env, capture_output=True,
                                       text=True, check=True).stdout)
    result = _ansible_inventory(env, "--list")
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    for group, hosts in groups.items():
        assert sorted(seen[group]["hosts"]) == sorted(hosts)
    assert sorted(seen["tfcluster"]["children"]) == ["chief", "evaluator", "ps", "worker"]
    # Every host var the script emitted comes back unchanged; group vars reach every host through `tfcluster`.
    for host, hostvars in direct["_meta"]["hostvars"].items():
        got = seen["_meta"]["hostvars"][host]
        for key, value in hostvars.items():
            assert got[key] == value, (host, key)
    host = next(iter(direct["_meta"]["hostvars"]))
    vars_result = _ansible_inventory(env, "--host", host)
    assert vars_result.returncode == 0, vars_result.stderr
    merged = json.loads(vars_result.stdout)
    assert merged["tfcluster_cluster_spec"] == direct["tfcluster"]["vars"]["tfcluster_cluster_spec"]
    assert merged["tfcluster_strategy"] == direct["tfcluster"]["vars"]["tfcluster_strategy"]


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_ansible_inventory_graph_shows_groups(source: str, tmp_path: Path) -> None:
    extra, groups = SOURCES[source]
    result = _ansible_inventory(_ansible_env(extra, tmp_path), "--graph")
    assert result.returncode == 0, result.stderr
    assert "@tfcluster:" in result.stdout
    for group, hosts in groups.items():
        assert f"@{group}:" in result.stdout
        for host in hosts:
            assert f"--{host}" in result.stdout


def test_ansible_inventory_fails_on_invalid_inventory(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("hosts:\n  - {address: 10.0.0.1}\n  - {address: 10.0.0.1}\n")
    env = _ansible_env({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(bad)}, tmp_path)
    result = _ansible_inventory(env, "--list")
    assert result.returncode != 0
    assert "is also used by hosts[0] (10.0.0.1)" in result.stderr
