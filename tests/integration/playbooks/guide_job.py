"""A script written the way TensorFlow's multi-worker guide writes one, run unchanged as a SCRIPT job.

`from tensorflow import keras`, `MultiWorkerMirroredStrategy()` built from TF_CONFIG, `model.fit`, MNIST read from the
host's dataset dir ($TFCLUSTER_DATASETS/mnist.npz), and nothing saved. It works because SCRIPT jobs select legacy
Keras (TF_USE_LEGACY_KERAS=1, tf-keras) by default; Keras 3's fit fails under MultiWorkerMirroredStrategy
(keras-team/keras#20585). Small on purpose (the CI budget): a slice of MNIST, one epoch of a few steps.
"""

import os

import numpy as np
import tensorflow as tf
from tensorflow import keras

per_worker_batch_size = 64
strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = per_worker_batch_size * strategy.num_replicas_in_sync

with np.load(os.path.join(os.environ["TFCLUSTER_DATASETS"], "mnist.npz")) as data:
    x_train, y_train = data["x_train"][:4096] / np.float32(255), data["y_train"][:4096].astype(np.int64)
dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(4096).repeat().batch(global_batch_size)

with strategy.scope():
    model = keras.Sequential([
        keras.layers.InputLayer(input_shape=(28, 28)),
        keras.layers.Reshape(target_shape=(28, 28, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=keras.optimizers.SGD(learning_rate=0.01), metrics=["accuracy"])

model.fit(dataset, epochs=1, steps_per_epoch=20, verbose=2)
