"""Action plugin: wait for a tfcluster job, on the control machine, in one bounded loop.

Every ``interval`` seconds it reads every task's status at once (a thread per host; a local slot is read
in-process). A host is asked over one ssh session that stays up (the way Ansible reaches the host -
tfcluster.run.reach): ``python3 -m tfcluster.host.jobstatus serve SPEC`` answers a status line for each line it
reads (:class:`Stream`), so a poll costs the status, not a Python start on the host and an ssh session each time; a
host whose release has no ``serve`` is asked with a ``status`` command per poll instead. It decides with
tfcluster.run.wait.decide, emits a ``progress`` event and, at least every ``print_every`` seconds (and whenever a
task changes state), prints one line per task. It returns when the job is done or over (failed, stalled, preempted,
timeout, stopped, unreachable) with the culprit, its log tail and the failure summary (tfcluster.run.failure) - and
a ``decision`` event. It starts and stops nothing: the playbook stops every task on a failed decision.

A host this machine cannot reach (ssh fails to connect, or no answer within the poll timeout) is retried with a
backoff (:func:`backoff`: ``interval`` doubled per failed poll, at most BACKOFF_MAX s) and shown as "unreachable from
here (12 s, retrying)"; it fails the job only after ``unreachable_grace`` (see tfcluster.run.wait). A slow poll
never holds the others: each host has at most one poll in flight, and a round uses each host's latest answer
(:class:`Poller`). What the wait will not wait for (its own limit, the grace, the stall) is printed when it starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from tfcluster.core.contract import SLOT_ORDER, is_digits
from tfcluster.core.duration import duration_text
from tfcluster.core.text import printable
from tfcluster.host import jobstatus
from tfcluster.host.jobspec import JobError
from tfcluster.run import events, stacks
from tfcluster.run.answer import kind, log_lines, shown
from tfcluster.run.bounded import CLOSE_GRACE, STDERR_GRACE, STDERR_LIMIT, STDOUT_LIMIT, read_bounded
from tfcluster.run.failure import summarize
from tfcluster.run.gone import InstanceCheck
from tfcluster.run.health import HealthSettings
from tfcluster.run.reach import Reach, ReachError
from tfcluster.run.view import task_line
from tfcluster.run.wait import OVER, RUNNING, STALLED, Settings, decide

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
    description: The wait's own limit in seconds (then the decision is timeout); 0 - none (the hosts hold the job's
      deadline, MAX_DURATION).
    type: float
    default: 0
  stall_timeout:
    description: Seconds without progress that stall the job - while a task's status.json says C(training), its
      epoch and step must advance (at an epoch boundary twice this plus the longest epoch seen); another phase is
      progress; a task that names no phase must change its status.json or log. 0 - off.
    type: float
    default: 600
  unreachable_grace:
    description: Seconds a host may stay unreachable from here before the job fails naming it (every host
      unreachable that long - the decision C(unreachable), nothing stopped). Until then it is retried with a backoff.
    type: float
    default: 1800
  max_duration:
    description: The job's deadline in seconds (named in a timeout's message; 0 - none).
    type: float
    default: 0
  straggler_below:
    description: A task whose pace stays this share under the median of the others' is named a straggler (0 - off).
    type: float
    default: 0.15
  straggler_after:
    description: Seconds a task must stay that slow before it is named.
    type: float
    default: 120
  hang_factor:
    description: No task stepping for this many times its usual time between steps (at least 60 s) is a hang (the
      decision C(stalled), found before the stall time; 0 - off).
    type: float
    default: 10
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
  stacks:
    description: With C(once) - also read and show every task's Python stacks, the task behind first (make stacks).
    type: bool
    default: false
  instances:
    description: Host -> its cloud instance id (CLUSTER=aws); a host unreachable from here whose instance EC2 says is
      gone fails the job at once, naming it (tfcluster/run/gone.py).
    type: dict
    default: {}
  region:
    description: The instances' region.
    type: str
    default: ""
"""

RETURN = r"""
decision: {description: "running (once), done, failed, stalled, preempted, timeout, stopped or unreachable (every
    host unreachable from here beyond the grace: nothing can be stopped)", type: str}
culprit: {description: The host the decision is about (null when done), type: str}
message: {description: What happened and what to do, type: str}
log_tail: {description: The culprit's last log lines, type: list}
error: {description: "The culprit's exception: type, message, frame (null when none was found)", type: dict}
tasks: {description: One entry per task (host, slot, state, epoch, step, ...), type: list}
servers: {description: "done - the ps and worker tasks still serving after their ParameterServer chief finished,
    for the playbook to stop", type: list}
elapsed: {description: Seconds waited, type: float}
"""

