"""Helpers for the end-to-end flows on the lab: host files for sub-clusters, playbook runs, host state probes.

One lab of 4 hosts (``FLOW_NAMES``) is prepared once per session (``flow_lab`` in conftest.py): the runtime is
installed from the wheelhouse by site.yml. Each flow writes its own host file that gives the same hosts the slots it
needs (MultiWorkerMirrored: chief + 2 workers; ParameterServer: chief + ps + 2 workers), and uses its own job id, so
flows never see each other's model dirs or units.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lab import Lab
from tfcluster.core.contract import CHIEF, PS, WORKER

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.prefix) / "bin"
ANSIBLE_PLAYBOOK = VENV_BIN / "ansible-playbook"
INVENTORY = REPO / "inventory" / "slots.py"
# Development only: run the flows against a patched copy of playbooks/ (tfcluster_root still points here).
PLAYBOOKS = Path(os.environ.get("TFCLUSTER_FLOW_PLAYBOOKS", REPO / "playbooks"))

FLOW_LAB = "flow"
# Host names of the shared flow lab; slots come from each flow's own host file.
FLOW_NAMES = ("f-chief", "f-w0", "f-w1", "f-ps")
MWMS_SLOTS = (("f-chief", CHIEF, 0), ("f-w0", WORKER, 0), ("f-w1", WORKER, 1))
PS_SLOTS = (("f-chief", CHIEF, 0), ("f-ps", PS, 0), ("f-w0", WORKER, 0), ("f-w1", WORKER, 1))
TRAIN_PORT = 12345

# Tiny training: synthetic data, 3 epochs of a few steps (the CI budget); a status line every second. The
# trainer's own --steps-per-execution (50: an epoch this short is one call): one step per call cost a 3-task job
# a fifth more CPU (46 CPU-s against 36 for 600 steps on loopback), and no user runs it.
TINY_TRAINER_ARGS = ("--dataset synthetic --synthetic-examples 2048 --batch-size-per-replica 16 "
                     "--no-evaluate --no-tensorboard --status-interval 1 --log-level INFO")
EPOCHS = 3
# Jobs that must still be training when a fault or a timer lands: short epochs, and the cluster slowed to SLOW_CPUS
# in all (Lab.limit_cpu) from the moment the first epoch's backup exists until the fault has landed. A 3-task job
# then trains ~8 steps a second (~12 ms of CPU per step and task, RING on loopback), so the steps left are seconds to
# minutes of training whatever the machine's speed; sized for a fast machine instead (300-step epochs), the same
# tests trained 3-4x the steps at full speed (a 300-step epoch costs the 3 hosts ~11 CPU-s).
FAULT_STEPS = 100
SLOW_CPUS = 0.3

# Settings every flow's playbook run gets (-e): tiny training, quick polling and restarts.
FLOW_VARS: dict[str, object] = {
    "tfcluster_trainer_args": TINY_TRAINER_ARGS,
    "tfcluster_epochs": EPOCHS,
    "tf_job_poll_interval": 2,
    "tf_job_restart_sec": 2,
    "tf_job_stall_timeout": 180,
    "tf_job_wait_timeout": 900,
    # the network check before each gang start: half a second a link measures a veth as well as 2 s (both cores
    # send at full rate while it runs); test_flow_health's throttled link keeps its own 1 s
    "tf_job_netcheck_seconds": 0.5,
}

# A job's status.json as JSON lines, twice a second ({} while there is none), for as long as the SSH connection lasts.
STATUS_LOOP = """
import json, sys, time
while True:
    try:
        with open(sys.argv[1]) as handle:
            status = json.load(handle)
    except (OSError, ValueError):
        status = {}
    print(json.dumps(status), flush=True)
    time.sleep(0.5)
