"""The benchmarks a user runs: every bench module imports (its own imports resolve) and has a ``main``, and every
command its docstring shows runs it the way that works (`python -m bench.NAME`: a path would not find ``bench``)."""

from __future__ import annotations

import importlib
import json
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


def test_the_collector_bench_times_a_task_the_collector_role_has() -> None:
    """bench.lab_flows sums the TIMING lines of the collector's pull task, found by its name's start."""
    from bench.lab_flows import COLLECT_TASK

    tasks = REPO / "playbooks" / "collections" / "ansible_collections" / "tfcluster" / "cluster" / "roles" / "collector"
    names = [line.split("name:", 1)[1].strip() for path in sorted((tasks / "tasks").glob("*.yml"))
             for line in path.read_text().splitlines() if line.lstrip().startswith("- name:")]
    assert names, "no task names read"
    assert [n for n in names if n.startswith(COLLECT_TASK)], (COLLECT_TASK, names)


def test_the_first_step_is_the_trainers_own_moment_when_it_reports_one() -> None:
    from bench.lab_scale import FirstStep

    assert FirstStep(13.2, 4.6, [], {"first_step": 7.2}).at_s == pytest.approx(11.8)
    assert FirstStep(13.2, 4.6, [], {}).at_s == 13.2  # no clock: what status.json showed
    assert FirstStep(13.2, 4.6, [], {"first_step": 20.0}).at_s == 13.2  # past what was seen: not believed


def test_cpu_busy_reads_the_share_of_non_idle_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import lab_scale

    stat = tmp_path / "stat"
    lines = iter(["cpu 160 0 140 800 100 0 0 0 0 0\n"])
    monkeypatch.setattr(lab_scale.time, "sleep", lambda _s: stat.write_text(next(lines)))
    stat.write_text("cpu 100 0 100 700 100 0 0 0 0 0\n")
    assert lab_scale.cpu_busy(0, str(stat)) == pytest.approx(100 / 200)  # 100 busy of 200 jiffies


def test_a_bench_writes_its_figures_when_asked_and_prints_them_as_its_last_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench import emit

    emit({"ratio": 0.05, "polls": 3}, tmp_path / "out.json")
    emit({"ratio": 1.0}, None)
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [{"ratio": 0.05, "polls": 3}, {"ratio": 1.0}]
    assert json.loads((tmp_path / "out.json").read_text()) == {"ratio": 0.05, "polls": 3}
