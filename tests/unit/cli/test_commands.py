"""The `tfcluster` command's pure parts: settings from make variables, extra vars, the terminal view, the ledger and
the job lock."""

from __future__ import annotations

import io
import json
import multiprocessing
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfcluster.cli import command, commands, locks, settings
from tfcluster.cli import main as cli
from tfcluster.collect import ledger
from tfcluster.core import paths
from tfcluster.run import ansible as run
from tfcluster.run import events, view


def load(**env: str) -> settings.Settings:
    return settings.load({"PWD": "/tmp", **env})


def test_defaults_are_the_demo() -> None:
    s = load()
    assert (s.cluster, s.job, s.workers, s.strategy, s.cluster_name) == ("local", "mnist", 2, "auto", "tfcluster-local")


@pytest.mark.parametrize(("env", "line"), [
    ({"JOB": "x;id"}, "JOB: 'x;id' is not a valid job id. Fix:"),
    ({"JOB": "a/../b"}, "JOB: 'a/../b' is not a valid job id"),
    ({"JOB": "{{ lookup('pipe','id') }}"}, "JOB: \"{{ lookup('pipe','id') }}\" is not a valid job id"),
    ({"CLUSTER": "gcp"}, "CLUSTER: 'gcp' is not one of local, aws, onprem, slurm. Fix: use CLUSTER=local"),
    ({"WORKERS": "0"}, "WORKERS: '0' is not a whole number >= 1. Fix: set WORKERS to a number >= 1"),
    ({"STRATEGY": "horovod"}, "STRATEGY: 'horovod' is not one of auto"),
    ({"SCRIPT_ARGS": "--name 'unbalanced"}, "SCRIPT_ARGS: cannot be split into arguments"),
    ({"MAX_DURATION": "4"}, "MAX_DURATION: '4' is not a duration"),
    ({"TTL": "1 day"}, "TTL: '1 day' is not a duration"),
    ({"IDLE": "soon"}, "IDLE: 'soon' is not a duration"),
    ({"IDLE": "10", "MODE": "always"}, "MODE: 'always' is not an autostop mode"),
    ({"DOWN": "yes", "CLUSTER": "aws"}, "DOWN: 'yes' is neither 1 nor 0"),
    ({"DOWN": "1"}, "DOWN: only CLUSTER=aws hosts can be stopped or terminated, not local"),
    ({"TFCLUSTER_CLUSTER": "Bad_Name"}, "TFCLUSTER_CLUSTER: 'Bad_Name' is not a valid cluster name"),
    ({"HOST": "w 1"}, "HOST: 'w 1' is not a valid host name"),
    ({"KERAS": "2"}, "KERAS: '2' is not one of legacy, 3"),
    ({"PREPARE": "yes"}, "PREPARE: 'yes' is not a prepare mode. Fix: PREPARE=force runs every prepare role"),
    ({"DATASETS": "mnist,../x"}, "DATASETS: '../x' is not a dataset name"),
    ({"ALLOW_SHARED_NETWORK": "yes"}, "ALLOW_SHARED_NETWORK: 'yes' is neither 1 nor 0. Fix: ALLOW_SHARED_NETWORK=1 "
                                      "lets local slots run with their training ports open"),
])
def test_every_bad_setting_is_named_with_a_fix(env: dict[str, str], line: str) -> None:
    with pytest.raises(settings.SettingsError) as caught:
        load(**env)
    assert any(str(p).startswith(line) for p in caught.value.problems), caught.value


def test_autostop_settings_become_the_roles_vars() -> None:
    assert load(IDLE="10").autostop == {"autostop_enabled": True, "autostop_idle_minutes": 10, "autostop_mode": "jobs"}
    assert load(IDLE="off").autostop == {"autostop_enabled": False, "autostop_mode": "jobs"}
    assert load(CLUSTER="aws", DOWN="1").down == "terminate"


@pytest.mark.parametrize(("raw", "value"), [("", None), ("1", True), (" TRUE ", True), ("true", True), ("0", False),
                                            ("false", False)])
