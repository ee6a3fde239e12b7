"""The inventory with real tools: `terraform output -json` through python-terraform, and Ansible's
`ansible-inventory --list/--graph` running inventory/slots.py as a subprocess (static and local sources)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.inventory.inventory_itest import REPO, SCRIPT, ansible, ansible_env, terraform_state
from tests.ports import free_port
from tfcluster.inventory.build import unmarked
from tfcluster.inventory.model import InventoryError
from tfcluster.inventory.sources.terraform import Overrides, fetch_terraform, find_terraform, python_terraform_runner

pytestmark = pytest.mark.integration


def _terraform_or_skip() -> str:
    try:
        return find_terraform()
    except InventoryError:
        pytest.skip("no terraform executable (make setup provides one)")


def test_real_terraform_output_through_python_terraform(tmp_path: Path) -> None:
    _terraform_or_skip()
    fixture = json.loads((REPO / "tests/unit/inventory/fixtures/terraform_output_aws.json").read_text())
    (tmp_path / "terraform.tfstate").write_text(json.dumps(terraform_state(fixture)))
    found = fetch_terraform(tmp_path, Overrides(port=2222), python_terraform_runner)
    assert [(s.task_type, s.task_index) for s in found.specs] == [
        ("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1), ("evaluator", 0)]
    assert found.cluster_name == "demo"


def test_real_terraform_without_state_says_provision(tmp_path: Path) -> None:
    _terraform_or_skip()
    with pytest.raises(InventoryError) as info:
        fetch_terraform(tmp_path, Overrides(port=2222), python_terraform_runner)
    assert str(info.value.problems[0]).endswith("(missing or empty state). Fix: run `make provision` first")


SOURCES = {
    "local": ({"TFCLUSTER_SOURCE": "local", "TFCLUSTER_WORKERS": "2", "TFCLUSTER_STRATEGY": "parameter_server"},
              {"chief": ["chief-0"], "ps": ["ps-0"], "worker": ["worker-0", "worker-1"]}),
    "static": ({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(REPO / "inventory/onprem.example.yml")},
               {"chief": ["gpu-a"], "worker": ["gpu-b", "gpu-c"]}),
}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_ansible_inventory_list_round_trip(source: str, tmp_path: Path) -> None:
    extra, groups = SOURCES[source]
    env = ansible_env(extra, tmp_path)
    direct = json.loads(subprocess.run([sys.executable, str(SCRIPT), "--list"], env=env, capture_output=True,
                                       text=True, check=True).stdout)
    result = ansible("ansible-inventory", env, "--list")
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
    vars_result = ansible("ansible-inventory", env, "--host", host)
    assert vars_result.returncode == 0, vars_result.stderr
    merged = json.loads(vars_result.stdout)  # --host prints values as Ansible sees them: without the unsafe marks
    group = unmarked(direct["tfcluster"]["vars"])
    for key in ("tfcluster_cluster_spec", "tfcluster_strategy", "tfcluster_chief", "tfcluster_all_gpus"):
        assert merged[key] == group[key], key
    assert merged["ansible_host"] == unmarked(direct["_meta"]["hostvars"][host]["ansible_host"])


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_ansible_inventory_graph_shows_groups(source: str, tmp_path: Path) -> None:
    extra, groups = SOURCES[source]
    result = ansible("ansible-inventory", ansible_env(extra, tmp_path), "--graph")
    assert result.returncode == 0, result.stderr
    assert "@tfcluster:" in result.stdout
    for group, hosts in groups.items():
        assert f"@{group}:" in result.stdout
        for host in hosts:
            assert f"--{host}" in result.stdout


def test_ansible_inventory_fails_on_invalid_inventory(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("hosts:\n  - {address: 10.0.0.1}\n  - {address: 10.0.0.1}\n")
    env = ansible_env({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(bad)}, tmp_path)
    result = ansible("ansible-inventory", env, "--list")
    assert result.returncode != 0
    assert "is also used by hosts[0] (10.0.0.1)" in result.stderr


def test_ssh_command_ansible_builds(tmp_path: Path) -> None:
    """The ssh argv Ansible really runs (-vvvv prints it) carries the cluster's known_hosts with strict checking, even
    though ansible.cfg turns host key checking off, and jumps through the bastion with the same options."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"bastion": {"address": "127.0.0.1", "user": "ops", "port": free_port()},
                                     "hosts": [{"address": "10.0.0.7", "ssh_user": "ubuntu"}]}))
    env = ansible_env({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(hosts),
                       "TFCLUSTER_KNOWN_HOSTS": str(known), "ANSIBLE_TIMEOUT": "5"}, tmp_path)
    result = ansible("ansible", env, "worker-0", "-m", "ansible.builtin.ping", "-vvvv")
    assert result.returncode != 0  # nothing listens on the bastion's port
    line = next(line for line in result.stdout.splitlines() if "SSH: EXEC ssh " in line)
    argv = shlex.split(line.split("SSH: EXEC ", 1)[1])
    options = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-o"]
    assert "StrictHostKeyChecking=no" not in options
    assert options.index(f"UserKnownHostsFile={known}") < options.index("StrictHostKeyChecking=yes")
    jump = shlex.split(next(o for o in options if o.startswith("ProxyCommand=")).removeprefix("ProxyCommand="))
    assert jump[:6] == ["ssh", "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes", "-o"]
    assert jump[-5:] == ["-W", "[%h]:%p", "-p", str(yaml.safe_load(hosts.read_text())["bastion"]["port"]),
                         "ops@127.0.0.1"]
    assert "User=\"ubuntu\"" in options and argv[-2] == "10.0.0.7"  # ansible_user, ansible_host


def test_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """`make bench`'s inventory part, at small sizes: every case runs and the size per host stays flat."""
    from bench.inventory_build import main as bench_main

    assert bench_main(["--hosts", "40", "80", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()[2:] if line.split() and line.split()[1] in ("40", "80")]
    assert sorted({r[0] for r in rows}) == ["before", "script-json", "script-local", "script-yaml", "terraform",
                                             "yaml-parse"]
    sizes = {(r[0], r[1]): float(r[4]) for r in rows if r[0] not in ("yaml-parse", "before")}
    for case in ("script-json", "script-local", "script-yaml", "terraform"):
        assert abs(sizes[(case, "80")] / sizes[(case, "40")] - 1) < 0.05, (case, sizes)
