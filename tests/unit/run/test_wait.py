"""The wait decision (tfcluster/run/wait.py) and the failure summary (tfcluster/run/failure.py): pure functions,
tables."""

from __future__ import annotations

import json
from typing import Any

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfcluster.core import contract
from tfcluster.host import jobspec
from tfcluster.run import wait
from tfcluster.run.failure import summarize
from tfcluster.run.wait import DECISIONS, DONE_DECISION, FAILED_DECISION, STALLED, Settings, decide, remembered_state

RUNNING, SUCCEEDED, PREEMPTED, TIMEOUT = jobspec.RUNNING, jobspec.SUCCEEDED, jobspec.PREEMPTED, jobspec.TIMEOUT
STOPPED, INACTIVE, FAILED, LOST = jobspec.STOPPED, jobspec.INACTIVE, jobspec.FAILED, jobspec.LOST
SETTINGS = Settings(chief="w0", require_done=True, timeout=3600, stall_timeout=600)


def ok(state: Any, **more: Any) -> dict[str, Any]:
    return {"status": {"state": state, "restarts": 0, "log_tail": ["last line"], "now": 1000.0, **more}}


def run(*polls: dict[str, Any], seen: dict | None = None, now: float = 1000.0, started: float = 900.0,
        settings: Settings = SETTINGS) -> dict[str, Any]:
    hosts = [f"w{i}" for i in range(len(polls))]
    return decide(dict(zip(hosts, polls, strict=True)), {h: f"worker:{i}" for i, h in enumerate(hosts)}, seen or {},
                  now=now, started=started, settings=settings)


def test_running_reports_one_entry_per_task_with_its_progress() -> None:
    progress = {"state": "training", "epoch": 2, "epochs": 3, "step": 10, "steps_per_epoch": 100,
                "examples_per_sec": 12345.6, "loss": 0.5, "accuracy": 0.9, "eta_seconds": 42, "other": "x"}
    out = run(ok(RUNNING, progress=progress, progress_mtime=990.0, started_at=950.0), ok(RUNNING))
    assert out["decision"] == RUNNING and out["culprit"] is None and out["elapsed"] == 100.0
    first, second = out["tasks"]
    assert first == {"host": "w0", "slot": "worker:0", "state": f"{RUNNING}/training", "restarts": 0, "epoch": 2,
                     "epochs": 3, "step": 10, "steps_per_epoch": 100, "examples_per_sec": 12345.6, "loss": 0.5,
                     "accuracy": 0.9, "eta_seconds": 42, "age_seconds": 10.0, "elapsed_seconds": 50.0}
    assert second == {"host": "w1", "slot": "worker:1", "state": RUNNING, "restarts": 0}  # a script without status


def test_done_needs_the_chiefs_marker_unless_a_script_ran() -> None:
    assert run(ok(SUCCEEDED, done=True), ok(SUCCEEDED))["decision"] == DONE_DECISION
    out = run(ok(SUCCEEDED, done=False, model_dir="/m"), ok(SUCCEEDED))
    assert out["decision"] == FAILED_DECISION and out["culprit"] == "w0"
    assert "every task exited 0 but the chief w0 wrote no DONE marker in /m" in out["message"]
    relaxed = Settings(chief="w0", require_done=False)
    assert run(ok(SUCCEEDED), ok(SUCCEEDED), settings=relaxed)["decision"] == DONE_DECISION


@pytest.mark.parametrize(("second", "decision", "text"), [
    (ok(FAILED, exit_code=1, restarts=3), FAILED_DECISION, "job failed on w1 (exit code 1, restarts 3)"),
    (ok(LOST), FAILED_DECISION, "job lost on w1"),
    (ok(STOPPED), FAILED_DECISION, "job is stopped on w1 while the others run"),
    ({"error": "rc=1: boom"}, FAILED_DECISION, "host status unreadable: rc=1: boom"),
    (ok(PREEMPTED), PREEMPTED, "w1 was preempted (exit 3, a backup was saved)"),
    (ok(TIMEOUT), TIMEOUT, "the job reached its deadline (MAX_DURATION its limit, tfcluster_max_duration) on w1"),
])
def test_the_first_reason_names_the_host(second: dict, decision: str, text: str) -> None:
    out = run(ok(RUNNING), second)
    assert out["decision"] == decision and out["culprit"] == "w1"
    assert text in out["message"]


