"""Every lab figure of issues 13 and 23 from one run, each against its goal; root (boots one lab of 16 hosts on the
prepared runtime layer, lab/layers.py, and downs it at the end).

    .venv/bin/python -m bench.lab_flows                         # what `make bench-lab` runs
    TFCLUSTER_BENCH_LAB=NAME .venv/bin/python -m bench.lab_flows   # attach a lab of 16 hosts already up (development)

1. `tfcluster train` (what `make train` runs) with a new job id on a prepared cluster (a chief and 2 workers), to the
   chief's first training step (goal <= 10 s), with a stage-by-stage table from the run's events log and the
   trainer's own startup_s breakdown;
2. a worker's death (trainer SIGKILLed, no restarts left) -> every unit stopped and train.yml failed naming it
   (goal <= 10 s);
3. the collector (collect.yml's transfer task: tar streams over SSH as the job user, every sha256 checked while
   written) vs `scp -r` of the same model dir, at 256 MiB and 1 GiB, side by side (goal >= 0.9);
4. flat with hosts: at 1, 4 and 16 hosts the no-op site.yml (changed=0 asserted on every host), gang start plus the
   first poll of a trivial job, and status.yml (`make status`), each against one host (goal <= 1.5x at 16; the
   older goal <= 1.2x at 4 for the no-op), with the per-host slope and the extrapolation to 256 hosts;
5. `inventory --list` at 10,000 hosts: seconds and MB (goal < 1 s, < 10 MB, bytes per host constant: linear).

Speed is measured here, never asserted in the suite; the tests assert what the paths do.
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.inventory_build import script
from bench.lab_scale import (
    FirstStep,
    Scale,
    bench_lab,
    first_steps,
    flat_with_hosts,
    load,
    median_cpu,
    median_s,
    slots_of,
    stage_rows,
    startup_text,
)
from lab.flows import TINY_TRAINER_ARGS, Flows, step_of, wait_until

REPO = Path(__file__).resolve().parents[1]

log = logging.getLogger("bench.lab_flows")
GOAL_FIRST_STEP_S = 10.0
GOAL_DEATH_S = 10.0
GOAL_COLLECTOR_RATIO = 0.9
GOAL_FLAT_RATIO = 1.5  # at 16 hosts against 1
GOAL_RERUN_4_RATIO = 1.2  # the older figure: the no-op re-run at 4 hosts against 1
COLLECT_MIB = (256, 1024)
EXTRAPOLATE_TO = 256
LIST_HOSTS = (1_000, 10_000)
COLLECT_TASK = "Collect the model dir from the chief"  # the collector role's pull task


def worker_death(flows: Flows, slots: tuple[tuple[str, str, int], ...]) -> float:
    """Seconds from a worker's trainer SIGKILLed (no restarts left) to train.yml failed naming it, every unit
    stopped."""
    job = f"bench-death-{flows.session}"
    worker = slots[1][0]
    evars = {"tfcluster_trainer_args": TINY_TRAINER_ARGS + " --steps-per-epoch 400", "tf_job_max_restarts": 0}
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


def collector_vs_scp(flows: Flows, workdir: Path, mib: int,
                     slots: tuple[tuple[str, str, int], ...]) -> tuple[float, float, float, int]:
    """(collect.yml wall s, its transfer task's s, scp -r s, bytes) for one finished job whose model dir holds
    ``mib`` MiB laid out as the trainer leaves it: the export's weights (a quarter) and the last two checkpoints with
    the optimizer's slots (three eighths each), random bytes (incompressible, as weights are)."""
    job = f"bench-collect-{mib}-{flows.session}"
    chief = slots[0][0]
    model_dir = flows.model_dir(job)
    export, ckpt = mib // 4, mib * 3 // 8
    flows.lab.ssh(chief, f"set -e; mkdir -p {model_dir}/export/variables {model_dir}/checkpoints; cd {model_dir}; "
                         f"head -c {export}M /dev/urandom > export/variables/variables.data-00000-of-00001; "
                         f"head -c {ckpt}M /dev/urandom > checkpoints/ckpt-2.data-00000-of-00001; "
                         f"head -c {ckpt}M /dev/urandom > checkpoints/ckpt-3.data-00000-of-00001; "
                         "echo '{}' > config.json; echo '{\"epochs\": 3}' > metrics.json; "
                         "sha256sum config.json metrics.json checkpoints/* export/variables/* > MANIFEST.sha256; "
                         f"echo '{{}}' > DONE; chown -R tfcluster: {model_dir}", timeout=300)
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
                    and COLLECT_TASK in line)
        if fetch <= 0:
            raise RuntimeError(f"collect.yml printed no TIMING line for {COLLECT_TASK!r}:\n" + run.describe())
        shutil.rmtree(flows.artifacts(job), ignore_errors=True)
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


