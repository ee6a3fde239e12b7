"""The host's idle autostop (tfcluster/host/autostop.py): the decision, the facts it reads, one tick, the status."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.unit.host.proc_helpers import fake_proc
from tfcluster.core.contract import UNIT_PREFIX, unit_name
from tfcluster.host import autostop
from tfcluster.host.autostop import Config, ConfigError, Facts, decide

NOW = 1_800_000_000.0
BOOT = NOW - 3600
ON = Config(installed=True, enabled=True, idle_minutes=10, changed_at=BOOT)
JOB = unit_name("mnist")


def facts(**kwargs: object) -> Facts:
    base: dict[str, object] = {"now": NOW, "boot_time": BOOT}
    return Facts(**{**base, **kwargs})  # type: ignore[arg-type]


# ---- the decision --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("config", "state", "seen", "idle", "reason", "off"), [
    # a job unit runs: busy now
    (ON, {"last_active": NOW - 7200}, facts(units=(JOB,)), 0, "job running: " + JOB, False),
    # no job for 11 min (kept state): power off
    (ON, {"last_active": NOW - 660, "reason": "job running: x"}, facts(), 660, "job running: x", True),
    # exactly at the limit: power off
    (ON, {"last_active": NOW - 600}, facts(), 600, "earlier activity", True),
    # 9 min: not yet
    (ON, {"last_active": NOW - 540}, facts(), 540, "earlier activity", False),
    # a reboot 2 min ago: the boot counts as activity even though the state says 2 h idle
    (ON, {"last_active": NOW - 7200}, facts(boot_time=NOW - 120), 120, "boot", False),
    # no state at all (first check): the boot
    (ON, {}, facts(boot_time=NOW - 660), 660, "boot", True),
    # the settings changed 1 min ago: a host that was idle for hours does not power off at once
    (Config(installed=True, enabled=True, idle_minutes=10, changed_at=NOW - 60), {"last_active": NOW - 7200},
     facts(), 60, "settings changed", False),
    # the job unit ended 3 min ago (its InactiveEnterTimestamp), later than the last tick that saw it
    (ON, {"last_active": NOW - 240}, facts(unit_ended=NOW - 180), 180, "job unit ended", False),
    # mode jobs: an SSH session does not keep the host up
    (ON, {"last_active": NOW - 900}, facts(ssh_sessions=2), 900, "earlier activity", True),
    # mode jobs_and_ssh: it does
    (Config(installed=True, enabled=True, idle_minutes=10, mode="jobs_and_ssh", changed_at=BOOT),
     {"last_active": NOW - 900}, facts(ssh_sessions=1), 0, "1 SSH session(s)", False),
    # ... and the session seen at the last check has closed since: now (never earlier than it really closed)
    (Config(installed=True, enabled=True, idle_minutes=10, mode="jobs_and_ssh", changed_at=BOOT),
     {"last_active": NOW - 60, "ssh_sessions": 1}, facts(), 0, "SSH session(s) closed", False),
    # autostop off: idle time is still reported, nothing powers off
    (Config(installed=True, enabled=False, idle_minutes=10, changed_at=BOOT - 60), {"last_active": NOW - 9000},
     facts(), 3600, "boot", False),
    # a clock that went backwards never yields a negative idle time
    (ON, {"last_active": NOW + 500}, facts(), 0, "earlier activity", False),
    # the job seen at the last check (60 s ago) has ended: systemd still has its end time -> that time
    (ON, {"last_active": NOW - 60, "checked_at": NOW - 60, "busy_units": [JOB]}, facts(unit_ended=NOW - 30), 30,
     "job ended: " + JOB, False),
    # ... systemd no longer has it (the unit was unloaded): now, never earlier than the job really ended
    (ON, {"last_active": NOW - 60, "checked_at": NOW - 60, "busy_units": [JOB]}, facts(), 0, "job ended: " + JOB,
     False),
    # ... an end time from before the last check is another, older run: now
    (ON, {"last_active": NOW - 60, "checked_at": NOW - 60, "busy_units": [JOB]}, facts(unit_ended=NOW - 100), 0,
     "job ended: " + JOB, False),
    # no boot time readable, no state: the first check counts as activity
    (Config(installed=True, enabled=True, idle_minutes=10), {}, facts(boot_time=None), 0, "first check", False),
])
def test_decide(config: Config, state: dict[str, object], seen: Facts, idle: float, reason: str,  # noqa: PLR0917
                off: bool) -> None:
    decision = decide(config, state, seen)
    assert decision.idle_seconds == idle
    assert decision.reason == reason
    assert decision.power_off is off
    assert decision.state["last_active"] == decision.last_active
    if config.enabled:
        assert decision.power_off_in == max(0, config.idle_minutes * 60 - idle)
    else:
        assert decision.power_off_in is None
    assert decision.stop_units == ()  # without the GPU policy a running unit always keeps the host up


# ---- the GPU policy ------------------------------------------------------------------------------------------------
GPU = Config(installed=True, enabled=True, idle_minutes=10, gpu_idle_percent=10, gpu_idle_window_minutes=30,
             changed_at=BOOT - 86400)


def run_ticks(config: Config, ticks: Sequence[tuple[float, tuple[int, ...] | None, tuple[str, ...]]]) -> list:
    """Feed a series of (time, GPU utilisations, busy units) ticks through decide, keeping the state."""
    state: dict[str, object] = {}
    decisions = []
    for moment, util, units in ticks:
        decision = decide(config, state, Facts(now=moment, boot_time=BOOT - 86400, units=units, gpu_util=util))
        state = decision.state
        decisions.append(decision)
    return decisions


def test_gpu_policy_stops_a_job_whose_gpus_stay_idle() -> None:
    # a job runs with its GPUs at 2-5 % from t0: after the 30 min window it no longer counts, after 10 more idle
    # minutes the host stops the job (backup first) and powers off
    t0 = NOW
    ticks = [(t0 + 60 * minute, (2, 5), (JOB,)) for minute in range(0, 42)]
    decisions = run_ticks(GPU, ticks)
    first_off = next(i for i, d in enumerate(decisions) if d.power_off)
    assert first_off == 40  # minute 30 (window) + 10 (idle)
    assert decisions[first_off].stop_units == (JOB,)
    assert decisions[first_off - 1].power_off is False
    assert decisions[29].reason == "job running: " + JOB  # inside the window the job is activity
    assert decisions[31].reason.startswith("job running with its GPUs below 10% since ")
    assert decisions[31].last_active == t0 + 1800  # the job counted until the window was over


def test_gpu_policy_a_busy_gpu_resets_the_window() -> None:
    ticks = [(NOW + 60 * m, (3, 95 if m == 25 else 4), (JOB,)) for m in range(0, 70)]
    decisions = run_ticks(GPU, ticks)
    assert decisions[25].state["gpu_low_since"] is None
    assert decisions[26].state["gpu_low_since"] == NOW + 60 * 26
    assert next(i for i, d in enumerate(decisions) if d.power_off) == 26 + 40


@pytest.mark.parametrize(("util", "config"), [
    ((2, 5), Config(installed=True, enabled=True, idle_minutes=10, changed_at=BOOT)),  # policy off
    (None, GPU),  # no nvidia-smi on this host
    ((2, 50), GPU),  # one GPU is busy
])
def test_gpu_policy_does_not_apply(util: tuple[int, ...] | None, config: Config) -> None:
    decisions = run_ticks(config, [(NOW + 60 * m, util, (JOB,)) for m in range(0, 90)])
    assert not any(d.power_off for d in decisions)


@pytest.mark.parametrize(("text", "values"), [
    ("0\n", (0,)),
    ("12\n97\n", (12, 97)),
    (" 3 \n[N/A]\n", (3,)),
    ("[Not Supported]\n", None),
    ("", None),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", None),
])
def test_parse_gpu_util(text: str, values: tuple[int, ...] | None) -> None:
    assert autostop.parse_gpu_util(text) == values


# ---- facts from the host -------------------------------------------------------------------------------------------
SHOW = f"""Id={UNIT_PREFIX}mnist.service
ActiveState=active
InactiveEnterTimestamp=@1799990000

