"""The training run, step by step: data -> strategy -> model -> backup and resume -> fit -> stop, or finish.

Imports TensorFlow and tf_keras: call :func:`run` only through :func:`trainer.cli.main`, which validates the input,
selects legacy Keras and checks the GPUs first.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import tensorflow as tf
import tf_keras as keras

from tfcluster.core import contract, files
from trainer import artifacts, data, s3, spot
from trainer import strategy as strategies
from trainer.backup import Agreement, TaskBackup, restore_newest
from trainer.callbacks import AgreedStop, BackupEveryEpoch, EpochProgress, LocalStop, Progress
from trainer.config import Invocation, TrainConfig
from trainer.model import build_model, compile_model, set_precision, time_steps
from trainer.stop import FINISHING, StopRequest
from trainer.timeline import Plan, Timeline, plan_for

LOG = logging.getLogger("trainer.train")
# Under ParameterServerStrategy every file is written by the coordinator's own process (the variables live on the
# ps hosts): the io device of saves and exports.
PS_IO_DEVICE = f"/job:{contract.CHIEF}/replica:0/task:0/device:CPU:0"


# What must never be destroyed: fit's data handlers and input iterators (holding_data_handlers; their C++
# destructors join tf.data's autotune thread, 0-86 s measured). The process leaves with os._exit
# (trainer/__main__.py) once every file is durable, so those destructors never run.
_KEPT_UNTIL_THE_END: list[Any] = []


def hold_until_exit(obj: Any) -> Any:
    """Keep ``obj`` referenced until the process leaves (os._exit after every file is durable)."""
    _KEPT_UNTIL_THE_END.append(obj)
    return obj


@contextlib.contextmanager
def holding_data_handlers() -> Iterator[None]:
    """Hold every data handler ``fit`` makes (``keras.__internal__.utils.get_data_handler``) and every iterator it
    takes from its dataset (data.HeldIterators) until the process leaves. Released at the end of fit they stalled
    it (docs/trainer.md): a tf.data iterator's destructor joins the autotune thread (0-86 s measured), and under
    ParameterServer releasing the per-worker dataset removes each traced function from each worker, one RPC at a
    time behind that same destructor on the workers (``EagerContext::MaybeRemoveFunctionRemotely``: 0.2-71 s)."""
    from tf_keras.src.engine import data_adapter

    original = data_adapter.get_data_handler

    def held(*args: Any, **kwargs: Any) -> Any:
        handler = hold_until_exit(original(*args, **kwargs))
        if hasattr(handler, "_dataset") and not isinstance(handler._dataset, data.HeldIterators):
            handler._dataset = data.HeldIterators(handler._dataset)  # the only use: iter() in enumerate_epochs
        return handler

    data_adapter.get_data_handler = held
    try:
        yield
    finally:
        data_adapter.get_data_handler = original


@dataclass
class Run:
    """One task's training run: its input and what it reports to. The steps below take what they need and return
    what they build; :class:`Built` holds it for fit and the end."""

    inv: Invocation
    status: artifacts.StatusWriter
    stop: StopRequest
    timeline: Timeline
    loading: Future[data.Source]
    wall_start: float = field(default_factory=time.monotonic)
    step_timer: Any = None  # the train step's compute time (trainer/model.py time_steps), when timed

    @property
    def cfg(self) -> TrainConfig:
        return self.inv.config

    @property
    def is_ps(self) -> bool:
        return self.inv.strategy == "parameter_server"

    @property
    def io_device(self) -> str | None:
        return PS_IO_DEVICE if self.is_ps else None

    @cached_property
    def location(self) -> s3.Location | None:
        return s3.parse_prefix_uri(self.cfg.s3.checkpoint) if self.cfg.s3.checkpoint else None

    @cached_property
    def s3_client(self) -> Any:
        return s3.client(self.cfg.s3.endpoint_url)


@dataclass(frozen=True)
class Built:
    """What the steps of :func:`_train` built, in order: the data (and its S3 backup mirror), the strategy, the
    plan, the model, the backup and the agreement between tasks."""

    source: data.Source
    sync: s3.BackupSync | None
    strategy: tf.distribute.Strategy
    plan: Plan
    model: keras.Model
    backup: TaskBackup
    agreement: Agreement


@dataclass
class Fitted:
    history: dict[str, list[float]]
    progress: Progress
    teardown: float
    stopped: bool


def visible_gpus() -> int:
    return len(tf.config.list_physical_devices("GPU"))


def run(inv: Invocation, status: artifacts.StatusWriter, stop: StopRequest, timeline: Timeline,
        loading: Future[data.Source] | None) -> int:
    """Serve (ps and worker tasks of a parameter-server cluster) or train; ``loading`` is the data being read
    (trainer.source.load_source in a thread that trainer/cli.py started before it imported TensorFlow)."""
    spot_cfg = inv.config.spot
    watcher = spot.start_watcher(spot_cfg.watch, spot_cfg.imds_endpoint, spot_cfg.poll_interval, stop)
    try:
        if inv.serves_only or loading is None:
            return strategies.serve(inv, status, stop)
        return _train(Run(inv, status, stop, timeline, loading))
    finally:
        if watcher is not None:
            watcher.stop()


def _train(r: Run) -> int:
    source, sync = load_inputs(r)
    strategy = connect(r)
    plan = plan_of(r, strategy, source)
    model = build(r, strategy, plan)
    backup, agreement, plan = resume(r, strategy, model, plan, sync)
    built = Built(source, sync, strategy, plan, model, backup, agreement)
    with _output_dir(r.inv) as out_dir:
        fitted = fit(r, built, out_dir)
        if fitted.stopped:
            return stopped(r, built)
        return finish(r, built, fitted, out_dir)


def plan_of(r: Run, strategy: tf.distribute.Strategy, source: data.Source) -> Plan:
    """Steps per epoch: --steps-per-epoch, else the training examples (TFRecords were counted while loading) // the
    global batch."""
    opt = r.cfg.optimisation
    replicas = strategy.num_replicas_in_sync
    plan = plan_for(opt.epochs, opt.steps_per_epoch, opt.batch_size_per_replica, replicas, source.num_train)
    LOG.info("%s: %s, %d replica(s), global batch %d, %d steps/epoch, %d epochs", r.inv.task, r.inv.strategy,
             replicas, plan.global_batch, plan.steps, plan.epochs)
    return plan


def load_inputs(r: Run) -> tuple[data.Source, s3.BackupSync | None]:
    """Before the strategy (a slow download must not stall the peers): the data (read while TensorFlow was being
    imported); with checkpoint_s3, this task's backup mirror, its backups fetched when its disk has none (a
    replacement host), and on the chief the removal of the S3 model's DONE. (In the loading thread too, the S3 part
    made the start slower: boto3 and moto competed with TensorFlow's import for the GIL, +0.4 s measured.)"""
    source = r.loading.result()
    r.timeline.mark("data")
    if r.location is None:
        return source, None
    backup_dir = artifacts.backup_dir_for(r.cfg.model_dir, r.inv.task)
    sync = s3.BackupSync(r.location, backup_dir, lambda: r.s3_client)
    if sync.download():
        r.status.update(force=True, restored_from=r.location.uri(contract.BACKUP))
    if r.inv.is_chief:
        s3.clear_model_done(r.location, r.s3_client)
    r.timeline.mark("s3")
    return source, sync


