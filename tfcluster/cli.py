"""The `tfcluster` command behind every make target: `make train` is `tfcluster train`, and so on.

Settings come from the environment the Makefile exports (CLUSTER, JOB, WORKERS, STRATEGY, HOSTS, SCRIPT,
SCRIPT_ARGS, SCRIPT_REQUIREMENTS, KERAS, TRAINER_ARGS, EPOCHS, MAX_DURATION, VERBOSE, AUTO_APPROVE, HOST,
ANSIBLE_ARGS, WHEELHOUSE, TFCLUSTER_CLUSTER, TFCLUSTER_TF_DIR): they reach Ansible as a JSON extra-vars file, never
as shell words. The terminal shows one line per stage, the live progress of every task and a summary; the whole
Terraform/Ansible output goes to a log under artifacts/<cluster>/<job>/logs/ (VERBOSE=1 shows it too).

Exit codes: 0 done; 1 the command failed (what and where is printed); 2 bad settings (nothing ran).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tfcluster import contract, follow, ledger, paths
from tfcluster import run as runner
from tfcluster.inventory_env import inventory_env, tf_dir_of
from tfcluster.ledger import collected_dir, dir_size, old_copies
from tfcluster.settings import Settings, SettingsError, load
from tfcluster.text import printable
from tfcluster.view import View, duration, failure_lines

EXIT_OK, EXIT_FAILED, EXIT_SETTINGS = 0, 1, 2


class CommandError(RuntimeError):
    """A step failed; the message says what and how to go on."""


@contextmanager
def job_lock(settings: Settings) -> Iterator[None]:
    """One `make train`/`make collect` at a time per cluster and job (a second one is refused, naming the first)."""
    directory = paths.job_dir(settings.cluster, settings.job)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            raise CommandError(f"another train/collect of job {settings.job} on CLUSTER={settings.cluster} is running "
                               f"(pid {holder}). Fix: wait for it, or `make stop` it") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield


def _holders(lock: Path) -> list[str]:
    """``PID COMMAND`` of each live process that holds a cluster lock shared (its ``<lock>.<pid>`` file)."""
    found = []
    for path in sorted(lock.parent.glob(f"{lock.name}.*")):
        pid = path.name.rpartition(".")[2]
        try:
            os.kill(int(pid), 0)
        except (ProcessLookupError, ValueError):
            continue  # ended without cleaning up (killed), or not a holder's file
        except PermissionError:
            pass  # alive, another user's
        try:
            found.append(path.read_text(encoding="utf-8", errors="replace").strip()[:200] or pid)
        except OSError:
            continue
    return found


@contextmanager
def cluster_lock(settings: Settings, command: str, *, exclusive: bool = False) -> Iterator[None]:
    """One lock per cluster, artifacts/<cluster>/.cluster-<name>.lock: `make train`, `collect` and `stop` hold it
    shared (any number at once), `make destroy` alone; whoever comes second is refused at once, told who holds it.
    A shared holder names itself in ``<lock>.<pid>`` (removed when it lets go), the exclusive one in the lock."""
    lock = paths.cluster_lock_file(settings.cluster, settings.cluster_name)
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = f"pid {os.getpid()}: tfcluster {command}" + ("" if exclusive else f" JOB={settings.job}")
    with open(lock, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            if exclusive:
                held = "; ".join(_holders(lock)) or "a process that has not named itself yet"
                raise CommandError(f"CLUSTER={settings.cluster} ({settings.cluster_name}) is in use ({held}). Fix: "
                                   "wait for it to end, or `make stop JOB=<job>` a running train, then destroy "
                                   "again") from None
            handle.seek(0)
            raise CommandError(f"CLUSTER={settings.cluster} ({settings.cluster_name}) is being destroyed "
                               f"({handle.read().strip()[:200] or '?'}). Fix: wait for the destroy to end (then "
                               "`make provision` to use the cluster again)") from None
        if exclusive:
            for stale in lock.parent.glob(f"{lock.name}.*"):  # no shared holder is left: what remains is stale
                stale.unlink(missing_ok=True)
            handle.seek(0)
            handle.truncate()
            handle.write(me + "\n")
            handle.flush()
            yield
            return
        mine = lock.with_name(f"{lock.name}.{os.getpid()}")
        mine.write_text(me + "\n", encoding="utf-8")
        try:
            yield
        finally:
            mine.unlink(missing_ok=True)


# The gang-start play of playbooks/train.yml: a train whose playbook ended before it started nothing
# (tests/unit/test_cli.py checks the name against train.yml).
START_STAGE = "Start every task at once"
LEDGER_EVENTS = ("stage_start", "decision", "collected")


def run_events(events_file: Path) -> list[dict[str, Any]]:
    """The ``stage_start``, ``decision`` and ``collected`` events of one playbook run, read once more from its file
    after the run (VERBOSE=1 renders none); a line that is not a JSON object is skipped."""
    try:
        lines = events_file.read_bytes().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        if not any(f'"event": "{kind}"'.encode() in line for kind in LEDGER_EVENTS):
            continue  # progress lines are most of the file
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") in LEDGER_EVENTS:
            found.append(event)
    return found


def playbook_vars(settings: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """(trusted, untrusted) extra vars: names checked against the contract are trusted; a user's paths and
    arguments are untrusted (marked unsafe: never templated)."""
    trusted: dict[str, Any] = {"tfcluster_job": settings.job, "tfcluster_cluster": settings.cluster}
    untrusted: dict[str, Any] = {}
    if settings.script is not None:
        untrusted |= {"tfcluster_script": str(settings.script), "tfcluster_script_args": list(settings.script_args)}
        trusted["tfcluster_script_keras"] = settings.script_keras
    if settings.script_requirements is not None:
        untrusted["tfcluster_script_requirements"] = str(settings.script_requirements)
    if settings.trainer_args:
        untrusted["tfcluster_trainer_args"] = list(settings.trainer_args)
    if settings.epochs is not None:
        trusted["tfcluster_epochs"] = settings.epochs
    if settings.max_duration is not None:
        trusted["tfcluster_max_duration"] = settings.max_duration
    if settings.cluster == "onprem" and settings.wheelhouse is not None and settings.wheelhouse.is_dir():
        untrusted["python_runtime_wheelhouse"] = str(settings.wheelhouse)
    if settings.datasets:
        trusted["tfcluster_datasets"] = list(settings.datasets)
    if settings.prepare_force:
        trusted["tfcluster_prepare_force"] = True
    if os.environ.get(contract.ENV_S3_ENDPOINT_URL):
        untrusted["tfcluster_s3_endpoint_url"] = os.environ[contract.ENV_S3_ENDPOINT_URL]
    return trusted, untrusted


def cluster_vars(settings: Settings) -> dict[str, Any]:
    """What the applied Terraform root tells the playbooks (CLUSTER=aws): where backups go (checkpoint_s3) and what an
    idle host's power-off does (autostop_down: stop | terminate; a terminating host waits for an uncollected job)."""
    if settings.cluster != "aws" or not (tf_dir_of(settings) / "terraform.tfstate").is_file():
        return {}
    from tfcluster import provision_aws, terraform

    outputs = provision_aws.outputs(tf_dir_of(settings), terraform.terraform_env(cluster="aws"))
    found = {"tfcluster_checkpoint_s3": outputs.get("checkpoint_s3"),
             "tfcluster_autostop_down": outputs.get("autostop_down")}
    return {key: value for key, value in found.items() if isinstance(value, str) and value}


