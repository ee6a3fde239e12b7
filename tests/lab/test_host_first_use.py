"""First real use on a host (issue 21): a program inside the job's unit can read and write what docs/jobs.md's table
"What CUDA needs" and the job's home promise, on the flow lab's real systemd hosts.

* A CPU SCRIPT job (train.yml, the whole flow): its program writes HOME and every cache variable
  (contract.JOB_HOME_ENV) and the S3 dataset cache; /proc shows processes only (ProcSubset=pid: no /proc/cpuinfo).
* A unit rendered for GPUs (tag tf_job_configure; the lab hosts have no GPU, so nothing CUDA itself is run): the
  same program under that unit's own properties (systemd-run -p each line of it) sees /proc whole (ProcSubset=all:
  /proc/cpuinfo, /proc/driver), an unlimited memlock, and a writable home; the unit waits for
  tfcluster.nvidia-uvm.service and runs no nvidia-modprobe itself.
* A guide-style script that calls keras.datasets.mnist.load_data() trains on 2 hosts with DATASETS=mnist - where the
  control machine's mnist.npz is the file Keras pins (else skipped: Keras would download, and the lab has no
  internet; the render's note says so).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from lab.flows import MWMS_SLOTS, Flows
from tfcluster.core.contract import JOB_HOME_ENV
from tfcluster.core.files import sha256_file
from tfcluster.host.jobhome import KERAS_DATASETS

pytestmark = [pytest.mark.xdist_group("flowlab2"), pytest.mark.lab, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
PROBE = HERE / "first_use_probe.py"
GUIDE = HERE / "keras_load_data_job.py"
MNIST = HERE.parents[1] / ".cache" / "datasets" / "mnist.npz"
WORKERS = MWMS_SLOTS[1:]  # f-w0, f-w1


def unsafe(value: str) -> dict[str, str]:
    return {"__ansible_unsafe": value}


def home_of(job: str) -> str:
    return f"/var/lib/tfcluster/jobs/{job}/home"


def assert_home_writable(seen: dict[str, object], job: str) -> None:
    home = home_of(job)
    assert seen["user"] == "tfcluster", seen
    assert seen["env"] == {n: f"{home}/{r}" if r else home for n, r in JOB_HOME_ENV.items()}, seen
    assert set(seen["home"].values()) == {"ok"}, seen["home"]  # type: ignore[union-attr]


@pytest.mark.timeout(1200)
def test_a_cpu_job_writes_its_home_and_the_s3_cache(flow_lab: Flows) -> None:
    job = flow_lab.job("first-use-cpu")
    try:
        run = flow_lab.run("train.yml", flow_lab.hosts_file(job, WORKERS), job, {
            "tfcluster_script": unsafe(str(PROBE)), "tfcluster_datasets": ["mnist"],
            "tf_job_preflight_imports": []}, timeout=900)
        assert run.returncode == 0, run.describe(80)
        for host, _, _ in WORKERS:
            seen = flow_lab.read_json(host, f"/var/lib/tfcluster/{job}/probe.json")
            assert seen is not None, host
            assert_home_writable(seen, job)
            assert seen["s3_cache"] == "ok", seen
            assert seen["proc_cpuinfo"] is False and seen["proc_self"] is True, seen  # ProcSubset=pid
            owner = flow_lab.lab.ssh(host, f"stat -c '%U %a' {home_of(job)} /var/lib/tfcluster/datasets/s3").stdout
            assert owner.split("\n")[:2] == ["tfcluster 750", "tfcluster 750"], owner
        if MNIST.is_file() and sha256_file(str(MNIST)) != KERAS_DATASETS["mnist"][1]:
            assert "is not the mnist.npz Keras pins" in run.output, run.describe(40)
    finally:
        flow_lab.stop_everywhere(job, [h for h, _, _ in WORKERS])


def unit_run_argv(unit: str, program: list[str], workdir: str | None = None) -> str:
    """systemd-run with every property of the rendered unit's sandbox (and its user, env file, writable paths);
    ``workdir`` instead of the unit's WorkingDirectory (a job only configured, not deployed, has no script dir)."""
    keep = ("User=", "Group=", "EnvironmentFile=", "ReadWritePaths=", "WorkingDirectory=")
    service = unit.split("[Service]", 1)[1]
    props, in_sandbox = [], False
    for raw in service.splitlines():
        line = raw.strip()
        if line.startswith("NoNewPrivileges="):
            in_sandbox = True  # the sandbox list starts here (tf_job vars: _tf_job_sandbox_base's first entry)
        if line and not line.startswith("#") and (in_sandbox or line.startswith(keep)):
            props.append(f"WorkingDirectory={workdir}" if workdir and line.startswith("WorkingDirectory=") else line)
    args = ["systemd-run", "--wait", "--pipe", "--collect", "--quiet", "--service-type=exec"]
    args += [a for p in props for a in ("-p", p)]
    return shlex.join([*args, "--", *program])


