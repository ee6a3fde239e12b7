"""The `tfcluster` commands, one function each (`make train` is `cmd_train`): what they run, in which order, under
which lock, and what they record and print."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tfcluster.cli import recovery
from tfcluster.cli.command import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_SETTINGS,
    START_STAGE,
    Command,
    CommandError,
    _rel,
)
from tfcluster.cli.locks import cluster_lock, job_lock
from tfcluster.cli.settings import Settings
from tfcluster.collect import ledger
from tfcluster.collect.ledger import collected_dir, dir_size, old_copies
from tfcluster.core import contract, paths
from tfcluster.core.duration import format_duration
from tfcluster.core.text import printable
from tfcluster.run import ansible as runner
from tfcluster.run import follow
from tfcluster.run.view import straggler_notes


# --- commands -------------------------------------------------------------------------------------------------------
def gang_start_ran(events: list[dict[str, object]]) -> bool:
    """Whether the train's gang-start play ran a task: Ansible still announces a play whose hosts all failed before
    (it starts none of its tasks: `tasks` 0 in its stage_end). A start play that began and never ended (interrupted)
    counts as run: a task may be up."""
    starts = [e for e in events if e.get("name") == START_STAGE]
    ends = [e for e in starts if e.get("event") == "stage_end"]
    if not starts:
        return False
    return not ends or any(e.get("tasks", 1) != 0 for e in ends)


def expiry_warning(max_duration: int | None, expires: datetime | None, now: datetime) -> str | None:
    """A job deadline (MAX_DURATION) that ends after the cluster's expiry (TTL): the hosts power off first (the job
    saves a backup and stops with them). The warning names the fix; None when the deadline ends in time."""
    if max_duration is None or expires is None or now + timedelta(seconds=max_duration) <= expires:
        return None
    left = max(0.0, (expires - now).total_seconds())
    ttl = format_duration(max(3600, -(-(max_duration + 1800) // 3600) * 3600))  # the deadline + 30 min, whole hours
    return (f"warning: MAX_DURATION={format_duration(max_duration)} outlives the cluster's expiry "
            f"{expires.strftime('%Y-%m-%dT%H:%M:%SZ')} (in {format_duration(left)}): the hosts power off then, the job "
            f"saving a backup (`make start` and `make train` resume it). Fix: `make provision TTL={ttl}` first (a new "
            "expiry from now), or a shorter MAX_DURATION")


def _by_transport(cmd: Command, action: str) -> int | None:
    """A scheduler kind's command (its transport: tfcluster/cli/scheduled.py), or None: the kind runs playbooks."""
    transport = cmd.s.kind.transport(cmd.s.target)
    if transport is None:
        return None
    from tfcluster.cli import scheduled

    code = getattr(scheduled, action)(cmd, transport)
    if action in ("train", "wait"):
        for text in [*(job_summary(cmd.job_dir) if code == EXIT_OK else []), *summary_of_health(cmd)]:
            cmd.say(printable(text))
    return code

def cmd_train(cmd: Command) -> int:
    if (code := _by_transport(cmd, "train")) is not None:
        return code
    if cmd.s.max_duration is not None:
        warning = expiry_warning(cmd.s.max_duration, cmd.s.kind.expires_at(cmd.s.target), datetime.now(timezone.utc))
        if warning:
            cmd.say(warning)
    if recovery.intro(cmd.s, recovery.budget(cmd.s)):
        cmd.say(recovery.intro(cmd.s, recovery.budget(cmd.s)))
    with cluster_lock(cmd.s, "train"), job_lock(cmd.s):
        run = ledger.start_run(cmd.job_dir, cmd.s.cluster_name)  # before anything starts: an interrupt leaves it
        code = cmd.playbook("train.yml", "train")
        if code != 0:  # a lost host: its slot replaced alone and the job resumed (RECOVER; tfcluster/cli/recovery.py)
            code = recovery.recover(cmd, run, lambda: cmd.playbook("train.yml", "train"))
        began = gang_start_ran(cmd.events)
        _end_run(cmd, run, began=began)
    stragglers = summary_of_health(cmd)
    if code != 0:
        for text in [*stragglers, *still_running(cmd.s)]:  # a failed run costs as much per hour as a finished one
            cmd.say(printable(text))
        return EXIT_FAILED
    for text in [*job_summary(cmd.job_dir), *stragglers, *still_running(cmd.s)]:
        cmd.say(printable(text))  # metrics.json values, EC2 tags, an exception's text
    return EXIT_OK


def summary_of_health(cmd: Command) -> list[str]:
    """The tasks the wait named as stragglers (their longest episode), from this command's decision."""
    from tfcluster.cli import summary

    return summary.straggler_lines(cmd.view.decision)

