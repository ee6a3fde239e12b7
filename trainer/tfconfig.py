"""Parse, validate and build TF_CONFIG — the one set of rules every part of tfcluster shares.

Pure Python: no TensorFlow import, no I/O. The trainer validates its environment with it before TensorFlow
starts a server; the inventory builds every host's TF_CONFIG with it; the plan view and the tests import it.

TF_CONFIG shape (TensorFlow's)::

    {"cluster": {"chief": ["10.0.0.4:2222"], "worker": ["10.0.0.5:2222", ...], "ps": [...]},
     "task": {"type": "worker", "index": 0}}

Rules enforced here:

* task types are ``chief``, ``worker``, ``ps`` and ``evaluator``; the evaluator is never listed inside ``cluster``
  (TensorFlow requires that) but may be the task of a TF_CONFIG;
* every address is ``host:port`` with a port in 1..65535, and no address appears twice;
* at most one chief; a task's index is within its type's list;
* ``multi_worker_mirrored`` needs at least one chief or worker and no ps (worker 0 is the chief when there is no
  chief); ``parameter_server`` needs exactly one chief, at least one ps and at least one worker; ``mirrored`` and
  ``tpu`` run on one host and take no multi-task cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TASK_TYPES: tuple[str, ...] = ("chief", "worker", "ps", "evaluator")
CLUSTER_TASK_TYPES: tuple[str, ...] = ("chief", "worker", "ps")
STRATEGIES: tuple[str, ...] = ("multi_worker_mirrored", "parameter_server", "mirrored", "tpu")
STRATEGY_CHOICES: tuple[str, ...] = ("auto", *STRATEGIES)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a cluster or TF_CONFIG: where, what, and how to fix it."""

    field: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}. Fix: {self.fix}"


class TFConfigError(ValueError):
    """Raised with every problem found, so a user can fix them all in one go."""

    def __init__(self, problems: Sequence[Problem], source: str = "TF_CONFIG") -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source} is invalid ({len(self.problems)} problem(s)):\n{lines}")


@dataclass(frozen=True)
class TFConfig:
    """A validated TF_CONFIG. ``task_type``/``task_index`` are None for a cluster-only view."""

    cluster: Mapping[str, tuple[str, ...]]
    task_type: str | None = None
    task_index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cluster": {k: list(v) for k, v in self.cluster.items()}}
        if self.task_type is not None:
            out["task"] = {"type": self.task_type, "index": self.task_index}
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def chief(self) -> tuple[str, int]:
        return chief_of(self.cluster)

    @property
    def is_chief(self) -> bool:
        return self.task_type is not None and (self.task_type, self.task_index) == self.chief()

    @property
    def num_workers(self) -> int:
        """Tasks that hold model replicas under MultiWorkerMirrored: chief plus workers."""
        return len(self.cluster.get("chief", ())) + len(self.cluster.get("worker", ()))


def _address_problems(task_type: str, index: int, address: object) -> list[Problem]:
    field = f"cluster.{task_type}[{index}]"
    if not isinstance(address, str) or not address.strip():
        return [Problem(field, f"address {address!r} is not a 'host:port' string",
                        "give an address like '10.0.0.5:2222'")]
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        return [Problem(field, f"address {address!r} has no port", "write it as 'host:port', e.g. '10.0.0.5:2222'")]
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return [Problem(field, f"port {port!r} of {address!r} is not in 1..65535", "use a port between 1 and 65535")]
    return []


