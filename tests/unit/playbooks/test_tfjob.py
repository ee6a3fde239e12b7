"""The tf_job role's tfjob tool: env files, exit classes, unit states, the supervisor, the wait decision."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "playbooks" / "roles"


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module



tfjob = load("tfjob", ROLES / "tf_job/files/tfjob.py")
manifest = load("manifest", ROLES / "collector/files/manifest.py")




def tf_config(index: int, n: int = 2) -> str:
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{2000 + i}" for i in range(n)]},
                       "task": {"type": "worker", "index": index}})


def host(task_type: str, index: int, port: int, tfc: str | None = None) -> dict:
    return {"tfcluster_task_type": task_type, "tfcluster_task_index": index,
            "tfcluster_address": f"127.0.0.1:{port}", "tfcluster_tf_config": tfc or json.dumps(
                {"cluster": {}, "task": {"type": task_type, "index": index}})}


# --- env files --------------------------------------------------------------------------------------------------

def test_parse_env_file_quotes_and_comments() -> None:
    text = "# managed\nTF_CONFIG='{\"a\": \"b c\"}'\nX=\"q \\\"d\\\"\"\n\nPLAIN=1\n"
    assert tfjob.parse_env_file(text) == {"TF_CONFIG": '{"a": "b c"}', "X": 'q "d"', "PLAIN": "1"}


@pytest.mark.parametrize("line", ["no equals sign", "BAD KEY=1", "=value"])
def test_parse_env_file_rejects_bad_lines(line: str) -> None:
    with pytest.raises(tfjob.TfJobError, match="is not KEY=VALUE"):
        tfjob.parse_env_file(line)


# --- exit codes and systemd states ------------------------------------------------------------------------------

@pytest.mark.parametrize(("code", "outcome"), [(0, "succeeded"), (3, "preempted"), (1, "failure"), (2, "failure"),
                                               (-9, "failure")])
def test_classify_exit(code: int, outcome: str) -> None:
    assert tfjob.classify_exit(code, tfjob.SPEC_DEFAULTS)[0] == outcome


def test_classify_exit_reports_signals_like_a_shell() -> None:
    assert tfjob.classify_exit(-9, tfjob.SPEC_DEFAULTS) == ("failure", 137, 9)


@pytest.mark.parametrize(("props", "state"), [
    ({"ActiveState": "active"}, "running"),
    ({"ActiveState": "activating", "SubState": "auto-restart"}, "restarting"),
    ({"ActiveState": "failed"}, "failed"),
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "0"}, "inactive"),
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "5", "ExecMainStatus": "3",
      "Result": "success"}, "preempted"),
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "5", "ExecMainStatus": "0",
      "Result": "success"}, "succeeded"),
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "5", "ExecMainStatus": "15",
      "Result": "signal"}, "stopped"),
])
def test_systemd_state(props: dict, state: str) -> None:
    assert tfjob.systemd_state(props) == state


@pytest.mark.parametrize(("text", "state", "code"), [
    (None, "inactive", None),                        # never ended on this host (or rebooted: /run is gone)
    ("success exited 0\n", "succeeded", 0),
    ("success exited 3\n", "preempted", 3),          # SuccessExitStatus=3: spot preemption, not a failure
    ("exit-code exited 1\n", "stopped", 1),
    ("signal killed KILL\n", "stopped", None),
    ("garbage\n", "inactive", None),
])
def test_last_exit_of_an_unloaded_unit(tmp_path: Path, text: str | None, state: str, code: int | None) -> None:
    """systemd unloads an inactive unit (its properties read "never started"); ExecStopPost's record decides."""
    if text is not None:
        (tmp_path / "last-exit").write_text(text)
    assert tfjob.last_exit_state(tfjob.read_last_exit(str(tmp_path))) == (state, code)


# --- the supervisor ---------------------------------------------------------------------------------------------

def write_spec(tmp: Path, argv: list[str], **more: object) -> Path:
    (tmp / "job.env").write_text(f"TF_CONFIG='{tf_config(0)}'\nGREETING=hello\n")
    spec = {"name": "t", "argv": argv, "env_file": str(tmp / "job.env"), "workdir": str(tmp),
            "run_dir": str(tmp / "run"), "log": str(tmp / "log/t.log"), "model_dir": str(tmp / "model"),
            "restart_sec": 0.1, **more}
    path = tmp / "job.json"
    path.write_text(json.dumps(spec))
    return path


def wait_state(spec: Path, states: tuple[str, ...], timeout: float = 10) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = tfjob.status(str(spec), None)
        if status["state"] in states:
            return status
        time.sleep(0.05)
    raise AssertionError(f"state never became {states}: {tfjob.status(str(spec), None)}")


