#!/usr/bin/env python3
"""Benchmark: build the inventory for 10,000 hosts and compare with a 1-second budget.

Prints one row per case: median seconds of REPEAT runs and the ratio to the budget (< 1.0 is inside it).

Cases (10,000 hosts each, 1 chief + 1 ps + workers + 1 evaluator, parameter_server):
  validate       HostSpecs -> validated Cluster (host checks + tfcluster.contract cluster/strategy/task checks)
  list-no-tf     validate + build the --list document + JSON, without tfcluster_tf_config
  yaml-parse     PyYAML (libyaml) parsing the 10,000-host file alone — the floor of the static source
  static-file    the same from a YAML host file on disk (parse + validate + build + JSON, no tfcluster_tf_config)
  static-json    the same from a .json host file (no YAML parser)
  local-source   TFCLUSTER_WORKERS=10000 through the local source (no tfcluster_tf_config)
and, because every host's tfcluster_tf_config embeds the whole cluster (output grows with hosts squared), the full
`--list` document at 500, 1,000 and 2,000 hosts with the growth factor per doubling.

Usage: .venv/bin/python bench/inventory_build.py [--hosts 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from inventory.build import build_inventory, dumps, validate_cluster
from inventory.model import HostSpec, SourceResult
from inventory.sources.local import local_hosts
from inventory.sources.static import fetch_static, load_host_file

BUDGET_S = 1.0


def make_specs(n: int) -> SourceResult:
    """n hosts: chief, ps, n-3 workers, evaluator; each on its own private IP."""
    slots = [("chief", 0), ("ps", 0)] + [("worker", i) for i in range(n - 3)] + [("evaluator", 0)]
    specs = tuple(HostSpec(label=f"h{k}", task_type=t, task_index=i, address=f"10.{k >> 16 & 255}.{k >> 8 & 255}."
                           f"{k & 255}", port=2222, gpus=8) for k, (t, i) in enumerate(slots))
    return SourceResult(specs=specs, empty_fix="x")


def timed(fn: Callable[[], object], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    n = args.hosts
    found = make_specs(n)

    with tempfile.TemporaryDirectory() as tmp:
        host_file = Path(tmp) / "hosts.yml"
        host_file.write_text(yaml.safe_dump({"hosts": [
            {"address": s.address, "task_type": s.task_type, "task_index": s.task_index, "port": 2222, "gpus": 8}
            for s in found.specs]}))
        json_file = Path(tmp) / "hosts.json"
        json_file.write_text(json.dumps(yaml.safe_load(host_file.read_text())))
        cases: list[tuple[str, Callable[[], object]]] = [
            ("validate", lambda: validate_cluster(found, "parameter_server", "bench")),
            ("list-no-tf", lambda: dumps(build_inventory(validate_cluster(found, "parameter_server", "bench"),
                                                         embed_tf_config=False))),
            ("yaml-parse", lambda: load_host_file(host_file)),
            ("static-file", lambda: dumps(build_inventory(validate_cluster(
                fetch_static(host_file, 2222), "parameter_server", "bench"), embed_tf_config=False))),
            ("static-json", lambda: dumps(build_inventory(validate_cluster(
                fetch_static(json_file, 2222), "parameter_server", "bench"), embed_tf_config=False))),
            ("local-source", lambda: dumps(build_inventory(validate_cluster(
                local_hosts(n, 1024, "multi_worker_mirrored"), "auto", "bench"), embed_tf_config=False))),
        ]
        print(f"inventory build, {n} hosts, median of {args.repeat}, budget {BUDGET_S:.1f} s")
        print(f"{'case':<14}{'seconds':>10}{'ratio':>8}")
        worst = 0.0
        for name, fn in cases:
            seconds = timed(fn, args.repeat)
            if name != "yaml-parse":
                worst = max(worst, seconds)
            print(f"{name:<14}{seconds:>10.3f}{seconds / BUDGET_S:>8.2f}")

    print("\nfull --list with tfcluster_tf_config (each host embeds the whole cluster: size ~ hosts^2)")
    print(f"{'hosts':>7}{'seconds':>10}{'MB':>9}{'x/doubling':>12}")
    previous = None
    for size in (500, 1000, 2000):
        small = make_specs(size)
        text = ""

        def full(small: SourceResult = small) -> None:
            nonlocal text
            text = dumps(build_inventory(validate_cluster(small, "parameter_server", "bench")))

        seconds = timed(full, args.repeat)
        growth = f"{seconds / previous:.1f}" if previous else "-"
        print(f"{size:>7}{seconds:>10.3f}{len(text) / 1e6:>9.1f}{growth:>12}")
        previous = seconds
    print(f"\nverdict: slowest {n}-host case without per-host TF_CONFIG {worst:.3f} s "
          f"= {worst / BUDGET_S:.2f} of budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
