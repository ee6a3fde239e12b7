"""TensorFlow's multi-worker guide as users write it, MNIST through ``keras.datasets.mnist.load_data()``: no path,
no download possible on the lab hosts. It trains only when the job's Keras cache holds the file Keras accepts
(tests/lab/test_host_first_use.py)."""

import tensorflow as tf
from tensorflow import keras

per_worker_batch_size = 64
strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = per_worker_batch_size * strategy.num_replicas_in_sync

(x_train, y_train), _ = keras.datasets.mnist.load_data()
x_train, y_train = x_train[:4096] / 255.0, y_train[:4096].astype("int64")
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