def test_supervisor_runs_with_the_env_file_only_and_start_is_idempotent(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEAK", "from-the-caller")
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "echo $GREETING ${LEAK:-clean} $TF_CONFIG; sleep 30"])
    first = tfjob.start(str(spec))
    try:
        assert first["changed"] is True
        assert tfjob.start(str(spec))["changed"] is False
        status = wait_state(spec, ("running",))
        time.sleep(0.3)
        log = (tmp_path / "log/t.log").read_text()
        assert "hello clean" in log and '"index": 0' in log
        assert status["pid"] and Path(f"/proc/{status['pid']}").exists()
    finally:
        stopped = tfjob.stop(str(spec))
    assert stopped["changed"] is True
    assert wait_state(spec, ("stopped",))["pid"] is None
    assert tfjob.stop(str(spec))["changed"] is False


def test_supervisor_restarts_on_failure_then_fails(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "echo run; exit 7"], max_restarts=2)
    tfjob.start(str(spec))
    status = wait_state(spec, ("failed",))
    assert status["exit_code"] == 7 and status["restarts"] == 2
    assert (tmp_path / "log/t.log").read_text().count("run") == 3


def test_exit_3_is_preemption_not_restarted(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "echo run; exit 3"], max_restarts=5)
    tfjob.start(str(spec))
    status = wait_state(spec, ("preempted",))
    assert status["restarts"] == 0 and status["exit_code"] == 3


