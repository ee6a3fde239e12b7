"""The pip command lines the roles render: the runtime (python_runtime) and a SCRIPT's requirements (trainer) are
installed hash-checked and wheels only (--require-hashes --only-binary :all:); a SCRIPT's requirements go into the
job's own content-addressed directory as the job's user, never into the runtime venv and never as root.

The roles' defaults, vars and task argv are rendered by Ansible's own templating (a child process: the collection
loader it needs for lookups must not leak into the other tests of this process).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "playbooks" / "collections" / "ansible_collections" / "tfcluster" / "cluster" / "roles"
DIGEST = "d" * 64
RENDER = """
import json, sys
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
init_plugin_loader([sys.argv[1] + "/playbooks/collections"])
request = json.loads(sys.stdin.read())
loader, variables = DataLoader(), {}
for path in request["files"]:
    variables.update(loader.load_from_file(path, trusted_as_template=True) or {})
variables.update(request["vars"])
templar = Templar(loader=loader, variables=variables)
print(json.dumps([templar.template(trust_as_template(e)) for e in request["expressions"]]))
"""


def render(role: str, expressions: list[str], variables: dict[str, Any]) -> list[Any]:
    files = [str(ROLES / role / part / "main.yml") for part in ("defaults", "vars")]
    request = {"files": files, "vars": {"role_path": str(ROLES / role), **variables}, "expressions": expressions}
    proc = subprocess.run([sys.executable, "-c", RENDER, str(REPO)], input=json.dumps(request), capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return list(json.loads(proc.stdout.splitlines()[-1]))


def task(role: str, tasks_file: str, name: str) -> dict[str, Any]:
    tasks = yaml.safe_load((ROLES / role / "tasks" / tasks_file).read_text())
    return next(t for t in tasks if t["name"] == name)


def assert_hashed_wheels_only(argv: list[str]) -> None:
    assert "--require-hashes" in argv and "--no-deps" in argv
    assert argv[argv.index("--only-binary") + 1] == ":all:", argv


@pytest.mark.parametrize("wheelhouse", ["", "/srv/wheelhouse"])
def test_the_runtime_installs_its_lock_hash_checked_and_wheels_only(wheelhouse: str) -> None:
    argv_expr = task("python_runtime", "install.yml", "Install the hash-pinned requirements")["ansible.builtin.command"]
    (argv,) = render("python_runtime", [argv_expr["argv"]], {"python_runtime_wheelhouse": wheelhouse,
                                                             "tfcluster_gpus": 0})
    assert_hashed_wheels_only(argv)
    assert argv[argv.index("-r") + 1] == "/opt/tfcluster/requirements.lock"
    assert ("--no-index" in argv) == bool(wheelhouse)


@pytest.fixture
def script_lock(tmp_path: Path) -> Path:
    path = tmp_path / "requirements.txt.lock"
    path.write_text(f"tabulate==0.10.0 \\\n    --hash=sha256:{'a' * 64}\n")
    return path


@pytest.mark.parametrize(("local", "prefix"), [(False, ""), (True, "/repo/.cache/local/tfcluster-local/worker-0")])
def test_a_scripts_requirements_go_into_the_jobs_own_directory_hash_checked(
        script_lock: Path, local: bool, prefix: str) -> None:
    """The bug: `pip install -r FILE` (no hashes, sdists allowed) into the shared runtime venv, as root."""
    variables = {"tfcluster_script_requirements": str(script_lock), "tfcluster_prefix": prefix,
                 "tfcluster_local": local, "trainer_digest": DIGEST, "playbook_dir": str(REPO / "playbooks")}
    argv, site, spec, as_job_user = render("trainer", [
        "{{ _trainer_script_pip_argv }}", "{{ trainer_script_site }}", "{{ _trainer_probe_spec.script }}",
        "{{ _trainer_as_job_user }}"], variables)
    digest = hashlib.sha256(script_lock.read_bytes()).hexdigest()
    assert site == f"{prefix}/var/lib/tfcluster/pkgs/{digest}"  # content-addressed, under the slot's prefix
    assert_hashed_wheels_only(argv)
    target = argv[argv.index("--target") + 1]
    assert target == f"{prefix}/var/lib/tfcluster/pkgs/.{digest}.partial"  # renamed to `site` once complete
    assert argv[argv.index("-r") + 1] == f"{prefix}/opt/tfcluster/trainer/releases/{DIGEST}/user/{script_lock.name}"
    assert argv[0] == "/opt/tfcluster/venv/bin/python"  # the runtime's pip, but not into the runtime
    owner = {} if local else {"owner": "tfcluster", "group": "tfcluster"}
    assert spec == {"paths": {f"{prefix}/var/lib/tfcluster/pkgs": {"type": "dir", "mode": "0755", **owner},
                              site: {"type": "dir", **owner}}}
    assert as_job_user is (not local)


def test_pip_and_the_rename_run_as_the_jobs_user_and_nothing_else_installs_into_the_runtime() -> None:
    for name in ("Install the script's hash-pinned requirements (as the job's user)",
                 "Make the complete install the script's package directory"):
        step = task("trainer", "requirements.yml", name)
        assert step["become_user"] == "{{ trainer_user }}" and step["become"] == "{{ _trainer_as_job_user | bool }}"
    texts = "".join(p.read_text() for p in (ROLES / "trainer" / "tasks").glob("*.yml"))
    assert texts.count("_trainer_script_pip_argv") == 1 and "'pip', 'install'" not in texts


@pytest.mark.parametrize("text", ["# (no entries: the runtime provides every package asked for)\n", None])
def test_nothing_to_install_means_no_package_directory(tmp_path: Path, text: str | None) -> None:
    path = tmp_path / "requirements.txt.lock"
    if text is not None:
        path.write_text(text)
    site, spec = render("trainer", ["{{ trainer_script_site }}", "{{ _trainer_probe_spec.script }}"], {
        "tfcluster_script_requirements": str(path) if text is not None else "", "tfcluster_prefix": "",
        "trainer_digest": DIGEST, "playbook_dir": str(REPO / "playbooks")})
    assert site == "" and spec == {"paths": {}}


TF_JOB_VARS = ROLES / "tf_job" / "vars" / "main.yml"


@pytest.mark.skipif("_tf_job_script_site" not in TF_JOB_VARS.read_text(),
                    reason="the tf_job role does not put the script's package directory on PYTHONPATH yet")
@pytest.mark.parametrize("prefix", ["", "/repo/.cache/local/tfcluster-local/worker-1"])
def test_the_job_finds_the_scripts_packages_after_the_release(script_lock: Path, prefix: str) -> None:
    """tf_job computes the directory itself (a prepared host skips the trainer role): the same path as trainer's."""
    variables = {"tfcluster_script_requirements": str(script_lock), "tfcluster_prefix": prefix,
                 "tfcluster_script": "/src/train.py", "trainer_digest": DIGEST, "playbook_dir": str(REPO / "playbooks")}
    (site,) = render("trainer", ["{{ trainer_script_site }}"], variables)
    (pythonpath,) = render("tf_job", ["{{ _tf_job_pythonpath }}"], variables)
    release = f"{prefix}/opt/tfcluster/trainer/current"
    assert site and pythonpath.split(":") == [release, f"{release}/user", site]
