"""The prepare stage and the collector through ansible-playbook on local slots (loopback only): a prepared cluster
skips every role after one probe, a changed setting prepares again, the datasets the job checks are handed on;
collect.yml versions its copies behind `current`, keeps the previous one and accepts an empty manifest."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.integration.playbooks.local_cluster import BYO, NO_TF, Cluster, assert_ok, recap

pytestmark = [pytest.mark.integration]

ROLES = ("nvidia_driver :", "python_runtime :", "trainer :", "dataset :", "firewall :")


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


def roles_that_ran(output: str) -> list[str]:
    return [role for role in ROLES if f"TASK [tfcluster.cluster.{role}" in output]  # roles run by their FQCN


def test_a_prepared_cluster_skips_every_role_and_a_change_prepares_again(cluster: Cluster) -> None:
    plain = {**NO_TF, "tfcluster_datasets": []}
    first = cluster.playbook("site.yml", "prep", extra_vars=plain)
    assert_ok(first)
    assert roles_that_ran(first.stdout) == list(ROLES)
    again = cluster.playbook("site.yml", "prep", extra_vars=plain)
    assert_ok(again)
    assert roles_that_ran(again.stdout) == [] and all(c["changed"] == 0 for c in recap(again.stdout).values())
    stamps = sorted(cluster.local_root.glob("*/*/opt/tfcluster/prepared.sha256"))
    assert len(stamps) == cluster.workers
    # A new release alone (a user's script) runs the trainer role only, and deploys it.
    script = cluster.playbook("site.yml", "prep", extra_vars={**plain, "tfcluster_script": BYO})
    assert_ok(script)
    assert roles_that_ran(script.stdout) == ["trainer :"]
    assert all((cluster.host_dir(h) / "opt/tfcluster/trainer/current/user/byo_job.py").is_file()
               for h in ("worker-0", "worker-1"))
    # A setting the roles read changes the digest: every role runs again.
    changed = cluster.playbook("site.yml", "prep", extra_vars={**plain, "tfcluster_script": BYO,
                                                               "nvidia_driver_branch": "535"})
    assert_ok(changed)
    assert roles_that_ran(changed.stdout) == list(ROLES)


def test_check_mode_of_a_fresh_cluster_writes_no_stamp(cluster: Cluster) -> None:
    dry = cluster.playbook("site.yml", "prep", "--check", extra_vars=NO_TF)
    assert_ok(dry)
    assert not list(cluster.local_root.glob("*/*/opt/tfcluster/prepared.sha256"))


def model_dir(cluster: Cluster, job: str, files: dict[str, bytes]) -> Path:
    root = cluster.host_dir("worker-0") / "var/lib/tfcluster" / job
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "MANIFEST.sha256").write_text(
        "".join(f"{hashlib.sha256(d).hexdigest()}  {r}\n" for r, d in sorted(files.items())))
    (root / "DONE").write_text("{}\n")
    return root


def test_collect_versions_copies_and_accepts_an_empty_manifest(cluster: Cluster) -> None:
    model_dir(cluster, "coll", {"export/model.bin": b"one" * 1000})
    assert_ok(cluster.playbook("collect.yml", "coll"))
    home = cluster.artifacts / "coll"
    first = os.readlink(home / "current")
    model_dir(cluster, "coll", {"export/model.bin": b"two" * 1000})
    second = cluster.playbook("collect.yml", "coll")
    assert_ok(second)
    assert os.readlink(home / "current") != first and (home / first / "export/model.bin").read_bytes() == b"one" * 1000
    unchanged = cluster.playbook("collect.yml", "coll")
    assert_ok(unchanged)
    assert "Already collected" in unchanged.stdout
    assert all(c["changed"] == 0 for c in recap(unchanged.stdout).values())
    model_dir(cluster, "empty", {})
    empty = cluster.playbook("collect.yml", "empty")
    assert_ok(empty)
    assert "nothing to collect" in empty.stdout and "$TFCLUSTER_MODEL_DIR" in empty.stdout