def _end_run(cmd: Command, run: str, *, began: bool = True) -> None:
    """The ledger's end of ``run`` from this command's events (decision, collected version)."""
    version = ledger.collected_version(cmd.job_dir, cmd.events)
    ledger.end_run(cmd.job_dir, run, ledger.last_decision(cmd.events), version, began=began)

def cmd_wait(cmd: Command) -> int:
    """make wait: re-attach to JOB where it runs (after an interrupted `make train`, a closed terminal, a laptop that
    slept, or from another machine), wait for it with progress, then collect. Starts nothing (playbooks/wait.yml);
    it ends the ledger's open run of the job, or records one when it found the job (a decision): a wait that found
    nothing (no cluster, no such job) records nothing, so it never blocks `make destroy`."""
    if (code := _by_transport(cmd, "wait")) is not None:
        return code
    with cluster_lock(cmd.s, "wait"), job_lock(cmd.s):
        record = ledger.read_ledger(cmd.job_dir)
        run = record.get("run")
        open_run = run if record.get("state") in ledger.BLOCKING and isinstance(run, str) else None
        code = cmd.playbook("wait.yml", "wait")
        if open_run is None and ledger.last_decision(cmd.events) is not None:
            open_run = ledger.start_run(cmd.job_dir, cmd.s.cluster_name)
        if open_run is not None:
            _end_run(cmd, open_run)
    stragglers = summary_of_health(cmd)
    if code != 0:
        for text in [*stragglers, *still_running(cmd.s)]:
            cmd.say(printable(text))
        return EXIT_FAILED
    for text in [*job_summary(cmd.job_dir), *stragglers, *still_running(cmd.s)]:
        cmd.say(printable(text))
    return EXIT_OK

def cmd_collect(cmd: Command) -> int:
    if (code := _by_transport(cmd, "collect")) is not None:
        return code
    with cluster_lock(cmd.s, "collect"), job_lock(cmd.s):
        code = cmd.playbook("collect.yml", "collect")
        ledger.record_collect(cmd.job_dir, cmd.s.cluster_name, ledger.collected_version(cmd.job_dir, cmd.events))
    return EXIT_OK if code == 0 else EXIT_FAILED

def cmd_stop(cmd: Command) -> int:
    """Not under the job lock: it is what stops a running train."""
    if (code := _by_transport(cmd, "stop")) is not None:
        return code
    with cluster_lock(cmd.s, "stop"):
        code = cmd.playbook("stop.yml", "stop")
        if code == 0:
            ledger.record_stop(cmd.job_dir)
    return EXIT_OK if code == 0 else EXIT_FAILED

def cmd_status(cmd: Command) -> int:
    if (code := _by_transport(cmd, "status")) is not None:
        return code
    cmd.view.show_progress = False
    autostop_file = paths.log_file(cmd.job_dir, "autostop").with_suffix(".json")
    code = cmd.playbook("status.yml", "status", more_vars={"tfcluster_autostop_file": str(autostop_file)})
    if cmd.view.tasks:
        for text in follow.status_table(cmd.view.tasks, autostop=follow.read_autostop(autostop_file)):
            cmd.say(f"  {text}")
        for text in straggler_notes(cmd.view.tasks):  # its pace against the others' now (STRAGGLER)
            cmd.say(f"  {text}")
    return EXIT_OK if code == 0 else EXIT_FAILED

def cmd_stacks(cmd: Command) -> int:
    """make stacks: every task's Python stacks, the task behind first (py-spy on each host; reads only)."""
    if cmd.s.kind.transport(cmd.s.target) is not None:
        raise CommandError(f"make stacks reads each task's stacks over its host's SSH; CLUSTER={cmd.s.cluster} runs "
                           "its tasks through a scheduler. Fix: make logs (the chief's output), or py-spy dump "
                           "--pid PID on the node")
    return EXIT_OK if cmd.playbook("stacks.yml", "stacks") == 0 else EXIT_FAILED

def cmd_logs(cmd: Command) -> int:
    if (code := _by_transport(cmd, "logs")) is not None:
        return code
    targets_file = paths.log_file(cmd.job_dir, "targets").with_suffix(".json")
    if cmd.playbook("logs.yml", "logs", more_vars={"tfcluster_targets_file": str(targets_file)}) != 0:
        return EXIT_FAILED
    try:
        name, target = follow.pick(*follow.read_targets(targets_file), cmd.s.host)
        cmd.say(f"following {name} ({target.get('slot', '?')}): ends when the task ends, or Ctrl-C")
        return EXIT_OK if follow.follow(name, target, cmd.out) == 0 else EXIT_FAILED
    except follow.FollowError as exc:
        raise CommandError(str(exc)) from None

def still_running(settings: Settings) -> list[str]:
    """The end of `make train`: what of the cluster is still running, its cost per hour, how to tear it down."""
    return settings.kind.still_running(settings.target)

