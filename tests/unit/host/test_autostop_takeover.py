"""The autostop role's checker (tfcluster/host/autostop.py) takes over from the boot guard of the user data
(infra/modules/gpu_cluster: templates/cloud-config.yaml.tpl, files/boot_guard.py) with no gap: the files the guard's
cloud-config writes are rendered from the module's template as Terraform would (lab/twin.py render_boot_guard), and
the role's checker, fed the guard's settings and the state the guard saved, decides what the guard decides, tick
after tick. The names they share (settings, state, timer, wrapper, the guard's own checker) are the role's."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import importlib.util
import os
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from lab.twin_boot import boot_guard_settings, render_boot_guard
from tfcluster.core import paths
from tfcluster.core.contract import unit_name
from tfcluster.host import autostop

ROLE_VARS = paths.ROLES / "autostop/vars/main.yml"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
BOOT = NOW - 3600
JOB = unit_name("mnist")


def render(settings: str, enable: bool = True) -> dict[str, Any]:
    """The module's cloud-config, rendered as Terraform's templatefile() would (lab/twin.py), parsed."""
    return yaml.safe_load(render_boot_guard(settings, enable))


def written(doc: dict[str, Any]) -> dict[str, bytes]:
    """{path: content} of the cloud-config's write_files (gz+b64 decoded)."""
    out = {}
    for item in doc["write_files"]:
        data = item["content"]
        out[item["path"]] = gzip.decompress(base64.b64decode(data)) if item.get("encoding") == "gz+b64" else \
            data.encode()
    return out


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, ModuleType]:
    """A host after cloud-init: the guard's settings and checker written under tmp_path, the guard importable."""
    files = written(render(boot_guard_settings(expires_at="2027-01-15T07:30:00Z")))
    for path, data in files.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    os.utime(tmp_path / "etc/tfcluster/autostop.json", (BOOT, BOOT))  # written at the first boot
    spec = importlib.util.spec_from_file_location("boot_guard", tmp_path / "opt/tfcluster/autostop/boot_guard.py")
    assert spec is not None and spec.loader is not None
    guard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard)
    return tmp_path, guard


def test_the_guard_and_the_role_share_every_name() -> None:
    files = written(render(boot_guard_settings()))
    role = yaml.safe_load(ROLE_VARS.read_text())
    unit = role["_autostop_unit"]
    assert set(files) == {role["_autostop_config_file"], role["_autostop_boot_guard"], role["_autostop_wrapper"],
                          f"/etc/systemd/system/{unit}.service", f"/etc/systemd/system/{unit}.timer"}
    assert role["_autostop_config_file"] == autostop.CONFIG
    assert f"{unit}.timer" == autostop.TIMER
    service = files[f"/etc/systemd/system/{unit}.service"].decode()
    assert "StateDirectory=tfcluster/autostop" in service and autostop.STATE_DIR == "/var/lib/tfcluster/autostop"
    assert render(boot_guard_settings())["runcmd"][-1] == ["systemctl", "enable", "--now", f"{unit}.timer"]
    assert render(boot_guard_settings(), enable=False)["runcmd"] == [["systemctl", "daemon-reload"]]


def guard_facts(now: float, units: list[str], ended: float | None = None, boot: float = BOOT) -> dict[str, Any]:
    return {"now": now, "boot": boot, "units": units, "ended": ended, "ssh": 0}


def role_facts(now: float, units: list[str], ended: float | None = None, boot: float = BOOT) -> autostop.Facts:
    return autostop.Facts(now=now, boot_time=boot, units=tuple(units), unit_ended=ended)


# (now, busy units, the latest end of a job unit): tick after tick, the guard's state carried from one to the next.
TICKS = [
    (BOOT + 60, [], None),                 # the first check after the boot: idle since the boot
    (BOOT + 600, [JOB], None),             # a job runs (someone started it by hand)
    (BOOT + 660, [], BOOT + 650),          # it ended at its InactiveEnterTimestamp
    (BOOT + 660 + 1799, [], None),         # idle just under 30 min
    (BOOT + 660 + 1800, [], None),         # 30 min: both power off
]


@pytest.mark.parametrize("tick", range(len(TICKS)))
def test_the_role_decides_what_the_guard_decides_from_the_guards_state(host: tuple[Path, ModuleType],
                                                                       tick: int) -> None:
    root, guard = host
    config_path, state_dir = str(root / "etc/tfcluster/autostop.json"), str(root / "var/lib/tfcluster/autostop")
    config = guard.load_config(config_path)
    config = {**config, "expires_at": None}  # the idle rule alone here (the expiry has its own test below)
    for now, units, ended in TICKS[:tick]:
        guard.save_state(guard.decide(config, guard.load_state(state_dir), guard_facts(now, units, ended))["state"],
                         state_dir)
    now, units, ended = TICKS[tick]
    theirs = guard.decide(config, guard.load_state(state_dir), guard_facts(now, units, ended))
    ours = autostop.decide(dataclasses.replace(autostop.load_config(config_path), expires_at=None),
                           autostop.load_state(state_dir), role_facts(now, units, ended))
    assert (ours.power_off, ours.last_active, ours.reason, ours.idle_seconds) == (
        theirs["power_off"], theirs["last_active"], theirs["reason"], theirs["idle"])
    assert ours.state == theirs["state"], "the role's checker writes the state the guard wrote"


@pytest.mark.parametrize(("boot", "now", "off"), [
    (BOOT, NOW, True),                   # booted 07:00, expiry 07:30, now 08:00: both power off
    (BOOT, BOOT + 1200, False),          # 07:20: not yet
    (NOW - 60, NOW, False),              # started again after the expiry (07:59): not for the expiry
])
def test_the_role_enforces_the_guards_expiry(host: tuple[Path, ModuleType], boot: float, now: float,
                                             off: bool) -> None:
    root, guard = host
    config_path = str(root / "etc/tfcluster/autostop.json")
    theirs = guard.decide(guard.load_config(config_path), {}, guard_facts(now, [JOB], boot=boot))
    ours = autostop.decide(autostop.load_config(config_path), {}, role_facts(now, [JOB], boot=boot))
    assert (ours.power_off, ours.expired) == (theirs["power_off"], theirs["expired"]) == (off, off)
    assert ours.stop_units == ((JOB,) if off else ())  # the role's checker stops the job first (a backup)


def test_the_role_shows_every_field_the_guards_status_shows(host: tuple[Path, ModuleType],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    root, guard = host
    config_path, state_dir = str(root / "etc/tfcluster/autostop.json"), str(root / "state")
    monkeypatch.setattr(guard.subprocess, "run", lambda argv, **_: subprocess.CompletedProcess(argv, 0, "active\n",
                                                                                               ""))
    theirs = guard.status(guard.load_config(config_path), state_dir, "/proc")
    config = autostop.load_config(config_path)
    facts = role_facts(NOW, [])
    ours = autostop.status(config, autostop.decide(config, {}, facts), facts, "active")
    assert set(theirs) <= set(ours)
    assert (theirs["guard"], ours["guard"]) == ("boot", "role")
    assert theirs["expires_at"] == ours["expires_at"] == "2027-01-15T07:30:00Z"
