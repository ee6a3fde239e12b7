"""The commands of a scheduler kind (CLUSTER=slurm): what `make train`, `status`, `logs`, `stop` and `collect` do
when the kind has a transport (tfcluster.kinds.base.Kind.transport) instead of playbooks.

train: preflight (the login node, the partition, a job already queued under the job's name: re-attached, never
submitted twice), stage (by content digest), submit, watch (tfcluster.run.scheduled: the same decision and view as
a playbook's wait), then on ``done`` collect; on a failure, a stall or a stop the job is cancelled (srun's
--kill-on-bad-exit has ended it already when a task failed). The ledger (tfcluster.collect.ledger) records the
run as for the other kinds. Bad input found on the login node exits 2 with every problem and "Nothing was
submitted."; an interrupt leaves the job queued or running (`make status`, `make stop`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tfcluster.cli.command import EXIT_FAILED, EXIT_OK, EXIT_SETTINGS, Command, CommandError, _rel
from tfcluster.cli.locks import cluster_lock, job_lock
from tfcluster.collect import ledger
from tfcluster.collect.store import CURRENT
from tfcluster.core import paths
from tfcluster.core.files import atomic_write_text
from tfcluster.core.text import printable
from tfcluster.kinds import JobRequest, KindError
from tfcluster.run import follow, scheduled
from tfcluster.run import wait as decision
from tfcluster.run.health import HealthSettings
from tfcluster.run.view import failure_lines

RECORD = "slurm.json"  # artifacts/<cluster>/<job>/: the job the last train submitted (or re-attached to)
POLL_INTERVAL = 2.0


def request_of(cmd: Command) -> JobRequest:
    s = cmd.s
    return JobRequest(job=s.job, strategy=s.strategy, script=s.script, script_args=s.script_args,
                      script_keras=s.script_keras, script_requirements=s.script_requirements,
                      trainer_args=s.trainer_args, epochs=s.epochs, max_duration=s.max_duration,
                      datasets=s.datasets, wheelhouse=s.wheelhouse)


def wait_settings(cmd: Command, chief: str, *, retrying: bool = True) -> decision.Settings:
    """The decision's settings: the same knobs as the playbook's wait (STALL, UNREACHABLE_GRACE, MAX_DURATION)."""
    stall = getattr(cmd.s, "stall", None)
    grace = getattr(cmd.s, "unreachable_grace", None)
    values: dict[str, float] = {}
    if stall is not None:
        values["stall_timeout"] = float(stall)
    if grace is not None:
        values["unreachable_grace"] = float(grace)
    straggler, hang = getattr(cmd.s, "straggler", None) or {}, getattr(cmd.s, "hang", None)
    health = HealthSettings(**{k: float(v) for k, v in straggler.items() if k in ("below", "after")},
                            **({} if hang is None else {"hang_factor": float(hang)}))
    return decision.Settings(chief=chief, require_done=True, max_duration=float(cmd.s.max_duration or 0),
                             retrying=retrying, health=health, **values)


def _record_file(cmd: Command) -> Path:
    return cmd.job_dir / RECORD


def _save(cmd: Command, record: Any) -> None:
    cmd.job_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(_record_file(cmd), record.to_json() + "\n")


def _load(cmd: Command, transport: Any) -> Any:
    """The job's record: the one the shared directory holds (any control machine's), else this machine's."""
    from tfcluster.kinds.slurm_login import Record

    record = transport.submitted()
    if record is None and _record_file(cmd).is_file():
        record = transport.checked(Record.from_json(_record_file(cmd).read_text()), str(_record_file(cmd)))
    if record is None:
        raise CommandError(f"no Slurm job was submitted for JOB={cmd.s.job} on {transport.cluster_name}. Fix: "
                           f"`make train CLUSTER=slurm JOB={cmd.s.job}`")
    return record


def _stage(cmd: Command, name: str, started: float, ok: bool = True) -> None:
    cmd.view.handle({"event": "stage_end", "name": name, "ok": ok, "seconds": time.monotonic() - started})


class Timing:
    """What `make train` measures: seconds to the first training step, and from a requeue to training again."""

    def __init__(self, cmd: Command, start: float) -> None:
        self.cmd, self.start = cmd, start
        self.first_step: float | None = None
        self.requeued_at: float | None = None
        self.restarts = 0
        self.resumed: list[float] = []

    def __call__(self, scheduler: Any, result: Any) -> None:
        now = time.monotonic()
        restarts = scheduler.get("restarts") if isinstance(scheduler.get("restarts"), int) else 0
        if restarts > self.restarts:
            self.restarts, self.requeued_at = restarts, now
            self.cmd.say(f"       note: the job was requeued ({restarts}x): it resumes from its backups")
        stepping = result is not None and any(isinstance(t.get("step"), int) and t["step"] >= 1 and
                                               "train" in str(t.get("state", "")) for t in result["tasks"])
        if stepping and self.first_step is None:
            self.first_step = now - self.start
            self.cmd.say(f"       note: first training step {self.first_step:.1f} s after `make train`")
        if stepping and self.requeued_at is not None:
            self.resumed.append(now - self.requeued_at)
            self.cmd.say(f"       note: training again {self.resumed[-1]:.1f} s after the requeue was seen")
            self.requeued_at = None


