"""`make test-changed`: the unit tests of the folders a change touched, for a quick loop while developing.

    python tools/changed_tests.py [PYTEST_ARGS...]     # BASE=<git ref> (environment): compare with it

The change is `git diff --name-only $BASE` (default HEAD: the uncommitted changes) plus untracked files. A file of
tfcluster/<folder>/ selects tests/unit/<folder>/ (the suite is laid out like the code); trainer/, inventory/,
playbooks/, infra/ and lab/ select their own unit folders; a changed test file selects itself. A change to the
ground floor (tfcluster/core/), which everything imports, selects every unit test. Runs them with pytest-xdist.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UNIT = Path("tests/unit")
PARTS = {"trainer": "trainer", "inventory": "inventory", "playbooks": "playbooks", "infra": "infra", "lab": "lab"}


def changed_files(base: str) -> list[str]:
    def git(*args: str) -> list[str]:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout
        return [line for line in out.splitlines() if line]

    return sorted({*git("diff", "--name-only", base), *git("ls-files", "--others", "--exclude-standard")})


def test_paths(files: Iterable[str]) -> list[str]:
    """The unit test folders and files the changed files select (see the module docstring)."""
    selected: set[Path] = set()
    for name in files:
        parts = Path(name).parts
        if parts[:2] == ("tfcluster", "core"):
            return [str(UNIT)]
        if parts[:2] == UNIT.parts and name.endswith(".py") and Path(parts[-1]).name.startswith("test_"):
            selected.add(Path(name))
        elif parts[0] == "tfcluster" and len(parts) > 2:
            selected.add(UNIT / parts[1])
        elif parts[0] in PARTS:
            selected.add(UNIT / PARTS[parts[0]])
    return sorted(str(p) for p in selected if (REPO / p).exists() and not _inside(p, selected))


def _inside(path: Path, others: set[Path]) -> bool:
    return any(other != path and path.is_relative_to(other) for other in others)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    paths = test_paths(changed_files(os.environ.get("BASE", "").strip() or "HEAD"))
    if not paths:
        print("test-changed: no unit tests cover the changed files (make test-unit runs them all)")
        return 0
    print(f"test-changed: {' '.join(paths)}", flush=True)
    return subprocess.run([sys.executable, "-m", "pytest", "-n", "2", *paths, *args], cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