Id={UNIT_PREFIX}old.service
ActiveState=inactive
InactiveEnterTimestamp=@1799999000

Id={UNIT_PREFIX}crashed.service
ActiveState=failed
InactiveEnterTimestamp=@1799999500

Id={UNIT_PREFIX}retry.service
ActiveState=activating
InactiveEnterTimestamp=

Id={UNIT_PREFIX}never.service
ActiveState=inactive
InactiveEnterTimestamp=

Id=tfcluster.autostop.service
ActiveState=activating
InactiveEnterTimestamp=@1799999999

Id={UNIT_PREFIX}mnist.timer
ActiveState=active
InactiveEnterTimestamp=
"""


def test_parse_units() -> None:
    busy, ended = autostop.parse_units(SHOW)
    assert busy == (f"{UNIT_PREFIX}mnist.service", f"{UNIT_PREFIX}retry.service")
    assert ended == 1799999500  # the latest end among the job units (the checker's own unit is not a job)
    assert autostop.parse_units("") == ((), None)
    assert autostop.parse_units(f"Id={UNIT_PREFIX}a.service\nActiveState=inactive\n"
                                "InactiveEnterTimestamp=Mon 2026-11-30 10:00:00 UTC\n") == ((), None)


class FakeRun:
    """subprocess.run stand-in: answers per argv prefix, records every call."""

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        for prefix, (rc, out) in sorted(self.answers.items(), key=lambda kv: -len(kv[0])):
            if tuple(argv[:len(prefix)]) == prefix:
                return subprocess.CompletedProcess(list(argv), rc, stdout=out, stderr="boom" if rc else "")
        return subprocess.CompletedProcess(list(argv), 0, stdout="", stderr="")


def test_job_units_falls_back_without_unix_timestamps() -> None:
    run = FakeRun({("systemctl", "show", "--timestamp=unix"): (1, ""),
                   ("systemctl", "show", "-p"): (0, f"Id={JOB}\nActiveState=active\n")})
    assert autostop.job_units(run) == ((JOB,), None)
    assert run.calls[0][3] == "-p" and run.calls[1][2] == "-p"
    assert run.calls[0][-1] == f"{UNIT_PREFIX}*.service"
    with pytest.raises(RuntimeError, match="failed"):
        autostop.job_units(FakeRun({("systemctl",): (1, "")}))


def test_boot_time_is_pid1_start(tmp_path: Path) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    proc = fake_proc(tmp_path, {}, btime=1_799_000_000, pid1_start_ticks=ticks * 500)
    assert autostop.boot_time(str(proc)) == 1_799_000_500
    assert autostop.boot_time(str(tmp_path / "nowhere")) is None


def test_ssh_sessions_counts_logged_in_connections(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {
        100: (1, "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups"),
        200: (100, "sshd: root [priv]"),
        201: (200, "sshd: root@notty"),  # ssh host cmd (no terminal: not in utmp)
        300: (100, "sshd: ubuntu [priv]"),
        301: (300, "sshd: ubuntu@pts/0"),
        400: (100, "sshd: unknown [net]"),  # not logged in yet
        500: (1, "sshd-session: alice@pts/1"),  # OpenSSH >= 9.8
        600: (1, "bash -c sshd: fake@x"),
    })
    assert autostop.ssh_sessions(str(proc)) == 3


def test_ssh_sessions_skips_the_callers_own_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = fake_proc(tmp_path, {201: (1, "sshd: root@notty"), 202: (201, "bash"), 203: (202, "python3 status"),
                                301: (1, "sshd: ubuntu@pts/0")})
    monkeypatch.setattr(os, "getpid", lambda: 203)
    assert autostop.ssh_sessions(str(proc)) == 1


# ---- settings ------------------------------------------------------------------------------------------------------
def write_config(path: Path, **values: object) -> Path:
    path.write_text(json.dumps({"enabled": True, "idle_minutes": 10, "mode": "jobs", "gpu_idle_percent": 0,
                                "gpu_idle_window_minutes": 30, **values}))
    return path


def test_load_config(tmp_path: Path) -> None:
    assert autostop.load_config(str(tmp_path / "absent.json")) == Config()  # not installed: off
    config = autostop.load_config(str(write_config(tmp_path / "a.json", mode="jobs_and_ssh")))
    assert (config.installed, config.enabled, config.idle_minutes, config.mode) == (True, True, 10, "jobs_and_ssh")
    assert config.changed_at == os.stat(tmp_path / "a.json").st_mtime


@pytest.mark.parametrize(("values", "says"), [
    ({"mode": "ssh"}, "mode is 'ssh'"),
    ({"idle_minutes": 0}, "idle_minutes is 0"),
    ({"idle_minutes": "10"}, "idle_minutes is '10'"),
    ({"gpu_idle_percent": 101}, "gpu_idle_percent is 101"),
    ({"enabled": "yes"}, "true/false 'enabled'"),
])
def test_load_config_refuses(tmp_path: Path, values: dict[str, object], says: str) -> None:
    path = write_config(tmp_path / "c.json", **values)
    with pytest.raises(ConfigError) as caught:
        autostop.load_config(str(path))
    assert str(path) in str(caught.value) and says in str(caught.value)
    (tmp_path / "torn.json").write_text("{")
    with pytest.raises(ConfigError, match="cannot read"):
        autostop.load_config(str(tmp_path / "torn.json"))


# ---- one tick and the status, end to end with a fake systemctl -----------------------------------------------------
@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Settings (10 min, written 2 h ago), an empty state dir, a boot 3 h ago; `now` is NOW."""
    config = write_config(tmp_path / "autostop.json")
    os.utime(config, (NOW - 7200, NOW - 7200))
    monkeypatch.setattr(autostop, "boot_time", lambda proc="/proc": NOW - 3 * 3600)
    monkeypatch.setattr(autostop, "ssh_sessions", lambda proc="/proc": 0)
    monkeypatch.setattr(autostop.time, "time", lambda: NOW)
    return tmp_path