def train(cmd: Command, transport: Any) -> int:
    """`make train` through the transport (see the module docstring). 0 done, 1 failed, 2 bad input."""
    from tfcluster.kinds.slurm_login import LoginError

    start = time.monotonic()
    log = paths.log_file(cmd.job_dir, "train")
    cmd.say(f"train job {cmd.s.job} on CLUSTER={cmd.s.cluster} ({transport.cluster_name}, Slurm through "
            f"{printable(transport.name, 80)}); log: {_rel(log)}")
    with cluster_lock(cmd.s, "train"), job_lock(cmd.s):
        run = ledger.start_run(cmd.job_dir, cmd.s.cluster_name)
        try:
            record, began = _launch(cmd, transport)
        except LoginError as exc:
            _write_log(log, transport, [])
            for problem in exc.problems:
                cmd.say(f"tfcluster train: {printable(str(problem), 2000)}")
            cmd.say("Nothing was submitted.")
            ledger.end_run(cmd.job_dir, run, None, None, began=False)
            return EXIT_SETTINGS
        _save(cmd, record)
        result, events = _watch_and_finish(cmd, transport, record, Timing(cmd, start))
        ledger.end_run(cmd.job_dir, run, ledger.last_decision(events),
                       ledger.collected_version(cmd.job_dir, events), began=began)
        _write_log(log, transport, [result])
    if result["decision"] != "done" or not any(e.get("event") == "collected" for e in events):
        for text in failure_lines(cmd.view, _rel(log)):
            cmd.say(text)
        return EXIT_FAILED
    return EXIT_OK


def _launch(cmd: Command, transport: Any) -> tuple[Any, bool]:
    """Preflight, then re-attach to the queued job of this name, or stage and submit. (record, began)."""
    started = time.monotonic()
    attached = transport.preflight()
    _stage(cmd, f"Check the login node and partition {transport.cf.partition}", started)
    if attached is not None:
        cmd.say(f"       Slurm job {attached.job_id} of JOB={cmd.s.job} is queued or running: re-attached (nothing "
                "submitted)")
        return attached, True
    started = time.monotonic()
    staged = transport.stage(request_of(cmd))
    what = ", ".join(staged.copied) if staged.copied else "nothing to copy: every digest was there"
    _stage(cmd, "Stage the release and datasets on the shared directory", started)
    cmd.say(f"       {printable(what, 300)}")
    started = time.monotonic()
    record, submitted = transport.submit(staged)
    _stage(cmd, "Submit the batch job (sbatch)", started)
    verb = "submitted" if submitted else "queued meanwhile: re-attached to"
    cmd.say(f"       {verb} Slurm job {record.job_id} ({staged.submission.layout.job_dir})")
    return record, True


def _watch_and_finish(cmd: Command, transport: Any, record: Any, timing: Timing) -> tuple[dict[str, Any],
                                                                                     list[dict[str, Any]]]:
    chief = record.chief_slot or "chief-0"
    started = time.monotonic()
    result = scheduled.watch(lambda: transport.poll(record), cmd.view, wait_settings(cmd, chief), chief_slot=chief,
                             interval=POLL_INTERVAL, on_round=timing)
    event = scheduled.decision_event(result)
    cmd.view.handle(event)
    events: list[dict[str, Any]] = [event]
    _stage(cmd, f"Wait for Slurm job {record.job_id}", started, ok=result["decision"] == "done")
    if result["decision"] == "done":
        if result.get("servers"):
            transport.stop()  # ParameterServer tasks still serving after their chief: the step ends with it
        started = time.monotonic()
        try:
            collected = transport.collect(record, cmd.job_dir)
        except (KindError, ValueError, OSError) as exc:
            _stage(cmd, "Collect the chief's model dir", started, ok=False)
            cmd.view.failures.append({"host": transport.name, "task": "collect", "msg": str(exc)})
            return result, events
        _stage(cmd, "Collect the chief's model dir", started)
        cmd.say(f"       {printable(collected.get('msg'), 500)}")
        events.append({"event": "collected", "dest": str(cmd.job_dir / CURRENT)})
    elif result["decision"] in decision.OVER and not _unreachable(result) and \
            result.get("scheduler", {}).get("phase") not in ("ended", "unknown"):
        transport.stop()  # srun ends a failed step itself; a stall or the wait's own limit ends the job here
    return result, events


def _unreachable(result: dict[str, Any]) -> bool:
    return any(t.get("state", "").startswith("unreachable") for t in result.get("tasks", []))