def test_a_failure_outranks_a_deadline_and_a_deadline_outranks_preemption() -> None:
    assert run(ok(TIMEOUT), ok(FAILED))["decision"] == FAILED_DECISION
    out = run(ok(PREEMPTED), ok(TIMEOUT), settings=Settings(chief="w0", max_duration=60))
    assert out["decision"] == TIMEOUT and out["culprit"] == "w1"
    assert "deadline (MAX_DURATION 60 s" in out["message"] and "run it again with a longer MAX_DURATION" in out[
        "message"]


def test_the_wait_limit_and_the_stall() -> None:
    out = run(ok(RUNNING), started=0.0, settings=Settings(chief="w0", timeout=10))
    assert out["decision"] == TIMEOUT and "did not finish within 10 s (tf_job_wait_timeout)" in out["message"]
    stall = Settings(chief="w0", stall_timeout=5)
    first = run(ok(RUNNING), now=100.0, settings=stall)
    assert first["decision"] == RUNNING
    later = run(ok(RUNNING), now=106.0, seen=first["seen"], settings=stall)
    assert later["decision"] == STALLED and "w0 made no progress for 5s (tf_job_stall_timeout)" in later["message"]
    moving = run(ok(RUNNING, log_mtime=105.0), now=106.0, seen=first["seen"], settings=stall)
    assert moving["decision"] == RUNNING


@pytest.mark.parametrize(("before", "after", "decision"), [
    (RUNNING, LOST, FAILED_DECISION),       # rebooted mid-run: the exit record in /run is gone with it
    (jobspec.RESTARTING, LOST, FAILED_DECISION),
    (SUCCEEDED, SUCCEEDED, DONE_DECISION),  # rebooted after it finished: it did finish
    (None, INACTIVE, FAILED_DECISION),      # never seen running: inactive while the other one runs
])
def test_what_the_previous_round_saw_is_remembered(before: str | None, after: str, decision: str) -> None:
    first = run(ok(SUCCEEDED, done=True), ok(before or INACTIVE))
    seen = first["seen"] if before else {}
    other = SUCCEEDED if decision == DONE_DECISION else RUNNING
    out = run(ok(other, done=True), ok(INACTIVE), seen=seen)
    assert out["seen"]["w1"]["state"] == after
    assert out["decision"] == decision, out
    if after == LOST:
        assert out["culprit"] == "w1"
        assert f"job lost on w1: it was {before} at the previous poll and now has no unit" in out["message"]


def test_lost_even_when_every_other_task_finished() -> None:
    """The race a reboot can hit: the others exited 0 before the rebooted one's vanishing is seen."""
    first = run(ok(RUNNING), ok(RUNNING))
    out = run(ok(SUCCEEDED, done=True), ok(INACTIVE), seen=first["seen"])
    assert out["decision"] == FAILED_DECISION and out["culprit"] == "w1"


def test_all_stopped() -> None:
    assert run(ok(INACTIVE), ok(STOPPED))["decision"] == STOPPED


@pytest.mark.parametrize(("state", "before", "expected"), [
    (INACTIVE, None, INACTIVE), (INACTIVE, RUNNING, LOST), (INACTIVE, LOST, LOST), (INACTIVE, TIMEOUT, TIMEOUT),
    (INACTIVE, PREEMPTED, PREEMPTED), (RUNNING, SUCCEEDED, RUNNING), (INACTIVE, INACTIVE, INACTIVE),
])
def test_remembered_state(state: str, before: str | None, expected: str) -> None:
    assert remembered_state(state, before) == expected


