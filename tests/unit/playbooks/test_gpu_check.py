"""bench/gpu_check.py on the CPU: its no-GPU path, the unit properties it renders (the role's, proven against
Ansible's rendering of ``_tf_job_sandbox``), the probe it runs in the unit, and its row-by-row report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu_check
from tests.unit.playbooks.test_gpu_unit import host_vars, render, table

REPO = Path(__file__).resolve().parents[3]


def test_without_a_gpu_it_says_so_and_exits_0(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(gpu_check, "has_gpu", lambda: False)
    assert gpu_check.main([]) == 0
    assert "no GPU here" in capsys.readouterr().out


def test_the_command_on_this_machine() -> None:
    if gpu_check.has_gpu():
        pytest.skip("this machine has a GPU: the real check runs instead")
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_check"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and "no GPU here" in proc.stdout


@pytest.mark.parametrize(("gpus", "efa"), [(1, False), (1, True), (0, False), (0, True)])
def test_it_renders_the_roles_own_unit_properties(gpus: int, efa: bool) -> None:
    (role,) = render("tf_job", ["{{ _tf_job_sandbox }}"], host_vars(gpus, efa))
    assert gpu_check.unit_properties(gpus, efa) == role
    assert gpu_check.docs_table() == table()


def seen_ok() -> dict[str, object]:
    return {"proc_driver": "ok: NVRM version 580.95.05", "proc_uvm": "ok", "tun": "PermissionError: denied",
            "nodes": {"/dev/nvidia0": "ok", "/dev/nvidiactl": "ok", "/dev/nvidia-uvm": "ok",
                      "/dev/nvidia-uvm-tools": "ok"}, "caps": {}, "uverbs": {"/dev/infiniband/uverbs0": "ok"},
            "memlock": "infinity", "home": {"HOME": "ok", "KERAS_HOME": "ok"},
            "cuda": {"via": "tensorflow 2.21.0", "gpus": 1, "ops_on": ["/job:localhost/replica:0/task:0/device:GPU:0"]}}


def test_the_report_marks_each_row() -> None:
    classes = {"nvidia-frontend": 195, "nvidia-uvm": 510}
    rows = gpu_check.report(seen_ok(), table()["GPU+EFA"], {**classes, "infiniband_verbs": 231}, sandboxed=True)
    assert not [r for r in rows.values() if r.startswith("not seen")], rows
    assert rows["DeviceAllow=char-nvidia rw"].startswith("n/a")  # this driver names major 195 nvidia-frontend
    assert rows["DeviceAllow=char-nvidia-caps rw"].startswith("n/a")  # no MIG
    hidden = {**seen_ok(), "proc_driver": "FileNotFoundError: No such file", "memlock": "8388608",
              "nodes": {"/dev/nvidia0": "ok", "/dev/nvidiactl": "ok", "/dev/nvidia-uvm": "PermissionError: denied"},
              "cuda": {"via": "tensorflow", "gpus": 1, "ops_on": []}}
    bad = gpu_check.report(hidden, table()["GPU"], classes, sandboxed=True)
    assert {k for k, v in bad.items() if v.startswith("not seen")} == {
        "ProcSubset=all", "LimitMEMLOCK=infinity", "DeviceAllow=char-nvidia-uvm rw", "CUDA op on every GPU"}


def test_the_probe_runs_and_writes_the_home(tmp_path: Path) -> None:
    argv = gpu_check.probe_argv(sys.executable, "nobody", str(tmp_path / "home"), [], sandboxed=False)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env={"PATH": "/usr/bin:/bin"})
    seen = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    assert set(seen["home"].values()) == {"ok"} and (tmp_path / "home/.keras/.probe").is_file()
    assert seen["cuda"]["gpus"] in (0, -1) or gpu_check.has_gpu()
    assert seen["memlock"] and "proc_driver" in seen
