"""Action plugin: wait for a tfcluster job, on the control machine, in one bounded loop.

Every ``interval`` seconds it reads every task's status at once (a thread per host: ``python3 -m
tfcluster.host.jobstatus status SPEC`` over ssh, the way Ansible reaches the host - tfcluster.run.reach; a local slot
is read in-process), decides with tfcluster.run.wait.decide, emits a ``progress`` event and, at least every
``print_every`` seconds (and whenever a task changes state), prints one line per task. It returns when the job is
done or over (failed, stalled, preempted, timeout, stopped) with the culprit, its log tail and the failure summary
(tfcluster.run.failure) - and a ``decision`` event. It starts and stops nothing: the playbook stops every task on a
failed decision.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from tfcluster.core.contract import SLOT_ORDER, is_digits
from tfcluster.core.text import printable
from tfcluster.host import jobstatus
from tfcluster.host.jobspec import JobError
from tfcluster.run import events
from tfcluster.run.failure import summarize
from tfcluster.run.reach import Reach, ReachError
from tfcluster.run.view import task_line
from tfcluster.run.wait import OVER, RUNNING, Settings, decide, kind, log_lines, shown

DOCUMENTATION = r"""
name: wait
short_description: Wait for a tfcluster job with live progress; decide done, failed, stalled, preempted or timeout
description:
  - Runs once on the control machine (use C(run_once)). Polls every host in parallel, prints one line per task at
    least every C(print_every) seconds, returns the decision. Contacts hosts only to read status (read-only).
author: tfcluster
options:
  targets:
    description: Per host - C(slot), C(spec), C(unit) (systemd backend), C(python), C(pythonpath) (the release), and
      C(reach) (what tfcluster.cluster.reach_info returned for the host).
    type: dict
    required: true
  chief_host:
    description: Inventory name of the chief.
    type: str
    required: true
  job:
    description: The job id (for the lines printed).
    type: str
    default: ""
  interval:
    description: Seconds between polls.
    type: float
    default: 2
  print_every:
    description: Seconds between progress prints while nothing changes.
    type: float
    default: 10
  timeout:
    description: The wait's own limit in seconds (then the decision is timeout).
    type: float
    default: 86400
  stall_timeout:
    description: A running task whose status.json and log do not change for this long stalls the job.
    type: float
    default: 600
  max_duration:
    description: The job's deadline in seconds (named in a timeout's message; 0 - none).
    type: float
    default: 0
  require_done:
    description: The chief must have written DONE for the job to be done.
    type: bool
    default: true
  log_lines:
    description: Lines of the culprit's log returned.
    type: int
    default: 20
  once:
    description: Poll once and return (make status).
    type: bool
    default: false