def cmd_clusters(cmd: Command) -> int:
    from tfcluster.cost import clusters

    for text in clusters.clusters_report(cmd.s.kind.ec2(cmd.s.target)).splitlines():
        cmd.say(printable(text))  # EC2 tags are anyone's text
    return EXIT_OK

def cmd_autostop(cmd: Command) -> int:
    """make autostop IDLE=10|30m|off [MODE=jobs_and_ssh] [DOWN=1|0]: change a running cluster."""
    if not cmd.s.autostop and cmd.s.down is None:
        raise CommandError("nothing to change. Fix: make autostop IDLE=30m (or IDLE=off), MODE=jobs_and_ssh to let "
                           "an SSH login keep a host up, DOWN=1 (aws) to terminate instead of stop")
    from tfcluster.cost import clusters

    if cmd.s.down is not None and not cmd.s.autostop:
        raise CommandError("DOWN changes what an idle host does, and each host's autostop settings hold that too (a "
                           "terminating host waits for an uncollected job). Fix: give IDLE with it, e.g. make autostop "
                           "IDLE=30m DOWN=1")
    state = _state_slots(cmd.s) if cmd.s.down is not None else {}  # refused before anything changes
    down_vars = {"tfcluster_autostop_down": cmd.s.down} if cmd.s.down is not None else {}
    if cmd.s.autostop and cmd.playbook("autostop.yml", "autostop", more_vars={**cmd.s.autostop, **down_vars}) != 0:
        return EXIT_FAILED
    if cmd.s.down is not None:
        change = clusters.set_shutdown_behavior(cmd.s.kind.ec2(cmd.s.target), cmd.s.cluster_name, cmd.s.down, state)
        cmd.say(f"shutdown behaviour '{cmd.s.down}' on {len(change.changed)} instance(s) of the Terraform state: "
                f"{' '.join(change.changed)}. Give `make provision DOWN={os.environ.get('DOWN')}` the same DOWN, or "
                "the next apply sets it back")
        for line in clusters.render_not_ours(cmd.s.cluster_name, change.not_ours):
            cmd.say(printable(line))
    return EXIT_OK

def _state_slots(settings: Settings) -> dict[str, str]:
    """{instance id: slot} of the cluster's applied Terraform state: the only instances DOWN may change."""
    state = settings.kind.instance_slots(settings.target)
    if not state:
        raise CommandError(f"no applied Terraform state with hosts in {settings.kind.tf_dir(settings.target)}: DOWN "
                           "changes only the instances that state holds. Fix: run it where `make provision "
                           f"CLUSTER={settings.cluster}` ran (or point TFCLUSTER_TF_DIR at that root)")
    return state

def cmd_provision(cmd: Command) -> int:
    """An apply may replace instances: not while a train, collect or stop of the cluster runs. AMI=refresh replaces
    every host: not while a job's result may be only on them (tfcluster.collect.ledger) unless FORCE=1."""
    with cluster_lock(cmd.s, "provision", exclusive=True):
        if cmd.s.ami is not None:
            refuse_while_uncollected(cmd, "AMI=refresh replaces every host and its disk, which would lose it",
                                     "`make provision AMI=refresh FORCE=1` to replace them anyway")
        return EXIT_OK if cmd.provision("apply") == 0 else EXIT_FAILED

def refuse_while_uncollected(cmd: Command, what: str, force: str) -> None:
    """CommandError while a job of the cluster is running or finished and never collected, unless FORCE=1."""
    left = ledger.blocking_jobs(cmd.s.cluster, cmd.s.cluster_name)
    if left and os.environ.get("FORCE", "") != "1":
        jobs = "; ".join(f"{job} ({why})" for job, why in left.items())
        raise CommandError(f"job(s) of {cmd.s.cluster_name} whose result was never collected: {jobs}. {what}. Fix: "
                           f"`make collect JOB={next(iter(left))}` (each job), `make stop JOB=<job>` for a started job "
                           f"you do not want, or {force}")

def cmd_start(cmd: Command) -> int:
    """make start: start a stopped cluster (autostop's default stops an idle host), wait until it runs, refresh its
    addresses through Terraform; the host keys already trusted are kept. Then `make train` resumes a job."""
    with cluster_lock(cmd.s, "start", exclusive=True):
        for text in cmd.s.kind.start(cmd.s.target, os.environ):
            cmd.say(printable(text))  # instance ids and addresses from EC2
    return EXIT_OK

def cmd_plan(cmd: Command) -> int:
    """The kind's plan (Terraform's, where it provisions), then every planned host's TF_CONFIG from the inventory's
    own code; touches no host."""
    code, lines = cmd.s.kind.plan_lines(cmd.s.target, cmd.env(), runner.run_interactive)
    for text in lines:
        cmd.say(printable(text))
    return EXIT_OK if code == 0 else (EXIT_SETTINGS if code == EXIT_SETTINGS else EXIT_FAILED)

