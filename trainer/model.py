"""Models. Imports legacy Keras (``tf_keras``); call only after :func:`trainer.cli.main` set TF_USE_LEGACY_KERAS.

The list of models is :data:`trainer.config.MODELS` (layer specs as data); this module only builds them.
"""

from __future__ import annotations

from typing import Any

import tf_keras as keras

from trainer.config import MODELS
from trainer.data import IMAGE_SHAPE, NUM_CLASSES

OUTPUT_SEED_OFFSET = 3


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