def cluster_problems(cluster: object) -> list[Problem]:
    """Every structural problem of a ``cluster`` dict: types, addresses, duplicates, evaluator inside it."""
    if not isinstance(cluster, Mapping):
        return [Problem("cluster", f"must be an object of task type -> address list, got {type(cluster).__name__}",
                        'write e.g. {"worker": ["10.0.0.5:2222", "10.0.0.6:2222"]}')]
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    total = 0
    for task_type in sorted(cluster, key=str):
        addresses = cluster[task_type]
        if task_type == "evaluator":
            problems.append(Problem("cluster.evaluator", "the evaluator must not be listed inside cluster",
                                    "remove 'evaluator' from cluster; give it only as the task of its own TF_CONFIG"))
            continue
        if task_type not in CLUSTER_TASK_TYPES:
            problems.append(Problem(f"cluster.{task_type}", f"unknown task type {task_type!r}",
                                    f"use one of {', '.join(CLUSTER_TASK_TYPES)}"))
            continue
        if isinstance(addresses, str) or not isinstance(addresses, Sequence):
            problems.append(Problem(f"cluster.{task_type}", "must be a list of 'host:port' addresses",
                                    f'write e.g. "{task_type}": ["10.0.0.5:2222"]'))
            continue
        for index, address in enumerate(addresses):
            total += 1
            found = _address_problems(task_type, index, address)
            problems.extend(found)
            if found:
                continue
            where = f"{task_type}[{index}]"
            if address in seen:
                problems.append(Problem(f"cluster.{where}", f"address {address} is also used by {seen[address]}",
                                        "give every task its own host:port"))
            else:
                seen[address] = where
    if len(cluster.get("chief", ()) or ()) > 1:
        problems.append(Problem("cluster.chief", f"{len(cluster['chief'])} chiefs listed, at most one is allowed",
                                "keep one chief and make the others workers"))
    if total == 0 and not problems:
        problems.append(Problem("cluster", "the cluster is empty",
                                "list at least one task, e.g. {\"worker\": [\"10.0.0.5:2222\"]}"))
    return problems


def resolve_strategy(cluster: Mapping[str, Sequence[str]] | None, strategy: str = "auto") -> str:
    """``auto``: no cluster -> mirrored; a ``ps`` task -> parameter_server; else multi_worker_mirrored."""
    if strategy != "auto":
        return strategy
    if not cluster:
        return "mirrored"
    if cluster.get("ps"):
        return "parameter_server"
    return "multi_worker_mirrored"


def strategy_problems(cluster: Mapping[str, Sequence[str]] | None, strategy: str) -> list[Problem]:
    """Problems of a cluster for a strategy (``auto`` is resolved first)."""
    if strategy not in STRATEGY_CHOICES:
        return [Problem("strategy", f"unknown strategy {strategy!r}", f"use one of {', '.join(STRATEGY_CHOICES)}")]
    resolved = resolve_strategy(cluster, strategy)
    counts = {t: len((cluster or {}).get(t, ()) or ()) for t in CLUSTER_TASK_TYPES}
    total = sum(counts.values())
    problems: list[Problem] = []
    if resolved == "multi_worker_mirrored":
        if counts["chief"] + counts["worker"] == 0:
            problems.append(Problem("cluster.worker", "multi_worker_mirrored needs at least one worker or chief",
                                    "add workers to the cluster"))
        if counts["ps"]:
            problems.append(Problem("cluster.ps", "multi_worker_mirrored takes no ps tasks",
                                    "remove the ps tasks, or use strategy parameter_server"))
    elif resolved == "parameter_server":
        if counts["chief"] != 1:
            problems.append(Problem("cluster.chief", "parameter_server needs exactly one chief (the coordinator)",
                                    "add one chief task"))
        if counts["ps"] < 1:
            problems.append(Problem("cluster.ps", "parameter_server needs at least one ps task", "add a ps task"))
        if counts["worker"] < 1:
            problems.append(Problem("cluster.worker", "parameter_server needs at least one worker",
                                    "add a worker task"))
    elif total > 1:
        how = "a TPU cluster resolver (--tpu)" if resolved == "tpu" else "all GPUs of one host"
        problems.append(Problem("cluster", f"{resolved} runs on one host with {how}, but {total} tasks are listed",
                                "use one host without TF_CONFIG, or strategy multi_worker_mirrored"))
    return problems


