"""The training run: strategy -> data -> model -> resume -> fit -> chief artifacts. Imports TensorFlow and tf_keras.

Call :func:`run` only through :func:`trainer.cli.main`, which validates the input and selects legacy Keras first.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tensorflow as tf
import tf_keras as keras

from trainer import artifacts, data, spot
from trainer import strategy as strategies
from trainer.config import EXIT_OK, EXIT_PREEMPTED, Invocation
from trainer.model import build_model, compile_model, set_precision

LOG = logging.getLogger("trainer.train")
# Backup numbers: completed_epochs * STRIDE (+1 for a mid-epoch save before a spot interruption).
STRIDE = 10
KEEP_BACKUPS = 3


class Preempted(Exception):
    """A spot notice stopped training after a backup was saved."""


# --- resume state ---------------------------------------------------------------------------------------------------

class TaskBackup:
    """Per-task resume state: model + optimizer + completed epochs + resume count, in ``backup/<task>/``.

    Keras' own BackupAndRestore makes every worker *read* the chief's directory (non-chief tasks only write a temp
    copy and delete it), which needs a filesystem shared by all hosts. Our hosts share none, so each task keeps and
    reads its own copy; after reading, the tasks agree on the newest state all of them hold (see ``agree``).
    """

    def __init__(self, directory: str, model: keras.Model, io_device: str | None = None) -> None:
        # Under ParameterServerStrategy the variables live on the ps tasks; without an io device the ps hosts would
        # write (and read) the files there, where this task's directory does not exist (no shared disk).
        self.options = tf.train.CheckpointOptions(experimental_io_device=io_device)
        self.completed_epochs = tf.Variable(0, dtype=tf.int64, trainable=False, name="completed_epochs")
        self.resumes = tf.Variable(0, dtype=tf.int64, trainable=False, name="resumes")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer,
                                              completed_epochs=self.completed_epochs, resumes=self.resumes)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=KEEP_BACKUPS,
                                                  checkpoint_name="backup")
        # Create the checkpoint's save counter now, outside any strategy scope. Created lazily (at the first save,
        # inside fit's scope on one worker but at restore time on another) it became a mirrored variable on some
        # workers only, and its creation broadcast mismatched the other workers' collectives.
        _ = self.checkpoint.save_counter

    def numbers(self) -> list[int]:
        return sorted(int(p.rsplit("-", 1)[1]) for p in self.manager.checkpoints)

    def restore(self, number: int) -> None:
        paths = [p for p in self.manager.checkpoints if p.endswith(f"-{number}")]
        if not paths:
            raise RuntimeError(f"backup {number} is missing in {self.manager.directory}; this task holds "
                               f"{self.numbers()}. Fix: remove every task's backup/ to start over")
        self.checkpoint.restore(paths[0], options=self.options).expect_partial()

    def save(self, completed_epochs: int, mid_epoch: bool = False) -> str:
        self.completed_epochs.assign(completed_epochs)
        return self.manager.save(checkpoint_number=completed_epochs * STRIDE + int(mid_epoch), options=self.options)


class Agreement:
    """(min, sum) of one integer over every replica of every worker: a tiny all-gather, traced once.

    Every worker must call it at the same point (it is a collective under multi-worker strategies)."""

    def __init__(self, strategy: tf.distribute.Strategy) -> None:
        self.strategy = strategy
        self.local = isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy) or \
            strategy.num_replicas_in_sync == 1
        if not self.local:
            self._gather = tf.function(self._gather_fn)

    def _gather_fn(self, value: tf.Tensor) -> tf.Tensor:
        per_replica = self.strategy.run(lambda: tf.reshape(value, [1]))
        return self.strategy.gather(per_replica, axis=0)

    def __call__(self, value: int) -> tuple[int, int]:
        if self.local:
            return value, value
        values = [int(v) for v in self._gather(tf.constant(value, dtype=tf.int64)).numpy()]
        return min(values), sum(values)


def restore_newest(backup: TaskBackup, agreement: Agreement, strategy: tf.distribute.Strategy) -> int:
    """Every task continues from the newest backup any task holds; returns its number (0 = fresh start).

    Tasks that hold it restore it; under multi-worker strategies the state is then averaged over the holders (they
    hold identical state: training is synchronous) and every task takes it, so a worker whose disk was replaced
    (a new spot instance) or whose last save was cut short is brought up to date instead of restarting the job."""
    held = backup.numbers()
    mine = held[-1] if held else 0
    newest = -agreement(-mine)[0]
    if not newest:
        return 0
    holder = newest in held
    if holder:
        backup.restore(newest)
    if agreement.local:
        return newest
    _, holders = agreement(int(holder))
    if holders == strategy.num_replicas_in_sync:
        return newest
    LOG.info("backup %d is held by %d of %d replicas: sharing it", newest, holders, strategy.num_replicas_in_sync)
    share = [*backup.checkpoint.model.weights, *backup.checkpoint.optimizer.variables(), backup.completed_epochs,
             backup.resumes]
    for var in share:
        wide = tf.float64 if var.dtype.is_integer else var.dtype
        local = tf.cast(tf.convert_to_tensor(var), wide) if holder else tf.zeros(var.shape, wide)
        total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.identity, args=(local,)), axis=None)
        mean = total / holders
        var.assign(tf.cast(tf.round(mean), var.dtype) if var.dtype.is_integer else mean)
    return newest


# --- callbacks ------------------------------------------------------------------------------------------------------

@dataclass
class Timings:
    epoch_times: list[float] = field(default_factory=list)
    boundaries: list[float] = field(default_factory=list)
    train_start: float = 0.0
    train_end: float = 0.0
    last_epoch_end: float = 0.0


class Progress(keras.callbacks.Callback):
    """status.json updates and epoch timings (examples/s, epoch-boundary gaps)."""

    def __init__(self, status: artifacts.StatusWriter, epochs: int, steps: int, global_batch: int) -> None:
        super().__init__()
        self.status, self.epochs, self.steps, self.global_batch = status, epochs, steps, global_batch
        self.t = Timings()
        self._epoch = 0
        self._epoch_start = 0.0
        self._last_step = 0
        self.epochs_completed = 0  # in this run, cut-short epochs excluded

    @property
    def current_epoch(self) -> int:
        return self._epoch

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.t.train_start = time.monotonic()
        self.status.update(force=True, state="training", epochs=self.epochs, steps_per_epoch=self.steps)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.monotonic()
        if self.t.last_epoch_end:
            self.t.boundaries.append(now - self.t.last_epoch_end)
        self._epoch, self._epoch_start = epoch, now
        self.status.update(force=True, epoch=epoch + 1, epochs_done=epoch, step=0)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._last_step = batch + 1
        elapsed = time.monotonic() - self._epoch_start
        rate = (batch + 1) * self.global_batch / elapsed if elapsed > 0 else 0.0
        self.status.update(epoch=self._epoch + 1, epochs_done=self._epoch, step=batch + 1,
                           examples_per_sec=round(rate, 1))

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.monotonic()
        seconds = now - self._epoch_start
        self.t.epoch_times.append(seconds)
        if self._last_step >= self.steps or not self._implements_train_batch_hooks():
            self.epochs_completed += 1
        self._last_step = 0
        logs = logs or {}
        rate = self.steps * self.global_batch / seconds if seconds > 0 else 0.0
        LOG.info("epoch %d/%d: %.1f s, %.0f examples/s, loss %.4f, accuracy %.4f", epoch + 1, self.epochs, seconds,
                 rate, logs.get("loss", float("nan")), logs.get("accuracy", float("nan")))
        self.status.update(force=True, epoch=epoch + 1, epochs_done=epoch + 1, step=self.steps,
                           examples_per_sec=round(rate, 1),
                           loss=float(logs.get("loss", 0.0)), accuracy=float(logs.get("accuracy", 0.0)))
        self.t.last_epoch_end = time.monotonic()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.t.train_end = time.monotonic()
        if os.environ.get("TFCLUSTER_DEBUG_TEARDOWN"):
            # Where does fit() spend the time between its last epoch and returning? Dump the Python stacks.
            faulthandler.dump_traceback_later(float(os.environ["TFCLUSTER_DEBUG_TEARDOWN"]), repeat=True)


class EpochProgress(Progress):
    """Progress without batch hooks: ParameterServerStrategy's fit refuses batch-level callbacks."""

    def _implements_train_batch_hooks(self) -> bool:
        return False


