"""ParameterServer on the embedded local cluster, through `make`, as a user runs it (issue 36): `make provision
CLUSTER=local WORKERS=2 STRATEGY=parameter_server`, then the built-in trainer (default settings, real MNIST, one
epoch of 300 steps) collected and verified, then a script in the shape of TensorFlow's parameter-server tutorial
(examples/keras_parameter_server/train.py: ps and workers `join()` their server, the chief fits a DatasetCreator)
whose job ends with its chief.

Every local slot is pinned to one core (tf_job_cpu_affinity): TensorFlow then sizes one inter-op thread, and a
ParameterServer worker with one deadlocks at its first step. The job environment's floor (tfcluster/host/tfthreads.py)
is what lets both jobs train.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.local_make import LocalMake, output
from tfcluster.collect.ledger import COLLECTED, collected_dir, read_ledger
from tfcluster.core import contract
from tfcluster.core.files import verify_dir
from tfcluster.host import jobspec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "keras_parameter_server" / "train.py"
SERVERS = ("ps-0", "worker-0", "worker-1")

# make on a local cluster of its own: its own group, one test after the other on that cluster
pytestmark = [pytest.mark.xdist_group("makeps"), pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def ps_cluster(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMake]:
    cluster = LocalMake(repo, tmp_path_factory.mktemp("makeps"), prefix="ps-test")
    try:
        made = cluster.make("provision", "CLUSTER=local", "WORKERS=2", "STRATEGY=parameter_server", timeout=900)
        assert made.returncode == 0, output(made)
        yield cluster
    finally:
        cluster.destroy()


def env_file(cluster: LocalMake, host: str, job: str) -> dict[str, str]:
    return jobspec.parse_env_file((cluster.slot_dir(host) / "etc" / "tfcluster" / f"{job}.env").read_text())


@pytest.mark.timeout(1500)
def test_the_builtin_trainer_trains_on_pinned_slots_and_is_collected(ps_cluster: LocalMake) -> None:
    job = f"{ps_cluster.name}-trainer"
    train = ps_cluster.make("train", "CLUSTER=local", "WORKERS=2", "STRATEGY=parameter_server", "EPOCHS=1",
                            "TRAINER_ARGS=--steps-per-epoch 300", f"JOB={job}", timeout=1200)
    assert train.returncode == 0, output(train)
    assert re.search(r"^\s+chief-0\s+chief:0\s+running/training\s+epoch 1/1", train.stdout, re.M), train.stdout
    assert "job:          parameter_server on chief + 1 ps + 2 worker(s), 1 epoch(s)" in train.stdout, train.stdout
    artifacts = collected_dir(ps_cluster.repo / "artifacts" / "local" / job)
    assert artifacts is not None and verify_dir(artifacts) > 0
    metrics = json.loads((artifacts / "metrics.json").read_text())
    assert metrics["strategy"] == "parameter_server" and metrics["epochs"] == 1
    assert metrics["test_accuracy"] > 0.8, metrics  # real MNIST, well above chance
    assert "first_step" in metrics["startup_s"], metrics["startup_s"]  # steps within the epoch were seen
    # each slot on one core, and so each got the inter-op floor in its environment
    for host in ("chief-0", *SERVERS):
        assert env_file(ps_cluster, host, job)[contract.ENV_INTEROP_THREADS] == str(contract.INTEROP_THREADS_MIN)


@pytest.mark.timeout(1500)
def test_a_tutorial_script_ends_with_its_chief(ps_cluster: LocalMake) -> None:
    job = f"{ps_cluster.name}-script"
    train = ps_cluster.make("train", "CLUSTER=local", "WORKERS=2", "STRATEGY=parameter_server", f"SCRIPT={EXAMPLE}",
                            "DATASETS=mnist", "SCRIPT_ARGS=--epochs 2 --steps-per-epoch 60", f"JOB={job}",
                            timeout=1200)
    assert train.returncode == 0, output(train)
    assert ("the chief chief-0 finished; its ParameterServer tasks still serving (ps-0, worker-0, worker-1) are "
            "stopped") in train.stdout, train.stdout
    artifacts = collected_dir(ps_cluster.repo / "artifacts" / "local" / job)
    assert artifacts is not None and verify_dir(artifacts) > 0
    assert (artifacts / "keras-model" / "saved_model.pb").is_file()  # the chief's save, on the chief's own disk
    ledger = read_ledger(ps_cluster.repo / "artifacts" / "local" / job)
    assert ledger["state"] == COLLECTED, ledger  # succeeded: the wait decided done, the result came home
    status = ps_cluster.make("status", "CLUSTER=local", f"JOB={job}", timeout=300)
    assert status.returncode == 0, output(status)
    assert re.search(r"^\s+chief-0\s+chief:0\s+succeeded\b", status.stdout, re.M), status.stdout
    for host in SERVERS:  # stopped by the wait once their chief had finished; nothing of the job runs on
        assert re.search(rf"^\s+{host}\s+\S+\s+stopped\b", status.stdout, re.M), status.stdout
