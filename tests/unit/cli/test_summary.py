"""tfcluster.cli.summary: the demo summary and plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.escapes import IDS, RAW_SHOWN, assert_clean


def test_demo_summary_and_plot(tmp_path: Path) -> None:
    from tfcluster.cli import summary as demo

    (tmp_path / "DONE").write_text("{}")
    (tmp_path / "metrics.json").write_text(json.dumps({
        "strategy": "multi_worker_mirrored", "workers": 2, "epochs": 2, "global_batch": 128, "accuracy": 0.91,
        "test_accuracy": 0.92, "loss": 0.3, "examples_per_sec": 9876.5, "history": {"loss": [1.0, 0.3],
                                                                                      "accuracy": [0.7, 0.91]}}))
    lines = demo.run(tmp_path)
    text = "\n".join(lines)
    assert "train 0.9100   test 0.9200" in text and "9,876 examples/s" in text and str(tmp_path) in text
    assert (tmp_path / "training.png").read_bytes()[:4] == b"\x89PNG"


def test_demo_refuses_an_unfinished_job(tmp_path: Path) -> None:
    from tfcluster.cli import summary as demo

    with pytest.raises(demo.DemoError, match="holds no finished job"):
        demo.run(tmp_path)
    (tmp_path / "DONE").write_text("{}")
    with pytest.raises(demo.DemoError, match=r"metrics\.json is missing or not JSON"):
        demo.run(tmp_path)


@pytest.mark.parametrize(("raw", "shown"), RAW_SHOWN, ids=IDS)
def test_the_summary_shows_metrics_values_escaped(tmp_path: Path, raw: str, shown: str) -> None:
    from tfcluster.cli import summary as demo

    metrics = {"strategy": raw, "workers": raw, "epochs": raw, "global_batch": raw, "accuracy": raw,
               "loss": 10**400, "examples_per_sec": float("inf")}
    lines = demo.summary_lines(metrics, tmp_path, None)
    assert_clean(lines)
    assert lines[0] == f"job:          {shown} on {shown} worker(s), {shown} epoch(s), global batch {shown}"
    assert "(loss -)" in lines[1] and "inf examples/s" in lines[2]


def test_a_long_metrics_value_is_cut(tmp_path: Path) -> None:
    from tfcluster.cli import summary as demo

    line = demo.summary_lines({"strategy": "s" * 100_000}, tmp_path, None)[0]
    assert "s" * (demo.VALUE_LIMIT - 3) + "... on" in line and len(line) < 200


@pytest.mark.parametrize(("tasks", "shown"), [
    ({"chief": 1, "ps": 1, "worker": 2}, "chief + 1 ps + 2 worker(s)"),  # a ParameterServer chief trains no replica
    ({"worker": 2}, "3 worker(s)"),  # no ps: the replicas (chief and workers) as before
    ("not a map", "3 worker(s)"),
])
def test_a_parameter_server_cluster_is_named_by_its_tasks(tmp_path: Path, tasks: object, shown: str) -> None:
    from tfcluster.cli import summary as demo

    line = demo.summary_lines({"strategy": "s", "workers": 3, "tasks": tasks}, tmp_path, None)[0]
    assert line.startswith(f"job:          s on {shown}, "), line