"""

RECAP_RE = re.compile(r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
                      r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)", re.MULTILINE)


# A playbook run in the background: (process, its log file, argv, monotonic start).
Started = tuple[subprocess.Popen[str], Path, list[str], float]


def render_hosts_file(lab: Lab, slots: Sequence[tuple[str, str, int]], cluster_name: str,
                      extra: Sequence[Mapping[str, object]] = (), port: int = TRAIN_PORT) -> str:
    """An on-prem host file (inventory static source) that gives lab hosts the slots a flow needs, with each host's
    SSH host key (`host_keys`, as a user copies it from the host)."""
    lines = [f"# Flow host file for lab {lab.paths.lab!r} (lab/flows.py)", f"cluster_name: {cluster_name}",
             "hosts:"]
    keys = lab.host_keys()
    entries: list[Mapping[str, object]] = [
        {"name": name, "address": lab.host(name).address, "task_type": task_type, "task_index": index,
         "host_keys": [" ".join(keys[name].split()[:2])]}
        for name, task_type, index in slots]
    for entry in [*entries, *extra]:
        full = {"ssh_user": "root", "ssh_port": 22, "port": port, "gpus": 0, **entry}
        lines.append(f"  - name: {full.pop('name')}")
        lines += [f"    {key}: {value}" for key, value in full.items()]
    return "\n".join(lines) + "\n"


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP counters per host (the last recap wins for a host)."""
    return {m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
            for m in RECAP_RE.finditer(output)}


@dataclass
class PlaybookRun:
    argv: list[str]
    returncode: int
    output: str
    seconds: float

    @property
    def recap(self) -> dict[str, dict[str, int]]:
        return recap(self.output)

    def describe(self, tail: int = 60) -> str:
        lines = self.output.splitlines()
        return (f"`{shlex.join(self.argv)}` exited {self.returncode} after {self.seconds:.1f} s; last lines:\n"
                + "\n".join(lines[-tail:]))


