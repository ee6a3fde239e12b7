"""bench/gpu_bench.py's peak table (no TensorFlow): the GPU name picks the row, the precision the column."""

from __future__ import annotations

import pytest

from bench import gpu_bench


@pytest.mark.parametrize(("name", "precision", "expected"), [
    ("NVIDIA H200", "mixed_float16", 989.0),
    ("NVIDIA H100 80GB HBM3", "mixed_bfloat16", 989.0),
    ("NVIDIA H100 PCIe", "mixed_float16", 756.0),  # the longer key wins over 'H100'
    ("NVIDIA A100-SXM4-40GB", "float32", 156.0),  # float32 Keras layers run on TF32 tensor cores
    ("NVIDIA A10G", "mixed_float16", 70.0),  # not the A10's row
    ("Tesla T4", "float32", 8.1),
    ("Some Future GPU", "mixed_float16", None),  # unknown: --peak-tflops gives it
])
def test_peak_tflops(name: str, precision: str, expected: float | None) -> None:
    assert gpu_bench.peak_tflops(name, precision) == expected


def test_bench_module_imports_no_tensorflow() -> None:
    import subprocess
    import sys

    code = "import sys, bench.gpu_bench; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