def cmd_destroy(cmd: Command) -> int:
    """Refused while a train, collect or stop of the cluster runs, and while a job's result may be only on the
    hosts (tfcluster.collect.ledger: started or finished, never collected) unless FORCE=1."""
    with cluster_lock(cmd.s, "destroy", exclusive=True):
        left = ledger.blocking_jobs(cmd.s.cluster, cmd.s.cluster_name)
        if left and os.environ.get("FORCE", "") != "1":
            jobs = "; ".join(f"{job} ({why})" for job, why in left.items())
            first = next(iter(left))
            raise CommandError(f"job(s) of {cmd.s.cluster_name} whose result was never collected: {jobs}. "
                               "Destroying would lose it. Fix: `make collect JOB=<job>` for each "
                               f"(e.g. `make collect JOB={first}`); `make stop JOB=<job>` for a started job you "
                               "do not want; or `make destroy FORCE=1` to destroy anyway")
        return EXIT_OK if cmd.provision("destroy") == 0 else EXIT_FAILED

def cmd_demo(cmd: Command) -> int:
    if cmd_provision(cmd) != 0:
        return EXIT_FAILED
    if cmd_train(cmd) != 0:
        return EXIT_FAILED
    from tfcluster.cli import summary

    directory = collected_dir(cmd.job_dir)
    if directory is not None and (directory / contract.METRICS).is_file():
        history = summary.load_metrics(directory).get("history") or {}
        cmd.say(f"plot:         {_rel(summary.write_plot(history, directory / summary.PLOT_NAME))}")
    return EXIT_OK

def job_summary(job_dir: Path) -> list[str]:
    """What the job produced, from the collected copy."""
    from tfcluster.cli import summary

    directory = collected_dir(job_dir)
    if directory is None:
        return [f"nothing was collected into {_rel(job_dir)}"]
    try:
        return summary.summary_lines(summary.load_metrics(directory), Path(_rel(directory)), None)
    except summary.DemoError:
        return [f"artifacts: {_rel(directory)} (sha256-verified; the job wrote no {contract.METRICS})"]

def cmd_prune(cmd: Command) -> int:
    """Remove the older verified copies of JOB; ``current`` stays."""
    import shutil

    with job_lock(cmd.s):
        old = old_copies(cmd.job_dir)
        for path in old:
            size = dir_size(path)
            shutil.rmtree(path)
            cmd.say(f"removed {_rel(path)} ({size / 1e6:.1f} MB)")
    if not old:
        cmd.say(f"nothing to prune in {_rel(cmd.job_dir)}: only the current copy is there")
    return EXIT_OK

def cmd_clean_artifacts(cmd: Command) -> int:
    """Delete every collected artifact, after asking (YES=1 answers for you)."""
    import shutil

    root = paths.ARTIFACTS
    if not root.is_dir():
        cmd.say("no artifacts/ to remove")
        return EXIT_OK
    question = f"Delete {_rel(root)} ({dir_size(root) / 1e6:.1f} MB: every collected checkpoint and log)? [y/N] "
    if os.environ.get("YES") != "1":
        if not sys.stdin.isatty():
            raise CommandError(f"{_rel(root)} holds collected checkpoints; refusing to delete them without asking. "
                               "Fix: run it on a terminal, or `make clean-artifacts YES=1`")
        if input(question).strip().lower() not in ("y", "yes"):
            cmd.say("kept artifacts/")
            return EXIT_OK
    shutil.rmtree(root)
    cmd.say(f"removed {_rel(root)}")
    return EXIT_OK

def cmd_slurm_up(cmd: Command) -> int:
    """make slurm-up CLUSTER=onprem HOSTS=... (or CLUSTER=aws): the cluster's hosts become one Slurm cluster
    (playbooks/slurm.yml: the slurm role), and a cluster file for CLUSTER=slurm is written under artifacts/."""
    if cmd.s.kind.transport(cmd.s.target) is not None:
        raise CommandError(f"CLUSTER={cmd.s.cluster} is a Slurm cluster already: slurm-up makes hosts one. Fix: make "
                           "slurm-up CLUSTER=onprem HOSTS=hosts.yml (or CLUSTER=aws after make provision)")
    with cluster_lock(cmd.s, "slurm-up"):
        code = cmd.playbook("slurm.yml", "slurm-up")
    return EXIT_OK if code == 0 else EXIT_FAILED

def cmd_tf_upgrade(cmd: Command) -> int:
    """make tf-upgrade: `terraform init -upgrade` of the cluster's root (a newer provider, a new lock file)."""
    argv = cmd.s.kind.provision_argv(cmd.s.target, "upgrade")
    return EXIT_OK if runner.run_interactive(argv, env=cmd.env()) == 0 else EXIT_FAILED