class Command:
    """One invocation: settings, the terminal view, and the runs it makes."""

    def __init__(self, settings: Settings, out: Any = None) -> None:
        self.s = settings
        self.out = out or sys.stdout
        self.view = View(self.out, tty=self.out.isatty())
        self.job_dir = paths.job_dir(settings.cluster, settings.job)
        self.events: list[dict[str, Any]] = []  # the last playbook's LEDGER_EVENTS

    def say(self, text: str) -> None:
        self.view.line(text)

    def env(self) -> dict[str, str]:
        return {**os.environ, **inventory_env(self.s)}

    def playbook(self, name: str, action: str, *, more_vars: Mapping[str, Any] | None = None) -> int:
        log = paths.log_file(self.job_dir, action)
        events_file = log.with_suffix(".events.jsonl")
        trusted, untrusted = playbook_vars(self.s)
        untrusted |= {k: v for k, v in cluster_vars(self.s).items() if k not in (more_vars or {})}  # the command's win
        extra = runner.write_extra_vars(log.parent, {**trusted, **(more_vars or {})}, untrusted)
        self.say(f"{action} job {self.s.job} on CLUSTER={self.s.cluster} ({self.s.cluster_name}); log: "
                 f"{_rel(log)}")
        env = runner.ansible_env(self.env(), events_file, {})
        self.events = []
        code = runner.run(runner.playbook_argv(name, extra, self.s.ansible_args), env=env, log=log, view=self.view,
                          verbose=self.s.verbose, events_file=events_file)
        self.events = run_events(events_file)
        if code != 0:
            for text in failure_lines(self.view, _rel(log)):
                self.say(text)
        return code

    def provision(self, action: str) -> int:
        argv = [sys.executable, "-m", "tfcluster.provision", action, "--cluster", self.s.cluster]
        argv += ["--auto-approve"] if self.s.auto_approve else []
        env = self.env()
        if action == "plan" or (self.s.cluster == "aws" and not self.s.auto_approve):
            return runner.run_interactive(argv, env=env)
        log = paths.log_file(paths.ARTIFACTS / self.s.cluster, action)
        self.say(f"{action} CLUSTER={self.s.cluster} ({self.s.cluster_name}); log: {_rel(log)}")
        started = time.monotonic()
        code = runner.run(argv, env=env, log=log, view=None, verbose=self.s.verbose)
        mark = "ok  " if code == 0 else "FAIL"
        self.say(f"  {mark} {'terraform ' + action:<58} {duration(time.monotonic() - started):>8}")
        for text in _tail(log, 400):  # what provision concluded (its own log lines, not Terraform's)
            if text.startswith("[provision] ") and code == 0:
                self.say(f"       {printable(text[len('[provision] '):])}")
        if code != 0:
            self.say("  last lines of the log:")
            for text in _tail(log, 25):
                self.say(f"    {printable(text)}")
        return code


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _tail(path: Path, lines: int) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