def test_allow_shared_network_reaches_the_role_only_when_given(raw: str, value: bool | None) -> None:
    """Issue 38: ALLOW_SHARED_NETWORK=1 -> tfcluster_allow_shared_network (the tf_job role's
    tf_job_allow_shared_network, the job spec's allow_shared_network); not given: the role's default, false."""
    s = load(ALLOW_SHARED_NETWORK=raw)
    assert s.allow_shared_network is value
    trusted, _ = command.playbook_vars(s)
    assert trusted.get("tfcluster_allow_shared_network", "absent") == ("absent" if value is None else value)


def test_allow_shared_network_is_a_make_variable_the_role_takes() -> None:
    makefile = (paths.REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^ALLOW_SHARED_NETWORK \?=## CLUSTER=local: ", makefile, re.M)
    assert re.search(r"^export .*\bALLOW_SHARED_NETWORK\b", makefile, re.M)
    role = paths.PLAYBOOKS / "collections/ansible_collections/tfcluster/cluster/roles/tf_job"
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text())
    assert defaults["tf_job_allow_shared_network"] == "{{ tfcluster_allow_shared_network | default(false) }}"
    specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert specs["tf_job_allow_shared_network"]["type"] == "bool"
    job_spec = yaml.safe_load((role / "vars/main.yml").read_text())["_tf_job_spec"]
    assert job_spec["allow_shared_network"] == "{{ tf_job_allow_shared_network | bool }}"


def test_all_problems_at_once() -> None:
    with pytest.raises(settings.SettingsError) as caught:
        load(JOB="a b", CLUSTER="x", WORKERS="-1")
    assert [p.field for p in caught.value.problems] == ["CLUSTER", "JOB", "WORKERS"]


