"""Run one tool (ansible-playbook, terraform through tfcluster.provision.local) for a `tfcluster` command: its whole
output into a log file, its events onto the terminal view; with VERBOSE the whole output on the terminal too."""

from __future__ import annotations

import codecs
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TextIO

from tfcluster.core.contract import unsafe
from tfcluster.core.paths import ANSIBLE_CFG, INVENTORY_SCRIPT, PLAYBOOKS, REPO_ROOT
from tfcluster.core.text import PrintableWriter
from tfcluster.run import events
from tfcluster.run.view import View

EVENTS_CALLBACK = "tfcluster.cluster.events"
POLL = 0.25  # seconds between reads of the events file


def write_extra_vars(directory: Path, trusted: Mapping[str, Any], untrusted: Mapping[str, Any]) -> Path:
    """The extra vars as a JSON file for ``-e @FILE`` (never shell words); ``untrusted`` strings are marked unsafe."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="extra-vars-", suffix=".json", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({**trusted, **unsafe(dict(untrusted))}, handle, indent=1, sort_keys=True)
    return Path(name)


def ansible_env(base: Mapping[str, str], events_file: Path | None, extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    env.update(extra)
    env["ANSIBLE_CONFIG"] = str(ANSIBLE_CFG)
    env["PYTHONUNBUFFERED"] = "1"
    env["ANSIBLE_NOCOLOR"] = env.get("ANSIBLE_NOCOLOR", "1")
    if events_file is not None:
        enabled = [c for c in env.get("ANSIBLE_CALLBACKS_ENABLED", "").split(",") if c.strip()]
        env["ANSIBLE_CALLBACKS_ENABLED"] = ",".join(dict.fromkeys([*enabled, EVENTS_CALLBACK]))
        env[events.ENV] = str(events_file)
    return env


def playbook_argv(playbook: str, extra_vars: Path, more: Sequence[str] = ()) -> list[str]:
    executable = Path(sys.executable).parent / "ansible-playbook"
    return [str(executable), "-i", str(INVENTORY_SCRIPT), str(PLAYBOOKS / playbook), "-e", f"@{extra_vars}", *more]


def _copy(source: IO[bytes], log: IO[bytes], terminal: TextIO) -> None:
    """Ansible's whole output to the log as it is, and to the terminal escaped (it carries hosts' text)."""
    shown = PrintableWriter(terminal)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for chunk in iter(lambda: source.read1(65536), b""):  # type: ignore[attr-defined]
        log.write(chunk)
        log.flush()
        shown.write(decoder.decode(chunk))
    shown.write(decoder.decode(b"", final=True))
    shown.close()


def pass_interrupt(proc: subprocess.Popen[bytes]) -> None:
    """Ctrl-C passed on to the child, then its end awaited, never through Popen's own lock: CPython's
    ``Popen.poll()`` takes ``_waitpid_lock`` one bytecode before its ``try``, so a KeyboardInterrupt landing there
    leaves the lock held, and ``proc.wait()`` then blocks forever."""
    if proc.returncode is not None:
        return
    try:
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
        if pid == 0:  # not reaped: the pid is still our child's, safe to signal
            os.kill(proc.pid, signal.SIGINT)
            pid, status = os.waitpid(proc.pid, 0)
    except ChildProcessError:  # reaped already, by the interrupted poll
        return
    proc.returncode = os.waitstatus_to_exitcode(status)


def run(argv: Sequence[str], *, env: Mapping[str, str], log: Path, view: View | None, verbose: bool,
        events_file: Path | None = None) -> int:
    """Run ``argv`` with its output appended to ``log`` (and on the terminal when verbose); render its events."""
    log.parent.mkdir(parents=True, exist_ok=True)
    offset = 0
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(list(argv), env=dict(env), cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE if verbose else out, stderr=subprocess.STDOUT)
        copier = None
        if verbose and proc.stdout is not None:
            copier = threading.Thread(target=_copy, args=(proc.stdout, out, sys.stdout), daemon=True)
            copier.start()
        try:
            while True:
                code = proc.poll()
                if events_file is not None and view is not None and not verbose:
                    new, offset = events.read_new(str(events_file), offset)
                    for event in new:
                        view.handle(event)
                if code is not None:
                    break
                time.sleep(POLL)
        except KeyboardInterrupt:
            pass_interrupt(proc)
            raise
        if copier is not None:
            copier.join()
    return code


def run_interactive(argv: Sequence[str], *, env: Mapping[str, str]) -> int:
    """Run ``argv`` on the terminal (Terraform's approval prompt, `make plan`)."""
    return subprocess.run(list(argv), env=dict(env), cwd=REPO_ROOT, check=False).returncode