# --- the failure summary --------------------------------------------------------------------------------------------
TENSOR_DUMP = [f" [{i}. {i + 1}. {i + 2}. ... 0. 0. 0.]" for i in range(40)]
GUIDE_FAILURE = [
    "Epoch 1/3",
    "Traceback (most recent call last):",
    '  File "/opt/tfcluster/trainer/current/user/train.py", line 48, in <module>',
    "    main()",
    '  File "/opt/tfcluster/trainer/current/user/train.py", line 44, in main',
    "    model.fit(dataset, epochs=args.epochs, steps_per_epoch=70)",
    '  File "/opt/tfcluster/venv/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 122, in '
    "error_handler",
    "    raise e.with_traceback(filtered_tb) from None",
    '  File "/opt/tfcluster/venv/lib/python3.11/site-packages/optree/ops.py", line 766, in tree_map',
    "    return treespec.unflatten(map(func, *flat_args))",
    "ValueError: Unrecognized type PerReplica: PerReplica:{",
    *TENSOR_DUMP,
    "}",
]
CHAINED = [
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3.11/json/decoder.py", line 353, in raw_decode',
    "    obj, end = self.scan_once(s, idx)",
    "StopIteration: 0",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/opt/tfcluster/trainer/current/trainer/cli.py", line 80, in main',
    "    return train.run(inv, status)",
    '  File "<frozen runpy>", line 88, in _run_code',
    "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: failed to connect",
    "Additional GRPC error information from remote target /job:worker/replica:0/task:1:",
]


@pytest.mark.parametrize(("lines", "expected"), [
    (GUIDE_FAILURE, {"type": "ValueError", "message": "Unrecognized type PerReplica: PerReplica:{",
                     "frame": "/opt/tfcluster/trainer/current/user/train.py:44 in main: "
                              "model.fit(dataset, epochs=args.epochs, steps_per_epoch=70)"}),
    (CHAINED, {"type": "tensorflow.python.framework.errors_impl.UnavailableError",
               "message": "Collective ops is aborted by: failed to connect",
               "frame": "/opt/tfcluster/trainer/current/trainer/cli.py:80 in main: return train.run(inv, status)"}),
    (["step 3", "KeyError: 'x'"], {"type": "KeyError", "message": "'x'", "frame": None}),
    (["Traceback (most recent call last):", '  File "/x/site-packages/a.py", line 1, in f', "    g()",
      "SystemExit: 2"], {"type": "SystemExit", "message": "2", "frame": None}),
    (["step 1", "step 2", *TENSOR_DUMP], None),
    ([], None),
])
def test_the_failure_summary_finds_the_exception_not_the_tensor_dump(lines: list[str], expected: dict | None) -> None:
    assert summarize(lines) == expected


def test_the_summary_keeps_only_the_first_line_of_a_long_message() -> None:
    out = summarize(["Traceback (most recent call last):", '  File "/s.py", line 1, in <module>',
                     f"RuntimeError: {'x' * 1000}"])
    assert out is not None and len(out["message"]) == 300 and out["frame"] == "/s.py:1 in <module>"


def test_exit_codes_come_from_the_contract() -> None:
    assert str(contract.EXIT_PREEMPTED) in run(ok(RUNNING), ok(PREEMPTED))["message"]


# --- any answer, any type (issue 18): the decision stays computable, the malformed host is the culprit ------------
@pytest.mark.parametrize(("second", "says"), [
    ({"status": [1, 2]}, "host status unreadable: the status is a list, not a JSON object"),
    ({"status": "running"}, "host status unreadable: the status is a string, not a JSON object"),
    ([1, 2], "host status unreadable: the poll answer is a list, not a JSON object"),
    (None, "host status unreadable: the poll answer is null, not a JSON object"),
    (ok(3), "host status unreadable: state is 3, not a job state"),
    (ok("sleeping"), 'host status unreadable: state is "sleeping", not a job state'),
    (ok(RUNNING, progress="x"), 'host status unreadable: progress is "x", not an object or null'),
    (ok(RUNNING, now="x"), 'host status unreadable: now is "x", not a number or null'),
    (ok(RUNNING, now=float("nan")), "host status unreadable: now is NaN, not a number or null"),
    (ok(RUNNING, progress_mtime=[1]), "host status unreadable: progress_mtime is [1], not a number or null"),
    (ok(RUNNING, started_at=True), "host status unreadable: started_at is true, not a number or null"),
    (ok(RUNNING, restarts="3"), 'host status unreadable: restarts is "3", not a whole number or null'),
    (ok(FAILED, exit_code=1.5), "host status unreadable: exit_code is 1.5, not a whole number or null"),
    (ok(RUNNING, log_tail="line"), 'host status unreadable: log_tail is "line", not a list of strings or null'),
    (ok(RUNNING, log_tail=[1]), "host status unreadable: log_tail is [1], not a list of strings or null"),
    (ok(SUCCEEDED, done="yes"), 'host status unreadable: done is "yes", not true/false or null'),
    (ok(RUNNING, model_dir=7), "host status unreadable: model_dir is 7, not a string or null"),
])
def test_a_malformed_answer_fails_the_job_naming_the_host(second: Any, says: str) -> None:
    out = run(ok(RUNNING), second)
    assert (out["decision"], out["culprit"]) == (FAILED_DECISION, "w1")
    assert says in out["message"], out["message"]
    assert [task["host"] for task in out["tasks"]] == ["w0", "w1"]
    assert out["tasks"][1]["state"] == "status unreadable"