display = Display()
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "targets": {"type": "dict", "required": True},
    "chief_host": {"type": "str", "required": True},
    "job": {"type": "str", "default": ""},
    "interval": {"type": "float", "default": 2.0},
    "print_every": {"type": "float", "default": 10.0},
    "timeout": {"type": "float", "default": 0.0},
    "stall_timeout": {"type": "float", "default": 600.0},
    "unreachable_grace": {"type": "float", "default": 1800.0},
    "max_duration": {"type": "float", "default": 0.0},
    "straggler_below": {"type": "float", "default": 0.15},
    "straggler_after": {"type": "float", "default": 120.0},
    "hang_factor": {"type": "float", "default": 10.0},
    "require_done": {"type": "bool", "default": True},
    "log_lines": {"type": "int", "default": 20},
    "once": {"type": "bool", "default": False},
    "stacks": {"type": "bool", "default": False},
    "instances": {"type": "dict", "default": {}},
    "region": {"type": "str", "default": ""},
}
SUMMARY_LINES = 400  # log lines read from the culprit to find its exception
CONTROL = ["-o", "ControlMaster=auto", "-o", "ControlPersist=60",
           "-o", "ControlPath=" + os.path.expanduser("~/.ansible/cp/tfcluster-wait-%C")]


def slot_key(slot: str) -> tuple[int, int]:
    """Slot order (contract.SLOT_ORDER, then index) of a ``type:index`` slot."""
    task_type, _, index = str(slot).partition(":")
    order = SLOT_ORDER.index(task_type) if task_type in SLOT_ORDER else len(SLOT_ORDER)
    return order, int(index) if is_digits(index) else 0


def status_words(target: Mapping[str, Any], lines: int, command: str = "status") -> list[str]:
    words = ["env", f"PYTHONPATH={target['pythonpath']}", target["python"], "-m", "tfcluster.host.jobstatus",
             command, target["spec"], "--lines", str(lines)]
    return words + (["--unit", target["unit"]] if target.get("unit") else [])


def poll(target: Mapping[str, Any], lines: int, timeout: float) -> dict[str, Any]:
    """{"status": ...} or {"error": text, "unreachable": bool} for one host. Unreachable: ssh could not connect
    (exit 255), the answer did not come within ``timeout``, or no ssh could start; a bad target is not (no retry
    mends it)."""
    try:
        reach = Reach.from_info(target["reach"])
    except (ReachError, KeyError, TypeError, ValueError) as error:
        return {"error": f"cannot reach it: {error}. Fix: check its inventory entry"}
    if reach.local:
        try:
            return {"status": jobstatus.status(target["spec"], target.get("unit") or None, lines)}
        except (JobError, OSError) as error:
            return {"error": str(error)}
    try:
        argv = reach.argv(status_words(target, lines), extra_ssh_options=CONTROL)
        returncode, stdout, stderr, over = read_bounded(argv, timeout)
    except ReachError as error:
        return {"error": f"cannot reach it: {error}"}
    except OSError as error:  # no ssh could start (too many processes): it may next time
        return {"error": str(error), "unreachable": True}
    except subprocess.TimeoutExpired:
        return {"error": f"no answer within {timeout:.0f} s", "unreachable": True}
    if returncode == 255:
        return {"error": printable((stderr.strip().splitlines() or ["ssh failed"])[-1], 400), "unreachable": True}
    if over:
        return over_limit()
    return parse_answer(returncode, stdout, stderr)


def over_limit() -> dict[str, Any]:
    return {"error": f"its status answer is over {STDOUT_LIMIT // 1024} KiB, not read further (a host runs "
                     "tfcluster.host.jobstatus: its answer is one JSON line). Fix: check the release on the host "
                     "(make train re-deploys it)"}


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