def test_arguments_are_split_like_a_shell_but_never_run(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    s = load(SCRIPT=str(script), SCRIPT_ARGS="--name 'two words' x;id $(id) {{ 7*7 }}", MAX_DURATION="1h30m")
    assert s.script_args == ("--name", "two words", "x;id", "$(id)", "{{", "7*7", "}}")
    assert s.max_duration == 5400
    trusted, untrusted = command.playbook_vars(s)
    assert trusted == {"tfcluster_job": "mnist", "tfcluster_cluster": "local", "tfcluster_script_keras": "legacy",
                       "tfcluster_max_duration": 5400}
    assert untrusted["tfcluster_script_args"] == list(s.script_args)


def test_extra_vars_file_marks_user_strings_unsafe(tmp_path: Path) -> None:
    path = run.write_extra_vars(tmp_path, {"tfcluster_job": "j", "tfcluster_epochs": 2},
                                {"tfcluster_script_args": ["{{ lookup('pipe', 'id') }}", "ok"]})
    data = json.loads(path.read_text())
    assert data["tfcluster_job"] == "j" and data["tfcluster_epochs"] == 2
    assert data["tfcluster_script_args"] == [{"__ansible_unsafe": "{{ lookup('pipe', 'id') }}"},
                                             {"__ansible_unsafe": "ok"}]


def test_ansible_env_enables_the_events_callback_once(tmp_path: Path) -> None:
    env = run.ansible_env({"ANSIBLE_CALLBACKS_ENABLED": "profile_tasks,tfcluster.cluster.events"},
                          tmp_path / "e.jsonl", {})
    assert env["ANSIBLE_CALLBACKS_ENABLED"] == "profile_tasks,tfcluster.cluster.events"
    assert env["TFCLUSTER_EVENTS"] == str(tmp_path / "e.jsonl") and env["ANSIBLE_CONFIG"] == str(paths.ANSIBLE_CFG)


# --- the view -------------------------------------------------------------------------------------------------------
TASK = {"host": "worker-0", "slot": "worker:0", "state": "running/training", "epoch": 2, "epochs": 3, "step": 120,
        "steps_per_epoch": 468, "examples_per_sec": 5123.4, "loss": 0.12345, "eta_seconds": 62, "age_seconds": 1}


def test_task_line_has_what_a_user_waits_for() -> None:
    assert view.task_line(TASK) == ("worker-0        worker:0    running/training    epoch 2/3  step 120/468  "
                                    "5.1k ex/s  loss 0.1235  ETA 1m02s")
    assert view.task_line({"host": "h", "state": "running", "age_seconds": 95}).endswith("(no update for 1m35s)")


def test_progress_is_redrawn_in_place_on_a_terminal() -> None:
    out = io.StringIO()
    v = view.View(out, tty=True)
    v.handle({"event": "progress", "elapsed": 5, "tasks": [TASK]})
    v.handle({"event": "progress", "elapsed": 10, "tasks": [TASK]})
    text = out.getvalue()
    assert text.count("\x1b[2F") == 1 and text.count("job running for") == 2


def test_off_a_terminal_progress_is_printed_on_a_change_at_most_every_10_s_and_at_least_every_minute() -> None:
    out, now = io.StringIO(), [0.0]
    v = view.View(out, tty=False, clock=lambda: now[0])

    def at(t: float, **change: Any) -> None:
        now[0] = t
        v.handle({"event": "progress", "elapsed": t, "tasks": [{**TASK, "step": int(t), **change}]})

    at(0)  # printed: the first block
    at(4, epoch=3)  # a change 4 s later: waits
    at(10.5, epoch=3)  # printed: the new epoch, 10 s after the last block
    for t in (20, 30, 40, 50, 60, 70.4):
        at(t, epoch=3)  # the steps move, the state and the epoch do not: nothing
    at(70.5, epoch=3)  # printed: a minute without a block
    at(75, epoch=3, state="running/exporting")  # a new state 4.5 s later: waits
    at(81, epoch=3, state="running/exporting")  # printed
    text = out.getvalue()
    assert re.findall(r"job running for (.+):", text) == ["0.0 s", "10.5 s", "1m10s", "1m21s"]
    pace = view.sparkline(v.paces[TASK["host"]], tty=False)  # a sample every 10 s: plain numbers off a terminal
    assert pace.startswith("pace ") and len(pace.split()) == 6, pace
    assert text.splitlines()[-1] == "         " + view.task_line({**TASK, "step": 81, "epoch": 3,
                                                                  "state": "running/exporting"}, pace)
    assert "\x1b[" not in text


def test_a_failure_names_the_host_the_error_and_the_log_tail() -> None:
    v = view.View(io.StringIO(), tty=False)
    v.handle({"event": "task_failed", "host": "worker-1", "task": "Assert the training port is free",
              "msg": "port 10.0.0.5:2222 is not free"})
    v.handle({"event": "decision", "decision": "failed", "culprit": "worker-0", "message": "job failed on worker-0",
              "log_tail": [f"line {i}" for i in range(30)],
              "error": {"type": "ValueError", "message": "bad", "frame": "train.py:12 in main"}})
    lines = view.failure_lines(v, "artifacts/x.log")
    assert lines[0] == "job failed on worker-0: job failed on worker-0"
    assert lines[1] == "  error: ValueError: bad   (train.py:12 in main)"
    assert "    line 29" in lines and "    line 14" not in lines  # the last 15 lines
    assert "worker-1: task 'Assert the training port is free' failed:" in lines
    assert lines[-1] == "full log: artifacts/x.log"


def test_a_failure_before_any_play_shows_the_log_end(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("noise\n[ERROR]: Completely failed to parse inventory source\n")
    lines = view.failure_lines(view.View(io.StringIO(), tty=False), str(log))
    assert "    [ERROR]: Completely failed to parse inventory source" in lines


# --- ledger and lock ------------------------------------------------------------------------------------------------
def test_destroy_refuses_a_finished_job_that_was_never_collected(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "ARTIFACTS", tmp_path)
    done = tmp_path / "aws" / "done"
    done.mkdir(parents=True)
    (done / "job.json").write_text(json.dumps({"finished": True, "collected": True, "cluster_name": "c"}))
    lost = tmp_path / "aws" / "lost"
    lost.mkdir()
    (lost / "job.json").write_text(json.dumps({"finished": True, "collected": False, "cluster_name": "c"}))
    other = tmp_path / "aws" / "other-cluster"
    other.mkdir()
    (other / "job.json").write_text(json.dumps({"finished": True, "collected": False, "cluster_name": "d"}))
    assert ledger.uncollected_jobs("aws", "c") == ["lost"]  # records written before the states existed


def _hold(directory: str, ready: multiprocessing.synchronize.Event, release: multiprocessing.synchronize.Event
          ) -> None:
    paths.ARTIFACTS = Path(directory)
    with locks.job_lock(load(JOB="j")):
        ready.set()
        release.wait(10)


def test_a_second_train_of_the_same_job_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "ARTIFACTS", tmp_path)
    ready, release = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold, args=(str(tmp_path), ready, release))
    holder.start()
    try:
        assert ready.wait(10)
        with pytest.raises(command.CommandError, match=rf"another train/collect of job j .* \(pid {holder.pid}\)"), \
                locks.job_lock(load(JOB="j")):
            pass
        with locks.job_lock(load(JOB="other")):  # another job is not blocked
            pass
    finally:
        release.set()
        holder.join(10)
    with locks.job_lock(load(JOB="j")):  # free again
        pass


