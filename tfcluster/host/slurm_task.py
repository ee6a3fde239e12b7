"""One task of a ``CLUSTER=slurm`` job, and what the login node tells the control machine about the job. Standard
library only: shipped in the release on the shared directory, run by every Slurm task and on the login node.

    python3 -m tfcluster.host.slurm_task run SPEC                          inside every srun task of the job's step
    python3 -m tfcluster.host.slurm_task poll SPEC --job-id ID [--lines N]      on the login node: one JSON line
    python3 -m tfcluster.host.slurm_task logs SPEC --job-id ID [--slot SLOT] [--lines N] [--follow]
    python3 -m tfcluster.host.slurm_task manifest MODEL_DIR [--optional NAME ...]       the chief's model dir

``run`` resolves the task's slot and TF_CONFIG from Slurm's variables (tfcluster.core.slurm: Slurm's own order,
never sorted), sets the job's environment under the contract's names (the same as the tf_job role's env file:
TF_CONFIG, TFCLUSTER_JOB, TFCLUSTER_MODEL_DIR, TFCLUSTER_TASK_TYPE, TFCLUSTER_TASK_INDEX, TFCLUSTER_DATASETS,
TFCLUSTER_GPUS, TFCLUSTER_COLLECTIVE) and runs the program as its child (its output to ``logs/<slot>.log``), then
records how it ended and exits with its status, so that ``srun --kill-on-bad-exit=1`` ends every task when one
fails. CUDA_VISIBLE_DEVICES is left as Slurm set it. A SIGTERM (scancel, a requeue, a preemption, the ``--signal``
grace before the time limit) is passed on: the trainer saves a backup and exits 3.

The job's directory on the shared directory (``SPEC`` is its ``spec.json``, written at submission)::

    spec.json  tasks/<slot>/ (each task's model dir: status.json, backup/<task>/, ...)  run/<slot>.json  logs/

``run/<slot>.json`` is the task's record: its node, PROCID, the Slurm job and restart (requeue) count it belongs to,
its pid, and at the end its exit code or signal. ``poll`` reads every record of the *current* run (an older run's
record is ignored after a requeue) with the scheduler's view (squeue, else sacct) and prints each task's status in
the shape of tfcluster.host.jobstatus (``state`` one of contract.JOB_STATES), which tfcluster.run.wait.decide takes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..core import contract
from ..core.files import atomic_write_json
from ..core.slurm import (
    ENV_JOB_ID,
    ENV_PROCID,
    ENV_RESTART_COUNT,
    Resolved,
    SlurmError,
    declared_slots,
    resolve_env,
)
from .jobspec import SMALL_MAX_BYTES, JobError, mtime, read_json_capped, tail
from .jobstatus import model_dir_facts
from .tfthreads import usable_cpus, with_interop_floor

# Scheduler states (squeue/sacct): waiting for resources or a requeue's hold-off; running; settling between the two
# (the step is being torn down: a requeue or the end); ended.
PENDING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "CONFIGURING"})
ACTIVE = frozenset({"RUNNING", "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT"})
SETTLING = frozenset({"COMPLETING"})
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                   "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"})
PHASES = ("pending", "running", "settling", "ended", "unknown")
# A task whose record says it runs, in a job that ended: how it ended, by the job's end.
KILLED_BY = {"TIMEOUT": contract.TIMEOUT, "DEADLINE": contract.TIMEOUT, "PREEMPTED": contract.PREEMPTED,
             "CANCELLED": contract.STOPPED, "FAILED": contract.STOPPED, "OUT_OF_MEMORY": contract.FAILED}
SQUEUE_FIELDS = ("JobID", "State", "Reason", "RestartCnt", "NodeList", "TimeUsed", "TimeLimit", "Name")
SACCT_FIELDS = ("JobID", "State", "NodeList", "Elapsed", "Timelimit", "ExitCode", "JobName")
COMMAND_TIMEOUT = 20.0
TEXT_LIMIT = 300  # characters of one scheduler field kept
DEADLINE_MARGIN = 90  # seconds: Slurm may send the --signal up to 60 s early
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT)
SPEC_KEYS = ("job", "job_dir", "release", "tasks", "base_port", "strategy", "program")


# --- the job spec and its paths -------------------------------------------------------------------------------------
def load_spec(path: str) -> dict[str, Any]:
    spec = read_json_capped(path, 1 << 20)
    if not isinstance(spec, dict) or any(key not in spec for key in SPEC_KEYS):
        raise JobError(f"job spec {path} is missing, unreadable or incomplete (needs {', '.join(SPEC_KEYS)}). Fix: "
                       "submit the job again (make train CLUSTER=slurm)")
    return spec


def model_dir(spec: Mapping[str, Any], slot: str) -> str:
    return os.path.join(str(spec["job_dir"]), "tasks", slot)


def record_path(spec: Mapping[str, Any], slot: str) -> str:
    return os.path.join(str(spec["job_dir"]), "run", f"{slot}.json")


def log_path(spec: Mapping[str, Any], slot: str) -> str:
    return os.path.join(str(spec["job_dir"]), "logs", f"{slot}.log")


# --- run: one task --------------------------------------------------------------------------------------------------
def task_env(spec: Mapping[str, Any], task: Resolved, base: Mapping[str, str]) -> dict[str, str]:
    """The program's environment: the task's own (Slurm's variables, CUDA_VISIBLE_DEVICES as Slurm set it) plus the
    contract's job variables (empty ones left out), PYTHONPATH (the release, then a script's dir) and the rest."""
    program = spec["program"]
    release = str(spec["release"])
    values = {contract.ENV_TF_CONFIG: task.tf_config, contract.ENV_JOB: spec["job"],
              contract.ENV_MODEL_DIR: model_dir(spec, task.slot), contract.ENV_TASK_TYPE: task.task_type,
              contract.ENV_TASK_INDEX: task.task_index, contract.ENV_DATASETS: spec.get("datasets") or "",
              contract.ENV_GPUS: spec.get("gpus_per_task", 0), contract.ENV_COLLECTIVE: spec.get("collective") or "",
              contract.ENV_CHECKPOINT_S3: spec.get("checkpoint_s3") or ""}
    env = {key: value for key, value in base.items() if key != contract.ENV_TF_CONFIG}
    env.update({key: str(value) for key, value in values.items() if value not in (None, "")})
    path = [release] + ([os.path.join(release, "user")] if program.get("script") or program.get("package") else [])
    path += [str(p) for p in spec.get("pythonpath") or ()]
    env["PYTHONPATH"] = ":".join(path)
    env["PYTHONUNBUFFERED"] = "1"
    if spec.get("legacy_keras"):
        env["TF_USE_LEGACY_KERAS"] = "1"
    env.update({str(key): str(value) for key, value in (spec.get("extra_env") or {}).items()})
    return with_interop_floor(env, usable_cpus())  # the step's cpuset: one CPU deadlocks ParameterServer


def program_argv(spec: Mapping[str, Any], slot: str, python: str) -> tuple[list[str], str]:
    """(argv, working directory): the built-in trainer with the task's own model dir, or the user's script."""
    program, release = spec["program"], str(spec["release"])
    args = [str(arg) for arg in program.get("args") or ()]
    if program.get("script"):
        return [python, os.path.join(release, "user", str(program["script"])), *args], os.path.join(release, "user")
    if program.get("package"):
        return [python, "-m", str(program["package"]), *args], os.path.join(release, "user")
    return [python, "-m", "trainer", "--model-dir", model_dir(spec, slot), *args], release


def write_record(spec: Mapping[str, Any], slot: str, record: Mapping[str, Any]) -> None:
    path = record_path(spec, slot)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write_json(path, dict(record))


def is_deadline(started: float, now: float, spec: Mapping[str, Any]) -> bool:
    """A SIGTERM this close to the job's time limit (MAX_DURATION) is the ``--signal`` grace: the deadline."""
    limit, grace = float(spec.get("max_duration") or 0), float(spec.get("grace") or 0)
    return limit > 0 and now - started >= limit - grace - DEADLINE_MARGIN


