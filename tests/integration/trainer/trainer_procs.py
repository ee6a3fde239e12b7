"""Helpers to run real trainer processes on 127.0.0.1: free ports, TF_CONFIG per task, logs, waits, kills."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tfcluster.core import files

REPO = Path(__file__).resolve().parents[3]
# What a wait that includes a trainer's start adds for a loaded suite's first minutes (2 cores, every worker
# starting): TensorFlow was imported only 59.8 s and 92 s after the start in two clean-clone runs (ci15, ci16).
# A wait returns as soon as its condition holds, so a pass costs nothing more.
START_ALLOWANCE_S = 120


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (bound together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def base_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG",)}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", "TFCLUSTER_SPOT_WATCH": "off", "TMPDIR": str(tmp),
                "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"})
    return env


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class LocalCluster:
    """A TF cluster of trainer processes on loopback; every task shares one --model-dir (as on one host)."""

    tmp: Path
    model_dir: Path
    tasks: Mapping[str, int]  # task type -> count
    args: Sequence[str]
    env_extra: Mapping[str, str] = field(default_factory=dict)
    pinned: bool = False  # each task on one core, round robin, as the local slots run (tf_job_cpu_affinity)
    procs: dict[str, Proc] = field(default_factory=dict)
    cluster: dict[str, list[str]] = field(init=False)
    starts: int = 0

    def __post_init__(self) -> None:
        ports = iter(free_ports(sum(self.tasks.values())))
        self.cluster = {t: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for t, n in self.tasks.items() if n}

    def names(self) -> list[str]:
        return [f"{t}-{i}" for t, addrs in self.cluster.items() for i in range(len(addrs))]

    def status_file(self, name: str) -> Path:
        return self.tmp / f"status-{name}.json"

    def start(self, name: str, env: Mapping[str, str] | None = None) -> Proc:
        task_type, index = name.rsplit("-", 1)
        self.starts += 1
        log = self.tmp / f"{name}.{self.starts}.log"
        full_env = base_env(self.tmp)
        full_env.update(self.env_extra)
        full_env.update(env or {})
        full_env["TF_CONFIG"] = json.dumps({"cluster": self.cluster, "task": {"type": task_type,
                                                                               "index": int(index)}})
        cmd = [sys.executable, "-m", "trainer", "--model-dir", str(self.model_dir),
               "--status-file", str(self.status_file(name)), *self.args]
        cpu = sorted(os.sched_getaffinity(0))[self.names().index(name) % len(os.sched_getaffinity(0))]
        pin = (lambda: os.sched_setaffinity(0, {cpu})) if self.pinned else None
        with open(log, "wb") as fh:
            popen = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=fh, stderr=subprocess.STDOUT,
                                     preexec_fn=pin)  # noqa: PLW1509 - only sched_setaffinity
        self.procs[name] = Proc(name, popen, log)
        return self.procs[name]

    def start_all(self) -> None:
        for name in self.names():
            self.start(name)

    def wait(self, timeout: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        codes: dict[str, int] = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stop()
                pytest.fail(f"{name} still running after {timeout} s; logs:\n{self.logs()}")
        return codes

    def status(self, name: str) -> dict[str, object]:
        try:
            return json.loads(self.status_file(name).read_text())
        except (OSError, ValueError):
            return {}

    def wait_for(self, name: str, predicate: object, timeout: float) -> dict[str, object]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status(name)
            if st and predicate(st):  # type: ignore[operator]
                return st
            for proc in self.procs.values():
                if proc.popen.poll() is not None:
                    pytest.fail(f"{proc.name} exited {proc.popen.returncode} early; logs:\n{self.logs()}")
            time.sleep(0.2)
        pytest.fail(f"timed out waiting on {name}: {self.status(name)}\n{self.logs()}")

    def kill(self, name: str) -> None:
        self.procs[name].popen.send_signal(signal.SIGKILL)
        self.procs[name].popen.wait()

    def terminate_all(self) -> None:
        """SIGTERM to every task at once, as systemd's deadline or `systemctl stop` sends it."""
        for proc in self.procs.values():
            proc.popen.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        kill_running(proc.popen for proc in self.procs.values())

    def logs(self, tail: int = 4000) -> str:
        return "\n".join(f"--- {p.name} (rc={p.popen.poll()}) ---\n{p.text()[-tail:]}" for p in self.procs.values())


def kill_running(popens: Iterable[subprocess.Popen[str]]) -> None:
    """SIGKILL every process still running and reap it: a test leaves no trainer behind, whatever it did."""
    for popen in popens:
        if popen.poll() is None:
            popen.kill()
            popen.wait()


def run_trainer(args: Sequence[str], tmp: Path, env: Mapping[str, str] | None = None,
                timeout: float = 240) -> subprocess.CompletedProcess[str]:
    full_env = base_env(tmp)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "trainer", *args], cwd=REPO, env=full_env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def run_python(code: str, tmp: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A plain Python process (legacy Keras selected, no strategy, no TF_CONFIG)."""
    env = base_env(tmp)
    env["TF_USE_LEGACY_KERAS"] = "1"
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


EVALUATE_EXPORT = """
import json, sys, numpy as np, tf_keras as keras
arrays = np.load(sys.argv[1])
x = arrays["x_test"].astype("float32")[..., None] / 255.0
model = keras.models.load_model(sys.argv[2])
loss, acc = model.evaluate(x, arrays["y_test"].astype("int32"), verbose=0)
print(json.dumps({"loss": float(loss), "accuracy": float(acc)}))
"""


def evaluate_export(npz: Path, export: Path, tmp: Path) -> dict[str, float]:
    code = f"import sys; sys.argv = ['x', {str(npz)!r}, {str(export)!r}]\n" + EVALUATE_EXPORT
    result = run_python(code, tmp)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_chief_artifacts(model_dir: Path, tensorboard: bool = True) -> dict[str, object]:
    """Every deliverable of a finished chief, DONE last and matching the manifest; returns metrics.json."""
    for name in ("config.json", "metrics.json", "MANIFEST.sha256", "DONE", "export/saved_model.pb"):
        assert (model_dir / name).is_file(), f"{name} missing in {sorted(p.name for p in model_dir.iterdir())}"
    assert list((model_dir / "checkpoints").glob("epoch-*.index"))
    assert bool(list((model_dir / "logs").rglob("events.out.tfevents.*"))) == tensorboard
    assert files.verify_dir(model_dir) > 0
    done = json.loads((model_dir / "DONE").read_text())
    assert done["manifest_sha256"] == files.sha256_file(model_dir / "MANIFEST.sha256")
    return json.loads((model_dir / "metrics.json").read_text())


def fit_teardowns(cluster: LocalCluster) -> dict[str, float]:
    """Each task's 'fit returned N s after its last epoch ended' (the trainer's log line)."""
    out = {}
    for name, proc in cluster.procs.items():
        found = re.findall(r"fit returned ([0-9.]+) s after its last epoch ended", proc.text())
        if found:
            out[name] = float(found[-1])
    return out
