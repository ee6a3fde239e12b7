"""The autostop role over a host its boot guard set up (issue 22): the probe (roles/autostop/files/probe.py) returns
the host's settings, checked, and flags the guard's checker; the role (its vars, evaluated by Ansible on localhost
with a given probe answer) keeps the guard's settings where it does not overwrite, always writes the cluster's
current expiry, wants the timer on for an expiry alone, and finds nothing to change on its second run."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tfcluster.core import paths

REPO = Path(__file__).resolve().parents[3]
PROBE = paths.ROLES / "autostop/files/probe.py"
GUARD_SETTINGS = ('{"enabled":true,"expires_at":"2027-01-15T07:30:00Z","gpu_idle_percent":0,'
                  '"gpu_idle_window_minutes":30,"idle_minutes":10,"mode":"jobs","terminate":false,'
                  '"uncollected_grace_minutes":1440}\n')  # jsonencode() of the module's settings (IDLE=10 at provision)
PLAY = """- hosts: localhost
  gather_facts: false
  tasks:
    - name: Load the role's defaults and vars (no task of it runs on this machine)
      ansible.builtin.include_role:
        name: tfcluster.cluster.autostop
        tasks_from: status.yml
        public: true
      vars:
        autostop_skip: true
    - name: What the role would write and change
      ansible.builtin.copy:
        dest: "{{ out }}"
        mode: "0644"
        content: >-
          {{ {'settings': _autostop_settings, 'text': _autostop_config_text, 'drift': _autostop_drift,
              'timer_on': _autostop_timer_on | bool, 'boot_guard': _autostop_boot_guard} | to_json }}
"""


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", PROBE.read_text(), json.dumps(spec)], capture_output=True,
                          text=True, check=True, timeout=60)
    return json.loads(proc.stdout.splitlines()[-1])


def spec(tmp_path: Path) -> dict[str, Any]:
    return {"files": [], "absent": [str(tmp_path / "boot_guard.py")], "config": str(tmp_path / "autostop.json"),
            "timer": "tfcluster.autostop.timer"}


def test_the_probe_returns_the_guards_settings_and_flags_its_checker(tmp_path: Path) -> None:
    (tmp_path / "autostop.json").write_text(GUARD_SETTINGS)
    (tmp_path / "autostop.json").chmod(0o644)
    (tmp_path / "boot_guard.py").write_text("# the guard\n")
    found = probe(spec(tmp_path))
    assert found["settings"] == json.loads(GUARD_SETTINGS)
    assert found["settings_sha256"] == hashlib.sha256(GUARD_SETTINGS.encode()).hexdigest()
    assert found["drift"] == [f"{tmp_path / 'boot_guard.py'}: present"]


@pytest.mark.parametrize("text", [
    '{"enabled": "yes"}',  # a value of another type
    '{"enabled": true, "idle_minutes": "{{ lookup(\'pipe\', \'id\') }}"}',  # Jinja: never handed to the role
    '{"enabled": true, "expires_at": "tomorrow"}',
    '{"enabled": true, "other": 1}',  # a key the checker does not read
    '[1, 2]', "{",
])
def test_the_probe_hands_back_only_checked_settings(tmp_path: Path, text: str) -> None:
    (tmp_path / "autostop.json").write_text(text)
    assert probe(spec(tmp_path))["settings"] is None  # the role then writes its own values


def test_the_probe_never_follows_a_symlinked_settings_file(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text(GUARD_SETTINGS)
    (tmp_path / "autostop.json").symlink_to(tmp_path / "elsewhere.json")
    found = probe(spec(tmp_path))
    assert found["settings"] is None and found["settings_sha256"] is None


def role(tmp_path: Path, probed: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The role's _autostop_settings, _autostop_config_text, _autostop_drift, _autostop_timer_on for a probe answer."""
    (tmp_path / "play.yml").write_text(PLAY)
    out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}.json"
    answer = {"systemd": True, "drift": [], "timer": ["enabled", "active"], "settings": None,
              "settings_sha256": None, **probed}
    variables = {"out": str(out), "tfcluster_kind_traits": {"autostop": True},
                 "ansible_python_interpreter": sys.executable,
                 "_autostop_probe": {"stdout_lines": [json.dumps(answer)]}, **extra}
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "TFCLUSTER_"))}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "t"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_site_yml_keeps_the_guards_settings_with_the_current_expiry_and_then_changes_nothing(tmp_path: Path) -> None:
    guard = {"settings": json.loads(GUARD_SETTINGS), "settings_sha256": sha(GUARD_SETTINGS)}
    first = role(tmp_path, guard, tfcluster_expires_at="2027-01-15T07:30:00Z")
    assert first["settings"] == json.loads(GUARD_SETTINGS)  # IDLE=10 from the provision, not the role's 30
    assert first["drift"] == ["/etc/tfcluster/autostop.json: settings"]  # the role's format: written once
    assert first["timer_on"] is True and first["boot_guard"] == "/opt/tfcluster/autostop/boot_guard.py"
    again = role(tmp_path, {"settings": first["settings"], "settings_sha256": sha(first["text"])},
                 tfcluster_expires_at="2027-01-15T07:30:00Z")
    assert again["drift"] == [], "a second run must find nothing to change"
    renewed = role(tmp_path, {"settings": first["settings"], "settings_sha256": sha(first["text"])},
                   tfcluster_expires_at="2027-01-16T08:00:00Z")  # make provision TTL=24h, then make train
    assert renewed["settings"] == {**first["settings"], "expires_at": "2027-01-16T08:00:00Z"}
    assert renewed["drift"] == ["/etc/tfcluster/autostop.json: settings"]


def test_make_autostop_writes_its_values_and_keeps_the_expiry(tmp_path: Path) -> None:
    guard = {"settings": json.loads(GUARD_SETTINGS), "settings_sha256": sha(GUARD_SETTINGS)}
    out = role(tmp_path, guard, autostop_overwrite=True, autostop_enabled=True, autostop_idle_minutes=5,
               tfcluster_expires_at="2027-01-15T07:30:00Z")
    assert (out["settings"]["idle_minutes"], out["settings"]["expires_at"]) == (5, "2027-01-15T07:30:00Z")


@pytest.mark.parametrize(("enabled", "expires", "timer", "on", "drift"), [
    # IDLE=off but an expiry: the timer stays on (the expiry needs the check)
    (False, "2027-01-15T07:30:00Z", ["disabled", "inactive"], True, "disabled/inactive, wanted enabled/active"),
    # off and no expiry (TTL=off): the timer goes off
    (False, "", ["enabled", "active"], False, "enabled/active, wanted disabled/inactive"),
])
def test_the_timer_runs_for_idle_autostop_or_an_expiry(tmp_path: Path, enabled: bool, expires: str,  # noqa: PLR0917
                                                       timer: list[str], on: bool, drift: str) -> None:
    out = role(tmp_path, {"timer": timer}, autostop_enabled=enabled, tfcluster_expires_at=expires)
    assert out["timer_on"] is on
    assert f"tfcluster.autostop.timer: {drift}" in out["drift"]
    assert out["settings"]["expires_at"] == (expires or None)