def run(spec_path: str, env: Mapping[str, str] | None = None) -> int:
    """Run this Slurm task (see the module docstring); its exit status."""
    env = dict(os.environ if env is None else env)
    try:
        spec = load_spec(spec_path)
    except JobError as error:
        sys.stderr.write(f"tfcluster slurm task {env.get(ENV_PROCID, '?')}: {error}\n")
        return contract.EXIT_BAD_INPUT
    try:
        task = resolve_env(env, spec["tasks"], int(spec["base_port"]), str(spec["strategy"]))
    except SlurmError as error:
        return _refused(spec, env, error)
    argv, cwd = program_argv(spec, task.slot, sys.executable)
    record: dict[str, Any] = {
        "slot": task.slot, "task_type": task.task_type, "task_index": task.task_index, "node": task.node,
        "local_id": task.local_id, "address": task.address, "procid": int(env[ENV_PROCID]),
        "slurm_job": env.get(ENV_JOB_ID, ""), "restart": int(env.get(ENV_RESTART_COUNT) or 0),
        "state": contract.RUNNING, "started_at": time.time(), "pid": None, "exit_code": None, "signal": None,
        "stop_signal": None, "deadline": False}
    log = log_path(spec, task.slot)
    for directory in (os.path.dirname(log), model_dir(spec, task.slot)):
        os.makedirs(directory, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {task.slot} on {task.node} "
                  f"(Slurm job {record['slurm_job']}, restart {record['restart']}, task {record['procid']})\n".encode())
        out.flush()
        relay = Relay(spec, record)  # from now on: a SIGTERM before the program exists reaches it once it does
        child = subprocess.Popen(argv, cwd=cwd, env=task_env(spec, task, env), stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT)
    record["pid"] = child.pid
    write_record(spec, task.slot, record)
    return relay.supervise(child)