def argv(host: Path, *args: str) -> list[str]:
    return [*args, "--config", str(host / "autostop.json"), "--state-dir", str(host / "state")]


def test_check_powers_off_an_idle_host_and_keeps_the_state(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = FakeRun({})
    assert autostop.main(argv(host, "check"), run=run) == 0
    assert ["systemctl", "poweroff"] in run.calls
    state = json.loads((host / "state" / "state.json").read_text())
    assert state["powered_off_at"] == NOW and state["reason"] == "settings changed"
    assert "idle for 7200 s (limit 10 min" in capsys.readouterr().out


def test_check_dry_run_changes_nothing(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = FakeRun({})
    assert autostop.main(argv(host, "check", "--dry-run"), run=run) == 0
    assert ["systemctl", "poweroff"] not in run.calls
    assert not (host / "state").exists()
    assert "powering off" in capsys.readouterr().out


def test_check_keeps_a_busy_host_up(host: Path) -> None:
    run = FakeRun({("systemctl", "show"): (0, f"Id={JOB}\nActiveState=active\n")})
    assert autostop.main(argv(host, "check"), run=run) == 0
    assert ["systemctl", "poweroff"] not in run.calls
    state = json.loads((host / "state" / "state.json").read_text())
    assert state["last_active"] == NOW and state["reason"] == "job running: " + JOB


def test_check_with_autostop_off_does_nothing(host: Path) -> None:
    write_config(host / "autostop.json", enabled=False)
    run = FakeRun({})
    assert autostop.main(argv(host, "check"), run=run) == 0
    assert run.calls == []


def test_check_stops_gpu_idle_units_before_powering_off(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(host / "autostop.json", gpu_idle_percent=10, gpu_idle_window_minutes=30)
    os.utime(host / "autostop.json", (NOW - 7200, NOW - 7200))
    autostop.save_state({"last_active": NOW - 2400, "reason": "job running", "gpu_low_since": NOW - 3000},
                        str(host / "state"))
    monkeypatch.setattr(autostop.shutil, "which", lambda name: "/usr/bin/" + name)
    run = FakeRun({("systemctl", "show"): (0, f"Id={JOB}\nActiveState=active\n"),
                   ("nvidia-smi",): (0, "1\n0\n")})
    assert autostop.main(argv(host, "check"), run=run) == 0
    stop, poweroff = run.calls.index(["systemctl", "stop", JOB]), run.calls.index(["systemctl", "poweroff"])
    assert stop < poweroff


def test_check_reports_a_failed_poweroff(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert autostop.main(argv(host, "check"), run=FakeRun({("systemctl", "poweroff"): (1, "")})) == 1
    assert "`systemctl poweroff` failed: boom" in capsys.readouterr().err


def test_status_is_one_json_line_and_writes_nothing(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = FakeRun({("systemctl", "is-active"): (0, "active\n")})
    assert autostop.main(argv(host, "status"), run=run) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out[k] for k in ("installed", "enabled", "idle_minutes", "mode", "idle_seconds", "last_active",
                                "power_off_in_seconds", "timer")} == {
        "installed": True, "enabled": True, "idle_minutes": 10, "mode": "jobs", "idle_seconds": 7200,
        "last_active": autostop.rfc3339(NOW - 7200), "power_off_in_seconds": 0, "timer": "active"}
    assert out["last_active"].endswith("Z")
    assert not (host / "state").exists()
    assert ["systemctl", "poweroff"] not in run.calls


def test_status_of_a_host_without_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = FakeRun({("systemctl", "is-active"): (3, "inactive\n")})
    assert autostop.main(["status", "--config", str(tmp_path / "none.json"), "--state-dir", str(tmp_path)],
                         run=run) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["installed"], out["enabled"], out["power_off_in_seconds"], out["timer"]) == (
        False, False, None, "inactive")


def test_bad_settings_fail_the_tick_naming_the_file(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(host / "autostop.json", mode="never")
    assert autostop.main(argv(host, "check"), run=FakeRun({})) == 1
    assert "autostop.json: mode is 'never'" in capsys.readouterr().err


# ---- a host that would terminate keeps a finished job that was never collected (issue 18) ---------------------------
LONG_AGO = NOW - 86400
TERM = Config(installed=True, enabled=True, idle_minutes=10, changed_at=LONG_AGO, terminate=True,
              uncollected_grace_minutes=60)


@pytest.mark.parametrize(("config", "idle", "uncollected", "off", "held", "off_in"), [
    # terminate, a finished job not collected, idle past IDLE: held, powers off at IDLE + grace
    (TERM, 660, ("mnist",), False, True, 600 + 3600 - 660),
    # ... past IDLE + the grace: terminates anyway
    (TERM, 600 + 3600, ("mnist",), True, False, 0),
    # ... nothing uncollected: as always
    (TERM, 660, (), True, False, 0),
    # ... not yet idle for IDLE: it would power off at IDLE + grace, and says why
    (TERM, 300, ("mnist",), False, True, 600 + 3600 - 300),
    # stop (not terminate): the disk stays, nothing is held
    (Config(installed=True, enabled=True, idle_minutes=10, changed_at=LONG_AGO, uncollected_grace_minutes=60), 660,
     ("mnist",), True, False, 0),
    # a grace of 0 turns the hold off
    (Config(installed=True, enabled=True, idle_minutes=10, changed_at=LONG_AGO, terminate=True,
            uncollected_grace_minutes=0), 660, ("mnist",), True, False, 0),
])
def test_uncollected_jobs_hold_a_terminating_host(config: Config, idle: float, uncollected: tuple[str, ...],  # noqa: PLR0917
                                                  off: bool, held: bool, off_in: float) -> None:
    decision = decide(config, {"last_active": NOW - idle}, facts(uncollected=uncollected, boot_time=LONG_AGO))
    assert decision.idle_seconds == idle
    assert decision.power_off is off
    assert decision.power_off_in == off_in
    if held:
        assert decision.held == ("finished job(s) never collected: mnist (the power-off would terminate the host); "
                                 "it terminates anyway after 60 min more idle (autostop_uncollected_grace_minutes)")
    else:
        assert decision.held is None


def spec_on(jobs: Path, name: str, done: bool = True, **more: object) -> Path:
    model = jobs.parent / "models" / name
    model.mkdir(parents=True)
    if done:
        (model / "DONE").write_text("{}")
        os.utime(model / "DONE", (NOW - 600, NOW - 600))
    (jobs / f"{name}.json").write_text(json.dumps({"name": name, "model_dir": str(model), **more}))
    return model


def mark(jobs: Path, name: str, when: float) -> Path:
    path = jobs / f"{name}.collected"
    path.write_text(json.dumps({"job": name}))
    os.utime(path, (when, when))
    return path


def test_uncollected_jobs_are_finished_jobs_without_a_newer_mark(tmp_path: Path) -> None:
    jobs = tmp_path / "etc"
    jobs.mkdir()
    spec_on(jobs, "fresh")                                   # DONE, never collected
    spec_on(jobs, "kept")
    mark(jobs, "kept", NOW - 60)                             # collected after its DONE
    spec_on(jobs, "rerun")
    mark(jobs, "rerun", NOW - 7200)                          # collected, then run again: a newer DONE
    spec_on(jobs, "worker", done=False)                      # no DONE here (not the chief, or unfinished)
    linked = spec_on(jobs, "linked", done=False)
    (linked / "DONE").symlink_to(jobs / "fresh.json")        # a DONE that is a symlink is no DONE
    spec_on(jobs, "fakemark")
    (jobs / "fakemark.collected").symlink_to(jobs / "kept.collected")  # nor is a mark that is one
    spec_on(jobs, "fifomark")
    os.mkfifo(jobs / "fifomark.collected")                   # ... nor a FIFO (and it never blocks)
    (jobs / "autostop.json").write_text(json.dumps({"enabled": True}))  # the settings: no job spec
    (jobs / "torn.json").write_text("{")
    (jobs / "bad name.json").write_text(json.dumps({"name": "../x", "model_dir": "/"}))
    assert autostop.uncollected_jobs(str(jobs)) == ("fakemark", "fifomark", "fresh", "rerun")
    assert autostop.uncollected_jobs(str(tmp_path / "absent")) == ()


def test_a_symlinked_model_dir_is_not_entered(tmp_path: Path) -> None:
    jobs = tmp_path / "etc"
    jobs.mkdir()
    real = spec_on(jobs, "real")
    (jobs / "link.json").write_text(json.dumps({"name": "link", "model_dir": str(tmp_path / "models/lnk")}))
    (tmp_path / "models/lnk").symlink_to(real)
    assert autostop.uncollected_jobs(str(jobs)) == ("real",)


def test_check_keeps_a_terminating_host_with_an_uncollected_job(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(host / "autostop.json", terminate=True, uncollected_grace_minutes=1440)
    os.utime(host / "autostop.json", (NOW - 7200, NOW - 7200))
    jobs = host / "etc"
    jobs.mkdir()
    spec_on(jobs, "mnist")
    run = FakeRun({("systemctl", "is-active"): (0, "active\n")})
    assert autostop.main([*argv(host, "check"), "--jobs-dir", str(jobs)], run=run) == 0
    assert ["systemctl", "poweroff"] not in run.calls
    assert "not powering off: finished job(s) never collected: mnist" in capsys.readouterr().out
    assert autostop.main([*argv(host, "check"), "--jobs-dir", str(jobs)], run=run) == 0
    assert capsys.readouterr().out == ""  # said once, when the hold began
    assert autostop.main([*argv(host, "status"), "--jobs-dir", str(jobs)], run=run) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (out["terminate"], out["uncollected_jobs"], out["power_off_in_seconds"]) == (True, ["mnist"],
                                                                                      600 + 86400 - 7200)
    assert out["held"].startswith("finished job(s) never collected: mnist")
    mark(jobs, "mnist", NOW)
    assert autostop.main([*argv(host, "check"), "--jobs-dir", str(jobs)], run=run) == 0
    assert ["systemctl", "poweroff"] in run.calls


def test_load_config_reads_terminate_and_the_grace(tmp_path: Path) -> None:
    config = autostop.load_config(str(write_config(tmp_path / "a.json", terminate=True,
                                                   uncollected_grace_minutes=90)))
    assert (config.terminate, config.uncollected_grace_minutes) == (True, 90)
    old = autostop.load_config(str(write_config(tmp_path / "b.json")))  # written by an older role
    assert (old.terminate, old.uncollected_grace_minutes) == (False, 1440)
    with pytest.raises(ConfigError, match="terminate is 'yes', not true/false"):
        autostop.load_config(str(write_config(tmp_path / "c.json", terminate="yes")))


# ---- the state file: written and read by root in its own directory, safely (issue 18) -------------------------------
def test_save_state_never_writes_through_a_planted_temp_name(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    (state_dir / f"state.json.tmp-{os.getpid()}").symlink_to(victim)  # the old, predictable temp name
    autostop.save_state({"last_active": NOW}, str(state_dir))
    assert victim.read_text() == "root's file\n"
    state = state_dir / "state.json"
    assert not state.is_symlink() and json.loads(state.read_text()) == {"last_active": NOW}
    assert oct(state.stat().st_mode & 0o777) == oct(0o644)
    assert sorted(p.name for p in state_dir.iterdir()) == ["state.json", f"state.json.tmp-{os.getpid()}"]


def test_save_state_replaces_a_planted_symlink_instead_of_writing_through_it(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    victim = tmp_path / "victim"
    victim.write_text(json.dumps({"last_active": NOW - 99999}))
    (state_dir / "state.json").symlink_to(victim)
    assert autostop.load_state(str(state_dir)) == {}  # not followed
    autostop.save_state({"last_active": NOW}, str(state_dir))
    assert json.loads(victim.read_text()) == {"last_active": NOW - 99999}
    assert not (state_dir / "state.json").is_symlink()


def test_load_state_never_blocks_on_a_fifo_and_caps_its_read(tmp_path: Path) -> None:
    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "state.json")
    done: list[dict] = []
    reader = threading.Thread(target=lambda: done.append(autostop.load_state(str(fifo_dir))), daemon=True)
    reader.start()
    reader.join(5)
    if not done:  # the old code waits for a writer: give it one, then fail
        os.close(os.open(fifo_dir / "state.json", os.O_WRONLY | os.O_NONBLOCK))
    assert done == [{}]
    big = tmp_path / "big"
    big.mkdir()
    (big / "state.json").write_text(json.dumps({"pad": "x" * autostop.STATE_MAX_BYTES}))
    assert autostop.load_state(str(big)) == {}
