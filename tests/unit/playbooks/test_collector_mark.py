"""The collector's mark (playbooks/roles/collector/tasks/mark.yml) and the host's autostop read one convention:
after a verified collect the chief holds <env dir>/<job>.collected, newer than DONE, and autostop no longer counts
the job as uncollected. Runs the tasks on localhost (connection local), as the tfcluster command would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tfcluster.core import contract
from tfcluster.host import autostop

REPO = Path(__file__).resolve().parents[3]
PLAY = """- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: tfcluster.cluster.collector
        tasks_from: mark.yml
"""


def mark(tmp_path: Path, rc: int = 0) -> subprocess.CompletedProcess[str]:
    (tmp_path / "play.yml").write_text(PLAY)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "TFCLUSTER_"))}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    extra = {"tfcluster_job": "mnist", "tfcluster_prefix": str(tmp_path / "host"),
             "_collector_local": False,  # a real chief (here: this machine, without become)
             "ansible_become": False, "ansible_python_interpreter": sys.executable,
             "_collector_pull": {"rc": rc, "stdout": json.dumps({"version": "ab" * 32, "changed": True})}}
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def chief(tmp_path: Path, spec: bool = True) -> Path:
    etc, model = tmp_path / "host/etc/tfcluster", tmp_path / "host/var/lib/tfcluster/mnist"
    etc.mkdir(parents=True)
    model.mkdir(parents=True)
    (model / contract.DONE).write_text("{}")
    old = time.time() - 60
    os.utime(model / contract.DONE, (old, old))
    if spec:
        (etc / "mnist.json").write_text(json.dumps({"name": "mnist", "model_dir": str(model)}))
    return etc


def test_a_verified_collect_marks_the_job_and_autostop_sees_it(tmp_path: Path) -> None:
    etc = chief(tmp_path)
    assert autostop.uncollected_jobs(str(etc)) == ("mnist",)
    assert mark(tmp_path, rc=1).returncode == 0 and not (etc / "mnist.collected").exists()  # a failed collect
    proc = mark(tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    written = json.loads((etc / "mnist.collected").read_text())
    done = tmp_path / "host/var/lib/tfcluster/mnist" / contract.DONE
    assert written == {"job": "mnist", "version": "ab" * 32, "done_mtime": done.stat().st_mtime}
    assert autostop.uncollected_jobs(str(etc)) == ()
    again = mark(tmp_path)
    assert "changed=0" in again.stdout, again.stdout[-2000:]


def test_no_spec_no_mark(tmp_path: Path) -> None:
    etc = chief(tmp_path, spec=False)
    assert mark(tmp_path).returncode == 0
    assert not (etc / "mnist.collected").exists()
