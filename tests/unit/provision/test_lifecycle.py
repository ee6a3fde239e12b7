"""CLUSTER=aws lifecycle (tfcluster/provision/aws.py, issue 22): the boot guard's idle time from IDLE, AMI=refresh,
`make plan`'s newer-image line from the saved plan, and what a refresh keeps of the cost guard."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tfcluster.provision import aws as provision_aws
from tfcluster.provision.common import ProvisionError

NOW = datetime(2027, 1, 15, 8, 0, tzinfo=timezone.utc)
DECLARED = {"expires_at", "autostop_down", "autostop_idle_minutes"}


@pytest.mark.parametrize(("idle", "pair"), [
    ("10", "autostop_idle_minutes=10"),      # bare minutes, as `make autostop IDLE=10`
    ("2h", "autostop_idle_minutes=120"),
    ("90s", "autostop_idle_minutes=2"),      # rounded up: never earlier than asked
    ("off", "autostop_idle_minutes=0"),      # the boot guard then stops only at the expiry
])
def test_idle_gives_the_boot_guard_its_idle_time(idle: str, pair: str) -> None:
    assert provision_aws.lifecycle_vars(DECLARED, {"IDLE": idle, "TTL": "off"}, NOW) == [pair]


def test_no_idle_leaves_the_roots_default_and_a_root_without_it_gets_none() -> None:
    assert provision_aws.lifecycle_vars(DECLARED, {"TTL": "off"}, NOW) == []
    assert provision_aws.lifecycle_vars({"expires_at"}, {"IDLE": "10", "TTL": "off"}, NOW) == []


def test_a_bad_idle_is_refused_before_anything_runs() -> None:
    with pytest.raises(ProvisionError, match="IDLE"):
        provision_aws.lifecycle_vars(DECLARED, {"IDLE": "soon"}, NOW)


def test_ami_refresh_replaces_the_kept_ami_and_nothing_else_is_accepted() -> None:
    assert provision_aws.ami_args({"AMI": "refresh"}) == ["-replace=module.cluster.terraform_data.ami"]
    assert provision_aws.ami_args({}) == []
    with pytest.raises(ProvisionError, match="the only value is AMI=refresh"):
        provision_aws.ami_args({"AMI": "ami-0123"})


def plan_doc(latest: Any, in_use: Any) -> dict[str, Any]:
    outputs: dict[str, Any] = {"hosts": {"value": [{"name": "worker-0", "task_type": "worker", "task_index": 0}]}}
    if latest is not ...:
        outputs["ami_latest"] = {"sensitive": False, "value": latest}
    if in_use is not ...:
        outputs["ami_in_use"] = {"sensitive": False, "value": in_use}
    return {"planned_values": {"outputs": outputs}}


NEW = {"id": "ami-0new", "name": "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20270110",
       "creation_date": "2027-01-10T10:00:00.000Z"}


@pytest.mark.parametrize(("latest", "in_use", "line"), [
    (NEW, ["ami-0old"], "newer image: Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20270110 "
                        "(ami-0new, 2027-01-10T10:00:00.000Z); the hosts run ami-0old. make provision AMI=refresh "
                        "replaces every host with it (their disks are lost: collect first)"),
    (NEW, ["ami-0new"], None),       # the hosts run the newest already
    (NEW, [], None),                 # nothing launched yet: the first apply takes it anyway
    (NEW, ..., None),                # unknown until apply
    (None, ["ami-0old"], None),      # ami_id pins the image
    ({**NEW, "name": "evil\x1b[2Jname"}, ["ami-0old"], "newer image: evil\\x1b[2Jname"),  # anyone's text
])
def test_the_newer_image_line(latest: Any, in_use: Any, line: str | None) -> None:
    found = provision_aws.image_line(plan_doc(latest, in_use))
    if line is None:
        assert found is None
    else:
        assert found is not None and found.startswith(line)


def test_plan_writes_the_planned_hosts_and_names_a_newer_image(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    calls: list[list[str]] = []

    def run(args: Sequence[str], *a: Any, **k: Any) -> subprocess.CompletedProcess[str]:
        calls.append(list(args))
        out = json.dumps(plan_doc(NEW, ["ami-0old"])) if args[0] == "show" else ""
        return subprocess.CompletedProcess(list(args), 0, out, "")

    monkeypatch.setattr(provision_aws, "run_terraform", run)
    hosts = tmp_path / "hosts.json"
    provision_aws.plan(tmp_path, {}, ["-replace=module.cluster.terraform_data.ami"], hosts)
    assert [c[0] for c in calls] == ["plan", "show"]  # the plan is shown once, for both
    assert "-replace=module.cluster.terraform_data.ami" in calls[0]
    assert json.loads(hosts.read_text())[0]["name"] == "worker-0"
    assert "newer image: Deep Learning Base" in caplog.text


def test_a_refresh_keeps_the_applied_cost_guard() -> None:
    out = {"expires_at": "2027-01-16T08:00:00Z", "autostop_down": "stop",
           "autostop": {"guard": True, "settings": {"enabled": True, "idle_minutes": 10}}}
    assert provision_aws.refresh_vars(DECLARED, out) == ["expires_at=2027-01-16T08:00:00Z", "autostop_down=stop",
                                                         "autostop_idle_minutes=10"]
    off = {"autostop": {"settings": {"enabled": False, "idle_minutes": 30}}, "expires_at": None}
    assert provision_aws.refresh_vars(DECLARED, off) == ["autostop_idle_minutes=0"]
    assert provision_aws.refresh_vars(set(), out) == []