def _copy(job_dir: Path, name: str) -> Path:
    (job_dir / name / "export").mkdir(parents=True)
    (job_dir / name / "MANIFEST.sha256").write_text("")
    (job_dir / name / "DONE").write_text("{}")
    return job_dir / name


def test_prune_keeps_current_and_removes_older_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "ARTIFACTS", tmp_path)
    job_dir = tmp_path / "local" / "mnist"
    old, new = _copy(job_dir, "a" * 64), _copy(job_dir, "b" * 64)
    (job_dir / "logs").mkdir()
    (job_dir / "current").symlink_to(new.name)
    out = io.StringIO()
    assert commands.cmd_prune(command.Command(load(), out)) == 0
    assert not old.exists() and new.is_dir() and (job_dir / "logs").is_dir()
    assert commands.collected_dir(job_dir) == job_dir / "current"
    assert f"removed {old}" in out.getvalue()


def test_clean_artifacts_asks_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "ARTIFACTS", tmp_path / "artifacts")
    _copy(tmp_path / "artifacts" / "local" / "mnist", "c" * 64)
    monkeypatch.delenv("YES", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO())  # not a terminal: nobody to ask
    with pytest.raises(command.CommandError, match="refusing to delete them without asking"):
        commands.cmd_clean_artifacts(command.Command(load(), io.StringIO()))
    assert (tmp_path / "artifacts").is_dir()
    monkeypatch.setenv("YES", "1")
    assert commands.cmd_clean_artifacts(command.Command(load(), io.StringIO())) == 0
    assert not (tmp_path / "artifacts").exists()


