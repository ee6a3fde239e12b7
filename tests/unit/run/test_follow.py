"""make status's table and make logs's choice of host and command (tfcluster/run/follow.py)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from tests.escapes import IDS, RAW_SHOWN, assert_clean
from tfcluster.run import follow

TASKS = [
    {"host": "w0", "slot": "worker:0", "state": "running/training", "epoch": 2, "epochs": 3, "step": 40,
     "steps_per_epoch": 117, "examples_per_sec": 6200.0, "age_seconds": 4.0},
    {"host": "w1", "slot": "worker:1", "state": "succeeded"},
]


def test_the_status_table_has_a_header_and_a_row_per_task_in_aligned_columns() -> None:
    autostop = {"w0": json.dumps({"installed": True, "enabled": True, "idle_minutes": 30, "mode": "jobs",
                                  "idle_seconds": 0}),
                "w1": json.dumps({"installed": True, "enabled": False, "idle_minutes": 30, "mode": "jobs"})}
    lines = follow.status_table(TASKS, now=1_700_000_000.0, autostop=autostop)
    assert lines[0].split() == ["HOST", "SLOT", "STATE", "EPOCH", "STEP", "EX/S", "LAST", "UPDATE", "AUTOSTOP"]
    assert lines[1].split()[:6] == ["w0", "worker:0", "running/training", "2/3", "40/117", "6.2k"]
    assert lines[1].endswith("(4.0 s ago)  30 min (idle 0.0 s)")
    assert lines[2].split() == ["w1", "worker:1", "succeeded", "-", "-", "-", "-", "off"]
    starts = {line.index("SLOT") if i == 0 else line.index("worker") for i, line in enumerate(lines)}
    assert len(starts) == 1, lines


@pytest.mark.parametrize(("line", "cell"), [
    ("", "-"),  # not installed there (a local slot; the task was skipped)
    ("not json", "-"),
    (json.dumps({"installed": False, "enabled": False}), "-"),
    (json.dumps({"installed": True, "enabled": False, "idle_minutes": 30}), "off"),
    (json.dumps({"installed": True, "enabled": True, "idle_minutes": 10, "mode": "jobs_and_ssh",
                 "idle_seconds": 245}), "10 min, jobs_and_ssh (idle 4m05s)"),
])
def test_the_autostop_column_says_the_setting_and_the_idle_time(line: str, cell: str) -> None:
    assert follow.autostop_cell(line) == cell


def test_the_autostop_file_is_optional(tmp_path: Path) -> None:
    assert follow.read_autostop(tmp_path / "absent.json") == {}
    (tmp_path / "a.json").write_text(json.dumps({"w0": "{}"}))
    assert follow.read_autostop(tmp_path / "a.json") == {"w0": "{}"}


def test_logs_follow_the_chief_unless_host_is_given_and_an_unknown_host_is_named(tmp_path: Path) -> None:
    path = tmp_path / "targets.json"
    targets = {"w0": {"slot": "worker:0"}, "w1": {"slot": "worker:1"}}
    path.write_text(json.dumps({"chief_host": "w0", "targets": targets}))
    chief, targets = follow.read_targets(path)
    assert follow.pick(chief, targets, None)[0] == "w0"
    assert follow.pick(chief, targets, "w1")[0] == "w1"
    with pytest.raises(follow.FollowError, match=r"HOST=w9 is not a host.*Fix: HOST= one of w0, w1"):
        follow.pick(chief, targets, "w9")
    with pytest.raises(follow.FollowError, match="no job targets"):
        follow.read_targets(tmp_path / "missing.json")


def test_the_remote_command_follows_the_spec_with_the_release_on_pythonpath() -> None:
    target = {"spec": "/etc/tfcluster/j.json", "python": "/usr/bin/python3", "pythonpath": "/opt/t/current",
              "unit": "tfcluster-j.service"}
    assert follow.logs_words(target, lines=5) == [
        "env", "PYTHONPATH=/opt/t/current", "/usr/bin/python3", "-m", "tfcluster.host.jobstatus", "logs",
        "/etc/tfcluster/j.json", "--lines", "5", "--follow", "--unit", "tfcluster-j.service"]


def test_a_local_slot_is_followed_in_this_process_until_its_task_ends(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from tfcluster.host import jobstatus

    calls = []
    monkeypatch.setattr(jobstatus, "logs", lambda spec, unit, lines, follow, out: calls.append((spec, follow)) or 0)
    target = {"spec": str(tmp_path / "j.json"), "reach": {"name": "w0", "connection": "local"}}
    assert follow.follow("w0", target, io.StringIO()) == 0
    assert calls == [(str(tmp_path / "j.json"), True)]


def test_a_remote_slot_runs_the_command_through_its_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ssh argv comes from Reach; here `ssh` is replaced by a program that prints its arguments."""
    seen = []

    class FakeReach:
        local = False

        def argv(self, words: list[str]) -> list[str]:
            seen.append(words)
            return [sys.executable, "-c", "import sys; print(' '.join(sys.argv[1:]))", *words]

    monkeypatch.setattr(follow.Reach, "from_info", classmethod(lambda cls, info: FakeReach()))
    out = io.StringIO()
    target = {"spec": "/s.json", "python": "py", "pythonpath": "/p", "reach": {"name": "h", "host": "10.0.0.1"}}
    assert follow.follow("h", target, out) == 0
    assert "tfcluster.host.jobstatus logs /s.json" in out.getvalue()
    assert seen and seen[0][-1] == "--follow"


