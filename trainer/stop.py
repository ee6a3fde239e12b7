"""Stopping early, after a backup: a spot notice or SIGTERM asks training to stop (exit 3). No TensorFlow here.

SIGTERM is what systemd sends at the job's deadline (``RuntimeMaxSec=``) and on ``systemctl stop``, and what the
process backend's supervisor sends at the deadline. It is received by a thread of its own (``sigwait`` with the
signal blocked everywhere else), so it is seen even while the main thread is inside TensorFlow, e.g. connecting to
peers that never come:

* before training starts: nothing new exists to save, so the task writes its status and exits 3 at once;
* while training: the same stop request as a spot notice (every task saves a backup at an agreed step, exit 3);
* after training (exporting, writing the artifacts): ignored, the task finishes its work.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

LOG = logging.getLogger("trainer.stop")

# status.json `state` of a task that stopped after a backup, by reason (contract.JOB_STATES has both names).
PREEMPTED = "preempted"  # a spot interruption notice
STOPPED = "stopped"  # SIGTERM: a deadline, `systemctl stop`, the supervisor

STARTING, TRAINING, FINISHING = "starting", "training", "finishing"


class StopRequest:
    """Why training must stop early; the first reason wins. Thread-safe: the spot watcher and the SIGTERM thread
    request, the training loop polls (``is_set``) or listens (``add_listener``, called in the requesting thread)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: str | None = None
        self.detail = ""
        self.phase = STARTING
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def request(self, reason: str, detail: str = "") -> bool:
        """Ask for a stop; False when one was already asked for."""
        with self._lock:
            if self.event.is_set():
                return False
            self.reason, self.detail = reason, detail
            self.event.set()
            listeners = list(self._listeners)
        LOG.warning("stop requested (%s): %s", reason, detail)
        for listener in listeners:
            listener()
        return True

    def is_set(self) -> bool:
        return self.event.is_set()

    def add_listener(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(listener)
            already = self.event.is_set()
        if already:
            listener()


def on_sigterm(stop: StopRequest, exit_now: Callable[[], None]) -> None:
    """What one SIGTERM does, by the phase of the run (see the module docstring)."""
    if stop.phase == STARTING:
        stop.request(STOPPED, "SIGTERM before training started")
        exit_now()
    elif stop.phase == TRAINING:
        stop.request(STOPPED, "SIGTERM: backing up at the next step boundary")
    else:
        LOG.warning("SIGTERM while finishing: the artifacts are written first")


def watch_sigterm(stop: StopRequest, exit_now: Callable[[], None]) -> threading.Thread:
    """Block SIGTERM in this thread (call before any other thread exists: they inherit the mask) and handle it in a
    daemon thread of its own."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def loop() -> None:
        while True:
            signal.sigwait({signal.SIGTERM})
            on_sigterm(stop, exit_now)

    thread = threading.Thread(target=loop, name="sigterm", daemon=True)
    thread.start()
    return thread