class BackupEveryEpoch(keras.callbacks.Callback):
    """Saves the task's backup after each epoch, unless the epoch was cut short by a spot interruption."""

    def __init__(self, backup: TaskBackup, interrupted: Callable[[], bool]) -> None:
        super().__init__()
        self.backup, self.interrupted = backup, interrupted

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if not self.interrupted():
            self.backup.save(epoch + 1)


class SpotStop(keras.callbacks.Callback):
    """Every ``check_every`` batches all workers agree whether any of them got a spot notice; if so, every worker
    saves a mid-epoch backup at the same step and training stops (exit 3)."""

    def __init__(self, watcher: spot.SpotWatcher | None, backup: TaskBackup, agree: Agreement,
                 check_every: int, steps: int) -> None:
        super().__init__()
        self.watcher, self.backup, self.agree, self.check_every = watcher, backup, agree, check_every
        self.steps = steps
        self.preempted = False
        self._calls = 0
        self._epoch = 0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._calls += 1
        if self._calls % self.check_every:
            return
        local = int(self.watcher is not None and self.watcher.event.is_set())
        _, noticed = self.agree(local)
        if noticed:
            LOG.warning("spot interruption on %d task(s): backing up at epoch %d batch %d and stopping", noticed,
                        self._epoch, batch)
            if batch + 1 >= self.steps:  # the epoch's last step: it is complete
                self.backup.save(self._epoch + 1)
            else:
                self.backup.save(self._epoch, mid_epoch=True)
            self.preempted = True
            self.model.stop_training = True


