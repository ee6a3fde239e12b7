"""Summarise a collected training job and plot it: ``python -m tfcluster.cli.summary --artifacts
artifacts/local/<job>``.

Reads ``metrics.json`` of a collected, verified job (the collector refuses anything without ``DONE``), prints the
summary the demo ends with (accuracy, examples/s, where the artifacts are) and writes ``training.png`` (loss and
accuracy per epoch) beside the artifacts. Exit 1 with a message when the directory is not a finished job.
The training script wrote metrics.json: each value is printed escaped (tfcluster.core.text.printable) and cut.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tfcluster.collect.ledger import collected_dir
from tfcluster.core import contract
from tfcluster.core.text import printable
from tfcluster.run import health

LOG = logging.getLogger("tfcluster.cli.summary")
PLOT_NAME = "training.png"
VALUE_LIMIT = 60  # characters of one metrics.json value shown (strategy, workers, ...)


class DemoError(Exception):
    """The artifacts directory cannot be summarised; the message says why and what to do."""


def load_metrics(artifacts: Path) -> dict[str, Any]:
    if not (artifacts / contract.DONE).is_file():
        raise DemoError(f"{artifacts} holds no finished job (no DONE). Fix: run `make train` (or `make collect`)")
    try:
        metrics = json.loads((artifacts / contract.METRICS).read_text())
    except (OSError, ValueError) as exc:
        raise DemoError(f"{artifacts}/{contract.METRICS} is missing or not JSON ({exc})") from None
    if not isinstance(metrics, dict):
        raise DemoError(f"{artifacts}/{contract.METRICS} is not an object")
    return metrics


def _fmt(value: Any, spec: str) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    try:
        return format(value, spec)
    except (OverflowError, ValueError):  # an int too large for a float
        return "-"


def _value(metrics: Mapping[str, Any], key: str) -> str:
    return printable(metrics.get(key, "?"), VALUE_LIMIT)


def _cluster(metrics: Mapping[str, Any]) -> str:
    """``2 worker(s)``, or a ParameterServer cluster's tasks (``chief + 1 ps + 2 worker(s)``: the chief trains none)."""
    tasks = metrics.get("tasks")
    if isinstance(tasks, Mapping) and tasks.get(contract.PS):
        return (f"chief + {printable(tasks.get(contract.PS), VALUE_LIMIT)} ps + "
                f"{printable(tasks.get(contract.WORKER, 0), VALUE_LIMIT)} worker(s)")
    return f"{_value(metrics, 'workers')} worker(s)"


def straggler_lines(decision: Mapping[str, Any] | None) -> list[str]:
    """``stragglers:   worker-1 ran 31 % below the others for 6 min`` per task the wait named (each task's longest
    episode, from the decision event: tfcluster/run/health.py); host names are host text, escaped."""
    found = (decision or {}).get("stragglers")
    if not isinstance(found, Mapping):
        return []
    texts = []
    for host, episode in found.items():
        try:
            texts.append(health.straggler_text(printable(host, VALUE_LIMIT), episode))
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError):
            continue
    return [f"{'stragglers:' if i == 0 else '':<14}{text}" for i, text in enumerate(texts)]


def summary_lines(metrics: Mapping[str, Any], artifacts: Path, plot: Path | None) -> list[str]:
    """The summary of a collected job; every value from metrics.json escaped and cut (VALUE_LIMIT)."""
    lines = [
        f"job:          {_value(metrics, 'strategy')} on {_cluster(metrics)}, "
        f"{_value(metrics, 'epochs')} epoch(s), global batch {_value(metrics, 'global_batch')}",
        f"accuracy:     train {_fmt(metrics.get('accuracy'), '.4f')}   test {_fmt(metrics.get('test_accuracy'), '.4f')}"
        f"   (loss {_fmt(metrics.get('loss'), '.4f')})",
        f"throughput:   {_fmt(metrics.get('examples_per_sec'), ',.0f')} examples/s steady, "
        f"{_fmt(metrics.get('examples_per_sec_overall'), ',.0f')} overall",
        f"time:         train {_fmt(metrics.get('train_time_s'), '.1f')} s, "
        f"trainer wall {_fmt(metrics.get('wall_time_s'), '.1f')} s",
        f"artifacts:    {printable(artifacts)} (sha256-verified against MANIFEST.sha256)",
    ]
    if plot is not None:
        lines.append(f"plot:         {printable(plot)}")
    return lines


def write_plot(history: Mapping[str, Sequence[float]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.5))
    for key, axis in (("loss", ax_loss), ("accuracy", ax_acc)):
        for prefix, style in (("", "o-"), ("val_", "s--")):
            values = history.get(prefix + key)
            if values:
                axis.plot(range(1, len(values) + 1), values, style, label=prefix + key)
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
        axis.set_title(key)
        axis.grid(True, alpha=0.3)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def run(artifacts: Path, plot: bool = True) -> list[str]:
    metrics = load_metrics(artifacts)
    history = metrics.get("history") if isinstance(metrics.get("history"), dict) else {}
    plot_path = write_plot(history, artifacts / PLOT_NAME) if plot and history else None
    return summary_lines(metrics, artifacts, plot_path)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    parser = argparse.ArgumentParser(prog="python -m tfcluster.cli.summary", description=__doc__.split("\n")[0])
    parser.add_argument("--artifacts", type=Path, required=True,
                        help="artifacts/<cluster>/<job> (its current copy) or a copy's directory")
    parser.add_argument("--no-plot", action="store_true", help="print the summary only")
    args = parser.parse_args(argv)
    try:
        artifacts = args.artifacts.absolute()
        lines = run(collected_dir(artifacts) or artifacts, plot=not args.no_plot)  # a job dir: its current copy
    except DemoError as exc:
        LOG.error("%s", exc)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
