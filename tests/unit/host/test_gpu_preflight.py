"""tfcluster/host/preflight.py's GPU and EFA checks: the GPU check creates a CUDA context and runs an op on each GPU
(not only a listing), and a listed GPU that cannot run it is a problem naming the fix; EFA is found by its uverbs
nodes and the first aws-ofi-nccl plugin dir that exists."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from tfcluster.host import preflight


def fake(tmp: Path, answer: dict[str, object]) -> list[str]:
    script = tmp / "fake.py"
    script.write_text(f"print({json.dumps(json.dumps(answer))})\n")
    return [sys.executable, str(script)]


def test_the_gpu_code_runs_an_op_placed_on_each_gpu() -> None:
    tree = ast.parse(preflight.GPU_CODE)  # valid Python, and what it does:
    assert tree.body
    code = preflight.GPU_CODE
    assert "tf.device(f'/GPU:{i}')" in code and "tf.matmul" in code and "tf.reduce_sum" in code
    assert "set_soft_device_placement(False)" in code  # an op that cannot run there fails, never falls to the CPU
    assert "list_physical_devices('GPU')" in code


@pytest.mark.parametrize(("answer", "declared", "problem"), [
    ({"gpus": 2, "ran": 2, "error": ""}, 2, None),
    ({"gpus": 2}, 2, None),  # an older answer without the op's fields
    ({"gpus": 2, "ran": 1, "error": "GPU 1: InternalError: cudaErrorOperatingSystem"}, 2,
     "cannot run an op on GPU 1"),
    ({"gpus": 1, "ran": 0, "error": ""}, 1, "tfcluster.nvidia-uvm.service"),
    ({"gpus": 1, "ran": 1}, 2, "TensorFlow sees 1 GPU(s)"),
])
def test_gpu_problem_table(tmp_path: Path, answer: dict[str, object], declared: int, problem: str | None) -> None:
    seen, got = preflight.gpu_problem(fake(tmp_path, answer), declared)
    assert seen == answer["gpus"]
    assert (got is None) == (problem is None), got
    if problem:
        assert problem in str(got) and "Fix:" in str(got)


@pytest.mark.parametrize(("setting", "devices", "enabled"), [
    ("auto", ["/dev/infiniband/uverbs0"], True), ("auto", [], False), ("", [], False),
    ("true", [], True), ("True", [], True), ("false", ["/dev/infiniband/uverbs0"], False), ("no", [], False),
])
def test_efa_enabled_table(setting: str, devices: list[str], enabled: bool) -> None:
    assert preflight.efa_enabled(setting, devices) is enabled


def test_efa_facts_find_the_devices_and_the_first_plugin_dir(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/uverbs0").write_text("")
    (tmp_path / "opt/amazon/ofi-nccl/lib").mkdir(parents=True)
    (tmp_path / "opt/aws-ofi-nccl/lib").mkdir(parents=True)
    dirs = [str(tmp_path / d) for d in ("opt/amazon/ofi-nccl/lib/x86_64-linux-gnu", "opt/amazon/ofi-nccl/lib",
                                        "opt/aws-ofi-nccl/lib")]
    facts = preflight.efa_facts("auto", dirs, str(tmp_path / "dev/uverbs*"))
    assert facts == {"enabled": True, "devices": [str(tmp_path / "dev/uverbs0")], "plugin_dir": dirs[1]}
    assert preflight.efa_facts("auto", [], str(tmp_path / "none*")) == {"enabled": False, "devices": [],
                                                                      "plugin_dir": ""}


def test_the_check_runs_under_the_units_properties() -> None:
    argv = preflight.gpu_check_argv("/venv/bin/python", "tfcluster", "tfcluster",
                                    ["ProcSubset=all", "DeviceAllow=char-nvidia-uvm rw"])
    assert argv[:2] == ["systemd-run", "--wait"] and "--pipe" in argv
    assert argv[argv.index("ProcSubset=all") - 1:argv.index("ProcSubset=all") + 1] == ["-p", "ProcSubset=all"]
    assert argv[-3:-1] == ["/venv/bin/python", "-c"] and argv[-1] == preflight.GPU_CODE