def connect(r: Run) -> tf.distribute.Strategy:
    tf.keras.utils.set_random_seed(r.cfg.data.seed)
    r.status.update(force=True, state="connecting", collective=r.inv.collective)
    strategy = strategies.make_strategy(r.inv.strategy, r.inv.collective, r.inv.tpu)
    r.timeline.mark("strategy")
    return strategy


def _jit(inv: Invocation) -> bool:
    """auto: XLA on TPU and on GPUs of one host. Not on CPU: measured 5x slower there for these models (and MWMS
    CPU workers crash with it)."""
    if inv.config.model.jit_compile == "auto":
        return inv.strategy == "tpu" or (inv.strategy == "mirrored" and visible_gpus() > 0)
    return inv.config.model.jit_compile == "on"


def build(r: Run, strategy: tf.distribute.Strategy, plan: Plan) -> keras.Model:
    """Model, optimizer and compile inside the strategy's scope (every variable belongs to the strategy)."""
    cfg = r.cfg
    set_precision(cfg.model.mixed_precision)
    with strategy.scope():
        model = build_model(cfg.model.name, cfg.data.seed)
        compile_model(model, cfg.optimisation.learning_rate, min(cfg.optimisation.steps_per_execution, plan.steps),
                      _jit(r.inv))
        model.optimizer.build(model.trainable_variables)
    if not _jit(r.inv) and not r.is_ps:  # each task's compute time a step, for the straggler (tfcluster/run)
        r.step_timer = time_steps(model)  # outside the scope: the task's own variable
    r.timeline.mark("model")
    return model


