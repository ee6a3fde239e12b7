"""The boot guard in every host's user data (infra/modules/gpu_cluster/files/boot_guard.py, userdata.tf,
templates/cloud-config.yaml.tpl): it runs for real here against a fake systemctl and a fake /proc, powers off when
idle or expired and not otherwise, and writes the settings and state files the autostop role's checker
(tfcluster/host/autostop.py) takes over, in that checker's own format and under its names."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.host.proc_helpers import fake_proc
from tfcluster.core import contract
from tfcluster.host import autostop

MODULE = Path(__file__).resolve().parents[3] / "infra" / "modules" / "gpu_cluster"
GUARD = MODULE / "files" / "boot_guard.py"
TEMPLATE = MODULE / "templates" / "cloud-config.yaml.tpl"
USERDATA_TF = MODULE / "userdata.tf"

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$@" >> "$FAKE_LOG"
case "$*" in
  *poweroff*) exit 0 ;;
  *is-active*) echo active ;;
  *show*) cat "$FAKE_UNITS" ;;
esac
"""


def _settings_keys() -> set[str]:
    block = re.search(r"autostop_settings = \{(.*?)\n  \}", USERDATA_TF.read_text(), re.S)
    assert block, "locals.autostop_settings is missing from userdata.tf"
    return set(re.findall(r"^\s*(\w+)\s*=", block.group(1), re.M))


def _guard() -> ModuleType:
    """The guard's file loaded as a module (it is not a package's: user data installs it alone)."""
    spec = spec_from_file_location("boot_guard", GUARD)
    assert spec and spec.loader
    guard = module_from_spec(spec)
    spec.loader.exec_module(guard)
    return guard


def test_the_guard_uses_the_checkers_names() -> None:
    guard = _guard()
    assert guard.JOB_PREFIX == contract.UNIT_PREFIX
    assert (guard.CONFIG, guard.STATE_DIR, guard.TIMER) == (autostop.CONFIG, autostop.STATE_DIR, autostop.TIMER)
    text = TEMPLATE.read_text()
    assert f"- path: {autostop.CONFIG}\n" in text
    assert f"- path: /etc/systemd/system/{autostop.TIMER}\n" in text
    assert f"StateDirectory={autostop.STATE_DIR.removeprefix('/var/lib/')}\n" in text
    assert "- path: /usr/local/bin/tfcluster-autostop\n" in text  # the role's wrapper (vars/main.yml)


def test_the_guard_reads_the_units_as_the_checker_does() -> None:
    """The guard carries its own copy of the checker's reading of `systemctl show` (user data imports nothing)."""
    guard = _guard()
    prefix = contract.UNIT_PREFIX
    samples = [
        "",
        f"Id={prefix}a.service\nActiveState=active\nInactiveEnterTimestamp=\n\n"
        f"Id={prefix}b.service\nActiveState=inactive\nInactiveEnterTimestamp=@1700000100\n\n"
        f"Id={prefix}c.service\nActiveState=failed\nInactiveEnterTimestamp=@1700000050\n\n"
        "Id=ssh.service\nActiveState=active\nInactiveEnterTimestamp=@1800000000\n\n"
        f"Id={prefix}d.timer\nActiveState=activating\n\n"
        f"Id={prefix}e.service\nActiveState=inactive\nInactiveEnterTimestamp=@junk\n",
        f"Id={prefix}f.service\nActiveState=activating\nInactiveEnterTimestamp=Mon 2026-11-30 10:00:00 UTC\n",
    ]
    for text in samples:
        busy, ended = guard.parse_units(text)
        assert (tuple(busy), ended) == autostop.parse_units(text), text
    assert autostop.parse_units(samples[1]) == ((f"{prefix}a.service",), 1700000100.0)


def test_the_guard_counts_ssh_sessions_as_the_checker_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    guard = _guard()
    proc = fake_proc(tmp_path, {
        100: (1, "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups"),
        200: (100, "sshd: root [priv]"),
        201: (200, "sshd: root@notty"),  # Ansible's connection: no terminal
        202: (201, "bash"),
        203: (202, "python3 status"),  # the caller, in its own session
        301: (100, "sshd: ubuntu@pts/0"),
        400: (100, "sshd: unknown [net]"),
        500: (1, "sshd-session: alice@pts/1"),
        600: (1, "bash -c sshd: fake@x"),
    })
    counts = {}
    for me in (1, 203, 600):
        monkeypatch.setattr(os, "getpid", lambda me=me: me)
        counts[me] = guard.ssh_sessions(str(proc))
        assert counts[me] == autostop.ssh_sessions(str(proc)), me
    assert counts == {1: 3, 203: 2, 600: 3}  # 203 runs in 201's session: not someone else's