@pytest.mark.timeout(900)
def test_a_program_in_a_gpu_units_sandbox_sees_proc_and_writes_its_home(flow_lab: Flows) -> None:
    job = flow_lab.job("first-use-gpu")
    host = "f-chief"
    run = flow_lab.run("train.yml", flow_lab.hosts_file(job, MWMS_SLOTS[:1]), job,
                       {"tf_job_gpus": 2, "tf_job_backend": "systemd", "tfcluster_script": unsafe(str(PROBE))},
                       args=["--tags", "tf_job_configure"], timeout=600)
    assert run.returncode == 0, run.describe()
    unit = flow_lab.lab.ssh(host, f"cat /etc/systemd/system/{flow_lab.unit(job)}").stdout
    assert "ProcSubset=all" in unit and "DeviceAllow=char-nvidia-uvm rw" in unit and "nvidia-modprobe" not in unit
    after = next(line for line in unit.splitlines() if line.startswith("After="))
    assert "tfcluster.nvidia-uvm.service" in after.split("=", 1)[1].split(), unit
    out = f"/var/lib/tfcluster/{job}/probe-gpu.json"  # the model dir: writable in the unit
    flow_lab.lab.ssh(host, unit_run_argv(unit, ["/usr/bin/python3", "-I", "-c", PROBE.read_text(), out],
                                         workdir=f"/var/lib/tfcluster/{job}"), timeout=120)
    seen = flow_lab.read_json(host, out)
    assert seen is not None
    assert_home_writable(seen, job)
    assert seen["proc_cpuinfo"] is True and seen["proc_driver"] is True, seen  # /proc/driver is not hidden
    # The memlock limit: the unit asks for it (above); a container's systemd cannot grant more than its own hard
    # limit (8 MiB here, the outer machine's), so the lab cannot show what a machine's PID 1 gives. bench/gpu_check.py
    # reports the limit the unit really gets on a GPU machine.
    assert "LimitMEMLOCK=infinity" in unit and isinstance(seen["memlock"], int), seen


@pytest.mark.timeout(1800)
def test_a_guide_script_loads_mnist_through_keras_on_two_hosts(flow_lab: Flows) -> None:
    if not MNIST.is_file() or sha256_file(str(MNIST)) != KERAS_DATASETS["mnist"][1]:
        pytest.skip(f"{MNIST} is not the file keras.datasets.mnist.load_data() accepts (sha256 "
                    f"{KERAS_DATASETS['mnist'][1][:12]}...): Keras would download it and the lab has no internet. "
                    "Put Keras' own mnist.npz there to run this")
    job = flow_lab.job("first-use-keras")
    try:
        run = flow_lab.run("train.yml", flow_lab.hosts_file(job, WORKERS), job, {
            "tfcluster_script": unsafe(str(GUIDE)), "tfcluster_datasets": ["mnist"]}, timeout=1500)
        assert run.returncode == 0, run.describe(80)
        for host, _, _ in WORKERS:
            listing = flow_lab.lab.ssh(host, f"ls {home_of(job)}/.keras/datasets").stdout.split()
            assert listing == ["mnist.npz"], listing
            assert "Downloading data from" not in "\n".join(flow_lab.journal(host, job))
    finally:
        flow_lab.stop_everywhere(job, [h for h, _, _ in WORKERS])


def test_the_probe_runs_here(tmp_path: Path) -> None:
    """The probe itself (no lab): it writes its JSON and reports its home's directories."""
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "TFCLUSTER_DATASETS": str(tmp_path / "datasets"),
           **{n: str(tmp_path / "home" / r) for n, r in JOB_HOME_ENV.items()}}
    subprocess.run([sys.executable, str(PROBE), str(tmp_path / "out.json")], env=env, check=True, timeout=60)
    seen = json.loads((tmp_path / "out.json").read_text())
    assert set(seen["home"].values()) == {"ok"} and seen["s3_cache"] == "ok"
