"""ParameterServerStrategy across lab hosts (issue 6 item 3): chief + 1 ps + 2 workers, to completion.

The ps and the workers have no end of their own in TensorFlow's PS training (they serve until killed); the
trainer's contract is that they exit 0 once the chief is done. Asserted from each host's systemd journal. A script in
the shape of TensorFlow's tutorial (examples/keras_parameter_server/train.py: its servers `join()` for ever) ends
with its chief: the wait stops the servers and the job succeeds (issue 36).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.flows import PS_SLOTS, Flows
from tfcluster.core.files import verify_dir

# one of the two flow groups: its tests run in the one worker that boots its flow lab (tests/conftest.py)
pytestmark = [pytest.mark.xdist_group("flowlab"), pytest.mark.lab, pytest.mark.slow]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "keras_parameter_server" / "train.py"


@pytest.mark.timeout(1800)
def test_parameter_server_job_completes_and_every_task_exits_cleanly(flow_lab: Flows) -> None:
    job = flow_lab.job("ps-job")
    try:
        run = flow_lab.run("train.yml", flow_lab.hosts_file(job, PS_SLOTS), job, timeout=900)
        assert run.returncode == 0, run.describe(120)
        dest = flow_lab.artifacts(job) / "current"  # the collector's verified copy
        assert verify_dir(dest) > 0  # DONE there, every file of MANIFEST.sha256 with its sha256
        metrics = json.loads((dest / "metrics.json").read_text())
        assert metrics["strategy"] == "parameter_server" and metrics["epochs"] == 3, metrics
        for host, task_type, _ in PS_SLOTS:
            journal = flow_lab.journal(host, job)
            assert any("Deactivated successfully" in line for line in journal), (host, task_type, journal)
            bad = [line for line in journal if "Failed with result" in line or "Scheduled restart" in line
                   or "status=" in line]
            assert bad == [], (host, task_type, bad)
            assert not flow_lab.active(host, job), f"{task_type} on {host} still runs"
    finally:
        flow_lab.stop_everywhere(job)


@pytest.mark.timeout(1800)
def test_a_tutorial_script_ends_with_its_chief_and_its_servers_are_stopped(flow_lab: Flows) -> None:
    job = flow_lab.job("ps-script")
    try:
        run = flow_lab.run("train.yml", flow_lab.hosts_file(job, PS_SLOTS), job, {
            "tfcluster_script": {"__ansible_unsafe": str(EXAMPLE)}, "tfcluster_datasets": ["mnist"],
            "tfcluster_script_args": ["--epochs", "2", "--steps-per-epoch", "40"]}, timeout=900)
        assert run.returncode == 0, run.describe(120)
        dest = flow_lab.artifacts(job) / "current"
        assert verify_dir(dest) > 0 and (dest / "keras-model" / "saved_model.pb").is_file()
        chief = flow_lab.journal("f-chief", job)
        assert any("Deactivated successfully" in line for line in chief), chief
        for host, _, _ in PS_SLOTS[1:]:  # still in server.join() when the chief ended: stopped by the wait
            journal = flow_lab.journal(host, job)
            assert any(line.split(": ", 1)[-1].startswith("Stopped ") for line in journal), (host, journal)
            assert not any("Failed with result" in line for line in journal), (host, journal)
        for host, _, _ in PS_SLOTS:
            assert not flow_lab.active(host, job), f"{host} still runs"
    finally:
        flow_lab.stop_everywhere(job)
