"""Pure decisions of the trainer, without TensorFlow: the GPU check, the collective, defaults from the dataclass and
the environment, the ETA, the stop request and what SIGTERM does in each phase of a run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.trainer.tf_free import loads_tensorflow
from tfcluster.core import contract
from trainer import stop
from trainer.config import FLAG_FIELDS, MODELS, ConfigError, TrainConfig, build_parser, parse_invocation
from trainer.devices import TpuHost, gpu_problem, probe_tpu_host, resolve_collective, tpu_problem
from trainer.timeline import Plan, Timeline, eta_seconds, plan_for, process_age

REPO = Path(__file__).resolve().parents[3]
W2 = json.dumps({"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, "task": {"type": "worker", "index": 0}})


@pytest.mark.parametrize(("declared", "seen", "require", "collective", "words"), [
    (0, 0, False, "ring", None),  # a CPU host
    (0, 0, False, None, None),
    (2, 2, True, "nccl", None),
    (1, 4, True, "nccl", None),  # more than declared is fine
    (1, 0, True, "ring", "1 GPU(s) declared but TensorFlow sees 0"),
    (4, 2, True, None, "4 GPU(s) declared but TensorFlow sees 2"),
    (0, 0, True, None, "1 GPU(s) declared but TensorFlow sees 0"),  # --require-gpu alone asks for one
    (1, 0, False, "ring", None),  # --no-require-gpu: train on the CPU anyway
    (0, 0, False, "nccl", "NCCL needs GPUs"),
])
def test_gpu_problem(declared: int, seen: int, require: bool, collective: str | None, words: str | None) -> None:
    problem = gpu_problem("gpu-host-1", declared, seen, require, collective)
    if words is None:
        assert problem is None
        return
    assert problem is not None and words in problem.message and "host gpu-host-1" in problem.message
    text = str(problem)
    assert "nvidia-smi" in text and "tensorflow[and-cuda]" in text and "tfcluster_gpus=0" in text


@pytest.mark.parametrize(("flag", "strategy", "expected"), [
    ("auto", "multi_worker_mirrored", "ring"), ("ring", "multi_worker_mirrored", "ring"),
    ("nccl", "multi_worker_mirrored", "nccl"), ("nccl", "mirrored", None), ("auto", "parameter_server", None),
])
def test_resolve_collective(flag: str, strategy: str, expected: str | None) -> None:
    assert resolve_collective(flag, strategy) == expected


@pytest.mark.parametrize(("argv", "env", "expected"), [
    ([], {}, ("ring", False, 0)),
    ([], {contract.ENV_COLLECTIVE: "nccl", contract.ENV_GPUS: "2"}, ("nccl", True, 2)),
    (["--collective", "ring"], {contract.ENV_COLLECTIVE: "nccl"}, ("ring", False, 0)),  # the flag wins
    (["--no-require-gpu"], {contract.ENV_GPUS: "1"}, ("ring", False, 1)),
    (["--require-gpu"], {}, ("ring", True, 0)),
    (["--gpus", "0"], {contract.ENV_GPUS: "8"}, ("ring", False, 0)),
])
def test_collective_and_gpus_from_flags_and_env(tmp_path: Path, argv: list[str], env: dict[str, str],
                                                expected: tuple[str, bool, int]) -> None:
    inv = parse_invocation(["--model-dir", str(tmp_path), "--dataset", "synthetic", *argv],
                           {contract.ENV_TF_CONFIG: W2, **env})
    assert (inv.collective, inv.require_gpu, inv.config.distribution.gpus) == expected
    assert inv.to_dict()["collective"] == expected[0]


@pytest.mark.parametrize(("env", "field", "words"), [
    ({contract.ENV_GPUS: "two"}, contract.ENV_GPUS, "not a whole number"),
    ({contract.ENV_GPUS: "-1"}, contract.ENV_GPUS, "at least 0"),
    ({contract.ENV_COLLECTIVE: "mpi"}, contract.ENV_COLLECTIVE, "not one of auto, nccl, ring"),
    ({"TFCLUSTER_SPOT_WATCH": "sometimes"}, "TFCLUSTER_SPOT_WATCH", "not one of"),
    ({contract.ENV_CHECKPOINT_S3: "s3://Bad_Bucket/x"}, "--checkpoint-s3", "not an s3://BUCKET/PREFIX"),
])
def test_bad_environment_is_bad_input(tmp_path: Path, env: dict[str, str], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_invocation(["--model-dir", str(tmp_path), "--dataset", "synthetic"], env)
    problems = {p.field: p for p in err.value.problems}
    assert field in problems and words in problems[field].message and problems[field].fix


def test_defaults_live_in_the_dataclass_once(tmp_path: Path) -> None:
    parser = build_parser()
    assert all(a.default in (None, "==SUPPRESS==") for a in parser._actions if a.dest != "help")
    inv = parse_invocation(["--model-dir", str(tmp_path)], {})
    assert inv.config == TrainConfig(model_dir=str(tmp_path))
    help_text = " ".join(parser.format_help().split())
    for dest, (_, f) in FLAG_FIELDS.items():
        if dest not in ("evaluate", "tensorboard"):
            assert f"(default: {f.default}" in help_text, dest
    choices = next(a.choices for a in parser._actions if a.dest == "model")
    assert tuple(choices) == tuple(MODELS)


def test_checkpoint_s3_from_env_and_flag(tmp_path: Path) -> None:
    env = {contract.ENV_CHECKPOINT_S3: "s3://job-bucket/jobs/a"}
    base = ["--model-dir", str(tmp_path), "--dataset", "synthetic"]
    assert parse_invocation(base, env).config.s3.checkpoint == "s3://job-bucket/jobs/a"
    assert parse_invocation([*base, "--checkpoint-s3", "s3://other/p"], env).config.s3.checkpoint == "s3://other/p"


TPU_VM = TpuHost("tpu-vm-1", ("/dev/accel0", "/dev/accel1"), True, None, "2.20.0")


@pytest.mark.parametrize(("host", "words"), [
    (TPU_VM, None),
    (TpuHost("tpu-vm-1", ("/dev/vfio/0",), True, "2.20.0", None), None),  # a TPU VM image's own TensorFlow 2.20
    (TpuHost("cpu-1", (), False, "2.21.0", None), "no TPU device"),
    (TpuHost("cpu-1", (), False, "2.21.0", None), "no TPU runtime"),
    (TpuHost("cpu-1", (), False, "2.21.0", None), "TensorFlow 2.21.0 has no TPU support"),
    (TpuHost("tpu-vm-1", ("/dev/accel0",), True, "2.21.0", None), "TensorFlow 2.21.0 has no TPU support"),
    (TpuHost("tpu-vm-1", ("/dev/accel0",), False, None, "2.20.0"), "no TPU runtime"),
])
def test_tpu_problem(host: TpuHost, words: str | None) -> None:
    problem = tpu_problem(host)
    if words is None:
        assert problem is None
        return
    assert problem is not None and problem.field == "--strategy" and words in problem.message
    assert f"host {host.name}" in problem.message and "single Cloud TPU VM (tpu='local')" in problem.message
    assert "TensorFlow <= 2.20" in problem.message and "STRATEGY=mirrored" in problem.fix


def test_probe_tpu_host_reads_devices_and_runtime_without_tensorflow(tmp_path: Path) -> None:
    nodes = {"/dev/accel*": ["/dev/accel1", "/dev/accel0"], "/dev/vfio/[0-9]*": []}
    library = tmp_path / "libtpu.so"
    library.write_bytes(b"")
    host = probe_tpu_host({"TPU_LIBRARY_PATH": str(library)}, devices=lambda pattern: nodes[pattern])
    assert host.devices == ("/dev/accel0", "/dev/accel1") and host.runtime
    bare = probe_tpu_host({}, devices=lambda pattern: [])
    assert bare.devices == () and not bare.runtime and bare.tensorflow and bare.tensorflow_tpu is None
    assert not loads_tensorflow(f"from {probe_tpu_host.__module__} import probe_tpu_host; probe_tpu_host({{}})")


@pytest.mark.parametrize(("args", "expected"), [
    ((3, None, 64, 1, 60000), Plan(3, 937, 64)),
    ((3, None, 64, 2, 60000), Plan(3, 468, 128)),
    ((2, 50, 64, 2, 60000), Plan(2, 50, 128)),
    ((1, None, 64, 4, 100), Plan(1, 1, 256)),  # fewer examples than one batch: one step
    ((1, None, 64, 1, None), Plan(1, 1, 64)),
])
def test_plan_for(args: tuple[int, int | None, int, int, int | None], expected: Plan) -> None:
    assert plan_for(*args) == expected


@pytest.mark.parametrize(("epoch", "step", "rate", "expected"), [
    (0, 0, 10.0, 30.0), (0, 10, 10.0, 29.0), (2, 100, 10.0, 0.0), (1, 50, 5.0, 30.0), (0, 5, 0.0, None),
])
def test_eta_seconds(epoch: int, step: int, rate: float, expected: float | None) -> None:
    assert eta_seconds(Plan(epochs=3, steps=100, global_batch=64), epoch, step, rate) == expected


def test_timeline_counts_from_process_start() -> None:
    assert 0.0 < process_age() < 3600
    timeline = Timeline()
    first = timeline.mark("a")
    time.sleep(0.02)
    assert timeline.mark("b") > first and timeline.mark("a") == first and list(timeline.marks) == ["a", "b"]


def test_stop_request_first_reason_wins_and_listeners_run() -> None:
    request = stop.StopRequest()
    heard: list[str] = []
    request.add_listener(lambda: heard.append("early"))
    assert request.request(stop.PREEMPTED, "spot interruption notice: terminate")
    assert not request.request(stop.STOPPED, "SIGTERM")
    request.add_listener(lambda: heard.append("late"))  # added after the fact: called at once
    assert request.reason == stop.PREEMPTED and request.is_set() and heard == ["early", "late"]
    assert {stop.PREEMPTED, stop.STOPPED} <= set(contract.JOB_STATES)


@pytest.mark.parametrize(("phase", "exits", "requested"), [
    (stop.STARTING, True, True), (stop.TRAINING, False, True), (stop.FINISHING, False, False),
])
def test_sigterm_by_phase(phase: str, exits: bool, requested: bool) -> None:
    request = stop.StopRequest()
    request.phase = phase
    exited: list[bool] = []
    stop.on_sigterm(request, lambda: exited.append(True))
    assert bool(exited) == exits and request.is_set() == requested
    assert request.reason == (stop.STOPPED if requested else None)


CHILD = """
import os, sys, time, threading
from trainer import stop
request = stop.StopRequest()
request.phase = sys.argv[1]
stop.watch_sigterm(request, lambda: os._exit(3))
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # threads made later inherit the mask
print("ready", flush=True)
if request.phase == stop.STARTING:
    time.sleep(30)  # the main thread busy elsewhere (as inside TensorFlow, connecting to peers)
    print("slept", flush=True)
elif request.event.wait(30):
    print("requested", request.reason, flush=True)
"""


@pytest.mark.parametrize(("phase", "code", "out"), [(stop.STARTING, 3, ""), (stop.TRAINING, 0, "requested stopped")])
def test_sigterm_is_seen_by_its_own_thread(phase: str, code: int, out: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, phase], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    for _ in range(3):  # a second SIGTERM changes nothing
        child.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    rest, _ = child.communicate(timeout=30)
    assert child.returncode == code and rest.strip() == out
