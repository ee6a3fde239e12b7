"""The terminal view prints what hosts wrote escaped: a status field, a log line or an exception cannot move the
cursor, recolour, retitle, write the clipboard or reorder the text (tfcluster/run/view.py through
tfcluster/core/text.py)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from tests.escapes import IDS, RAW_SHOWN, assert_clean
from tfcluster.core.text import printable_lines
from tfcluster.run import view


@pytest.mark.parametrize(("raw", "shown"), RAW_SHOWN, ids=IDS)
def test_a_progress_line_shows_every_status_field_escaped(raw: str, shown: str) -> None:
    task = {"host": "w0", "slot": "worker:0", "state": f"running/{raw}", "epoch": raw, "epochs": raw,
            "step": raw, "steps_per_epoch": 9, "restarts": raw, "loss": raw, "eta_seconds": raw}
    line = view.task_line(task)
    assert_clean(line)
    assert f"running/{shown}" in line and f"epoch {shown}/{shown}" in line and f"restarts {shown}" in line


@pytest.mark.parametrize(("raw", "shown"), RAW_SHOWN, ids=IDS)
def test_the_failure_summary_shows_what_the_host_wrote_escaped(raw: str, shown: str) -> None:
    v = view.View(io.StringIO(), tty=False)
    v.handle({"event": "task_failed", "host": "w1", "task": f"Start {raw}", "msg": f"failed: {raw}"})
    v.handle({"event": "decision", "decision": "failed", "culprit": "w0", "message": f"job failed on w0 {raw}",
              "log_tail": ["step 1", f"tail {raw}"],
              "error": {"type": "ValueError", "message": f"bad {raw}", "frame": f"/job/train.py:3 in {raw}"}})
    v.handle({"event": "collected", "files": raw, "bytes": raw, "dest": f"/a/{raw}", "changed": True})
    lines = view.failure_lines(v, "artifacts/x.log")
    assert_clean(lines)
    assert lines[0] == f"job failed on w0: job failed on w0 {shown}"
    assert lines[1] == f"  error: ValueError: bad {shown}   (/job/train.py:3 in {shown})"
    assert f"w1: task 'Start {shown}' failed:" in lines
    for multiline in (f"tail {raw}", f"failed: {raw}"):  # a log line or message holding a newline: two lines
        assert all(f"    {text}" in lines for text in printable_lines(multiline))
    assert_clean(v.out.getvalue().splitlines())


def test_a_log_tail_is_capped_in_lines_and_in_length() -> None:
    v = view.View(io.StringIO(), tty=False)
    v.handle({"event": "decision", "decision": "failed", "culprit": "w0", "message": "m" * 10_000,
              "log_tail": ["x" * 100_000] * 50, "error": None})
    lines = view.failure_lines(v, "x.log")
    assert len(lines[0]) < view.TEXT_LIMIT + 40 and lines[0].endswith("...")
    assert sum(line.startswith("    x") for line in lines) == view.LOG_TAIL
    assert max(len(line) for line in lines) <= view.TEXT_LIMIT + 40


def test_the_log_end_shown_before_any_play_ran_is_escaped(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("noise\n[ERROR]: \x1b]52;c;Zm9v\x07 bad inventory\r\n")
    lines = view.failure_lines(view.View(io.StringIO(), tty=False), str(log))
    assert "    [ERROR]: \\x1b]52;c;Zm9v\\x07 bad inventory" in lines
    assert_clean(lines)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 10**400, "12", True, [1], {"a": 1}])
def test_a_number_that_is_not_one_never_breaks_the_view(value: object) -> None:
    task = {"host": "w0", "state": "running", "examples_per_sec": value, "loss": value, "eta_seconds": value,
            "age_seconds": value}
    line = view.task_line(task)
    assert_clean(line)
    assert "loss" not in line and "ETA" not in line and "ex/s" not in line
    assert view.duration(value) == "-"  # type: ignore[arg-type]


def test_on_a_terminal_the_views_own_cursor_codes_still_redraw_the_block() -> None:
    out = io.StringIO()
    v = view.View(out, tty=True)
    task = {"host": "w0", "slot": "worker:0", "state": "running/\x1b[2J\x1b]0;pwned\x07", "epoch": 1}
    v.handle({"event": "progress", "elapsed": 5, "tasks": [task, task]})
    v.handle({"event": "progress", "elapsed": 10, "tasks": [task, task]})
    text = out.getvalue()
    assert text.count("\x1b[3F") == 1 and text.count("\x1b[2K") == 6  # the view's own codes
    mine = text.replace("\x1b[3F", "").replace("\x1b[2K", "")
    assert "\x1b" not in mine and "\x07" not in mine
    assert "running/\\x1b[2J\\x1b]0;pwned\\x07" in text


@pytest.mark.parametrize(("raw", "shown"), RAW_SHOWN, ids=IDS)
def test_the_failure_summary_of_a_log_is_escaped_and_capped(raw: str, shown: str) -> None:
    from tfcluster.run import failure

    raw_line = raw.replace("\n", " ")  # summarize reads lines: a newline has split them already
    error = failure.summarize(["Traceback (most recent call last):", f'  File "/job/{raw_line}.py", line 3, in main',
                               f"    fit({raw_line})", f"ValueError: bad {raw_line} " + "x" * 1000])
    assert error is not None
    assert_clean([error["type"], error["message"], error["frame"]])
    shown_line = shown.replace("\\n", " ")
    assert error["message"].startswith(f"bad {shown_line} x") and len(error["message"]) == failure.MESSAGE_LIMIT
    assert error["frame"] == f"/job/{shown_line}.py:3 in main: fit({shown_line})"


def test_a_notice_reaches_the_terminal_escaped() -> None:
    """A role's `tfcluster_notice` debug task (e.g. local slots without a private network namespace) is shown once."""
    out = io.StringIO()
    shown = view.View(out, tty=False)
    shown.handle({"event": "notice", "host": "local-0", "msg": "local slots share this machine's network\x1b[2J"})
    text = out.getvalue()
    assert "note: local slots share this machine's network\\x1b[2J" in text
    assert "\x1b" not in text


