"""Real multi-process training on 127.0.0.1: MultiWorkerMirrored to completion, resume after SIGKILL, ParameterServer.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.trainer.trainer_procs import (
    START_ALLOWANCE_S,
    LocalCluster,
    assert_chief_artifacts,
    evaluate_export,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_workers_train_to_completion(local_cluster: Callable[..., LocalCluster], mnist_subset: Path,
                                         tmp_path: Path) -> None:
    cluster = local_cluster({"worker": 2}, ["--data", str(mnist_subset), "--epochs", "3",
                                            "--learning-rate", "0.003"])
    cluster.start_all()
    codes = cluster.wait(timeout=240)
    assert codes == {"worker-0": 0, "worker-1": 0}, cluster.logs()

    metrics = assert_chief_artifacts(cluster.model_dir)
    assert metrics["strategy"] == "multi_worker_mirrored"
    assert metrics["replicas"] == 2 and metrics["workers"] == 2
    assert metrics["global_batch"] == 128
    assert metrics["epochs"] == 3 and metrics["resumes"] == 0
    assert metrics["accuracy"] > 0.5 and metrics["test_accuracy"] > 0.5  # chance is 0.1
    assert metrics["examples_per_sec"] > 0
    # The epoch-boundary gap is measured and recorded (one iterator for the whole run); its bound (< 1 s) is a
    # figure of bench.scaling, on an idle machine: under the suite's load it is a coin toss (issue 40).
    assert len(metrics["epoch_seconds"]) == 3 and metrics["epoch_boundary_max_s"] >= 0, metrics

    # the non-chief wrote only temp dirs, and removed them (TMPDIR is tmp_path)
    assert not list(tmp_path.glob("tfcluster-worker-1-*"))
    assert json.loads(cluster.status_file("worker-1").read_text())["state"] == "done"
    status = json.loads(cluster.status_file("worker-0").read_text())
    assert status["state"] == "done" and status["epochs_done"] == 3 and status["examples_per_sec"] > 0

    # a collected export loads in a plain process and evaluates on MNIST test data
    result = evaluate_export(mnist_subset, cluster.model_dir / "export", tmp_path)
    assert result["accuracy"] > 0.5


def test_resume_after_sigkill(local_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    # The kill lands in the third epoch (after two backups), with 280 steps still to train: 4 epochs (6 trained two
    # more after the resume, ~9 CPU-s, for nothing the assertions read).
    args = ["--dataset", "synthetic", "--synthetic-examples", "2048", "--epochs", "4", "--steps-per-epoch", "150",
            "--steps-per-execution", "5", "--no-tensorboard", "--status-interval", "0.1"]
    cluster = local_cluster({"worker": 2}, args)
    cluster.start_all()
    cluster.wait_for("worker-1", lambda st: st.get("epochs_done", 0) >= 2 and st["epoch"] > st["epochs_done"]
                     and st.get("step", 0) >= 20, timeout=180 + START_ALLOWANCE_S)
    cluster.kill("worker-1")
    # the survivor notices the lost peer and fails by itself (no hang)
    rc = cluster.procs["worker-0"].popen.wait(timeout=90)
    assert rc == 1, cluster.logs()
    assert list((cluster.model_dir / "backup" / "worker-0").glob("backup-*.index"))
    # worker-1 comes back on a fresh disk (a replaced instance): it gets the newest state from worker-0
    shutil.rmtree(cluster.model_dir / "backup" / "worker-1")

    cluster.start_all()  # what systemd's Restart=on-failure does, on the same ports
    codes = cluster.wait(timeout=240)
    assert codes == {"worker-0": 0, "worker-1": 0}, cluster.logs()
    metrics = assert_chief_artifacts(cluster.model_dir, tensorboard=False)
    assert metrics["resumes"] == 1
    assert metrics["initial_epoch"] >= 2, metrics
    assert metrics["epochs"] == 4
    assert metrics["epochs_this_run"] == 4 - metrics["initial_epoch"]
    assert "restored backup" in cluster.procs["worker-1"].text()
    assert "is held by 1 of 2 replicas: sharing it" in cluster.procs["worker-1"].text()
    assert not list(tmp_path.glob("tfcluster-worker-1-*"))  # the restart removed what the SIGKILL left behind


def test_parameter_server_cluster(local_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    # Each task pinned to one core, as the local slots run: TensorFlow would give each one inter-op thread, and a
    # worker with one deadlocks at the first step (issue 36); the trainer gives itself two (tfcluster/host/tfthreads).
    cluster = local_cluster({"chief": 1, "ps": 1, "worker": 2},
                            ["--dataset", "synthetic", "--synthetic-examples", "1024", "--epochs", "2",
                             "--steps-per-epoch", "400", "--steps-per-execution", "5", "--server-timeout", "60",
                             "--status-interval", "0.2"], pinned=True)
    cluster.start_all()
    codes = cluster.wait(timeout=240)
    # ps and workers exit 0 once the chief is done
    assert codes == {"chief-0": 0, "ps-0": 0, "worker-0": 0, "worker-1": 0}, cluster.logs()
    metrics = assert_chief_artifacts(cluster.model_dir)
    assert metrics["strategy"] == "parameter_server" and metrics["epochs"] == 2
    # steps within an epoch reach status.json (the optimizer's counter, read by the chief), not only epoch ends
    assert "first_step" in metrics["startup_s"], metrics["startup_s"]
    for name in ("ps-0", "worker-0", "worker-1"):
        assert cluster.status(name)["state"] == "done"
        assert "the chief finished" in cluster.procs[name].text()
