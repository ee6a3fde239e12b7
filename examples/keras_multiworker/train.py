"""TensorFlow's "Multi-worker training with Keras" guide example, run as a tfcluster bring-your-own-script job.

The code is the guide's (mnist_setup.py + main.py: the same model, dataset pipeline, strategy and the
write_filepath saving pattern). Four changes, all at the edges:

* data: MNIST comes from a local .npz file (``--data``, keys x_train/y_train) instead of
  ``tf.keras.datasets.mnist.load_data()``, which downloads;
* the model is saved into ``$TFCLUSTER_MODEL_DIR`` (tfcluster's model-dir convention) instead of /tmp/keras-model;
* legacy Keras (tf_keras) is selected before TensorFlow is imported: Keras 3's ``fit`` does not run under
  MultiWorkerMirroredStrategy (keras-team/keras#20585); the guide itself was written for Keras 2 (tfcluster's
  SCRIPT jobs select it by default; the line is harmless there);
* a small callback writes ``$TFCLUSTER_MODEL_DIR/status.json`` (the keys docs/trainer.md lists), so tfcluster's
  progress view shows the epoch, step, loss and ETA of this script as it does for the built-in trainer.

Run it on a cluster:  make train SCRIPT=examples/keras_multiworker/train.py \
    SCRIPT_ARGS="--data $PWD/.cache/datasets/mnist.npz"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any


def mnist_dataset(tf: Any, np: Any, path: str, batch_size: int) -> Any:
    with np.load(path) as data:  # the guide: (x_train, y_train), _ = tf.keras.datasets.mnist.load_data()
        x_train, y_train = data["x_train"], data["y_train"]
    # The `x` arrays are in uint8 and have values in the [0, 255] range.
    # You need to convert them to float32 with values in the [0, 1] range.
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000).repeat().batch(batch_size)


def build_and_compile_cnn_model(tf: Any) -> Any:
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
                  metrics=["accuracy"])
    return model


def _is_chief(task_type: str | None, task_id: int | None, cluster: dict[str, Any]) -> bool:
    # Note: there is no chief task in this example's cluster, so worker 0 is the chief (the guide's rule).
    return (task_type == "chief"
            or (task_type == "worker" and task_id == 0 and "chief" not in cluster)
            or task_type is None)


def _get_temp_dir(tf: Any, dirpath: str, task_id: int) -> str:
    temp_dir = os.path.join(dirpath, f"workertemp_{task_id}")
    tf.io.gfile.makedirs(temp_dir)
    return temp_dir


def write_filepath(tf: Any, filepath: str, task_type: str | None, task_id: int | None,
                   cluster: dict[str, Any]) -> str:
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id, cluster):
        dirpath = _get_temp_dir(tf, dirpath, task_id or 0)
    return os.path.join(dirpath, base)


def status_callback(tf: Any) -> Any:
    """Progress for tfcluster's view: status.json in the model dir, rewritten atomically (optional for a script)."""

    class Status(tf.keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.path = os.path.join(os.environ.get("TFCLUSTER_MODEL_DIR", "."), "status.json")
            self.started, self.epoch, self.last = time.monotonic(), 0, 0.0

        def write(self, **fields: Any) -> None:
            steps, epochs = self.params["steps"], self.params["epochs"]
            done = self.epoch * steps + fields.get("step", 0)
            rate = done / (time.monotonic() - self.started) if done else 0.0
            data = {"state": "training", "epoch": self.epoch + 1, "epochs": epochs, "steps_per_epoch": steps,
                    "eta_seconds": round((epochs * steps - done) / rate, 1) if rate else None,
                    "updated_at": time.time(), **fields}
            with open(f"{self.path}.{os.getpid()}.tmp", "w") as handle:
                json.dump(data, handle)
            os.replace(f"{self.path}.{os.getpid()}.tmp", self.path)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if time.monotonic() - self.last >= 2:
                self.last = time.monotonic()
                self.write(step=batch + 1, loss=float((logs or {}).get("loss", 0.0)))

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            logs = logs or {}
            self.write(step=self.params["steps"], loss=float(logs.get("loss", 0.0)),
                       accuracy=float(logs.get("accuracy", 0.0)))

    return Status()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="MNIST .npz with x_train and y_train")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=70)
    parser.add_argument("--per-worker-batch-size", type=int, default=64)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import numpy as np
    import tensorflow as tf

    tf_config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf_config["cluster"]
    num_workers = len(cluster["worker"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch_size = args.per_worker_batch_size * num_workers
    multi_worker_dataset = mnist_dataset(tf, np, args.data, global_batch_size)
    with strategy.scope():
        # Model building/compiling need to be within `strategy.scope()`.
        multi_worker_model = build_and_compile_cnn_model(tf)
    multi_worker_model.fit(multi_worker_dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                           callbacks=[status_callback(tf)])

    task_type, task_id = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
    model_path = os.path.join(os.environ["TFCLUSTER_MODEL_DIR"], "keras-model")
    write_model_path = write_filepath(tf, model_path, task_type, task_id, cluster)
    multi_worker_model.save(write_model_path)
    if not _is_chief(task_type, task_id, cluster):
        tf.io.gfile.rmtree(os.path.dirname(write_model_path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