def _refused(spec: Mapping[str, Any], env: Mapping[str, str], error: SlurmError) -> int:
    """The step does not fit the declared layout: say so on stderr (srun's output) and, when the PROCID names a
    slot, in that slot's log and record, so the wait names the task; exit 2 (bad input)."""
    node = env.get("SLURMD_NODENAME", "?")
    text = f"tfcluster slurm task {env.get(ENV_PROCID, '?')} on {node}: {error}"
    sys.stderr.write(text + "\n")
    slots = declared_slots(spec["tasks"]) if isinstance(spec["tasks"], Mapping) else ()
    procid = env.get(ENV_PROCID, "")
    if contract.is_digits(procid) and int(procid) < len(slots):
        slot = "{}-{}".format(*slots[int(procid)])
        os.makedirs(os.path.dirname(log_path(spec, slot)), exist_ok=True)
        with open(log_path(spec, slot), "ab") as out:
            out.write((text + "\n").encode())
        write_record(spec, slot, {"slot": slot, "node": node, "procid": int(procid),
                                  "slurm_job": env.get(ENV_JOB_ID, ""), "restart": int(env.get(ENV_RESTART_COUNT) or 0),
                                  "state": "ended", "exit_code": contract.EXIT_BAD_INPUT, "signal": None,
                                  "stop_signal": None, "started_at": time.time(), "ended_at": time.time(),
                                  "error": str(error)[:2000]})
    return contract.EXIT_BAD_INPUT


