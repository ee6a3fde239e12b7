"""Keras callbacks of the training run: progress (status.json, timings, ETA), the epoch backup, the agreed stop.
Imports legacy Keras."""

from __future__ import annotations

import faulthandler
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tf_keras as keras

from trainer import artifacts
from trainer.backup import Agreement, TaskBackup
from trainer.stop import PREEMPTED, STOPPED, TRAINING, StopRequest
from trainer.timeline import Pace, Plan, Timeline, eta_seconds

LOG = logging.getLogger("trainer.train")
# What the tasks all-gather at a stop check: the highest code of any task wins (a spot notice over SIGTERM).
REASON_CODES: dict[str, int] = {STOPPED: 1, PREEMPTED: 2}


@dataclass
class Timings:
    epoch_times: list[float] = field(default_factory=list)
    boundaries: list[float] = field(default_factory=list)
    train_start: float = 0.0
    train_end: float = 0.0
    last_epoch_end: float = 0.0


class Progress(keras.callbacks.Callback):
    """status.json updates (epoch/step, the recent pace, loss, accuracy, ETA) and epoch timings."""

    def __init__(self, status: artifacts.StatusWriter, plan: Plan, timeline: Timeline, stop: StopRequest, *,
                 step_timer: Any = None) -> None:
        super().__init__()
        self.status, self.plan, self.timeline, self.stop = status, plan, timeline, stop
        self.step_timer = step_timer  # the task's own compute time of its last step (trainer/model.py), or None
        self.t = Timings()
        self.pace = Pace(plan.global_batch)
        self._epoch = 0
        self._epoch_start = 0.0
        self._last_step = 0
        self._rate_from: tuple[float, int] | None = None  # (time, steps done) after the first execution
        self._steps_done = 0
        self.epochs_completed = 0  # in this run, cut-short epochs excluded

    @property
    def current_epoch(self) -> int:
        return self._epoch

    def _steps_per_sec(self, now: float) -> float:
        if self._rate_from is None or now <= self._rate_from[0]:
            return 0.0
        return (self._steps_done - self._rate_from[1]) / (now - self._rate_from[0])

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.t.train_start = time.monotonic()
        self.stop.phase = TRAINING
        self.timeline.mark("fit_start")
        self.status.update(force=True, state="training", epochs=self.plan.epochs, steps_per_epoch=self.plan.steps,
                           startup_s=self.timeline.marks)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.monotonic()
        if self.t.last_epoch_end:
            self.t.boundaries.append(now - self.t.last_epoch_end)
        self._epoch, self._epoch_start = epoch, now
        self.status.update(force=True, epoch=epoch + 1, epochs_done=epoch, step=0)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.monotonic()
        self._steps_done += batch + 1 - self._last_step
        self._last_step = batch + 1
        if self._rate_from is None:
            self.timeline.mark("first_step")
            self._rate_from = (now, self._steps_done)
            self.status.update(force=True, startup_s=self.timeline.marks)
        elapsed = now - self._epoch_start
        rate = (batch + 1) * self.plan.global_batch / elapsed if elapsed > 0 else 0.0
        compute = float(self.step_timer.numpy()) if self.step_timer is not None else None
        self.pace.step(now, time.time(), self._steps_done, compute)
        pace = self.pace.fields()
        self.status.update(epoch=self._epoch + 1, epochs_done=self._epoch, step=batch + 1,
                           **{**pace, "examples_per_sec": pace["examples_per_sec"] or round(rate, 1)},
                           eta_seconds=eta_seconds(self.plan, self._epoch, batch + 1, self._steps_per_sec(now)))

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.monotonic()
        seconds = now - self._epoch_start
        self.t.epoch_times.append(seconds)
        if self._last_step >= self.plan.steps or not self._implements_train_batch_hooks():
            self.epochs_completed += 1
        self._last_step = 0
        logs = logs or {}
        rate = self.plan.steps * self.plan.global_batch / seconds if seconds > 0 else 0.0
        LOG.info("epoch %d/%d: %.1f s, %.0f examples/s, loss %.4f, accuracy %.4f", epoch + 1, self.plan.epochs,
                 seconds, rate, logs.get("loss", float("nan")), logs.get("accuracy", float("nan")))
        steps_per_sec = self._steps_per_sec(now) or (self.plan.steps / seconds if seconds > 0 else 0.0)
        self.status.update(force=True, epoch=epoch + 1, epochs_done=epoch + 1, step=self.plan.steps,
                           examples_per_sec=round(rate, 1), loss=float(logs.get("loss", 0.0)),
                           accuracy=float(logs.get("accuracy", 0.0)),
                           eta_seconds=eta_seconds(self.plan, epoch, self.plan.steps, steps_per_sec))
        self.t.last_epoch_end = time.monotonic()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.t.train_end = time.monotonic()
        if os.environ.get("TFCLUSTER_DEBUG_TEARDOWN"):
            # Where does fit() spend the time between its last epoch and returning? Dump the Python stacks.
            faulthandler.dump_traceback_later(float(os.environ["TFCLUSTER_DEBUG_TEARDOWN"]), repeat=True)