def print_first_steps(steps: list[FirstStep]) -> float:
    seconds = statistics.median(s.at_s for s in steps)
    print(f"1. `tfcluster train`, new job id, prepared cluster (chief + 2 workers) -> the chief's first step: "
          f"{', '.join(f'{s.at_s:.1f}' for s in steps)} s, median {seconds:.1f} s "
          f"(goal <= {GOAL_FIRST_STEP_S:.0f} s: {_ok(seconds <= GOAL_FIRST_STEP_S)}); seen in status.json at "
          f"{', '.join(f'{s.seconds:.1f}' for s in steps)} s")
    middle = sorted(steps, key=lambda s: s.at_s)[len(steps) // 2]
    print("   where the seconds of the median run went:")
    for name, took in stage_rows(middle):
        print(f"     {took:6.2f} s  {name}")
    print(f"   the trainer's own startup_s (chief): {startup_text(middle.startup) or 'not reported'}")
    return seconds


def print_scale(scales: dict[int, Scale]) -> dict[str, float]:
    """Each figure at every host count, its ratio to one host, the per-host slope and the 256-host extrapolation."""
    one, top = min(scales), max(scales)
    figures = {"no-op site.yml": {n: median_s(s.noop) for n, s in scales.items()},
               "gang start + first poll": {n: statistics.median(s.start_poll) for n, s in scales.items()},
               "status.yml (make status)": {n: median_s(s.status) for n, s in scales.items()}}
    out: dict[str, float] = {}
    print(f"4. flat with hosts (medians; goal <= {GOAL_FLAT_RATIO}x one host at {top}):")
    for name, by in figures.items():
        ratio = by[top] / by[one]
        slope = (by[top] - by[one]) / (top - one)
        at = by[one] + slope * (EXTRAPOLATE_TO - one)
        cells = ", ".join(f"{n} host(s) {by[n]:.2f} s" for n in sorted(by))
        print(f"   {name}: {cells} -> {top} vs {one}: {ratio:.2f}x ({_ok(ratio <= GOAL_FLAT_RATIO)}); "
              f"{slope * 1000:.0f} ms per added host -> {EXTRAPOLATE_TO} hosts ~{at:.1f} s ({at / by[one]:.1f}x)")
        out[name] = ratio
    four = figures["no-op site.yml"].get(4)
    if four is not None:
        ratio = four / figures["no-op site.yml"][one]
        print(f"   no-op site.yml 4 vs 1 host: {ratio:.2f}x (goal <= {GOAL_RERUN_4_RATIO}x: "
              f"{_ok(ratio <= GOAL_RERUN_4_RATIO)})")
    for n in sorted(scales):
        s = scales[n]
        print(f"   control machine CPU at {n} host(s): no-op site.yml {median_cpu(s.noop):.1f} s (ansible-playbook "
              f"itself {median_cpu(s.noop, 'main_cpu_s'):.1f} s), status.yml {median_cpu(s.status):.1f} s; "
              f"the hosts' CPU in the no-op {median_cpu(s.noop, 'hosts_cpu_s'):.1f} s")
    return out


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(f"start: {load()}", flush=True)
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="lab-flows-bench-") as tmp, bench_lab(Path(tmp)) as flows:
        names = [h.name for h in flows.lab.hosts]
        steps = first_steps(flows)
        results["first_step_s"] = round(print_first_steps(steps), 1)
        results["first_steps_s"] = [round(s.at_s, 1) for s in steps]
        results["first_steps_seen_s"] = [round(s.seconds, 1) for s in steps]
        mwms = slots_of(3, names)
        death = worker_death(flows, mwms)
        results["worker_death_s"] = round(death, 1)
        print(f"2. worker death -> every unit stopped, train.yml failed naming it: {death:.1f} s "
              f"(goal <= {GOAL_DEATH_S:.0f} s: {_ok(death <= GOAL_DEATH_S)})", flush=True)
        for mib in COLLECT_MIB:
            collect, fetch, scp, nbytes = collector_vs_scp(flows, Path(tmp), mib, mwms)
            mb = nbytes / 1e6
            print(f"3. collector, {mib} MiB model dir: its transfer task {fetch:.1f} s ({mb / fetch:.0f} MB/s, sha256 "
                  f"on the fly, as the job user) vs scp -r {scp:.1f} s ({mb / scp:.0f} MB/s) -> {scp / fetch:.2f} "
                  f"(goal >= {GOAL_COLLECTOR_RATIO}: {_ok(scp / fetch >= GOAL_COLLECTOR_RATIO)}); the whole "
                  f"collect.yml {collect:.1f} s (ansible-playbook's start, DONE and manifest read) -> "
                  f"{scp / collect:.2f}", flush=True)
            results[f"collector_ratio_{mib}mib"] = round(scp / fetch, 2)
            results[f"collect_playbook_ratio_{mib}mib"] = round(scp / collect, 2)
        scales = flat_with_hosts(flows)
        results.update({f"flat_{k.split(' (')[0].replace(' ', '_')}": round(v, 2)
                        for k, v in print_scale(scales).items()})
    listed = inventory_list()
    (small, (_, small_bytes)), (big, (big_s, big_bytes)) = sorted(listed.items())
    linear = (big_bytes / big) / (small_bytes / small)
    print(f"5. inventory --list: {big} hosts {big_s:.2f} s, {big_bytes / 1e6:.1f} MB; bytes per host at {big} vs "
          f"{small} hosts {linear:.2f} (1.00 = linear) (goal < 1 s, < 10 MB, linear: "
          f"{_ok(big_s < 1 and big_bytes < 10e6 and linear < 1.1)})")
    results.update(list_hosts=big, list_s=round(big_s, 2), list_mb=round(big_bytes / 1e6, 1),
                   list_bytes_per_host_growth=round(linear, 2))
    print(f"end: {load()}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