class Relay:
    """Passes the scheduler's signals on to the program (held until it is started), waits for it, records how it
    ended. A SIGTERM is recorded first (stop_signal; a deadline when it comes within the grace of the time limit)."""

    def __init__(self, spec: Mapping[str, Any], record: dict[str, Any]) -> None:
        self.spec, self.record = spec, record
        self.child: subprocess.Popen[bytes] | None = None
        self.pending: list[int] = []
        for signum in FORWARDED:
            signal.signal(signum, self.forward)

    def forward(self, signum: int, _frame: Any = None) -> None:
        if signum == signal.SIGTERM and self.record["stop_signal"] is None:
            self.record.update(stop_signal=signum, stop_at=time.time(),
                               deadline=is_deadline(self.record["started_at"], time.time(), self.spec))
            write_record(self.spec, self.record["slot"], self.record)
        if self.child is None:
            self.pending.append(signum)
        elif self.child.poll() is None:
            self.child.send_signal(signum)

    def supervise(self, child: subprocess.Popen[bytes]) -> int:
        """Wait for the program; its exit status (a death by signal as a shell reports it: SIGKILL 137)."""
        self.child = child
        for signum in self.pending:
            self.forward(signum)
        self.pending.clear()
        code = child.wait()
        status = code if code >= 0 else 128 - code
        record, spec = self.record, self.spec
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        with open(log_path(spec, record["slot"]), "ab") as out:  # the log first: a poll that reads the record's end
            out.write(f"=== {record['slot']} on {record['node']} ended: {how}\n".encode())  # finds it there
        record.update(ended_at=time.time(), state="ended", exit_code=status, signal=-code if code < 0 else None)
        write_record(spec, record["slot"], record)
        return status


# --- poll: the job as the login node sees it ------------------------------------------------------------------------
def _run_text(argv: Sequence[str]) -> tuple[int, str]:
    try:
        proc = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", check=False, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as error:
        return 127, str(error)
    return proc.returncode, proc.stdout[-64 * 1024:]


def squeue_argv(job_id: str) -> list[str]:
    return ["squeue", "-h", "-t", "all", "-j", job_id, "-O", ",".join(f"{name}:|" for name in SQUEUE_FIELDS)]


def sacct_argv(job_id: str) -> list[str]:
    return ["sacct", "-n", "-P", "-X", "-j", job_id, "-o", ",".join(SACCT_FIELDS)]


def _cut(text: str) -> str:
    return text.strip()[:TEXT_LIMIT]


def first_word(text: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED`` (sacct adds who cancelled; a ``+`` marks a state with more flags)."""
    words = text.split(maxsplit=1)
    return words[0].rstrip("+") if words else ""


def phase_of(state: str) -> str:
    """pending, running, settling, ended or unknown, from a scheduler state (``CANCELLED by 0``: its first word)."""
    word = first_word(state)
    for phase, states in (("pending", PENDING), ("running", ACTIVE), ("settling", SETTLING), ("ended", ENDED)):
        if word in states:
            return phase
    return "unknown"


def parse_squeue(text: str, job_id: str) -> dict[str, Any] | None:
    """The job's line of ``squeue -O JobID:|,State:|,...`` (None: squeue does not know it)."""
    for line in text.splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) < len(SQUEUE_FIELDS) or parts[0] != job_id:
            continue
        row = dict(zip(SQUEUE_FIELDS, parts, strict=False))
        restarts = row["RestartCnt"]
        return {"job_id": job_id, "state": _cut(row["State"]), "reason": _cut(row["Reason"]),
                "restarts": int(restarts) if contract.is_digits(restarts) else 0, "nodes": _cut(row["NodeList"]),
                "elapsed": _cut(row["TimeUsed"]), "time_limit": _cut(row["TimeLimit"]), "name": _cut(row["Name"]),
                "phase": phase_of(row["State"]), "source": "squeue"}
    return None