# --- reserved job ids, ASCII numbers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("job", ["autostop", "AutoStop", "datasets", "preflight", "logs", "jobs", "Firewall"])
def test_a_reserved_job_id_is_refused_before_anything_runs(job: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train"], env={"PWD": "/tmp", "JOB": job}) == command.EXIT_SETTINGS
    err = capsys.readouterr().err
    assert f"tfcluster train: JOB: {job!r} is a reserved job id" in err
    assert "Fix: choose another job id (none of autostop, " in err and f"e.g. {job}-1" in err
    assert err.rstrip().endswith("Nothing was started.")


@pytest.mark.parametrize(("key", "value"), [("EPOCHS", "\u00b2"), ("WORKERS", "\u0663"), ("EPOCHS", "1\u00b2"),
                                            ("WORKERS", "\uff12"), ("EPOCHS", "+3")])
def test_numbers_are_ascii_digits_only(key: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["train"], env={"PWD": "/tmp", key: value})
    err = capsys.readouterr().err
    assert code == command.EXIT_SETTINGS, err
    assert f"{key}: {value.strip()!r} is not a whole number >= 1. Fix: set {key} to a number >= 1, in digits 0-9" in err


def test_ascii_numbers_are_read() -> None:
    assert (load(WORKERS=" 3 ", EPOCHS="07").workers, load(EPOCHS="07").epochs) == (3, 7)


# --- the ledger against destroy -------------------------------------------------------------------------------------
def _playbook(events: list[dict[str, object]], code: int = 0, copy: str | None = None,
              interrupt: bool = False) -> object:
    """A stand-in for Command.playbook: the events a run would write (rendered like run.run does), the copy its
    collect installs (``current`` then points at it), or a Ctrl-C in the middle."""
    def playbook(self: command.Command, name: str, action: str, *, more_vars: object = None) -> int:
        calls.append(action)
        if interrupt:
            raise KeyboardInterrupt
        if copy is not None:
            _copy(self.job_dir, copy)
            (self.job_dir / "current").unlink(missing_ok=True)
            (self.job_dir / "current").symlink_to(copy)
        rendered = [{**e, "dest": str(self.job_dir / "current")} if e.get("dest") == "CURRENT" else e for e in events]
        for event in rendered:
            self.view.handle(event)
        self.events = rendered
        return code
    calls: list[str] = []
    playbook.calls = calls  # type: ignore[attr-defined]
    return playbook


DONE = {"event": "decision", "decision": "done", "culprit": None, "message": "done"}
COLLECTED = {"event": "collected", "dest": "CURRENT", "files": 3, "bytes": 10, "changed": True}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """artifacts/ in tmp_path, CLUSTER=local, and a destroy that records that it would run Terraform."""
    monkeypatch.setattr(paths, "ARTIFACTS", tmp_path)
    monkeypatch.delenv("FORCE", raising=False)
    destroyed: list[str] = []
    monkeypatch.setattr(command.Command, "provision", lambda self, action: destroyed.append(action) or 0)
    monkeypatch.setattr(commands, "still_running", lambda settings: [])
    return destroyed


def _destroy() -> int:
    return commands.cmd_destroy(command.Command(load(), io.StringIO()))


def test_a_current_copy_left_by_an_older_run_does_not_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             cluster: list[str]) -> None:
    job_dir = tmp_path / "local" / "mnist"
    (job_dir / "current").parent.mkdir(parents=True)
    _copy(job_dir, "a" * 64)
    (job_dir / "current").symlink_to("a" * 64)  # the result of an older run (an earlier cluster)
    (job_dir / "job.json").write_text(json.dumps({"finished": True, "collected": True,
                                                  "cluster_name": "tfcluster-local"}))
    monkeypatch.setattr(command.Command, "playbook", _playbook([DONE], code=1))  # this run's collect failed
    assert commands.cmd_train(command.Command(load(), io.StringIO())) == command.EXIT_FAILED
    assert json.loads((job_dir / "job.json").read_text())["state"] == "finished"
    with pytest.raises(command.CommandError, match=r"never collected: mnist \(finished, not collected\)\. .*Fix: "
                       r"`make collect JOB=<job>` for each \(e\.g\. `make collect JOB=mnist`\).*FORCE=1"):
        _destroy()
    assert cluster == []


def test_a_collect_of_the_run_itself_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           cluster: list[str]) -> None:
    monkeypatch.setattr(command.Command, "playbook", _playbook([DONE, COLLECTED], copy="b" * 64))
    assert commands.cmd_train(command.Command(load(), io.StringIO())) == command.EXIT_OK
    record = json.loads((tmp_path / "local" / "mnist" / "job.json").read_text())
    assert (record["state"], record["collected_version"]) == ("collected", "b" * 64)
    assert _destroy() == 0 and cluster == ["destroy"]


def test_a_collected_event_of_another_dir_is_not_this_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           cluster: list[str]) -> None:
    elsewhere = {**COLLECTED, "dest": str(tmp_path / "local" / "other" / "current")}
    monkeypatch.setattr(command.Command, "playbook", _playbook([DONE, elsewhere], copy="b" * 64))
    commands.cmd_train(command.Command(load(), io.StringIO()))
    with pytest.raises(command.CommandError, match="mnist"):
        _destroy()


def test_a_failed_job_does_not_block(monkeypatch: pytest.MonkeyPatch, cluster: list[str]) -> None:
    failed = {**DONE, "decision": "failed", "culprit": "worker-0", "message": "exit 1", "log_tail": []}
    monkeypatch.setattr(command.Command, "playbook", _playbook([failed], code=1))
    assert commands.cmd_train(command.Command(load(), io.StringIO())) == command.EXIT_FAILED
    assert _destroy() == 0 and cluster == ["destroy"]


