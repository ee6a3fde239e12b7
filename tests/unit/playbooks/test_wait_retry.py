"""The wait loop's retry (issue 21 item 3): a host unreachable from here is polled again with a backoff and shown as
such, a hanging poll never holds the other hosts, the job fails only after the grace, and the wait says its limits
when it starts."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.playbooks.test_job_wait_plugin import action, target, task_spec, wait
from tfcluster.core import contract
from tfcluster.host import supervisor
from tfcluster.run import events

UP = {"status": {"state": "running"}}
DOWN = {"error": "ssh: connect to host b port 22: No route to host", "unreachable": True}


@pytest.mark.parametrize(("failures", "interval", "seconds"), [
    (0, 2.0, 2.0), (1, 2.0, 4.0), (2, 2.0, 8.0), (3, 2.0, 16.0), (4, 2.0, 32.0), (5, 2.0, 60.0), (50, 2.0, 60.0),
    (1, 0.5, 1.0),
])
def test_backoff_doubles_up_to_a_cap(failures: int, interval: float, seconds: float) -> None:
    assert wait.backoff(failures, interval) == seconds


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_unreachable_host_is_polled_again_after_the_backoff_and_the_others_every_round() -> None:
    calls: list[tuple[float, str]] = []
    clock = Clock()
    answers = {"b": [DOWN, DOWN, DOWN, UP]}

    def fake(target: dict[str, Any], lines: int, timeout: float) -> dict[str, Any]:
        calls.append((clock.now, target["name"]))
        return answers[target["name"]].pop(0) if target["name"] in answers else UP

    poller = wait.Poller({"a": {"name": "a"}, "b": {"name": "b"}}, 5, 30.0, 1.0, poll_fn=fake, clock=clock)
    try:
        for second in range(16):
            clock.now = float(second)
            polls = poller.round(1.0)
            assert set(polls) == {"a", "b"}
    finally:
        poller.close()
    assert [t for t, host in calls if host == "a"] == [float(s) for s in range(16)]
    # b: down at 0 (next after 2 s), down at 2 (4 s), down at 6 (8 s), up at 14, then every round again
    assert [t for t, host in calls if host == "b"] == [0.0, 2.0, 6.0, 14.0, 15.0]
    assert poller.failures["b"] == 0


def test_a_hanging_poll_does_not_hold_the_other_hosts() -> None:
    release = threading.Event()
    polled: dict[str, int] = {}

    def fake(target: dict[str, Any], lines: int, timeout: float) -> dict[str, Any]:
        if target["name"] == "slow" and polled.get("slow"):
            release.wait(10)  # an ssh that hangs (its answer comes at the poll timeout)
            return DOWN
        polled[target["name"]] = polled.get(target["name"], 0) + 1
        return {"status": {"state": "running", "n": polled[target["name"]]}}

    poller = wait.Poller({"fast": {"name": "fast"}, "slow": {"name": "slow"}}, 5, 30.0, 0.05, poll_fn=fake)
    try:
        poller.round(0.05)  # the first round waits for every host
        began = time.monotonic()
        for _ in range(5):
            polls = poller.round(0.05)
        assert time.monotonic() - began < 2.0
        assert polls["fast"]["status"]["n"] == 6 and polls["slow"]["status"]["n"] == 1  # its last answer meanwhile
        release.set()
        deadline = time.monotonic() + 5
        while poller.round(0.05)["slow"] != DOWN and time.monotonic() < deadline:
            pass
        assert poller.answers["slow"] == DOWN and poller.failures["slow"] == 1
    finally:
        release.set()
        poller.close()


def test_a_poll_that_breaks_is_an_unreadable_status_not_an_unreachable_host() -> None:
    def broken(target: dict[str, Any], lines: int, timeout: float) -> dict[str, Any]:
        raise RuntimeError("bug")

    poller = wait.Poller({"a": {"name": "a"}}, 5, 30.0, 1.0, poll_fn=broken)
    try:
        assert poller.round(1.0) == {"a": {"error": "the poll failed: RuntimeError: bug"}}
    finally:
        poller.close()


def test_a_bad_target_is_no_network_problem() -> None:
    out = wait.poll({"slot": "worker:0", "spec": "/x.json", "python": "/usr/bin/python3", "pythonpath": "/",
                     "reach": {"name": "h", "connection": "ssh"}}, 5, 30)
    assert "unreachable" not in out
    assert out["error"] == "cannot reach it: h: no address (ansible_host). Fix: check the inventory"


@pytest.fixture
def flaky_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``ssh ... -- HOST COMMAND``: host ``down`` never answers (255); host ``flaky`` fails while the file
    ``flaky-down`` exists, then runs COMMAND here."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text(f'#!/bin/sh\nfor last; do :; done\nfor a; do\n  [ "$a" = down ] && {{ echo "ssh: connect to '
                   f'host down port 22: No route to host" >&2; exit 255; }}\n  [ "$a" = flaky ] && [ -e '
                   f'{tmp_path}/flaky-down ] && {{ echo "ssh: connect to host flaky port 22: Connection timed out" '
                   '>&2; exit 255; }\ndone\nexec sh -c "$last"\n')
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return tmp_path / "flaky-down"


def test_the_wait_rides_out_a_network_drop_and_finishes(tmp_path: Path, flaky_ssh: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The chief is unreachable from here for a while (its link, or this machine's, dropped): the job goes on,
    the wait shows it, retries, and decides done when the chief answers again."""
    events_file = tmp_path / "events.jsonl"
    monkeypatch.setenv(events.ENV, str(events_file))
    chief = task_spec(tmp_path, "c", f"sleep 3; touch {tmp_path}/c/model/{contract.DONE}")
    worker = task_spec(tmp_path, "w", "sleep 3")
    for spec in (chief, worker):
        supervisor.start(spec)
    flaky_ssh.touch()
    threading.Timer(2.0, flaky_ssh.unlink).start()
    result = action({"targets": {"c": target(chief, "chief:0", {"name": "c", "connection": "ssh", "host": "flaky"}),
                                 "w": target(worker, "worker:0")},
                     "chief_host": "c", "job": "j", "interval": 0.2, "print_every": 60,
                     "unreachable_grace": 60, "stall_timeout": 0}).run(task_vars={})
    assert result["decision"] == "done", result
    lines = [json.loads(line) for line in events_file.read_text().splitlines()]
    notice = next(e for e in lines if e["event"] == "notice")
    assert notice["msg"].startswith("waiting for job j: no time limit of its own")
    assert "retried for up to 60 s (UNREACHABLE_GRACE); no stall check (STALL=off)" in notice["msg"]
    away = [e for e in lines if e["event"] == "progress" and e["tasks"][0]["state"].startswith("unreachable")]
    assert away, "the drop was never shown"
    assert away[-1]["tasks"][0]["state"].endswith(", retrying)") and away[-1]["decision"] == "running"
    assert "c unreachable from here" in away[-1]["note"] and "Connection timed out" in away[-1]["note"]