def _write_log(log: Path, transport: Any, results: list[dict[str, Any]]) -> None:
    """The command's log: every command run on the login node, and the last decision."""
    log.parent.mkdir(parents=True, exist_ok=True)
    lines = list(transport.log)
    for result in results:
        lines.append("decision: " + json.dumps({k: result.get(k) for k in ("decision", "culprit", "message",
                                                                              "scheduler")}, default=str))
    with open(log, "a", encoding="utf-8") as out:
        out.write("".join(printable(line, 4000) + "\n" for line in lines))


def wait(cmd: Command, transport: Any) -> int:
    """`make wait`: re-attach to the job's Slurm job (queued, running, or ended), watch it, collect on done."""
    log = paths.log_file(cmd.job_dir, "wait")
    with cluster_lock(cmd.s, "wait"), job_lock(cmd.s):
        record = _load(cmd, transport)
        cmd.say(f"wait for Slurm job {record.job_id} of JOB={cmd.s.job} ({transport.cluster_name}); log: {_rel(log)}")
        kept = ledger.read_ledger(cmd.job_dir)
        run = kept.get("run")
        if kept.get("state") not in ledger.BLOCKING or not isinstance(run, str):
            run = ledger.start_run(cmd.job_dir, cmd.s.cluster_name)
        result, events = _watch_and_finish(cmd, transport, record, Timing(cmd, time.monotonic()))
        ledger.end_run(cmd.job_dir, run, ledger.last_decision(events), ledger.collected_version(cmd.job_dir, events))
        _write_log(log, transport, [result])
    if result["decision"] != "done" or not any(e.get("event") == "collected" for e in events):
        for text in failure_lines(cmd.view, _rel(log)):
            cmd.say(text)
        return EXIT_FAILED
    return EXIT_OK


def status(cmd: Command, transport: Any) -> int:
    """The scheduler's view beside each task's progress, from one poll."""
    record = _load(cmd, transport)
    scheduler, polls, slots = transport.poll(record)
    cmd.say(f"Slurm job {record.job_id}: {scheduled.scheduler_line(scheduler)}; nodes "
            f"{printable(scheduler.get('nodes') or '-', 200)}; elapsed {printable(scheduler.get('elapsed') or '-', 20)}"
            f" of {printable(scheduler.get('time_limit') or '-', 20)}")
    if scheduler.get("phase") in scheduled.WAITING:
        tasks = scheduled.waiting_tasks(scheduler, slots)
    else:
        settings = wait_settings(cmd, scheduled.chief_key(slots, record.chief_slot), retrying=False)
        tasks = decision.decide(polls, slots, {}, now=time.time(), started=time.time(), settings=settings)["tasks"]
    for text in follow.status_table(tasks):
        cmd.say(f"  {text}")
    return EXIT_OK


def logs(cmd: Command, transport: Any) -> int:
    """Follow the chief's log (HOST= a slot like worker-0, or a node) until the job is no longer queued or running."""
    record = _load(cmd, transport)
    slot = cmd.s.host
    if slot is not None and slot not in {f"{t}-{i}" for t, i in _slots(transport)}:
        _scheduler, _polls, slots = transport.poll(record)
        slot = slots.get(slot)
        if slot is None:
            raise CommandError(f"HOST={cmd.s.host} is neither a slot nor a node of Slurm job {record.job_id}. Fix: "
                               f"HOST= one of {', '.join(slots.values())} (or a node of `make status`)")
    cmd.say(f"following {slot or record.chief_slot} of Slurm job {record.job_id}: ends when the job ends, or Ctrl-C")
    return EXIT_OK if transport.follow(record, slot, cmd.out) == 0 else EXIT_FAILED


def _slots(transport: Any) -> list[tuple[str, int]]:
    from tfcluster.core.slurm import declared_slots

    return list(declared_slots(transport.cf.tasks))


def stop(cmd: Command, transport: Any) -> int:
    with cluster_lock(cmd.s, "stop"):
        cancelled = transport.stop()
        if not cancelled:
            cmd.say(f"no Slurm job of JOB={cmd.s.job} is queued or running on {transport.cluster_name}: nothing to "
                    "cancel")
        else:
            cmd.say(f"scancel: Slurm job {' '.join(cancelled)} of JOB={cmd.s.job} cancelled (its tasks get SIGTERM: a "
                    "training task saves a backup; `make train` resumes from it)")
        ledger.record_stop(cmd.job_dir)
    return EXIT_OK


def collect(cmd: Command, transport: Any) -> int:
    with cluster_lock(cmd.s, "collect"), job_lock(cmd.s):
        record = _load(cmd, transport)
        try:
            result = transport.collect(record, cmd.job_dir)
        except (KindError, ValueError, OSError) as exc:
            raise CommandError(printable(str(exc), 2000)) from None
        cmd.say(printable(result.get("msg"), 500))
        events = [{"event": "collected", "dest": str(cmd.job_dir / CURRENT)}]
        ledger.record_collect(cmd.job_dir, cmd.s.cluster_name, ledger.collected_version(cmd.job_dir, events))
    return EXIT_OK