def test_a_malformed_previous_round_is_ignored() -> None:
    seen = {"w0": {"state": 3, "since": "x", "marks": {}}, "w1": [1]}
    out = run(ok(RUNNING), ok(RUNNING), seen=seen)  # type: ignore[arg-type]
    assert out["decision"] == RUNNING and out["seen"]["w0"]["since"] == 1000.0


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                  max_size=4),
                    max_leaves=12)
FIELDS = {"state": st.sampled_from(contract.JOB_STATES),
          "now": st.floats(0, 2e9), "progress_mtime": st.none() | st.floats(0, 2e9),
          "log_mtime": st.none() | st.floats(0, 2e9), "started_at": st.none() | st.floats(0, 2e9),
          "restarts": st.integers(0, 10), "exit_code": st.none() | st.integers(-1, 255),
          "done": st.booleans(), "model_dir": st.just("/m"), "log_tail": st.lists(st.text(max_size=8), max_size=3),
          "progress": st.none() | st.dictionaries(st.sampled_from(["state", "epoch", "step", "loss"]), JSON,
                                                  max_size=4)}
GOOD = st.fixed_dictionaries(FIELDS).map(lambda status: {"status": status})
# Wrong on purpose: not an object, a status that is no object, or one field of a good status of the wrong type.
WRONG_TYPE = {"state": JSON.filter(lambda v: v not in contract.JOB_STATES),
              "now": st.text() | st.lists(JSON) | st.booleans() | st.just(float("nan")),
              "progress": st.text() | st.integers() | st.lists(JSON, min_size=1),
              "restarts": st.text() | st.floats() | st.booleans(),
              "log_tail": st.text() | st.lists(st.integers() | st.none(), min_size=1)}
BROKEN = (JSON.filter(lambda v: not isinstance(v, dict))
          | JSON.filter(lambda v: not isinstance(v, dict)).map(lambda v: {"status": v})
          | st.tuples(GOOD, st.sampled_from(sorted(WRONG_TYPE)), st.data()).map(
              lambda t: {"status": {**t[0]["status"], t[1]: t[2].draw(WRONG_TYPE[t[1]])}}))
FUZZ = hypothesis.settings(max_examples=300, deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])


def decide_all(polls: list[Any], seen: dict | None = None) -> dict[str, Any]:
    hosts = [f"h{i}" for i in range(len(polls))]
    return decide(dict(zip(hosts, polls, strict=True)), {h: f"worker:{i}" for i, h in enumerate(hosts)}, seen or {},
                  now=1000.0, started=900.0, settings=Settings(chief="h0", stall_timeout=5))


@FUZZ
@given(st.lists(JSON, min_size=1, max_size=4), st.lists(JSON, min_size=1, max_size=4))
def test_decide_never_raises_on_any_json(first: list[Any], second: list[Any]) -> None:
    out = decide_all(first)
    assert out["decision"] in DECISIONS
    json.dumps(out)  # the progress and decision events are JSON
    again = decide_all(second[:len(first)] + first[len(second):], seen=out["seen"])
    assert again["decision"] in DECISIONS


