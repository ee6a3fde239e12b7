"""A SCRIPT's hash-pinned requirements, installed for real by site.yml on local slots (connection=local): into each
slot's own content-addressed package directory under its prefix, never into the runtime venv; offline, from a
wheelhouse (pip --no-index --find-links); idempotent; an unhashed file is refused on the control machine."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.playbooks.local_cluster import REPO, Cluster, assert_ok, byo_vars, recap

pytestmark = pytest.mark.integration
MAKE_WHEEL = REPO / "molecule" / "default" / "make_wheel.py"  # tfcluster_probe-1.0, a real wheel, and its lock


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_everything()


def test_site_installs_the_scripts_lock_into_each_slots_own_directory(cluster: Cluster) -> None:
    wheels, lock = cluster.tmp / "wheelhouse", cluster.tmp / "requirements.txt.lock"
    wheels.mkdir()
    subprocess.run([sys.executable, str(MAKE_WHEEL), str(wheels), str(lock)], check=True)
    extra = byo_vars("--steps 1", tfcluster_script_requirements=str(lock), trainer_wheelhouse=str(wheels))
    proc = cluster.playbook("site.yml", "site", extra_vars=extra)
    assert_ok(proc)
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    for host in ("worker-0", "worker-1"):
        pkgs = cluster.host_dir(host) / "var/lib/tfcluster/pkgs"
        assert sorted(p.name for p in pkgs.iterdir()) == [digest]  # no partial install left behind
        site = pkgs / digest
        assert (site / "tfcluster_probe/__init__.py").read_text() == 'VERSION = "1.0"\n'
        found = subprocess.run([sys.executable, "-c", "import tfcluster_probe; print(tfcluster_probe.__file__)"],
                               env={"PYTHONPATH": str(site)}, capture_output=True, text=True, check=True)
        assert found.stdout.strip() == str(site / "tfcluster_probe/__init__.py")
    # Not in the runtime venv (local slots reuse the one running Ansible).
    runtime = subprocess.run([sys.executable, "-c", "import importlib.util; print(importlib.util.find_spec("
                              "'tfcluster_probe'))"], capture_output=True, text=True, check=True, cwd=cluster.tmp)
    assert runtime.stdout.strip() == "None"

    again = cluster.playbook("site.yml", "site", extra_vars=extra)
    assert_ok(again)
    counts = recap(again.stdout)
    assert set(counts) >= {"worker-0", "worker-1"}
    assert all(c["changed"] == 0 for c in counts.values()), again.stdout[-3000:]


def test_site_refuses_requirements_without_hashes_before_any_host_changes(cluster: Cluster) -> None:
    plain = cluster.tmp / "requirements.txt"
    plain.write_text("tfcluster-probe\n")
    proc = cluster.playbook("site.yml", "plain", extra_vars=byo_vars("--steps 1",
                                                                      tfcluster_script_requirements=str(plain)))
    assert proc.returncode != 0
    output = " ".join((proc.stdout + proc.stderr).split())  # the YAML callback folds long messages
    assert f"{plain} is not hash-pinned" in output and f"make lock SCRIPT_REQUIREMENTS={plain}" in output
    assert not (cluster.host_dir("worker-0") / "var/lib/tfcluster/pkgs").exists()