class EpochProgress(Progress):
    """Progress without batch hooks: ParameterServerStrategy's fit refuses batch-level callbacks. A thread reads the
    step counter the workers advance (the optimizer's ``iterations``, a variable on a ps task: one small remote read)
    every ``poll_s`` (the status interval) and reports it as the epoch's step, so the view, the stall check and the
    first-step mark see steps within an epoch, not only epochs."""

    def __init__(self, *args: Any, poll_s: float = 2.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._base: int | None = None  # the counter at this epoch's start; None between epochs
        self._ended = threading.Event()

    def _implements_train_batch_hooks(self) -> bool:
        return False

    def _iterations(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        super().on_train_begin(logs)
        threading.Thread(target=self._watch, name="step-watch", daemon=True).start()

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        base = self._iterations()
        with self._lock:
            super().on_epoch_begin(epoch, logs)
            self._base = base

    def _watch(self) -> None:
        while not self._ended.wait(self.poll_s):
            try:
                done = self._iterations()
            except Exception as exc:
                LOG.debug("step counter unreadable: %s", exc)
                continue
            with self._lock:
                if self._base is not None and min(done - self._base, self.plan.steps) > self._last_step:
                    self.on_train_batch_end(min(done - self._base, self.plan.steps) - 1)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        with self._lock:
            self._base = None
            super().on_epoch_end(epoch, logs)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._ended.set()
        super().on_train_end(logs)


class BackupEveryEpoch(keras.callbacks.Callback):
    """Saves the task's backup after each epoch, unless the epoch was cut short by a stop."""

    def __init__(self, backup: TaskBackup, interrupted: Callable[[], bool]) -> None:
        super().__init__()
        self.backup, self.interrupted = backup, interrupted

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if not self.interrupted():
            self.backup.save(epoch + 1)


class LocalStop(keras.callbacks.Callback):
    """One-process stop (mirrored, the PS coordinator): a stop request ends ``fit`` after the current step. No
    batch hook (ParameterServerStrategy refuses them): the request's listener sets ``stop_training``, from
    ``on_train_begin`` on (``fit`` resets it before)."""

    def __init__(self, stop: StopRequest) -> None:
        super().__init__()
        self.stop = stop

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.stop.add_listener(lambda: setattr(self.model, "stop_training", True))


class AgreedStop(keras.callbacks.Callback):
    """Multi-worker stop: every ``check_every`` batches all workers agree whether any of them was asked to stop (a
    spot notice, SIGTERM); if so, every worker saves a mid-epoch backup at the same step and training stops."""

    def __init__(self, stop: StopRequest, backup: TaskBackup, agree: Agreement, check_every: int,
                 steps: int) -> None:
        super().__init__()
        self.stop, self.backup, self.agree, self.check_every = stop, backup, agree, check_every
        self.steps = steps
        self.stopped = False
        self._calls = 0
        self._epoch = 0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._calls += 1
        if self._calls % self.check_every:
            return
        lowest, total = self.agree(-REASON_CODES.get(self.stop.reason or "", 0))
        if total:
            reason = next(name for name, code in REASON_CODES.items() if code == -lowest)
            self.stop.request(reason, "a peer task was asked to stop")  # no-op where this task was asked itself
            LOG.warning("stop agreed (%s): backing up at epoch %d batch %d and stopping", reason, self._epoch + 1,
                        batch + 1)
            if batch + 1 >= self.steps:  # the epoch's last step: it is complete
                self.backup.save(self._epoch + 1)
            else:
                self.backup.save(self._epoch, mid_epoch=True)
            self.stopped = True
            self.model.stop_training = True
