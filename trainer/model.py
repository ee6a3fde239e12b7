"""Models. Imports legacy Keras (``tf_keras``); call only after :func:`trainer.cli.main` set TF_USE_LEGACY_KERAS.

The list of models is :data:`trainer.config.MODELS` (layer specs as data); this module only builds them.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import tensorflow as tf
import tf_keras as keras

from trainer.config import MODELS
from trainer.data import IMAGE_SHAPE, NUM_CLASSES

OUTPUT_SEED_OFFSET = 3
# The train step's own output: seconds from the step's start to its gradients (docs/trainer.md "status.json").
STEP_COMPUTE = "step_compute_s"


def _layer(spec: tuple[Any, ...], seed: int) -> list[keras.layers.Layer]:
    init = keras.initializers.GlorotUniform(seed)
    kind = spec[0]
    if kind == "conv":
        return [keras.layers.Conv2D(spec[1], 3, activation="relu", kernel_initializer=init)]
    if kind == "pool":
        return [keras.layers.MaxPooling2D(2)]
    if kind == "dense":
        return [keras.layers.Flatten(), keras.layers.Dense(spec[1], activation="relu", kernel_initializer=init)]
    raise ValueError(f"unknown layer kind {kind!r}")


def build_model(name: str, seed: int) -> keras.Model:
    """The model ``name`` of :data:`MODELS`. Build inside ``strategy.scope()``: the variables must belong to the
    strategy. Weighted layer k is initialised with ``seed + k``, the output layer with ``seed + 3``."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}")
    layers: list[keras.layers.Layer] = [keras.Input(shape=IMAGE_SHAPE)]
    weighted = 0
    for spec in MODELS[name]:
        layers += _layer(spec, seed + weighted)
        weighted += spec[0] != "pool"
    layers += [keras.layers.Flatten(), keras.layers.Dense(NUM_CLASSES, activation="softmax", dtype="float32",
                                                          kernel_initializer=keras.initializers.GlorotUniform(
                                                              seed + OUTPUT_SEED_OFFSET))]
    return keras.Sequential(layers, name=name.replace("-", "_"))


def set_precision(mode: str) -> None:
    """``off`` | ``float16`` | ``bfloat16``: the global Keras policy (call before building the model)."""
    keras.mixed_precision.set_global_policy("float32" if mode == "off" else f"mixed_{mode}")


def compile_model(model: keras.Model, learning_rate: float, steps_per_execution: int, jit_compile: bool) -> None:
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(),
                  metrics=["accuracy"], steps_per_execution=steps_per_execution, jit_compile=jit_compile)


def timed_train_step(model: keras.Model, data: Any, *, timer: tf.Variable) -> dict[str, Any]:
    """Keras' train step (forward, loss, gradients, the optimizer's update: ``minimize`` is ``compute_gradients`` then
    ``apply_gradients``) that also writes into ``timer`` the seconds from the step's start to its gradients: before
    the optimizer's gradient all-reduce. Under MultiWorkerMirrored the all-reduce evens every worker's step rate, but
    this time is each worker's own: ``timer`` is a plain variable of the task (a train step's outputs would be
    summed across the workers by Keras). Not under XLA (``tf.timestamp`` is not compiled); on a GPU it sees when the
    kernels were queued, so it measures the host's side of the step."""
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    start = tf.timestamp()
    with tf.control_dependencies([start]):
        x = tf.nest.map_structure(tf.identity, x)
    with tf.GradientTape() as tape:
        y_pred = model(x, training=True)
        loss = model.compute_loss(x, y, y_pred, sample_weight)
    grads_and_vars = model.optimizer.compute_gradients(loss, model.trainable_variables, tape)
    with tf.control_dependencies([g for g, _ in grads_and_vars if g is not None]):
        computed = tf.timestamp()
    timer.assign(computed - start)
    model.optimizer.apply_gradients(grads_and_vars)
    return model.compute_metrics(x, y, y_pred, sample_weight)


def time_steps(model: keras.Model) -> tf.Variable:
    """Give ``model`` :func:`timed_train_step` (an instance attribute: the class, and so what is saved, is Keras');
    the variable it writes each step, made outside the strategy's scope (the task's own: never all-reduced, never
    in a checkpoint). Call outside ``strategy.scope()``."""
    with tf.init_scope():
        timer = tf.Variable(0.0, dtype=tf.float64, trainable=False, name=STEP_COMPUTE)
    model.train_step = types.MethodType(functools.partial(timed_train_step, timer=timer), model)
    return timer