@dataclass
class Flows:
    """The prepared flow lab: run playbooks against host files of its hosts, look at units and model dirs."""

    lab: Lab
    workdir: Path
    wheelhouse: Path
    prepare_run: PlaybookRun | None = None
    common_vars: dict[str, object] = field(default_factory=dict)
    # Job ids get this suffix: a reused lab (TFCLUSTER_FLOW_REUSE) still holds earlier sessions' finished jobs.
    session: str = field(default_factory=lambda: f"{int(time.time()) % 100000:05d}")

    def job(self, name: str) -> str:
        return f"{name}-{self.session}"

    def hosts_file(self, name: str, slots: Sequence[tuple[str, str, int]] = MWMS_SLOTS,
                   extra: Sequence[Mapping[str, object]] = (), cluster_name: str = "lab-flow") -> Path:
        path = self.workdir / f"{name}.yml"
        path.write_text(render_hosts_file(self.lab, slots, cluster_name, extra))
        return path

    def env(self, hosts_file: Path) -> dict[str, str]:
        env = {**os.environ, **self.lab.inventory_env(), "TFCLUSTER_HOSTS_FILE": str(hosts_file),
               "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
               "TFCLUSTER_CLUSTER": "tfcluster-onprem",
               "ANSIBLE_CALLBACK_PLUGINS": str(Path(__file__).parent / "callback_plugins"),
               "ANSIBLE_CALLBACKS_ENABLED": "flow_timing",
               "ANSIBLE_FORCE_COLOR": "false", "ANSIBLE_NOCOLOR": "true", "PYTHONUNBUFFERED": "1"}
        return env

    def argv(self, playbook: str, job: str, extra_vars: Mapping[str, object] | None = None,
             args: Sequence[str] = ()) -> list[str]:
        evars = {"tfcluster_cluster": "onprem", "tfcluster_job": job, "python_runtime_wheelhouse": str(self.wheelhouse),
                 "tfcluster_artifacts": str(self.artifacts(job)), **self.common_vars, **(extra_vars or {})}
        if PLAYBOOKS != REPO / "playbooks":
            evars["tfcluster_root"] = str(REPO)
        return [str(ANSIBLE_PLAYBOOK), "-i", str(INVENTORY), str(PLAYBOOKS / playbook), "-e", json.dumps(evars),
                *args]

    def command(self, command: str, hosts_file: Path, job: str, extra_vars: Mapping[str, object] | None = None,
                make_vars: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
        """The `tfcluster COMMAND` a user's `make COMMAND CLUSTER=onprem HOSTS=...` runs on these hosts (argv, env):
        the flow's settings as trusted extra vars (ANSIBLE_ARGS), the lab's access from its environment."""
        evars = {"python_runtime_wheelhouse": str(self.wheelhouse), **self.common_vars, **(extra_vars or {})}
        if PLAYBOOKS != REPO / "playbooks":
            evars["tfcluster_root"] = str(REPO)
        env = {**self.env(hosts_file), "CLUSTER": "onprem", "HOSTS": str(hosts_file), "JOB": job,
               "TFCLUSTER_CLUSTER": f"lab-{self.lab.paths.lab}", "ANSIBLE_ARGS": f"-e {shlex.quote(json.dumps(evars))}",
               **(make_vars or {})}
        env.pop("ANSIBLE_CALLBACKS_ENABLED", None)  # the command's own events callback
        return [str(VENV_BIN / "tfcluster"), command], env

    def artifacts(self, job: str) -> Path:
        return self.workdir / "artifacts" / job

    def start(self, playbook: str, hosts_file: Path, job: str, extra_vars: Mapping[str, object] | None = None, *,
              args: Sequence[str] = (), events: Path | None = None) -> Started:
        """The playbook in the background; with ``events``, the tfcluster events callback writes that file (the
        stages and the wait's polls, tfcluster/run/events.py), as under the `tfcluster` command."""
        argv = self.argv(playbook, job, extra_vars, args)
        log = self.workdir / f"{job}-{Path(playbook).stem}-{int(time.time() * 1000)}.log"
        env = self.env(hosts_file)
        if events is not None:
            env.update(TFCLUSTER_EVENTS=str(events), ANSIBLE_CALLBACKS_ENABLED="flow_timing,tfcluster.cluster.events")
        handle = open(log, "w")  # noqa: SIM115 - closed by wait()
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                                env=env, start_new_session=True)
        handle.close()
        return proc, log, argv, time.monotonic()

    def wait(self, started: Started, timeout: float) -> PlaybookRun:
        proc, log, argv, t0 = started
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
            raise AssertionError(f"`{shlex.join(argv)}` did not finish within {timeout:.0f} s; log: {log}\n"
                                 + "\n".join(log.read_text(errors="replace").splitlines()[-60:])) from None
        run = PlaybookRun(argv, proc.returncode, log.read_text(errors="replace"), time.monotonic() - t0)
        print(f"[flows] {log.name}: exit {run.returncode} in {run.seconds:.1f} s")  # shown with pytest -s / -rA
        return run

    def run(self, playbook: str, hosts_file: Path, job: str, extra_vars: Mapping[str, object] | None = None, *,
            timeout: float = 600, args: Sequence[str] = (), events: Path | None = None) -> PlaybookRun:
        return self.wait(self.start(playbook, hosts_file, job, extra_vars, args=args, events=events), timeout)

    # ---- state on the hosts ------------------------------------------------------------------------------------

    @staticmethod
    def unit(job: str) -> str:
        return f"tfcluster-{job}.service"

    def unit_props(self, host: str, job: str) -> dict[str, str]:
        keys = "LoadState,ActiveState,SubState,Result,ExecMainStatus,NRestarts,ExecMainStartTimestampMonotonic"
        out = self.lab.ssh(host, f"systemctl show {self.unit(job)} -p {keys}", timeout=30).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def ever_started(self, host: str, job: str) -> bool:
        props = self.unit_props(host, job)
        return props.get("ExecMainStartTimestampMonotonic", "0") not in ("", "0")

    def start_lines(self, host: str, job: str) -> list[str]:
        """The journal's lines about the job's unit being started (systemd unloads an inactive unit, so its
        properties cannot tell "never started" from "ran and finished"; the journal can)."""
        out = self.lab.ssh(host, f"journalctl -u {self.unit(job)} --no-pager -q -o cat", check=False,
                           timeout=30).stdout
        return [line for line in out.splitlines() if line.startswith(("Started ", "Starting "))]

    def never_started_anywhere(self, job: str, hosts: Sequence[str] = FLOW_NAMES) -> dict[str, list[str]]:
        """{host: start lines} for every host where the job's unit was started (empty dict: none)."""
        started = {h: self.start_lines(h, job) for h in hosts}
        return {h: lines for h, lines in started.items() if lines}

    def journal(self, host: str, job: str) -> list[str]:
        """systemd's own lines about the job's unit (start, exit, restart, stop), oldest first."""
        out = self.lab.ssh(host, f"journalctl -u {self.unit(job)} --no-pager -q -o cat SYSLOG_IDENTIFIER=systemd",
                           check=False, timeout=30).stdout
        return out.splitlines()

    def active(self, host: str, job: str) -> bool:
        return self.unit_props(host, job).get("ActiveState") in ("active", "activating", "deactivating", "reloading")

    def trainer_pids(self, host: str, job: str) -> list[int]:
        out = self.lab.ssh(host, f"systemctl show {self.unit(job)} -p MainPID --value", timeout=30).stdout.strip()
        return [int(out)] if out and out != "0" else []

    def model_dir(self, job: str) -> str:
        return f"/var/lib/tfcluster/{job}"

    def read_json(self, host: str, path: str) -> dict[str, object] | None:
        proc = self.lab.ssh(host, f"cat {shlex.quote(path)}", check=False, timeout=30)
        if proc.returncode != 0:
            return None
        try:
            data = json.loads(proc.stdout)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def status(self, host: str, job: str) -> dict[str, object] | None:
        return self.read_json(host, f"{self.model_dir(job)}/status.json")

    def wait_for_training(self, host: str, job: str, started: Started, *, epochs: int = 1,
                          timeout: float = 600) -> float:
        """Until ``host`` has finished ``epochs`` epochs of ``job`` (a backup exists) and trains the next one; the
        seconds it took. Raises when the playbook run ``started`` ended first, or at ``timeout``. The host's
        status.json is read twice a second by one loop over one SSH connection: a connection each poll (the
        handshake ~0.15 CPU-s here and on the host) was most of what such a wait cost."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        command = f"python3 -c {shlex.quote(STATUS_LOOP)} {shlex.quote(self.model_dir(job) + '/status.json')}"
        while time.monotonic() < deadline:
            watcher = subprocess.Popen(self.lab.ssh_argv(host, command), stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            try:
                for status in _json_lines(watcher, deadline, started):
                    if epoch_of(status) >= epochs and status.get("state") == "training":
                        return time.monotonic() - t0
            finally:
                watcher.kill()
                watcher.wait()
            time.sleep(1.0)  # the connection ended (the host was busy or away): another one
        raise AssertionError(f"{host} did not finish {epochs} epoch(s) of {job} (waited {timeout:.0f} s)")

    def stop_everywhere(self, job: str, hosts: Sequence[str] = FLOW_NAMES) -> None:
        """Test cleanup: stop the job's unit on every reachable host (never fails)."""
        for host in hosts:
            if self.lab.is_cut(host):
                continue
            self.lab.ssh(host, f"systemctl stop {self.unit(job)}; systemctl reset-failed {self.unit(job)}",
                         check=False, timeout=60)