@pytest.mark.parametrize("unblock", ["collect", "stop", "FORCE=1"])
def test_an_interrupted_train_blocks_destroy_until_collect_stop_or_force(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: list[str], unblock: str) -> None:
    train = _playbook([], interrupt=True)
    monkeypatch.setattr(command.Command, "playbook", train)
    with pytest.raises(KeyboardInterrupt):
        commands.cmd_train(command.Command(load(), io.StringIO()))
    assert train.calls == ["train"]  # type: ignore[attr-defined]
    with pytest.raises(command.CommandError, match=r"mnist \(started, outcome unknown: .*`make stop JOB=<job>` for a "
                                               r"started job"):
        _destroy()
    assert cluster == []
    if unblock == "collect":
        monkeypatch.setattr(command.Command, "playbook", _playbook([COLLECTED], copy="c" * 64))
        assert commands.cmd_collect(command.Command(load(), io.StringIO())) == 0
    elif unblock == "stop":
        monkeypatch.setattr(command.Command, "playbook", _playbook([], code=1))  # a stop that failed changes nothing
        assert commands.cmd_stop(command.Command(load(), io.StringIO())) == command.EXIT_FAILED
        with pytest.raises(command.CommandError, match="mnist"):
            _destroy()
        monkeypatch.setattr(command.Command, "playbook", _playbook([]))
        assert commands.cmd_stop(command.Command(load(), io.StringIO())) == 0
    else:
        monkeypatch.setenv("FORCE", "1")
    assert _destroy() == 0 and cluster == ["destroy"]


def test_a_collect_that_brought_nothing_leaves_the_job_blocking(monkeypatch: pytest.MonkeyPatch,
                                                               cluster: list[str]) -> None:
    monkeypatch.setattr(command.Command, "playbook", _playbook([], interrupt=True))
    with pytest.raises(KeyboardInterrupt):
        commands.cmd_train(command.Command(load(), io.StringIO()))
    monkeypatch.setattr(command.Command, "playbook", _playbook([], code=1))  # the chief has no DONE yet
    assert commands.cmd_collect(command.Command(load(), io.StringIO())) == command.EXIT_FAILED
    with pytest.raises(command.CommandError, match="mnist"):
        _destroy()


def _hold_cluster(directory: str, exclusive: bool, ready: multiprocessing.synchronize.Event,
                  release: multiprocessing.synchronize.Event) -> None:
    paths.ARTIFACTS = Path(directory)
    with locks.cluster_lock(load(JOB="long"), "destroy" if exclusive else "train", exclusive=exclusive):
        ready.set()
        release.wait(10)


def _holding(tmp_path: Path, exclusive: bool) -> tuple[multiprocessing.Process, multiprocessing.synchronize.Event]:
    ready, release = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold_cluster, args=(str(tmp_path), exclusive, ready, release))
    holder.start()
    assert ready.wait(10)
    return holder, release


def test_destroy_is_refused_while_a_train_holds_the_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            cluster: list[str]) -> None:
    holder, release = _holding(tmp_path, exclusive=False)
    try:
        with pytest.raises(command.CommandError, match=rf"tfcluster-local\) is in use \(pid {holder.pid}: tfcluster "
                                                   r"train JOB=long\)\. Fix: wait for it to end, or `make stop"):
            _destroy()
        assert cluster == []
        monkeypatch.setattr(command.Command, "playbook", _playbook([DONE, COLLECTED], copy="d" * 64))
        assert commands.cmd_train(command.Command(load(JOB="other"), io.StringIO())) == 0  # trains share the cluster
    finally:
        release.set()
        holder.join(10)
    assert _destroy() == 0 and cluster == ["destroy"]
    assert [p.name for p in (tmp_path / "local").glob(".cluster-*")] == [".cluster-tfcluster-local.lock"]


def test_a_train_is_refused_while_the_cluster_is_destroyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           cluster: list[str]) -> None:
    holder, release = _holding(tmp_path, exclusive=True)
    train = _playbook([DONE])
    monkeypatch.setattr(command.Command, "playbook", train)
    try:
        for run_command in (commands.cmd_train, commands.cmd_collect, commands.cmd_stop):
            with pytest.raises(command.CommandError,
                               match=rf"is being destroyed \(pid {holder.pid}: tfcluster destroy\)"):
                run_command(command.Command(load(), io.StringIO()))
    finally:
        release.set()
        holder.join(10)
    assert train.calls == []  # type: ignore[attr-defined]
    assert not (tmp_path / "local" / "mnist" / "job.json").exists()


def _stage(name: str) -> dict[str, object]:
    return {"event": "stage_start", "name": name}


