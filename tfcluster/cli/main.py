"""The `tfcluster` command behind every make target: `make train` is `tfcluster train`, and so on.

Settings come from the environment the Makefile exports (CLUSTER, JOB, WORKERS, STRATEGY, HOSTS, SLURM, SCRIPT,
SCRIPT_ARGS, SCRIPT_REQUIREMENTS, KERAS, DATASETS, TRAINER_ARGS, EPOCHS, MAX_DURATION, STALL, UNREACHABLE_GRACE,
PREPARE, AMI, ALL_OR_NOTHING, VERBOSE, AUTO_APPROVE, HOST, ANSIBLE_ARGS, WHEELHOUSE, TFCLUSTER_CLUSTER,
TFCLUSTER_TF_DIR): they reach Ansible as a JSON extra-vars file, never as shell words. The terminal shows one
line per stage, the live progress of every task and a summary; the whole Terraform/Ansible output goes to a log under
artifacts/<cluster>/<job>/logs/ (VERBOSE=1 shows it too).

Exit codes: 0 done; 1 the command failed (what and where is printed); 2 bad settings (nothing ran); 130
interrupted (a started job keeps running on the hosts: `make wait` re-attaches).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from tfcluster.cli.command import (
    EXIT_FAILED,
    EXIT_SETTINGS,
    Command,
    CommandError,
)
from tfcluster.cli.commands import (
    cmd_autostop,
    cmd_clean_artifacts,
    cmd_clusters,
    cmd_collect,
    cmd_demo,
    cmd_destroy,
    cmd_logs,
    cmd_plan,
    cmd_provision,
    cmd_prune,
    cmd_slurm_up,
    cmd_stacks,
    cmd_start,
    cmd_status,
    cmd_stop,
    cmd_tf_upgrade,
    cmd_train,
    cmd_wait,
)
from tfcluster.cli.settings import SettingsError, load
from tfcluster.kinds import KindError

COMMANDS: dict[str, tuple[Callable[[Command], int], str]] = {
    "train": (cmd_train, "prepare the hosts, gang-start the job, wait (fail fast), collect"),
    "wait": (cmd_wait, "re-attach to a running job (after Ctrl-C or a closed terminal): wait for it, collect"),
    "collect": (cmd_collect, "bring the chief's checkpoint home and verify it"),
    "stop": (cmd_stop, "stop every task of the job"),
    "status": (cmd_status, "a table of each task's state and progress"),
    "stacks": (cmd_stacks, "every task's Python stacks, the task behind first (a job that seems stuck)"),
    "logs": (cmd_logs, "follow the chief's job log (HOST=name: that host's) until the task ends"),
    "provision": (cmd_provision, "create the machines (Terraform)"),
    "plan": (cmd_plan, "the Terraform plan and every planned host's TF_CONFIG"),
    "destroy": (cmd_destroy, "tear the machines down"),
    "start": (cmd_start, "start a stopped cluster (autostop stopped it), refresh its addresses, keep its host keys"),
    "demo": (cmd_demo, "provision the local cluster, train, collect, summary and plot"),
    "clusters": (cmd_clusters, "every tfcluster cluster of the region: age, instances, expiry, estimated $/hour"),
    "autostop": (cmd_autostop, "change a running cluster's idle autostop (IDLE, MODE, DOWN)"),
    "slurm-up": (cmd_slurm_up, "make the cluster's hosts one Slurm cluster (the slurm role), then CLUSTER=slurm works"),
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
    except (CommandError, KindError) as exc:
        print(f"tfcluster {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"\ntfcluster {args.command}: {interrupted_text(settings.job)}", file=sys.stderr)
        return 130


def interrupted_text(job: str) -> str:
    """What an interrupt (Ctrl-C) of any command says: the job belongs to the hosts and nothing stopped it."""
    return (f"interrupted. Nothing was stopped: a started job keeps running on its hosts. `make wait JOB={job}` "
            f"re-attaches (waits and collects), `make status JOB={job}` shows it, `make stop JOB={job}` stops it.")


if __name__ == "__main__":
    sys.exit(main())
