"""ParameterServerStrategy across lab hosts (issue 6 item 3): chief + 1 ps + 2 workers, to completion.

The ps and the workers have no end of their own in TensorFlow's PS training (they serve until killed); the
trainer's contract is that they exit 0 once the chief is done. Asserted from each host's systemd journal.
"""

from __future__ import annotations

import json

import pytest

from lab.flows import PS_SLOTS, Flows
from tfcluster.core.files import verify_dir

# one of the two flow groups: its tests run in the one worker that boots its flow lab (tests/conftest.py)
pytestmark = [pytest.mark.xdist_group("flowlab"), pytest.mark.lab, pytest.mark.slow]


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
