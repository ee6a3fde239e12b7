"""Stops on real trainer processes: GPUs declared on a GPU-less host (exit 2 before any server), SIGTERM before
training (exit 3, nothing trained), SIGTERM to both workers mid-epoch (backup, exit 3, resume)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.trainer.trainer_procs import (
    REPO,
    START_ALLOWANCE_S,
    LocalCluster,
    base_env,
    free_ports,
    kill_running,
)
from tfcluster.core import contract

pytestmark = pytest.mark.integration

QUICK = ["--dataset", "synthetic", "--synthetic-examples", "2048", "--no-tensorboard", "--no-evaluate",
         "--steps-per-execution", "5", "--status-interval", "0.1"]


def _watch_port(port: int, done: threading.Event, seen: list[float]) -> None:
    while not done.is_set():
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                seen.append(time.monotonic())
        time.sleep(0.05)


def _start(started: list[subprocess.Popen[str]], tmp_path: Path, cluster: dict[str, list[str]], index: int,
           env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    """Worker ``index`` of ``cluster``, kept in ``started`` (the fixture kills it when the test ends, if it runs)."""
    full = base_env(tmp_path)
    full.update(env)
    full[contract.ENV_TF_CONFIG] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "--model-dir", str(tmp_path / "m"), *QUICK, *extra],
                            cwd=REPO, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started.append(proc)
    return proc


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """The trainers a test starts: one still running when the test ends (a wait that failed) is killed, not left
    waiting for its peer after the suite (ci16 left one)."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    kill_running(procs)


def test_declared_gpus_missing_exits_2_before_any_server(tmp_path: Path, started: list[subprocess.Popen[str]]) -> None:
    port = free_ports(1)[0]
    cluster = {"worker": [f"127.0.0.1:{port}", f"127.0.0.1:{free_ports(1)[0]}"]}
    done, seen = threading.Event(), []
    watcher = threading.Thread(target=_watch_port, args=(port, done, seen), daemon=True)
    watcher.start()
    proc = _start(started, tmp_path, cluster, 0, {contract.ENV_GPUS: "1", contract.ENV_COLLECTIVE: "nccl"})
    out, _ = proc.communicate(timeout=120 + START_ALLOWANCE_S)
    done.set()
    watcher.join()
    assert proc.returncode == contract.EXIT_BAD_INPUT, out[-3000:]
    line = next(x for x in out.splitlines() if "GPU(s) declared" in x)
    assert f"host {socket.gethostname()}: 1 GPU(s) declared but TensorFlow sees 0" in line
    assert "nvidia-smi" in line and "tfcluster_gpus=0" in line
    assert not seen, "something listened on the task's port"
    status = json.loads((tmp_path / "m" / "status.json").read_text())
    assert status["state"] == "failed" and "GPU(s) declared" in status["error"]

    # --no-require-gpu would train on the CPU, but not with NCCL, which needs GPUs
    proc = _start(started, tmp_path, cluster, 0, {contract.ENV_GPUS: "1", contract.ENV_COLLECTIVE: "nccl"},
                  "--no-require-gpu")
    out, _ = proc.communicate(timeout=120 + START_ALLOWANCE_S)
    assert proc.returncode == contract.EXIT_BAD_INPUT and "NCCL needs GPUs" in out


def _wait_state(path: Path, state: str, proc: subprocess.Popen[str], timeout: float = 90 + START_ALLOWANCE_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and json.loads(path.read_text()).get("state") == state:
            return
        time.sleep(0.1)
    pytest.fail(f"{path} never said {state}; rc={proc.poll()}")


def test_sigterm_before_training_exits_3_with_nothing_trained(tmp_path: Path,
                                                              started: list[subprocess.Popen[str]]) -> None:
    """`systemctl stop` on every host while the tasks start: each exits 3 once it holds Python's lock again. (While
    TensorFlow waits for a peer it holds that lock: a task whose peer never comes is killed by systemd's
    TimeoutStopSec, docs/trainer.md.)"""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    first = _start(started, tmp_path, cluster, 0, {}, "--status-file", str(tmp_path / "s0.json"))
    _wait_state(tmp_path / "s0.json", "connecting", first)
    time.sleep(1.0)  # inside the strategy's wait for its peer
    first.terminate()
    second = _start(started, tmp_path, cluster, 1, {}, "--status-file", str(tmp_path / "s1.json"))
    _wait_state(tmp_path / "s1.json", "connecting", second)
    second.terminate()
    for proc in (first, second):
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == contract.EXIT_PREEMPTED, out[-3000:]
    for name in ("s0.json", "s1.json"):
        status = json.loads((tmp_path / name).read_text())
        assert status["state"] == "stopped" and "before training started" in status["stop_reason"]
    assert not list((tmp_path / "m").rglob("backup-*.index"))


@pytest.mark.slow
def test_sigterm_to_both_workers_backs_up_exits_3_and_resumes(local_cluster: Callable[..., LocalCluster]) -> None:
    cluster = local_cluster({"worker": 2}, [*QUICK, "--epochs", "3", "--steps-per-epoch", "150"])
    cluster.start_all()
    cluster.wait_for("worker-1", lambda st: st.get("epochs_done", 0) >= 1 and st["epoch"] > st["epochs_done"]
                     and st.get("step", 0) >= 20, timeout=180 + START_ALLOWANCE_S)
    cluster.terminate_all()
    codes = cluster.wait(timeout=90)
    assert codes == {"worker-0": 3, "worker-1": 3}, cluster.logs()
    for name in ("worker-0", "worker-1"):
        status = cluster.status(name)
        assert status["state"] == "stopped" and status["stop_reason"], status
        numbers = sorted(int(p.name[len("backup-"):-len(".index")])
                         for p in (cluster.model_dir / "backup" / name).glob("backup-*.index"))
        assert numbers[-1] % 10 == 1 and numbers[-1] >= 11, numbers  # a mid-epoch backup, the same on both
    assert not (cluster.model_dir / contract.DONE).exists()

    cluster.start_all()  # a re-run (a longer deadline) resumes from that backup
    assert cluster.wait(timeout=180 + START_ALLOWANCE_S) == {"worker-0": 0, "worker-1": 0}, cluster.logs()
    metrics = json.loads((cluster.model_dir / contract.METRICS).read_text())
    assert metrics["resumes"] == 1 and metrics["initial_epoch"] == numbers[-1] // 10 and metrics["epochs"] == 3
    assert metrics["collective"] == "ring" and cluster.status("worker-0")["collective"] == "ring"
    assert set(metrics["startup_s"]) >= {"imports", "tensorflow", "data", "strategy", "model", "resume",
                                         "first_step"}
