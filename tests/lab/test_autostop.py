"""Idle autostop on real systemd hosts (playbooks/autostop.yml, the autostop role, tfcluster/host/autostop.py).

One lab of 4 hosts, IDLE=1 min, all watched at once (one scenario, several assertions):
  as-idle  runs a job longer than its check interval (a fake tfcluster-<job>.service that sleeps 75 s), then powers
           itself off about a minute after it ended (default 60 s check interval: the measured idle-to-power-off
           time is printed);
  as-busy  runs a long job and stays up;
  as-ssh   mode jobs_and_ssh, no job: stays up while an SSH session is open, powers off about a minute after it
           closes;
  as-boot  IDLE=2 min, rebooted before it would power off: the idle clock starts again from the boot.
The other hosts check every 15 s to keep the test short. The role itself: check mode changes nothing, a second run
changes nothing (idempotence), and a run that does not overwrite (site.yml's way) keeps each host's settings.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lab import Lab
from lab.flows import Flows, PlaybookRun
from tfcluster.core.contract import unit_name
from tfcluster.core.duration import parse_time

# its module's lab (fixed names): one worker
pytestmark = [pytest.mark.xdist_group("autostoplab"), pytest.mark.lab, pytest.mark.slow]

IDLE, BUSY, SSH, BOOT = "as-idle", "as-busy", "as-ssh", "as-boot"
HOSTS = (IDLE, BUSY, SSH, BOOT)
SLOTS = ((IDLE, "chief", 0), (BUSY, "worker", 0), (SSH, "worker", 1), (BOOT, "worker", 2))
JOB = unit_name("fakejob")
TICK = 15  # check interval of every host but as-idle (which keeps the default, 60 s)
SETTINGS = {
    "autostop_enabled": True,
    "autostop_idle_minutes": f"{{{{ 2 if inventory_hostname == '{BOOT}' else 1 }}}}",
    "autostop_mode": f"{{{{ 'jobs_and_ssh' if inventory_hostname == '{SSH}' else 'jobs' }}}}",
    "autostop_interval_seconds": f"{{{{ 60 if inventory_hostname == '{IDLE}' else {TICK} }}}}",
}


@dataclass
class Outcome:
    runs: dict[str, PlaybookRun] = field(default_factory=dict)
    check_mode_left: str = ""
    exposure: str = ""  # systemd-analyze security's verdict on the checker's unit
    status: dict[str, dict[str, object]] = field(default_factory=dict)  # after the role ran
    settings_at: float = 0.0  # when the role wrote the settings (a change of settings counts as activity)
    job_end: float = 0.0  # as-idle's job ended (systemd's ExecMainExitTimestamp)
    ssh_closed: float = 0.0
    ssh_up_while_open: bool = False
    boot: float = 0.0  # as-boot's boot after the reboot
    boot_status: dict[str, object] = field(default_factory=dict)
    boot_state_kept: dict[str, object] = field(default_factory=dict)
    power_off: dict[str, float] = field(default_factory=dict)
    busy_status: dict[str, object] = field(default_factory=dict)


def status(lab: Lab, host: str) -> dict[str, object]:
    return json.loads(lab.ssh(host, "tfcluster-autostop status", timeout=30).stdout)


def moment(value: object) -> float:
    parsed = parse_time(value)
    assert parsed is not None, f"not a time: {value!r}"
    return parsed.timestamp()


def powered_off_at(lab: Lab, host: str) -> float | None:
    """When the host's systemd-nspawn exited 0 (a power-off from inside: the supervisor does not boot it again)."""
    try:
        lines = lab.paths.bootlog(host).read_text().splitlines()
    except OSError:
        return None
    ends = [float(line.split()[0]) for line in lines if line.endswith(" exited 0")]
    return ends[0] if ends else None


JOB_END = "/var/tmp/fakejob.end"


def start_job(lab: Lab, host: str, seconds: int) -> None:
    """A fake job unit under the job prefix (the autostop logic only looks at the unit's state) that notes when
    it ended (systemd unloads an inactive unit soon, and its timestamps with it)."""
    unit = (f"[Unit]\nDescription=fake tfcluster job\n[Service]\nExecStart=/bin/sleep {seconds}\n"
            f"ExecStopPost=/bin/sh -c 'date +%%s.%%N > {JOB_END}'\n")
    lab.ssh(host, f"rm -f {JOB_END}; cat > /etc/systemd/system/{JOB} && systemctl daemon-reload && "
            f"systemctl start --no-block {JOB}", input=unit)


def job_end(lab: Lab, host: str) -> float | None:
    out = lab.ssh(host, f"cat {JOB_END} 2>/dev/null", timeout=30, check=False).stdout.strip()
    return float(out) if out else None


