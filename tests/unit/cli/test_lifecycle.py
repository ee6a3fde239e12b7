"""The `tfcluster` command's lifecycle parts of issue 22: `make start`, AMI=refresh (refused while a job's result is
only on the hosts), ALL_OR_NOTHING, the MAX_DURATION-outlives-the-expiry warning of `make train`, and what still runs
(and costs) printed after a failed train too."""

from __future__ import annotations

import io
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tfcluster.cli import command, commands, settings
from tfcluster.cli import main as cli
from tfcluster.core import paths
from tfcluster.kinds import KINDS, KindError
from tfcluster.kinds.aws import Aws
from tfcluster.kinds.local import Local

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2027, 1, 15, 8, 0, tzinfo=timezone.utc)


def load(**env: str) -> settings.Settings:
    return settings.load({"PWD": "/tmp", **env})


def test_ami_and_all_or_nothing_are_read_for_cloud_instances() -> None:
    s = load(CLUSTER="aws", AMI="refresh", ALL_OR_NOTHING="1")
    assert (s.ami, s.all_or_nothing) == ("refresh", True)
    assert (load().ami, load().all_or_nothing) == (None, False)


@pytest.mark.parametrize(("env", "line"), [
    ({"CLUSTER": "aws", "AMI": "latest"}, "AMI: 'latest' is not refresh. Fix: AMI=refresh replaces every host"),
    ({"AMI": "refresh"}, "AMI: applies to cloud instances (CLUSTER=aws), not CLUSTER=local"),
    ({"CLUSTER": "aws", "ALL_OR_NOTHING": "yes"}, "ALL_OR_NOTHING: 'yes' is neither 1 nor 0"),
    ({"ALL_OR_NOTHING": "1", "CLUSTER": "onprem", "HOSTS": "/"}, "ALL_OR_NOTHING: applies to cloud instances"),
])
def test_bad_lifecycle_settings_are_named_with_a_fix(env: dict[str, str], line: str) -> None:
    with pytest.raises(settings.SettingsError) as caught:
        load(**env)
    assert any(str(p).startswith(line) for p in caught.value.problems), caught.value


@pytest.mark.parametrize(("max_duration", "expires", "warned"), [
    (4 * 3600, NOW + timedelta(hours=2), "MAX_DURATION=4h outlives the cluster's expiry 2027-01-15T10:00:00Z (in "
                                         "2h): the hosts power off then"),
    (4 * 3600, NOW + timedelta(hours=5), None),   # it ends in time
    (None, NOW + timedelta(hours=1), None),       # no deadline: nothing to compare
    (4 * 3600, None, None),                       # no expiry (TTL=off, on-prem)
])
def test_a_deadline_that_outlives_the_expiry_is_warned_with_a_fix(max_duration: int | None,
                                                                  expires: datetime | None,
                                                                  warned: str | None) -> None:
    text = commands.expiry_warning(max_duration, expires, NOW)
    if warned is None:
        assert text is None
    else:
        assert text is not None and warned in text
        assert "Fix: `make provision TTL=5h` first" in text  # the deadline + 30 min, in whole hours


@pytest.fixture
def artifacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(paths, "ARTIFACTS", tmp_path)
    monkeypatch.delenv("FORCE", raising=False)
    return tmp_path


def uncollected(root: Path, cluster: str = "aws", job: str = "mnist") -> None:
    job_dir = root / cluster / job
    job_dir.mkdir(parents=True)
    (job_dir / "job.json").write_text(json.dumps({"started": True, "finished": True, "collected": False,
                                                  "cluster_name": f"tfcluster-{cluster}"}))


