"""Resume state: each task's backup (model, optimizer, completed epochs, resumes) and the agreement protocol that
makes every task continue from the newest backup any of them holds. Imports TensorFlow."""

from __future__ import annotations

import logging
from collections.abc import Callable

import tensorflow as tf
import tf_keras as keras

LOG = logging.getLogger("trainer.backup")
# Backup numbers: completed_epochs * STRIDE (+1 for a mid-epoch save before a stop).
STRIDE = 10
KEEP_BACKUPS = 3


class TaskBackup:
    """Per-task resume state: model + optimizer + completed epochs + resume count, in ``backup/<task>/``.

    Keras' own BackupAndRestore makes every worker *read* the chief's directory (non-chief tasks only write a temp
    copy and delete it), which needs a filesystem shared by all hosts. Our hosts share none, so each task keeps and
    reads its own copy; after reading, the tasks agree on the newest state all of them hold (see ``restore_newest``).
    ``on_saved`` runs after every save (the checkpoint_s3 upload).
    """

    def __init__(self, directory: str, model: keras.Model, io_device: str | None = None,
                 on_saved: Callable[[], None] | None = None) -> None:
        # Under ParameterServerStrategy the variables live on the ps tasks; without an io device the ps hosts would
        # write (and read) the files there, where this task's directory does not exist (no shared disk).
        self.options = tf.train.CheckpointOptions(experimental_io_device=io_device)
        self.on_saved = on_saved
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
        path = self.manager.save(checkpoint_number=completed_epochs * STRIDE + int(mid_epoch), options=self.options)
        if self.on_saved is not None:
            self.on_saved()
        return path


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


def _share(backup: TaskBackup, strategy: tf.distribute.Strategy, holder: bool, holders: int) -> None:
    """Average the state over the replicas that hold it; every replica takes the result."""
    share = [*backup.checkpoint.model.weights, *backup.checkpoint.optimizer.variables(), backup.completed_epochs,
             backup.resumes]
    for var in share:
        wide = tf.float64 if var.dtype.is_integer else var.dtype
        local = tf.cast(tf.convert_to_tensor(var), wide) if holder else tf.zeros(var.shape, wide)
        total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.identity, args=(local,)), axis=None)
        mean = total / holders
        var.assign(tf.cast(tf.round(mean), var.dtype) if var.dtype.is_integer else mean)


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
    if holders != strategy.num_replicas_in_sync:
        LOG.info("backup %d is held by %d of %d replicas: sharing it", newest, holders,
                 strategy.num_replicas_in_sync)
        _share(backup, strategy, holder, holders)
    return newest
