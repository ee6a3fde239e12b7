"""CLUSTER=slurm's shared directory, written by the operator alone: the record read back is checked against the
layout, the preflight's decision on the shared directory and its parents (fabricated stat lines, and the login
side's own lines on a real tree), and the login-side sh programs run here: umask 077, a planted or loosened tree
refused where it would be reused, the login tool run from its release with a private bytecode cache."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tfcluster import kinds
from tfcluster.core import files
from tfcluster.kinds import slurm_guard, slurm_login
from tfcluster.kinds.slurm_file import parse_cluster_file

SHARED = "/shared/tf"
JOB_DIR = f"{SHARED}/jobs/hpc/mnist"
SLOTS = ("chief-0", "worker-0", "worker-1")
GOOD = {"release": f"{SHARED}/releases/{'a' * 64}", "spec": f"{JOB_DIR}/spec-{'0123456789abcdef'}.json",
        "chief_slot": "chief-0"}
REPO = Path(__file__).resolve().parents[3]


def record_fields(**change: str) -> list[str]:
    found = slurm_guard.record_problems("login:/x/submitted.json", shared_dir=SHARED, job_dir=JOB_DIR, slots=SLOTS,
                                        **{**GOOD, **change})
    return [p.field.rsplit(": ", 1)[-1] for p in found]


# --- the record read back -------------------------------------------------------------------------------------------
def test_a_record_of_the_layout_passes() -> None:
    assert record_fields() == []
    assert record_fields(chief_slot="worker-1") == []


@pytest.mark.parametrize(("change", "field"), [
    ({"release": "/home/mallory/releases/" + "a" * 64}, "release"),  # outside the layout
    ({"release": f"{SHARED}/releases/../../../home/mallory/{'a' * 40}"}, "release"),
    ({"release": f"{SHARED}/releases/{'a' * 63}"}, "release"),
    ({"release": f"{SHARED}/releases/{'A' * 64}"}, "release"),
    ({"release": f"{SHARED}/releases/{'a' * 64}/sub"}, "release"),
    ({"release": ""}, "release"),
    ({"spec": "/tmp/spec-0123456789abcdef.json"}, "spec"),
    ({"spec": f"{JOB_DIR}/../other/spec-0123456789abcdef.json"}, "spec"),
    ({"spec": f"{JOB_DIR}/run/spec-0123456789abcdef.json"}, "spec"),
    ({"spec": f"{JOB_DIR}/spec-x.json"}, "spec"),
    ({"chief_slot": ".."}, "chief_slot"),
    ({"chief_slot": "chief-0/../../../../etc"}, "chief_slot"),
    ({"chief_slot": "worker-2"}, "chief_slot"),  # not declared
    ({"chief_slot": ""}, "chief_slot"),
])
def test_a_record_off_the_layout_is_refused_by_its_field(change: dict[str, str], field: str) -> None:
    assert record_fields(**change) == [field]


def test_the_transport_refuses_a_planted_record_naming_the_file() -> None:
    cf = parse_cluster_file({"login": {"host": "10.0.0.5", "user": "alice"}, "partition": "gpu", "nodes": 3,
                             "tasks_per_node": 1, "shared_dir": SHARED, "python": {"venv": "/shared/v"}},
                            Path("/etc/slurm.yml"))
    transport = slurm_login.SlurmTransport(cf, "hpc", kinds.Target(kind="slurm", name="hpc", job="mnist"))
    assert transport.checked(None, "x") is None
    good = slurm_login.Record(job_id="7", **GOOD)
    assert transport.checked(good, transport.layout.submitted) == good
    bad = slurm_login.Record(job_id="7", **{**GOOD, "chief_slot": "../../x"})
    with pytest.raises(slurm_login.LoginError, match=f"{JOB_DIR}/submitted.json: chief_slot: '../../x' is not"):
        transport.checked(bad, transport.layout.submitted)


# --- the shared directory and its parents ---------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "owner", "allowed"), [
    (0o755, 0, True), (0o700, 1000, True), (0o1777, 0, True),  # /tmp: root's and sticky
    (0o1777, 1000, True), (0o1777, 500, False),  # sticky, but another user's: they may remove what is in it
    (0o2770, 0, False), (0o775, 0, False), (0o757, 1000, False), (0o3770, 500, False),
])
def test_a_parent_is_allowed_when_others_cannot_replace_what_is_in_it(mode: int, owner: int, allowed: bool) -> None:
    assert slurm_guard.parent_allows(mode, owner, 1000) is allowed


def shared_problems(dirs: list[str], uid: str = "1000", foreign: tuple[str, ...] = ()) -> list[str]:
    return [str(p) for p in slurm_guard.shared_dir_problems("/etc/slurm.yml", [uid], dirs, list(foreign))]


OK_DIRS = ["self 1000 700 /project/g/alice/tf", "parent 1000 750 /project/g/alice", "parent 0 755 /project/g",
           "parent 0 755 /project", "parent 0 755 /"]


def test_a_shared_dir_of_the_login_user_under_closed_parents_passes() -> None:
    assert shared_problems(OK_DIRS) == []
    assert shared_problems(["self 1000 700 /tmp/tf", "parent 0 1777 /tmp", "parent 0 755 /"]) == []


@pytest.mark.parametrize(("dirs", "wrong"), [
    (["self 1001 700 /project/g/alice/tf", *OK_DIRS[1:]],
     "/project/g/alice/tf is owned by uid 1001, not by the login user (uid 1000)"),
    (["self 1000 2770 /project/g/alice/tf", *OK_DIRS[1:]],
     "/project/g/alice/tf is writable by group or others (mode 2770). Fix: chmod go-w /project/g/alice/tf"),
    ([*OK_DIRS[:2], "parent 0 2770 /project/g", *OK_DIRS[3:]],  # the usual setgid project directory
     "/project/g, a parent of shared_dir, is writable by group or others without the sticky bit (mode 2770"),
    ([*OK_DIRS[:4], "parent 0 777 /"], "/, a parent of shared_dir, is writable by group or others"),
])
def test_the_preflight_refuses_a_shared_dir_others_may_replace(dirs: list[str], wrong: str) -> None:
    texts = shared_problems(dirs)
    assert len(texts) == 1 and wrong in texts[0], texts
    assert texts[0].startswith("/etc/slurm.yml: shared_dir: ") and "Fix: " in texts[0]


def test_the_preflight_refuses_a_foreign_entry_and_an_unknown_uid() -> None:
    texts = shared_problems(OK_DIRS, foreign=("/project/g/alice/tf/releases\n",))
    assert texts == ["/etc/slurm.yml: shared_dir: /project/g/alice/tf/releases is owned by another user or writable "
                     "by group or others (found in shared_dir). Fix: remove it, or chown/chmod -R go-w it if you "
                     "trust its contents"]
    assert "did not say the login user's uid" in shared_problems(OK_DIRS, uid="")[0]
    assert shared_problems(["junk", "self x 700 /a", "self 1000 999 /a"]) == []  # unreadable lines decide nothing


def preflight_lines(shared: Path) -> dict[str, list[str]]:
    script = 'shared=$1\n' + slurm_guard.PREFLIGHT_SHARED + 'echo "@@end"\n'
    out = subprocess.run(["sh", "-c", script, "preflight", str(shared)], capture_output=True, text=True,
                         check=True).stdout
    return slurm_login.sections(out)


def test_the_login_sides_own_lines_decide_on_a_real_tree(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "releases").mkdir(parents=True)
    for path in (tmp_path, shared, shared / "releases"):
        path.chmod(0o700)
    found = preflight_lines(shared)
    assert found["uid"] == [str(os.getuid())] and found["dirs"][0] == f"self {os.getuid()} 700 {shared}"
    assert any(line.startswith("parent ") and line.endswith(f" {tmp_path}") for line in found["dirs"])

    def decided() -> list[str]:
        found = preflight_lines(shared)
        return [str(p) for p in slurm_guard.shared_dir_problems("f", found["uid"], found["dirs"], found["foreign"])]

    assert decided() == []
    (shared / "releases").chmod(0o770)
    assert decided() == [f"f: shared_dir: {shared}/releases is owned by another user or writable by group or others "
                         "(found in shared_dir). Fix: remove it, or chown/chmod -R go-w it if you trust its contents"]
    (shared / "releases").chmod(0o700)
    tmp_path.chmod(0o777)
    assert [f"{tmp_path}, a parent of shared_dir" in text for text in decided()] == [True]
    tmp_path.chmod(0o700)


# --- the login-side programs, run here ------------------------------------------------------------------------------
def run_remote(words: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(slurm_guard.remote(words), input=stdin, capture_output=True, check=False)


def release_archive(tmp_path: Path) -> tuple[bytes, str]:
    tree = tmp_path / "src"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_text("X = 1\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(tree / "pkg", arcname="pkg")
    return buffer.getvalue(), files.tree_digest(tree)


def stage(dest: Path, name: str, archive: bytes) -> subprocess.CompletedProcess[bytes]:
    return run_remote(["sh", "-c", slurm_login.STAGE_SCRIPT, "stage", str(dest), name, sys.executable, str(REPO)],
                      archive)


def test_a_staged_tree_is_the_login_users_alone(tmp_path: Path) -> None:
    archive, digest = release_archive(tmp_path)
    dest = tmp_path / "shared" / "releases"
    copied = stage(dest, digest, archive)
    assert copied.returncode == 0 and copied.stdout.split() == [b"copied"], copied.stderr
    modes = {p.relative_to(dest).as_posix(): p.stat().st_mode & 0o777 for p in [dest, *dest.rglob("*")]}
    assert modes == {".": 0o700, digest: 0o700, f"{digest}/pkg": 0o700, f"{digest}/pkg/mod.py": 0o600}
    again = stage(dest, digest, archive)
    assert again.returncode == 0 and again.stdout.split() == [b"present"]


@pytest.mark.parametrize("planted", ["file", "dir"])
def test_a_planted_or_loosened_tree_is_never_reused(tmp_path: Path, planted: str) -> None:
    archive, digest = release_archive(tmp_path)
    dest = tmp_path / "releases"
    target = dest / digest / ("pkg/mod.py" if planted == "file" else "pkg")
    target.parent.mkdir(parents=True)
    if planted == "file":
        target.write_text("import os; os.system('evil')\n")
    else:
        target.mkdir()
    target.chmod(0o666 if planted == "file" else 0o777)
    refused = stage(dest, digest, archive)
    assert refused.returncode == 4, refused
    err = refused.stderr.decode()
    assert f"{dest / digest} is not the login user's alone: {target} is another user's or writable" in err
    assert f"Fix: remove {dest / digest} (rm -rf), or chown/chmod -R go-w it" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a file of another user: needs root")
def test_a_tree_with_another_users_file_is_refused(tmp_path: Path) -> None:
    archive, digest = release_archive(tmp_path)
    dest = tmp_path / "releases"
    (dest / digest).mkdir(parents=True, mode=0o700)
    (dest / digest / "x").write_text("")
    os.chown(dest / digest / "x", 65534, 65534)
    refused = stage(dest, digest, archive)
    assert refused.returncode == 4 and f"{dest / digest / 'x'} is another user's".encode() in refused.stderr


def test_the_job_dir_is_checked_before_its_files_are_written(tmp_path: Path) -> None:
    job_dir = tmp_path / "jobs" / "hpc" / "mnist"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("spec-x.json")
        tar.addfile(info, io.BytesIO(b""))
    written = run_remote(["sh", "-c", slurm_login.FILES_SCRIPT, "files", str(job_dir)], buffer.getvalue())
    assert written.returncode == 0, written.stderr
    assert {p.stat().st_mode & 0o777 for p in [job_dir, *job_dir.rglob("*")]} <= {0o700, 0o600}
    (job_dir / "logs").chmod(0o777)
    refused = run_remote(["sh", "-c", slurm_login.FILES_SCRIPT, "files", str(job_dir)], buffer.getvalue())
    assert refused.returncode == 4 and f"{job_dir / 'logs'} is another user's".encode() in refused.stderr


def fake_release(tmp_path: Path) -> Path:
    release = tmp_path / "release"
    host = release / "tfcluster" / "host"
    host.mkdir(parents=True)
    (release / "tfcluster" / "__init__.py").write_text("")
    (host / "__init__.py").write_text("")
    (host / "slurm_task.py").write_text(
        "import json, os, sys\n"
        "print(json.dumps({'cwd': os.getcwd(), 'path0': sys.path[0], 'args': sys.argv[1:], "
        "'env': {k: os.environ.get(k) for k in ('PYTHONSAFEPATH', 'PYTHONPYCACHEPREFIX')}}))\n")
    return release


def test_the_login_tool_runs_from_its_release_with_a_private_bytecode_cache(tmp_path: Path) -> None:
    release, job_dir = fake_release(tmp_path), tmp_path / "job"
    (job_dir / "tfcluster" / "host").mkdir(parents=True)  # what a job dir must never shadow
    (job_dir / "tfcluster" / "__init__.py").write_text("raise SystemExit('imported from the job dir')\n")
    cache = tmp_path / "shared" / slurm_guard.PYCACHE
    words = ["sh", "-c", slurm_guard.TOOL_SCRIPT, "tool", str(release), str(cache), sys.executable, "poll", "S"]
    ran = subprocess.run(slurm_guard.remote(words), cwd=job_dir, capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    said: dict[str, Any] = json.loads(ran.stdout)
    assert said["cwd"] == str(release) and said["args"] == ["poll", "S"]
    assert said["env"] == {"PYTHONSAFEPATH": "1", "PYTHONPYCACHEPREFIX": str(cache)}
    assert said["path0"] != str(job_dir)
    assert cache.stat().st_mode & 0o777 == 0o700
    assert not list(release.rglob("__pycache__"))  # no bytecode written into the shared tree
    cache.chmod(0o777)
    refused = subprocess.run(slurm_guard.remote(words), capture_output=True, text=True, check=False)
    assert refused.returncode == 4 and f"{cache} is not the login user's alone" in refused.stderr