class Stream:
    """One host's ``jobstatus serve`` over one ssh session: :meth:`ask` writes a line and reads the answer line.
    The same limits as :func:`read_bounded`: an answer over STDOUT_LIMIT, or none within the timeout, ends the
    process (a later ask starts a new one); stderr is drained, its last STDERR_LIMIT bytes kept."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.proc: subprocess.Popen[bytes] | None = None
        self.out, self.err = bytearray(), bytearray()
        self.open: set[Any] = set()
        self.answered = False  # any process of this stream ever answered (its release has `serve`)
        self.closed = self.busy = False
        self.lock = threading.Lock()

    def ask(self, timeout: float) -> tuple[str, Any]:
        """("line", text), ("over", None), ("timeout", None) or ("ended", (exit status, stderr)): the process ended
        without answering. OSError when no process could start."""
        with self.lock:
            if self.closed:
                return "ended", (None, "the wait is ending")
            if self.proc is None:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE)
                self.out, self.err = bytearray(), bytearray()
                self.open = {self.proc.stdout, self.proc.stderr}
            proc, self.busy = self.proc, True
        try:
            return self._ask(proc, time.monotonic() + timeout)
        finally:
            with self.lock:
                self.busy = False
                if self.closed or proc is not self.proc:
                    _reap(proc)

    def _ask(self, proc: subprocess.Popen[bytes], deadline: float) -> tuple[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):  # it ended (or the wait hung up): read how, below
            proc.stdin.write(b"\n")
            proc.stdin.flush()
        with selectors.DefaultSelector() as selector:
            for pipe in self.open:
                selector.register(pipe, selectors.EVENT_READ)
            while True:
                end = self.out.find(b"\n")
                if end >= 0:
                    line = bytes(self.out[:end]).decode("utf-8", "replace")
                    del self.out[:end + 1]
                    self.answered = True
                    return "line", line
                if len(self.out) > STDOUT_LIMIT:
                    self._end()
                    return "over", None
                left = deadline - time.monotonic()
                if left <= 0:
                    self._end()
                    return "timeout", None
                if proc.stdout not in self.open:  # no answer will come: how did it end?
                    return self._ended(proc, selector, deadline)
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 64 * 1024)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        self.open.discard(key.fileobj)
                    elif key.fileobj is proc.stdout:
                        self.out += chunk
                    else:
                        self.err = (self.err + chunk)[-STDERR_LIMIT:]

    def _ended(self, proc: subprocess.Popen[bytes], selector: selectors.BaseSelector,
               deadline: float) -> tuple[str, Any]:
        """Its exit status and stderr (at most STDERR_GRACE s more for a stderr an ssh master holds open)."""
        try:
            code = proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # its output closed, and it goes on: as good as no answer
            self._end()
            return "timeout", None
        grace = time.monotonic() + STDERR_GRACE
        while selector.get_map() and time.monotonic() < grace:
            for key, _ in selector.select(max(0.0, grace - time.monotonic())):
                chunk = os.read(key.fd, 64 * 1024)
                if not chunk:
                    selector.unregister(key.fileobj)
                self.err = (self.err + chunk)[-STDERR_LIMIT:]
        err = bytes(self.err).decode("utf-8", "replace")
        self._end()
        return "ended", (code, err)

    def _end(self) -> None:
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is not None:
            _reap(proc)

    def hang_up(self) -> None:
        """Close its input: the host's ``serve`` reads end of input and exits, and ssh with it. No ask after it."""
        with self.lock:
            self.closed = True
            if self.proc is not None and self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()

    def close(self, deadline: float) -> None:
        """After :meth:`hang_up`: wait for the process to end until ``deadline`` (time.monotonic), then kill it; an
        ask in flight reaps it when it returns."""
        with self.lock:
            proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
        with self.lock:
            with contextlib.suppress(OSError):
                proc.kill()
            if not self.busy:
                self.proc = None
                _reap(proc)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


class Streams:
    """The poll of :class:`Poller`: a host is asked through its :class:`Stream`; a local slot, and a host whose
    release has no ``serve`` (its stream ended before it ever answered), the way :func:`poll` does."""

    def __init__(self) -> None:
        self.streams: dict[str, Stream] = {}
        self.oneshot: set[str] = set()
        self.lock = threading.Lock()

    def poll(self, target: Mapping[str, Any], lines: int, timeout: float) -> dict[str, Any]:
        try:
            reach = Reach.from_info(target["reach"])
            argv = None if reach.local else reach.argv(status_words(target, lines, "serve"), extra_ssh_options=CONTROL)
        except (ReachError, KeyError, TypeError, ValueError):
            argv = None
        key = json.dumps(argv)
        if argv is None or key in self.oneshot:
            return poll(target, lines, timeout)
        with self.lock:
            stream = self.streams.setdefault(key, Stream(argv))
        started = time.monotonic()
        try:
            kind_, value = stream.ask(timeout)
        except OSError as error:  # no ssh could start (too many processes): it may next time
            return {"error": str(error), "unreachable": True}
        if kind_ == "line":
            return parse_answer(0, value, "")
        if kind_ == "over":
            return over_limit()
        if kind_ == "timeout":
            return {"error": f"no answer within {timeout:.0f} s", "unreachable": True}
        code, stderr = value
        if code == 255:
            return {"error": printable((stderr.strip().splitlines() or ["ssh failed"])[-1], 400), "unreachable": True}
        if not stream.answered:
            self.oneshot.add(key)  # an older release (no `serve`), or the host cannot run it: one command per poll
        return poll(target, lines, max(1.0, timeout - (time.monotonic() - started)))

    def close(self) -> None:
        """Hang up every session, give them CLOSE_GRACE s together to end, kill what is left."""
        with self.lock:
            streams = list(self.streams.values())
        for stream in streams:
            stream.hang_up()
        deadline = time.monotonic() + CLOSE_GRACE
        for stream in streams:
            stream.close(deadline)


