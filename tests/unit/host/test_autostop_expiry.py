"""The host's expiry (tfcluster/host/autostop.py, issue 22): past the cluster's expires_at a host powers off whatever
its idle time and whether idle autostop is on, its job units stopped first, unless this boot began after it; the
uncollected-job hold applies past it too; `check` runs when only an expiry is set; `status` says it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tfcluster.core.contract import unit_name
from tfcluster.host import autostop
from tfcluster.host.autostop import Config, ConfigError, Facts, decide

NOW = 1_800_000_000.0
BOOT = NOW - 3600
JOB = unit_name("mnist")
EXPIRED = NOW - 60  # a minute ago
LATER = NOW + 7200  # in two hours


def config(**kwargs: object) -> Config:
    base: dict[str, object] = {"installed": True, "enabled": True, "idle_minutes": 30, "changed_at": BOOT}
    return Config(**{**base, **kwargs})  # type: ignore[arg-type]


def facts(**kwargs: object) -> Facts:
    base: dict[str, object] = {"now": NOW, "boot_time": BOOT}
    return Facts(**{**base, **kwargs})  # type: ignore[arg-type]


@pytest.mark.parametrize(("cfg", "seen", "off", "expired", "stop", "off_in"), [
    # past the expiry, booted before it: off, even with a job running (it is stopped first, with a backup)
    (config(expires_at=EXPIRED), facts(units=(JOB,)), True, True, (JOB,), 0),
    # ... and with idle autostop off (IDLE=off at provision): the expiry alone
    (config(enabled=False, expires_at=EXPIRED), facts(), True, True, (), 0),
    # the host was started again after its expiry (on purpose): only the idle time counts this boot
    (config(expires_at=EXPIRED), facts(boot_time=NOW - 30, units=(JOB,)), False, False, (), 1800),
    (config(enabled=False, expires_at=EXPIRED), facts(boot_time=NOW - 30), False, False, (), None),
    # no boot time readable: the expiry counts
    (config(expires_at=EXPIRED), facts(boot_time=None), True, True, (), 0),
    # not yet: the sooner of the idle limit and the expiry
    (config(expires_at=NOW + 60), facts(units=(JOB,)), False, False, (), 60),
    # idle since the boot (1 h, limit 30 min): the idle rule powers it off, not the expiry
    (config(expires_at=LATER), facts(), True, False, (), 0),
    (config(enabled=False, expires_at=LATER), facts(), False, False, (), 7200),
    # no expiry: as before
    (config(), facts(units=(JOB,)), False, False, (), 1800),
])
def test_the_expiry_powers_a_host_off(cfg: Config, seen: Facts, off: bool, expired: bool,  # noqa: PLR0917
                                      stop: tuple[str, ...], off_in: float | None) -> None:
    decision = decide(cfg, {}, seen)
    assert (decision.power_off, decision.expired, decision.stop_units) == (off, expired, stop)
    assert decision.power_off_in == off_in


def test_an_uncollected_job_holds_a_terminating_host_past_its_expiry_for_the_grace() -> None:
    held = config(enabled=False, expires_at=EXPIRED, terminate=True, uncollected_grace_minutes=60)
    decision = decide(held, {}, facts(uncollected=("mnist",)))
    assert not decision.power_off and decision.held and "past its expiry" in decision.held
    assert decision.power_off_in == 3600 - 60 and decision.state["held"] is True
    late = decide(held, {}, facts(now=EXPIRED + 3600, uncollected=("mnist",)))
    assert late.power_off and late.expired and late.held is None
    stopping = decide(config(enabled=False, expires_at=EXPIRED, uncollected_grace_minutes=60), {},
                      facts(uncollected=("mnist",)))
    assert stopping.power_off  # stop (not terminate): the disk stays, nothing is held


@pytest.mark.parametrize(("value", "moment"), [
    ("2027-01-15T08:00:00Z", NOW),
    ("2027-01-15T09:00:00+01:00", NOW),
    ("2027-01-15t08:00:00.250z", NOW + 0.25),
    (None, None),
])
def test_load_config_reads_the_expiry(tmp_path: Path, value: str | None, moment: float | None) -> None:
    path = tmp_path / "autostop.json"
    path.write_text(json.dumps({"enabled": True, "idle_minutes": 30, "expires_at": value}))
    assert autostop.load_config(str(path)).expires_at == moment


@pytest.mark.parametrize("value", ["tomorrow", "2027-01-15", "2027-01-15T08:00:00", 1799827200, ""])
def test_a_bad_expiry_is_refused_naming_the_file_the_field_and_the_fix(tmp_path: Path, value: object) -> None:
    path = tmp_path / "autostop.json"
    path.write_text(json.dumps({"enabled": True, "expires_at": value}))
    with pytest.raises(ConfigError) as caught:
        autostop.load_config(str(path))
    text = str(caught.value)
    assert str(path) in text and "expires_at" in text and "Fix: `make autostop" in text


class FakeRun:
    def __init__(self, show: str = "") -> None:
        self.calls: list[list[str]] = []
        self.show = show

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        out = self.show if list(argv[:2]) == ["systemctl", "show"] else ""
        if list(argv[:2]) == ["systemctl", "is-active"]:
            out = "active\n"
        return subprocess.CompletedProcess(list(argv), 0, out, "")


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(autostop, "boot_time", lambda proc="/proc": BOOT)
    monkeypatch.setattr(autostop.time, "time", lambda: NOW)
    return tmp_path


def write(host: Path, **values: object) -> list[str]:
    (host / "autostop.json").write_text(json.dumps({"enabled": False, "idle_minutes": 30, **values}))
    os.utime(host / "autostop.json", (BOOT, BOOT))
    return ["--config", str(host / "autostop.json"), "--state-dir", str(host / "state")]


def test_check_runs_for_an_expiry_alone_and_stops_the_job_before_the_power_off(
        host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = write(host, expires_at="2027-01-15T07:30:00Z")  # between the boot (07:00) and NOW (08:00)
    run = FakeRun(f"Id={JOB}\nActiveState=active\n")
    assert autostop.main(["check", *args], run=run) == 0
    stop, off = run.calls.index(["systemctl", "stop", JOB]), run.calls.index(["systemctl", "poweroff"])
    assert stop < off
    out = capsys.readouterr().out
    assert "past its expiry 2027-01-15T07:30:00Z" in out and f"stopping {JOB} first" in out


def test_check_without_expiry_and_with_autostop_off_does_nothing(host: Path) -> None:
    run = FakeRun()
    assert autostop.main(["check", *write(host, expires_at=None)], run=run) == 0
    assert run.calls == []


def test_status_says_the_expiry_and_the_guard(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert autostop.main(["status", *write(host, expires_at="2027-01-15T09:00:00+01:00")], run=FakeRun()) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["expires_at"], out["expired"], out["guard"]) == ("2027-01-15T08:00:00Z", True, "role")