def _json_lines(watcher: subprocess.Popen[bytes], deadline: float, started: Started) -> Iterator[dict[str, object]]:
    """The JSON objects ``watcher`` prints, one a line, until its output ends or ``deadline``; raises when the playbook
    run ``started`` has ended."""
    assert watcher.stdout is not None
    buffered = b""
    with selectors.DefaultSelector() as selector:
        selector.register(watcher.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if started[0].poll() is not None:
                raise AssertionError("the playbook run ended first:\n" + started[1].read_text(errors="replace")[-4000:])
            if not selector.select(timeout=1.0):
                continue
            chunk = os.read(watcher.stdout.fileno(), 65536)
            if not chunk:
                return
            *lines, buffered = (buffered + chunk).split(b"\n")
            for line in lines:
                try:
                    status = json.loads(line)
                except ValueError:
                    continue
                if isinstance(status, dict):
                    yield status


def wait_until(predicate: Callable[[], bool], timeout: float, message: str, interval: float = 0.5) -> float:
    """Poll until ``predicate()``; returns the seconds it took, raises AssertionError with ``message``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return time.monotonic() - t0
        time.sleep(interval)
    raise AssertionError(f"{message} (waited {timeout:.0f} s)")


def _status_int(status: Mapping[str, object] | None, key: str) -> int:
    value = (status or {}).get(key)
    return value if isinstance(value, int) else 0


def epoch_of(status: Mapping[str, object] | None) -> int:
    """Completed epochs according to the trainer's status.json (0 when unknown)."""
    return _status_int(status, "epochs_done")


def step_of(status: Mapping[str, object] | None) -> int:
    """Step within the current epoch according to the trainer's status.json (0 when unknown)."""
    return _status_int(status, "step")
