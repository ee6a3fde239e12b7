"""Parameter-server training in the shape of TensorFlow's tutorial, run as a tfcluster bring-your-own-script job.

The shape of TensorFlow's "Parameter server training with ParameterServerStrategy" tutorial (written anew here): the
ps and worker tasks start a ``tf.distribute.Server`` and ``join()`` it (they never return by themselves); the chief
(the coordinator) builds a ``ParameterServerStrategy`` with a variable partitioner, and trains with ``Model.fit`` on
a ``DatasetCreator`` whose function builds one sharded, repeated input pipeline per worker. What tfcluster adds is
at the edges:

* MNIST comes from ``$TFCLUSTER_DATASETS/mnist.npz`` (``DATASETS=mnist``) or ``--data``, never from a download;
* the chief saves the model into ``$TFCLUSTER_MODEL_DIR`` with its own CPU as the I/O device (the variables live on
  the ps tasks: without it each ps would write its shard on its own host);
* the job ends with its chief: tfcluster stops the ps and worker tasks still in ``join()`` and counts the job as
  succeeded (docs/jobs.md, "ParameterServer scripts").

    make provision CLUSTER=local STRATEGY=parameter_server
    make train SCRIPT=examples/keras_parameter_server/train.py DATASETS=mnist STRATEGY=parameter_server JOB=ps-guide
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=os.path.join(os.environ.get("TFCLUSTER_DATASETS", "."), "mnist.npz"),
                        help="MNIST .npz with x_train and y_train (default: $TFCLUSTER_DATASETS/mnist.npz)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=100)
    parser.add_argument("--global-batch-size", type=int, default=64)
    return parser.parse_args(argv)


def serve(tf: Any, resolver: Any) -> int:
    """A ps or worker task: serve the coordinator's variables and functions until the job ends."""
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    server.join()
    return 0


def dataset_fn(tf: Any, np: Any, path: str, global_batch_size: int) -> Any:
    with np.load(path) as data:
        x_train, y_train = data["x_train"], data["y_train"].astype("int64")

    def make(input_context: Any) -> Any:
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        dataset = dataset.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))
        return dataset.shuffle(10000).repeat().batch(batch_size).prefetch(2)

    return make


def build_model(tf: Any) -> Any:
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                  steps_per_execution=10)
    return model


def status_callback(tf: Any, model_dir: str) -> Any:
    """Progress for tfcluster's view, once per epoch (ParameterServerStrategy's fit refuses batch-level hooks)."""

    class Status(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            logs = logs or {}
            data = {"state": "training", "epoch": epoch + 1, "epochs": self.params["epochs"],
                    "step": self.params["steps"], "steps_per_epoch": self.params["steps"],
                    "loss": float(logs.get("loss", 0.0)), "accuracy": float(logs.get("accuracy", 0.0)),
                    "updated_at": time.time()}
            path = os.path.join(model_dir, "status.json")
            with open(f"{path}.tmp", "w") as handle:
                json.dump(data, handle)
            os.replace(f"{path}.tmp", path)

    return Status()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # DatasetCreator is legacy Keras's (KERAS=legacy sets it)
    import numpy as np
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        return serve(tf, resolver)
    num_ps = len(resolver.cluster_spec().as_dict().get("ps", ()))
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10,
                                                                               max_shards=num_ps)
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    with strategy.scope():
        model = build_model(tf)
    model_dir = os.environ.get("TFCLUSTER_MODEL_DIR", ".")
    creator = tf.keras.utils.experimental.DatasetCreator(dataset_fn(tf, np, args.data, args.global_batch_size))
    model.fit(creator, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2,
              callbacks=[status_callback(tf, model_dir)])
    io_device = f"/job:{resolver.task_type}/replica:0/task:{resolver.task_id}/device:CPU:0"
    model.save(os.path.join(model_dir, "keras-model"),
               options=tf.saved_model.SaveOptions(experimental_io_device=io_device))
    print("the chief finished: the model is in", os.path.join(model_dir, "keras-model"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