"""

RETURN = r"""
decision: {description: running (once), done, failed, stalled, preempted, timeout or stopped, type: str}
culprit: {description: The host the decision is about (null when done), type: str}
message: {description: What happened and what to do, type: str}
log_tail: {description: The culprit's last log lines, type: list}
error: {description: "The culprit's exception: type, message, frame (null when none was found)", type: dict}
tasks: {description: One entry per task (host, slot, state, epoch, step, ...), type: list}
elapsed: {description: Seconds waited, type: float}
"""

display = Display()
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "targets": {"type": "dict", "required": True},
    "chief_host": {"type": "str", "required": True},
    "job": {"type": "str", "default": ""},
    "interval": {"type": "float", "default": 2.0},
    "print_every": {"type": "float", "default": 10.0},
    "timeout": {"type": "float", "default": 86400.0},
    "stall_timeout": {"type": "float", "default": 600.0},
    "max_duration": {"type": "float", "default": 0.0},
    "require_done": {"type": "bool", "default": True},
    "log_lines": {"type": "int", "default": 20},
    "once": {"type": "bool", "default": False},
}
SUMMARY_LINES = 400  # log lines read from the culprit to find its exception
CONTROL = ["-o", "ControlMaster=auto", "-o", "ControlPersist=60",
           "-o", "ControlPath=" + os.path.expanduser("~/.ansible/cp/tfcluster-wait-%C")]


def slot_key(slot: str) -> tuple[int, int]:
    """Slot order (contract.SLOT_ORDER, then index) of a ``type:index`` slot."""
    task_type, _, index = str(slot).partition(":")
    order = SLOT_ORDER.index(task_type) if task_type in SLOT_ORDER else len(SLOT_ORDER)
    return order, int(index) if is_digits(index) else 0


def status_words(target: Mapping[str, Any], lines: int) -> list[str]:
    words = ["env", f"PYTHONPATH={target['pythonpath']}", target["python"], "-m", "tfcluster.host.jobstatus",
             "status", target["spec"], "--lines", str(lines)]
    return words + (["--unit", target["unit"]] if target.get("unit") else [])


STDOUT_LIMIT = 1024 * 1024  # bytes of a host's status answer read (one JSON line; its log tail is 64 KiB at most)
STDERR_LIMIT = 64 * 1024  # bytes of its stderr read (ssh's last line says why it failed)
STDERR_GRACE = 1.0  # seconds stderr may stay open once the command ended and closed stdout (an ssh master's)


def read_bounded(argv: list[str], timeout: float) -> tuple[int, str, str, bool]:
    """Run ``argv``: (exit status, stdout, stderr, whether stdout was over STDOUT_LIMIT). At most STDOUT_LIMIT and
    STDERR_LIMIT bytes are kept (the rest is read and dropped: the command never blocks on a full pipe), decoded
    with U+FFFD for a bad byte. subprocess.TimeoutExpired (the command killed) after ``timeout`` s."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    limits = {proc.stdout: STDOUT_LIMIT, proc.stderr: STDERR_LIMIT}
    over, deadline = False, time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as selector:
            for pipe in kept:
                selector.register(pipe, selectors.EVENT_READ)
            while selector.get_map():
                ended = proc.stdout not in selector.get_map() and proc.poll() is not None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(argv, timeout)
                ready = selector.select(min(left, STDERR_GRACE) if ended else left)
                if not ready and ended:
                    break
                for key, _ in ready:
                    chunk = os.read(key.fd, 64 * 1024)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    buffer, pipe = kept[key.fileobj], key.fileobj
                    room = max(0, limits[pipe] - len(buffer))
                    buffer += chunk[:room]
                    over = over or (pipe is proc.stdout and len(chunk) > room)
        code = proc.wait(max(0.1, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    out, err = (bytes(kept[pipe]).decode("utf-8", "replace") for pipe in (proc.stdout, proc.stderr))
    return code, out, err, over


def poll(target: Mapping[str, Any], lines: int, timeout: float) -> dict[str, Any]:
    """{"status": ...} or {"error": text, "unreachable": bool} for one host."""
    try:
        reach = Reach.from_info(target["reach"])
    except (ReachError, KeyError, TypeError, ValueError) as error:
        return {"error": str(error), "unreachable": True}
    if reach.local:
        try:
            return {"status": jobstatus.status(target["spec"], target.get("unit") or None, lines)}
        except (JobError, OSError) as error:
            return {"error": str(error)}
    try:
        argv = reach.argv(status_words(target, lines), extra_ssh_options=CONTROL)
        returncode, stdout, stderr, over = read_bounded(argv, timeout)
    except (ReachError, OSError) as error:
        return {"error": str(error), "unreachable": True}
    except subprocess.TimeoutExpired:
        return {"error": f"no answer within {timeout:.0f} s", "unreachable": True}
    if returncode == 255:
        return {"error": printable((stderr.strip().splitlines() or ["ssh failed"])[-1], 400), "unreachable": True}
    if over:
        return {"error": f"its status answer is over {STDOUT_LIMIT // 1024} KiB, not read further (a host runs "
                         "tfcluster.host.jobstatus: its answer is one JSON line). Fix: check the release on the host "
                         "(make train re-deploys it)"}
    return parse_answer(returncode, stdout, stderr)


def parse_answer(returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    """A host's status answer (its last stdout line), any text: {"status": a JSON object with a ``state``} or
    {"error": text}. The status's fields are checked by tfcluster.run.wait.decide (status_problem)."""
    try:
        data = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError, RecursionError):
        return {"error": f"rc={returncode}: {printable((stderr or stdout).strip()[-400:])}"}
    if not isinstance(data, dict):
        return {"error": f"rc={returncode}: the answer is {kind(data)}, not a JSON object: {shown(data)}"}
    if "state" in data:
        return {"status": data}
    error = data.get("error")
    return {"error": printable(error, 400) if isinstance(error, str) else f"rc={returncode}: no state in {shown(data)}"}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def poll_all(self, targets: Mapping[str, Any], lines: int, timeout: float) -> dict[str, dict[str, Any]]:
        with ThreadPoolExecutor(max_workers=max(1, min(32, len(targets)))) as pool:
            futures = {host: pool.submit(poll, target, lines, timeout) for host, target in targets.items()}
            return {host: future.result() for host, future in futures.items()}

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        targets = dict(sorted(args["targets"].items(), key=lambda item: slot_key(item[1].get("slot", ""))))
        settings = Settings(chief=args["chief_host"], require_done=args["require_done"], timeout=args["timeout"],
                            stall_timeout=args["stall_timeout"], max_duration=args["max_duration"])
        slots = {host: str(target.get("slot", "")) for host, target in targets.items()}
        started, seen, printed, shown = time.time(), {}, 0.0, None
        while True:
            round_start = time.time()
            polls = self.poll_all(targets, args["log_lines"], max(30.0, args["interval"] * 5))
            out = decide(polls, slots, seen, now=time.time(), started=started, settings=settings)
            seen = out["seen"]
            events.emit("progress", tasks=out["tasks"], elapsed=out["elapsed"], decision=out["decision"])
            states = [task["state"] for task in out["tasks"]]
            over = args["once"] or out["decision"] != RUNNING
            if over or states != shown or time.time() - printed >= args["print_every"]:
                self.show(args["job"], out)
                printed, shown = time.time(), states
            if over:
                break
            time.sleep(max(0.0, args["interval"] - (time.time() - round_start)))
        result.update(self.verdict(out, targets, polls))
        return result

    @staticmethod
    def show(job: str, out: Mapping[str, Any]) -> None:
        display.display(f"[{out['elapsed']:.0f}s] job {printable(job)}: {printable(out['decision'])}")
        for task in out["tasks"]:
            display.display("  " + task_line(task))  # task_line escapes what the host wrote

    def verdict(self, out: Mapping[str, Any], targets: Mapping[str, Any],
                polls: Mapping[str, Any]) -> dict[str, Any]:
        culprit = out["culprit"]
        log_tail: list[str] = []
        error = None
        if culprit in targets and out["decision"] in OVER:
            log_tail = log_lines((polls.get(culprit) or {}).get("status"))
            error = summarize(log_lines(poll(targets[culprit], SUMMARY_LINES, 60.0).get("status")) or log_tail)
        events.emit("decision", decision=out["decision"], culprit=culprit, message=out["message"],
                    log_tail=log_tail, error=error)
        return {"changed": False, "decision": out["decision"], "culprit": culprit, "message": out["message"],
                "log_tail": log_tail, "error": error, "tasks": out["tasks"], "elapsed": out["elapsed"]}
