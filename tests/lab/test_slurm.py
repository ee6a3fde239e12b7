"""CLUSTER=slurm on a real Slurm cluster: three lab hosts named so that string order differs from Slurm's (node9,
node10, node11) become one Slurm cluster through `make slurm-up` (the slurm role, from Debian's .deb files fetched on
the outer machine: the hosts have no route out), with a directory every host shares (a read-write bind, NFS's
stand-in). Then `make train CLUSTER=slurm` (the `tfcluster` command) runs the jobs through the controller as the
login node: MultiWorkerMirrored with MNIST collected and verified, ParameterServer, a killed worker that ends the job
(srun --kill-on-bad-exit) naming its node, a requeue that resumes from the backups, and a job pending on too few
nodes that `make stop` cancels. The times from `make train` to the first step and from a requeue to training again
are printed (pytest -s shows them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from lab import Lab
from lab.debs import ensure_debs
from lab.paths import default_lab_dir

pytestmark = [pytest.mark.xdist_group("slurmlab"), pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.prefix) / "bin"
TFCLUSTER = VENV_BIN / "tfcluster"
NAMES = ("node9", "node10", "node11")
SHARED = "/srv/tfcluster"
PORT = 12345
# Short jobs: MNIST (staged on the shared directory) or synthetic data, a few steps per epoch, a status line a second.
QUICK = "--steps-per-epoch 50 --batch-size-per-replica 32 --steps-per-execution 1 --no-evaluate --no-tensorboard " \
        "--status-interval 1 --log-level INFO"
SYNTHETIC = f"--dataset synthetic --synthetic-examples 4096 {QUICK}"
SESSION = f"{int(time.time()) % 100000:05d}"


@dataclass
class SlurmLab:
    lab: Lab
    env: dict[str, str]
    cluster_files: dict[str, Path]
    slurm_up: subprocess.CompletedProcess[str]
    debs: Path

    def tfcluster(self, command: str, job: str, files: str = "mwms", timeout: float = 600,
                  **settings: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(TFCLUSTER), command], env=self.job_env(job, files, settings), cwd=REPO,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def start(self, command: str, job: str, files: str = "mwms", **settings: str) -> subprocess.Popen[str]:
        return subprocess.Popen([str(TFCLUSTER), command], env=self.job_env(job, files, settings), cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def job_env(self, job: str, files: str, settings: Mapping[str, str]) -> dict[str, str]:
        return {**self.env, "CLUSTER": "slurm", "SLURM": str(self.cluster_files[files]), "JOB": job,
                "EPOCHS": "2", "TRAINER_ARGS": SYNTHETIC, **settings}

    def login(self, command: str, check: bool = True) -> str:
        return self.lab.ssh(NAMES[0], command, check=check, timeout=60).stdout

    def job_dir(self, job: str) -> Path:
        return self.shared / "jobs" / "slurmlab" / job

    @property
    def shared(self) -> Path:
        return Path(self.env["TFCLUSTER_TEST_SHARED"])


def job(name: str) -> str:
    return f"sl-{name}-{SESSION}"


@pytest.fixture(scope="module")
def slurm_lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmLab]:
    shared = tmp_path_factory.mktemp("slurm-shared")
    shared.chmod(0o755)
    lab = Lab(slots=("chief", "worker", "worker"), name="slurmlab", names=NAMES, bind_ro=[sys.prefix],
              bind=[f"{shared}:{SHARED}"])
    request.addfinalizer(lab.down)
    lab.start()
    lab_dir = default_lab_dir()
    debs = ensure_debs(lab_dir / "rootfs", lab_dir / "debs")
    env = {**os.environ, **lab.inventory_env(), "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
           "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "TFCLUSTER_CLUSTER": "slurmlab", "PYTHONUNBUFFERED": "1",
           "TFCLUSTER_TEST_SHARED": str(shared)}
    env = {k: v for k, v in env.items() if k not in ("CLUSTER", "SLURM", "JOB", "HOSTS", "TRAINER_ARGS", "EPOCHS")}
    up = subprocess.run([str(TFCLUSTER), "slurm-up"], cwd=REPO, capture_output=True, text=True, timeout=900,
                        env={**env, "CLUSTER": "onprem", "HOSTS": str(lab.hosts_file),
                             "ANSIBLE_ARGS": f"-e slurm_debs={debs} -e slurm_shared_dir={SHARED}"}, check=False)
    assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-2000:]
    written = yaml.safe_load((REPO / "artifacts" / "onprem" / "slurm-slurmlab.yml").read_text())
    # The lab's own: the project venv (bound into every host), the lab's key, a fixed training port.
    written["login"]["identity_file"] = str(lab.private_key)
    written.update(python={"venv": sys.prefix}, port=PORT)
    files = {}
    for name, extra in (("mwms", {}), ("ps", {"tasks": {"chief": 1, "ps": 1, "worker": 1}})):
        path = tmp_path_factory.mktemp("cluster-files") / f"{name}.yml"
        path.write_text(yaml.safe_dump({**written, **extra}))
        files[name] = path
    yield SlurmLab(lab, env, files, up, debs)


def note_seconds(output: str, what: str) -> float | None:
    found = re.search(rf"note: {what} ([0-9.]+) s", output)
    return float(found.group(1)) if found else None


def test_slurm_up_made_one_cluster_in_slurms_order(slurm_lab: SlurmLab) -> None:
    assert "Slurm is up on 3 host(s), controller node9" in slurm_lab.slurm_up.stdout
    nodes = slurm_lab.login("sinfo -h -N -o '%N %t' -p tfcluster").split()
    assert nodes == ["node9", "idle", "node10", "idle", "node11", "idle"]
    again = subprocess.run([str(TFCLUSTER), "slurm-up"], cwd=REPO, capture_output=True, text=True, timeout=900,
                           env={**slurm_lab.env, "CLUSTER": "onprem", "HOSTS": str(slurm_lab.lab.hosts_file),
                                "ANSIBLE_ARGS": f"-e slurm_debs={slurm_lab.debs} -e slurm_shared_dir={SHARED}"},
                           check=False)
    assert again.returncode == 0
    log = next(iter(sorted((REPO / "artifacts/onprem").glob("*/logs/*-slurm-up.log"))[-1:]))
    recap = {m[0]: int(m[1]) for m in re.findall(r"^(node\d+)\s*: ok=\d+\s+changed=(\d+)", log.read_text(), re.M)}
    assert recap == {"node9": 0, "node10": 0, "node11": 0}, recap  # a second run changes nothing


def first_step(slurm_lab: SlurmLab, name: str, **settings: str) -> tuple[float | None, str, int]:
    """`make train` of ``name``: (seconds from its start to the chief's first training step, read from its status.json
    on the shared directory every 0.1 s; its output; its exit status)."""
    started = time.monotonic()
    proc = slurm_lab.start("train", name, **settings)
    seen = None
    try:
        while proc.poll() is None and seen is None:
            if training(slurm_lab, name, "chief-0", step=1):
                seen = time.monotonic() - started
            time.sleep(0.1)
        output, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    return seen, output, proc.returncode


def test_mnist_on_three_nodes_is_collected_verified(slurm_lab: SlurmLab) -> None:
    name = job("mwms")
    cold, output, code = first_step(slurm_lab, name, TRAINER_ARGS=QUICK)
    assert code == 0, output[-4000:]
    assert "datasets mnist" in output and "submitted Slurm job" in output
    collected = REPO / "artifacts" / "slurm" / name / "current"
    verify = subprocess.run([sys.executable, "-m", "tfcluster.collect", "verify", str(collected)], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 0 and json.loads(verify.stdout)["verified"] > 0, verify.stdout
    metrics = json.loads((collected / "metrics.json").read_text())
    assert metrics["strategy"] == "multi_worker_mirrored" and metrics["workers"] == 3
    records = {slot: json.loads((slurm_lab.job_dir(name) / "run" / f"{slot}.json").read_text())
               for slot in ("chief-0", "worker-0", "worker-1")}
    assert [records[s]["node"] for s in ("chief-0", "worker-0", "worker-1")] == list(NAMES)  # Slurm's order
    warm, again, code = first_step(slurm_lab, job("mwms2"), TRAINER_ARGS=QUICK)
    assert code == 0 and "nothing to copy: every digest was there" in again, again[-3000:]
    print(f"\n[measure] make train -> the chief's first training step: {cold} s (release and MNIST copied in this "
          f"run), {warm} s (everything staged already); Slurm already up")


def test_a_parameter_server_job_trains(slurm_lab: SlurmLab) -> None:
    name = job("ps")
    run = slurm_lab.tfcluster("train", name, files="ps")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    metrics = json.loads((REPO / "artifacts/slurm" / name / "current/metrics.json").read_text())
    assert metrics["strategy"] == "parameter_server"
    spec = json.loads(next(slurm_lab.job_dir(name).glob("spec-*.json")).read_text())
    assert spec["tasks"] == {"chief": 1, "ps": 1, "worker": 1}


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def training(slurm_lab: SlurmLab, name: str, slot: str, step: int = 3) -> bool:
    try:
        status = json.loads((slurm_lab.job_dir(name) / "tasks" / slot / "status.json").read_text())
    except (OSError, ValueError):
        return False
    return status.get("state") == "training" and int(status.get("step") or 0) >= step


LONG = "--dataset synthetic --synthetic-examples 65536 --batch-size-per-replica 16 --steps-per-execution 1 " \
       "--no-evaluate --no-tensorboard --status-interval 1"


def test_a_killed_worker_ends_the_job_within_seconds_naming_its_node(slurm_lab: SlurmLab) -> None:
    name = job("kill")
    proc = slurm_lab.start("train", name, TRAINER_ARGS=LONG)
    try:
        wait_for(lambda: training(slurm_lab, name, "worker-0"), 240, "worker-0 to train")
        pid = json.loads((slurm_lab.job_dir(name) / "run/worker-0.json").read_text())["pid"]
        killed = time.monotonic()
        slurm_lab.lab.ssh("node10", f"kill -9 {int(pid)}", timeout=30)
        output, _ = proc.communicate(timeout=120)
        ended = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, output[-3000:]
    assert "job failed on node10" in output and "killed by SIGKILL" in output, output[-3000:]
    assert ended < 30, f"the job took {ended:.1f} s to end after the kill"
    print(f"\n[measure] worker killed -> make train ended, naming node10: {ended:.1f} s")
    assert "RUNNING" not in slurm_lab.login(f"squeue -h -n tfcluster-slurmlab-{name} -o %T")


def restarted(slurm_lab: SlurmLab, name: str) -> bool:
    """The chief trains again in the job's second run (its record's restart count is 1)."""
    try:
        record = json.loads((slurm_lab.job_dir(name) / "run/chief-0.json").read_text())
    except (OSError, ValueError):
        return False
    return record.get("restart") == 1 and training(slurm_lab, name, "chief-0", step=1)


def test_a_requeued_job_resumes_from_its_backups(slurm_lab: SlurmLab) -> None:
    name = job("requeue")
    proc = slurm_lab.start("train", name, TRAINER_ARGS=f"{LONG} --steps-per-epoch 150")
    try:
        wait_for(lambda: training(slurm_lab, name, "chief-0", step=20), 240, "the chief to train")
        job_id = json.loads((slurm_lab.job_dir(name) / "submitted.json").read_text())["job_id"]
        requeued = time.monotonic()
        slurm_lab.login(f"scontrol requeue {job_id}")
        # Slurm holds a requeued job for about two minutes (BeginTime); an operator releases it at once.
        wait_for(lambda: "PENDING" in slurm_lab.login(f"squeue -h -j {job_id} -o %T", check=False), 60, "pending")
        held = time.monotonic() - requeued
        slurm_lab.login(f"scontrol update JobId={job_id} StartTime=now")
        wait_for(lambda: restarted(slurm_lab, name) or proc.poll() is not None, 240, "training again")
        back = time.monotonic() - requeued
        output, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-4000:]
    assert "the job was requeued (1x)" in output and "restarts 1" in output, output[-3000:]
    metrics = json.loads((REPO / "artifacts/slurm" / name / "current/metrics.json").read_text())
    assert metrics["resumes"] >= 1, metrics
    print(f"\n[measure] scontrol requeue -> pending {held:.1f} s -> training again {back:.1f} s (Slurm's BeginTime "
          f"hold of a requeued job released with StartTime=now); the wait's note: "
          f"{note_seconds(output, 'training again')} s")


def test_a_job_pending_on_too_few_nodes_shows_slurms_reason_and_stop_cancels_it(slurm_lab: SlurmLab) -> None:
    name = job("pending")
    slurm_lab.login("scontrol update nodename=node11 state=drain reason=tfcluster-test")
    proc = slurm_lab.start("train", name)
    try:
        wait_for((slurm_lab.job_dir(name) / "submitted.json").is_file, 120, "the submission")
        status = slurm_lab.tfcluster("status", name)
        assert status.returncode == 0 and "pending (" in status.stdout, status.stdout + status.stderr
        assert re.search(r"pending \((ReqNodeNotAvail|Resources|Nodes required)", status.stdout), status.stdout
        stop = slurm_lab.tfcluster("stop", name)
        assert stop.returncode == 0 and "cancelled" in stop.stdout, stop.stdout + stop.stderr
        output, _ = proc.communicate(timeout=120)
    finally:
        slurm_lab.login("scontrol update nodename=node11 state=resume", check=False)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "pending (" in output and "job stopped" in output, output[-3000:]
    assert slurm_lab.login(f"squeue -h -n tfcluster-slurmlab-{name} -o %T").strip() == ""
    assert json.loads((REPO / "artifacts/slurm" / name / "job.json").read_text())["state"] in ("stopped", "ended")
