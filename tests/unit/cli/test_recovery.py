"""`make train` after a lost host (tfcluster/cli/recovery.py, issue 40): each lost slot replaced alone, the train run
again, the recovery in the ledger with the steps lost; no recovery left names the command; a kind that does not own
its hosts replaces nothing."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from tfcluster.cli import recovery
from tfcluster.collect import ledger
from tfcluster.run.view import View


class FakeKind:
    has_instances = True

    def __init__(self, lost: list[dict[str, str]]) -> None:
        self.lost, self.replaced = list(lost), []

    def recover_default(self, target: Any) -> int:
        return 1

    def lost_slots(self, target: Any) -> dict[str, str]:
        return self.lost.pop(0) if self.lost else {}

    def replace_slot(self, target: Any, slot: str) -> list[str]:
        self.replaced.append(slot)
        return [f"replaced {slot}: i-old -> i-new"]


class FakeSettings:
    def __init__(self, kind: FakeKind, recover: int | None) -> None:
        self.kind, self.recover, self.target = kind, recover, object()


class FakeCommand:
    def __init__(self, kind: FakeKind, recover: int | None, job_dir: Path) -> None:
        self.s, self.job_dir, self.out = FakeSettings(kind, recover), job_dir, io.StringIO()
        self.view = View(self.out, tty=False)
        self.view.show_progress = False
        # 240 steps trained; then the lost host's peer restarts and reports no step (the last progress before the
        # failure): steps lost count from the furthest step seen
        trained = {"host": "w0", "epoch": 3, "step": 40, "steps_per_epoch": 100}
        self.view.handle({"event": "progress", "tasks": [trained]})
        self.view.handle({"event": "progress", "tasks": [{"host": "w0", "state": "running/connecting"}]})
        self.view.first_training, self.view.first_training_at = [], None

    def say(self, text: str) -> None:
        self.view.line(text)


def rerun(cmd: FakeCommand, code: int) -> Any:
    def train() -> int:
        cmd.view.handle({"event": "progress", "tasks": [{"host": "w0", "epoch": 3, "step": 1,
                                                         "steps_per_epoch": 100}]})
        return code

    return train


def test_a_lost_slot_is_replaced_alone_and_the_job_trains_again(tmp_path: Path) -> None:
    kind = FakeKind([{"worker-1": "terminated (Server.SpotInstanceTermination)"}])
    cmd = FakeCommand(kind, None, tmp_path)  # the kind's default: 1 on a spot cluster
    run = ledger.start_run(tmp_path, "c")
    assert recovery.recover(cmd, run, rerun(cmd, 0)) == 0
    assert kind.replaced == ["worker-1"]
    entry = ledger.read_ledger(tmp_path)["recoveries"][0]
    assert entry["slot"] == "worker-1" and entry["why"].startswith("terminated") and entry["steps_lost"] == 39
    assert entry["seconds"] is not None and entry["seconds"] >= 0
    out = cmd.out.getvalue()
    assert "recovering worker-1: its instance is terminated (Server.SpotInstanceTermination); replacing it alone" in out
    assert "steps lost: 39" in out


def test_no_recovery_left_names_the_slot_and_the_command(tmp_path: Path) -> None:
    kind = FakeKind([{"worker-1": "terminated"}])
    cmd = FakeCommand(kind, 0, tmp_path)
    assert recovery.recover(cmd, ledger.start_run(tmp_path, "c"), rerun(cmd, 0)) == 1
    assert kind.replaced == []
    assert "lost: worker-1 (terminated). Fix: make train RECOVER=1 replaces it alone and resumes" in cmd.out.getvalue()


def test_the_budget_is_spent_once_then_the_failure_stands(tmp_path: Path) -> None:
    kind = FakeKind([{"worker-1": "terminated"}, {"worker-0": "terminated"}])
    cmd = FakeCommand(kind, 1, tmp_path)
    assert recovery.recover(cmd, ledger.start_run(tmp_path, "c"), rerun(cmd, 1)) == 1
    assert kind.replaced == ["worker-1"]  # the second loss is named, not replaced
    assert "lost: worker-0 (terminated). Fix: make train RECOVER=1" in cmd.out.getvalue()


def test_a_failure_without_a_lost_host_is_left_alone(tmp_path: Path) -> None:
    kind = FakeKind([])
    cmd = FakeCommand(kind, 3, tmp_path)
    assert recovery.recover(cmd, ledger.start_run(tmp_path, "c"), rerun(cmd, 0)) == 1
    assert kind.replaced == [] and cmd.out.getvalue() == ""


def test_the_start_says_which(tmp_path: Path) -> None:
    assert recovery.intro(FakeSettings(FakeKind([]), None), 1).startswith("recovery: RECOVER=1: a lost host's")
    assert recovery.intro(FakeSettings(FakeKind([]), 0), 0).startswith("recovery: off (RECOVER=0)")

    class Onprem(FakeKind):
        has_instances = False

    assert recovery.intro(FakeSettings(Onprem([]), None), 0) == ""