def test_finalize_writes_manifest_then_done_and_the_collector_verifies_it(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/true"])
    model = tmp_path / "model" / "export"
    model.mkdir(parents=True)
    (model / "w.bin").write_bytes(b"\x00\x01")
    (model.parent / "__pycache__").mkdir()
    assert tfjob.finalize(str(spec))["changed"] is True
    assert tfjob.finalize(str(spec))["changed"] is False
    lines = (tmp_path / "model/MANIFEST.sha256").read_text().splitlines()
    expected = hashlib.sha256(b"\x00\x01").hexdigest()
    assert lines == [f"{expected}  export/w.bin"]
    assert manifest.verify(str(tmp_path / "model")) == 1


def test_port_free(tmp_path: Path) -> None:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    try:
        free, message = tfjob.port_free("127.0.0.1", port)
        assert not free and f"port 127.0.0.1:{port} is not free" in message and "pick another port" in message
    finally:
        sock.close()
    assert tfjob.port_free("127.0.0.1", port)[0]


# --- inventory checks -------------------------------------------------------------------------------------------

def test_check_inventory_accepts_a_valid_cluster() -> None:
    hosts = {"worker-0": host("worker", 0, 2000, tf_config(0)), "worker-1": host("worker", 1, 2001, tf_config(1))}
    assert tfjob.check_inventory(hosts) == []


@pytest.mark.parametrize(("hosts", "message"), [
    ({}, "the inventory has no hosts in group tfcluster"),
    ({"a": host("boss", 0, 1)}, "a: tfcluster_task_type 'boss' is not chief/worker/ps/evaluator"),
    ({"a": {**host("worker", 0, 1), "tfcluster_task_index": -1}}, "a: tfcluster_task_index -1 is not"),
    ({"a": host("worker", 0, 1), "b": host("worker", 1, 1)}, "b: address 127.0.0.1:1 is also used by a"),
    ({"a": host("worker", 0, 1), "b": host("worker", 0, 2)}, "b: slot worker:0 is also held by a"),
    ({"a": host("worker", 0, 1), "b": host("worker", 2, 2)}, "worker indices [0, 2] are not contiguous from 0"),
    ({"a": {**host("worker", 0, 1), "tfcluster_address": "nope"}}, "a: tfcluster_address 'nope' is not host:port"),
    ({"a": {**host("worker", 0, 1), "tfcluster_tf_config": "{"}}, "a: tfcluster_tf_config is missing or not"),
    ({"a": host("worker", 0, 1, tf_config(1))}, "a: tfcluster_tf_config task worker:1 does not match the slot"),
    ({"a": host("ps", 0, 1)}, "no chief and no worker in the inventory"),
    ({"a": host("chief", 0, 1), "b": host("chief", 0, 2)}, "b: slot chief:0 is also held by a"),
])
def test_check_inventory_names_the_host_and_the_fix(hosts: dict, message: str) -> None:
    problems = tfjob.check_inventory(hosts)
    assert any(message in problem for problem in problems), problems
    assert all("Fix:" in problem for problem in problems)


# --- the wait decision ------------------------------------------------------------------------------------------

def result(state: str, **more: object) -> dict:
    return {"rc": 0, "stdout": json.dumps({"state": state, "restarts": 0, "log_tail": ["last line"], **more})}


def payload(*states: dict, **more: object) -> dict:
    names = [f"worker-{i}" for i in range(len(states))]
    return {"now": 1000.0, "started_at": 900.0, "timeout": 3600, "stall_timeout": 600, "chief": "worker-0",
            "require_done": True, "names": names, "results": list(states), "task_types": ["worker"] * len(states),
            "task_indexes": list(range(len(states))), **more}


def test_evaluate_running_prints_a_line_per_worker() -> None:
    progress = {"state": "training", "epoch": 2, "epochs": 3, "step": 10, "steps_per_epoch": 100,
                "examples_per_sec": 12345.6, "loss": 0.5, "accuracy": 0.9}
    out = tfjob.evaluate(payload(result("running", progress=progress), result("running")))
    assert out["decision"] == "running"
    assert out["lines"][0].startswith("worker-0   worker:0   running/training")
    assert "epoch 2/3" in out["lines"][0] and "step 10/100" in out["lines"][0] and "12.3k ex/s" in out["lines"][0]
    assert "starting (no status.json yet)" in out["lines"][1]


def test_evaluate_done_needs_the_chiefs_marker() -> None:
    assert tfjob.evaluate(payload(result("succeeded", done=True), result("succeeded")))["decision"] == "done"
    out = tfjob.evaluate(payload(result("succeeded", done=False, model_dir="/m"), result("succeeded")))
    assert out["decision"] == "failed" and "wrote no DONE marker in /m" in out["message"]
    relaxed = tfjob.evaluate(payload(result("succeeded"), result("succeeded"), require_done=False))
    assert relaxed["decision"] == "done"


@pytest.mark.parametrize(("second", "decision", "text"), [
    (result("failed", exit_code=1, restarts=3), "failed", "job failed on worker-1 (exit code 1, restarts 3)"),
    (result("lost"), "failed", "job lost on worker-1"),
    (result("stopped"), "failed", "job is stopped on worker-1 while the others run"),
    ({"unreachable": True, "msg": "ssh: timeout"}, "failed", "host unreachable: ssh: timeout"),
    ({"rc": 1, "stdout": "", "stderr": "boom"}, "failed", "could not read job status (rc=1): boom"),
    (result("preempted"), "preempted", "worker-1 was preempted (exit 3, a backup was saved)"),
])
def test_evaluate_failures_name_the_host(second: dict, decision: str, text: str) -> None:
    out = tfjob.evaluate(payload(result("running"), second))
    assert out["decision"] == decision and out["culprit"] == "worker-1"
    assert text in out["message"]


def test_evaluate_timeout_and_stall() -> None:
    out = tfjob.evaluate(payload(result("running"), started_at=0.0, timeout=10))
    assert out["decision"] == "timeout" and "did not finish within 10s" in out["message"]
    first = tfjob.evaluate(payload(result("running"), stall_timeout=5, now=100.0))
    assert first["decision"] == "running"
    later = tfjob.evaluate(payload(result("running"), stall_timeout=5, now=106.0, seen=first["seen"]))
    assert later["decision"] == "stalled" and "worker-0 made no progress for 5s" in later["message"]
    moving = tfjob.evaluate(payload(result("running", log_mtime=105.0), stall_timeout=5, now=106.0,
                                    seen=first["seen"]))
    assert moving["decision"] == "running"


@pytest.mark.parametrize(("before", "after", "decision"), [
    ("running", "lost", "failed"),          # rebooted mid-run: the exit record in /run is gone with it
    ("restarting", "lost", "failed"),
    ("succeeded", "succeeded", "done"),     # rebooted after it finished: it did finish
    (None, "inactive", "failed"),           # never seen running: inactive while the other one runs
])
def test_evaluate_remembers_what_the_last_poll_saw(before: str | None, after: str, decision: str) -> None:
    first = tfjob.evaluate(payload(result("succeeded", done=True), result(before or "inactive")))
    seen = first["seen"] if before else {}
    other = "succeeded" if decision == "done" else "running"
    out = tfjob.evaluate(payload(result(other, done=True), result("inactive"), seen=seen))
    assert out["seen"]["worker-1"]["state"] == after
    assert out["decision"] == decision, out
    if after == "lost":
        assert out["culprit"] == "worker-1"
        assert f"job lost on worker-1: it was {before} at the last poll and now has no unit" in out["message"]
        assert "worker-1   worker:1   lost" in out["lines"][1]


def test_evaluate_lost_even_when_every_other_task_finished() -> None:
    """The race a reboot can hit: the others exited 0 before the rebooted one's vanishing is seen."""
    first = tfjob.evaluate(payload(result("running"), result("running")))
    out = tfjob.evaluate(payload(result("succeeded", done=True), result("inactive"), seen=first["seen"]))
    assert out["decision"] == "failed" and out["culprit"] == "worker-1"


def test_evaluate_all_stopped() -> None:
    out = tfjob.evaluate(payload(result("inactive"), result("stopped")))
    assert out["decision"] == "stopped"


def test_evaluate_cli_reads_stdin() -> None:
    proc = subprocess.run([sys.executable, str(ROLES / "tf_job/files/tfjob.py"), "evaluate"],
                          input=json.dumps(payload(result("succeeded", done=True))), capture_output=True, text=True,
                          check=True)
    assert json.loads(proc.stdout)["decision"] == "done"