def test_beyond_the_grace_the_wait_fails_naming_the_host(tmp_path: Path, flaky_ssh: Path) -> None:
    spec = task_spec(tmp_path, "o", "sleep 30")
    supervisor.start(spec)
    try:
        began = time.monotonic()
        result = action({"targets": {"d": target(spec, "worker:1", {"name": "d", "connection": "ssh", "host": "down"}),
                                     "o": target(spec, "worker:0")},
                         "chief_host": "o", "interval": 0.2, "unreachable_grace": 1}).run(task_vars={})
    finally:
        supervisor.stop(spec)
    assert (result["decision"], result["culprit"]) == ("failed", "d")
    assert "d is unreachable from here for" in result["message"] and "the grace of 1 s" in result["message"]
    assert result["log_tail"] == [] and result["error"] is None
    assert time.monotonic() - began < 20


def test_the_wait_says_its_limits_when_it_starts() -> None:
    from tfcluster.run.wait import Settings

    deadline = wait.limits_text("j", Settings(chief="c", timeout=4 * 3600 + 630, stall_timeout=600,
                                              unreachable_grace=3600))
    assert deadline == ("waiting for job j: it gives up after 4.2 h (tf_job_wait_timeout; by default MAX_DURATION "
                        "plus a margin); a host unreachable from here is retried for up to 60 min (UNREACHABLE_GRACE); "
                        "a task that makes no progress for 10 min stalls it (STALL). Interrupting this command leaves "
                        "the job running: `make wait` re-attaches")
    assert "no time limit of its own" in wait.limits_text("j", Settings(chief="c"))