def test_ami_refresh_is_refused_while_a_job_was_never_collected(artifacts: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    uncollected(artifacts)
    applied: list[str] = []
    monkeypatch.setattr(command.Command, "provision", lambda self, action: applied.append(action) or 0)
    cmd = command.Command(load(CLUSTER="aws", AMI="refresh"), io.StringIO())
    with pytest.raises(command.CommandError, match=r"AMI=refresh replaces every host.*make collect JOB=mnist"):
        commands.cmd_provision(cmd)
    assert applied == []
    monkeypatch.setenv("FORCE", "1")
    assert commands.cmd_provision(cmd) == command.EXIT_OK and applied == ["apply"]


def test_a_plain_provision_is_not_refused_for_an_uncollected_job(artifacts: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    uncollected(artifacts)
    monkeypatch.setattr(command.Command, "provision", lambda self, action: 0)
    assert commands.cmd_provision(command.Command(load(CLUSTER="aws"), io.StringIO())) == command.EXIT_OK


def test_a_failed_train_says_what_still_runs_and_costs(artifacts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(command.Command, "playbook", lambda self, name, action, **k: 2)
    monkeypatch.setattr(commands, "still_running", lambda s: ["Still running: cluster x, about $4.10 per hour"])
    out = io.StringIO()
    assert commands.cmd_train(command.Command(load(), out)) == command.EXIT_FAILED
    assert "about $4.10 per hour" in out.getvalue()


def test_train_warns_before_it_starts_when_the_deadline_outlives_the_expiry(
        artifacts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Local, "expires_at", lambda self, target: datetime.now(timezone.utc) + timedelta(hours=1))
    monkeypatch.setattr(command.Command, "playbook", lambda self, name, action, **k: 1)
    monkeypatch.setattr(commands, "still_running", lambda s: [])
    out = io.StringIO()
    commands.cmd_train(command.Command(load(MAX_DURATION="3h"), out))
    assert "warning: MAX_DURATION=3h outlives the cluster's expiry" in out.getvalue()


def test_start_runs_the_kinds_start_under_the_exclusive_cluster_lock(artifacts: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(Aws, "start", lambda self, target, env=None: seen.append(target.name) or
                        ["tfcluster-aws: started 2 instance(s): i-1 i-2\x1b[2J"])
    out = io.StringIO()
    assert commands.cmd_start(command.Command(load(CLUSTER="aws"), out)) == command.EXIT_OK
    assert seen == ["tfcluster-aws"]
    assert "started 2 instance(s): i-1 i-2\\x1b[2J" in out.getvalue()  # EC2's answer is data: escaped
    assert (artifacts / "aws" / ".cluster-tfcluster-aws.lock").exists()


def test_start_of_a_kind_without_instances_is_refused_with_a_fix(
        tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yml"
    hosts.write_text("hosts: []\n")
    with pytest.raises(KindError, match=r"has no instances to start.*Fix: power them on yourself"):
        KINDS["onprem"].start(load(CLUSTER="onprem", HOSTS=str(hosts)).target)
    assert KINDS["onprem"].expires_at(load().target) is None


def test_start_is_a_command_and_a_make_target() -> None:
    assert cli.COMMANDS["start"][0] is commands.cmd_start
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^start: setup-cluster ## .+\n\t\$\(TFC\) start$", makefile, re.M)
    exported = " ".join(line for line in makefile.splitlines() if line.startswith("export "))
    assert {"AMI", "ALL_OR_NOTHING"} <= set(exported.split())
    assert re.search(r"^AMI +\?=##", makefile, re.M) and re.search(r"^ALL_OR_NOTHING \?=##", makefile, re.M)


def test_the_aws_kind_tells_the_roles_the_expiry_and_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Aws, "outputs", lambda self, target: {"expires_at": "2027-01-16T08:00:00Z",
                                                              "autostop_down": "stop", "checkpoint_s3": None})
    target = load(CLUSTER="aws").target
    assert Aws().playbook_vars(target) == {"tfcluster_autostop_down": "stop",
                                           "tfcluster_expires_at": "2027-01-16T08:00:00Z"}
    assert Aws().expires_at(target) == NOW + timedelta(days=1)


def test_the_aws_kinds_start_turns_a_failure_into_one_message(monkeypatch: pytest.MonkeyPatch) -> None:
    from tfcluster.cost.clusters import StartError
    from tfcluster.provision import aws as provision_aws

    def fail(tf_dir: Path, env: Any) -> list[str]:
        raise StartError("instance(s) i-1 ... cannot be started. Fix: `make provision CLUSTER=aws`")

    monkeypatch.setattr(provision_aws, "start", fail)
    with pytest.raises(KindError, match=r"cannot be started\. Fix: `make provision CLUSTER=aws`"):
        Aws().start(load(CLUSTER="aws").target, {})
