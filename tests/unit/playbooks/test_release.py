"""The trainer role's release tool: content-addressed stage and digest."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "playbooks" / "roles"


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module



release = load("release", ROLES / "trainer/files/release.py")


def test_stage_is_content_addressed_and_skips_caches(tmp_path: Path) -> None:
    src = tmp_path / "pkg"
    (src / "__pycache__").mkdir(parents=True)
    (src / "__init__.py").write_text("x = 1\n")
    (src / "__pycache__" / "x.pyc").write_bytes(b"junk")
    one = release.stage(str(tmp_path / "stage"), [f"trainer={src}"])
    two = release.stage(str(tmp_path / "stage"), [f"trainer={src}"])
    assert one == two and Path(one["archive"]).is_file()
    assert release.tree_digest(one["path"]) == one["digest"]
    assert not list(Path(one["path"]).rglob("*.pyc"))
    (src / "__init__.py").write_text("x = 2\n")
    assert release.stage(str(tmp_path / "stage"), [f"trainer={src}"])["digest"] != one["digest"]


@pytest.mark.parametrize(("source", "message"), [("noequals", "a source must be NAME=PATH"),
                                                 ("x=/does/not/exist", "source /does/not/exist does not exist")])
def test_stage_rejects_bad_sources(tmp_path: Path, source: str, message: str) -> None:
    with pytest.raises(release.ReleaseError, match=message):
        release.stage(str(tmp_path / "stage"), [source])


def test_digest_of_a_missing_release_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(release.ReleaseError, match="deploy the trainer first"):
        release.tree_digest(str(tmp_path / "nope"))