def parse_sacct(text: str, job_id: str) -> dict[str, Any] | None:
    """The job's line of ``sacct -n -P -X -o JobID,State,...`` (None: accounting does not know it, or is off)."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != len(SACCT_FIELDS) or parts[0].strip() != job_id:
            continue
        row = dict(zip(SACCT_FIELDS, parts, strict=True))
        return {"job_id": job_id, "state": _cut(row["State"]), "reason": "", "restarts": None,
                "nodes": _cut(row["NodeList"]), "elapsed": _cut(row["Elapsed"]), "time_limit": _cut(row["Timelimit"]),
                "exit_code": _cut(row["ExitCode"]), "name": _cut(row["JobName"]), "phase": phase_of(row["State"]),
                "source": "sacct"}
    return None


def scheduler_view(job_id: str) -> dict[str, Any]:
    """What Slurm says of the job: squeue (it knows queued, running and recently ended jobs), else sacct."""
    if not contract.is_digits(job_id):
        return {"job_id": job_id, "state": "", "phase": "unknown", "reason": "no Slurm job id", "source": ""}
    code, text = _run_text(squeue_argv(job_id))
    found = parse_squeue(text, job_id) if code == 0 else None
    if found is None:
        code_acct, text_acct = _run_text(sacct_argv(job_id))
        found = parse_sacct(text_acct, job_id) if code_acct == 0 else None
    if found is None:
        why = _cut(text.splitlines()[-1] if text.strip() else f"squeue exited {code}")
        return {"job_id": job_id, "state": "", "phase": "unknown", "restarts": None, "source": "",
                "reason": f"neither squeue nor sacct knows job {job_id} ({why})"}
    return found


def _ended_state(record: Mapping[str, Any], scheduler_state: str) -> str:
    """A task that recorded its end: how, by its exit and the job's end."""
    code, stopped = record.get("exit_code"), record.get("stop_signal") is not None
    word = first_word(scheduler_state)
    if code == contract.EXIT_OK:
        return contract.SUCCEEDED
    if code == contract.EXIT_PREEMPTED:
        if record.get("deadline") or word in ("TIMEOUT", "DEADLINE"):
            return contract.TIMEOUT
        return contract.PREEMPTED if word == "PREEMPTED" else contract.STOPPED
    return contract.STOPPED if stopped else contract.FAILED


def task_state(record: Mapping[str, Any] | None, scheduler: Mapping[str, Any]) -> str:
    """One task's state (contract.JOB_STATES) from its record of the current run (None: none yet) and the job's
    scheduler view (see the module docstring)."""
    phase, state = scheduler.get("phase"), str(scheduler.get("state") or "")
    if record is None:
        return contract.RUNNING if phase == "running" else contract.INACTIVE  # running: the step is starting it
    if record.get("state") == "ended":
        return _ended_state(record, state)
    if phase in ("running", "settling"):
        return contract.RUNNING
    if phase == "ended":
        return KILLED_BY.get(first_word(state), contract.LOST)
    return contract.STOPPED if phase == "pending" else contract.LOST


def current_record(spec: Mapping[str, Any], slot: str, job_id: str, restarts: int | None) -> dict[str, Any] | None:
    """The task's record when it belongs to this Slurm job and, when known, its current restart."""
    record = read_json_capped(record_path(spec, slot), SMALL_MAX_BYTES)
    if not isinstance(record, dict) or str(record.get("slurm_job")) != job_id:
        return None
    if restarts is not None and record.get("restart") != restarts:
        return None
    return record


def task_status(spec: Mapping[str, Any], slot: str, record: Mapping[str, Any] | None,
                scheduler: Mapping[str, Any], lines: int) -> dict[str, Any]:
    """One task in the shape of tfcluster.host.jobstatus.status (what the wait decision reads)."""
    record = record or {}
    log = log_path(spec, slot)
    status: dict[str, Any] = {
        "state": task_state(record or None, scheduler), "exit_code": record.get("exit_code"),
        "signal": record.get("signal"), "restarts": scheduler.get("restarts") or 0, "pid": record.get("pid"),
        "started_at": record.get("started_at"), "log_mtime": mtime(log), "log_tail": tail(log, lines),
        "node": record.get("node"), "local_id": record.get("local_id"), "slot": slot,
        "ended_at": record.get("ended_at")}
    status.update(model_dir_facts(model_dir(spec, slot)))
    status.update(name=str(spec["job"]), model_dir=model_dir(spec, slot), max_duration=spec.get("max_duration") or 0,
                  now=time.time())
    return status


