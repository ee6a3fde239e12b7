"""Every `python -m MODULE` the project tells a user, a playbook or a tool to run starts something: the module is a
package with a ``__main__.py``, or a file that calls its ``main`` under ``if __name__ == "__main__"``. (A module
whose guard was lost runs nothing and exits 0: `make setup` then "installed" no Terraform toolchain at all.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WHERE = ["Makefile", "README.md", ".ci/run", "tools", "docs", "playbooks", "tfcluster", "trainer", "lab", "bench",
         "inventory", "examples"]
OURS = ("tfcluster", "trainer", "lab", "bench", "inventory")
PATTERN = re.compile(r"-m ((?:" + "|".join(OURS) + r")(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?![.\w<])")


def texts() -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in WHERE:
        path = REPO / entry
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and p.suffix in
                                               (".py", ".md", ".yml", ".yaml", ".sh", ".j2", ".cfg", "")]
        for file in files:
            if "__pycache__" in file.parts:
                continue
            try:
                out[str(file.relative_to(REPO))] = file.read_text()
            except (UnicodeDecodeError, OSError):
                continue
    return out


def named_modules() -> dict[str, str]:
    """{module: a file that names it}."""
    found: dict[str, str] = {}
    for rel, text in texts().items():
        for name in PATTERN.findall(text):
            found.setdefault(name, rel)
    return found


def runs_main(module: str) -> bool:
    base = REPO.joinpath(*module.split("."))
    if (base / "__main__.py").is_file():
        return True
    file = base.with_suffix(".py")
    if not file.is_file():
        return False
    for node in ast.parse(file.read_text()).body:
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test):
            return True
    return False


MODULES = named_modules()


def test_the_project_names_its_entry_points() -> None:
    assert {"tfcluster.provision.toolchain", "tfcluster.prepare.wheelhouse", "lab", "trainer"} <= set(MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_python_dash_m_runs_a_main(module: str) -> None:
    assert runs_main(module), (f"`python -m {module}` (named in {MODULES[module]}) runs nothing: add "
                               "`if __name__ == \"__main__\": sys.exit(main())` or a __main__.py")
