"""The wait loop (tfcluster.cluster.wait action plugin): polls local slots in-process and hosts over ssh (a stand-in
ssh that runs the command here), decides, prints, emits events, and returns the culprit's error and log."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfcluster.core import contract
from tfcluster.host import jobspec, supervisor
from tfcluster.run import events

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / "playbooks/collections/ansible_collections/tfcluster/cluster/plugins/action/wait.py"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("_tfjob_wait_action", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wait = load(PLUGIN)
LOCAL = {"name": "w", "connection": "local"}


def task_spec(tmp: Path, name: str, script: str, max_restarts: int = 0) -> str:
    (tmp / name).mkdir()
    (tmp / name / "env").write_text(jobspec.render_env_file({"X": "1"}))
    spec = {"name": name, "argv": ["/bin/sh", "-c", script], "env_file": str(tmp / name / "env"),
            "workdir": str(tmp), "run_dir": str(tmp / name / "run"), "log": str(tmp / name / "log"),
            "model_dir": str(tmp / name / "model"), "restart_sec": 0.1, "max_restarts": max_restarts,
            "pythonpath": str(REPO)}
    path = tmp / name / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


def target(spec: str, slot: str, reach: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"slot": slot, "spec": spec, "python": "/usr/bin/python3", "pythonpath": str(REPO),
            "reach": reach or LOCAL}


@pytest.fixture
def fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``ssh OPTIONS -- HOST COMMAND`` runs COMMAND here; host ``down`` answers like an unreachable host (255)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text('#!/bin/sh\nfor last; do :; done\nfor a; do [ "$a" = down ] && { echo "ssh: connect to host '
                   'down port 22: No route to host" >&2; exit 255; }; done\nexec sh -c "$last"\n')
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return ssh


def test_poll_reads_local_slots_in_process_and_hosts_over_ssh(tmp_path: Path, fake_ssh: Path) -> None:
    spec = task_spec(tmp_path, "a", "echo hello")
    supervisor.start(spec)
    local = wait.poll(target(spec, "worker:0"), 5, 30)
    remote = wait.poll(target(spec, "worker:0", {"name": "h", "connection": "ssh", "host": "h"}), 5, 30)
    assert local["status"]["name"] == remote["status"]["name"] == "a"
    down = wait.poll(target(spec, "worker:0", {"name": "d", "connection": "ssh", "host": "down"}), 5, 30)
    assert down == {"error": "ssh: connect to host down port 22: No route to host", "unreachable": True}
    missing = wait.poll(target(str(tmp_path / "none.json"), "worker:0", {"name": "h", "connection": "ssh",
                                                                         "host": "h"}), 5, 30)
    assert "none.json is missing" in missing["error"] and "unreachable" not in missing


def test_status_words_run_the_release_with_the_system_python() -> None:
    words = wait.status_words({"spec": "/etc/tfcluster/j.json", "python": "/usr/bin/python3",
                               "pythonpath": "/opt/tfcluster/trainer/current"}, 20)
    assert words == ["env", "PYTHONPATH=/opt/tfcluster/trainer/current", "/usr/bin/python3", "-m",
                     "tfcluster.host.jobstatus", "status", "/etc/tfcluster/j.json", "--lines", "20"]


@pytest.mark.parametrize(("slot", "key"), [("chief:0", (0, 0)), ("ps:1", (1, 1)), ("worker:10", (2, 10)),
                                           ("evaluator:0", (3, 0)), ("?", (4, 0))])
def test_slot_order(slot: str, key: tuple[int, int]) -> None:
    assert wait.slot_key(slot) == key


def action(args: dict[str, Any]) -> Any:
    task = mock.Mock(args=args, async_val=0, check_mode=False, action="tfcluster.cluster.wait")
    connection = mock.Mock()
    connection._shell.tmpdir = "/tmp"
    return wait.ActionModule(task, connection, mock.Mock(), mock.Mock(), mock.Mock())


def test_the_loop_waits_until_done_printing_and_emitting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    events_file = tmp_path / "events.jsonl"
    monkeypatch.setenv(events.ENV, str(events_file))
    chief = task_spec(tmp_path, "c", f"sleep 1; touch {tmp_path}/c/model/{contract.DONE}")
    worker = task_spec(tmp_path, "w", "sleep 0.5")
    for spec in (chief, worker):
        supervisor.start(spec)
    result = action({"targets": {"w-host": target(worker, "worker:0"), "c-host": target(chief, "chief:0")},
                     "chief_host": "c-host", "job": "j", "interval": 0.2, "print_every": 60}).run(task_vars={})
    assert result["decision"] == "done" and result["culprit"] is None and result["error"] is None
    assert [t["host"] for t in result["tasks"]] == ["c-host", "w-host"]  # slot order
    kinds = [json.loads(line)["event"] for line in events_file.read_text().splitlines()]
    assert kinds[-1] == "decision" and kinds.count("progress") >= 2
    out = capsys.readouterr().out
    assert "job j: running" in out and "job j: done" in out and "c-host" in out


def test_a_failed_task_comes_back_with_its_error_and_log(tmp_path: Path) -> None:
    script = ("echo step 1; echo 'Traceback (most recent call last):'; "
              "echo '  File \"/job/user/train.py\", line 7, in main'; echo '    model.fit(x)'; "
              "echo 'ValueError: Unrecognized type PerReplica: PerReplica:{'; "
              "for i in $(seq 60); do echo \" [$i. 0. 0.]\"; done; exit 1")
    bad = task_spec(tmp_path, "b", script)
    ok = task_spec(tmp_path, "o", "sleep 30")
    for spec in (bad, ok):
        supervisor.start(spec)
    try:
        result = action({"targets": {"b": target(bad, "worker:1"), "o": target(ok, "worker:0")}, "chief_host": "o",
                         "interval": 0.2, "log_lines": 5}).run(task_vars={})
    finally:
        supervisor.stop(ok)
    assert result["decision"] == "failed" and result["culprit"] == "b"
    assert "job failed on b (exit code 1, restarts 0)" in result["message"]
    assert result["error"] == {"type": "ValueError", "message": "Unrecognized type PerReplica: PerReplica:{",
                               "frame": "/job/user/train.py:7 in main: model.fit(x)"}
    assert result["log_tail"] == [f" [{i}. 0. 0.]" for i in range(56, 61)]


def test_once_polls_once(tmp_path: Path) -> None:
    spec = task_spec(tmp_path, "s", "sleep 30")
    supervisor.start(spec)
    try:
        result = action({"targets": {"s": target(spec, "worker:0")}, "chief_host": "s", "once": True}).run(task_vars={})
    finally:
        supervisor.stop(spec)
    assert result["decision"] == "running" and result["tasks"][0]["state"] == jobspec.RUNNING


# --- any answer (issue 18): a malformed one is a failed, named host, and the wait goes on to its decision ----------
def answering(tmp_path: Path, answer: str) -> dict[str, Any]:
    """A host whose status command prints ``answer`` (a stand-in python on the far side of the fake ssh)."""
    python = tmp_path / "answer.sh"
    python.write_text(f"#!/bin/sh\ncat <<'EOF'\n{answer}\nEOF\n")
    python.chmod(0o755)
    return {"slot": "worker:1", "spec": "/etc/tfcluster/j.json", "python": str(python), "pythonpath": str(REPO),
            "reach": {"name": "h", "connection": "ssh", "host": "h"}}


@pytest.mark.parametrize(("answer", "says"), [
    ("[1, 2]", "the answer is a list, not a JSON object: [1, 2]"),
    ("3", "the answer is a number, not a JSON object: 3"),
    ('"running"', 'the answer is a string, not a JSON object: "running"'),
    ("null", "the answer is null, not a JSON object: null"),
    ('{"error": 5}', 'no state in {"error": 5}'),
    ('{"nothing": "here"}', 'no state in {"nothing": "here"}'),
    ("not json \x1b[2J", "rc=0: not json \\x1b[2J"),
])
def test_poll_turns_a_malformed_answer_into_an_error(tmp_path: Path, fake_ssh: Path, answer: str, says: str) -> None:
    out = wait.poll(answering(tmp_path, answer), 5, 30)
    assert set(out) == {"error"} and says in out["error"], out


@pytest.mark.parametrize(("answer", "says"), [
    ('{"state": 3}', "host status unreadable: state is 3, not a job state"),
    ('{"state": "running", "progress": "x"}', 'host status unreadable: progress is "x", not an object or null'),
    ('{"state": "running", "now": "x"}', 'host status unreadable: now is "x", not a number or null'),
    ("[1]", "host status unreadable: rc=0: the answer is a list, not a JSON object: [1]"),
])
def test_a_malformed_answer_fails_the_wait_naming_the_host(tmp_path: Path, fake_ssh: Path, answer: str,
                                                           says: str) -> None:
    spec = task_spec(tmp_path, "o", "sleep 30")
    supervisor.start(spec)
    try:
        result = action({"targets": {"bad": answering(tmp_path, answer), "o": target(spec, "worker:0")},
                         "chief_host": "o", "interval": 0.2}).run(task_vars={})
    finally:
        supervisor.stop(spec)
    assert (result["decision"], result["culprit"]) == ("failed", "bad")
    assert says in result["message"], result["message"]
    assert result["log_tail"] == [] and result["error"] is None
    assert [t["host"] for t in result["tasks"]] == ["o", "bad"]


@hypothesis.settings(max_examples=300, deadline=None)
@given(st.integers(-1, 255), st.text(max_size=200) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["state", "error", "x"]), inner,
                                                                max_size=3), max_leaves=8).map(json.dumps),
    st.text(max_size=50))
def test_parse_answer_never_raises(returncode: int, stdout: str, stderr: str) -> None:
    out = wait.parse_answer(returncode, stdout, stderr)
    assert (set(out) == {"status"} and isinstance(out["status"], dict) and "state" in out["status"]) or (
        set(out) == {"error"} and isinstance(out["error"], str))


# --- one ssh session per host for the whole wait (jobstatus serve) --------------------------------------------------
def stand_in(tmp_path: Path, script: str) -> dict[str, Any]:
    """A host whose python is ``script`` (a shell script run with the status words) behind the fake ssh."""
    python = tmp_path / "python.sh"
    python.write_text("#!/bin/sh\n" + script)
    python.chmod(0o755)
    return {"slot": "worker:1", "spec": "/etc/tfcluster/j.json", "python": str(python), "pythonpath": str(REPO),
            "reach": {"name": "h", "connection": "ssh", "host": "h"}}


def test_a_host_is_asked_every_poll_over_one_session_that_ends_with_the_wait(tmp_path: Path, fake_ssh: Path) -> None:
    spec = task_spec(tmp_path, "a", "sleep 30")
    supervisor.start(spec)
    streams = wait.Streams()
    remote = target(spec, "worker:0", {"name": "h", "connection": "ssh", "host": "h"})
    try:
        answers = [streams.poll(remote, 5, 30) for _ in range(3)]
        (stream,) = streams.streams.values()
        assert stream.proc is not None
        serving = [pid for pid in descendants(stream.proc.pid)
                   if cmdline(pid).startswith("/usr/bin/python3 -m tfcluster.host.jobstatus serve ")]
        assert len(serving) == 1, [cmdline(pid) for pid in descendants(stream.proc.pid)]
        assert [a["status"]["name"] for a in answers] == ["a"] * 3 and answers[0]["status"]["state"] == "running"
        assert answers[2]["status"]["now"] > answers[0]["status"]["now"]  # asked again, not replayed
        assert not streams.oneshot
        assert wait.poll(remote, 5, 30)["status"].keys() == answers[0]["status"].keys()  # the same answer
    finally:
        streams.close()
        supervisor.stop(spec)
    assert stream.proc is None and not Path(f"/proc/{serving[0]}").exists()  # it read end of input and exited


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (/proc/PID/task/*/children)."""
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        for children in Path(f"/proc/{found[-1]}/task").glob("*/children"):
            todo += [int(child) for child in children.read_text().split()]
    return found


