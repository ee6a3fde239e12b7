"""files/state_probe.py of the python_runtime and trainer roles: the read-only probe that lets a no-op run skip
every module. Each drift it must report, and the run through `python -c` the roles use."""

from __future__ import annotations

import grp
import hashlib
import importlib.util
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROLES = Path(__file__).resolve().parents[3] / "playbooks" / "roles"
PROBES = [ROLES / "python_runtime/files/state_probe.py", ROLES / "trainer/files/state_probe.py"]


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("state_probe", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


probe = load(PROBES[0])
ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


def test_both_roles_ship_the_same_probe() -> None:
    """One source: the trainer role's copy is a link to the runtime role's (each role stays self-contained)."""
    assert PROBES[1].is_symlink() and PROBES[1].resolve() == PROBES[0].resolve()


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    (tmp_path / "d").mkdir(mode=0o755)
    (tmp_path / "d").chmod(0o755)
    (tmp_path / "f").write_text("hello\n")
    (tmp_path / "f").chmod(0o644)
    (tmp_path / "link").symlink_to("d")
    return tmp_path


def test_path_in_place_reports_nothing(tree: Path) -> None:
    sha = hashlib.sha256(b"hello\n").hexdigest()
    assert probe.path_drift(str(tree / "d"), {"type": "dir", "mode": "0755", "owner": ME, "group": MY_GROUP}) is None
    assert probe.path_drift(str(tree / "f"), {"type": "file", "mode": "0644", "sha256": sha}) is None
    assert probe.path_drift(str(tree / "f"), {"type": "file", "text": "hello"}) is None
    assert probe.path_drift(str(tree / "link"), {"type": "link", "target": "d"}) is None
    assert probe.path_drift(str(tree / "link"), {"type": "dir", "mode": "0755"}) is None  # followed, like the modules
    assert probe.path_drift(str(tree / "f"), {"type": "exists"}) is None


@pytest.mark.parametrize(("name", "want", "why"), [
    ("missing", {"type": "dir"}, "missing"),
    ("f", {"type": "dir"}, "not a directory"),
    ("d", {"type": "file"}, "not a regular file"),
    ("d", {"type": "dir", "mode": "0700"}, "mode 0755, wanted 0700"),
    ("f", {"type": "file", "sha256": "0" * 64}, "content differs"),
    ("f", {"type": "file", "text": "other"}, "content differs"),
    ("d", {"type": "link", "target": "d"}, "not a symlink"),
    ("link", {"type": "link", "target": "elsewhere"}, "points at d"),
    ("d", {"type": "dir", "owner": "no-such-owner-tfc"}, f"owner {ME}, wanted no-such-owner-tfc"),
    ("d", {"type": "dir", "group": "no-such-group-tfc"}, f"group {MY_GROUP}, wanted no-such-group-tfc"),
])
def test_path_drift_names_the_difference(tree: Path, name: str, want: dict[str, str], why: str) -> None:
    assert probe.path_drift(str(tree / name), want) == why


def test_dangling_symlink_is_drift(tmp_path: Path) -> None:
    (tmp_path / "python").symlink_to(tmp_path / "gone")
    assert probe.path_drift(str(tmp_path / "python"), {"type": "exists"}) == "dangling symlink"


def test_installed_packages_reads_only_installed_stanzas() -> None:
    status = ("Package: python3-venv\nStatus: install ok installed\nVersion: 3.11\n\n"
              "Package: removed-one\nStatus: deinstall ok config-files\n\n"
              "Package: half\nStatus: install ok half-configured\nDescription: x\n multi: line\n")
    assert probe.installed_packages(status) == {"python3-venv"}


def test_section_reports_packages_groups_users_and_paths(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Package: python3-venv\nStatus: install ok installed\n")
    section = {"packages": ["python3-venv", "nvidia-smi"], "groups": [MY_GROUP, "no-such-group-tfc"],
               "users": {ME: {"home": "/nowhere-tfc"}, "no-such-user-tfc": {}},
               "paths": {str(tmp_path / "absent"): {"type": "dir"}}}
    result = probe.probe_section(section, dpkg_status=str(status))
    assert result == {"missing": None, "drift": {
        "package nvidia-smi": "not installed", "group no-such-group-tfc": "missing",
        f"user {ME}": f"home {pwd.getpwnam(ME).pw_dir}, wanted /nowhere-tfc", "user no-such-user-tfc": "missing",
        str(tmp_path / "absent"): "missing"}}


def test_user_in_place_reports_nothing() -> None:
    entry = pwd.getpwnam(ME)
    assert probe.user_drift(ME, {"group": grp.getgrgid(entry.pw_gid).gr_name, "home": entry.pw_dir,
                                 "shell": entry.pw_shell}) is None
    assert probe.user_drift(ME, {"shell": "/bin/false-tfc"}) == f"shell {entry.pw_shell}, wanted /bin/false-tfc"


def test_imports_are_located_only_inside_the_venv() -> None:
    inside = probe.probe_section({"venv": sys.prefix, "imports": ["json", "no_such_module_tfc"]})
    assert inside == {"drift": {}, "missing": ["no_such_module_tfc"]}
    outside = probe.probe_section({"venv": "/no/such/venv", "imports": ["json"]})
    assert outside == {"drift": {"/no/such/venv": "its interpreter does not run"}, "missing": None}


def test_runs_as_python_dash_c_like_the_roles(tree: Path) -> None:
    spec = {"a": {"paths": {str(tree / "d"): {"type": "dir", "mode": "0755"}}},
            "b": {"paths": {str(tree / "nope"): {"type": "file"}}}}
    proc = subprocess.run([sys.executable, "-c", PROBES[1].read_text(), json.dumps(spec)], capture_output=True,
                          text=True, check=True)
    assert json.loads(proc.stdout.splitlines()[-1]) == {
        "a": {"drift": {}, "missing": None}, "b": {"drift": {str(tree / "nope"): "missing"}, "missing": None}}


def test_usage_error_without_a_spec() -> None:
    proc = subprocess.run([sys.executable, str(PROBES[0])], check=False, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "usage: state_probe.py SPEC_JSON" in proc.stderr


def test_packages_are_not_checked_without_dpkg(tmp_path: Path) -> None:
    section = {"packages": ["python3-venv"]}
    assert probe.probe_section(section, dpkg_status=str(tmp_path / "no-dpkg-status")) == {"drift": {}, "missing": None}
