"""On-prem flow end to end on lab hosts (issue 6 item 2): static host file, SSH, air-gapped runtime, MWMS.

The session fixture ``flow_lab`` already ran site.yml over SSH on 4 fresh hosts with the wheelhouse (that run is
asserted here); this module then trains chief + 2 workers with MultiWorkerMirroredStrategy through train.yml,
checks each unit carried its host's TF_CONFIG, collects and verifies the chief's checkpoint on the control machine,
loads it, and checks that a second site.yml run changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lab.flows import MWMS_SLOTS, Flows
from tfcluster.core.files import verify_dir

# one of the two flow groups: its tests run in the one worker that boots its flow lab (tests/conftest.py)
pytestmark = [pytest.mark.xdist_group("flowlab2"), pytest.mark.lab, pytest.mark.slow]



@pytest.mark.timeout(1800)
def test_prepare_skips_the_driver_and_finds_the_runtime_in_place(flow_lab: Flows) -> None:
    """The flow lab's hosts boot on the runtime layer: site.yml's python_runtime role finds it in place (its fresh
    install from the wheelhouse is tests/lab/test_runtime_install.py)."""
    run = flow_lab.prepare_run
    assert run is not None and run.returncode == 0, run.describe() if run else "no prepare run"
    out = run.output
    # nvidia_driver: no GPU on a lab host -> the role skips with a clear line, installs nothing.
    flat = " ".join(out.split()).lower()  # the YAML callback wraps long messages
    for host in ("f-chief", "f-w0", "f-w1", "f-ps"):
        assert f"{host}: no gpu (no nvidia device, pci vendor 0x10de): no driver needed" in flat, run.describe(200)
    driver_changes = [block.splitlines()[0] for block in out.split("TASK [")[1:]
                      if block.startswith("tfcluster.cluster.nvidia_driver") and "\nchanged: [" in block]
    assert driver_changes == [], f"the driver role changed something on a host without a GPU: {driver_changes}"
    for host in ("f-chief", "f-w0", "f-w1", "f-ps"):
        assert run.recap[host]["failed"] == 0 and run.recap[host]["unreachable"] == 0, run.describe()
        if os.environ.get("TFCLUSTER_FLOW_REUSE") != "1":  # a reused (already prepared) lab changes nothing
            assert run.recap[host]["changed"] > 0, f"first site.yml changed nothing on {host}"
        # Air-gapped: no route off the bridge, yet the runtime imports TensorFlow, installed from the wheelhouse.
        assert flow_lab.lab.ssh(host, "ip route get 192.0.2.1", check=False).returncode != 0
        assert flow_lab.lab.ssh(host, "ls /opt/tfcluster/wheelhouse | grep -c '^tensorflow-'").stdout.strip() == "1"
        probe = flow_lab.lab.ssh(host, "TF_CPP_MIN_LOG_LEVEL=3 /opt/tfcluster/venv/bin/python -c "
                                       "'import tensorflow as tf, tf_keras; print(tf.__version__)'", timeout=180)
        assert probe.stdout.strip() == "2.21.0"
    runtime_installs = [block.splitlines()[0] for block in out.split("TASK [")[1:]
                        if block.startswith("tfcluster.cluster.python_runtime : Install the hash-pinned")
                        and "\nchanged: [" in block]
    assert runtime_installs == [], "the runtime was installed again on hosts that have it (the layer)"


@pytest.mark.timeout(1800)
def test_mwms_trains_collects_and_rerun_is_noop(flow_lab: Flows) -> None:
    job = flow_lab.job("onprem-mwms")
    hosts_file = flow_lab.hosts_file("onprem", MWMS_SLOTS)
    try:
        run = flow_lab.run("train.yml", hosts_file, job, timeout=900)
        assert run.returncode == 0, run.describe(120)
        # Each unit ran with its own host's TF_CONFIG, in one cluster of the three lab addresses.
        cluster = {"chief": [f"{flow_lab.lab.host('f-chief').address}:12345"],
                   "worker": [f"{flow_lab.lab.host('f-w0').address}:12345",
                              f"{flow_lab.lab.host('f-w1').address}:12345"]}
        for host, task_type, index in MWMS_SLOTS:
            env = flow_lab.lab.ssh(host, f"cat /etc/tfcluster/{job}.env").stdout
            line = next(x for x in env.splitlines() if x.startswith("TF_CONFIG="))
            tf_config = json.loads(line.split("=", 1)[1].strip("'"))
            assert tf_config == {"cluster": cluster, "task": {"type": task_type, "index": index}}
            props = flow_lab.unit_props(host, job)
            assert props["Result"] == "success" and props["ExecMainStatus"] == "0", (host, props)
            assert props["ActiveState"] == "inactive", (host, props)
        # Workers ran with MultiWorkerMirrored across 3 replicas and exited 0; the chief's artifacts came home.
        dest = flow_lab.artifacts(job) / "current"  # the collector's verified copy
        assert verify_dir(dest) > 0  # DONE there, every file of MANIFEST.sha256 with its sha256
        metrics = json.loads((dest / "metrics.json").read_text())
        assert metrics["strategy"] == "multi_worker_mirrored", metrics
        assert metrics["replicas"] == 3 and metrics["epochs"] == 3, metrics
        # It loads on the control machine.
        load = subprocess.run(
            [sys.executable, "-c", "import sys, numpy as np, tf_keras; m = tf_keras.models.load_model(sys.argv[1]); "
             "print(m.predict(np.zeros((2, 28, 28, 1), 'float32'), verbose=0).shape)", str(dest / "export")],
            check=False, capture_output=True, text=True, timeout=300,
            env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"})
        assert load.returncode == 0 and load.stdout.strip().splitlines()[-1] == "(2, 10)", load.stderr[-2000:]
        # A second site.yml run changes nothing on any host.
        again = flow_lab.run("site.yml", hosts_file, job, timeout=600)
        assert again.returncode == 0, again.describe()
        assert {h: c["changed"] for h, c in again.recap.items() if h != "localhost"} == \
            {"f-chief": 0, "f-w0": 0, "f-w1": 0}, again.describe(80)
    finally:
        flow_lab.stop_everywhere(job)
