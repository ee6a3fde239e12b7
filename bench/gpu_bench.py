"""GPU benchmark (issue 11): what one GPU of a host gives the trainer, ready to run on a GPU host.

    python -m bench.gpu_bench [--steps 50] [--peak-tflops N] [--json OUT]
    python -m bench.gpu_bench --smoke          # tiny sizes on the CPU: proves the script runs (tests)

Measures, under ``MirroredStrategy`` on one GPU, with legacy Keras as the trainer uses it:

(a) the trainer's own model (``--model``, default ``cnn-heavy``, trainer/model.py) on MNIST-shaped synthetic data,
    float32 vs ``mixed_float16``: examples/s of each and the speed-up;
(b) a compute-heavy model: ResNet-50 (``tf_keras.applications.ResNet50``, random weights, 224x224x3, 1000 classes)
    on synthetic data, batch 256 per replica, ``mixed_float16`` (``--resnet-precision``): examples/s, the achieved
    TFLOP/s (3 x the forward FLOPs of every Conv2D and Dense layer per example, a standard estimate of a training
    step) and the model FLOPs utilisation (MFU) = achieved / the GPU's peak dense tensor TFLOP/s for that
    precision, from :data:`PEAK_TFLOPS` keyed by the GPU's name (``--peak-tflops`` overrides it).

Each measurement runs ``--warmup`` steps first (tracing, autotuning), then times ``--steps`` steps in one ``fit``
call with ``steps_per_execution`` = the steps (one host round trip). Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Dense (not sparse) peak TFLOP/s by GPU name, from the vendors' datasheets: (fp16/bf16 tensor, tf32 tensor, fp32).
# float32 Keras layers run on TF32 tensor cores where the GPU has them (TensorFlow's default since 2.4).
PEAK_TFLOPS: dict[str, tuple[float, float, float]] = {
    "H200": (989.0, 494.0, 67.0),
    "H100 PCIe": (756.0, 378.0, 51.0),
    "H100": (989.0, 494.0, 67.0),
    "A100": (312.0, 156.0, 19.5),
    "L40S": (362.0, 183.0, 91.6),
    "A10G": (70.0, 35.0, 31.2),
    "A10": (125.0, 62.5, 31.2),
    "L4": (121.0, 60.0, 30.3),
    "V100": (125.0, 15.7, 15.7),
    "T4": (65.0, 8.1, 8.1),
}
PRECISION_COLUMN = {"mixed_float16": 0, "mixed_bfloat16": 0, "float32": 1}


def peak_tflops(gpu_name: str, precision: str) -> float | None:
    """The table's peak for a GPU name (the longest key it contains wins: 'H100 PCIe' before 'H100')."""
    for key in sorted(PEAK_TFLOPS, key=len, reverse=True):
        if key.lower() in gpu_name.lower():
            return PEAK_TFLOPS[key][PRECISION_COLUMN[precision]]
    return None


def model_flops(model: Any) -> float:
    """Forward FLOPs per example of the Conv2D and Dense layers (2 x multiply-adds); the rest is small."""
    total = 0.0
    for layer in model.layers:
        kernel = getattr(layer, "kernel", None)
        if kernel is None:
            continue
        macs = 1.0
        for dim in kernel.shape:
            macs *= int(dim)
        spatial = layer.output_shape[1:-1] if len(layer.output_shape) > 2 else ()
        for dim in spatial:
            macs *= int(dim)
        total += 2 * macs
    return total