def wait_until(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(1)
    raise AssertionError(f"{what} within {timeout:.0f} s")


SESSIONS = "ps -eo args | grep -c '^sshd: root@'"  # this probe's own session counts one


def close_connections(control_dir: Path) -> None:
    """End the SSH connections a run of Ansible's left open (ControlPersist) and wait until they are gone: none may
    outlive its run, on as-ssh it would count as a session. (Without a persistent connection, every module of the
    four runs on four hosts paid an SSH handshake, ~0.2 CPU-s here and on the host.)"""
    for socket in control_dir.glob("*"):
        subprocess.run(["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "ansible"], capture_output=True,
                       timeout=30, check=False)
    wait_until(lambda: not control_dir.is_dir() or not any(control_dir.iterdir()), 30,
               f"Ansible's SSH connections ({control_dir}) did not end")


def run_role(flows: Flows, hosts_file: Path, outcome: Outcome, lab: Lab) -> None:
    # "keep": site.yml's way (autostop_overwrite false, other values): a host keeps the settings it has.
    keep = {**SETTINGS, "autostop_overwrite": False, "autostop_idle_minutes": 30, "autostop_mode": "jobs"}
    for name, args, settings in (("check", ["--check"], SETTINGS), ("first", [], SETTINGS), ("again", [], SETTINGS),
                                 ("keep", [], keep)):
        control = flows.workdir / f"cp-{name}"  # the run's own connections (close_connections)
        run = outcome.runs[name] = flows.run("autostop.yml", hosts_file, "autostop",
                                             {**settings, "ansible_control_path_dir": str(control)}, args=args,
                                             timeout=300)
        close_connections(control)
        if run.returncode != 0:
            pytest.fail(f"the {name} run of playbooks/autostop.yml failed:\n{run.describe()}")
        if name == "check":
            outcome.check_mode_left = lab.ssh(
                IDLE, "ls /etc/tfcluster /opt/tfcluster /etc/systemd/system/tfcluster.autostop.timer 2>/dev/null; "
                "systemctl is-active tfcluster.autostop.timer", check=False).stdout.strip()
    # Every connection of the runs has ended on as-ssh too: the test's session and this probe's are left.
    wait_until(lambda: int(lab.ssh(SSH, SESSIONS, check=False).stdout.strip() or 0) == 2, 30,
               "Ansible's sessions on as-ssh did not end")
    outcome.status = {host: status(lab, host) for host in HOSTS}
    outcome.exposure = lab.ssh(BUSY, "systemd-analyze security tfcluster.autostop.service --no-pager | tail -1").stdout
    outcome.settings_at = moment(outcome.status[IDLE]["last_active"])


def reboot(lab: Lab, outcome: Outcome) -> None:
    """Reboot as-boot well after its settings were written and well before it would power off (2 min)."""
    settings_at = moment(outcome.status[BOOT]["last_active"])
    time.sleep(max(0.0, settings_at + 30 - time.time()))
    lab.ssh(BOOT, "test -s /var/lib/tfcluster/autostop/state.json")  # at least one check ran before the reboot
    lab.reboot(BOOT)
    outcome.boot_status = status(lab, BOOT)
    outcome.boot = moment(outcome.boot_status["last_active"])
    outcome.boot_state_kept = json.loads(lab.ssh(BOOT, "cat /var/lib/tfcluster/autostop/state.json").stdout)


def watch(lab: Lab, outcome: Outcome, session: subprocess.Popen[bytes]) -> None:
    """Close the SSH session once as-ssh has outlived its idle time with it open; note each power-off."""
    deadline = time.monotonic() + 420
    close_after = outcome.settings_at + 90  # 30 s past IDLE + 2 checks: without the session it would be off
    while time.monotonic() < deadline and len(outcome.power_off) < 3:
        if not outcome.job_end and IDLE not in outcome.power_off:
            outcome.job_end = job_end(lab, IDLE) or 0.0
        if not outcome.ssh_closed and time.time() >= close_after:
            outcome.ssh_up_while_open = powered_off_at(lab, SSH) is None and lab.reachable(SSH)
            session.terminate()
            session.wait(timeout=30)
            outcome.ssh_closed = time.time()
        for host in (IDLE, SSH, BOOT):
            off = powered_off_at(lab, host)
            if off is not None:
                outcome.power_off.setdefault(host, off)
        time.sleep(1)
    outcome.busy_status = status(lab, BUSY)


@pytest.fixture(scope="module")
def outcome(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    lab = Lab(slots=("chief", "worker", "worker", "worker"), name="autostop", names=HOSTS)
    request.addfinalizer(lab.down)
    lab.start()
    workdir = tmp_path_factory.mktemp("autostop")
    flows = Flows(lab, workdir, workdir / "no-wheelhouse")
    hosts_file = flows.hosts_file("autostop", SLOTS, cluster_name="lab-autostop")
    result = Outcome()
    # No SSH connection of Ansible's outlives its run (run_role: close_connections): on as-ssh it would count.
    session = subprocess.Popen(lab.ssh_argv(SSH, "sleep 900"), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: int(lab.ssh(SSH, SESSIONS, check=False).stdout.strip() or 0) >= 2, 30,
                   "the SSH session to as-ssh did not open")
        run_role(flows, hosts_file, result, lab)
        # Longer than as-idle's 60 s check interval, so a check sees it running: a job that starts and ends
        # between two checks is gone with its unit (systemd unloads it), and the idle clock runs from the
        # settings (a faster machine ran the role's runs in ~20 s: the 30 s job ended unseen, off 10 s later).
        start_job(lab, IDLE, 75)
        start_job(lab, BUSY, 1800)
        reboot(lab, result)
        watch(lab, result, session)
    finally:
        if session.poll() is None:
            session.terminate()
            session.wait(timeout=30)
    print(json.dumps({k: v for k, v in result.__dict__.items() if k != "runs"}, indent=1, default=str))
    yield result


def test_role_check_mode_changes_nothing_and_a_second_run_changes_nothing(outcome: Outcome) -> None:
    assert [run.returncode for run in outcome.runs.values()] == [0, 0, 0, 0]
    assert outcome.check_mode_left == "inactive", "check mode installed something:\n" + outcome.check_mode_left
    assert all(outcome.runs["first"].recap[h]["changed"] > 0 for h in HOSTS), outcome.runs["first"].recap
    for name in ("again", "keep"):
        assert all(outcome.runs[name].recap[h]["changed"] == 0 for h in HOSTS), outcome.runs[name].describe()
    settings = {h: (s["enabled"], s["idle_minutes"], s["mode"], s["timer"]) for h, s in outcome.status.items()}
    assert settings == {IDLE: (True, 1, "jobs", "active"), BUSY: (True, 1, "jobs", "active"),
                        SSH: (True, 1, "jobs_and_ssh", "active"), BOOT: (True, 2, "jobs", "active")}
    assert outcome.status[IDLE]["last_active_reason"] == "settings changed"
    level = float(outcome.exposure.split("level for tfcluster.autostop.service:")[1].split()[0])
    print(f"tfcluster.autostop.service exposure: {level}")
    assert level <= 2.0, outcome.exposure
    assert outcome.status[SSH]["last_active_reason"] == "1 SSH session(s)"  # status's own session is not counted


def test_an_idle_host_powers_off_about_a_minute_after_its_job_ends(outcome: Outcome) -> None:
    assert outcome.job_end, "as-idle's job end was never seen"
    assert IDLE in outcome.power_off, "as-idle did not power off"
    after = outcome.power_off[IDLE] - outcome.job_end
    print(f"as-idle: idle (job ended) -> powered off in {after:.0f} s (IDLE=1 min, checks every 60 s)")
    assert 58 <= after <= 60 + 60 + 20


def test_a_host_running_a_job_stays_up(outcome: Outcome) -> None:
    assert BUSY not in outcome.power_off
    assert outcome.busy_status["busy_units"] == [JOB]
    assert outcome.busy_status["idle_seconds"] == 0
    assert str(outcome.busy_status["last_active_reason"]).startswith("job running: ")


def test_an_open_ssh_session_keeps_a_host_up_in_jobs_and_ssh_mode(outcome: Outcome) -> None:
    assert outcome.ssh_up_while_open, "as-ssh powered off while an SSH session was open"
    assert outcome.ssh_closed - outcome.settings_at >= 85
    assert SSH in outcome.power_off, "as-ssh did not power off after the session closed"
    after = outcome.power_off[SSH] - outcome.ssh_closed
    print(f"as-ssh: session closed -> powered off in {after:.0f} s (IDLE=1 min, checks every {TICK} s)")
    assert 58 <= after <= 60 + TICK + 20


def test_after_a_reboot_the_idle_clock_starts_again_from_the_boot(outcome: Outcome) -> None:
    settings_at = moment(outcome.status[BOOT]["last_active"])
    assert outcome.boot_status["last_active_reason"] == "boot"
    assert outcome.boot - settings_at >= 25
    # the kept state (/var/lib/tfcluster/autostop) survived the reboot; the boot is newer, so it wins
    assert settings_at - 1 <= float(outcome.boot_state_kept["last_active"]) <= outcome.boot
    assert BOOT in outcome.power_off, "as-boot did not power off"
    after = outcome.power_off[BOOT] - outcome.boot
    before = outcome.boot - settings_at
    print(f"as-boot: boot -> powered off in {after:.0f} s (IDLE=2 min; settings written {before:.0f} s before boot)")
    assert 118 <= after <= 120 + TICK + 20

