"""The benchmarks a user runs: every bench module imports (its own imports resolve) and has a ``main``, and every
command its docstring shows runs it the way that works (`python -m bench.NAME`: a path would not find ``bench``)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (REPO / "bench").glob("*.py") if p.stem != "__init__")


def test_there_are_benchmarks() -> None:
    assert {"lab_flows", "lab_scale", "train_throughput", "gpu_check"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_a_bench_module_imports_and_its_usage_runs_it_as_a_module(name: str) -> None:
    module = importlib.import_module(f"bench.{name}")
    assert callable(getattr(module, "main", None)) or name == "lab_scale", f"bench/{name}.py has no main()"
    doc = module.__doc__ or ""
    assert not re.search(r"python3? bench/", doc), f"bench/{name}.py: its usage runs a path; use python -m bench.{name}"
