"""Benchmarks of the whole job on lab hosts (issue 6 item 5), from one run; root (boots a lab of 4 hosts).

    .venv/bin/python bench/lab_flows.py            # boots + prepares its own lab (site.yml with the wheelhouse)
    TFCLUSTER_FLOW_REUSE=1 .venv/bin/python bench/lab_flows.py   # reuse a prepared `flow` lab (development)

Prints the four figures of issue 13, each with its goal, side by side from one run (plus the fail-fast time):
1. time to the first training step on an already-prepared cluster (train.yml started -> chief's status.json shows a
   step; goal <= 15 s), split into the playbook's part (until the units start) and TensorFlow's (unit start -> first
   step);
2. a no-op site.yml re-run on 4 hosts vs 1 host (goal <= 1.2x: configuration cost must not grow with hosts);
3. a worker's death (trainer SIGKILLed, no restarts left) -> every unit stopped and train.yml failed naming it
   (goal <= 10 s + the progress timeout);
4. the collector's throughput (collect.yml's transfer task: one tar stream over SSH, every sha256 checked while it
   is written) vs plain `scp -r` of the same files (goal >= 0.9), on a finished job with a 1 GB export so bytes,
   not per-task overhead, are what is measured; the whole collect.yml run is printed too;
5. `inventory --list` at 10,000 hosts: seconds and MB (goal < 1 s, < 10 MB, bytes per host constant: linear).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.inventory_build import script
from lab import Lab, LabError
from lab.flows import (
    FLOW_LAB,
    FLOW_NAMES,
    FLOW_VARS,
    MWMS_SLOTS,
    PS_SLOTS,
    TINY_TRAINER_ARGS,
    Flows,
    step_of,
    wait_until,
)
from tfcluster.prepare.wheelhouse import DEFAULT_DEST, build

REPO = Path(__file__).resolve().parents[1]

log = logging.getLogger("bench.lab_flows")
STALL_TIMEOUT = 30
COLLECT_MB = 1024
GOAL_FIRST_STEP_S = 15.0
GOAL_RERUN_RATIO = 1.2
GOAL_COLLECTOR_RATIO = 0.9
LIST_HOSTS = (1_000, 10_000)


@contextmanager
def prepared_lab(workdir: Path) -> Iterator[Flows]:
    build()
    reuse = os.environ.get("TFCLUSTER_FLOW_REUSE") == "1"
    slots = ("chief", "worker", "worker", "ps")
    if reuse:
        try:
            lab = Lab.attach(FLOW_LAB)
        except LabError:
            lab = Lab(slots=slots, name=FLOW_LAB, names=FLOW_NAMES).start()
    else:
        lab = Lab(slots=slots, name=FLOW_LAB, names=FLOW_NAMES)  # the test suite's lab: run one at a time
    try:
        if not reuse:
            lab.start()
        flows = Flows(lab, workdir, DEFAULT_DEST, common_vars=dict(FLOW_VARS))
        run = flows.run("site.yml", flows.hosts_file("prepare", PS_SLOTS), "prepare", timeout=1800)
        if run.returncode != 0:
            raise RuntimeError("preparing the lab failed:\n" + run.describe())
        print(f"prepare (site.yml, 4 fresh hosts, TensorFlow from the wheelhouse): {run.seconds:.1f} s"
              if not reuse else f"prepare (reused lab, no-op): {run.seconds:.1f} s")
        yield flows
    finally:
        if not reuse:
            lab.down()


def time_to_first_step(flows: Flows) -> tuple[float, float]:
    job = f"bench-first-{int(time.time())}"
    slots = MWMS_SLOTS
    chief = slots[0][0]
    started = flows.start("train.yml", flows.hosts_file(job, slots), job,
                          {"tfcluster_trainer_args": TINY_TRAINER_ARGS + " --steps-per-epoch 200"})
    t0 = started[3]
    try:
        wait_until(lambda: step_of(flows.status(chief, job)) >= 1 or started[0].poll() is not None, 900,
                   "no training step", interval=0.25)
        first = time.monotonic() - t0
        if started[0].poll() is not None:
            raise RuntimeError("train.yml ended before a step:\n" + started[1].read_text()[-3000:])
        out = flows.lab.ssh(chief, f"systemctl show {flows.unit(job)} -p ExecMainStartTimestampMonotonic --value; "
                                   "cat /proc/uptime").stdout.split()
        unit_age = float(out[1]) - int(out[0]) / 1e6  # seconds since the unit started (guest clock)
        return first, unit_age
    finally:
        os.killpg(started[0].pid, 15)
        started[0].wait(timeout=60)
        flows.stop_everywhere(job, [h for h, _, _ in slots])


def site_rerun(flows: Flows) -> tuple[float, float]:
    one = flows.run("site.yml", flows.hosts_file("rerun-1", PS_SLOTS[:1]), "noop", timeout=900)
    four = flows.run("site.yml", flows.hosts_file("rerun-4", PS_SLOTS), "noop", timeout=900)
    for run in (one, four):
        if run.returncode != 0 or any(c["changed"] for h, c in run.recap.items() if h != "localhost"):
            raise RuntimeError("the no-op site.yml re-run failed or changed something:\n" + run.describe())
    return one.seconds, four.seconds


def worker_death(flows: Flows) -> float:
    job = f"bench-death-{int(time.time())}"
    slots = MWMS_SLOTS
    worker = slots[1][0]
    evars = {"tfcluster_trainer_args": TINY_TRAINER_ARGS + " --steps-per-epoch 400", "tf_job_max_restarts": 0,
             "tf_job_stall_timeout": STALL_TIMEOUT}
    started = flows.start("train.yml", flows.hosts_file(job, slots), job, evars)
    try:
        wait_until(lambda: step_of(flows.status(worker, job)) >= 1 or started[0].poll() is not None, 900,
                   "no training step", interval=0.5)
        pid = flows.trainer_pids(worker, job)[0]
        flows.lab.ssh(worker, f"kill -9 {pid}")
        killed = time.monotonic()
        run = flows.wait(started, timeout=600)
        reported = time.monotonic() - killed
        if run.returncode == 0 or worker not in run.output:
            raise RuntimeError("the job did not fail naming the dead worker:\n" + run.describe())
        left = [h for h, _, _ in slots if flows.active(h, job)]
        if left:
            raise RuntimeError(f"units still active after the failure: {left}")
        return reported
    finally:
        flows.stop_everywhere(job, [h for h, _, _ in slots])


def collector_vs_scp(flows: Flows, workdir: Path,
                     slots: tuple[tuple[str, str, int], ...] = MWMS_SLOTS) -> tuple[float, float, float, int]:
    """(collect.yml wall s, its transfer task's s, scp -r s, bytes) for one finished job with a big export."""
    job = f"bench-collect-{int(time.time())}"
    chief = slots[0][0]
    model_dir = flows.model_dir(job)
    flows.lab.ssh(chief, f"set -e; mkdir -p {model_dir}/export/variables {model_dir}/checkpoints; cd {model_dir}; "
                         f"head -c {COLLECT_MB}M /dev/urandom > export/variables/variables.data-00000-of-00001; "
                         "head -c 4M /dev/urandom > checkpoints/ckpt-3.data; echo '{}' > config.json; "
                         "echo '{\"epochs\": 3}' > metrics.json; "
                         "sha256sum config.json metrics.json checkpoints/ckpt-3.data "
                         "export/variables/variables.data-00000-of-00001 > MANIFEST.sha256; echo '{}' > DONE",
                  timeout=300)
    nbytes = int(flows.lab.ssh(chief, f"du -sb {model_dir} | cut -f1").stdout.strip())
    try:
        run = flows.run("collect.yml", flows.hosts_file(job, slots), job, timeout=900)
        if run.returncode != 0:
            raise RuntimeError("collect.yml failed:\n" + run.describe())
        dest = Path(tempfile.mkdtemp(dir=workdir))
        t0 = time.monotonic()
        subprocess.run(["scp", "-q", "-r", "-F", str(flows.lab.ssh_config), f"{chief}:{model_dir}", str(dest)],
                       check=True, timeout=900)
        scp = time.monotonic() - t0
        shutil.rmtree(dest)
        fetch = sum(float(line.split()[1]) for line in run.output.splitlines() if line.startswith("TIMING")
                    and "Collect the model dir into" in line)
        return run.seconds, fetch, scp, nbytes
    finally:
        flows.lab.ssh(chief, f"rm -rf {model_dir}", check=False)


def inventory_list() -> dict[int, tuple[float, int]]:
    """{hosts: (seconds, bytes)} of `inventory/slots.py --list` (local source, a PS cluster) at each size."""
    out = {}
    for hosts in LIST_HOSTS:
        run = script({"TFCLUSTER_SOURCE": "local", "TFCLUSTER_WORKERS": str(hosts - 2),
                      "TFCLUSTER_STRATEGY": "parameter_server", "TFCLUSTER_BASE_PORT": "20000"})
        run()  # warm the file cache
        t0 = time.monotonic()
        size = len(run())
        out[hosts] = (time.monotonic() - t0, size)
    return out


def _ok(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="lab-flows-bench-") as tmp, prepared_lab(Path(tmp)) as flows:
        first, unit_age = time_to_first_step(flows)
        print(f"1. time to first training step (prepared cluster, chief + 2 workers): {first:.1f} s "
              f"(playbook until the units start {first - unit_age:.1f} s + unit start -> first step {unit_age:.1f} s)"
              f"; goal <= {GOAL_FIRST_STEP_S:.0f} s: {_ok(first <= GOAL_FIRST_STEP_S)}")
        one, four = site_rerun(flows)
        print(f"2. no-op site.yml re-run: 1 host {one:.1f} s, 4 hosts {four:.1f} s -> ratio {four / one:.2f}x "
              f"(goal <= {GOAL_RERUN_RATIO}x: {_ok(four / one <= GOAL_RERUN_RATIO)})")
        death = worker_death(flows)
        print(f"3. worker death -> job stopped and reported: {death:.1f} s (goal <= 10 s + progress timeout "
              f"{STALL_TIMEOUT} s = {10 + STALL_TIMEOUT} s; restarts disabled for this run)")
        collect, fetch, scp, nbytes = collector_vs_scp(flows, Path(tmp))
        mb = nbytes / 1e6
        print(f"4. collector throughput: {mb:.0f} MB, its transfer task {fetch:.1f} s ({mb / fetch:.0f} MB/s, sha256 "
              f"checked on the fly) vs scp -r {scp:.1f} s ({mb / scp:.0f} MB/s) -> ratio {scp / fetch:.2f} "
              f"(goal >= {GOAL_COLLECTOR_RATIO}: {_ok(scp / fetch >= GOAL_COLLECTOR_RATIO)});"
              f" the whole collect.yml run {collect:.1f} s ({mb / collect:.0f} MB/s, with "
              f"ansible-playbook's start and the DONE/manifest checks) -> {scp / collect:.2f}")
    listed = inventory_list()
    (small, (_, small_bytes)), (big, (big_s, big_bytes)) = sorted(listed.items())
    linear = (big_bytes / big) / (small_bytes / small)
    print(f"5. inventory --list: {big} hosts {big_s:.2f} s, {big_bytes / 1e6:.1f} MB; bytes per host at {big} vs "
          f"{small} hosts {linear:.2f} (1.00 = linear) (goal < 1 s, < 10 MB, linear: "
          f"{_ok(big_s < 1 and big_bytes < 10e6 and linear < 1.1)})")
    print(json.dumps({"first_step_s": round(first, 1), "site_rerun_1_s": round(one, 1),
                      "site_rerun_4_s": round(four, 1), "site_rerun_ratio": round(four / one, 2),
                      "worker_death_s": round(death, 1), "collect_mb": round(mb), "transfer_s": round(fetch, 2),
                      "scp_s": round(scp, 2), "collector_ratio": round(scp / fetch, 2),
                      "collect_playbook_s": round(collect, 1), "collect_playbook_ratio": round(scp / collect, 2),
                      "list_hosts": big, "list_s": round(big_s, 2), "list_mb": round(big_bytes / 1e6, 1),
                      "list_bytes_per_host_growth": round(linear, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
