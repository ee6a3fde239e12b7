"""The tf_job role refuses a job id tfcluster uses for its own files (contract.RESERVED_JOB_IDS, read through the
contract lookup), before anything is rendered: its name check (tasks/name.yml, which site.yml runs first and the
preflight again) alone, on localhost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfcluster.core import contract

REPO = Path(__file__).resolve().parents[3]
PLAY = """- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: tfcluster.cluster.tf_job
        tasks_from: name.yml
"""
SLOT = {"tfcluster_task_type": contract.WORKER, "tfcluster_task_index": 0, "tfcluster_address": "127.0.0.1:1",
        "tfcluster_chief": "localhost"}


def preflight(tmp_path: Path, job: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "play.yml").write_text(PLAY)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "TFCLUSTER_"))}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    extra = {**SLOT, "tfcluster_job": {contract.ANSIBLE_UNSAFE: job}}  # as the tfcluster command writes it
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("job", ["autostop", "AutoStop", "datasets", "preflight", "logs", "jobs"])
def test_a_reserved_job_id_is_refused_by_the_role(tmp_path: Path, job: str) -> None:
    proc = preflight(tmp_path, job)
    assert proc.returncode != 0, proc.stdout[-2000:]
    text = " ".join(proc.stdout.split())
    assert f'"{job}" is a reserved job id' in text and f"e.g. JOB={job}-1. Nothing was rendered." in text, text[-2000:]
    assert "Fix: choose another job id, none of autostop, datasets," in text


def test_a_job_id_beside_the_reserved_ones_passes_the_role(tmp_path: Path) -> None:
    proc = preflight(tmp_path, "autostop-1")
    assert proc.returncode == 0, proc.stdout[-2000:]