# --- commands -------------------------------------------------------------------------------------------------------
def cmd_train(cmd: Command) -> int:
    with cluster_lock(cmd.s, "train"), job_lock(cmd.s):
        run = ledger.start_run(cmd.job_dir, cmd.s.cluster_name)  # before anything starts: an interrupt leaves it
        code = cmd.playbook("train.yml", "train")
        began = any(e.get("event") == "stage_start" and e.get("name") == START_STAGE for e in cmd.events)
        ledger.end_run(cmd.job_dir, run, ledger.last_decision(cmd.events),
                       ledger.collected_version(cmd.job_dir, cmd.events), began=began)
    if code != 0:
        return EXIT_FAILED
    for text in [*job_summary(cmd.job_dir), *still_running(cmd.s)]:
        cmd.say(printable(text))  # metrics.json values, EC2 tags, an exception's text
    return EXIT_OK


def cmd_collect(cmd: Command) -> int:
    with cluster_lock(cmd.s, "collect"), job_lock(cmd.s):
        code = cmd.playbook("collect.yml", "collect")
        ledger.record_collect(cmd.job_dir, cmd.s.cluster_name, ledger.collected_version(cmd.job_dir, cmd.events))
    return EXIT_OK if code == 0 else EXIT_FAILED


def cmd_stop(cmd: Command) -> int:
    """Not under the job lock: it is what stops a running train."""
    with cluster_lock(cmd.s, "stop"):
        code = cmd.playbook("stop.yml", "stop")
        if code == 0:
            ledger.record_stop(cmd.job_dir)
    return EXIT_OK if code == 0 else EXIT_FAILED


def cmd_status(cmd: Command) -> int:
    cmd.view.show_progress = False
    autostop_file = paths.log_file(cmd.job_dir, "autostop").with_suffix(".json")
    code = cmd.playbook("status.yml", "status", more_vars={"tfcluster_autostop_file": str(autostop_file)})
    if cmd.view.tasks:
        for text in follow.status_table(cmd.view.tasks, autostop=follow.read_autostop(autostop_file)):
            cmd.say(f"  {text}")
    return EXIT_OK if code == 0 else EXIT_FAILED


