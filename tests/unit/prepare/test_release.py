"""tfcluster/prepare/release.py (the release is what hosts run, by content digest; the prepare digest) and the
tfcluster.cluster.release module (digest checked on the host, `current` swapped atomically)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfcluster.core.files import tree_digest
from tfcluster.prepare import release

REPO = Path(__file__).resolve().parents[3]


def stage(tmp: Path, repo: Path = REPO, **more: str) -> dict[str, str]:
    return release.stage(tmp / "stage", release.release_sources(repo, **more))


def test_the_release_holds_only_what_hosts_run(tmp_path: Path) -> None:
    out = stage(tmp_path)
    top = sorted(p.name for p in Path(out["path"]).iterdir())
    assert top == ["tfcluster", "trainer"]
    shipped = {p.name for p in (Path(out["path"]) / "tfcluster").iterdir()}
    assert shipped == {"__init__.py", "core", "host"}  # the shipped floors, whole; no control-machine stage
    tree = Path(out["path"]) / "tfcluster"
    assert {p.name for p in (tree / "core").iterdir()} == {p.name for p in (REPO / "tfcluster/core").glob("*.py")}
    assert {p.name for p in (tree / "host").iterdir()} == {p.name for p in (REPO / "tfcluster/host").glob("*.py")}
    assert tree_digest(out["path"]) == out["digest"] and Path(out["archive"]).is_file()
    assert not list(Path(out["path"]).rglob("*.pyc"))


def copy_repo(tmp: Path) -> Path:
    repo = tmp / "repo"
    for rel in ("trainer", "tfcluster"):
        shutil.copytree(REPO / rel, repo / rel, ignore=shutil.ignore_patterns("__pycache__"))
    return repo


def test_a_control_machine_change_leaves_the_digest_alone_a_host_change_does_not(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    first = stage(tmp_path, repo)["digest"]
    (repo / "tfcluster/provision/local.py").write_text("# changed\n")
    assert stage(tmp_path, repo)["digest"] == first
    (repo / "tfcluster/core/contract.py").write_text((repo / "tfcluster/core/contract.py").read_text() + "# changed\n")
    assert stage(tmp_path, repo)["digest"] != first


def test_a_users_script_goes_under_user(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("print('hi')\n")
    out = stage(tmp_path, script=str(script))
    assert (Path(out["path"]) / "user" / "job.py").read_text() == "print('hi')\n"
    with pytest.raises(release.ReleaseError, match="does not exist on the control machine"):
        stage(tmp_path, script=str(tmp_path / "gone.py"))


def test_staging_is_reproducible(tmp_path: Path) -> None:
    one, two = stage(tmp_path / "a"), stage(tmp_path / "b")
    assert one["digest"] == two["digest"]
    assert Path(one["archive"]).read_bytes() == Path(two["archive"]).read_bytes()


def test_the_prepare_digest_follows_every_input(tmp_path: Path) -> None:
    role = tmp_path / "role"
    role.mkdir()
    (role / "main.yml").write_text("a\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "x-1.whl").write_bytes(b"1")
    data = {"mnist": {"sha256": "a" * 64}}

    def digest() -> str:
        return release.prepare_digest("r" * 64, [role], [wheels], data)

    seen = {digest()}
    (role / "main.yml").write_text("b\n")
    seen.add(digest())
    (wheels / "y-1.whl").write_bytes(b"2")
    seen.add(digest())
    data["mnist"]["sha256"] = "b" * 64
    seen.add(digest())
    assert len(seen) == 4
    assert release.prepare_digest("s" * 64, [role], [wheels], data) not in seen


def test_datasets_are_resolved_and_missing_ones_named(tmp_path: Path) -> None:
    (tmp_path / "mnist.npz").write_bytes(b"npz")
    found = release.datasets(["mnist"], source=tmp_path)
    assert found["mnist"]["file"] == "mnist.npz" and found["mnist"]["size"] == 3
    with pytest.raises(release.ReleaseError, match="make setup"):
        release.datasets(["other"], source=tmp_path)


def test_a_dataset_that_is_not_canonical_mnist_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mnist.npz").write_bytes(b"not an npz")
    with pytest.raises(release.ReleaseError, match="not the canonical MNIST"):
        release.datasets(["mnist"], cache=tmp_path / "verified.json", verify=True, source=tmp_path)
    assert not (tmp_path / "verified.json").exists()


def test_a_run_that_stages_the_same_tree_at_the_same_time_uses_the_first_one(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Two `make train` of this checkout at once (two clusters, or make test's two streams) stage one digest: the
    one that comes second keeps the first one's tree, which the first may be copying to its hosts right now."""
    first = stage(tmp_path)
    inode = os.stat(first["path"]).st_ino
    checks = iter([False])  # the second run looked before the first had finished
    real = release._staged
    monkeypatch.setattr(release, "_staged", lambda final, digest: next(checks, None) or real(final, digest))
    second = stage(tmp_path)
    assert second == first and os.stat(second["path"]).st_ino == inode
    assert tree_digest(Path(second["path"])) == second["digest"]
    left = sorted(p.name for p in (tmp_path / "stage").iterdir())
    assert left == sorted([first["digest"], f"{first['digest']}.tar.gz"])  # no temporary tree left behind