def _timed_fit(model: Any, x: Any, y: Any, warmup: int, steps: int) -> float:
    """Seconds for ``steps`` training steps on one constant batch, after ``warmup`` steps."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensors((x, y)).repeat().prefetch(tf.data.AUTOTUNE)
    model.fit(ds, epochs=1, steps_per_epoch=warmup, verbose=0)
    started = time.perf_counter()
    model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0)
    return time.perf_counter() - started


@dataclass(frozen=True)
class Workload:
    build: Callable[[], Any]
    shape: tuple[int, ...]
    classes: int
    batch: int


def _measure(strategy: Any, work: Workload, precision: str, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import tf_keras as keras

    batch = work.batch
    keras.mixed_precision.set_global_policy(precision)
    with strategy.scope():
        model = work.build()
        model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(), steps_per_execution=args.steps,
                      jit_compile=args.jit_compile)
    rng = np.random.default_rng(0)
    x = rng.random((batch, *work.shape), dtype=np.float32)
    y = rng.integers(0, work.classes, batch).astype("int32")
    seconds = _timed_fit(model, x, y, args.warmup, args.steps)
    flops = model_flops(model)
    keras.mixed_precision.set_global_policy("float32")
    return {"precision": precision, "batch": batch, "steps": args.steps, "seconds": round(seconds, 4),
            "examples_per_sec": round(args.steps * batch / seconds, 1),
            "train_tflops_per_example": 3 * flops / 1e12,
            "achieved_tflops": float(f"{3 * flops * args.steps * batch / seconds / 1e12:.4g}")}


def run(args: argparse.Namespace, device: str, gpu_name: str) -> dict[str, Any]:
    import tensorflow as tf
    import tf_keras as keras

    from trainer.model import build_model

    strategy = tf.distribute.MirroredStrategy([device])
    small = Workload(lambda: build_model(args.model, 0), (28, 28, 1), 10, args.batch)
    mnist = {p: _measure(strategy, small, p, args) for p in ("float32", "mixed_float16")}
    size = 32 if args.smoke else 224

    def resnet() -> Any:
        return keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=1000)

    heavy = _measure(strategy, Workload(resnet, (size, size, 3), 1000, args.resnet_batch), args.resnet_precision,
                     args)
    peak = args.peak_tflops or peak_tflops(gpu_name, args.resnet_precision)
    heavy.update(peak_tflops=peak, mfu=round(heavy["achieved_tflops"] / peak, 3) if peak else None,
                 image_size=size)
    return {"device": device, "gpu": gpu_name, "tensorflow": tf.__version__, "smoke": args.smoke,
            "jit_compile": args.jit_compile, "trainer_model": args.model, "mnist": mnist,
            "mixed_float16_speedup": round(mnist["mixed_float16"]["examples_per_sec"]
                                           / mnist["float32"]["examples_per_sec"], 2),
            "resnet50": heavy}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (proves the script runs)")
    p.add_argument("--model", default="cnn-heavy", help="the trainer model of measurement (a)")
    p.add_argument("--batch", type=int, default=256, help="(a): examples per step")
    p.add_argument("--resnet-batch", type=int, default=256, help="(b): examples per step (one replica)")
    p.add_argument("--resnet-precision", default="mixed_float16", choices=tuple(PRECISION_COLUMN))
    p.add_argument("--steps", type=int, default=50, help="timed steps of each measurement")
    p.add_argument("--warmup", type=int, default=10, help="steps before timing (tracing, autotuning)")
    p.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=True, help="XLA (GPU runs)")
    p.add_argument("--peak-tflops", type=float, default=None, help="the GPU's peak for the MFU (default: table)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return p


def _report(result: dict[str, Any]) -> None:
    mnist, heavy = result["mnist"], result["resnet50"]
    print(f"GPU: {result['gpu']} ({result['device']}), TensorFlow {result['tensorflow']}")
    print(f"(a) {result['trainer_model']}: float32 {mnist['float32']['examples_per_sec']:.0f} ex/s, mixed_float16 "
          f"{mnist['mixed_float16']['examples_per_sec']:.0f} ex/s -> {result['mixed_float16_speedup']}x")
    mfu = f"{heavy['mfu']:.1%} of {heavy['peak_tflops']:g}" if heavy["mfu"] is not None else "n/a (unknown peak)"
    print(f"(b) ResNet-50 {heavy['image_size']}px, batch {heavy['batch']}, {heavy['precision']}: "
          f"{heavy['examples_per_sec']:.0f} ex/s, {heavy['achieved_tflops']} TFLOP/s, MFU {mfu}")
    print(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.smoke:
        args.batch, args.resnet_batch, args.steps, args.warmup, args.jit_compile = 8, 2, 2, 1, False
        args.resnet_precision = "float32"  # float16 arithmetic is emulated (slow) on CPUs
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus and not args.smoke:
        print("no GPU found: nothing to measure (python -m bench.gpu_bench --smoke runs tiny sizes on the CPU)")
        return 0
    if gpus:
        name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
        device = "/gpu:0"
    else:
        name, device = "CPU (smoke)", "/cpu:0"
    result = run(args, device, name)
    _report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