def test_the_settings_are_the_checkers_keys_plus_the_expiry() -> None:
    fields = {f for f in autostop.Config.__dataclass_fields__} - {"installed", "changed_at"}
    assert _settings_keys() == fields | {"expires_at"}
    assert "jobs" in contract.AUTOSTOP_MODES


def _host(tmp_path: Path, *, boot_ago: float, settings: dict[str, object], units: str = "",
          settings_age: float = 7200) -> dict[str, Path]:
    """A fake host: /proc (boot time), systemctl on PATH, the settings file (aged), a state dir."""
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    ticks = os.sysconf("SC_CLK_TCK")
    btime = int(time.time() - boot_ago) - 10
    (proc / "stat").write_text(f"cpu 1 2 3\nbtime {btime}\n")
    (proc / "1" / "stat").write_text("1 (systemd) " + " ".join(["S", *["0"] * 18, str(10 * ticks)]) + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    (tmp_path / "units").write_text(units)
    config = tmp_path / "autostop.json"
    config.write_text(json.dumps(settings))
    past = time.time() - settings_age
    os.utime(config, (past, past))
    return {"proc": proc, "bin": bin_dir, "config": config, "state": tmp_path / "state", "log": tmp_path / "log",
            "units": tmp_path / "units"}


def _run(host: dict[str, Path], command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{host['bin']}:{os.environ['PATH']}", "FAKE_LOG": str(host["log"]),
           "FAKE_UNITS": str(host["units"])}
    return subprocess.run([sys.executable, str(GUARD), command, "--config", str(host["config"]), "--state-dir",
                           str(host["state"]), "--proc", str(host["proc"])], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def _settings(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {"enabled": True, "idle_minutes": 30, "mode": "jobs", "gpu_idle_percent": 0,
                               "gpu_idle_window_minutes": 30, "terminate": False, "uncollected_grace_minutes": 1440,
                               "expires_at": None}
    return {**base, **changes}


def _powered_off(host: dict[str, Path]) -> bool:
    return host["log"].is_file() and "poweroff" in host["log"].read_text().split()


def _future(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))


def test_idle_since_boot_powers_off(tmp_path: Path) -> None:
    host = _host(tmp_path, boot_ago=3 * 3600, settings=_settings())
    result = _run(host, "check")
    assert result.returncode == 0, result.stderr
    assert _powered_off(host) and "idle for" in result.stdout
    state = json.loads((host["state"] / "state.json").read_text())
    assert state["reason"] == "settings changed" and "powered_off_at" in state


def test_a_fresh_boot_stays_up(tmp_path: Path) -> None:
    host = _host(tmp_path, boot_ago=120, settings=_settings(), settings_age=120)
    assert _run(host, "check").returncode == 0
    assert not _powered_off(host)
    assert json.loads((host["state"] / "state.json").read_text())["reason"] in ("boot", "settings changed")


def test_a_running_job_unit_keeps_the_host_up(tmp_path: Path) -> None:
    units = ("Id=tfcluster-mnist.service\nActiveState=active\nInactiveEnterTimestamp=\n\n"
             "Id=tfcluster.firewall.service\nActiveState=active\nInactiveEnterTimestamp=\n")
    host = _host(tmp_path, boot_ago=3 * 3600, settings=_settings(), units=units)
    assert _run(host, "check").returncode == 0
    assert not _powered_off(host)
    state = json.loads((host["state"] / "state.json").read_text())
    assert state["busy_units"] == ["tfcluster-mnist.service"]  # tfcluster.<what> units are not jobs


def test_an_ssh_login_keeps_a_never_prepared_host_up_and_its_end_counts(tmp_path: Path) -> None:
    """The prepare is one long SSH login: a host idle since boot is not powered off under it (mode jobs too)."""
    host = _host(tmp_path, boot_ago=3 * 3600, settings=_settings(mode="jobs", idle_minutes=2))
    session = host["proc"] / "4242"
    session.mkdir()
    (session / "stat").write_text("4242 (sshd) S 1 " + " ".join(["0"] * 20) + "\n")
    (session / "cmdline").write_bytes(b"sshd: ubuntu@notty\0")
    assert _run(host, "check").returncode == 0
    assert not _powered_off(host)
    state = json.loads((host["state"] / "state.json").read_text())
    assert (state["reason"], state["ssh_sessions"]) == ("1 SSH session(s)", 1)
    assert json.loads(_run(host, "status").stdout)["ssh_sessions"] == 1
    (session / "cmdline").unlink()  # the prepare's connection closes: idle from now
    assert _run(host, "check").returncode == 0
    assert not _powered_off(host)
    assert json.loads((host["state"] / "state.json").read_text())["ssh_sessions"] == 0
    after = json.loads(_run(host, "status").stdout)
    assert after["ssh_sessions"] == 0 and after["power_off_in_seconds"] > 60, after


def test_past_the_expiry_powers_off_even_with_idle_off(tmp_path: Path) -> None:
    host = _host(tmp_path, boot_ago=3 * 3600, settings=_settings(enabled=False, expires_at=_future(-60)),
                 settings_age=60)
    result = _run(host, "check")
    assert result.returncode == 0, result.stderr
    assert _powered_off(host) and "past its expiry" in result.stdout


def test_a_boot_after_the_expiry_is_held_to_the_idle_time_only(tmp_path: Path) -> None:
    host = _host(tmp_path, boot_ago=120, settings=_settings(expires_at=_future(-3 * 3600)), settings_age=120)
    assert _run(host, "check").returncode == 0
    assert not _powered_off(host)


def test_before_the_expiry_nothing_happens(tmp_path: Path) -> None:
    host = _host(tmp_path, boot_ago=3 * 3600, settings=_settings(enabled=False, expires_at=_future(3600)))
    assert _run(host, "check").returncode == 0
    assert not _powered_off(host)


def test_nothing_to_guard_checks_nothing(tmp_path: Path) -> None:
    host = _host(tmp_path, boot_ago=3 * 3600, settings=_settings(enabled=False))
    assert _run(host, "check").returncode == 0
    assert not host["log"].exists() and not host["state"].exists()


def test_a_bad_setting_names_the_file_and_the_fix(tmp_path: Path) -> None:
    host = _host(tmp_path, boot_ago=60, settings=_settings(idle_minutes=0))
    result = _run(host, "check")
    assert result.returncode == 1 and str(host["config"]) in result.stderr and "Fix:" in result.stderr
    assert not _powered_off(host)


def test_status_has_the_checkers_keys(tmp_path: Path) -> None:
    host = _host(tmp_path, boot_ago=600, settings=_settings(expires_at=_future(3600)))
    result = _run(host, "status")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    config = autostop.Config(installed=True, enabled=True)
    facts = autostop.Facts(now=time.time(), boot_time=None)
    expected = autostop.status(config, autostop.decide(config, {}, facts), facts, "active")
    assert set(expected) <= set(shown)
    assert shown["guard"] == "boot" and shown["expired"] is False and shown["enabled"] is True
    assert 0 < shown["power_off_in_seconds"] <= 30 * 60
    assert not _powered_off(host)


def test_the_checker_continues_from_the_guards_state(tmp_path: Path) -> None:
    """Take-over without a gap: the role's checker reads the guard's settings and state as its own."""
    host = _host(tmp_path, boot_ago=600, settings=_settings(idle_minutes=45), settings_age=600)
    assert _run(host, "check").returncode == 0
    config = autostop.load_config(str(host["config"]))
    assert (config.installed, config.enabled, config.idle_minutes, config.mode) == (True, True, 45, "jobs")
    state = autostop.load_state(str(host["state"]))
    guard_last = state["last_active"]
    decision = autostop.decide(config, state, autostop.Facts(now=time.time(), boot_time=None))
    assert decision.last_active == pytest.approx(guard_last, abs=1) and not decision.power_off
    assert 0 < (decision.power_off_in or 0) <= 45 * 60
