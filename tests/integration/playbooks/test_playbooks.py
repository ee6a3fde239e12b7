"""The playbooks for real: ansible-playbook against local slots (connection=local, loopback ports only).

Every test gets its own cluster name, per-host prefix, artifacts directory and free ports, and stops whatever it
started. The inventory is the real script (inventory/slots.py, TFCLUSTER_SOURCE=local). Extra vars travel as
the `tfcluster` command writes them: a JSON file (-e @file) whose user strings are marked unsafe
({"__ansible_unsafe": ...}) so Ansible never templates them. Bring-your-own-script jobs (byo_job.py, no
TensorFlow) keep most tests fast; the built-in trainer and a TensorFlow-guide-style script run once each with real
MultiWorkerMirroredStrategy.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.playbooks.local_cluster import HERE, PLAYBOOKS, REPO, Cluster, assert_ok, byo_vars, recap
from tfcluster.core import contract

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_everything()


def test_syntax_check_every_playbook(cluster: Cluster) -> None:
    """One ansible-playbook checks them all (it stops at the first that fails, naming it): 1.1 CPU-s against 6.0 for
    a run each (measured here, the machine otherwise idle)."""
    assert {"site.yml", "train.yml", "wait.yml", "collect.yml", "stop.yml"} <= set(PLAYBOOKS)
    first, *others = PLAYBOOKS
    argv = cluster.argv(first, "syntax", "--syntax-check")
    at = argv.index(str(REPO / "playbooks" / first)) + 1
    argv[at:at] = [str(REPO / "playbooks" / name) for name in others]
    proc = subprocess.run(argv, cwd=REPO, env=cluster.env(), capture_output=True, text=True, timeout=400, check=False)
    assert_ok(proc)
    assert [line.split("playbooks/")[-1] for line in proc.stdout.splitlines() if line.startswith("playbook: ")] == list(
        PLAYBOOKS), proc.stdout


def test_ansible_lint_production_profile_is_clean() -> None:
    """ansible-lint itself runs once, in `make lint` (tests/integration/test_make_lint.py asserts that the production
    profile passed there): here, that its configuration asks for that profile over the playbooks and skips nothing."""
    config = (REPO / ".ansible-lint").read_text()
    assert "profile: production" in config.splitlines()
    assert "skip_list" not in config and "warn_list" not in config
    recipe = (REPO / "Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "ansible-lint --offline playbooks/" in recipe and "--profile" not in recipe, recipe


def test_check_mode_on_fresh_hosts_changes_nothing(cluster: Cluster) -> None:
    proc = cluster.playbook("train.yml", "dry", "--check", "--diff", extra_vars=byo_vars("--steps 2"))
    assert_ok(proc)
    assert "PLAY RECAP" in proc.stdout
    # Nothing was created on the hosts and nothing ran.
    for host in ("worker-0", "worker-1"):
        assert not (cluster.host_dir(host) / "etc/tfcluster/dry.env").exists()
        assert not (cluster.host_dir(host) / "run/tfcluster/dry/state.json").exists()


def test_byo_job_trains_collects_and_reruns_idempotently(cluster: Cluster) -> None:
    extra = byo_vars("--steps 4", tfcluster_script_requirements=str(HERE / "byo_requirements.txt"))
    proc = cluster.playbook("train.yml", "byo", extra_vars=extra)
    assert_ok(proc)
    # A progress line per worker (a 4-step job may be done by the first poll on a loaded machine: then it says so).
    for host, slot in (("worker-0", "worker:0"), ("worker-1", "worker:1")):
        assert re.search(rf"{host} +{slot} +(running|succeeded)", proc.stdout), proc.stdout[-3000:]
    chief_model = cluster.host_dir("worker-0") / "var/lib/tfcluster/byo"
    # The script got TF_CONFIG and the model dir, ran on both slots, and the role finalized the chief's dir.
    for host, index in (("worker-0", 0), ("worker-1", 1)):
        env_file = (cluster.host_dir(host) / "etc/tfcluster/byo.env").read_text()
        assert f'"index":{index}' in env_file.replace(" ", "")
        state = json.loads((cluster.host_dir(host) / "run/tfcluster/byo/state.json").read_text())
        assert state["state"] == "succeeded" and state["exit_code"] == 0
    assert (chief_model / "DONE").is_file()
    artifacts = cluster.artifacts / "byo" / "current"  # the collected copy (versioned by manifest digest)
    assert (artifacts / "export/model.txt").read_text() == "weights\n"
    assert (artifacts / contract.MANIFEST).is_file() and (artifacts / contract.DONE).is_file()
    assert re.search(r"Collected from worker-0: \d+ files, every sha256 verified", proc.stdout)

    # A second run of the finished job: not retrained, nothing changed anywhere.
    again = cluster.playbook("train.yml", "byo", extra_vars=extra)
    assert_ok(again)
    assert "already finished" in again.stdout
    counts = recap(again.stdout)
    assert counts and all(c["changed"] == 0 for c in counts.values()), again.stdout[-3000:]
    log = (cluster.host_dir("worker-0") / "var/log/tfcluster/byo.log").read_text()
    assert log.count("--- tfcluster job start") == 1

    # site.yml again: changed=0 on every host (the idempotence bar).
    site = cluster.playbook("site.yml", "byo", extra_vars=extra)
    assert_ok(site)
    counts = recap(site.stdout)
    assert set(counts) >= {"worker-0", "worker-1"}
    assert all(c["changed"] == 0 for c in counts.values()), site.stdout[-3000:]

    # Status and collect stand alone too; a new job id is a new job (fresh model dir, trains again).
    status = cluster.playbook("status.yml", "byo", extra_vars=extra)
    assert_ok(status)
    assert "succeeded" in status.stdout
    collect = cluster.playbook("collect.yml", "byo", extra_vars=extra)
    assert_ok(collect)
    assert all(c["changed"] == 0 for c in recap(collect.stdout).values())


@pytest.mark.xdist_group("byoslots")  # the prepared slots (conftest.py)
def test_collect_verifies_every_sha256_and_refuses_without_done(slots: Cluster) -> None:
    extra = byo_vars("--steps 2")
    assert_ok(slots.playbook("train.yml", "tamper", extra_vars=extra))
    model_dir = slots.host_dir("worker-0") / "var/lib/tfcluster/tamper"
    home = slots.artifacts / "tamper" / "current"
    before = {p.relative_to(home): p.read_bytes() for p in home.rglob("*") if p.is_file()}
    assert Path("export/model.txt") in before
    (model_dir / "export/model.txt").write_text("evil\n")
    # The copy at home already holds this manifest, verified: it is kept, not fetched again.
    proc = slots.playbook("collect.yml", "tamper", extra_vars=extra)
    assert_ok(proc)
    assert {p.relative_to(home): p.read_bytes() for p in home.rglob("*") if p.is_file()} == before
    # A fresh destination gets the tampered file: refused by name, and nothing is left there half-collected.
    for transport in ("stream", "fetch"):
        fresh = slots.tmp / f"fresh-{transport}"
        proc = slots.playbook("collect.yml", "tamper", extra_vars={
            **extra, "tfcluster_artifacts": str(fresh), "collector_transport": transport})
        assert proc.returncode != 0
        assert "sha256 mismatch: export/model.txt" in proc.stdout
        if transport == "stream":
            assert "from worker-0 failed" in proc.stdout and "Nothing was written to" in proc.stdout
            assert not fresh.exists() and not list(slots.tmp.glob(".fresh-stream.partial-*"))
    (model_dir / "DONE").unlink()
    elsewhere = {**extra, "tfcluster_artifacts": str(slots.tmp / "x")}
    proc = slots.playbook("collect.yml", "tamper", extra_vars=elsewhere)
    assert proc.returncode != 0
    assert "Refusing to collect job tamper from worker-0" in proc.stdout
    assert not (slots.tmp / "x").exists()


@pytest.mark.xdist_group("byoslots")  # the prepared slots (conftest.py)
def test_fail_fast_kill_one_worker_stops_the_whole_job(slots: Cluster) -> None:
    extra = byo_vars("--forever --step-seconds 0.2", tf_job_max_restarts=0)
    proc = subprocess.Popen(slots.argv("train.yml", "ff", extra_vars=extra), cwd=REPO, env=slots.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pid_file = slots.host_dir("worker-1") / "run/tfcluster/ff/main.pid"
    status_file = slots.host_dir("worker-1") / "var/lib/tfcluster/ff/status.json"
    deadline = time.time() + 240
    while time.time() < deadline and not (pid_file.exists() and status_file.exists()):
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.5)
    assert pid_file.exists(), "the job never started"
    victim = int(pid_file.read_text())
    os.kill(victim, signal.SIGKILL)
    out, _ = proc.communicate(timeout=180)  # the job runs for ever: only the fail-fast ends it
    assert proc.returncode != 0
    assert "Job ff failed on worker-1" in out, out[-4000:]
    assert "exit code 137" in out and "Last lines of worker-1's log:" in out and "step " in out
    for host in ("worker-0", "worker-1"):
        state = json.loads((slots.host_dir(host) / "run/tfcluster/ff/state.json").read_text())
        assert state["state"] in ("stopped", "failed"), (host, state)
        main_pid = int((slots.host_dir(host) / "run/tfcluster/ff/main.pid").read_text())
        assert not Path(f"/proc/{main_pid}").exists() or "Z" in Path(f"/proc/{main_pid}/stat").read_text().split()[2]


@pytest.mark.xdist_group("byoslots")  # the prepared slots (conftest.py)
def test_stall_fails_the_job_naming_the_host(slots: Cluster) -> None:
    extra = byo_vars("--steps 1 --step-seconds 600", tf_job_stall_timeout=4)
    proc = slots.playbook("train.yml", "stall", extra_vars=extra, timeout=200)
    assert proc.returncode != 0
    assert "made no progress for 4s (tf_job_stall_timeout)" in proc.stdout
    assert "Every task of the job was stopped" in proc.stdout


def test_workers_zero_is_a_clear_error_and_starts_nothing(cluster: Cluster) -> None:
    proc = cluster.playbook("train.yml", "zero", extra_vars=byo_vars("--steps 1"),
                            env=cluster.env(TFCLUSTER_WORKERS="0"))
    assert proc.returncode != 0
    assert "TFCLUSTER_WORKERS" in proc.stdout + proc.stderr
    assert not cluster.local_root.exists()


@pytest.mark.xdist_group("byoslots")  # the prepared slots (conftest.py)
def test_busy_port_fails_preflight_naming_the_host_and_starts_nothing(slots: Cluster) -> None:
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", slots.base_port + 1))
    squatter.listen()
    try:
        proc = slots.playbook("train.yml", "busy", extra_vars=byo_vars("--steps 1"))
    finally:
        squatter.close()
    assert proc.returncode != 0
    assert f"worker-1: port 127.0.0.1:{slots.base_port + 1} is not free" in proc.stdout
    assert "Nothing was started" in proc.stdout
    for host in ("worker-0", "worker-1"):
        assert not (slots.host_dir(host) / "run/tfcluster/busy/state.json").exists()
        assert not (slots.host_dir(host) / "var/log/tfcluster/busy.log").exists()


@pytest.mark.xdist_group("byoslots")  # the prepared slots (conftest.py)
def test_missing_runtime_module_fails_preflight(slots: Cluster) -> None:
    extra = {**byo_vars("--steps 1"), "tf_job_preflight_imports": ["no_such_module_tfcluster"]}
    proc = slots.playbook("train.yml", "noimport", extra_vars=extra)
    assert proc.returncode != 0
    assert "cannot import no_such_module_tfcluster" in proc.stdout
    assert "Nothing was started" in proc.stdout
    assert not (slots.host_dir("worker-0") / "run/tfcluster/noimport/state.json").exists()


@pytest.mark.slow
def test_builtin_trainer_real_multiworker_mirrored(cluster: Cluster) -> None:
    extra = {"tfcluster_epochs": 2, "tfcluster_trainer_args": ["--max-examples", "4096", "--no-tensorboard"],
             "tf_job_poll_interval": 3}
    proc = cluster.playbook("train.yml", "mwms", extra_vars=extra, timeout=600)
    assert_ok(proc)
    artifacts = cluster.artifacts / "mwms" / "current"
    metrics = json.loads((artifacts / "metrics.json").read_text())
    assert metrics["strategy"] == "multi_worker_mirrored" and metrics["workers"] == 2
    assert metrics["epochs"] == 2 and 0.0 < metrics["accuracy"] <= 1.0
    assert (artifacts / "export/saved_model.pb").is_file()
    demo = subprocess.run([sys.executable, "-m", "tfcluster.cli.summary", "--artifacts", str(artifacts)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert demo.returncode == 0, demo.stderr
    assert "accuracy" in demo.stdout and str(artifacts) in demo.stdout
    assert (artifacts / "training.png").stat().st_size > 1000


@pytest.mark.slow
def test_keras_guide_example_runs_as_a_byo_job(cluster: Cluster, tmp_path: Path) -> None:
    import numpy as np

    data = tmp_path / "mnist-small.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x_train=rng.integers(0, 255, (2048, 28, 28), dtype=np.uint8),
             y_train=rng.integers(0, 10, 2048, dtype=np.uint8))
    extra = {"tfcluster_script": str(REPO / "examples/keras_multiworker/train.py"),
             "tfcluster_script_args": ["--data", str(data), "--epochs", "2", "--steps-per-epoch", "10"],
             "tf_job_poll_interval": 3}
    proc = cluster.playbook("train.yml", "guide", extra_vars=extra, timeout=600)
    assert_ok(proc)
    artifacts = cluster.artifacts / "guide" / "current"
    assert (artifacts / "DONE").is_file()
    assert any(p.name == "saved_model.pb" or p.suffix == ".keras" for p in artifacts.rglob("*"))
