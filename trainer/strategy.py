"""tf.distribute strategies from a validated Invocation, and the parameter-server side of a PS cluster."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import time
from pathlib import Path

import tensorflow as tf

from tfcluster.contract import TFConfig
from trainer.artifacts import StatusWriter
from trainer.config import EXIT_FAILURE, EXIT_OK, EXIT_PREEMPTED, Invocation
from trainer.spot import SpotWatcher

LOG = logging.getLogger("trainer.strategy")


class StrategyError(RuntimeError):
    """The strategy could not be set up (no TPU, ...). The message says what to do."""


def make_strategy(inv: Invocation) -> tf.distribute.Strategy:
    if inv.strategy == "mirrored":
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            LOG.warning("no GPU found: MirroredStrategy falls back to the CPU (one replica)")
            return tf.distribute.MirroredStrategy(["/cpu:0"])
        LOG.info("MirroredStrategy over %d GPU(s)", len(gpus))
        return tf.distribute.MirroredStrategy()
    if inv.strategy == "multi_worker_mirrored":
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.AUTO)
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=tf.distribute.cluster_resolver.TFConfigClusterResolver(),
            communication_options=options)
    if inv.strategy == "parameter_server":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        num_ps = len(resolver.cluster_spec().as_dict().get("ps", ()))
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=num_ps)
        return tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    if inv.strategy == "tpu":
        return _tpu_strategy(inv.config.tpu or "")
    raise StrategyError(f"unknown strategy {inv.strategy!r}")


def _tpu_strategy(tpu: str, connect_timeout: float = 10.0) -> tf.distribute.Strategy:
    fix = ("Fix: run on a Cloud TPU VM or pass --tpu with a reachable TPU name/grpc:// address; use --strategy "
           "mirrored or multi_worker_mirrored elsewhere")
    if tpu.startswith("grpc://"):
        # TensorFlow retries an unreachable TPU worker forever: check the address first.
        address = tpu[len("grpc://"):].split("/", 1)[0]
        deadline = time.monotonic() + connect_timeout
        while not _reachable(address):
            if time.monotonic() > deadline:
                raise StrategyError(f"no TPU answers at {tpu} (nothing listening after {connect_timeout:.0f} s). "
                                    + fix)
            time.sleep(1)
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except (ValueError, RuntimeError, OSError, tf.errors.OpError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StrategyError(f"no usable TPU {tpu!r}: {first[:300]}. " + fix) from exc


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


def serve(inv: Invocation, status: StatusWriter, watcher: SpotWatcher | None, poll: float = 0.5) -> int:
    """Run this ps/worker task's gRPC server until the chief says it is done (exit 0), the chief has been
    unreachable for ``--server-timeout`` seconds (exit 1), or a spot notice arrives (exit 3)."""
    tfc = inv.tf_config
    assert tfc is not None and tfc.task_type is not None and tfc.task_index is not None
    marker = Path(shutdown_marker(cluster_key(tfc), tfc.task_type, tfc.task_index))
    marker.unlink(missing_ok=True)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=tfc.task_type, task_index=tfc.task_index,
                                  protocol="grpc", start=True)
    LOG.info("%s serving at %s; waiting for the chief (marker %s)", inv.task, server.target, marker)
    chief_address = tfc.cluster["chief"][0]
    started = last_seen = time.monotonic()
    seen = False
    status.update(force=True, state="serving", chief=chief_address)
    while True:
        if marker.exists():
            LOG.info("the chief finished: %s exits", inv.task)
            marker.unlink(missing_ok=True)
            status.update(force=True, state="done")
            return EXIT_OK
        if watcher is not None and watcher.event.is_set():
            status.update(force=True, state="preempted")
            return EXIT_PREEMPTED
        now = time.monotonic()
        if _reachable(chief_address):
            seen, last_seen = True, now
        elif now - last_seen > inv.config.server_timeout:
            what = "unreachable" if seen else "never reachable"
            LOG.error("chief %s %s for %.0f s (since %.0f s after start): %s gives up", chief_address, what,
                      now - last_seen, last_seen - started, inv.task)
            status.update(force=True, state="failed", error=f"chief {what}")
            return EXIT_FAILURE
        status.update(state="serving", chief_seen=seen)
        time.sleep(poll)


def tell_servers_to_exit(inv: Invocation) -> list[str]:
    """Chief side: write each ps/worker task's shutdown marker with a TF op placed on that task."""
    tfc = inv.tf_config
    assert tfc is not None
    cluster_json = cluster_key(tfc)
    failed = []
    for task_type in ("worker", "ps"):
        for index in range(len(tfc.cluster.get(task_type, ()))):
            path = shutdown_marker(cluster_json, task_type, index)
            try:
                with tf.device(f"/job:{task_type}/replica:0/task:{index}/device:CPU:0"):
                    tf.io.write_file(path, tf.constant(f"done {os.getpid()}"))
            except (tf.errors.OpError, RuntimeError, ValueError) as exc:
                LOG.warning("could not signal %s:%d to exit: %s", task_type, index, exc)
                failed.append(f"{task_type}:{index}")
    return failed
