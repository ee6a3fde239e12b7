"""The tfcluster.cluster.state_probe module (module_utils/probe.py): the read-only comparison the prepare roles run
once per host when the prepare digest differs. Each drift it must report, and a run through Ansible."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PROBE = REPO / "playbooks/collections/ansible_collections/tfcluster/cluster/plugins/module_utils/probe.py"


from ansible_collections.tfcluster.cluster.plugins.module_utils import probe  # noqa: E402

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


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


def test_imports_are_located_with_the_venvs_interpreter() -> None:
    inside = probe.probe_section({"venv": sys.prefix, "imports": ["json", "no_such_module_tfc"]})
    assert inside == {"drift": {}, "missing": ["no_such_module_tfc"]}
    outside = probe.probe_section({"venv": "/no/such/venv", "imports": ["json"]})
    assert outside == {"drift": {"/no/such/venv": "its interpreter does not run"}, "missing": None}


def test_the_module_runs_read_only_through_ansible(tree: Path) -> None:
    spec = {"a": {"paths": {str(tree / "d"): {"type": "dir", "mode": "0755"}}},
            "b": {"paths": {str(tree / "nope"): {"type": "file"}}}}
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "--check", "-e",
                           f"ansible_python_interpreter={sys.executable}", "-m", "tfcluster.cluster.state_probe",
                           "-a", json.dumps({"spec": spec})], cwd=REPO, env=env, capture_output=True, text=True,
                          check=False, timeout=120)
    result = json.loads(proc.stdout.partition(" => ")[2])
    assert result["changed"] is False
    assert result["state"] == {"a": {"drift": {}, "missing": None},
                               "b": {"drift": {str(tree / "nope"): "missing"}, "missing": None}}


def test_packages_are_not_checked_without_dpkg(tmp_path: Path) -> None:
    section = {"packages": ["python3-venv"]}
    assert probe.probe_section(section, dpkg_status=str(tmp_path / "no-dpkg-status")) == {"drift": {}, "missing": None}