# --- the run --------------------------------------------------------------------------------------------------------

def _jit(inv: Invocation) -> bool:
    """auto: XLA on TPU and on GPUs of one host. Not on CPU: measured 5x slower there for these models (and MWMS
    CPU workers crash with it)."""
    if inv.config.jit_compile == "auto":
        return inv.strategy == "tpu" or (inv.strategy == "mirrored" and bool(tf.config.list_physical_devices("GPU")))
    return inv.config.jit_compile == "on"


def _evaluate_export(export_dir: str, source: data.Source) -> dict[str, float]:
    """Load the export as a plain (undistributed) model, as a collector would, and evaluate it."""
    test = data.test_dataset(source)
    if test is None:
        return {}
    with tf.distribute.get_strategy().scope():
        loaded = keras.models.load_model(export_dir)
    loss, accuracy = loaded.evaluate(test, verbose=0)
    return {"test_loss": float(loss), "test_accuracy": float(accuracy)}


def run(inv: Invocation, status: artifacts.StatusWriter) -> int:
    cfg = inv.config
    wall_start = time.monotonic()
    watcher = spot.start_watcher(cfg.spot_watch, cfg.imds_endpoint, cfg.spot_poll_interval)
    if inv.strategy == "parameter_server" and inv.tf_config is not None and inv.tf_config.task_type in ("ps",
                                                                                                         "worker"):
        return strategies.serve(inv, status, watcher)

    source = data.load_source(cfg)  # before the strategy: a slow S3 download must not stall the other workers
    tf.keras.utils.set_random_seed(cfg.seed)
    status.update(force=True, state="connecting")
    strategy = strategies.make_strategy(inv)
    replicas = strategy.num_replicas_in_sync
    global_batch = cfg.batch_size_per_replica * replicas
    steps = cfg.steps_per_epoch or max(1, (source.num_train or 0) // global_batch)
    LOG.info("%s: %s, %d replica(s), global batch %d, %d steps/epoch, %d epochs", inv.task, inv.strategy,
             replicas, global_batch, steps, cfg.epochs)
    is_ps = inv.strategy == "parameter_server"
    spe = min(cfg.steps_per_execution, steps)

    set_precision(cfg.mixed_precision)
    with strategy.scope():
        model = build_model(cfg.model, cfg.seed)
        compile_model(model, cfg.learning_rate, spe, _jit(inv))
        model.optimizer.build(model.trainable_variables)
    # Counters outside the scope: plain per-task variables, no cross-worker semantics.
    # PS: every file is written by the coordinator's own process (the variables live on the ps hosts).
    io_device = "/job:chief/replica:0/task:0/device:CPU:0" if is_ps else None
    backup = TaskBackup(artifacts.backup_dir_for(cfg.model_dir, inv.task), model, io_device)

    agreement = Agreement(strategy)
    target = restore_newest(backup, agreement, strategy)
    initial_epoch = int(backup.completed_epochs.numpy())
    if target:
        if initial_epoch < cfg.epochs:
            backup.resumes.assign_add(1)
        LOG.info("restored backup %d: %d epoch(s) done, resume #%d", target, initial_epoch,
                 int(backup.resumes.numpy()))
    status.update(force=True, resumes=int(backup.resumes.numpy()), initial_epoch=initial_epoch)

    temp_dir = None if inv.is_chief else artifacts.make_worker_temp_dir(inv.task, cfg.model_dir)
    out_dir = cfg.model_dir if inv.is_chief else temp_dir
    assert out_dir is not None
    try:
        progress = (EpochProgress if is_ps else Progress)(status, cfg.epochs, steps, global_batch)
        spot_stop = SpotStop(watcher, backup, agreement, check_every=max(1, 60 // spe), steps=steps)
        if watcher is not None and agreement.local:
            # One process decides alone: stop right after the current step (no collective to agree on).
            watcher.on_notice = lambda _notice: setattr(model, "stop_training", True)

        def interrupted() -> bool:
            return spot_stop.preempted or (agreement.local and watcher is not None and watcher.event.is_set())

        callbacks: list[keras.callbacks.Callback] = [progress, BackupEveryEpoch(backup, interrupted)]
        if not agreement.local:
            callbacks.append(spot_stop)
        callbacks += [
            keras.callbacks.ModelCheckpoint(os.path.join(out_dir, artifacts.CHECKPOINTS, "epoch-{epoch:03d}"),
                                            save_weights_only=True, options=backup.options)]
        if cfg.tensorboard and (inv.is_chief or not is_ps):
            callbacks.append(keras.callbacks.TensorBoard(os.path.join(out_dir, artifacts.LOGS), update_freq="epoch",
                                                         profile_batch=0, write_graph=False))
        dataset_fn = data.make_dataset_fn(source, global_batch, cfg.shuffle_buffer, cfg.seed, total_batches=None
                                          if is_ps else steps * max(0, cfg.epochs - initial_epoch))
        if is_ps:
            train_input: Any = keras.utils.experimental.DatasetCreator(dataset_fn)
        else:
            train_input = strategy.distribute_datasets_from_function(
                dataset_fn, options=tf.distribute.InputOptions(experimental_fetch_to_device=False))
        history = model.fit(train_input, epochs=cfg.epochs, initial_epoch=initial_epoch, steps_per_epoch=steps,
                            callbacks=callbacks, verbose=0)
        fit_returned = time.monotonic()
        faulthandler.cancel_dump_traceback_later()
        teardown = fit_returned - progress.t.train_end if progress.t.train_end else 0.0
        LOG.info("fit returned %.2f s after its last epoch ended", teardown)
        if agreement.local and watcher is not None and watcher.event.is_set():
            completed = initial_epoch + progress.epochs_completed
            if is_ps or completed <= progress.current_epoch:
                backup.save(progress.current_epoch, mid_epoch=True)  # cut short: redo this epoch, newer weights
            else:
                backup.save(completed)  # stopped between epochs
            spot_stop.preempted = True
        if spot_stop.preempted:
            LOG.warning("stopped for a spot interruption; backup saved, exiting %d", EXIT_PREEMPTED)
            status.update(force=True, state="preempted")
            return EXIT_PREEMPTED

        status.update(force=True, state="exporting")
        export_dir = os.path.join(out_dir, artifacts.EXPORT)
        model.save(export_dir, options=tf.saved_model.SaveOptions(experimental_io_device=io_device))
        if not inv.is_chief:
            status.update(force=True, state="done")
            return EXIT_OK
        evaluation = _evaluate_export(export_dir, source) if cfg.evaluate else {}
        metrics = _metrics(inv, history.history, progress.t, evaluation, replicas=replicas,
                           global_batch=global_batch, steps=steps, initial_epoch=initial_epoch,
                           resumes=int(backup.resumes.numpy()), wall=time.monotonic() - wall_start,
                           teardown=teardown)
        artifacts.atomic_write_json(os.path.join(cfg.model_dir, artifacts.METRICS), metrics)
        artifacts.write_manifest(cfg.model_dir)
        artifacts.write_done(cfg.model_dir, {"task": inv.task, "epochs": metrics["epochs"],
                                             "finished_at": time.time()})
        LOG.info("done: %s", json.dumps({k: metrics[k] for k in ("epochs", "accuracy", "test_accuracy",
                                                                  "examples_per_sec", "resumes") if k in metrics}))
        if is_ps:
            failed = strategies.tell_servers_to_exit(inv)
            if failed:
                LOG.warning("tasks not told to exit: %s (they exit after --server-timeout)", ", ".join(failed))
        status.update(force=True, state="done")
        return EXIT_OK
    finally:
        if temp_dir:
            artifacts.remove_tree(temp_dir)
        if watcher is not None:
            watcher.stop()


def _metrics(inv: Invocation, hist: dict[str, list[float]], t: Timings, evaluation: dict[str, float], *,
             replicas: int, global_batch: int, steps: int, initial_epoch: int, resumes: int, wall: float,
             teardown: float) -> dict[str, Any]:
    cfg = inv.config
    per_epoch = steps * global_batch
    steady = t.epoch_times[1:] or t.epoch_times
    ran = len(t.epoch_times)
    out: dict[str, Any] = {
        "strategy": inv.strategy, "task": inv.task, "model": cfg.model, "dataset": cfg.dataset,
        "mixed_precision": cfg.mixed_precision,
        "epochs": initial_epoch + ran, "epochs_this_run": ran, "initial_epoch": initial_epoch, "resumes": resumes,
        "replicas": replicas, "workers": inv.tf_config.num_workers if inv.tf_config else 1,
        "global_batch": global_batch, "steps_per_epoch": steps, "steps_per_execution": min(cfg.steps_per_execution,
                                                                                             steps),
        "examples_per_sec": round(per_epoch * len(steady) / sum(steady), 1) if steady else None,
        "examples_per_sec_overall": round(per_epoch * ran / sum(t.epoch_times), 1) if ran else None,
        "epoch_seconds": [round(s, 3) for s in t.epoch_times],
        "epoch_boundary_max_s": round(max(t.boundaries), 3) if t.boundaries else 0.0,
        "fit_teardown_s": round(teardown, 3),
        "train_time_s": round(t.train_end - t.train_start, 3) if t.train_end else 0.0,
        "wall_time_s": round(wall, 3),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if hist.get("loss"):
        out["loss"] = float(hist["loss"][-1])
        out["accuracy"] = float(hist["accuracy"][-1])
        out["history"] = {k: [float(v) for v in vals] for k, vals in hist.items()}
    out.update(evaluation)
    return out


def model_dir_ready(model_dir: str) -> None:
    Path(model_dir).mkdir(parents=True, exist_ok=True)