def test_the_end_of_a_parameter_server_chief_says_which_servers_were_stopped() -> None:
    out = io.StringIO()
    shown = view.View(out, tty=False)
    shown.handle({"event": "decision", "decision": "done", "message": "every task finished", "servers": []})
    assert out.getvalue() == ""  # an ordinary end says nothing here: the summary follows
    shown.handle({"event": "decision", "decision": "done", "servers": ["ps-0"],
                  "message": "the chief c finished; its ParameterServer tasks still serving (ps-0\x1b[2J) are stopped"})
    assert "its ParameterServer tasks still serving (ps-0\\x1b[2J) are stopped" in out.getvalue()
    assert "\x1b" not in out.getvalue()
    assert shown.decision is not None and shown.decision["servers"] == ["ps-0"]


def test_a_host_unreachable_from_here_is_said_on_the_progress_block_escaped() -> None:
    """The wait's note (ssh's own words: host text) sits under the header; the state fits the line."""
    from tfcluster.run.wait import unreachable_state

    out = io.StringIO()
    v = view.View(out, tty=True)
    state = unreachable_state(3725)
    tasks = [{"host": "w0", "slot": "worker:0", "state": "running"}, {"host": "w1", "slot": "worker:1",
                                                                       "state": state}]
    v.handle({"event": "progress", "elapsed": 5, "tasks": tasks, "note": "w1 unreachable from here (\x1b[2J)"})
    v.handle({"event": "progress", "elapsed": 7, "tasks": tasks, "note": ""})
    text = out.getvalue()
    assert "         note: w1 unreachable from here (\\x1b[2J)\n" in text and "\x1b[2J" not in text
    assert state == "unreachable from here (1h02m, retrying)" and f"worker:1    {state}" in text
    assert text.count("\x1b[4F") == 1  # the second block redraws the first one's 4 lines (header, note, 2 tasks)
    assert text.endswith("\x1b[2K\n")  # and blanks the line the note left


