"""The job on real systemd hosts (the flow lab): the hardened unit, arguments as data, GPUs the job can see, the
deadline.

* A CPU job trains (RING) under the unit's sandbox, with the system-call filter set to kill (not EPERM) on anything
  outside @system-service: the run finishing proves the filter covers a real training run. systemd-analyze rates
  the unit, and a unit rendered for a GPU host, at 2.0 or less.
* Arguments with quotes, ';', '%', '$' and '{{ }}' reach the program as typed under systemd; env and spec files are
  0640 root:<job group>.
* A job that declares GPUs on a GPU-less host fails in preflight, naming the host, and no unit starts anywhere.
* A job with a one-minute deadline ends as timeout after a backup; a re-run with no deadline resumes from it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from lab.flows import FAULT_STEPS, MWMS_SLOTS, SLOW_CPUS, TINY_TRAINER_ARGS, Flows, wait_until

# one of the two flow groups: its tests run in the one worker that boots its flow lab (tests/conftest.py)
pytestmark = [pytest.mark.xdist_group("flowlab2"), pytest.mark.lab, pytest.mark.slow]

HOSTS = [h for h, _, _ in MWMS_SLOTS]
BYO = Path(__file__).resolve().parents[1] / "integration/playbooks/byo_job.py"  # the local-slot tests' script
EXPOSURE = re.compile(r"Overall exposure level for \S+: (\d+\.\d+)")
# The filter's default action (kill the process) instead of EPERM: a call outside the list ends the run loudly.
KILL_ON_FORBIDDEN_CALLS = ["SystemCallErrorNumber="]


def exposure(flows: Flows, host: str, unit: str) -> float:
    out = flows.lab.ssh(host, f"systemd-analyze security {unit} --no-pager", timeout=60).stdout
    match = EXPOSURE.search(out)
    assert match, out
    print(f"[job] systemd-analyze security {unit} on {host}: {match.group(1)}")
    return float(match.group(1))


def unsafe(value: str) -> dict[str, str]:
    return {"__ansible_unsafe": value}


@pytest.mark.timeout(1800)
def test_a_cpu_job_trains_in_the_hardened_unit(flow_lab: Flows) -> None:
    job = flow_lab.job("job-sandbox")
    try:
        run = flow_lab.run("train.yml", flow_lab.hosts_file(job, MWMS_SLOTS), job,
                           {"tf_job_sandbox_extra": KILL_ON_FORBIDDEN_CALLS}, timeout=900)
        assert run.returncode == 0, run.describe(120)
        metrics = json.loads((flow_lab.artifacts(job) / "current/metrics.json").read_text())
        assert metrics.get("collective", "ring") == "ring", metrics
        for host in HOSTS:
            assert "status=31/SYS" not in "\n".join(flow_lab.journal(host, job))
        assert exposure(flow_lab, "f-chief", flow_lab.unit(job)) <= 2.0
        modes = flow_lab.lab.ssh("f-w0", f"stat -c '%a %U %G' /etc/tfcluster/{job}.env /etc/tfcluster/{job}.json")
        assert modes.stdout.split("\n")[:2] == ["640 root tfcluster"] * 2
    finally:
        flow_lab.stop_everywhere(job, HOSTS)


@pytest.mark.timeout(900)
def test_a_unit_rendered_for_gpus_is_hardened_too(flow_lab: Flows) -> None:
    """Rendered only (tag tf_job_configure): DevicePolicy=closed + the NVIDIA device classes, /proc/driver visible
    (ProcSubset=all: drivers >= 570 read it when CUDA starts), no PrivateDevices (docs/jobs.md, What CUDA needs)."""
    job = flow_lab.job("job-gpu-unit")
    run = flow_lab.run("train.yml", flow_lab.hosts_file(job, MWMS_SLOTS[:1]), job,
                       {"tf_job_gpus": 2, "tf_job_backend": "systemd"}, args=["--tags", "tf_job_configure"])
    assert run.returncode == 0, run.describe()
    unit = flow_lab.lab.ssh("f-chief", f"cat /etc/systemd/system/{flow_lab.unit(job)}").stdout
    assert "DevicePolicy=closed" in unit and "DeviceAllow=char-nvidia-uvm rw" in unit and "PrivateDevices" not in unit
    assert "ProcSubset=all" in unit and "ProcSubset=pid" not in unit
    flow_lab.lab.ssh("f-chief", "systemctl daemon-reload")
    assert exposure(flow_lab, "f-chief", flow_lab.unit(job)) <= 2.0


@pytest.mark.timeout(900)
def test_arguments_reach_the_program_as_typed_under_systemd(flow_lab: Flows) -> None:
    job = flow_lab.job("job-args")
    odd = ["x'; touch /tmp/MARKER; '", "{{ lookup('pipe', 'touch /tmp/MARKER') }}", "50%", "%n", "$HOME", "${PATH}",
           "a b", '"quoted"', "back\\slash"]
    echo = f"/var/lib/tfcluster/{job}/argv.json"
    args = ["--steps", "2", "--echo-args", echo, *odd]
    try:
        run = flow_lab.run("train.yml", flow_lab.hosts_file(job, MWMS_SLOTS[1:]), job, {
            "tfcluster_script": unsafe(str(BYO)), "tfcluster_script_args": [unsafe(a) for a in args],
            "tf_job_preflight_imports": []}, timeout=600)
        assert run.returncode == 0, run.describe(80)
        seen = flow_lab.read_json("f-w0", echo)
        assert seen is not None and seen["argv"] == args, seen
        for host in ("f-w0", "f-w1"):
            assert flow_lab.lab.ssh(host, "test -e /tmp/MARKER", check=False).returncode == 1
    finally:
        flow_lab.stop_everywhere(job, ["f-w0", "f-w1"])


@pytest.mark.timeout(900)
def test_gpus_declared_on_a_gpu_less_host_fail_in_preflight(flow_lab: Flows) -> None:
    job = flow_lab.job("job-nogpu")
    hosts_file = flow_lab.hosts_file(job, MWMS_SLOTS)
    prepared = flow_lab.run("site.yml", hosts_file, job, timeout=900)  # the release of this checkout everywhere
    assert prepared.returncode == 0, prepared.describe()
    spec = yaml.safe_load(hosts_file.read_text())
    for host in spec["hosts"]:
        host["gpus"] = 1 if host["name"] == "f-w1" else 0
    hosts_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    # Only the job's plays (tag tf_job): with the lab's CPU-only wheelhouse the prepare stage refuses a GPU host
    # before the job's own check could run (python_runtime); the job's preflight must catch it by itself too.
    run = flow_lab.run("train.yml", hosts_file, job, timeout=600, args=["--tags", "tf_job"])
    assert run.returncode != 0, run.describe()
    assert [h for h, c in run.recap.items() if c["failed"]] == ["f-w1"], run.describe()
    assert re.search(r"f-w1: TensorFlow sees 0 GPU\(s\) as the job's user in its sandbox, 1 declared\. Fix:",
                     run.output), run.describe(60)
    assert "Nothing was started" in run.output
    assert flow_lab.never_started_anywhere(job, HOSTS) == {}


@pytest.mark.timeout(1800)
def test_the_deadline_ends_the_job_as_timeout_and_a_rerun_resumes(flow_lab: Flows) -> None:
    job = flow_lab.job("job-deadline")
    hosts_file = flow_lab.hosts_file(job, MWMS_SLOTS)
    # Short epochs (a backup at each end) well inside the deadline even when make test's other workers load the
    # cores; the cluster slowed (SLOW_CPUS) once the first epoch's backup exists: more work in all than 60 s train.
    longer = {"tfcluster_trainer_args": TINY_TRAINER_ARGS + f" --steps-per-epoch {FAULT_STEPS}", "tfcluster_epochs": 12}
    try:
        started = flow_lab.start("train.yml", hosts_file, job, {**longer, "tfcluster_max_duration": 60})
        flow_lab.wait_for_training("f-chief", job, started)
        # Slowed until the deadline's SIGTERM reaches the chief, not while the tasks stop: starved of CPU (0.1 core
        # a host) during the stop, the chief was restarted in two loaded clean-clone runs (one: Result=timeout,
        # NRestarts=1, ExecMainStatus=9, killed after tf_job_stop_timeout; docs/jobs.md "The deadline").
        with flow_lab.lab.cpu_limited(SLOW_CPUS):
            wait_until(lambda: flow_lab.unit_props("f-chief", job).get("SubState") != "running", 600,
                       "the deadline (60 s) never stopped the chief", interval=1.0)
        run = flow_lab.wait(started, timeout=900)
        assert run.returncode != 0, run.describe()
        assert "reached its deadline (MAX_DURATION 60 s" in run.output, run.describe(80)
        props = flow_lab.unit_props("f-chief", job)
        # The deadline stops the job; no task is restarted on its way out (a restart would start a new deadline).
        if props.get("Result") != "timeout" or props.get("NRestarts") != "0":  # pytest.fail: the whole text, uncut
            journals = [f"{h}: {line}" for h in HOSTS for line in flow_lab.journal(h, job)[-15:]]
            status = flow_lab.status("f-chief", job)
            pytest.fail("\n".join([f"f-chief: {props}", *journals, f"f-chief status: {status}"]))
        assert flow_lab.lab.ssh("f-chief", f"ls /var/lib/tfcluster/{job}/backup").stdout.strip()
        # The rerun only has to resume and finish: the same epochs and backups, shorter epochs (an epoch cut short is
        # redone from its start), instead of some 9 more epochs of 200 steps on 3 hosts (241 CPU-s on the lab
        # hosts for this test in a clean-clone run, --cpu-report).
        shorter = {**longer, "tfcluster_trainer_args": TINY_TRAINER_ARGS + " --steps-per-epoch 20"}
        rerun = flow_lab.run("train.yml", hosts_file, job, {**shorter, "tfcluster_max_duration": 0}, timeout=1200)
        assert rerun.returncode == 0, rerun.describe(80)
        metrics = json.loads((flow_lab.artifacts(job) / "current/metrics.json").read_text())
        assert metrics["resumes"] >= 1 and metrics["initial_epoch"] >= 1, metrics
    finally:
        flow_lab.stop_everywhere(job, HOSTS)
