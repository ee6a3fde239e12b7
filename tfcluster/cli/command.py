"""One `tfcluster` command's run: its settings, the terminal view, the playbook and provision runs it makes, and the
extra vars they get (the settings' and the kind's)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfcluster.cli.settings import Settings
from tfcluster.core import contract, paths
from tfcluster.core.text import printable
from tfcluster.run import ansible as runner
from tfcluster.run.view import View, duration, failure_lines

EXIT_OK, EXIT_FAILED, EXIT_SETTINGS = 0, 1, 2

class CommandError(RuntimeError):
    """A step failed; the message says what and how to go on."""

# The gang-start play of playbooks/train.yml: a train whose playbook ended before it started nothing
# (tests/unit/cli/test_commands.py checks the name against train.yml).
START_STAGE = "Start every task at once"

LEDGER_EVENTS = ("stage_start", "stage_end", "decision", "collected")

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

# Settings that reach the roles as tfcluster_<name> when given (checked values: trusted); the roles' defaults hold
# otherwise. straggler..recover: job health (tfcluster/cli/health_knobs.py); allow_shared_network: local slots
# without a private network namespace (tfcluster/host/netns.py).
OPTIONAL_KNOBS = ("epochs", "max_duration", "stall", "unreachable_grace", "straggler", "hang", "netcheck", "recover",
                  "allow_shared_network")


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
    for name in OPTIONAL_KNOBS:
        if getattr(settings, name) is not None:
            trusted[f"tfcluster_{name}"] = getattr(settings, name)
    if settings.datasets:
        trusted["tfcluster_datasets"] = list(settings.datasets)
    if settings.prepare_force:
        trusted["tfcluster_prepare_force"] = True
    if os.environ.get(contract.ENV_S3_ENDPOINT_URL):
        untrusted["tfcluster_s3_endpoint_url"] = os.environ[contract.ENV_S3_ENDPOINT_URL]
    return trusted, untrusted

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
        return {**os.environ, **self.s.kind.inventory_env(self.s.target, os.environ)}

    def playbook(self, name: str, action: str, *, more_vars: Mapping[str, Any] | None = None) -> int:
        log = paths.log_file(self.job_dir, action)
        events_file = log.with_suffix(".events.jsonl")
        trusted, untrusted = playbook_vars(self.s)
        kind_vars = self.s.kind.playbook_vars(self.s.target)
        untrusted |= {k: v for k, v in kind_vars.items() if k not in (more_vars or {})}  # the command's own win
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
        argv = self.s.kind.provision_argv(self.s.target, action)
        env = self.env()
        if self.s.kind.asks_before_apply and not self.s.auto_approve:
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
