"""The job belongs to the hosts (issue 21 item 3): `make wait` re-attaches to a running job, an interrupt of
`make train` stops nothing and says how to re-attach, and the wait's settings STALL and UNREACHABLE_GRACE."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import yaml

from tests.unit.cli.test_commands import COLLECTED, DONE, _destroy, _playbook, cluster, load  # noqa: F401
from tfcluster.cli import command, commands, settings
from tfcluster.cli import main as cli
from tfcluster.core import paths

ROLE = paths.PLAYBOOKS / "collections/ansible_collections/tfcluster/cluster/roles/tf_job"


def _record(tmp_path: Path) -> dict[str, object]:
    return json.loads((tmp_path / "local" / "mnist" / "job.json").read_text())


# --- settings -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("env", "stall", "grace"), [
    ({}, None, None),  # the role's defaults: 10 min for the trainer, off for a SCRIPT; a grace of 30 min
    ({"STALL": "20m", "UNREACHABLE_GRACE": "1h"}, 1200, 3600),
    ({"STALL": "off"}, 0, None),
    ({"STALL": " 1h30m ", "UNREACHABLE_GRACE": "2d"}, 5400, 172800),
])
def test_stall_and_grace_reach_the_playbooks(env: dict[str, str], stall: int | None, grace: int | None) -> None:
    s = load(**env)
    assert (s.stall, s.unreachable_grace) == (stall, grace)
    trusted, _ = command.playbook_vars(s)
    assert trusted.get("tfcluster_stall") == stall and trusted.get("tfcluster_unreachable_grace") == grace


@pytest.mark.parametrize(("env", "line"), [
    ({"STALL": "10"}, "STALL: '10' is not a duration (a bare number has no unit for STALL: write e.g. 10h or 10m). "
                      "Fix: give the time without progress that stops the job"),
    ({"STALL": "5s"}, "STALL: '5s' is 5s, outside 30s..365d. Fix: give a duration from 30s to 365d (or off to turn it "
                      "off), e.g. STALL=20m"),
    ({"STALL": "soon"}, "STALL: 'soon' is not a duration"),
    ({"UNREACHABLE_GRACE": "off"}, "UNREACHABLE_GRACE: 'off' is not a duration. Fix: give the time a host may stay "
                                   "unreachable from this machine before the job fails as a whole number with a unit"),
    ({"UNREACHABLE_GRACE": "30"}, "UNREACHABLE_GRACE: '30' is not a duration (a bare number has no unit"),
    ({"UNREACHABLE_GRACE": "10s"}, "UNREACHABLE_GRACE: '10s' is 10s, outside 1m..7d. Fix: give a duration from 1m "
                                   "to 7d, e.g. UNREACHABLE_GRACE=1h"),
])
def test_a_bad_stall_or_grace_exits_2_with_a_fix(env: dict[str, str], line: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(settings.SettingsError) as caught:
        load(**env)
    assert any(str(p).startswith(line) for p in caught.value.problems), caught.value
    assert cli.main(["wait"], env={"PWD": "/tmp", **env}) == command.EXIT_SETTINGS
    err = capsys.readouterr().err
    assert f"tfcluster wait: {line}" in err and "Nothing was started." in err


def test_the_role_takes_the_settings_and_has_no_silent_day_long_limit() -> None:
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    assert "tfcluster_stall" in defaults["tf_job_stall_timeout"]
    assert "600 if tf_job_script | length == 0 else 0" in defaults["tf_job_stall_timeout"]  # off for a SCRIPT
    assert defaults["tf_job_unreachable_grace"] == "{{ tfcluster_unreachable_grace | default(1800) }}"
    assert "86400" not in defaults["tf_job_wait_timeout"] and defaults["tf_job_wait_timeout"].strip().endswith(
        "else 0 }}")
    wait_task = yaml.safe_load((ROLE / "tasks/wait.yml").read_text())[0]["block"][1]["tfcluster.cluster.wait"]
    assert wait_task["unreachable_grace"] == "{{ tf_job_unreachable_grace | float }}"


# --- make wait ------------------------------------------------------------------------------------------------------
def test_make_wait_is_a_command_and_a_target() -> None:
    assert cli.COMMANDS["wait"][0] is commands.cmd_wait
    makefile = (paths.REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^wait: setup-cluster ## .*\n\t\$\(TFC\) wait$", makefile, re.MULTILINE)
    assert re.search(r"^export .*\bSTALL\b.*\bUNREACHABLE_GRACE\b", makefile, re.MULTILINE)


def test_wait_yml_re_attaches_then_collects_and_starts_nothing() -> None:
    plays = yaml.safe_load((paths.PLAYBOOKS / "wait.yml").read_text())
    tasks = plays[0]["tasks"]
    assert [t["ansible.builtin.import_role"]["tasks_from"] for t in tasks] == ["attach.yml", "wait.yml"]
    assert plays[0]["any_errors_fatal"] is False and plays[1] == {"name": "Collect the chief's checkpoint",
                                                                  "ansible.builtin.import_playbook": "collect.yml"}
    text = (paths.PLAYBOOKS / "wait.yml").read_text() + (ROLE / "tasks/attach.yml").read_text()
    assert "start.yml" not in text and "configure.yml" not in text and "site.yml" not in text


def test_wait_after_an_interrupted_train_ends_that_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       cluster: list[str]) -> None:  # noqa: F811
    monkeypatch.setattr(command.Command, "playbook", _playbook([], interrupt=True))
    with pytest.raises(KeyboardInterrupt):
        commands.cmd_train(command.Command(load(), io.StringIO()))
    run = _record(tmp_path)["run"]
    assert _record(tmp_path)["state"] == "started"
    wait = _playbook([DONE, COLLECTED], copy="e" * 64)
    monkeypatch.setattr(command.Command, "playbook", wait)
    assert commands.cmd_wait(command.Command(load(), io.StringIO())) == command.EXIT_OK
    assert wait.calls == ["wait"]  # type: ignore[attr-defined]
    record = _record(tmp_path)
    assert (record["run"], record["state"], record["collected_version"]) == (run, "collected", "e" * 64)
    assert _destroy() == 0 and cluster == ["destroy"]


def test_a_wait_with_no_record_records_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           cluster: list[str]) -> None:  # noqa: F811
    failed = {**DONE, "decision": "failed", "culprit": "worker-0", "message": "exit 1", "log_tail": []}
    monkeypatch.setattr(command.Command, "playbook", _playbook([failed], code=1))
    assert commands.cmd_wait(command.Command(load(), io.StringIO())) == command.EXIT_FAILED
    assert (_record(tmp_path)["state"], _record(tmp_path)["decision"]) == ("ended", "failed")


@pytest.mark.parametrize("run_command", [commands.cmd_train, commands.cmd_wait])
def test_every_host_unreachable_leaves_the_job_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       cluster: list[str], run_command: object) -> None:  # noqa: F811
    """Nothing was stopped (nothing could be reached): the job may still run, so destroy stays refused."""
    away = {**DONE, "decision": "unreachable", "culprit": "worker-0", "message": "every host is unreachable",
            "log_tail": []}
    monkeypatch.setattr(command.Command, "playbook", _playbook([{"event": "stage_start",
                                                                 "name": command.START_STAGE}, away], code=1))
    assert run_command(command.Command(load(), io.StringIO())) == command.EXIT_FAILED  # type: ignore[operator]
    assert _record(tmp_path)["state"] == "started"
    with pytest.raises(command.CommandError, match=r"mnist \(started, outcome unknown"):
        _destroy()


def test_an_interrupted_train_says_nothing_stopped_and_how_to_re_attach(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: list[str],  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(command.Command, "playbook", _playbook([], interrupt=True))
    assert cli.main(["train"], env={"PWD": "/tmp", "JOB": "long-one"}) == 130
    err = capsys.readouterr().err
    assert "tfcluster train: interrupted. Nothing was stopped: a started job keeps running on its hosts." in err
    assert "`make wait JOB=long-one` re-attaches (waits and collects)" in err and "`make stop JOB=long-one`" in err
    assert json.loads((tmp_path / "local" / "long-one" / "job.json").read_text())["state"] == "started"


def test_a_wait_that_found_nothing_records_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   cluster: list[str]) -> None:  # noqa: F811
    """No cluster (the inventory failed) or no such job: no decision, so no run in the ledger, and destroy goes on."""
    monkeypatch.setattr(command.Command, "playbook", _playbook([], code=1))
    assert commands.cmd_wait(command.Command(load(), io.StringIO())) == command.EXIT_FAILED
    assert not (tmp_path / "local" / "mnist" / "job.json").exists()
    assert _destroy() == 0 and cluster == ["destroy"]