@FUZZ
@given(st.lists(st.tuples(st.booleans(), GOOD, BROKEN), min_size=1, max_size=4))
def test_a_malformed_host_is_the_culprit_of_a_failed_decision(hosts: list[tuple[bool, Any, Any]]) -> None:
    polls = [broken if is_broken else good for is_broken, good, broken in hosts]
    out = decide_all(polls)
    assert out["decision"] in DECISIONS
    broken = {f"h{i}" for i, (is_broken, _, _) in enumerate(hosts) if is_broken}
    if broken:
        assert out["decision"] == FAILED_DECISION
        assert out["culprit"] == min(broken, key=lambda h: int(h[1:]))  # the first in slot order
        assert "status unreadable" in out["message"]


# --- the job belongs to the hosts (issue 21 item 3): unreachable from here is not failed; stall by phase ------------
AWAY = {"error": "ssh: connect to host w1 port 22: No route to host", "unreachable": True}
GRACE = Settings(chief="w0", unreachable_grace=1800, stall_timeout=0)


def rounds(*steps: tuple[float, list[Any]], settings: Settings = GRACE) -> list[dict[str, Any]]:
    """decide over several rounds (now, polls), each seeing the previous round's ``seen``."""
    outs: list[dict[str, Any]] = []
    for now, polls in steps:
        outs.append(run(*polls, seen=outs[-1]["seen"] if outs else None, now=now, started=0.0, settings=settings))
    return outs


def test_an_unreachable_host_within_the_grace_is_running_with_a_note() -> None:
    first, later = rounds((100.0, [ok(RUNNING), ok(RUNNING)]), (112.0, [ok(RUNNING), AWAY]))[0:2]
    assert first["note"] == ""
    assert (later["decision"], later["culprit"]) == (RUNNING, None)
    assert later["tasks"][1]["state"] == "unreachable from here (0 s, retrying)"
    again = rounds((100.0, [ok(RUNNING), AWAY]), (112.0, [ok(RUNNING), AWAY]))[-1]
    assert again["decision"] == RUNNING and again["tasks"][1]["state"] == "unreachable from here (12 s, retrying)"
    assert again["note"].startswith("w1 unreachable from here (w1: 12 s, ssh: connect to host w1 port 22: No route")
    assert "the job runs on; retrying for up to 30 min (UNREACHABLE_GRACE)" in again["note"]


def test_beyond_the_grace_it_fails_naming_the_host_and_the_grace() -> None:
    outs = rounds((0.0, [ok(RUNNING), AWAY]), (1800.0, [ok(RUNNING), AWAY]), (1801.0, [ok(RUNNING), AWAY]))
    assert outs[1]["decision"] == RUNNING  # at the grace, not beyond it
    out = outs[2]
    assert (out["decision"], out["culprit"]) == (FAILED_DECISION, "w1")
    assert "w1 is unreachable from here for 30 min 1 s, longer than the grace of 30 min (UNREACHABLE_GRACE" in out[
        "message"]
    assert "No route to host" in out["message"] and "Fix: check w1" in out["message"]


def test_the_grace_is_a_setting() -> None:
    short = Settings(chief="w0", unreachable_grace=60)
    outs = rounds((0.0, [ok(RUNNING), AWAY]), (61.0, [ok(RUNNING), AWAY]), settings=short)
    assert outs[-1]["decision"] == FAILED_DECISION and "the grace of 60 s" in outs[-1]["message"]


def test_every_host_unreachable_waits_within_the_grace_then_stops_nothing() -> None:
    outs = rounds((0.0, [ok(RUNNING), ok(RUNNING)]), (10.0, [AWAY, AWAY]), (1000.0, [AWAY, AWAY]),
                  (1811.0, [AWAY, AWAY]))
    assert [o["decision"] for o in outs[:3]] == [RUNNING] * 3
    assert outs[2]["note"].startswith("every host is unreachable from here (16 min 30 s: ssh: connect")
    assert "this machine's network may be down, the job runs on without it" in outs[2]["note"]
    last = outs[3]
    assert (last["decision"], last["culprit"]) == ("unreachable", "w0")
    assert "nothing was stopped and the job may still run on the hosts" in last["message"]
    assert "`make wait` re-attaches" in last["message"]