def test_a_staged_tree_edited_by_hand_is_replaced(tmp_path: Path) -> None:
    first = stage(tmp_path)
    (Path(first["path"]) / "trainer" / "extra.py").write_text("x = 1\n")
    again = stage(tmp_path)
    assert again["digest"] == first["digest"] and not (Path(again["path"]) / "trainer" / "extra.py").exists()
    assert tree_digest(Path(again["path"])) == again["digest"]


def test_cli_stage_prints_everything_the_playbook_reads(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "tfcluster.prepare.release", "stage", "--dest", str(tmp_path / "s"),
                           "--inputs", str(REPO / "playbooks/site.yml")], cwd=REPO, capture_output=True, text=True,
                          check=True)
    out = json.loads(proc.stdout)
    assert set(out) == {"archive", "datasets", "digest", "path", "prepare"}


# --- the module on the host ----------------------------------------------------------------------------------------

def run_module(tmp: Path, name: str, args: dict, check: bool = False) -> dict:
    """Run a collection module on localhost with ansible (the way a play does)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    argv = [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-e",
            f"ansible_python_interpreter={sys.executable}", "-m", f"tfcluster.cluster.{name}", "-a", json.dumps(args)]
    proc = subprocess.run([*argv, *(["--check"] if check else [])], cwd=REPO, env=env, capture_output=True,
                          text=True, check=False, timeout=120)
    status, _, body = proc.stdout.partition(" => ")
    return {**json.loads(body), "failed": "FAILED" in status}


def test_release_module_checks_the_digest_and_swaps_current(tmp_path: Path) -> None:
    out = stage(tmp_path)
    root = tmp_path / "opt"
    shutil.copytree(out["path"], root / "releases" / out["digest"])
    (root / "current").symlink_to("releases/old")
    dry = run_module(tmp_path, "release", {"root": str(root), "digest": out["digest"]}, check=True)
    assert dry["changed"] and os.readlink(root / "current") == "releases/old"
    done = run_module(tmp_path, "release", {"root": str(root), "digest": out["digest"]})
    assert done["changed"] and os.readlink(root / "current") == f"releases/{out['digest']}"
    assert not run_module(tmp_path, "release", {"root": str(root), "digest": out["digest"]})["changed"]
    (root / "releases" / out["digest"] / "trainer" / "__init__.py").write_text("tampered\n")
    bad = run_module(tmp_path, "release", {"root": str(root), "digest": out["digest"]})
    assert bad.get("failed") and "a partial unpack or a changed file" in bad["msg"]
