"""The autostop role takes over from the boot guard (issue 22) on a real systemd host: the guard's user data
(infra/modules/gpu_cluster, rendered as Terraform would and applied as cloud-init would: lab/twin.py) runs first;
the role, run site.yml's way (autostop_overwrite false), replaces the guard's checker, unit and wrapper under the
same timer, keeps the guard's settings (IDLE at provision) with the cluster's current expiry, continues its state,
and a second run changes nothing. A new expiry (make provision TTL=...) reaches the host at the next run."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from lab import Lab
from lab.flows import Flows, PlaybookRun
from lab.twin_boot import apply_cloud_config, boot_guard_settings, render_boot_guard

pytestmark = [pytest.mark.xdist_group("takeoverlab"), pytest.mark.lab, pytest.mark.slow]

HOST = "to-guard"
EXPIRES, LATER = "2099-01-15T08:00:00Z", "2099-01-16T08:00:00Z"
TIMERS = "systemctl list-timers --all --no-legend --plain"


def status(lab: Lab) -> dict[str, object]:
    return json.loads(lab.ssh(HOST, "tfcluster-autostop status", timeout=30).stdout)


@pytest.fixture(scope="module")
def guarded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Flows]]:
    lab = Lab(slots=("chief",), name="takeover", names=(HOST,))
    request.addfinalizer(lab.down)
    lab.start()
    apply_cloud_config(lab, HOST, render_boot_guard(boot_guard_settings(idle_minutes=45, expires_at=EXPIRES)))
    workdir = tmp_path_factory.mktemp("takeover")
    yield lab, Flows(lab, workdir, workdir / "no-wheelhouse")


def run(flows: Flows, expires: str) -> PlaybookRun:
    hosts_file = flows.hosts_file("takeover", ((HOST, "chief", 0),), cluster_name="lab-takeover")
    settings = {"autostop_enabled": True, "autostop_overwrite": False, "tfcluster_expires_at": expires}
    result = flows.run("autostop.yml", hosts_file, "autostop", settings, timeout=300)
    if result.returncode != 0:
        pytest.fail(f"playbooks/autostop.yml failed:\n{result.describe()}")
    return result


def test_the_role_takes_the_guards_place_with_its_settings_and_state(guarded: tuple[Lab, Flows]) -> None:
    lab, flows = guarded
    before = status(lab)
    assert (before["guard"], before["idle_minutes"], before["expires_at"], before["timer"]) == (
        "boot", 45, EXPIRES, "active")
    lab.ssh(HOST, "systemctl start tfcluster.autostop.service")  # one tick of the guard: its state is there
    guard_state = json.loads(lab.ssh(HOST, "cat /var/lib/tfcluster/autostop/state.json").stdout)
    first = run(flows, EXPIRES)
    assert first.recap[HOST]["changed"] > 0
    after = status(lab)
    assert (after["guard"], after["idle_minutes"], after["expires_at"], after["timer"]) == (
        "role", 45, EXPIRES, "active")  # the guard's IDLE kept (site.yml's way), the same expiry
    assert lab.ssh(HOST, "test -e /opt/tfcluster/autostop/boot_guard.py", check=False).returncode == 1
    timers = lab.ssh(HOST, TIMERS).stdout
    assert sum("tfcluster.autostop.timer" in line for line in timers.splitlines()) == 1, timers
    lab.ssh(HOST, "systemctl start tfcluster.autostop.service")  # the role's checker, from the guard's state
    state = json.loads(lab.ssh(HOST, "cat /var/lib/tfcluster/autostop/state.json").stdout)
    assert float(state["checked_at"]) > float(guard_state["checked_at"])
    assert float(state["last_active"]) >= float(guard_state["last_active"])


def test_a_second_run_changes_nothing(guarded: tuple[Lab, Flows]) -> None:
    _, flows = guarded
    again = run(flows, EXPIRES)
    assert again.recap[HOST]["changed"] == 0, again.describe()


def test_a_new_expiry_reaches_a_host_that_keeps_its_settings(guarded: tuple[Lab, Flows]) -> None:
    lab, flows = guarded
    renewed = run(flows, LATER)
    assert renewed.recap[HOST]["changed"] > 0
    assert (status(lab)["expires_at"], status(lab)["idle_minutes"]) == (LATER, 45)