def cmd_logs(cmd: Command) -> int:
    targets_file = paths.log_file(cmd.job_dir, "targets").with_suffix(".json")
    if cmd.playbook("logs.yml", "logs", more_vars={"tfcluster_targets_file": str(targets_file)}) != 0:
        return EXIT_FAILED
    try:
        name, target = follow.pick(*follow.read_targets(targets_file), cmd.s.host)
        cmd.say(f"following {name} ({target.get('slot', '?')}): ends when the task ends, or Ctrl-C")
        return EXIT_OK if follow.follow(name, target, cmd.out) == 0 else EXIT_FAILED
    except follow.FollowError as exc:
        raise CommandError(str(exc)) from None


def ec2_for(settings: Settings) -> Any:
    """An EC2 client for the cluster's region: the emulated endpoint for CLUSTER=local, else AWS (the region of
    the applied root, else AWS_REGION / AWS_DEFAULT_REGION / the profile's)."""
    import boto3

    from tfcluster import localaws

    if settings.cluster == "local":
        endpoint = localaws.running(localaws.state_dir())
        if endpoint is None:
            raise CommandError("the emulated AWS endpoint is not running: no local cluster exists. Fix: `make "
                               "provision` (CLUSTER=local)")
        return localaws.ec2_client(endpoint.url)
    from tfcluster import provision_aws, terraform

    tf_dir = tf_dir_of(settings)
    region = provision_aws.outputs(tf_dir, terraform.terraform_env(cluster="aws")).get("region") if \
        (tf_dir / "terraform.tfstate").is_file() else None
    return boto3.session.Session().client("ec2", region_name=region or os.environ.get("AWS_REGION") or None)


def still_running(settings: Settings) -> list[str]:
    """The end of `make train`: what of the cluster is still running, its cost per hour, how to tear it down."""
    if settings.cluster == "onprem":
        return []
    if settings.cluster == "local":
        return [f"still running: the emulated cluster {settings.cluster_name} (no cost: it exists only in moto). "
                f"Tear it down: make destroy CLUSTER=local"]
    from tfcluster import clusters

    try:
        return clusters.running_summary(ec2_for(settings), settings.cluster_name).splitlines()
    except Exception as exc:  # the summary must never turn a finished job into a failure
        return [f"could not list what is still running ({type(exc).__name__}: {exc}). Check: make clusters "
                "CLUSTER=aws"]


def cmd_clusters(cmd: Command) -> int:
    from tfcluster import clusters

    for text in clusters.clusters_report(ec2_for(cmd.s)).splitlines():
        cmd.say(printable(text))  # EC2 tags are anyone's text
    return EXIT_OK


def cmd_autostop(cmd: Command) -> int:
    """make autostop IDLE=10|30m|off [MODE=jobs_and_ssh] [DOWN=1|0]: change a running cluster."""
    if not cmd.s.autostop and cmd.s.down is None:
        raise CommandError("nothing to change. Fix: make autostop IDLE=30m (or IDLE=off), MODE=jobs_and_ssh to let "
                           "an SSH login keep a host up, DOWN=1 (aws) to terminate instead of stop")
    from tfcluster import clusters

    if cmd.s.down is not None and not cmd.s.autostop:
        raise CommandError("DOWN changes what an idle host does, and each host's autostop settings hold that too (a "
                           "terminating host waits for an uncollected job). Fix: give IDLE with it, e.g. make autostop "
                           "IDLE=30m DOWN=1")
    state = _state_slots(cmd.s) if cmd.s.down is not None else {}  # refused before anything changes
    down_vars = {"tfcluster_autostop_down": cmd.s.down} if cmd.s.down is not None else {}
    if cmd.s.autostop and cmd.playbook("autostop.yml", "autostop", more_vars={**cmd.s.autostop, **down_vars}) != 0:
        return EXIT_FAILED
    if cmd.s.down is not None:
        change = clusters.set_shutdown_behavior(ec2_for(cmd.s), cmd.s.cluster_name, cmd.s.down, state)
        cmd.say(f"shutdown behaviour '{cmd.s.down}' on {len(change.changed)} instance(s) of the Terraform state: "
                f"{' '.join(change.changed)}. Give `make provision DOWN={os.environ.get('DOWN')}` the same DOWN, or "
                "the next apply sets it back")
        for line in clusters.render_not_ours(cmd.s.cluster_name, change.not_ours):
            cmd.say(printable(line))
    return EXIT_OK


