"""Models. Imports legacy Keras (``tf_keras``); call only after :func:`trainer.cli.main` set TF_USE_LEGACY_KERAS."""

from __future__ import annotations

import tf_keras as keras

from trainer.data import IMAGE_SHAPE, NUM_CLASSES


def build_model(name: str, seed: int) -> keras.Model:
    """``cnn``: the Keras multi-worker reference; ``cnn-heavy``: a compute-bound variant for scaling runs.

    Build inside ``strategy.scope()``: the variables must belong to the strategy.
    """
    init = keras.initializers.GlorotUniform
    layers: list[keras.layers.Layer] = [keras.Input(shape=IMAGE_SHAPE)]
    if name == "cnn":
        layers += [keras.layers.Conv2D(32, 3, activation="relu", kernel_initializer=init(seed)),
                   keras.layers.MaxPooling2D(2)]
    elif name == "cnn-heavy":
        layers += [keras.layers.Conv2D(64, 3, activation="relu", kernel_initializer=init(seed)),
                   keras.layers.Conv2D(64, 3, activation="relu", kernel_initializer=init(seed + 1)),
                   keras.layers.MaxPooling2D(2),
                   keras.layers.Flatten(),
                   keras.layers.Dense(128, activation="relu", kernel_initializer=init(seed + 2))]
    else:
        raise ValueError(f"unknown model {name!r}")
    layers += [keras.layers.Flatten(), keras.layers.Dense(NUM_CLASSES, activation="softmax", dtype="float32",
                                                          kernel_initializer=init(seed + 3))]
    return keras.Sequential(layers, name=name.replace("-", "_"))


def set_precision(mode: str) -> None:
    """``off`` | ``float16`` | ``bfloat16``: the global Keras policy (call before building the model)."""
    keras.mixed_precision.set_global_policy("float32" if mode == "off" else f"mixed_{mode}")


def compile_model(model: keras.Model, learning_rate: float, steps_per_execution: int, jit_compile: bool) -> None:
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(),
                  metrics=["accuracy"], steps_per_execution=steps_per_execution, jit_compile=jit_compile)