def test_a_host_back_within_the_grace_goes_on_as_before() -> None:
    outs = rounds((0.0, [ok(RUNNING), ok(RUNNING)]), (10.0, [ok(RUNNING), AWAY]),
                  (70.0, [ok(RUNNING), ok(RUNNING)]), (80.0, [ok(RUNNING), AWAY]))
    assert [o["decision"] for o in outs] == [RUNNING] * 4
    assert outs[2]["note"] == "" and outs[2]["tasks"][1]["state"] == RUNNING
    assert outs[3]["tasks"][1]["state"] == "unreachable from here (0 s, retrying)"  # a new absence counts anew


def test_evidence_from_a_peer_fails_at_once_while_a_host_is_unreachable() -> None:
    outs = rounds((0.0, [ok(RUNNING), ok(RUNNING)]), (5.0, [ok(FAILED, exit_code=1, restarts=3), AWAY]))
    assert (outs[-1]["decision"], outs[-1]["culprit"]) == (FAILED_DECISION, "w0")
    assert "job failed on w0 (exit code 1, restarts 3)" in outs[-1]["message"]


def test_a_task_seen_running_that_is_gone_when_its_host_is_back_was_lost() -> None:
    """Its exit record went with a reboot while it was unreachable: the state seen before the absence counts."""
    outs = rounds((0.0, [ok(RUNNING), ok(RUNNING)]), (10.0, [ok(RUNNING), AWAY]), (60.0, [ok(RUNNING), ok(INACTIVE)]))
    assert (outs[-1]["decision"], outs[-1]["culprit"]) == (FAILED_DECISION, "w1")
    assert "job lost on w1: it was running at the previous poll" in outs[-1]["message"]


def test_a_task_stopped_while_an_unreachable_one_was_last_seen_running_fails() -> None:
    outs = rounds((0.0, [ok(RUNNING), ok(RUNNING)]), (10.0, [ok(STOPPED), AWAY]))
    assert (outs[-1]["decision"], outs[-1]["culprit"]) == (FAILED_DECISION, "w0")


def test_not_done_while_a_host_is_unreachable() -> None:
    outs = rounds((0.0, [ok(RUNNING), ok(RUNNING)]), (10.0, [ok(SUCCEEDED, done=True), AWAY]),
                  (20.0, [ok(SUCCEEDED, done=True), ok(SUCCEEDED)]))
    assert [o["decision"] for o in outs] == [RUNNING, RUNNING, DONE_DECISION]


def test_no_limit_of_its_own_unless_set() -> None:
    assert run(ok(RUNNING), now=10 * 86400.0, started=0.0, settings=Settings(chief="w0"))["decision"] == RUNNING


def test_make_status_says_unreachable_without_retrying() -> None:
    once = Settings(chief="w0", retrying=False)
    out = run(ok(RUNNING), AWAY, settings=once)
    assert out["tasks"][1]["state"] == "unreachable from here (0 s)" and "not retried (one poll)" in out["note"]


def training(epoch: int, step: int, steps: int = 100, **more: Any) -> dict[str, Any]:
    return ok(RUNNING, progress={"state": "training", "epoch": epoch, "step": step, "steps_per_epoch": steps},
              **more)


def phase(name: str, **more: Any) -> dict[str, Any]:
    return ok(RUNNING, progress={"state": name}, **more)


STALL = Settings(chief="w0", stall_timeout=60)


@pytest.mark.parametrize("name", ["starting", "exporting", "serving"])
def test_a_phase_other_than_training_is_progress(name: str) -> None:
    """The trainer downloads its data while it says starting (S3 included: minutes)."""
    outs = rounds((0.0, [phase(name)]), (5000.0, [phase(name)]), settings=STALL)
    assert outs[-1]["decision"] == RUNNING


def test_waiting_for_peers_longer_than_the_stall_time_is_a_stall() -> None:
    """A peer cut from the others never comes: its peers say connecting until the stall time, then the job stops."""
    outs = rounds((0.0, [phase("starting")]), (10.0, [phase("connecting")]), (69.0, [phase("connecting")]),
                  (71.0, [phase("connecting")]), settings=STALL)
    assert [o["decision"] for o in outs] == [RUNNING, RUNNING, RUNNING, STALLED]
    assert "w0 made no progress for 60s" in outs[-1]["message"]
    back = rounds((0.0, [phase("connecting")]), (50.0, [training(1, 1)]), (100.0, [training(1, 2)]), settings=STALL)
    assert {o["decision"] for o in back} == {RUNNING}