def test_a_release_without_serve_is_asked_with_a_command_per_poll(tmp_path: Path, fake_ssh: Path) -> None:
    host = stand_in(tmp_path, 'case " $* " in *" serve "*) echo "jobstatus: invalid choice: \'serve\'" >&2; exit 2;;'
                              ' esac\necho \'{"state": "running", "name": "old"}\'\n')
    streams = wait.Streams()
    try:
        assert [streams.poll(host, 5, 30) for _ in range(2)] == [{"status": {"state": "running", "name": "old"}}] * 2
        assert len(streams.oneshot) == 1
    finally:
        streams.close()


def test_a_session_that_stops_answering_is_ended_and_the_host_unreachable(tmp_path: Path, fake_ssh: Path) -> None:
    host = stand_in(tmp_path, 'read question\necho \'{"state": "running"}\'\nexec sleep 5\n')
    streams = wait.Streams()
    try:
        assert streams.poll(host, 5, 30) == {"status": {"state": "running"}}
        assert streams.poll(host, 5, 1) == {"error": "no answer within 1 s", "unreachable": True}
        (stream,) = streams.streams.values()
        assert stream.proc is None
        assert streams.poll(host, 5, 30) == {"status": {"state": "running"}}  # a new session
    finally:
        streams.close()


def test_a_session_that_cannot_connect_or_answers_too_much_is_refused(tmp_path: Path, fake_ssh: Path) -> None:
    streams = wait.Streams()
    down = target("/etc/tfcluster/j.json", "worker:0", {"name": "d", "connection": "ssh", "host": "down"})
    big = stand_in(tmp_path, "read question\nhead -c 2000000 /dev/zero | tr '\\0' x\necho\n")
    try:
        assert streams.poll(down, 5, 30) == {"error": "ssh: connect to host down port 22: No route to host",
                                             "unreachable": True}
        assert "over 1024 KiB" in streams.poll(big, 5, 30)["error"]
        assert not streams.oneshot
    finally:
        streams.close()
