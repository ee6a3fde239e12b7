"""The floor plan: the package's import graph has no circle, and no import points up.

The layer order is the one written in docs/ARCHITECTURE.md (the fenced block under "## Layers" whose lines read
``tfcluster/<folder>/  ...``, top to bottom). A module may import its own folder and any folder below it; the shipped
floors (``core``, ``host``) and the trainer import only the standard library and the floors below them. Imports are
read from the source (AST), run-time ones only: an ``if TYPE_CHECKING:`` block is not an import. The test fails on a
planted circle and a planted upward import in a copy of the repository (the last tests below).
"""

from __future__ import annotations

import ast
import re
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = "docs/ARCHITECTURE.md"
SHIPPED = ("core", "host")  # standard library only: they run on every host's system Python


def layers(repo: Path) -> list[str]:
    """The folders of tfcluster/, top to bottom, as docs/ARCHITECTURE.md draws them."""
    text = (repo / ARCHITECTURE).read_text()
    section = text.split("## Layers", 1)[1]
    block = section.split("```", 2)[1]
    found = re.findall(r"^\s*tfcluster/(\w+)/", block, re.M)
    assert found, f"{ARCHITECTURE}: no `tfcluster/<folder>/` lines in the Layers block"
    return found


def product_modules(repo: Path) -> dict[str, Path]:
    """{dotted module name: file} of the tfcluster package and the trainer."""
    out = {}
    for top in ("tfcluster", "trainer"):
        for path in sorted((repo / top).rglob("*.py")):
            rel = path.relative_to(repo).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(module: str, path: Path, known: Mapping[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported module, line) of every run-time import in ``path``; relative imports resolved; ``from pkg import
    sub`` counts as an import of ``pkg.sub`` where that is a module."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if getattr(node, "lineno", 0) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in known else target), node.lineno


def graph(repo: Path) -> dict[str, dict[str, int]]:
    """{module: {imported product module: line}}."""
    known = product_modules(repo)
    out: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        edges: dict[str, int] = {}
        for imported, line in imports_of(module, path, known):
            target = imported
            while target and target not in known:  # `from tfcluster.core.contract import X`: the module
                target = target.rpartition(".")[0]
            if target and target != module:
                edges.setdefault(target, line)
        out[module] = edges
    return out


def circles(edges: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def layer_of(module: str, order: list[str]) -> int | None:
    """Index in ``order`` (0 = top) of a tfcluster folder; None for the package root (tfcluster/__init__.py and
    __main__.py, the `tfcluster` command's entry) and for the trainer (its own test below)."""
    parts = module.split(".")
    if parts[0] == "tfcluster" and len(parts) >= 2 and parts[1] in order:
        return order.index(parts[1])
    return None


def upward(repo: Path) -> list[str]:
    """Every import of a module from a folder above its own (by docs/ARCHITECTURE.md)."""
    order = layers(repo)
    problems = []
    for module, targets in graph(repo).items():
        mine = layer_of(module, order)
        if mine is None:
            continue
        for target, line in targets.items():
            theirs = layer_of(target, order)
            if theirs is not None and theirs < mine:
                problems.append(f"{product_modules(repo)[module].relative_to(repo)}:{line}: {module} imports "
                                f"{target}, a layer above it")
    return problems


def third_party(repo: Path) -> list[str]:
    """Imports of anything but the standard library and the floors below, in the shipped floors."""
    known = product_modules(repo)
    problems = []
    for module, path in known.items():
        parts = module.split(".")
        if len(parts) < 2 or parts[0] != "tfcluster" or parts[1] not in SHIPPED:
            continue
        for target, line in imports_of(module, path, known):
            top = target.split(".")[0]
            if top == "tfcluster" or top in sys.stdlib_module_names or top == "__future__":
                continue
            problems.append(f"{path.relative_to(repo)}:{line}: {module} imports {target}, which a host lacks")
    return problems


# --- the repository as it is ----------------------------------------------------------------------------------------
def test_the_layers_are_written_down_and_every_folder_is_one() -> None:
    order = layers(REPO)
    folders = sorted(p.name for p in (REPO / "tfcluster").iterdir() if (p / "__init__.py").is_file())
    assert sorted(order) == folders, f"{ARCHITECTURE} Layers block: {order}; folders: {folders}"
    assert order[-len(SHIPPED):] == list(reversed(SHIPPED))  # host on core, the bottom


def test_the_import_graph_has_no_circle() -> None:
    edges = graph(REPO)
    assert len(edges) > 50  # the walk found the package
    assert not circles(edges), circles(edges)


def test_no_import_points_up() -> None:
    assert not upward(REPO), "\n".join(upward(REPO))


def test_the_shipped_floors_need_only_the_standard_library() -> None:
    assert not third_party(REPO), "\n".join(third_party(REPO))


def test_the_trainer_imports_only_the_shipped_floors() -> None:
    wrong = [f"{module} imports {target}" for module, targets in graph(REPO).items() if module.startswith("trainer")
             for target in targets if target.startswith("tfcluster")
             and target.split(".")[1:2] and target.split(".")[1] not in SHIPPED]
    assert not wrong, wrong


# --- the checks fail on a planted circle and a planted upward import ------------------------------------------------
def copy_repo(tmp: Path) -> Path:
    repo = tmp / "repo"
    for rel in ("tfcluster", "trainer"):
        shutil.copytree(REPO / rel, repo / rel, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "docs").mkdir()
    shutil.copy(REPO / ARCHITECTURE, repo / ARCHITECTURE)
    return repo


def plant(repo: Path, rel: str, line: str) -> None:
    path = repo / rel
    path.write_text(path.read_text() + f"\n{line}\n")


def test_a_planted_circle_is_caught(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    plant(repo, "tfcluster/collect/store.py", "from tfcluster.collect import ssh  # planted")
    assert ["tfcluster.collect.ssh", "tfcluster.collect.store"] in circles(graph(repo))


@pytest.mark.parametrize(("rel", "line", "what"), [
    ("tfcluster/core/contract.py", "from tfcluster.cli import settings  # planted", "tfcluster.cli.settings"),
    ("tfcluster/provision/common.py", "from tfcluster.kinds import KINDS  # planted", "tfcluster.kinds"),
    ("tfcluster/host/jobspec.py", "def f():\n    from tfcluster.run import wait  # planted, lazily",
     "tfcluster.run.wait"),
])
def test_a_planted_upward_import_is_caught(tmp_path: Path, rel: str, line: str, what: str) -> None:
    repo = copy_repo(tmp_path)
    assert not upward(repo)
    plant(repo, rel, line)
    found = upward(repo)
    assert any(f"imports {what}, a layer above it" in problem and rel in problem for problem in found), found


def test_a_type_only_import_is_not_an_import(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    plant(repo, "tfcluster/core/text.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                          "    from tfcluster.cli.settings import Settings")
    assert not upward(repo)


def test_a_third_party_import_in_a_shipped_floor_is_caught(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    plant(repo, "tfcluster/host/preflight.py", "import yaml  # planted")
    assert any("imports yaml, which a host lacks" in p for p in third_party(repo))
