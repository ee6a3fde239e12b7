"""`make demo` end to end, as a user runs it: provision infra/local against the emulated AWS endpoint, train 2
workers through the playbooks with the terraform inventory, collect + verify, summary and plot; then destroy.

Isolated from a developer's own demo: its own copy of infra/ (Terraform state), endpoint directory and port,
cluster name, job id and training ports.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import free_port_block
from tfcluster.collect.ledger import collected_dir
from tfcluster.core import contract
from tfcluster.core.files import verify_dir

# What `make demo` may print after setup (issue 13: it printed ~1,400 lines of Terraform and Ansible machinery).
LINE_BUDGET = 100
GUIDE = Path(__file__).resolve().parent / "playbooks" / "guide_job.py"
PROGRESS = re.compile(r"^\s+worker-\d\s+worker:\d\s+\S+.*\bepoch \d+/\d+.*\bex/s\b", re.M)

# make, the Terraform roots of the checkout: one at a time
pytestmark = [pytest.mark.xdist_group("checkout"), pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def demo_env(repo: Path, tmp_path: Path) -> Iterator[tuple[list[str], dict[str, str], str]]:
    shutil.copytree(repo / "infra", tmp_path / "infra", ignore=shutil.ignore_patterns(".terraform", "*.tfstate*"))
    name = f"demo-test-{uuid.uuid4().hex[:8]}"
    make_vars = [f"JOB={name}", f"TFCLUSTER_TF_DIR={tmp_path / 'infra' / 'local'}", f"TFCLUSTER_CLUSTER={name}"]
    env = {**os.environ, "TFCLUSTER_LOCALAWS_DIR": str(tmp_path / "localaws"),
           "TFCLUSTER_LOCALAWS_PORT": str(free_port_block(1)), "TFCLUSTER_BASE_PORT": str(free_port_block(4))}
    yield make_vars, env, name
    # Always tear down: destroy also stops the endpoint and checks that no instance of the cluster is left.
    subprocess.run(["make", "destroy", "CLUSTER=local", *make_vars], cwd=repo, env=env, capture_output=True,
                   text=True, timeout=600, check=False)
    for job_dir in (repo / "artifacts" / "local").glob(f"{name}*"):
        shutil.rmtree(job_dir, ignore_errors=True)
    shutil.rmtree(repo / ".cache" / "local" / name, ignore_errors=True)


@pytest.mark.timeout(2400)  # its own steps' limits below add up past the suite's 900 s on a loaded 2-core machine
def test_make_demo_trains_collects_verifies_and_destroys(repo: Path, demo_env: tuple[list[str], dict[str, str], str]
                                                         ) -> None:
    make_vars, env, name = demo_env
    demo = subprocess.run(["make", "demo", *make_vars], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=1500, check=False)
    assert demo.returncode == 0, demo.stdout[-6000:] + demo.stderr[-3000:]
    lines = demo.stdout.splitlines()  # setup reports on stderr
    assert len(lines) <= LINE_BUDGET, f"{len(lines)} lines:\n{demo.stdout}"
    assert PROGRESS.search(demo.stdout), demo.stdout  # the live progress: host, slot, state, epoch, examples/s
    assert re.search(r"^  ok   Wait for the job\s+\S+", demo.stdout, re.M), demo.stdout  # one line per stage
    artifacts = collected_dir(repo / "artifacts" / "local" / name)
    assert artifacts is not None and verify_dir(artifacts) > 0
    assert (artifacts / "training.png").stat().st_size > 0
    metrics = json.loads((artifacts / "metrics.json").read_text())
    assert metrics["strategy"] == "multi_worker_mirrored"
    assert metrics["replicas"] == 2
    assert metrics["accuracy"] > 0.8, metrics  # real MNIST, well above chance (0.1)
    assert "accuracy:" in demo.stdout and str(artifacts) in demo.stdout

    # make status: a table of the finished job; make logs: the chief's log, ending because its task ended.
    status = subprocess.run(["make", "status", *make_vars], cwd=repo, env=env, capture_output=True, text=True,
                            timeout=300, check=False)
    assert status.returncode == 0, status.stdout[-3000:] + status.stderr[-3000:]
    header = r"^\s+HOST\s+SLOT\s+STATE\s+EPOCH\s+STEP\s+EX/S\s+LAST UPDATE\s+AUTOSTOP$"
    assert re.search(header, status.stdout, re.M), status.stdout
    for index in (0, 1):
        assert re.search(rf"^\s+worker-{index}\s+worker:{index}\s+succeeded\b", status.stdout, re.M), status.stdout
    logs = subprocess.run(["make", "logs", *make_vars], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert logs.returncode == 0, logs.stdout[-3000:] + logs.stderr[-3000:]
    assert "following worker-0 (worker:0)" in logs.stdout, logs.stdout
    assert re.search(r"epoch|accuracy", logs.stdout.split("following worker-0", 1)[1]), logs.stdout

    # The other commands a user types on a cluster, each run once on this one.
    def make(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["make", *args, *make_vars], cwd=repo, env=env, capture_output=True, text=True,
                              timeout=600, check=False)

    def ok(run: subprocess.CompletedProcess[str]) -> str:
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        return run.stdout

    assert "TF_CONFIG per host" in ok(make("plan"))
    assert "already collected" in ok(make("collect"))  # the same manifest: verified, nothing replaced
    assert "nothing to prune" in ok(make("prune-artifacts"))
    assert name in ok(make("clusters"))
    ok(make("autostop", "IDLE=10"))  # local slots: not applicable, changes nothing
    ok(make("stop"))  # the job has ended: nothing to stop
    refused = make("clean-artifacts")  # no terminal, no YES=1: refused, nothing deleted
    assert refused.returncode != 0 and "refusing to delete them without asking" in refused.stderr, refused.stderr
    assert collected_dir(repo / "artifacts" / "local" / name) is not None
    assert all(target in ok(make("help")) for target in ("demo", "status", "logs", "destroy"))

    # A script from the TensorFlow guides, unchanged, as a SCRIPT job on the same cluster (issue 13): legacy Keras is
    # selected for it, it trains on both workers, saves nothing, and `make train` succeeds saying so.
    job = f"{name}-guide"
    guide = subprocess.run(["make", "train", f"SCRIPT={GUIDE}", "DATASETS=mnist", f"JOB={job}",
                            *[v for v in make_vars if not v.startswith("JOB=")]],
                           cwd=repo, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert guide.returncode == 0, guide.stdout[-6000:] + guide.stderr[-3000:]
    assert "nothing to collect" in guide.stdout, guide.stdout
    for host in ("worker-0", "worker-1"):
        log = (repo / ".cache" / "local" / name / host / "var/log/tfcluster" / f"{job}.log").read_text()
        assert "20/20" in log and "accuracy" in log, log[-2000:]
    chief = repo / ".cache" / "local" / name / "worker-0" / "var/lib/tfcluster" / job
    assert (chief / contract.DONE).is_file() and (chief / contract.MANIFEST).read_text() == ""

    destroy = subprocess.run(["make", "destroy", "CLUSTER=local", *make_vars], cwd=repo, env=env,
                             capture_output=True, text=True, timeout=600, check=False)
    assert destroy.returncode == 0, destroy.stdout[-3000:] + destroy.stderr[-3000:]


def test_make_demo_workers_zero_is_a_clear_error_and_starts_nothing(
        repo: Path, demo_env: tuple[list[str], dict[str, str], str]) -> None:
    make_vars, env, name = demo_env
    demo = subprocess.run(["make", "demo", "WORKERS=0", *make_vars], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert demo.returncode != 0
    out = demo.stdout + demo.stderr
    assert "WORKERS: '0' is not a whole number >= 1. Fix: set WORKERS to a number >= 1" in out, out[-3000:]
    assert "Nothing was started." in out
    assert not (repo / ".cache" / "local" / name).exists()  # no task was set up, let alone started
    assert not (repo / "artifacts" / "local" / name).exists()
