"""make status's table and make logs's choice of host and command (tfcluster/follow.py)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from tfcluster import follow

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
