"""The wait loop reads a bounded answer from each host (tfcluster.run.bounded `read_bounded`, which the
tfcluster.cluster.wait plugin and the stacks of a stuck job use): a host that answers too much, too long or never
cannot fill the control machine's memory nor hold the loop."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tfcluster.run import bounded

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / "playbooks/collections/ansible_collections/tfcluster/cluster/plugins/action/wait.py"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("_tfjob_wait_action_bounded", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wait = load(PLUGIN)
assert wait.read_bounded is bounded.read_bounded  # the plugin reads with the one helper


def py(script: str) -> list[str]:
    return [sys.executable, "-c", script]


def test_at_most_the_limits_are_kept_and_the_rest_is_drained() -> None:
    started = time.monotonic()
    code, out, err, over = wait.read_bounded(py(
        "import sys; sys.stdout.write('o' * (5 << 20)); sys.stderr.write('e' * (1 << 20)); sys.exit(4)"), 30)
    assert (code, len(out), len(err), over) == (4, wait.STDOUT_LIMIT, wait.STDERR_LIMIT, True)
    assert time.monotonic() - started < 20


def test_an_answer_within_the_limits_comes_back_whole_and_decoded() -> None:
    code, out, err, over = wait.read_bounded(py(
        "import sys; sys.stdout.buffer.write(b'{\"state\": \"running\"}\\xff\\n'); sys.stderr.write('warn\\n')"), 30)
    assert (code, out, err, over) == (0, '{"state": "running"}\ufffd\n', "warn\n", False)


def test_a_host_that_never_answers_is_killed_at_the_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        wait.read_bounded(py("import time; time.sleep(60)"), 1)
    assert time.monotonic() - started < 10


def test_a_leftover_process_holding_stderr_does_not_hold_the_read(tmp_path: Path) -> None:
    """Like an ssh ControlPersist master: the command ends, a child it left keeps stderr open."""
    script = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(8)'], "
              "stdout=subprocess.DEVNULL); print('{\"state\": \"running\"}')")
    started = time.monotonic()
    code, out, _, over = wait.read_bounded(py(script), 30)
    assert (code, out.strip(), over) == (0, '{"state": "running"}', False)
    assert time.monotonic() - started < 10


def test_poll_refuses_an_oversized_status_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeReach:
        local = False

        def argv(self, words: list[str], extra_ssh_options: Any = ()) -> list[str]:
            return py("import json; print(json.dumps({'state': 'running', 'log_tail': ['x' * (2 << 20)]}))")

    monkeypatch.setattr(wait.Reach, "from_info", classmethod(lambda cls, info: FakeReach()))
    target = {"spec": "/s.json", "python": "py", "pythonpath": "/p", "reach": {"name": "h", "host": "h"}}
    answer = wait.poll(target, 5, 30)
    assert set(answer) == {"error"} and "over 1024 KiB" in answer["error"] and "Fix:" in answer["error"]


def test_the_loops_progress_lines_show_host_fields_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    wait.ActionModule.show("j", {"elapsed": 3, "decision": "running",
                                 "tasks": [{"host": "w0", "slot": "worker:0", "state": "running/\x1b]52;c;Zm9v\x07",
                                            "epoch": "\x9b2J", "loss": "\x1b[31m"}]})
    out = capsys.readouterr().out
    assert "running/\\x1b]52;c;Zm9v\\x07" in out and "epoch \\x9b2J/?" in out
    assert "\x1b" not in out and "\x9b" not in out and "\x07" not in out
