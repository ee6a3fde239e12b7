"""The lab figures of issue 23 that need many hosts or the `tfcluster` command itself; `python -m bench.lab_flows`
prints them.

* :func:`bench_lab`: one lab of 16 hosts on the prepared runtime layer (lab/layers.py), torn down in the end (or
  an existing lab attached with ``TFCLUSTER_BENCH_LAB=NAME``, for development).
* :func:`flat_with_hosts`: at 16, 4 and 1 host(s), each host count a cluster of its own (a host file, prepared by
  site.yml first, so each no-op re-run compares like with like: a firewall's peers are the cluster's hosts): the
  no-op ``site.yml`` (changed=0 asserted on every host), gang start plus the first poll of a trivial job (a SCRIPT
  that exits 0 at once: from the start play's beginning to the wait's first ``progress`` event), and ``status.yml``
  (what `make status` runs). Each run also reports the control machine's CPU: all of the run's processes (forks and
  ssh included) and ansible-playbook's own process, the serial part no fork count spreads.
* :func:`first_steps`: ``tfcluster train`` (what `make train` runs) with a new job id on a prepared cluster, to the
  chief's first training step, with a stage-by-stage table from the run's events log.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import resource
import shutil
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab import Lab, system
from lab.flows import FLOW_VARS, REPO, VENV_BIN, Flows, PlaybookRun, step_of, wait_until
from lab.layers import runtime_layer
from tfcluster.core.contract import CHIEF, WORKER
from tfcluster.prepare.wheelhouse import DEFAULT_DEST, build
from tfcluster.run import events as events_log

log = logging.getLogger("bench.lab_scale")

BENCH_LAB = "lflows"
HOSTS = 16
NAMES = tuple(f"lf-{i}" for i in range(HOSTS))
SIZES = (16, 4, 1)
REPEATS = 3
TICK = os.sysconf("SC_CLK_TCK")
STAGE_START = "Start every task at once"
# Tiny training for the first-step runs: synthetic data, a status line every second, enough steps that the job is
# still training when the first step is seen (the run is interrupted then, the units stopped).
FIRST_TRAINER_ARGS = ("--dataset synthetic --synthetic-examples 2048 --batch-size-per-replica 16 "
                      "--steps-per-execution 1 --no-evaluate --no-tensorboard --status-interval 1 --log-level INFO")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} CPUs)"


def cpu_busy(seconds: float = 5.0, stat: str = "/proc/stat") -> float:
    """The machine's busy share of all CPUs over ``seconds`` (0..1), from /proc/stat's first line."""
    def sample() -> tuple[int, int]:
        with open(stat, encoding="ascii") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def settle(limit: float = 180.0, quiet: float = 0.25) -> float:
    """Wait (at most ``limit`` s) until the machine is quiet (busy < ``quiet`` over 5 s) after a prepare, so each
    host count is measured on the same idle machine; returns the last busy share."""
    deadline = time.monotonic() + limit
    busy = cpu_busy()
    while busy >= quiet and time.monotonic() < deadline:
        busy = cpu_busy()
    return busy


def slots_of(count: int, names: Sequence[str] = NAMES) -> tuple[tuple[str, str, int], ...]:
    """A chief and count-1 workers on the first ``count`` hosts."""
    return ((names[0], CHIEF, 0), *((names[i], WORKER, i - 1) for i in range(1, count)))


@contextmanager
def bench_lab(workdir: Path, hosts: int = HOSTS) -> Iterator[Flows]:
    """16 hosts on the runtime layer (TensorFlow installed once, not per host), downed in the end."""
    build(dest=DEFAULT_DEST)
    attach = os.environ.get("TFCLUSTER_BENCH_LAB")
    if attach:
        lab = Lab.attach(attach)
    else:
        layer = runtime_layer(DEFAULT_DEST)
        lab = Lab(slots=tuple(s for _, s, _ in slots_of(hosts)), name=BENCH_LAB, names=NAMES[:hosts],
                  layers=(layer,))
    try:
        if not attach:
            lab.start()
            print(f"lab: {hosts} hosts on the runtime layer up in {lab.boot_seconds:.1f} s", flush=True)
        yield Flows(lab, workdir, DEFAULT_DEST, common_vars=dict(FLOW_VARS))
    finally:
        if not attach:
            lab.down()


# ---- one playbook run, with the control machine's CPU ------------------------------------------------------------

@dataclass
class Measured:
    run: PlaybookRun
    cpu_s: float  # every process of the run on the control machine (ansible-playbook, its forks, ssh)
    main_cpu_s: float  # ansible-playbook's own process: the strategy's serial work
    hosts_cpu_s: float  # every lab host together (their cgroup): on real machines each host works on its own CPUs

    @property
    def seconds(self) -> float:
        return self.run.seconds


def _own_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15 of stat)


def hosts_cpu(lab: Lab) -> float:
    """CPU seconds used so far by every host of the lab (the lab's cgroup on the unified hierarchy; 0 without)."""
    for group in system.lab_cgroups(lab.paths.lab):
        stat = group / "cpu.stat"
        if stat.is_file():
            for line in stat.read_text().splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
    return 0.0


def measured(flows: Flows, playbook: str, hosts_file: Path, job: str, extra: Mapping[str, object] | None = None, *,
             events: Path | None = None, timeout: float = 900) -> Measured:
    before, host_before = resource.getrusage(resource.RUSAGE_CHILDREN), hosts_cpu(flows.lab)
    started = flows.start(playbook, hosts_file, job, extra, events=events)
    main = [0.0]

    def sample() -> None:
        while started[0].poll() is None:
            value = _own_cpu(started[0].pid)
            main[0] = value if value is not None else main[0]
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    run = flows.wait(started, timeout)
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Measured(run, cpu, main[0], hosts_cpu(flows.lab) - host_before)


def changed_hosts(run: PlaybookRun) -> dict[str, int]:
    return {host: counts["changed"] for host, counts in run.recap.items() if host != "localhost" and counts["changed"]}


def prepare(flows: Flows, hosts_file: Path, tag: str, extra: Mapping[str, object] | None = None) -> PlaybookRun:
    run = flows.run("site.yml", hosts_file, tag, extra, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"preparing {hosts_file.name} failed:\n" + run.describe())
    return run


def noop_site(flows: Flows, hosts_file: Path, tag: str, repeats: int = REPEATS) -> list[Measured]:
    """``repeats`` no-op re-runs of site.yml on a cluster prepared with the same host file: each must change
    nothing on any host."""
    runs: list[Measured] = []
    retried = False
    while len(runs) < repeats:
        one = measured(flows, "site.yml", hosts_file, f"{tag}-{len(runs)}")
        if one.run.returncode == 0 and not changed_hosts(one.run):
            runs.append(one)
            continue
        # Once per cluster: a checkout edited meanwhile (a role, the release) changes the digest, and that run
        # prepares again. A second change is no accident: a re-run that is not idempotent.
        if one.run.returncode != 0 or retried:
            raise RuntimeError(f"the no-op site.yml re-run on {hosts_file.name} changed {changed_hosts(one.run)}:\n"
                               + one.run.describe(80))
        retried = True
        print(f"  note: a site.yml re-run on {hosts_file.name} changed {changed_hosts(one.run)} (the checkout changed "
              "meanwhile?); running it again", flush=True)
    return runs


def start_to_first_poll(events_file: Path) -> float:
    """Seconds from the gang start play's beginning to the wait's first progress event."""
    stream = list(events_log.iter_file(str(events_file)))
    start = next(e["t"] for e in stream if e["event"] == "stage_start" and e.get("name") == STAGE_START)
    first = next(e["t"] for e in stream if e["event"] == "progress" and e["t"] >= start)
    return float(first - start)


def trivial_jobs(flows: Flows, hosts_file: Path, script: Path, tag: str, repeats: int = 2) -> list[float]:
    """Gang start + first poll of a SCRIPT that exits 0 at once, once per new job id (the first run also deploys
    the script's release: before the start, not measured)."""
    out = []
    for index in range(repeats):
        job = f"{tag}-{index}-{flows.session}"
        events = flows.workdir / f"{job}.events.jsonl"
        run = flows.run("train.yml", hosts_file, job, {"tfcluster_script": str(script)}, timeout=900, events=events)
        if run.returncode != 0:
            raise RuntimeError(f"the trivial job {job} failed:\n" + run.describe(80))
        out.append(start_to_first_poll(events))
    return out


def status_runs(flows: Flows, hosts_file: Path, job: str, repeats: int = REPEATS) -> list[Measured]:
    runs = []
    for _ in range(repeats):
        one = measured(flows, "status.yml", hosts_file, job)
        if one.run.returncode != 0:
            raise RuntimeError(f"status.yml on {hosts_file.name} failed:\n" + one.run.describe(60))
        runs.append(one)
    return runs


@dataclass
class Scale:
    """One host count's figures (seconds; medians are taken by the printer)."""

    hosts: int
    prepare_s: float = 0.0
    busy_before: float = 0.0  # the CPUs' busy share when its measurements began (after settle())
    noop: list[Measured] = field(default_factory=list)
    start_poll: list[float] = field(default_factory=list)
    status: list[Measured] = field(default_factory=list)


def flat_with_hosts(flows: Flows, sizes: Sequence[int] = SIZES) -> dict[int, Scale]:
    script = flows.workdir / "exit0.py"
    script.write_text("raise SystemExit(0)  # bench/lab_scale.py: a trivial job\n")
    out: dict[int, Scale] = {}
    for count in sizes:
        hosts_file = flows.hosts_file(f"scale-{count}", slots_of(count, [h.name for h in flows.lab.hosts]))
        scale = Scale(count, prepare_s=prepare(flows, hosts_file, f"scale-{count}-prepare").seconds)
        scale.busy_before = settle()
        scale.noop = noop_site(flows, hosts_file, f"scale-{count}-noop")
        scale.start_poll = trivial_jobs(flows, hosts_file, script, f"scale{count}")
        scale.status = status_runs(flows, hosts_file, f"scale{count}-0-{flows.session}")
        out[count] = scale
        print(f"  {count:>2} host(s): prepare {scale.prepare_s:.1f} s, no-op site.yml "
              f"{median_s(scale.noop):.2f} s, gang start + first poll {statistics.median(scale.start_poll):.2f} s, "
              f"status.yml {median_s(scale.status):.2f} s (CPUs {scale.busy_before:.0%} busy before; {load()})",
              flush=True)
    return out


def median_s(runs: Sequence[Measured]) -> float:
    return statistics.median(r.seconds for r in runs)


def median_cpu(runs: Sequence[Measured], what: str = "cpu_s") -> float:
    """The median of ``what``: cpu_s (the control machine), main_cpu_s (ansible-playbook's own), hosts_cpu_s."""
    return statistics.median(float(getattr(r, what)) for r in runs)


# ---- the first step, through the tfcluster command ---------------------------------------------------------------

@dataclass
class FirstStep:
    seconds: float  # tfcluster train started -> the chief's status.json shows a step
    unit_s: float  # -> the chief's unit started
    stages: list[tuple[str, float, float]]  # (play, start offset s, seconds)
    startup: dict[str, Any]  # the trainer's own startup_s (status.json)

    @property
    def at_s(self) -> float:
        """When the chief took its first step: its unit's start plus the trainer's own clock to the first step (one
        kernel, one monotonic clock), without the lag of seeing it in status.json; ``seconds`` without a clock."""
        own = self.startup.get("first_step")
        return self.unit_s + own if isinstance(own, int | float) and 0 < self.unit_s + own <= self.seconds \
            else self.seconds


def cli_env(lab: Lab, hosts_file: Path, job: str, trainer_args: str, epochs: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFCLUSTER_", "ANSIBLE_"))}
    env.update(lab.inventory_env())
    for key in ("TFCLUSTER_SOURCE", "TFCLUSTER_HOSTS_FILE", "TFCLUSTER_KNOWN_HOSTS", "TFCLUSTER_KIND",
                "TFCLUSTER_KIND_TRAITS"):
        env.pop(key, None)  # the command derives them from CLUSTER and HOSTS, as for a user
    env.update(PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}", CLUSTER="onprem", HOSTS=str(hosts_file), JOB=job,
               WHEELHOUSE=str(DEFAULT_DEST), TRAINER_ARGS=trainer_args, EPOCHS=str(epochs), PYTHONUNBUFFERED="1")
    return env


def cli_train(lab: Lab, hosts_file: Path, job: str, logfile: Path, *, trainer_args: str, epochs: int,
              timeout: float = 1800) -> int:
    """`make train` to its end (the warm-up that prepares the cluster and leaves the preflight's checks
    remembered, as the user's earlier runs did)."""
    with open(logfile, "w") as out:
        return subprocess.run([str(VENV_BIN / "tfcluster"), "train"], env=cli_env(lab, hosts_file, job, trainer_args,
                              epochs), stdout=out, stderr=subprocess.STDOUT, cwd=REPO, timeout=timeout,
                              check=False).returncode


def _job_dir(job: str) -> Path:
    return REPO / "artifacts" / "onprem" / job


def first_step(flows: Flows, hosts_file: Path, job: str, hosts: Sequence[str]) -> FirstStep:
    lab = flows.lab
    chief = hosts[0]
    logfile = flows.workdir / f"{job}-cli.log"
    wall0, t0 = time.time(), time.monotonic()
    env = cli_env(lab, hosts_file, job, FIRST_TRAINER_ARGS + " --steps-per-epoch 400", 3)
    with open(logfile, "w") as out:
        proc = subprocess.Popen([str(VENV_BIN / "tfcluster"), "train"], stdout=out, stderr=subprocess.STDOUT,
                                cwd=REPO, env=env, start_new_session=True)
    try:
        wait_until(lambda: step_of(flows.status(chief, job)) >= 1 or proc.poll() is not None, 600,
                   f"no training step of {job}", interval=0.2)
        seconds = time.monotonic() - t0
        if proc.poll() is not None:
            raise RuntimeError(f"tfcluster train {job} ended before a step:\n" + logfile.read_text()[-3000:])
        started_us = lab.ssh(chief, f"systemctl show {flows.unit(job)} -p ExecMainStartTimestampMonotonic "
                                    "--value").stdout.strip()
        unit_s = int(started_us) / 1e6 - t0  # one kernel, one CLOCK_MONOTONIC: the hosts are containers
        status = flows.status(chief, job) or {}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the job keeps running; stopped below
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        flows.stop_everywhere(job, hosts)
    stages = []
    for path in glob.glob(str(_job_dir(job) / "logs" / "*-train.events.jsonl")):
        starts: dict[str, float] = {}
        for event in events_log.iter_file(path):
            if event["event"] == "stage_start":
                starts[event["name"]] = event["t"] - wall0
            elif event["event"] == "stage_end" and event["name"] in starts:
                stages.append((event["name"], starts[event["name"]], float(event["seconds"])))
    startup = status.get("startup_s") if isinstance(status.get("startup_s"), dict) else {}
    return FirstStep(seconds, unit_s, stages, dict(startup))


def first_steps(flows: Flows, count: int = 3, repeats: int = REPEATS) -> list[FirstStep]:
    """A chief and count-1 workers prepared by a whole `make train` of a tiny job, then ``repeats`` new jobs timed
    to their first step."""
    hosts = [h.name for h in flows.lab.hosts][:count]
    hosts_file = flows.hosts_file(f"first-{count}", slots_of(count, hosts))
    jobs = [f"bench-first-{flows.session}-{i}" for i in range(repeats + 1)]
    try:
        code = cli_train(flows.lab, hosts_file, jobs[0], flows.workdir / "first-warmup.log",
                         trainer_args=FIRST_TRAINER_ARGS, epochs=1)
        if code != 0:
            raise RuntimeError("the warm-up `tfcluster train` failed:\n"
                               + (flows.workdir / "first-warmup.log").read_text()[-3000:])
        return [first_step(flows, hosts_file, job, hosts) for job in jobs[1:]]
    finally:
        for job in jobs:
            shutil.rmtree(_job_dir(job), ignore_errors=True)
            for host in hosts:
                flows.lab.ssh(host, f"rm -rf {flows.model_dir(job)}", check=False, timeout=60)


def stage_rows(step: FirstStep) -> list[tuple[str, float]]:
    """Where the seconds of one first step went, adding up to it: the command's and ansible-playbook's start, each
    play up to the gang start (from the events log), then TensorFlow's part to the chief's first step."""
    plays = [s for s in sorted(step.stages, key=lambda s: s[1]) if s[1] < step.seconds and s[0] != "Wait for the job"]
    if not plays:
        return [("the whole run (no events log found)", step.seconds)]
    rows = [("tfcluster train, ansible-playbook's start, the inventory", plays[0][1])]
    rows += [(name, seconds) for name, _, seconds in plays]
    end = plays[-1][1] + plays[-1][2]
    rows.append((f"start play end -> chief's first step (its unit started at {step.unit_s:.1f} s: TensorFlow's "
                 "import, strategy, model, first step)", step.at_s - end))
    if step.at_s < step.seconds:
        rows.append(("(not counted) the bench seeing the step in status.json: status interval, one SSH read",
                     step.seconds - step.at_s))
    return rows


def startup_text(startup: Mapping[str, Any]) -> str:
    keys = ("tensorflow", "strategy", "model", "data", "fit_start", "first_step")
    return ", ".join(f"{k} {startup[k]:.1f}" for k in keys if isinstance(startup.get(k), int | float))


def dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
