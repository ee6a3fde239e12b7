"""tf.distribute strategies from plain values (:func:`make_strategy`), and the parameter-server side of a PS
cluster (its ps/worker tasks' servers and their shutdown)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import time
from pathlib import Path

import tensorflow as tf

from tfcluster.core.contract import CHIEF, EXIT_FAILURE, EXIT_OK, EXIT_PREEMPTED, PS, STRATEGIES, WORKER, TFConfig
from trainer.artifacts import StatusWriter
from trainer.config import TPU_LOCAL, Invocation
from trainer.stop import PREEMPTED, TRAINING, StopRequest

LOG = logging.getLogger("trainer.strategy")
DONE_WORD, STOP_WORD = "done", "stopped"  # what the chief's shutdown marker says
STOP_GRACE_S = 30.0  # how long a ps/worker task asked to stop waits for the chief's word (systemd waits 90 s)


class StrategyError(RuntimeError):
    """The strategy could not be set up (no TPU, ...). The message says what to do."""


def make_strategy(name: str, collective: str | None = None, tpu: str = TPU_LOCAL) -> tf.distribute.Strategy:
    """The tf.distribute strategy ``name`` (a resolved strategy, :data:`tfcluster.core.contract.STRATEGIES`).

    ``collective``: the all-reduce of multi_worker_mirrored, ``nccl`` or ``ring`` (None: ring). ``tpu``: the TPU of
    ``tpu``, ``local`` (this TPU VM). Multi-host strategies read the cluster from TF_CONFIG."""
    if name == "mirrored":
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            LOG.warning("no GPU found: MirroredStrategy falls back to the CPU (one replica)")
            return tf.distribute.MirroredStrategy(["/cpu:0"])
        LOG.info("MirroredStrategy over %d GPU(s)", len(gpus))
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        implementation = tf.distribute.experimental.CommunicationImplementation
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=implementation.NCCL if collective == "nccl" else implementation.RING)
        LOG.info("MultiWorkerMirroredStrategy, collective %s", collective or "ring")
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=tf.distribute.cluster_resolver.TFConfigClusterResolver(),
            communication_options=options)
    if name == "parameter_server":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        num_ps = len(resolver.cluster_spec().as_dict().get(PS, ()))
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=num_ps)
        return tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    if name == "tpu":
        return _tpu_strategy(tpu)
    raise StrategyError(f"unknown strategy {name!r}. Fix: use one of {', '.join(STRATEGIES)}")


def _tpu_strategy(tpu: str) -> tf.distribute.Strategy:
    """TPUStrategy on this TPU VM's chips (trainer/config.py has checked the host before TensorFlow started)."""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except (ValueError, RuntimeError, OSError, tf.errors.OpError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StrategyError(f"no usable TPU {tpu!r}: {first[:300]}. Fix: run on a single Cloud TPU VM with "
                            "TensorFlow <= 2.20 and its TPU runtime (tensorflow-tpu, libtpu), or use --strategy "
                            "mirrored or multi_worker_mirrored") from exc


# --- parameter-server cluster: ps and worker tasks ------------------------------------------------------------------

def shutdown_marker(cluster_json: str, task_type: str, task_index: int) -> str:
    """Where the chief tells a ps/worker task to exit. The chief writes it with a TF op placed on that task's device,
    so the file is created by the task's own process, on its own host, in its own /tmp (PrivateTmp-safe)."""
    key = hashlib.sha256(cluster_json.encode()).hexdigest()[:16]
    return f"/tmp/tfcluster-shutdown-{key}-{task_type}-{task_index}"


def cluster_key(tfc: TFConfig) -> str:
    return json.dumps(tfc.to_dict()["cluster"], sort_keys=True)


def _reachable(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def _server_exit(stop: StopRequest, marker: Path, stop_since: float | None, now: float) -> int | None:
    """The exit code of a ps/worker task now, or None to keep serving. Asked to stop, it serves on until the chief
    (asked too) has saved its backup with the variables this task holds and says so, or for STOP_GRACE_S."""
    if marker.exists():
        word = marker.read_text(errors="replace").split(" ", 1)[0]
        marker.unlink(missing_ok=True)
        if word == STOP_WORD and not stop.is_set():
            stop.request(PREEMPTED, "the chief stopped after a backup")
        return EXIT_PREEMPTED if stop.is_set() else EXIT_OK
    if stop_since is not None and now - stop_since > STOP_GRACE_S:
        return EXIT_PREEMPTED
    return None


def serve(inv: Invocation, status: StatusWriter, stop: StopRequest, poll: float = 0.5) -> int:
    """Run this ps/worker task's gRPC server until the chief says it is done (exit 0), the chief has been
    unreachable for ``--server-timeout`` seconds (exit 1), or a stop is asked (spot notice, SIGTERM: exit 3)."""
    tfc = inv.tf_config
    assert tfc is not None and tfc.task_type is not None and tfc.task_index is not None
    marker = Path(shutdown_marker(cluster_key(tfc), tfc.task_type, tfc.task_index))
    marker.unlink(missing_ok=True)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=tfc.task_type, task_index=tfc.task_index,
                                  protocol="grpc", start=True)
    stop.phase = TRAINING  # a SIGTERM now waits for the chief's backup (see _server_exit)
    LOG.info("%s serving at %s; waiting for the chief (marker %s)", inv.task, server.target, marker)
    chief_address = tfc.cluster[CHIEF][0]
    started = last_seen = time.monotonic()
    seen, stop_since = False, None
    status.update(force=True, state="serving", chief=chief_address)
    while True:
        now = time.monotonic()
        stop_since = now if stop_since is None and stop.is_set() else stop_since
        code = _server_exit(stop, marker, stop_since, now)
        if code is not None:
            LOG.info("%s exits %d (%s)", inv.task, code, stop.detail or "the chief finished")
            status.update(force=True, state=stop.reason if code == EXIT_PREEMPTED else "done",
                          stop_reason=stop.detail or None)
            return code
        if _reachable(chief_address):
            seen, last_seen = True, now
        elif now - last_seen > inv.config.distribution.server_timeout:
            what = "unreachable" if seen else "never reachable"
            LOG.error("chief %s %s for %.0f s (since %.0f s after start): %s gives up", chief_address, what,
                      now - last_seen, last_seen - started, inv.task)
            status.update(force=True, state="failed", error=f"chief {what}")
            return EXIT_FAILURE
        status.update(state="serving", chief_seen=seen)
        time.sleep(poll)


def tell_servers_to_exit(inv: Invocation, word: str = DONE_WORD) -> list[str]:
    """Chief side: write each ps/worker task's shutdown marker with a TF op placed on that task; ``word`` says
    whether the job is done or stopped after a backup (the tasks exit 0 or 3)."""
    tfc = inv.tf_config
    assert tfc is not None
    cluster_json = cluster_key(tfc)
    failed = []
    for task_type in (WORKER, PS):
        for index in range(len(tfc.cluster.get(task_type, ()))):
            path = shutdown_marker(cluster_json, task_type, index)
            try:
                with tf.device(f"/job:{task_type}/replica:0/task:{index}/device:CPU:0"):
                    tf.io.write_file(path, tf.constant(f"{word} {os.getpid()}"))
            except (tf.errors.OpError, RuntimeError, ValueError) as exc:
                LOG.warning("could not signal %s:%d to exit: %s", task_type, index, exc)
                failed.append(f"{task_type}:{index}")
    return failed