def resume(r: Run, strategy: tf.distribute.Strategy, model: keras.Model, plan: Plan,
           sync: s3.BackupSync | None) -> tuple[TaskBackup, Agreement, Plan]:
    """Open this task's backup and continue from the newest one any task holds (all tasks agree)."""
    # The backup's counters live outside the scope: plain per-task variables, no cross-worker semantics.
    backup = TaskBackup(artifacts.backup_dir_for(r.cfg.model_dir, r.inv.task), model, r.io_device,
                        on_saved=None if sync is None else sync.upload_later)
    agreement = Agreement(strategy)
    target = restore_newest(backup, agreement, strategy)
    initial_epoch = int(backup.completed_epochs.numpy())
    if target:
        if initial_epoch < plan.epochs:
            backup.resumes.assign_add(1)
        LOG.info("restored backup %d: %d epoch(s) done, resume #%d", target, initial_epoch,
                 int(backup.resumes.numpy()))
    r.status.update(force=True, resumes=int(backup.resumes.numpy()), initial_epoch=initial_epoch)
    r.timeline.mark("resume")
    return backup, agreement, replace(plan, initial_epoch=initial_epoch)


@contextlib.contextmanager
def _output_dir(inv: Invocation) -> Iterator[str]:
    """The chief writes into the model dir; other tasks run every save too (Keras needs all workers in them) but
    into a temp dir of their own, removed afterwards."""
    if inv.is_chief:
        yield inv.config.model_dir
        return
    temp_dir = artifacts.make_worker_temp_dir(inv.task, inv.config.model_dir)
    try:
        yield temp_dir
    finally:
        artifacts.remove_tree(temp_dir)


def _callbacks(r: Run, b: Built, out_dir: str, progress: Progress,
               agreed: AgreedStop) -> list[keras.callbacks.Callback]:
    def interrupted() -> bool:
        return agreed.stopped or (b.agreement.local and r.stop.is_set())

    callbacks: list[keras.callbacks.Callback] = [progress, BackupEveryEpoch(b.backup, interrupted)]
    callbacks.append(LocalStop(r.stop) if b.agreement.local else agreed)
    callbacks.append(keras.callbacks.ModelCheckpoint(os.path.join(out_dir, contract.CHECKPOINTS, "epoch-{epoch:03d}"),
                                                     save_weights_only=True, options=b.backup.options))
    if r.cfg.reporting.tensorboard and (r.inv.is_chief or not r.is_ps):
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(out_dir, contract.LOGS), update_freq="epoch",
                                                     profile_batch=0, write_graph=False))
    return callbacks