def test_a_train_that_failed_before_the_gang_start_does_not_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  cluster: list[str]) -> None:
    checked = [_stage("Prepare the hosts"), _stage("Check every host and render the job before anything starts")]
    monkeypatch.setattr(command.Command, "playbook", _playbook(checked, code=1))  # e.g. a changed host key
    assert commands.cmd_train(command.Command(load(), io.StringIO())) == command.EXIT_FAILED
    record = json.loads((tmp_path / "local" / "mnist" / "job.json").read_text())
    assert (record["state"], record["decision"]) == ("ended", "not started")
    assert _destroy() == 0 and cluster == ["destroy"]


def test_a_train_that_failed_after_the_gang_start_without_a_decision_blocks(monkeypatch: pytest.MonkeyPatch,
                                                                            cluster: list[str]) -> None:
    monkeypatch.setattr(command.Command, "playbook", _playbook([_stage(command.START_STAGE)], code=1))
    assert commands.cmd_train(command.Command(load(), io.StringIO())) == command.EXIT_FAILED
    with pytest.raises(command.CommandError, match=r"mnist \(started, outcome unknown"):
        _destroy()


def test_a_gang_start_play_whose_hosts_had_all_failed_does_not_block(monkeypatch: pytest.MonkeyPatch,
                                                                    cluster: list[str]) -> None:
    """A changed host key on the twin: Ansible announces the later plays (localhost is still in the run), but the
    start play starts no task (`tasks` 0): nothing ran, so destroy is not blocked."""
    announced = [_stage(command.START_STAGE), {"event": "stage_end", "name": command.START_STAGE, "ok": True,
                                                "tasks": 0}]
    monkeypatch.setattr(command.Command, "playbook", _playbook(announced, code=2))
    assert commands.cmd_train(command.Command(load(), io.StringIO())) == command.EXIT_FAILED
    assert _destroy() == 0 and cluster == ["destroy"]
    assert commands.gang_start_ran([_stage(command.START_STAGE)])  # began, never ended: it may run
    assert commands.gang_start_ran([{"event": "stage_end", "name": command.START_STAGE, "tasks": 3}])


def test_the_gang_start_stage_is_a_play_of_train_yml() -> None:
    plays = yaml.safe_load((paths.PLAYBOOKS / "train.yml").read_text())
    names = [play.get("name") for play in plays]
    assert command.START_STAGE in names and "hosts" in plays[names.index(command.START_STAGE)]
    start = names.index(command.START_STAGE)
    assert "start.yml" in str(plays[start]) and not any("start.yml" in str(play) for play in plays[:start])


def test_run_events_keeps_what_the_ledger_reads(tmp_path: Path) -> None:
    events_file = tmp_path / "e.jsonl"
    for kind, fields in (("stage_start", {"name": "x"}), ("progress", {"tasks": []}),
                         ("decision", {"decision": "done"}), ("collected", {"dest": "d"})):
        events.emit(kind, str(events_file), **fields)
    with events_file.open("a") as handle:
        handle.write('{"event": "decision", broken\n["not", "an object", "event": "collected"]\n')
    assert [e["event"] for e in command.run_events(events_file)] == ["stage_start", "decision", "collected"]
    events.emit("stage_end", str(events_file), name="x", ok=True, tasks=0)
    assert command.run_events(events_file)[-1]["tasks"] == 0
    assert command.run_events(tmp_path / "missing.jsonl") == []


def test_a_job_trained_before_its_id_was_reserved_still_blocks(tmp_path: Path, cluster: list[str]) -> None:
    old = tmp_path / "local" / "trainer"
    old.mkdir(parents=True)
    (old / "job.json").write_text(json.dumps({"state": "finished", "cluster_name": "tfcluster-local", "run": "r"}))
    with pytest.raises(command.CommandError, match=r"trainer \(finished, not collected\)"):
        _destroy()


def test_a_collected_run_whose_copy_was_deleted_blocks_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             cluster: list[str]) -> None:
    monkeypatch.setattr(command.Command, "playbook", _playbook([DONE, COLLECTED], copy="e" * 64))
    assert commands.cmd_train(command.Command(load(), io.StringIO())) == 0
    shutil.rmtree(tmp_path / "local" / "mnist" / ("e" * 64))
    with pytest.raises(command.CommandError, match=r"mnist \(finished, not collected\)"):
        _destroy()
