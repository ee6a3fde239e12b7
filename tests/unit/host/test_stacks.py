"""A task's Python stacks without its help (tfcluster/host/stacks.py: py-spy) and their way to the terminal
(tfcluster/run/stacks.py: read bounded, parsed as data, escaped and cut, the task behind first), issue 40."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.host.test_job import wait_state, write_spec
from tfcluster.host import stacks as host_stacks
from tfcluster.host import supervisor
from tfcluster.host.jobspec import RUNNING
from tfcluster.run import stacks

STUCK = """
import threading, time
def wait_for_peer():
    threading.Event().wait()
def train_step():
    wait_for_peer()
print("started", flush=True)
train_step()
"""


@pytest.fixture
def stuck_task(tmp_path: Path) -> Any:
    """A task of the process backend stuck in a function of its own (as a worker in a collective)."""
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    spec = write_spec(tmp_path, [sys.executable, str(script)])
    supervisor.start(str(spec))
    try:
        wait_state(spec, (RUNNING,))
        deadline = time.time() + 30
        while "started" not in (tmp_path / "log/t.log").read_text() and time.time() < deadline:
            time.sleep(0.05)
        yield spec
    finally:
        supervisor.stop(str(spec))


def test_the_stacks_of_a_stuck_task_name_its_functions(stuck_task: Path) -> None:
    found = host_stacks.stacks(str(stuck_task))
    assert found["error"] is None and isinstance(found["pid"], int), found
    assert "wait_for_peer" in found["stacks"] and "train_step" in found["stacks"], found["stacks"]


def test_a_stopped_task_is_read_too(stuck_task: Path) -> None:
    import os
    import signal

    pid = host_stacks.stacks(str(stuck_task))["pid"]
    os.kill(pid, signal.SIGSTOP)  # a task stopped mid-step (a debugger, SIGSTOP): py-spy's attach would fail
    try:
        found = host_stacks.stacks(str(stuck_task))
    finally:
        os.kill(pid, signal.SIGCONT)
    assert found["error"] is None and "wait_for_peer" in found["stacks"], found


def test_py_spy_is_found_beside_the_jobs_python(tmp_path: Path) -> None:
    assert host_stacks.pyspy_path({"argv": [sys.executable]}) == str(Path(sys.executable).parent / "py-spy")
    assert host_stacks.pyspy_path({"argv": [str(tmp_path / "bin" / "python3")]}) in (None, host_stacks.shutil.which(
        "py-spy"))


def test_a_task_that_does_not_run_and_a_missing_py_spy_are_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                stuck_task: Path) -> None:
    (tmp_path / "never").mkdir()
    never = write_spec(tmp_path / "never", [sys.executable, "-c", "pass"])  # rendered, never started
    assert host_stacks.stacks(str(never))["error"] == "the task is not running: no process to read"
    monkeypatch.setattr(host_stacks, "pyspy_path", lambda spec: None)
    assert "py-spy is not installed on this host" in host_stacks.stacks(str(stuck_task))["error"]


def test_a_local_slot_is_read_in_this_process_and_shown_behind_first(stuck_task: Path) -> None:
    target = {"spec": str(stuck_task), "reach": {"name": "w1", "connection": "local"}, "slot": "worker:1"}
    found = stacks.gather({"w0": {**target, "spec": "/nonexistent/spec.json"}, "w1": target})
    assert "wait_for_peer" in found["w1"]["stacks"] and found["w0"]["error"]
    order = stacks.order(["w0", "w1"], {"w0": {"step_age": 3.0}, "w1": {"step_age": 90.0}}, None)
    assert order == ["w1", "w0"]  # the oldest last step on its own host's clock first
    text = stacks.lines(found, {"w0": "worker:0", "w1": "worker:1"}, order, "w1")
    assert text[0].startswith("--- w1 (worker:1), pid ") and text[0].endswith(", behind ---")
    assert any("wait_for_peer" in line for line in text)
    assert any(line.startswith("--- w0 (worker:0)") for line in text)


@pytest.mark.parametrize(("stdout", "expected"), [
    ('{"pid": 7, "stacks": "Thread 7\\n  f (x.py:1)", "error": null}', {"pid": 7, "stacks": "Thread 7\n  f (x.py:1)",
                                                                         "error": None}),
    ('{"pid": true, "stacks": 3, "error": ["x"]}', {"pid": None, "stacks": "", "error": None}),  # any shape: data
    ("not json", {"pid": None, "stacks": "", "error": "rc=1: not json"}),
    ("[1, 2]", {"pid": None, "stacks": "", "error": "rc=1: [1, 2]"}),
])
def test_a_hosts_answer_is_data(stdout: str, expected: dict[str, Any]) -> None:
    assert stacks.parse(1, stdout, "") == expected


def test_what_a_host_wrote_is_escaped_and_cut() -> None:
    long = "\n".join(f"  frame {i} \x1b[2J" for i in range(stacks.STACK_LINES + 20))
    text = stacks.lines({"w0": {"pid": 1, "stacks": long, "error": "bad\x07"}}, {"w0": "worker:0"}, ["w0"], None)
    assert all("\x1b" not in line and "\x07" not in line for line in text)
    assert text[1] == "  cannot read its stacks: bad\\x07"
    assert len(text) == 2 + stacks.STACK_LINES + 1 and text[-1] == "  ... 20 more lines not shown"
    assert "frame 0 \\x1b[2J" in text[2]  # the innermost frames first


def test_the_command_a_host_runs() -> None:
    words = stacks.words({"pythonpath": "/opt/r", "python": "/usr/bin/python3", "spec": "/etc/t.json",
                          "unit": "tfcluster-t.service"})
    assert words == ["env", "PYTHONPATH=/opt/r", "/usr/bin/python3", "-m", "tfcluster.host.stacks", "/etc/t.json",
                     "--unit", "tfcluster-t.service"]
    assert json.loads(json.dumps(words)) == words