BACKOFF_MAX = 60.0  # seconds between two polls of a host unreachable from here, at most


def backoff(failures: int, interval: float) -> float:
    """Seconds before a host is polled again after ``failures`` unreachable answers in a row: ``interval`` doubled
    per failure (2, 4, 8 ... for a 1 s interval), at most BACKOFF_MAX."""
    return min(BACKOFF_MAX, interval * 2.0 ** min(max(failures, 0), 16))


def is_unreachable(answer: object) -> bool:
    return isinstance(answer, Mapping) and answer.get("unreachable") is True


class Poller:
    """Each host's latest answer. At most one poll per host is in flight; a host unreachable from here is polled
    again only after :func:`backoff`; a round waits at most ``wait`` s for the polls in flight (the first round
    waits for every host), so a host whose ssh hangs keeps its previous answer while the others go on."""

    def __init__(self, targets: Mapping[str, Mapping[str, Any]], lines: int, timeout: float, interval: float, *,
                 poll_fn: Callable[[Mapping[str, Any], int, float], dict[str, Any]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.targets, self.lines, self.timeout, self.interval = targets, lines, timeout, interval
        self.streams = Streams()
        self.poll_fn, self.clock = poll_fn or self.streams.poll, clock
        self.pool = ThreadPoolExecutor(max_workers=max(1, min(32, len(targets))))
        self.answers: dict[str, dict[str, Any]] = {}
        self.failures = dict.fromkeys(targets, 0)
        self.due = dict.fromkeys(targets, 0.0)
        self.inflight: dict[str, Future[dict[str, Any]]] = {}

    def round(self, wait: float) -> dict[str, dict[str, Any]]:
        """Start the polls that are due, wait for answers, and return every host's latest answer (slot order)."""
        now = self.clock()
        for host, target in self.targets.items():
            if host not in self.inflight and now >= self.due[host]:
                self.inflight[host] = self.pool.submit(self.poll_fn, target, self.lines, self.timeout)
        first = any(host not in self.answers for host in self.targets)
        wait_for(list(self.inflight.values()), timeout=None if first else wait)
        for host, future in list(self.inflight.items()):
            if future.done():
                del self.inflight[host]
                self.record(host, _result(future))
        return {host: self.answers[host] for host in self.targets if host in self.answers}

    def record(self, host: str, answer: dict[str, Any]) -> None:
        self.answers[host] = answer
        self.failures[host] = self.failures[host] + 1 if is_unreachable(answer) else 0
        self.due[host] = self.clock() + backoff(self.failures[host], self.interval) if self.failures[host] else 0.0

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.streams.close()


def _result(future: Future[dict[str, Any]]) -> dict[str, Any]:
    try:
        return future.result()
    except Exception as error:  # a poll that broke is a status nobody can read, not an unreachable host
        return {"error": f"the poll failed: {type(error).__name__}: {error}"}


def limits_text(job: str, settings: Settings) -> str:
    """What the wait will not wait for, said when it starts: its own limit, the unreachable grace, the stall."""
    limit = (f"it gives up after {duration_text(settings.timeout)} (tf_job_wait_timeout; by default MAX_DURATION "
             "plus a margin)" if settings.timeout > 0
             else "no time limit of its own (MAX_DURATION, held by the hosts, ends a job)")
    stall = (f"a task that makes no progress for {duration_text(settings.stall_timeout)} stalls it (STALL)"
             if settings.stall_timeout > 0 else "no stall check (STALL=off)")
    return (f"waiting for job {job}: {limit}; a host unreachable from here is retried for up to "
            f"{duration_text(settings.unreachable_grace)} (UNREACHABLE_GRACE); {stall}. Interrupting this command "
            "leaves the job running: `make wait` re-attaches")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        targets = dict(sorted(args["targets"].items(), key=lambda item: slot_key(item[1].get("slot", ""))))
        health = HealthSettings(below=args["straggler_below"], after=args["straggler_after"],
                                hang_factor=args["hang_factor"])
        settings = Settings(chief=args["chief_host"], require_done=args["require_done"], timeout=args["timeout"],
                            stall_timeout=args["stall_timeout"], max_duration=args["max_duration"],
                            unreachable_grace=args["unreachable_grace"], retrying=not args["once"], health=health)
        if not args["once"]:
            text = limits_text(printable(args["job"]), settings)
            display.display(text)
            events.emit("notice", msg=text)
        poller = Poller(targets, args["log_lines"], max(30.0, args["interval"] * 5), args["interval"])
        try:
            out, polls = self.loop(args, targets, settings, poller)
        finally:
            poller.close()
        result.update(self.verdict(out, targets, polls))
        if args["once"] and args["stacks"]:
            result["stacks"] = self.stacks(targets, out["seen"], None)
        return result

    def loop(self, args: Mapping[str, Any], targets: Mapping[str, Any], settings: Settings,
             poller: Poller) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Poll, decide, show, until the decision is not running (once: one round)."""
        slots = {host: str(target.get("slot", "")) for host, target in targets.items()}
        started, seen, printed, shown = time.time(), {}, 0.0, None
        instances = InstanceCheck(args["instances"], args["region"])
        while True:
            round_start = time.time()
            polls = instances.mark(poller.round(args["interval"]), poller.failures)
            out = decide(polls, slots, seen, now=time.time(), started=started, settings=settings)
            seen = out["seen"]
            events.emit("progress", tasks=out["tasks"], elapsed=out["elapsed"], decision=out["decision"],
                        note=out["note"])
            # A change of state prints at once; an unreachable host's growing seconds do not count as one.
            states = [str(task["state"]).partition(" (")[0] for task in out["tasks"]]
            over = args["once"] or out["decision"] != RUNNING
            if over or states != shown or time.time() - printed >= args["print_every"]:
                self.show(args["job"], out)
                printed, shown = time.time(), states
            if over:
                return out, polls
            time.sleep(max(0.0, args["interval"] - (time.time() - round_start)))

    @staticmethod
    def show(job: str, out: Mapping[str, Any]) -> None:
        display.display(f"[{out['elapsed']:.0f}s] job {printable(job)}: {printable(out['decision'])}")
        if out.get("note"):
            display.display(f"  note: {printable(out['note'], 600)}")  # it quotes ssh's error
        for task in out["tasks"]:
            display.display("  " + task_line(task))  # task_line escapes what the host wrote

    def verdict(self, out: Mapping[str, Any], targets: Mapping[str, Any],
                polls: Mapping[str, Any]) -> dict[str, Any]:
        culprit = out["culprit"]
        log_tail: list[str] = []
        error = None
        if culprit in targets and out["decision"] in OVER and not is_unreachable(polls.get(culprit)):
            log_tail = log_lines((polls.get(culprit) or {}).get("status"))
            error = summarize(log_lines(poll(targets[culprit], SUMMARY_LINES, 60.0).get("status")) or log_tail)
        events.emit("decision", decision=out["decision"], culprit=culprit, message=out["message"],
                    log_tail=log_tail, error=error, servers=out["servers"], stragglers=out["stragglers"])
        if out["decision"] == STALLED:  # where every task was: read before the playbook stops them
            self.stacks(targets, out["seen"], culprit)
        return {"changed": False, "decision": out["decision"], "culprit": culprit, "message": out["message"],
                "log_tail": log_tail, "error": error, "tasks": out["tasks"], "servers": out["servers"],
                "stragglers": out["stragglers"], "elapsed": out["elapsed"]}

    @staticmethod
    def stacks(targets: Mapping[str, Any], seen: Mapping[str, Any], behind: str | None) -> list[str]:
        """Every task's Python stacks (tfcluster/run/stacks.py), the task behind first: shown and emitted."""
        slots = {host: str(target.get("slot", "")) for host, target in targets.items()}
        text = stacks.lines(stacks.gather(targets), slots, stacks.order(list(targets), seen, behind), behind)
        for line in text:
            display.display(line)
        events.emit("stacks", lines=text)
        return text