def poll(spec_path: str, job_id: str, lines: int = 20) -> dict[str, Any]:
    """{"scheduler": {...}, "tasks": {slot: status}} of the whole job, in slot order."""
    spec = load_spec(spec_path)
    scheduler = scheduler_view(job_id)
    restarts = scheduler.get("restarts") if isinstance(scheduler.get("restarts"), int) else None
    tasks = {}
    for task_type, index in declared_slots(spec["tasks"]):
        slot = f"{task_type}-{index}"
        tasks[slot] = task_status(spec, slot, current_record(spec, slot, job_id, restarts), scheduler, lines)
    return {"scheduler": scheduler, "tasks": tasks, "now": time.time()}


# --- logs -----------------------------------------------------------------------------------------------------------
def chief_slot(spec: Mapping[str, Any]) -> str:
    slots = declared_slots(spec["tasks"])
    task_type, index = contract.chief_of({t: [i] for t, i in slots})
    return f"{task_type}-{index}"


def logs(spec_path: str, job_id: str, slot: str | None, lines: int, *, follow: bool, out: Any = None,
         poll_every: float = 1.0) -> int:
    """Print the task's last ``lines`` log lines; with ``follow``, go on until the job is no longer queued or
    running (a requeued job is followed through its next run: the log is appended)."""
    out = out or sys.stdout
    spec = load_spec(spec_path)
    slot = slot or chief_slot(spec)
    if slot not in {f"{t}-{i}" for t, i in declared_slots(spec["tasks"])}:
        raise JobError(f"{slot} is not a task of job {spec['job']}. Fix: name one of its slots, e.g. "
                       f"{chief_slot(spec)}")
    path = log_path(spec, slot)
    out.write("".join(line + "\n" for line in tail(path, lines)))
    out.flush()
    if not follow:
        return 0
    offset = os.path.getsize(path) if os.path.isfile(path) else 0
    checked = 0.0
    while True:
        offset = _copy_from(path, offset, out)
        if time.monotonic() - checked >= 5 * poll_every:
            checked = time.monotonic()
            if scheduler_view(job_id)["phase"] in ("ended", "unknown"):
                _copy_from(path, offset, out)
                return 0
        time.sleep(poll_every)


def _copy_from(path: str, offset: int, out: Any) -> int:
    """What was appended to the log since ``offset`` (a regular file, not through a symlink); the new offset."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return offset
    try:
        if os.fstat(fd).st_size < offset:
            offset = 0  # replaced: start over
        while chunk := os.pread(fd, 64 * 1024, offset):
            out.write(chunk.decode("utf-8", "replace"))
            offset += len(chunk)
        out.flush()
    finally:
        os.close(fd)
    return offset


# --- main -----------------------------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python3 -m tfcluster.host.slurm_task", description=__doc__.split("\n")[0])
    sub = top.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run this Slurm task").add_argument("spec")
    for name in ("poll", "logs"):
        command = sub.add_parser(name)
        command.add_argument("spec")
        command.add_argument("--job-id", required=True)
        command.add_argument("--lines", type=int, default=20 if name == "poll" else 100)
    sub.choices["logs"].add_argument("--slot", default=None)
    sub.choices["logs"].add_argument("--follow", action="store_true")
    manifest = sub.add_parser("manifest", help="the chief's model dir: DONE, the manifest, every listed file's size")
    manifest.add_argument("model_dir")
    manifest.add_argument("--optional", nargs="*", default=[])
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "run":
            return run(args.spec)
        if args.command == "poll":
            sys.stdout.write(json.dumps(poll(args.spec, args.job_id, args.lines), sort_keys=True) + "\n")
            return 0
        if args.command == "logs":
            return logs(args.spec, args.job_id, args.slot, args.lines, follow=args.follow)
        from .modeldir import ModelDirError, describe

        try:
            sys.stdout.write(json.dumps(describe(args.model_dir, args.optional), sort_keys=True) + "\n")
        except ModelDirError as error:
            sys.stdout.write(json.dumps({"error": str(error)}) + "\n")
            return 1
        return 0
    except JobError as error:
        sys.stdout.write(json.dumps({"error": str(error)}) + "\n")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