def test_while_training_the_step_must_advance() -> None:
    moving = rounds(*[(t * 50.0, [training(1, 10 + t)]) for t in range(6)], settings=STALL)
    assert {o["decision"] for o in moving} == {RUNNING}
    stuck = rounds((0.0, [training(1, 10, progress_mtime=0.0)]), (60.0, [training(1, 10, progress_mtime=59.0)]),
                   (61.0, [training(1, 10, progress_mtime=61.0)]), settings=STALL)
    assert stuck[1]["decision"] == RUNNING
    assert (stuck[2]["decision"], stuck[2]["culprit"]) == (STALLED, "w0")  # a rewritten status.json is no step
    assert "w0 made no progress for 60s (tf_job_stall_timeout): its epoch and step did not advance" in stuck[2][
        "message"]
    assert "Fix: a longer STALL= waits longer, STALL=off turns the stall check off" in stuck[2]["message"]


def test_a_long_download_then_training_starts_the_clock_at_training() -> None:
    outs = rounds((0.0, [phase("starting")]), (3000.0, [phase("starting")]), (3001.0, [training(1, 0)]),
                  (3001.0 + 110, [training(1, 3)]), (3111.0 + 59, [training(1, 3)]), settings=STALL)
    assert [o["decision"] for o in outs] == [RUNNING] * 5


def test_an_epoch_boundary_gets_twice_the_stall_plus_the_longest_epoch() -> None:
    """Epoch 1 is seen from t=0 to t=300 (its longest epoch); at the end of epoch 2 (its backup, its checkpoint)
    the allowance is 2 x 60 + 300 s."""
    steps = [(0.0, [training(1, 1)]), (150.0, [training(1, 50)]), (300.0, [training(2, 1)]),
             (400.0, [training(2, 100)])]
    outs = rounds(*steps, (400.0 + 420, [training(2, 100)]), settings=STALL)
    assert outs[-1]["decision"] == RUNNING and outs[-1]["seen"]["w0"]["longest_epoch"] == 300.0
    late = rounds(*steps, (400.0 + 421, [training(2, 100)]), settings=STALL)[-1]
    assert late["decision"] == STALLED and "made no progress for 420s" in late["message"]
    first_step = rounds((0.0, [training(1, 0)]), (120.0, [training(1, 0)]), settings=STALL)  # the compile
    assert first_step[-1]["decision"] == RUNNING


def test_a_script_without_a_phase_is_judged_by_its_output() -> None:
    outs = rounds((0.0, [ok(RUNNING, log_mtime=0.0)]), (50.0, [ok(RUNNING, log_mtime=50.0)]),
                  (105.0, [ok(RUNNING, log_mtime=50.0)]), (111.0, [ok(RUNNING, log_mtime=50.0)]), settings=STALL)
    assert [o["decision"] for o in outs] == [RUNNING, RUNNING, RUNNING, STALLED]
    assert "its status.json and log did not change" in outs[-1]["message"]


def test_stall_off() -> None:
    off = Settings(chief="w0", stall_timeout=0)
    for polls in ([ok(RUNNING)], [training(1, 5)]):
        assert rounds((0.0, polls), (10 * 86400.0, polls), settings=off)[-1]["decision"] == RUNNING


def test_a_stall_while_a_host_is_unreachable_names_that_host_too() -> None:
    """A host cut from its peers stalls them: the stall is the hosts' evidence, and says which host is away."""
    outs = rounds((0.0, [training(1, 5), training(1, 5)]), (10.0, [training(1, 5), AWAY]),
                  (61.0, [training(1, 5), AWAY]), settings=STALL)
    assert (outs[-1]["decision"], outs[-1]["culprit"]) == (STALLED, "w0")
    assert "while w1 is unreachable from here (a host cut from its peers stalls them)" in outs[-1]["message"]


# --- a ParameterServer job ends with its chief (issue 36) ------------------------------------------------------------
PS_SLOTS = {"c0": "chief:0", "p0": "ps:0", "w0": "worker:0", "w1": "worker:1"}


