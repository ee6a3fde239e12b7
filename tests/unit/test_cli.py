"""The `tfcluster` command's pure parts: settings from make variables, extra vars, the terminal view, the ledger and
the job lock."""

from __future__ import annotations

import io
import json
import multiprocessing
from pathlib import Path

import pytest

from tfcluster import cli, paths, run, settings, view


def load(**env: str) -> settings.Settings:
    return settings.load({"PWD": "/tmp", **env})


def test_defaults_are_the_demo() -> None:
    s = load()
    assert (s.cluster, s.job, s.workers, s.strategy, s.cluster_name) == ("local", "mnist", 2, "auto", "tfcluster-local")


@pytest.mark.parametrize(("env", "line"), [
    ({"JOB": "x;id"}, "JOB: 'x;id' is not a valid job id. Fix:"),
    ({"JOB": "a/../b"}, "JOB: 'a/../b' is not a valid job id"),
    ({"JOB": "{{ lookup('pipe','id') }}"}, "JOB: \"{{ lookup('pipe','id') }}\" is not a valid job id"),
    ({"CLUSTER": "gcp"}, "CLUSTER: 'gcp' is not one of local, aws, onprem. Fix: use CLUSTER=local"),
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
])
def test_every_bad_setting_is_named_with_a_fix(env: dict[str, str], line: str) -> None:
    with pytest.raises(settings.SettingsError) as caught:
        load(**env)
    assert any(str(p).startswith(line) for p in caught.value.problems), caught.value


def test_autostop_settings_become_the_roles_vars() -> None:
    assert load(IDLE="10").autostop == {"autostop_enabled": True, "autostop_idle_minutes": 10, "autostop_mode": "jobs"}
    assert load(IDLE="off").autostop == {"autostop_enabled": False, "autostop_mode": "jobs"}
    assert load(CLUSTER="aws", DOWN="1").down == "terminate"


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
    trusted, untrusted = cli.playbook_vars(s)
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


def test_progress_is_printed_every_10_s_otherwise() -> None:
    out, now = io.StringIO(), [0.0]
    v = view.View(out, tty=False, clock=lambda: now[0])
    for t in (0, 4, 9, 10.5, 15, 21):
        now[0] = t
        v.handle({"event": "progress", "elapsed": t, "tasks": [TASK]})
    assert out.getvalue().count("job running for") == 3  # at 0, 10.5 and 21
    assert "\x1b[" not in out.getvalue()


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
    assert cli.uncollected_jobs("aws", "c") == ["lost"]


def _hold(directory: str, ready: multiprocessing.synchronize.Event, release: multiprocessing.synchronize.Event
          ) -> None:
    paths.ARTIFACTS = Path(directory)
    with cli.job_lock(load(JOB="j")):
        ready.set()
        release.wait(10)


def test_a_second_train_of_the_same_job_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "ARTIFACTS", tmp_path)
    ready, release = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold, args=(str(tmp_path), ready, release))
    holder.start()
    try:
        assert ready.wait(10)
        with pytest.raises(cli.CommandError, match=rf"another train/collect of job j .* \(pid {holder.pid}\)"), \
                cli.job_lock(load(JOB="j")):
            pass
        with cli.job_lock(load(JOB="other")):  # another job is not blocked
            pass
    finally:
        release.set()
        holder.join(10)
    with cli.job_lock(load(JOB="j")):  # free again
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
    assert cli.cmd_prune(cli.Command(load(), out)) == 0
    assert not old.exists() and new.is_dir() and (job_dir / "logs").is_dir()
    assert cli.collected_dir(job_dir) == job_dir / "current"
    assert f"removed {old}" in out.getvalue()


def test_clean_artifacts_asks_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "ARTIFACTS", tmp_path / "artifacts")
    _copy(tmp_path / "artifacts" / "local" / "mnist", "c" * 64)
    monkeypatch.delenv("YES", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO())  # not a terminal: nobody to ask
    with pytest.raises(cli.CommandError, match="refusing to delete them without asking"):
        cli.cmd_clean_artifacts(cli.Command(load(), io.StringIO()))
    assert (tmp_path / "artifacts").is_dir()
    monkeypatch.setenv("YES", "1")
    assert cli.cmd_clean_artifacts(cli.Command(load(), io.StringIO())) == 0
    assert not (tmp_path / "artifacts").exists()