def _state_slots(settings: Settings) -> dict[str, str]:
    """{instance id: slot} of the cluster's applied Terraform state (its hosts output): the only instances DOWN
    may change."""
    from tfcluster import clusters, provision_aws, terraform

    tf_dir = tf_dir_of(settings)
    state = clusters.state_slots(provision_aws.outputs(tf_dir, terraform.terraform_env(cluster="aws")).get("hosts"))
    if not state:
        raise CommandError(f"no applied Terraform state with hosts in {tf_dir}: DOWN changes only the instances that "
                           "state holds. Fix: run it where `make provision CLUSTER=aws` ran (or point TFCLUSTER_TF_DIR "
                           "at that root)")
    return state


def cmd_provision(cmd: Command) -> int:
    """An apply may replace instances: not while a train, collect or stop of the cluster runs."""
    with cluster_lock(cmd.s, "provision", exclusive=True):
        return EXIT_OK if cmd.provision("apply") == 0 else EXIT_FAILED


def cmd_plan(cmd: Command) -> int:
    if cmd.s.cluster == "onprem":
        env = cmd.env()
        return runner.run_interactive([sys.executable, str(paths.INVENTORY_SCRIPT), "--tf-config", "all"], env=env)
    return EXIT_OK if cmd.provision("plan") == 0 else EXIT_FAILED


def cmd_destroy(cmd: Command) -> int:
    """Refused while a train, collect or stop of the cluster runs, and while a job's result may be only on the
    hosts (tfcluster.ledger: started or finished, never collected) unless FORCE=1."""
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
    from tfcluster import summary

    directory = collected_dir(cmd.job_dir)
    if directory is not None and (directory / contract.METRICS).is_file():
        history = summary.load_metrics(directory).get("history") or {}
        cmd.say(f"plot:         {_rel(summary.write_plot(history, directory / summary.PLOT_NAME))}")
    return EXIT_OK


def job_summary(job_dir: Path) -> list[str]:
    """What the job produced, from the collected copy."""
    from tfcluster import summary

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


def cmd_tf_upgrade(cmd: Command) -> int:
    """make tf-upgrade: `terraform init -upgrade` of the cluster's root (a newer provider, a new lock file)."""
    argv = [sys.executable, "-m", "tfcluster.provision", "upgrade", "--cluster", cmd.s.cluster]
    return EXIT_OK if runner.run_interactive(argv, env=cmd.env()) == 0 else EXIT_FAILED


COMMANDS: dict[str, tuple[Callable[[Command], int], str]] = {
    "train": (cmd_train, "prepare the hosts, gang-start the job, wait (fail fast), collect"),
    "collect": (cmd_collect, "bring the chief's checkpoint home and verify it"),
    "stop": (cmd_stop, "stop every task of the job"),
    "status": (cmd_status, "a table of each task's state and progress"),
    "logs": (cmd_logs, "follow the chief's job log (HOST=name: that host's) until the task ends"),
    "provision": (cmd_provision, "create the machines (Terraform)"),
    "plan": (cmd_plan, "the Terraform plan and every planned host's TF_CONFIG"),
    "destroy": (cmd_destroy, "tear the machines down"),
    "demo": (cmd_demo, "provision the local cluster, train, collect, summary and plot"),
    "clusters": (cmd_clusters, "every tfcluster cluster of the region: age, instances, expiry, estimated $/hour"),
    "autostop": (cmd_autostop, "change a running cluster's idle autostop (IDLE, MODE, DOWN)"),
    "tf-upgrade": (cmd_tf_upgrade, "upgrade the aws provider of the cluster's root (terraform init -upgrade)"),
    "prune": (cmd_prune, "remove the older verified copies of JOB (current stays)"),
    "clean-artifacts": (cmd_clean_artifacts, "delete every collected artifact (asks first)"),
}


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tfcluster", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_func, text) in COMMANDS.items():
        sub.add_parser(name, help=text)
    args = parser.parse_args(argv)
    try:
        settings = load(os.environ if env is None else env)
    except SettingsError as exc:
        for problem in exc.problems:
            print(f"tfcluster {args.command}: {problem}", file=sys.stderr)
        print("Nothing was started.", file=sys.stderr)
        return EXIT_SETTINGS
    try:
        return COMMANDS[args.command][0](Command(settings))
    except CommandError as exc:
        print(f"tfcluster {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"\ntfcluster {args.command}: interrupted. A started job keeps running: `make status`, `make stop`.",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