# What ansible-playbook logs when our inventory script fails (Ansible 2.16+: the script plugin quotes its stderr,
# then the ini plugin reads the script itself as an INI file).
INVENTORY_FAILED_LOG = """[WARNING]:  * Failed to parse /repo/inventory/slots.py with script plugin: Inventory script
(/repo/inventory/slots.py) had an execution error
Standard error from inventory script:
tfcluster inventory (source terraform, TFCLUSTER_TF_DIR=/repo/infra/local) is invalid (1 problem(s)):
  - terraform output: `terraform output -json` failed (exit 1): Error: No state. """ + "x" * 600 + """ Fix: run \
`make provision` first
No inventory was printed.

[WARNING]: Failed to parse inventory with 'ini' plugin: Failed to parse inventory: Error parsing host definition
'\"\"\"tfcluster dynamic inventory: every host gets a stable TensorFlow task type': No closing quotation
[ERROR]: Completely failed to parse inventory source /repo/inventory/slots.py
"""


def test_a_failed_inventory_shows_its_own_words_and_fix_not_ansibles_parser(tmp_path: Path) -> None:
    log = tmp_path / "status.log"
    log.write_text(INVENTORY_FAILED_LOG)
    lines = view.failure_lines(view.View(io.StringIO(), tty=False), str(log))
    text = "\n".join(lines)
    assert lines[0] == "the inventory could not be read, so nothing ran:"
    assert "is invalid (1 problem(s))" in text and text.count("Fix: run `make provision` first") == 1, text
    assert "ini" not in text and "No closing quotation" not in text and "Completely failed" not in text, text
    assert all(len(line) <= view.TEXT_LIMIT + 4 for line in lines), lines



def test_a_download_that_cannot_succeed_names_the_offline_way() -> None:
    decision = {"decision": "failed", "culprit": "worker-0", "message": "worker-0 exited 1",
                "error": {"type": "Exception", "message": "URL fetch failure on https://storage.googleapis.com/"
                          "tensorflow/tf-keras-datasets/mnist.npz: None -- [Errno -3] Temporary failure in name "
                          "resolution", "frame": "train.py:12 in main"},
                "log_tail": ["Traceback (most recent call last):", "urllib.error.URLError: <urlopen error>"]}
    v = view.View(io.StringIO(), tty=False)
    v.decision = decision
    text = "\n".join(view.failure_lines(v, "x.log"))
    assert text.count("the hosts cannot reach that address") == 1, text
    assert "DATASETS=mnist" in text and "$TFCLUSTER_DATASETS/mnist.npz" in text and "numpy.load" in text, text
    other = {**decision, "error": {"type": "ValueError", "message": "bad shape"}, "log_tail": ["ValueError"]}
    v.decision = other
    assert "cannot reach" not in "\n".join(view.failure_lines(v, "x.log"))


def test_a_tasks_pace_is_a_sparkline_of_its_recent_examples_per_second() -> None:
    assert view.sparkline([100.0]) == ""  # one sample: no shape yet
    assert view.sparkline([100.0, 200.0, 300.0, 400.0]) == "▁▃▆█"
    assert view.sparkline([5000.0, 5000.0]) == "▁▁"  # flat
    assert view.sparkline([900.0, 1200.0, 5100.0], tty=False) == "pace 900 1.2k 5.1k"
    out, now = io.StringIO(), [0.0]
    v = view.View(out, tty=True, clock=lambda: now[0])
    for t, rate in enumerate([1000.0, 2000.0, 4000.0, 500.0]):
        now[0] = 10.0 * t
        v.handle({"event": "progress", "elapsed": now[0],
                  "tasks": [{"host": "w0", "state": "running/training", "examples_per_sec": rate}]})
    assert v.paces["w0"] == [1000.0, 2000.0, 4000.0, 500.0]
    assert out.getvalue().rstrip().endswith("500 ex/s  " + view.sparkline(v.paces["w0"]))
