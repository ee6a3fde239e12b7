#!/usr/bin/env python3
"""Benchmark: `inventory/slots.py --list` at 1,000 and 10,000 hosts, each figure against its goal (issue 13).

Goals at 10,000 hosts: under 1 s and under 10 MB, growing linearly with the host count. Each host carries its slot;
its TF_CONFIG is built by the role from the group var ``tfcluster_cluster_spec`` (before, every host embedded the
whole cluster: ~20 MB at 1,000 hosts, growing with hosts squared; the `before` row recomputes that size).

Cases (1 chief + 1 ps + workers + 1 evaluator, parameter_server, ssh hosts with a user and GPUs):
  script-local     the real script as Ansible runs it (a subprocess; Python start included), local source
  script-json      the real script, static source, a .json host file
  script-yaml      the real script, static source, a .yml host file (PyYAML with libyaml): the parser alone (the
                   `yaml-parse` row) takes most of the budget at 10,000 hosts; a .json host file is the fast path
  terraform        in process: a `terraform output -json` document -> validated cluster -> --list text
  before           the bytes that per-host TF_CONFIG embedding would add (the old document; size only)

Usage: .venv/bin/python -m bench.inventory_build [--hosts 1000 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tfcluster.core.contract import CHIEF, EVALUATOR, PS, WORKER, tf_config_json
from tfcluster.inventory.build import build_inventory, dumps, validate_cluster
from tfcluster.inventory.sources.static import load_host_file
from tfcluster.inventory.sources.terraform import Overrides, terraform_hosts

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "inventory" / "slots.py"
GOAL_S = 1.0  # at 10,000 hosts
GOAL_MB = 10.0  # at 10,000 hosts
GOAL_HOSTS = 10_000


def slots(n: int) -> list[tuple[str, int]]:
    return [(CHIEF, 0), (PS, 0)] + [(WORKER, i) for i in range(n - 3)] + [(EVALUATOR, 0)]


def host_entries(n: int) -> list[dict[str, Any]]:
    """n hosts as a host file lists them: each on its own private IP, with a user and 8 GPUs."""
    return [{"address": f"10.{k >> 16 & 255}.{k >> 8 & 255}.{k & 255}", "task_type": t, "task_index": i,
             "ssh_user": "ubuntu", "gpus": 8} for k, (t, i) in enumerate(slots(n))]


def terraform_outputs(n: int) -> dict[str, Any]:
    hosts = [{"name": f"{h['task_type']}-{h['task_index']}", "task_type": h["task_type"],
              "task_index": h["task_index"], "private_ip": h["address"], "public_ip": None, "gpus": 8, "port": 2222,
              "connection": "ssh", "ssh_user": "ubuntu", "instance_id": f"i-{k:017x}", "instance_type": "p5.48xlarge"}
             for k, h in enumerate(host_entries(n))]
    return {"hosts": hosts, "cluster_name": "bench", "connect": "private", "bastion": None}


def timed(fn: Callable[[], str], repeat: int) -> tuple[float, int]:
    """Median seconds of ``repeat`` runs and the size in bytes of what the last one printed."""
    runs, text = [], ""
    for _ in range(repeat):
        start = time.perf_counter()
        text = fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), len(text.encode())


def script(env: dict[str, str]) -> Callable[[], str]:
    full = {**os.environ, **env, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    return lambda: subprocess.run([sys.executable, str(SCRIPT), "--list"], env=full, capture_output=True, text=True,
                                  check=True).stdout


def in_process_terraform(n: int) -> Callable[[], str]:
    outputs = terraform_outputs(n)
    return lambda: dumps(build_inventory(validate_cluster(terraform_hosts(outputs, Overrides(port=2222)),
                                                          "parameter_server", "bench")), compact=True)


def embedded_tf_config_bytes(n: int) -> int:
    """What the old document added: every host's TF_CONFIG JSON (the whole cluster) as a JSON string value."""
    cluster = validate_cluster(terraform_hosts(terraform_outputs(n), Overrides(port=2222)), "parameter_server", "b")
    return sum(len(json.dumps(tf_config_json(cluster.spec, h.task_type, h.task_index))) for h in cluster.hosts)


def cases(n: int, tmp: Path) -> list[tuple[str, Callable[[], str]]]:
    """(name, run) of every case; `yaml-parse` is the YAML parser alone, shown for scale (no size, no verdict)."""
    entries = host_entries(n)
    as_json, as_yaml = tmp / f"hosts{n}.json", tmp / f"hosts{n}.yml"
    as_json.write_text(json.dumps({"hosts": entries}))
    as_yaml.write_text(yaml.safe_dump({"hosts": entries}))
    static = {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_STRATEGY": "parameter_server"}
    return [
        ("script-local", script({"TFCLUSTER_SOURCE": "local", "TFCLUSTER_WORKERS": str(n - 2),
                                 "TFCLUSTER_STRATEGY": "parameter_server", "TFCLUSTER_BASE_PORT": "20000"})),
        ("script-json", script({**static, "TFCLUSTER_HOSTS_FILE": str(as_json)})),
        ("script-yaml", script({**static, "TFCLUSTER_HOSTS_FILE": str(as_yaml)})),
        ("yaml-parse", lambda: str(len(load_host_file(as_yaml)["hosts"]))),
        ("terraform", in_process_terraform(n)),
    ]


def verdict(hosts: int, seconds: float, mb: float) -> str:
    if hosts != GOAL_HOSTS:
        return ""
    ok = seconds < GOAL_S and mb < GOAL_MB
    return f"{'ok' if ok else 'OVER'} (goal < {GOAL_S:.0f} s, < {GOAL_MB:.0f} MB)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1_000, GOAL_HOSTS])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"inventory --list, median of {args.repeat}; goal at {GOAL_HOSTS} hosts: < {GOAL_S:.0f} s and "
          f"< {GOAL_MB:.0f} MB, linear")
    print(f"{'case':<14}{'hosts':>7}{'seconds':>9}{'MB':>8}{'B/host':>8}  verdict")
    per_host: dict[str, list[float]] = {}
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.hosts:
            for name, fn in cases(n, Path(tmp)):
                seconds, size = timed(fn, args.repeat)
                if name == "yaml-parse":
                    print(f"{name:<14}{n:>7}{seconds:>9.3f}{'':>8}{'':>8}  (PyYAML + libyaml alone)")
                    continue
                per_host.setdefault(name, []).append(size / n)
                line = verdict(n, seconds, size / 1e6)
                failed |= "OVER" in line
                print(f"{name:<14}{n:>7}{seconds:>9.3f}{size / 1e6:>8.2f}{size / n:>8.0f}  {line}")
    smallest = min(args.hosts)
    extra = embedded_tf_config_bytes(smallest)
    print(f"{'before':<14}{smallest:>7}{'':>9}{extra / 1e6:>8.2f}{extra / smallest:>8.0f}  per-host TF_CONFIG alone "
          f"(grows with hosts squared: x{(max(args.hosts) / smallest) ** 2:.0f} at {max(args.hosts)} hosts)")
    growth = {name: sizes[-1] / sizes[0] for name, sizes in per_host.items()}
    print("bytes per host, largest vs smallest run (1.00 = linear): "
          + ", ".join(f"{name} {g:.2f}" for name, g in growth.items()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