# --- what hosts wrote is shown, never obeyed ------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "shown"), RAW_SHOWN, ids=IDS)
def test_every_cell_of_the_status_table_is_escaped(raw: str, shown: str) -> None:
    task = {"host": "w0", "slot": "worker:0", "state": f"running/{raw}", "epoch": raw, "epochs": 3, "step": 5,
            "steps_per_epoch": raw, "examples_per_sec": raw, "age_seconds": raw}
    autostop = {"w0": json.dumps({"installed": True, "enabled": True, "idle_minutes": 30, "mode": raw,
                                  "idle_seconds": raw})}
    lines = follow.status_table([task], now=1_700_000_000.0, autostop=autostop)
    assert_clean(lines)
    assert f"running/{shown}" in lines[1] and f"{shown}/3" in lines[1] and f"5/{shown}" in lines[1]
    assert lines[1].endswith(f"30 min, {shown} (idle ?)")


def test_a_long_cell_is_cut_and_a_bad_number_shows_nothing() -> None:
    task = {"host": "w0", "state": "x" * 10_000, "age_seconds": float("inf"), "examples_per_sec": 10**400}
    row = follow.table_row(task, 1_700_000_000.0)
    assert row[2] == "x" * (follow.CELL_LIMIT - 3) + "..." and row[5:7] == ["-", "-"]


def test_an_oversized_autostop_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "autostop.json"
    path.write_text(json.dumps({"w0": "x" * follow.AUTOSTOP_FILE_LIMIT}))
    assert follow.read_autostop(path) == {}
    path.write_text(json.dumps({"w0": "{" + " " * follow.AUTOSTOP_LINE_LIMIT + "}", "w1": 3}))
    assert follow.read_autostop(path) == {"w0": "{" + " " * follow.AUTOSTOP_LINE_LIMIT + "}", "w1": ""}
    assert follow.autostop_cell(follow.read_autostop(path)["w0"]) == "-"


HOSTILE_LOG = ("import sys, time\n"
               "sys.stdout.write('step 1\\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07\\r\\n'); sys.stdout.flush()\n"
               "time.sleep(0.2)\n"
               "sys.stdout.buffer.write(b'bad \\xff byte \\xc2\\x9b2J \\xe2\\x80\\xae\\n')\n"
               "sys.stderr.write('err \\x1b]0;title\\x07\\n')\n"
               "sys.stdout.write('no end \\x08')\n")


def fake_reach(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    class FakeReach:
        local = False

        def argv(self, words: list[str]) -> list[str]:
            return [sys.executable, "-c", script]

    monkeypatch.setattr(follow.Reach, "from_info", classmethod(lambda cls, info: FakeReach()))


def test_a_remote_log_is_read_here_and_printed_escaped_line_by_line(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_reach(monkeypatch, HOSTILE_LOG)
    out = io.StringIO()
    target = {"spec": "/s.json", "python": "py", "pythonpath": "/p", "reach": {"name": "h", "host": "10.0.0.1"}}
    assert follow.follow("h", target, out) == 0
    lines = out.getvalue().split("\n")
    assert_clean(lines)
    assert lines[0] == "step 1\\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07"  # CRLF ends a line
    assert "bad \ufffd byte \\x9b2J \\u202e" in lines and "err \\x1b]0;title\\x07" in lines  # stderr too
    assert lines[-2:] == ["no end \\x08", ""]


def test_following_ends_with_the_remote_command_and_its_exit_status(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_reach(monkeypatch, "import sys; print('x' * 20000); sys.exit(3)")
    out = io.StringIO()
    target = {"spec": "/s.json", "python": "py", "pythonpath": "/p", "reach": {"name": "h", "host": "10.0.0.1"}}
    assert follow.follow("h", target, out) == 3
    assert [len(line) for line in out.getvalue().split("\n")] == [follow.FOLLOW_LINE_LIMIT,
                                                                  follow.FOLLOW_LINE_LIMIT, 20000 - 16384, 0]


def test_a_local_slots_log_goes_through_the_same_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tfcluster.host import jobstatus

    def logs(spec: str, unit: str | None, lines: int, follow: bool, out: io.StringIO) -> int:
        out.write("a\x1b[1Ab\nc\u202e")  # a partial line: printed when the reader ends
        out.flush()
        return 0

    monkeypatch.setattr(jobstatus, "logs", logs)
    out = io.StringIO()
    assert follow.follow("w0", {"spec": str(tmp_path / "j.json"), "reach": {"name": "w0", "connection": "local"}},
                         out) == 0
    assert out.getvalue() == "a\\x1b[1Ab\nc\\u202e\n"
