"""Issue 38: local slots never fall open onto the network. Where no private network namespace can be made the
process backend refuses to start them (the reason, the fix, ALLOW_SHARED_NETWORK=1) and launches nothing; a spec
that allows the shared network runs them as before, with the note."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.host.test_netns import fake_util_linux
from tfcluster.host import jobspec, jobstatus, netns, supervisor

REPO = Path(__file__).resolve().parents[3]
REASON = "`unshare --user --map-current-user --keep-caps --net`: unshare: unshare failed: Operation not permitted"
FIX = "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or run as root)"
HINT = "or ALLOW_SHARED_NETWORK=1 to run with the training ports open to this machine's users and network"


def write_spec(tmp: Path, argv: list[str], **more: object) -> Path:
    (tmp / "job.env").write_text(jobspec.render_env_file({"GREETING": "hello"}))
    spec = {"name": "t", "argv": argv, "env_file": str(tmp / "job.env"), "workdir": str(tmp),
            "run_dir": str(tmp / "run"), "log": str(tmp / "log/t.log"), "model_dir": str(tmp / "model"),
            "restart_sec": 0.1, "max_restarts": 0, "pythonpath": str(REPO), "netns_dir": str(tmp / "ns"), **more}
    path = tmp / "job.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.fixture
def no_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise netns.NetnsUnavailable(REASON, FIX)

    monkeypatch.setattr(netns, "start_holder", refuse)
    monkeypatch.setattr(netns, "probe", refuse)


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every command line any Popen of this process starts (the holder's, the supervisor's, the task's)."""
    seen: list[list[str]] = []
    real = subprocess.Popen

    def spy(argv: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append([str(part) for part in argv])
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    return seen


def _wait(spec: Path, state: str, timeout: float = 15) -> dict[str, Any]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = jobstatus.status(str(spec))
        if status["state"] == state:
            return status
        time.sleep(0.05)
    return jobstatus.status(str(spec))


def test_the_refusal_names_the_cause_the_fix_and_the_way_to_allow_it() -> None:
    text = netns.refusal("mnist", netns.NetnsUnavailable(REASON, FIX))
    assert text.startswith("the local slots of job mnist were not started: they run only in a private network "
                           f"namespace, and none can be made here ({REASON});")
    assert text.endswith(f"Fix: {FIX}, {HINT}")


@pytest.mark.parametrize(("value", "allowed"), [(True, True), ("true", True), ("True", True), (1, True), ("1", True),
                                                (False, False), ("false", False), ("0", False), (None, False),
                                                ("yes please", False)])
def test_only_a_true_value_allows_the_shared_network(value: object, allowed: bool) -> None:
    assert netns.shared_allowed({netns.ALLOW_FIELD: value}) is allowed
    assert netns.shared_allowed({}) is False  # a spec rendered before issue 38: refused as well


def test_without_a_namespace_the_start_is_refused_and_nothing_runs(tmp_path: Path, no_namespace: None,
                                                                  launched: list[list[str]]) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", f"touch {tmp_path / 'ran'}"])
    with pytest.raises(jobspec.JobError) as caught:
        supervisor.start(str(spec))
    message = str(caught.value)
    assert REASON in message and f"Fix: {FIX}" in message and message.endswith(HINT)
    assert launched == []  # neither the supervisor nor the task
    loaded = jobspec.load_spec(str(spec))
    for path in (jobspec.supervisor_pid_path(loaded), jobspec.main_pid_path(loaded), jobspec.state_path(loaded)):
        assert not os.path.exists(path), path
    assert not (tmp_path / "ran").exists()
    assert jobstatus.status(str(spec))["state"] == jobspec.INACTIVE  # not `starting`, never read as running
    assert f"tfcluster: {message}" in (tmp_path / "log/t.log").read_text()


def test_a_refused_restart_keeps_the_state_it_had(tmp_path: Path, no_namespace: None) -> None:
    spec = write_spec(tmp_path, ["/bin/true"])
    (tmp_path / "run").mkdir()
    loaded = jobspec.load_spec(str(spec))
    before = {"state": jobspec.FAILED, "exit_code": 1, "updated_at": 1.0}
    Path(jobspec.state_path(loaded)).write_text(json.dumps(before))
    with pytest.raises(jobspec.JobError, match="ALLOW_SHARED_NETWORK=1"):
        supervisor.start(str(spec))
    assert jobspec.read_state(loaded) == before


def test_a_container_that_forbids_namespaces_leaves_no_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               launched: list[list[str]]) -> None:
    """The real path: unshare itself fails; only its own tries ran, each ended, and no supervisor."""
    fake_util_linux(tmp_path, monkeypatch)
    spec = write_spec(tmp_path, ["/bin/sh", "-c", f"touch {tmp_path / 'ran'}"])
    with pytest.raises(jobspec.JobError, match=r"unshare failed: Operation not permitted\).*Fix: .*"
                                               r"or ALLOW_SHARED_NETWORK=1 to run"):
        supervisor.start(str(spec))
    assert launched and all(argv[0] == "unshare" for argv in launched)  # the holder's tries only
    assert not any("tfcluster.host.supervisor" in " ".join(argv) for argv in launched)
    assert netns.running(str(tmp_path / "ns")) is None and not (tmp_path / "ran").exists()


def test_allowed_the_shared_network_the_task_runs_with_the_note(tmp_path: Path, no_namespace: None,
                                                               launched: list[list[str]]) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "echo ran-shared"], allow_shared_network=True)
    started = supervisor.start(str(spec))
    assert started["netns"] == "shared" and started["supervisor_pid"]
    assert started["netns_note"].startswith("the local slots of job t run without a private network namespace (")
    assert started["netns_note"].endswith(f"Fix: {FIX}")
    assert any("tfcluster.host.supervisor" in " ".join(argv) for argv in launched)
    assert _wait(spec, jobspec.SUCCEEDED)["state"] == jobspec.SUCCEEDED
    assert "ran-shared" in (tmp_path / "log/t.log").read_text()


def test_the_up_front_check_refuses_before_anything_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               launched: list[list[str]]) -> None:
    fake_util_linux(tmp_path, monkeypatch)
    spec = jobspec.load_spec(str(write_spec(tmp_path, ["/bin/true"])))
    with pytest.raises(jobspec.JobError, match=r"were not started.*Operation not permitted.*ALLOW_SHARED_NETWORK=1"):
        supervisor.refuse_shared_network(spec)
    assert all(argv[0] == "unshare" for argv in launched)
    supervisor.refuse_shared_network({**spec, "allow_shared_network": True})  # allowed: no check at all
    supervisor.refuse_shared_network({**spec, "netns_dir": None})  # a real host: its own network


def test_the_probe_makes_a_namespace_where_one_can_be_made(tmp_path: Path) -> None:
    try:
        netns.probe(str(REPO))
    except netns.NetnsUnavailable as error:
        pytest.skip(f"this kernel or container forbids network namespaces: {error}")
    spec = jobspec.load_spec(str(write_spec(tmp_path, ["/bin/true"])))
    supervisor.refuse_shared_network(spec)  # no error, and no holder left behind
    assert netns.running(str(tmp_path / "ns")) is None