def ps_round(states: dict[str, str], *, seen: dict | None = None, now: float = 1000.0,
             require_done: bool = False, done: bool = True) -> dict[str, Any]:
    polls = {host: ok(states[host], **({"done": done} if host == "c0" else {})) for host in PS_SLOTS}
    return decide(polls, PS_SLOTS, seen or {}, now=now, started=900.0,
                  settings=Settings(chief="c0", require_done=require_done))


@pytest.mark.parametrize(("states", "decision", "servers"), [
    # a script's servers in server.join(): done at once, the three of them to stop
    ({"c0": SUCCEEDED, "p0": RUNNING, "w0": RUNNING, "w1": RUNNING}, DONE_DECISION, ["p0", "w0", "w1"]),
    ({"c0": SUCCEEDED, "p0": RUNNING, "w0": SUCCEEDED, "w1": jobspec.RESTARTING}, DONE_DECISION, ["p0", "w1"]),
    # servers already stopped after their chief (a re-attached wait after the stop): done, nothing left to stop
    ({"c0": SUCCEEDED, "p0": STOPPED, "w0": STOPPED, "w1": SUCCEEDED}, DONE_DECISION, []),
    ({"c0": SUCCEEDED, "p0": SUCCEEDED, "w0": SUCCEEDED, "w1": SUCCEEDED}, DONE_DECISION, []),
    # the chief still trains, or did not succeed: not done
    ({"c0": RUNNING, "p0": RUNNING, "w0": RUNNING, "w1": RUNNING}, RUNNING, []),
    ({"c0": PREEMPTED, "p0": RUNNING, "w0": RUNNING, "w1": RUNNING}, PREEMPTED, []),
    # a server that failed is a failure, whatever the chief did
    ({"c0": SUCCEEDED, "p0": RUNNING, "w0": FAILED, "w1": RUNNING}, FAILED_DECISION, []),
])
def test_a_parameter_server_job_ends_with_its_chief(states: dict[str, str], decision: str, servers: list[str]
                                                    ) -> None:
    out = ps_round(states)
    assert (out["decision"], out["servers"]) == (decision, servers), out["message"]
    if servers:
        assert f"the chief c0 finished; its ParameterServer tasks still serving ({', '.join(servers)})" in out[
            "message"]


def test_without_a_ps_task_a_succeeded_chief_does_not_end_the_job() -> None:
    slots = {"c0": "chief:0", "w0": "worker:0"}
    out = decide({"c0": ok(SUCCEEDED, done=True), "w0": ok(RUNNING)}, slots, {}, now=1000.0, started=900.0,
                 settings=Settings(chief="c0"))
    assert out["decision"] == RUNNING and out["servers"] == []


def test_the_trainers_servers_get_a_grace_to_exit_by_themselves() -> None:
    serving = {"c0": SUCCEEDED, "p0": RUNNING, "w0": RUNNING, "w1": RUNNING}
    first = ps_round(serving, require_done=True, now=1000.0)
    assert first["decision"] == RUNNING  # the built-in trainer's servers are told by their chief: they exit 0
    assert first["seen"]["c0"]["succeeded_since"] == 1000.0
    within = ps_round(serving, require_done=True, seen=first["seen"], now=1000.0 + wait.SERVERS_GRACE_S - 1)
    assert within["decision"] == RUNNING
    beyond = ps_round(serving, require_done=True, seen=within["seen"], now=1000.0 + wait.SERVERS_GRACE_S + 1)
    assert (beyond["decision"], beyond["servers"]) == (DONE_DECISION, ["p0", "w0", "w1"])
    gone = ps_round({**serving, "p0": SUCCEEDED, "w0": SUCCEEDED, "w1": SUCCEEDED}, require_done=True,
                    seen=first["seen"], now=1001.0)
    assert (gone["decision"], gone["servers"]) == (DONE_DECISION, [])
    # the trainer's chief must still have written DONE
    missing = ps_round(serving, require_done=True, seen=within["seen"], done=False,
                       now=1000.0 + wait.SERVERS_GRACE_S + 1)
    assert missing["decision"] == FAILED_DECISION and "wrote no DONE marker" in missing["message"]