def _train_input(r: Run, b: Built) -> Any:
    """fit's input: a DatasetCreator (parameter server), else the distributed dataset (fit holds what it makes
    from either until the process leaves: holding_data_handlers)."""
    plan = b.plan
    dataset_fn = data.make_dataset_fn(b.source, plan.global_batch, r.cfg.data.shuffle_buffer, r.cfg.data.seed,
                                      total_batches=None if r.is_ps else
                                      plan.steps * max(0, plan.epochs - plan.initial_epoch))
    if r.is_ps:
        return keras.utils.experimental.DatasetCreator(dataset_fn)
    return b.strategy.distribute_datasets_from_function(
        dataset_fn, options=tf.distribute.InputOptions(experimental_fetch_to_device=False))


def fit(r: Run, b: Built, out_dir: str) -> Fitted:
    """``model.fit`` with progress, backups and the stop protocol; a stop saves a backup at a step boundary."""
    plan, model, backup = b.plan, b.model, b.backup
    progress = (EpochProgress(r.status, plan, r.timeline, r.stop, poll_s=r.cfg.reporting.status_interval) if r.is_ps
                else Progress(r.status, plan, r.timeline, r.stop, step_timer=r.step_timer))
    spe = min(r.cfg.optimisation.steps_per_execution, plan.steps)
    agreed = AgreedStop(r.stop, backup, b.agreement, check_every=max(1, 60 // spe), steps=plan.steps)
    with holding_data_handlers():
        history = model.fit(_train_input(r, b), epochs=plan.epochs, initial_epoch=plan.initial_epoch,
                            steps_per_epoch=plan.steps, callbacks=_callbacks(r, b, out_dir, progress, agreed),
                            verbose=0)
    r.stop.phase = FINISHING
    fit_returned = time.monotonic()
    faulthandler.cancel_dump_traceback_later()
    teardown = fit_returned - progress.t.train_end if progress.t.train_end else 0.0
    LOG.info("fit returned %.2f s after its last epoch ended", teardown)
    stopped = agreed.stopped
    if b.agreement.local and r.stop.is_set() and model.stop_training:
        completed = plan.initial_epoch + progress.epochs_completed
        if r.is_ps or completed <= progress.current_epoch:
            backup.save(progress.current_epoch, mid_epoch=True)  # cut short: redo this epoch, newer weights
        else:
            backup.save(completed)  # stopped between epochs
        stopped = True
    return Fitted(history.history, progress, teardown, stopped)


def stopped(r: Run, b: Built) -> int:
    """After the stop's backup: upload it (checkpoint_s3), tell a PS cluster's servers, exit 3."""
    uploaded = b.sync.flush() if b.sync is not None else None
    if r.is_ps and r.inv.is_chief:
        strategies.tell_servers_to_exit(r.inv, strategies.STOP_WORD)
    LOG.warning("stopped (%s); backup saved%s, exiting %d: re-run to resume", r.stop.detail,
                {None: "", True: " and uploaded", False: " (upload FAILED)"}[uploaded], contract.EXIT_PREEMPTED)
    r.status.update(force=True, state=r.stop.reason, stop_reason=r.stop.detail, backup_uploaded=uploaded)
    return contract.EXIT_PREEMPTED


def _evaluate_export(export_dir: str, source: data.Source) -> dict[str, float]:
    """Load the export as a plain (undistributed) model, as a collector would, and evaluate it."""
    test = data.test_dataset(source)
    if test is None:
        return {}
    with tf.distribute.get_strategy().scope():
        loaded = keras.models.load_model(export_dir)
    loss, accuracy = loaded.evaluate(test, verbose=0)
    return {"test_loss": float(loss), "test_accuracy": float(accuracy)}


def finish(r: Run, b: Built, fitted: Fitted, out_dir: str) -> int:
    """Export; on the chief also evaluate, metrics.json, fsync + MANIFEST + DONE, the S3 copy, the PS servers."""
    r.status.update(force=True, state="exporting")
    export_dir = os.path.join(out_dir, contract.EXPORT)
    b.model.save(export_dir, options=tf.saved_model.SaveOptions(experimental_io_device=r.io_device))
    if b.sync is not None and not b.sync.flush():
        LOG.warning("the last backup did not reach S3 (the job finished: the model dir is what counts)")
    if not r.inv.is_chief:
        r.status.update(force=True, state="done")
        return contract.EXIT_OK
    evaluation = _evaluate_export(export_dir, b.source) if r.cfg.model.evaluate else {}
    metrics = _metrics(r, b, fitted, evaluation)
    files.atomic_write_json(os.path.join(r.cfg.model_dir, contract.METRICS), metrics)
    artifacts.finalize(r.cfg.model_dir, {"task": r.inv.task, "epochs": metrics["epochs"], "finished_at": time.time()})
    if r.location is not None and not _upload_model_dir(r):
        return contract.EXIT_FAILURE
    LOG.info("done: %s", json.dumps({k: metrics[k] for k in ("epochs", "accuracy", "test_accuracy",
                                                              "examples_per_sec", "resumes") if k in metrics}))
    if r.is_ps:
        failed = strategies.tell_servers_to_exit(r.inv)
        if failed:
            LOG.warning("tasks not told to exit: %s (they exit after --server-timeout)", ", ".join(failed))
    r.status.update(force=True, state="done")
    return contract.EXIT_OK


def _upload_model_dir(r: Run) -> bool:
    assert r.location is not None
    try:
        s3.upload_model_dir(r.location, r.cfg.model_dir, r.s3_client)
    except Exception as exc:
        error = (f"the model dir is complete on this host but did not reach {r.location.uri('model')}: {exc}. "
                 "Fix: check the bucket, its policy and --s3-endpoint-url; a restart re-exports and uploads again")
        LOG.error("%s", error)
        r.status.update(force=True, state="failed", error=error)
        return False
    return True


def _metrics(r: Run, b: Built, fitted: Fitted, evaluation: dict[str, float]) -> dict[str, Any]:
    cfg, plan, t, hist = r.cfg, b.plan, fitted.progress.t, fitted.history
    per_epoch = plan.steps * plan.global_batch
    steady = t.epoch_times[1:] or t.epoch_times
    ran = len(t.epoch_times)
    out: dict[str, Any] = {
        "strategy": r.inv.strategy, "collective": r.inv.collective, "task": r.inv.task, "model": cfg.model.name,
        "dataset": cfg.data.dataset, "mixed_precision": cfg.model.mixed_precision,
        "epochs": plan.initial_epoch + ran, "epochs_this_run": ran, "initial_epoch": plan.initial_epoch,
        "resumes": int(b.backup.resumes.numpy()),
        "replicas": plan.global_batch // cfg.optimisation.batch_size_per_replica,
        "workers": r.inv.tf_config.num_workers if r.inv.tf_config else 1,
        "tasks": {t: len(a) for t, a in r.inv.tf_config.cluster.items()} if r.inv.tf_config else {},
        "global_batch": plan.global_batch, "steps_per_epoch": plan.steps,
        "steps_per_execution": min(cfg.optimisation.steps_per_execution, plan.steps),
        "examples_per_sec": round(per_epoch * len(steady) / sum(steady), 1) if steady else None,
        "examples_per_sec_overall": round(per_epoch * ran / sum(t.epoch_times), 1) if ran else None,
        "epoch_seconds": [round(s, 3) for s in t.epoch_times],
        "epoch_boundary_max_s": round(max(t.boundaries), 3) if t.boundaries else 0.0,
        "fit_teardown_s": round(fitted.teardown, 3),
        "train_time_s": round(t.train_end - t.train_start, 3) if t.train_end else 0.0,
        "wall_time_s": round(time.monotonic() - r.wall_start, 3),
        "startup_s": dict(r.timeline.marks),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if hist.get("loss"):
        out["loss"] = float(hist["loss"][-1])
        out["accuracy"] = float(hist["accuracy"][-1])
        out["history"] = {k: [float(v) for v in vals] for k, vals in hist.items()}
    out.update(evaluation)
    return out
