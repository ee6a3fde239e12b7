"""The tfcluster contract: every name and rule the parts share, defined here once. Standard library only.

Imported by the trainer, the inventory, the control machine and the host code (shipped in the trainer release and
as the Ansible collection's module_utils). Where another language must hold a copy (the Terraform module's tag
keys and port), ``tests/unit/core/test_contract.py`` reads that copy and proves it equal; YAML and Jinja read these
names through the ``tfcluster.cluster.contract`` lookup and hold no copy.

TF_CONFIG shape (TensorFlow's)::

    {"cluster": {"chief": ["10.0.0.4:2222"], "worker": ["10.0.0.5:2222", ...], "ps": [...]},
     "task": {"type": "worker", "index": 0}}

Rules: task types are chief, worker, ps and evaluator, and the evaluator is never inside ``cluster``; every address
is ``host:port`` (port 1..65535) and used once; at most one chief; a task's index is in range.
``multi_worker_mirrored`` needs a chief or worker and no ps (worker 0 is the chief when there is none);
``parameter_server`` needs exactly one chief, a ps and a worker; ``mirrored`` and ``tpu`` run on one host.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# --- task types, slots, strategies ----------------------------------------------------------------------------------
CHIEF, WORKER, PS, EVALUATOR = "chief", "worker", "ps", "evaluator"
TASK_TYPES: tuple[str, ...] = (CHIEF, WORKER, PS, EVALUATOR)
CLUSTER_TASK_TYPES: tuple[str, ...] = (CHIEF, WORKER, PS)
# The order of hosts in every list the parts print: chief, ps, worker, evaluator; then index. Never launch order.
SLOT_ORDER: tuple[str, ...] = (CHIEF, PS, WORKER, EVALUATOR)
INVENTORY_GROUP = "tfcluster"  # the inventory group of every host; its children are SLOT_ORDER
STRATEGIES: tuple[str, ...] = ("multi_worker_mirrored", "parameter_server", "mirrored", "tpu")
STRATEGY_CHOICES: tuple[str, ...] = ("auto", *STRATEGIES)
NO_TF_CONFIG_STRATEGIES: frozenset[str] = frozenset({"mirrored", "tpu"})  # one host, no TF_CONFIG

# --- EC2 tags (the Terraform module writes them, the aws inventory source reads them) -------------------------------
TAG_PREFIX = "tfcluster:"
TAG_KEYS: dict[str, str] = {
    "cluster": "tfcluster:cluster",
    "task_type": "tfcluster:task_type",
    "task_index": "tfcluster:task_index",
    "port": "tfcluster:port",
    "gpus": "tfcluster:gpus",
    "ssh_user": "tfcluster:ssh_user",
    "expires": "tfcluster:expires",  # RFC 3339 UTC time after which the cluster counts as forgotten
}

# How the control machine reaches hosts (Terraform's `connect`, TFCLUSTER_CONNECT): public IP, private IP (VPN or a
# control machine inside the VPC), or private IP through a jump host.
CONNECT_MODES: tuple[str, ...] = ("public", "private", "bastion")

# --- ports ----------------------------------------------------------------------------------------------------------
TF_PORT = 2222  # the training (gRPC) port of a host that states none: Terraform's tf_port, host files, EC2 tags
LOCAL_BASE_PORT = 22220  # local slots share 127.0.0.1: slot i (chief, ps, then workers) listens on this + i

# --- the model dir (the chief's artifacts; DONE is written last) ----------------------------------------------------
DONE = "DONE"
MANIFEST = "MANIFEST.sha256"
STATUS = "status.json"
METRICS = "metrics.json"
CONFIG = "config.json"
EXPORT = "export"
CHECKPOINTS = "checkpoints"
BACKUP = "backup"
LOGS = "logs"
MODEL_DIR_FILES: tuple[str, ...] = (DONE, MANIFEST, STATUS, METRICS, CONFIG)

# --- the job: exit codes, states, unit, environment -----------------------------------------------------------------
EXIT_OK = 0
EXIT_FAILURE = 1  # training failed (the unit restarts it)
EXIT_BAD_INPUT = 2  # bad input, found before anything started
EXIT_PREEMPTED = 3  # stopped after a backup (a spot notice, or SIGTERM: the job's deadline, `systemctl stop`); not a
#                    failure and not restarted on this host; re-run the job to resume
EXIT_CODES: dict[str, int] = {"ok": EXIT_OK, "failure": EXIT_FAILURE, "bad_input": EXIT_BAD_INPUT,
                              "preempted": EXIT_PREEMPTED}
# What a task is, for systemd units and supervised processes alike. `lost`: it was running and its host or
# supervisor vanished. `timeout`: it ran into the job's deadline (MAX_DURATION) and was stopped after a backup.
INACTIVE, RUNNING, RESTARTING, SUCCEEDED = "inactive", "running", "restarting", "succeeded"
PREEMPTED, FAILED, STOPPED, LOST, TIMEOUT = "preempted", "failed", "stopped", "lost", "timeout"
JOB_STATES: tuple[str, ...] = (INACTIVE, RUNNING, RESTARTING, SUCCEEDED, PREEMPTED, FAILED, STOPPED, LOST, TIMEOUT)
UNIT_PREFIX = "tfcluster-"  # job units only: other tfcluster units are named tfcluster.<what>.service
# Beside a job's spec on its chief, after a verified collect (the collector role): autostop holds a terminating host
# while a finished job has no such mark.
COLLECTED_SUFFIX = ".collected"
# What keeps a host up for idle autostop: a job unit only, or an SSH login too (IDLE/MODE, the autostop role).
AUTOSTOP_MODES: tuple[str, ...] = ("jobs", "jobs_and_ssh")
# The environment every job gets (the built-in trainer and a user's script alike).
ENV_TF_CONFIG = "TF_CONFIG"
ENV_JOB = "TFCLUSTER_JOB"
ENV_MODEL_DIR = "TFCLUSTER_MODEL_DIR"
ENV_TASK_TYPE = "TFCLUSTER_TASK_TYPE"
ENV_TASK_INDEX = "TFCLUSTER_TASK_INDEX"
ENV_DATASETS = "TFCLUSTER_DATASETS"
ENV_GPUS = "TFCLUSTER_GPUS"  # GPUs the inventory declares for this host (the trainer requires them by default)
ENV_COLLECTIVE = "TFCLUSTER_COLLECTIVE"  # nccl | ring: the all-reduce of a MultiWorkerMirrored job
ENV_CHECKPOINT_S3 = "TFCLUSTER_CHECKPOINT_S3"  # s3://BUCKET/PREFIX of this job: backups and the model dir go there
ENV_S3_ENDPOINT_URL = "TFCLUSTER_S3_ENDPOINT_URL"  # an S3-compatible endpoint instead of AWS (tests: moto)
# TensorFlow sizes its inter-op thread pool from the CPUs a task may use; one thread deadlocks a ParameterServer
# worker (tfcluster/host/tfthreads.py). A task with fewer CPUs gets this floor unless the job sets the variable.
ENV_INTEROP_THREADS = "TF_NUM_INTEROP_THREADS"
INTEROP_THREADS_MIN = 2
# A job's own writable home on a host (<prefix>/var/lib/tfcluster/jobs/<job>/home, the job user's; docs/jobs.md): the
# variables that point programs and their caches into it, each a path relative to it ('' = the home itself). The
# tf_job role writes them into the env file; tfcluster/host/jobhome.py creates the directories and the Keras cache.
JOB_HOME_ENV: dict[str, str] = {"HOME": "", "XDG_CACHE_HOME": ".cache", "KERAS_HOME": ".keras",
                                "TFDS_DATA_DIR": "tensorflow_datasets", "HF_HOME": ".cache/huggingface",
                                "MPLCONFIGDIR": ".config/matplotlib", "CUDA_CACHE_PATH": ".cache/nv/ComputeCache"}
# status.json: what every task writes (the built-in trainer; a user's script may write the same keys) and the
# progress view reads. `state` is free text of the program (starting, training, exporting, done, ...). The pace
# (steps_per_sec, last_step_at, step_compute_s) is what the straggler and hang checks read (tfcluster/run/health.py).
STATUS_FIELDS: tuple[str, ...] = ("state", "task", "epoch", "epochs", "step", "steps_per_epoch",
                                  "examples_per_sec", "loss", "accuracy", "eta_seconds", "updated_at",
                                  "steps_per_sec", "last_step_at", "step_compute_s")


def unit_name(job: str) -> str:
    """The systemd unit of a job on every host."""
    return f"{UNIT_PREFIX}{job}.service"


# --- numbers in text that comes from outside (settings, tags, host files, a host's own files) ----------------------
def is_digits(text: object) -> bool:
    """``text`` is a whole number written in ASCII digits 0-9 (``str.isdigit()`` also takes '²', which ``int()``
    refuses, and '٣', which it reads as 3)."""
    return isinstance(text, str) and re.fullmatch(r"[0-9]+", text) is not None


# --- names that enter from users, host files, tags or Terraform -----------------------------------------------------
# Job ids tfcluster refuses because it uses these names itself, next to a job's own files: on a host a job has
# /etc/tfcluster/<job>.env and <job>.json, /var/lib/tfcluster/<job>/ (its model dir), /var/log/tfcluster/<job>.log,
# /run/tfcluster/<job>/ and the unit tfcluster-<job>.service; on the control machine artifacts/<cluster>/<job>/.
# Each entry is the stem (the name before its first '.') of a fixed name in those places, compared
# case-insensitively (artifacts/ may sit on a case-insensitive filesystem): autostop (/etc/tfcluster/autostop.json,
# /var/lib/tfcluster/autostop/ and /opt/tfcluster/autostop/: the autostop role), datasets
# (/var/lib/tfcluster/datasets/: the dataset and host_ready roles), firewall (/etc/tfcluster/firewall.nft,
# tfcluster.firewall.service), preflight (/run/tfcluster/preflight/: the tf_job role's remembered checks), logs
# (artifacts/<cluster>/logs/: provision and destroy logs), pkgs (/var/lib/tfcluster/pkgs/: the trainer role's
# script packages), prepared (/opt/tfcluster/prepared.sha256), requirements
# (/opt/tfcluster/requirements.lock), trainer, venv, wheelhouse (/opt/tfcluster/...), and jobs (kept free for a
# listing of jobs). tests/unit/core/test_contract.py scans the roles, templates and host code and fails on a fixed name
# under those directories (or a unit under UNIT_PREFIX) whose stem is not listed here.
RESERVED_JOB_IDS: tuple[str, ...] = ("autostop", "datasets", "firewall", "jobs", "logs", "pkgs", "preflight",
                                     "prepared", "requirements", "trainer", "venv", "wheelhouse")


@dataclass(frozen=True)
class NameRule:
    """A pattern a name must match, what it is, how to fix one that does not, and the names it may not take
    (compared lowercased)."""

    what: str
    pattern: str
    fix: str
    reserved: tuple[str, ...] = ()

    def problem(self, field: str, value: object) -> Problem | None:
        if not (isinstance(value, str) and re.fullmatch(self.pattern, value) and ".." not in value):
            return Problem(field, f"{value!r} is not a valid {self.what}", self.fix)
        if value.lower() in self.reserved:
            return Problem(field, f"{value!r} is a reserved {self.what}: tfcluster uses that name for its own files "
                           "beside the jobs' (on the hosts, or in artifacts/<cluster>/)",
                           f"choose another {self.what} (none of {', '.join(self.reserved)}, in any case), e.g. "
                           f"{value}-1")
        return None


# None of them can hold '/', '..', whitespace, quotes, ';', '$', '{' or '%': safe in a path, a shell word, Jinja and
# a systemd unit. A job id is none of RESERVED_JOB_IDS either.
NAME_RULES: dict[str, NameRule] = {
    "job": NameRule("job id", r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}",
                    "use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit, e.g. JOB=mnist-2",
                    RESERVED_JOB_IDS),
    "host": NameRule("host name", r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,62}[A-Za-z0-9])?",
                     "use 1-64 letters, digits, '_', '.' or '-', starting and ending with a letter or digit"),
    "cluster": NameRule("cluster name", r"[a-z][a-z0-9-]{1,30}[a-z0-9]",
                        "use 3-32 lowercase letters, digits or '-', starting with a letter (it names AWS resources)"),
    "ssh_user": NameRule("user name", r"[a-z_][a-z0-9_-]{0,31}",
                         "use a POSIX user name: lowercase letters, digits, '_' or '-', e.g. ubuntu"),
}


def name_problem(kind: str, value: object, field: str | None = None) -> Problem | None:
    """The problem of a name of ``kind`` (job, host, cluster, ssh_user), or None when it is valid."""
    return NAME_RULES[kind].problem(field or kind, value)


# --- problems -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """One thing wrong: where, what, and how to fix it."""

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


# --- TF_CONFIG ------------------------------------------------------------------------------------------------------
def chief_of(cluster: Mapping[str, Sequence[str]]) -> tuple[str, int]:
    """The task that writes the artifacts: the chief, or worker 0 when there is none (TensorFlow's rule)."""
    return (CHIEF, 0) if cluster.get(CHIEF) else (WORKER, 0)


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
        return len(self.cluster.get(CHIEF, ())) + len(self.cluster.get(WORKER, ()))


def _address_problems(task_type: str, index: int, address: object) -> list[Problem]:
    field = f"cluster.{task_type}[{index}]"
    if not isinstance(address, str) or not address.strip():
        return [Problem(field, f"address {address!r} is not a 'host:port' string",
                        f"give an address like '10.0.0.5:{TF_PORT}'")]
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        return [Problem(field, f"address {address!r} has no port",
                        f"write it as 'host:port', e.g. '10.0.0.5:{TF_PORT}'")]
    if not is_digits(port) or not 1 <= int(port) <= 65535:
        return [Problem(field, f"port {port!r} of {address!r} is not in 1..65535", "use a port between 1 and 65535")]
    return []


def _type_problem(task_type: object, addresses: object) -> Problem | None:
    if task_type == EVALUATOR:
        return Problem("cluster.evaluator", "the evaluator must not be listed inside cluster",
                       "remove 'evaluator' from cluster; give it only as the task of its own TF_CONFIG")
    if task_type not in CLUSTER_TASK_TYPES:
        return Problem(f"cluster.{task_type}", f"unknown task type {task_type!r}",
                       f"use one of {', '.join(CLUSTER_TASK_TYPES)}")
    if isinstance(addresses, str) or not isinstance(addresses, Sequence):
        return Problem(f"cluster.{task_type}", "must be a list of 'host:port' addresses",
                       f'write e.g. "{task_type}": ["10.0.0.5:{TF_PORT}"]')
    return None


def cluster_problems(cluster: object) -> list[Problem]:
    """Every structural problem of a ``cluster`` dict: types, addresses, duplicates, evaluator inside it."""
    example = f'{{"worker": ["10.0.0.5:{TF_PORT}"]}}'
    if not isinstance(cluster, Mapping):
        return [Problem("cluster", f"must be an object of task type -> address list, got {type(cluster).__name__}",
                        f"write e.g. {example}")]
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for task_type in sorted(cluster, key=str):
        addresses = cluster[task_type]
        wrong = _type_problem(task_type, addresses)
        if wrong:
            problems.append(wrong)
            continue
        for index, address in enumerate(addresses):
            found = _address_problems(task_type, index, address)
            where = f"{task_type}[{index}]"
            if not found and address in seen:
                found = [Problem(f"cluster.{where}", f"address {address} is also used by {seen[address]}",
                                 "give every task its own host:port")]
            problems.extend(found)
            if not found:
                seen[address] = where
    if len(cluster.get(CHIEF, ()) or ()) > 1:
        problems.append(Problem("cluster.chief", f"{len(cluster[CHIEF])} chiefs listed, at most one is allowed",
                                "keep one chief and make the others workers"))
    if not problems and not any(cluster.get(t) for t in CLUSTER_TASK_TYPES):
        problems.append(Problem("cluster", "the cluster is empty", f"list at least one task, e.g. {example}"))
    return problems


def resolve_strategy(cluster: Mapping[str, Sequence[str]] | None, strategy: str = "auto") -> str:
    """``auto``: no cluster -> mirrored; a ``ps`` task -> parameter_server; else multi_worker_mirrored."""
    if strategy != "auto":
        return strategy
    if not cluster:
        return "mirrored"
    return "parameter_server" if cluster.get(PS) else "multi_worker_mirrored"


def _counting_problems(resolved: str, counts: Mapping[str, int]) -> list[Problem]:
    need: list[tuple[bool, str, str, str]] = []
    if resolved == "multi_worker_mirrored":
        need = [(counts[CHIEF] + counts[WORKER] == 0, "cluster.worker",
                 "multi_worker_mirrored needs at least one worker or chief", "add workers to the cluster"),
                (counts[PS] > 0, "cluster.ps", "multi_worker_mirrored takes no ps tasks",
                 "remove the ps tasks, or use strategy parameter_server")]
    elif resolved == "parameter_server":
        need = [(counts[CHIEF] != 1, "cluster.chief", "parameter_server needs exactly one chief (the coordinator)",
                 "add one chief task"),
                (counts[PS] < 1, "cluster.ps", "parameter_server needs at least one ps task", "add a ps task"),
                (counts[WORKER] < 1, "cluster.worker", "parameter_server needs at least one worker",
                 "add a worker task")]
    elif sum(counts.values()) > 1:
        how = "one Cloud TPU VM (--tpu local)" if resolved == "tpu" else "all GPUs of one host"
        need = [(True, "cluster", f"{resolved} runs on one host with {how}, but {sum(counts.values())} tasks are "
                 "listed", "use one host without TF_CONFIG, or strategy multi_worker_mirrored")]
    return [Problem(field, message, fix) for wrong, field, message, fix in need if wrong]


def strategy_problems(cluster: Mapping[str, Sequence[str]] | None, strategy: str) -> list[Problem]:
    """Problems of a cluster for a strategy (``auto`` is resolved first)."""
    if strategy not in STRATEGY_CHOICES:
        return [Problem("strategy", f"unknown strategy {strategy!r}", f"use one of {', '.join(STRATEGY_CHOICES)}")]
    counts = {t: len((cluster or {}).get(t, ()) or ()) for t in CLUSTER_TASK_TYPES}
    return _counting_problems(resolve_strategy(cluster, strategy), counts)


def task_problems(cluster: Mapping[str, Sequence[str]], task_type: object, task_index: object) -> list[Problem]:
    """Problems of a task within a (structurally valid) cluster."""
    if task_type not in TASK_TYPES:
        return [Problem("task.type", f"unknown task type {task_type!r}", f"use one of {', '.join(TASK_TYPES)}")]
    if isinstance(task_index, bool) or not isinstance(task_index, int):
        return [Problem("task.index", f"index {task_index!r} is not an integer", "give a whole number from 0")]
    size = 1 if task_type == EVALUATOR else len(cluster.get(str(task_type), ()) or ())
    if 0 <= task_index < size:
        return []
    if task_type == EVALUATOR:
        return [Problem("task.index", f"evaluator index {task_index} is out of range",
                        "there is one evaluator: use index 0")]
    fix = f"use an index from 0 to {size - 1}" if size else f"add {task_type} tasks to cluster or change task.type"
    return [Problem("task.index", f"{task_type} index {task_index} is out of range (cluster has {size} {task_type} "
                    "task(s))", fix)]


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
    normal = {t: tuple(cluster[t]) for t in CLUSTER_TASK_TYPES if cluster.get(t)}
    return TFConfig(cluster=normal, task_type=task_type, task_index=task_index)


def _shape_problems(data: Mapping[str, Any], source: str) -> list[Problem]:
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
    return problems


def parse_tf_config(raw: str | None, strategy: str = "auto", source: str = ENV_TF_CONFIG) -> TFConfig | None:
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
    problems = _shape_problems(data, source)
    if problems:
        raise TFConfigError(problems, source)
    return build_tf_config(data["cluster"], data["task"]["type"], data["task"]["index"], strategy, source)


def tf_config_json(cluster: Mapping[str, Sequence[str]], task_type: str, task_index: int) -> str:
    """A host's TF_CONFIG from the cluster spec and its slot (byte-identical to ``TFConfig.to_json()``)."""
    return TFConfig(cluster={t: tuple(a) for t, a in cluster.items()}, task_type=task_type,
                    task_index=task_index).to_json()


# --- data for Ansible ------------------------------------------------------------------------------------------------
ANSIBLE_UNSAFE = "__ansible_unsafe"  # ansible-core's JSON mark of a string it must never template


def unsafe(value: Any) -> Any:
    """``value`` with every string marked ``{"__ansible_unsafe": text}``: what a host file, a tag, Terraform or a
    user's argument says reaches Ansible as data, never as a template (the inventory, the extra-vars file)."""
    if isinstance(value, str):
        return {ANSIBLE_UNSAFE: value}
    if isinstance(value, Mapping):
        return {key: unsafe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [unsafe(item) for item in value]
    return value


def contract_vars() -> dict[str, Any]:
    """The names YAML and Jinja use (the ``tfcluster.cluster.contract`` lookup): a plain JSON-able dict."""
    names = ("CHIEF", "WORKER", "PS", "EVALUATOR", "TASK_TYPES", "SLOT_ORDER", "INVENTORY_GROUP", "TAG_KEYS",
             "TF_PORT", "LOCAL_BASE_PORT", "DONE", "MANIFEST", "STATUS", "METRICS", "CONFIG", "EXPORT",
             "CHECKPOINTS", "BACKUP", "LOGS", "EXIT_CODES", "JOB_STATES", "UNIT_PREFIX", "COLLECTED_SUFFIX",
             "ENV_TF_CONFIG", "ENV_JOB", "ENV_MODEL_DIR", "ENV_TASK_TYPE", "ENV_TASK_INDEX", "ENV_DATASETS", "ENV_GPUS",
             "ENV_COLLECTIVE", "ENV_CHECKPOINT_S3", "ENV_S3_ENDPOINT_URL", "JOB_HOME_ENV", "STATUS_FIELDS",
             "RESERVED_JOB_IDS")
    out: dict[str, Any] = {name: globals()[name] for name in names}
    out["NAME_PATTERNS"] = {kind: rule.pattern for kind, rule in NAME_RULES.items()}
    return json.loads(json.dumps(out))  # tuples become lists, as YAML sees them