def task_problems(cluster: Mapping[str, Sequence[str]], task_type: object, task_index: object) -> list[Problem]:
    """Problems of a task within a (structurally valid) cluster."""
    if task_type not in TASK_TYPES:
        return [Problem("task.type", f"unknown task type {task_type!r}", f"use one of {', '.join(TASK_TYPES)}")]
    if isinstance(task_index, bool) or not isinstance(task_index, int):
        return [Problem("task.index", f"index {task_index!r} is not an integer", "give a whole number from 0")]
    if task_type == "evaluator":
        if task_index != 0:
            return [Problem("task.index", f"evaluator index {task_index} is out of range",
                            "there is one evaluator: use index 0")]
        return []
    size = len(cluster.get(str(task_type), ()) or ())
    if not 0 <= task_index < size:
        return [Problem("task.index", f"{task_type} index {task_index} is out of range (cluster has {size} "
                        f"{task_type} task(s))", f"use an index from 0 to {size - 1}" if size else
                        f"add {task_type} tasks to cluster or change task.type")]
    return []


def _normalise(cluster: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    return {t: tuple(cluster[t]) for t in CLUSTER_TASK_TYPES if cluster.get(t)}


def build_tf_config(cluster: Mapping[str, Sequence[str]], task_type: str | None, task_index: int | None,
                    strategy: str = "auto", source: str = "TF_CONFIG") -> TFConfig:
    """A validated TFConfig; raises TFConfigError listing every problem."""
    problems = cluster_problems(cluster)
    if not problems:
        problems = strategy_problems(cluster, strategy)
        if task_type is not None or task_index is not None:
            problems += task_problems(cluster, task_type, task_index)
    if problems:
        raise TFConfigError(problems, source)
    return TFConfig(cluster=_normalise(cluster), task_type=task_type, task_index=task_index)


def parse_tf_config(raw: str | None, strategy: str = "auto", source: str = "TF_CONFIG") -> TFConfig | None:
    """Parse and validate a TF_CONFIG string. None or blank -> None (no cluster: single host)."""
    if raw is None or not raw.strip():
        if strategy in ("multi_worker_mirrored", "parameter_server"):
            raise TFConfigError([Problem(source, f"is not set, but strategy {strategy} needs a cluster",
                                         "set TF_CONFIG, or use --strategy mirrored for one host")], source)
        return None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TFConfigError([Problem(source, f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                                     'write it as {"cluster": {...}, "task": {"type": "worker", "index": 0}}')],
                            source) from exc
    if not isinstance(data, dict):
        raise TFConfigError([Problem(source, f"must be a JSON object, got {type(data).__name__}",
                                     'write it as {"cluster": {...}, "task": {...}}')], source)
    problems: list[Problem] = []
    unknown = sorted(set(data) - {"cluster", "task", "environment", "rpc_layer"})
    if unknown:
        problems.append(Problem(source, f"unknown key(s) {', '.join(unknown)}", "keep only 'cluster' and 'task'"))
    if "cluster" not in data:
        problems.append(Problem("cluster", "is missing", 'add "cluster": {"worker": ["host:port", ...]}'))
    task = data.get("task")
    if not isinstance(task, dict):
        problems.append(Problem("task", "is missing or not an object", 'add "task": {"type": "worker", "index": 0}'))
    elif "type" not in task or "index" not in task:
        problems.append(Problem("task", "needs both 'type' and 'index'",
                                'write "task": {"type": "worker", "index": 0}'))
    if problems:
        raise TFConfigError(problems, source)
    return build_tf_config(data["cluster"], task["type"], task["index"], strategy, source)


def chief_of(cluster: Mapping[str, Sequence[str]]) -> tuple[str, int]:
    """The task that writes checkpoints: the chief, or worker 0 when there is none."""
    return ("chief", 0) if cluster.get("chief") else ("worker", 0)
