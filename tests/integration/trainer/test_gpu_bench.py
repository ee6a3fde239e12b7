"""`python -m bench.gpu_bench` runs: without a GPU it says so and exits 0; `--smoke` measures tiny sizes on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.trainer.trainer_procs import REPO, base_env

pytestmark = pytest.mark.integration


def test_gpu_bench_without_gpu_and_smoke(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    plain = subprocess.run([sys.executable, "-m", "bench.gpu_bench"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=120, check=False)
    assert plain.returncode == 0 and "no GPU found" in plain.stdout, plain.stderr[-2000:]

    out = tmp_path / "gpu.json"
    smoke = subprocess.run([sys.executable, "-m", "bench.gpu_bench", "--smoke", "--json", str(out)], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=300, check=False)
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["smoke"] and result["device"] == "/cpu:0"
    assert {p: m["examples_per_sec"] > 0 for p, m in result["mnist"].items()} == {"float32": True,
                                                                                   "mixed_float16": True}
    heavy = result["resnet50"]
    # ResNet-50 at 32x32: the conv/dense FLOPs scale with the image area (about 8 GFLOPs forward at 224x224)
    assert 3 * 0.1e9 < heavy["train_tflops_per_example"] * 1e12 < 3 * 0.3e9
    assert heavy["achieved_tflops"] > 0 and heavy["mfu"] is None  # no peak for a CPU
    assert heavy["precision"] == "float32" and "ResNet-50 32px" in smoke.stdout
