"""One Slurm task (tfcluster/host/slurm_task.py): its environment and program, its record, how its state is read
from its record and the scheduler's view, and `run` itself on a fabricated Slurm step (no Slurm, no TensorFlow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tfcluster.core import contract, slurm
from tfcluster.host import slurm_task

REPO = Path(__file__).resolve().parents[3]


def spec_for(tmp_path: Path, **program: Any) -> dict[str, Any]:
    return {"job": "j", "job_dir": str(tmp_path / "job"), "release": str(REPO), "tasks": {"chief": 1, "worker": 1},
            "base_port": 12345, "strategy": "auto", "program": program or {"args": ["--epochs", "1"]},
            "datasets": "/shared/datasets/d1", "gpus_per_task": 0, "collective": "ring", "legacy_keras": True,
            "max_duration": 0, "grace": 120}


def step_env(procid: int, nodes: str = "n[9-10]", counts: str = "1(x2)") -> dict[str, str]:
    places = slurm.placement(slurm.expand_hostlist(nodes), slurm.expand_tasks_per_node(counts))
    node, local = places[procid]
    return {slurm.ENV_NODELIST: nodes, slurm.ENV_TASKS_PER_NODE: counts, slurm.ENV_PROCID: str(procid),
            slurm.ENV_LOCALID: str(local), slurm.ENV_NODENAME: node, slurm.ENV_JOB_ID: "77",
            "CUDA_VISIBLE_DEVICES": "1", "TF_CONFIG": "stale", "PATH": os.environ["PATH"]}


def test_the_environment_has_the_contracts_names_and_keeps_slurms(tmp_path: Path) -> None:
    spec = spec_for(tmp_path)
    task = slurm.resolve_env(step_env(1), spec["tasks"], 12345)
    env = slurm_task.task_env(spec, task, step_env(1))
    assert json.loads(env[contract.ENV_TF_CONFIG]) == {"cluster": {"chief": ["n9:12345"], "worker": ["n10:12345"]},
                                                       "task": {"type": "worker", "index": 0}}
    assert env[contract.ENV_TASK_TYPE] == "worker" and env[contract.ENV_TASK_INDEX] == "0"
    assert env[contract.ENV_MODEL_DIR] == str(tmp_path / "job" / "tasks" / "worker-0")
    assert env[contract.ENV_DATASETS] == "/shared/datasets/d1" and env[contract.ENV_GPUS] == "0"
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["PYTHONPATH"] == str(REPO)
    assert env["TF_USE_LEGACY_KERAS"] == "1" and contract.ENV_CHECKPOINT_S3 not in env


def test_a_task_on_one_core_of_its_step_gets_the_inter_op_floor(tmp_path: Path) -> None:
    spec = spec_for(tmp_path)
    task = slurm.resolve_env(step_env(1), spec["tasks"], 12345)
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})  # task/cgroup's cpuset: one core for the task
        env = slurm_task.task_env(spec, task, step_env(1))
        assert env[contract.ENV_INTEROP_THREADS] == str(contract.INTEROP_THREADS_MIN)
        mine = slurm_task.task_env(spec, task, {**step_env(1), contract.ENV_INTEROP_THREADS: "3"})
        assert mine[contract.ENV_INTEROP_THREADS] == "3"  # the site's or user's own value wins
    finally:
        os.sched_setaffinity(0, before)


def test_the_program_is_the_trainer_with_the_tasks_model_dir_or_the_script(tmp_path: Path) -> None:
    argv, cwd = slurm_task.program_argv(spec_for(tmp_path), "chief-0", "/v/bin/python")
    assert argv == ["/v/bin/python", "-m", "trainer", "--model-dir", str(tmp_path / "job/tasks/chief-0"), "--epochs",
                    "1"] and cwd == str(REPO)
    argv, cwd = slurm_task.program_argv(spec_for(tmp_path, script="t.py", args=["a"]), "chief-0", "p")
    assert argv == ["p", f"{REPO}/user/t.py", "a"] and cwd == f"{REPO}/user"
    argv, _ = slurm_task.program_argv(spec_for(tmp_path, package="pkg", args=[]), "chief-0", "p")
    assert argv == ["p", "-m", "pkg"]


RUNNING = {"phase": "running", "state": "RUNNING"}


@pytest.mark.parametrize(("record", "scheduler", "state"), [
    (None, {"phase": "running", "state": "RUNNING"}, "running"),  # the step is starting it
    (None, {"phase": "ended", "state": "CANCELLED"}, "inactive"),
    ({"state": "running"}, RUNNING, "running"),
    ({"state": "running"}, {"phase": "settling", "state": "COMPLETING"}, "running"),
    ({"state": "running"}, {"phase": "ended", "state": "NODE_FAIL"}, "lost"),
    ({"state": "running"}, {"phase": "ended", "state": "CANCELLED by 0"}, "stopped"),
    ({"state": "running"}, {"phase": "ended", "state": "TIMEOUT"}, "timeout"),
    ({"state": "running"}, {"phase": "ended", "state": "FAILED"}, "stopped"),  # killed with the step
    ({"state": "running"}, {"phase": "unknown", "state": ""}, "lost"),
    ({"state": "ended", "exit_code": 0}, RUNNING, "succeeded"),
    ({"state": "ended", "exit_code": 137, "signal": 9}, RUNNING, "failed"),  # killed: the culprit
    ({"state": "ended", "exit_code": 1}, {"phase": "ended", "state": "FAILED"}, "failed"),
    ({"state": "ended", "exit_code": 143, "stop_signal": 15}, RUNNING, "stopped"),  # srun ended it after another
    ({"state": "ended", "exit_code": 3, "stop_signal": 15}, {"phase": "ended", "state": "CANCELLED"}, "stopped"),
    ({"state": "ended", "exit_code": 3, "deadline": True}, {"phase": "ended", "state": "FAILED"}, "timeout"),
    ({"state": "ended", "exit_code": 3}, {"phase": "ended", "state": "TIMEOUT"}, "timeout"),
    ({"state": "ended", "exit_code": 3}, {"phase": "ended", "state": "PREEMPTED"}, "preempted"),
    ({"state": "ended", "exit_code": 2}, RUNNING, "failed"),  # bad input
])
def test_a_tasks_state_from_its_record_and_the_scheduler(record: dict[str, Any] | None, scheduler: dict[str, Any],
                                                          state: str) -> None:
    assert slurm_task.task_state(record, scheduler) == state
    assert state in contract.JOB_STATES


@pytest.mark.parametrize(("state", "phase"), [("PENDING", "pending"), ("REQUEUED", "pending"),
                                               ("RUNNING", "running"), ("COMPLETING", "settling"),
                                               ("CANCELLED by 1000", "ended"), ("COMPLETED", "ended"),
                                               ("FAILED+", "ended"), ("WEIRD", "unknown"), ("", "unknown")])
def test_scheduler_phases(state: str, phase: str) -> None:
    assert slurm_task.phase_of(state) == phase


def test_squeue_and_sacct_lines_are_parsed_and_cut() -> None:
    line = "7|PENDING|Resources|1||0:00|1:00:00|tfcluster-c-j|\n"
    found = slurm_task.parse_squeue("8|RUNNING|None|0|n1|0:01|UNLIMITED|x|\n" + line, "7")
    assert found == {"job_id": "7", "state": "PENDING", "reason": "Resources", "restarts": 1, "nodes": "",
                     "elapsed": "0:00", "time_limit": "1:00:00", "name": "tfcluster-c-j", "phase": "pending",
                     "source": "squeue"}
    assert slurm_task.parse_squeue("garbage", "7") is None
    long = "7|RUNNING|" + "r" * 5000 + "|x|n1|0|0|j|"
    assert len(slurm_task.parse_squeue(long, "7")["reason"]) == slurm_task.TEXT_LIMIT  # type: ignore[index]
    acct = slurm_task.parse_sacct("7|CANCELLED by 0|n[1-2]|00:10:00|01:00:00|0:15|tfcluster-c-j\n", "7")
    assert acct is not None and acct["phase"] == "ended" and acct["exit_code"] == "0:15"


def test_a_deadline_is_a_sigterm_within_the_grace_of_the_time_limit() -> None:
    spec = {"max_duration": 3600, "grace": 120}
    assert slurm_task.is_deadline(0.0, 3500.0, spec) and not slurm_task.is_deadline(0.0, 1000.0, spec)
    assert not slurm_task.is_deadline(0.0, 3500.0, {"max_duration": 0})


def write_spec(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def script(tmp_path: Path, body: str) -> dict[str, Any]:
    release = tmp_path / "release"
    (release / "user").mkdir(parents=True)
    (release / "user" / "t.py").write_text(body)
    spec = spec_for(tmp_path, script="t.py", args=[])
    spec["release"] = str(release)
    return spec


def run_task(spec_path: Path, procid: int, **popen: Any) -> subprocess.Popen[str]:
    env = {**step_env(procid), "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "tfcluster.host.slurm_task", "run", str(spec_path)], env=env,
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def test_run_records_the_task_logs_its_output_and_exits_with_its_status(tmp_path: Path) -> None:
    body = ("import json, os, sys\nprint('tf_config', os.environ['TF_CONFIG'])\n"
            "print('model', os.environ['TFCLUSTER_MODEL_DIR'])\nsys.exit(5)\n")
    spec = script(tmp_path, body)
    proc = run_task(write_spec(tmp_path, spec), 0)
    assert proc.wait(timeout=60) == 5
    record = json.loads((tmp_path / "job/run/chief-0.json").read_text())
    assert record["node"] == "n9" and record["slot"] == "chief-0" and record["slurm_job"] == "77"
    assert record["exit_code"] == 5 and record["state"] == "ended" and record["restart"] == 0
    log = (tmp_path / "job/logs/chief-0.log").read_text()
    assert '"chief":["n9:12345"]' in log and "chief-0 on n9 ended: exit code 5" in log
    assert (tmp_path / "job/tasks/chief-0").is_dir()
    status = slurm_task.task_status(spec, "chief-0", record, RUNNING, 5)
    assert status["state"] == "failed" and status["exit_code"] == 5 and status["node"] == "n9"


def test_a_sigterm_reaches_the_program_and_is_recorded(tmp_path: Path) -> None:
    body = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(3))\nprint('up', flush=True)\n"
            "time.sleep(60)\n")
    spec = script(tmp_path, body)
    proc = run_task(write_spec(tmp_path, spec), 1)
    log = tmp_path / "job/logs/worker-0.log"
    deadline = time.monotonic() + 30
    while "up" not in (log.read_text() if log.is_file() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # to the task only: it passes it on
    assert proc.wait(timeout=30) == 3
    record = json.loads((tmp_path / "job/run/worker-0.json").read_text())
    assert record["stop_signal"] == signal.SIGTERM and record["exit_code"] == 3
    assert slurm_task.task_state(record, {"phase": "ended", "state": "CANCELLED"}) == "stopped"


def test_a_killed_program_is_a_failure_named_by_its_signal(tmp_path: Path) -> None:
    spec = script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    proc = run_task(write_spec(tmp_path, spec), 1)
    assert proc.wait(timeout=60) == 137
    record = json.loads((tmp_path / "job/run/worker-0.json").read_text())
    assert record["signal"] == signal.SIGKILL and slurm_task.task_state(record, RUNNING) == "failed"
    assert "ended: killed by SIGKILL" in (tmp_path / "job/logs/worker-0.log").read_text()


def test_a_step_that_does_not_fit_the_layout_is_refused_and_named(tmp_path: Path) -> None:
    spec = spec_for(tmp_path)
    spec["tasks"] = {"chief": 1, "worker": 2}  # three declared, two in the step
    proc = run_task(write_spec(tmp_path, spec), 1)
    assert proc.wait(timeout=60) == contract.EXIT_BAD_INPUT
    assert "the step has 2 task(s)" in proc.stderr.read()  # type: ignore[union-attr]
    record = json.loads((tmp_path / "job/run/worker-0.json").read_text())
    assert record["exit_code"] == 2 and "the layout declares 3" in record["error"]


def test_poll_reads_the_current_run_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_for(tmp_path)
    spec_path = write_spec(tmp_path, spec)
    (tmp_path / "job/run").mkdir(parents=True)
    old = {"slurm_job": "77", "restart": 0, "state": "ended", "exit_code": 3, "node": "n9", "local_id": 0}
    new = {"slurm_job": "77", "restart": 1, "state": "running", "node": "n10", "local_id": 0, "pid": 5}
    (tmp_path / "job/run/chief-0.json").write_text(json.dumps(old))
    (tmp_path / "job/run/worker-0.json").write_text(json.dumps(new))
    monkeypatch.setattr(slurm_task, "_run_text", lambda argv: (0, "77|RUNNING|None|1|n[9-10]|0:05|UNLIMITED|j|\n"))
    doc = slurm_task.poll(str(spec_path), "77")
    assert doc["scheduler"]["restarts"] == 1 and list(doc["tasks"]) == ["chief-0", "worker-0"]
    assert doc["tasks"]["chief-0"]["state"] == "running" and doc["tasks"]["chief-0"]["node"] is None  # requeued
    assert doc["tasks"]["worker-0"]["state"] == "running" and doc["tasks"]["worker-0"]["node"] == "n10"
    json.dumps(doc)


def test_logs_print_the_chiefs_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = write_spec(tmp_path, spec_for(tmp_path))
    (tmp_path / "job/logs").mkdir(parents=True)
    (tmp_path / "job/logs/chief-0.log").write_text("".join(f"line {i}\n" for i in range(50)))
    assert slurm_task.logs(str(spec_path), "77", None, 3, follow=False) == 0
    assert capsys.readouterr().out == "line 47\nline 48\nline 49\n"
    with pytest.raises(slurm_task.JobError, match="ps-3 is not a task of job j"):
        slurm_task.logs(str(spec_path), "77", "ps-3", 3, follow=False)


def test_manifest_of_an_unfinished_model_dir_is_not_done(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert slurm_task.main(["manifest", str(tmp_path / "none")]) == 0
    assert json.loads(capsys.readouterr().out)["done"] is False


@pytest.fixture
def own_handlers() -> Any:
    saved = {signum: signal.getsignal(signum) for signum in slurm_task.FORWARDED}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_sigterm_before_the_program_started_reaches_it_once_it_runs(tmp_path: Path, own_handlers: Any) -> None:
    spec = spec_for(tmp_path)
    (tmp_path / "job/logs").mkdir(parents=True)
    record = {"slot": "chief-0", "node": "n9", "started_at": time.time(), "stop_signal": None}
    relay = slurm_task.Relay(spec, record)
    relay.forward(signal.SIGTERM)  # Slurm's SIGTERM while the program is being started
    child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))\nprint('ready', flush=True)\n"
                              "time.sleep(30)\n"], stdout=subprocess.PIPE)
    # the child's handler is installed once it says so (a fixed sleep lost that race under the suite's load)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    assert relay.supervise(child) == 3
    assert record["stop_signal"] == signal.SIGTERM and record["exit_code"] == 3
