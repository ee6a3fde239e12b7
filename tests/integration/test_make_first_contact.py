"""First contact, out of order (issue 39): what a user reads when a command meets no cluster, or hosts that cannot
answer however long they are waited for. Through `make`, as typed, on a cluster name and Terraform root of the
test's own (LocalMake: a copy of infra/, never provisioned).

* `make status` / `make wait` on a local cluster never provisioned: the inventory's own words and its fix, not
  Ansible's ini parser reading our script; the wait records no run, so `make destroy` of that cluster goes on;
* `make train CLUSTER=onprem` with host names that do not resolve: each host named at once with the fix, not waited
  for (a host that is not being created does not start resolving).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.local_make import LocalMake, output

pytestmark = [pytest.mark.integration]

PARSER_TEXT = ("No closing quotation", "Failed to parse inventory with 'ini' plugin", "Completely failed to parse")


@pytest.fixture
def never_provisioned(repo: Path, tmp_path: Path) -> Iterator[LocalMake]:
    cluster = LocalMake(repo, tmp_path, prefix="first-contact")
    try:
        yield cluster
    finally:
        for job_dir in cluster.job_dirs():
            shutil.rmtree(job_dir, ignore_errors=True)


def test_no_cluster_gets_the_inventorys_words_and_the_wait_blocks_no_destroy(never_provisioned: LocalMake) -> None:
    for command in ("status", "wait"):
        run = never_provisioned.make(command, "CLUSTER=local", timeout=300)
        assert run.returncode != 0, output(run)
        assert "the inventory could not be read, so nothing ran:" in run.stdout, output(run)
        assert "Fix: run `make provision` first" in run.stdout, output(run)
        assert not any(text in run.stdout for text in PARSER_TEXT), output(run)
        assert "Traceback" not in run.stdout + run.stderr and "still running" not in run.stdout, output(run)
    ledger = never_provisioned.repo / "artifacts" / "local" / never_provisioned.name / "job.json"
    assert not ledger.exists() or json.loads(ledger.read_text()).get("state") not in ("started", "finished")
    destroy = never_provisioned.make("destroy", "CLUSTER=local", timeout=300)
    assert destroy.returncode == 0, output(destroy)


def test_host_names_that_do_not_resolve_are_named_at_once(repo: Path, tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yml"
    hosts.write_text("cluster_name: typo\ndefaults:\n  ssh_user: ubuntu\nhosts:\n"
                     "  - {name: gpu-a, address: gpu-a.invalid, task_type: worker}\n"
                     "  - {name: gpu-b, address: gpu-b.invalid, task_type: worker}\n")
    job = f"first-contact-{tmp_path.name[-12:]}".replace("_", "-")
    try:
        run = LocalMake(repo, tmp_path / "c").make("train", "CLUSTER=onprem", f"HOSTS={hosts}", f"JOB={job}",
                                                   timeout=300)
    finally:
        shutil.rmtree(repo / "artifacts" / "onprem" / job, ignore_errors=True)
    assert run.returncode != 0, output(run)
    for host in ("gpu-a", "gpu-b"):
        assert (f"{host} (ubuntu@{host}.invalid): its name does not resolve (Could not resolve hostname "
                f"{host}.invalid") in run.stdout, output(run)
    assert "so it was not waited for" in run.stdout and "Fix: correct its address in the host file" in run.stdout
    assert "did not answer within" not in run.stdout, output(run)  # the 60 s wait for a down host was skipped
