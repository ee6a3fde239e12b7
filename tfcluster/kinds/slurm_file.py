"""The Slurm kind's cluster file and what a submission writes: checked fields, the job's layout on the shared
directory, the job spec every task reads, and the batch script. Pure: nothing here contacts the cluster.

The cluster file (examples/slurm.example.yml; docs/slurm.md) names the login node (address, user, port, host keys,
optionally an identity file and its python), the partition, account and QOS, the allocation (nodes, tasks_per_node,
gpus_per_node, cpus_per_task), the declared task layout (default: a chief and workers), the base port, the shared
directory and the Python environment (an existing venv, a module, or one tfcluster builds on the shared directory
from the hash-pinned lock). Every field is checked where it enters (:func:`parse_cluster_file`): each problem as
``FILE: FIELD: MESSAGE. Fix: FIX``, all at once, before anything is contacted.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfcluster.core import contract, slurm
from tfcluster.core.addresses import address_problem, is_int, port_problem
from tfcluster.core.contract import Problem
from tfcluster.core.sshkeys import parse_host_keys
from tfcluster.kinds.base import KindError

FIX_SHAPE = "see examples/slurm.example.yml"
TOP_KEYS = frozenset({"cluster_name", "login", "partition", "account", "qos", "nodes", "tasks_per_node",
                      "gpus_per_node", "cpus_per_task", "tasks", "port", "shared_dir", "python", "grace"})
LOGIN_KEYS = frozenset({"host", "user", "port", "host_keys", "identity_file", "python"})
PYTHON_KEYS = ("venv", "module", "build")
BUILDS = ("cpu", "gpu")  # the hash-pinned lock a built venv installs (python_runtime's requirements[-gpu].lock)
# What may stand in an #SBATCH line or a path on the cluster unquoted: no space, quote, '$', ';', '..' or newline.
_SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
_PATH = re.compile(r"/[A-Za-z0-9_./+-]*")
_MODULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./+-]{0,127}")
DEFAULT_GRACE = 120  # seconds of --signal=TERM@GRACE: the backup before the time limit or a preemption
MAX_NODES = 4096
SAMPLE_NODES = "node[1-{n}]"  # `make plan`'s sample allocation (string order differs from Slurm's from 10 nodes)


@dataclass(frozen=True)
class Login:
    host: str
    user: str
    port: int = 22
    host_keys: tuple[str, ...] = ()
    identity_file: Path | None = None
    python: str = "python3"  # the login node's interpreter for tfcluster's own (stdlib) tools


@dataclass(frozen=True)
class Python:
    """The jobs' Python: exactly one of an existing venv, a module to load, or a venv built from the lock."""

    venv: str = ""
    module: str = ""
    build: str = ""

    def interpreter(self, shared_dir: str, lock_digest: str = "") -> str:
        if self.venv:
            return f"{self.venv}/bin/python"
        if self.build:
            return f"{shared_dir}/venvs/{lock_digest or '<lock sha256>'}/bin/python"
        return "python3"  # from the module


@dataclass(frozen=True)
class ClusterFile:
    """A checked cluster file (every field valid)."""

    path: Path
    login: Login
    partition: str
    nodes: int
    tasks_per_node: int
    shared_dir: str
    python: Python
    tasks: Mapping[str, int]
    cluster_name: str = ""
    account: str = ""
    qos: str = ""
    gpus_per_node: int = 0
    cpus_per_task: int = 0
    port: int = contract.TF_PORT
    grace: int = DEFAULT_GRACE

    @property
    def task_count(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def gpus_per_task(self) -> int:
        return self.gpus_per_node // self.tasks_per_node if self.gpus_per_node else 0


class ClusterFileError(KindError):
    """Every problem of a cluster file."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


# --- checking the cluster file --------------------------------------------------------------------------------------
def _whole(where: str, key: str, value: object, problems: list[Problem], *, low: int, high: int = 1 << 20) -> int:
    if not is_int(value) or not low <= value <= high:  # type: ignore[operator]
        problems.append(Problem(f"{where}: {key}", f"{value!r} is not a whole number in {low}..{high}",
                                f"give {key} as a number, e.g. {key}: {max(low, 1)}"))
        return low
    return int(value)  # type: ignore[arg-type]


def _name(where: str, key: str, value: object, problems: list[Problem], required: bool = True) -> str:
    if value in (None, "") and not required:
        return ""
    if not isinstance(value, str) or not _SLURM_NAME.fullmatch(value):
        problems.append(Problem(f"{where}: {key}", "is missing" if value in (None, "") else
                                f"{value!r} is not a Slurm name", f"give {key} as Slurm spells it (letters, digits, "
                                "'_', '.', '+', '-'), e.g. `sinfo -s` lists the partitions"))
        return ""
    return value


def _path(where: str, key: str, value: object, problems: list[Problem], fix: str) -> str:
    if not isinstance(value, str) or not _PATH.fullmatch(value) or ".." in value.split("/") or value == "/":
        problems.append(Problem(f"{where}: {key}", "is missing" if value in (None, "") else
                                f"{value!r} is not an absolute path of plain characters (letters, digits, '_', '.', "
                                "'+', '-', '/')", fix))
        return ""
    return value.rstrip("/")


def _login(where: str, value: object, base: Path, problems: list[Problem]) -> Login:
    if not isinstance(value, Mapping):
        problems.append(Problem(f"{where}: login", "is missing or not a mapping",
                                "give login: {host: ..., user: ..., host_keys: [...]}" + f" ({FIX_SHAPE})"))
        return Login(host="", user="")
    for key in sorted(set(value) - LOGIN_KEYS, key=str):
        problems.append(Problem(f"{where}: login.{key}", "is not a login field",
                                f"use {', '.join(sorted(LOGIN_KEYS))}"))
    host = value.get("host")
    problem = address_problem(f"{where}: login.host", host, "give the login node's IP address or DNS name")
    user = value.get("user")
    user_problem = contract.name_problem("ssh_user", user, f"{where}: login.user")
    port = value.get("port", 22)
    port_bad = port_problem(f"{where}: login.port", port, "give the login node's SSH port, e.g. 22")
    keys, key_problems = parse_host_keys(f"{where}: login.host_keys", value.get("host_keys"))
    identity = value.get("identity_file")
    identity_path = None
    if identity is not None:
        identity_path = Path(str(identity)).expanduser()
        identity_path = identity_path if identity_path.is_absolute() else base / identity_path
        if not identity_path.is_file():
            problems.append(Problem(f"{where}: login.identity_file", f"{identity_path} does not exist",
                                    "give the private key you log in to the login node with (or leave it out: "
                                    "ssh's own keys and agent)"))
    python = value.get("python", "python3")
    if not isinstance(python, str) or not (_PATH.fullmatch(python) or _MODULE.fullmatch(python)):
        problems.append(Problem(f"{where}: login.python", f"{python!r} is not a program name or absolute path",
                                "give the login node's python3 (tfcluster's tools there use its standard library)"))
        python = "python3"
    problems += [p for p in (problem, user_problem, port_bad) if p] + key_problems
    return Login(host=str(host or ""), user=str(user or ""), port=port if is_int(port) else 22, host_keys=keys,
                 identity_file=identity_path, python=python)


def _python(where: str, value: object, problems: list[Problem]) -> Python:
    fix = ("give exactly one of python: {venv: /shared/envs/tf} (an existing venv every node sees), "
           "{module: tensorflow/2.21} (`module load` it) or {build: cpu} (tfcluster builds one on shared_dir)")
    if not isinstance(value, Mapping) or len([k for k in PYTHON_KEYS if value.get(k)]) != 1 or \
            set(value) - set(PYTHON_KEYS):
        problems.append(Problem(f"{where}: python", "is missing, or does not give exactly one of "
                                f"{', '.join(PYTHON_KEYS)}", fix))
        return Python()
    if value.get("venv"):
        return Python(venv=_path(where, "python.venv", value["venv"], problems, fix))
    if value.get("module"):
        module = value["module"]
        if not isinstance(module, str) or not _MODULE.fullmatch(module):
            problems.append(Problem(f"{where}: python.module", f"{module!r} is not a module name", fix))
            return Python()
        return Python(module=module)
    build = value.get("build")
    if build not in BUILDS:
        problems.append(Problem(f"{where}: python.build", f"{build!r} is not one of {', '.join(BUILDS)}", fix))
        return Python()
    return Python(build=str(build))


def _tasks(where: str, value: object, count: int, problems: list[Problem]) -> dict[str, int]:
    """The declared layout: {task type: count} in slot order; default a chief and count-1 workers."""
    if value is None:
        return {contract.CHIEF: 1, contract.WORKER: count - 1} if count > 1 else {contract.WORKER: 1}
    fix = f"declare the tasks by type, e.g. tasks: {{chief: 1, worker: {max(count - 1, 1)}}}"
    if not isinstance(value, Mapping):
        problems.append(Problem(f"{where}: tasks", "is not a mapping of task type to count", fix))
        return {}
    layout: dict[str, int] = {}
    for key, number in value.items():
        if key not in contract.SLOT_ORDER:
            problems.append(Problem(f"{where}: tasks.{key}", "is not a task type",
                                    f"use {', '.join(contract.SLOT_ORDER)}"))
        elif not is_int(number) or number < 0:
            problems.append(Problem(f"{where}: tasks.{key}", f"{number!r} is not a whole number >= 0", fix))
        else:
            layout[key] = number
    total = sum(layout.values())
    if not problems and total != count:
        problems.append(Problem(f"{where}: tasks", f"declares {total} task(s) but the allocation runs {count} "
                                "(nodes x tasks_per_node)", f"declare {count} tasks, or change nodes/tasks_per_node"))
    return {t: layout[t] for t in contract.SLOT_ORDER if layout.get(t)}


def _layout_problems(where: str, layout: Mapping[str, int], strategy: str, port: int, per_node: int) -> list[Problem]:
    """The layout as TensorFlow will see it, on a sample allocation (every task's TF_CONFIG is built the same)."""
    if not layout:
        return []
    nodes = slurm.expand_hostlist(SAMPLE_NODES.format(n=max(1, sum(layout.values()) // max(per_node, 1))))
    step = slurm.sample_step(nodes, per_node)
    try:
        slurm.resolve(step, layout, port, strategy)
    except slurm.SlurmError as exc:
        return [Problem(f"{where}: tasks", f"{p.field}: {p.message}", p.fix) for p in exc.problems]
    return []


def parse_cluster_file(data: object, path: Path, strategy: str = "auto") -> ClusterFile:
    """A checked cluster file; ClusterFileError with every problem."""
    where = str(path)
    if not isinstance(data, Mapping):
        raise ClusterFileError([Problem(where, "is not a mapping of fields", FIX_SHAPE)])
    problems: list[Problem] = [Problem(f"{where}: {key}", "is not a cluster file field",
                                       f"use {', '.join(sorted(TOP_KEYS))}") for key in sorted(set(data) - TOP_KEYS,
                                                                                                 key=str)]
    login = _login(where, data.get("login"), path.parent, problems)
    partition = _name(where, "partition", data.get("partition"), problems)
    account = _name(where, "account", data.get("account"), problems, required=False)
    qos = _name(where, "qos", data.get("qos"), problems, required=False)
    nodes = _whole(where, "nodes", data.get("nodes"), problems, low=1, high=MAX_NODES)
    per_node = _whole(where, "tasks_per_node", data.get("tasks_per_node", 1), problems, low=1, high=256)
    gpus = _whole(where, "gpus_per_node", data.get("gpus_per_node", 0), problems, low=0, high=64)
    cpus = _whole(where, "cpus_per_task", data.get("cpus_per_task", 0), problems, low=0, high=4096)
    port = _whole(where, "port", data.get("port", contract.TF_PORT), problems, low=1, high=65535 - per_node)
    grace = _whole(where, "grace", data.get("grace", DEFAULT_GRACE), problems, low=10, high=3600)
    if gpus and gpus % per_node:
        problems.append(Problem(f"{where}: gpus_per_node", f"{gpus} GPUs do not split evenly over {per_node} tasks",
                                "give each task the same number of GPUs (gpus_per_node a multiple of "
                                "tasks_per_node)"))
    shared = _path(where, "shared_dir", data.get("shared_dir"), problems,
                   "give a directory every node and the login node see at the same path (NFS, Lustre, GPFS...)")
    python = _python(where, data.get("python"), problems)
    name = data.get("cluster_name") or ""
    if name and (problem := contract.name_problem("cluster", name, f"{where}: cluster_name")):
        problems.append(problem)
    before = len(problems)
    layout = _tasks(where, data.get("tasks"), nodes * per_node, problems)
    if len(problems) == before:
        problems += _layout_problems(where, layout, strategy, port, per_node)
    if problems:
        raise ClusterFileError(problems)
    return ClusterFile(path=path, login=login, partition=partition, account=account, qos=qos, nodes=nodes,
                       tasks_per_node=per_node, gpus_per_node=gpus, cpus_per_task=cpus, tasks=layout, port=port,
                       shared_dir=shared, python=python, cluster_name=str(name), grace=grace)


def load_cluster_file(path: Path | None, strategy: str = "auto") -> ClusterFile:
    """Read and check ``SLURM=FILE`` (YAML or JSON)."""
    if path is None:
        raise ClusterFileError([Problem("SLURM", "is not set", "name the cluster file: make train CLUSTER=slurm "
                                        "SLURM=slurm.yml (" + FIX_SHAPE + ")")])
    if not path.is_file():
        raise ClusterFileError([Problem("SLURM", f"{path} does not exist or is not a file", FIX_SHAPE)])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterFileError([Problem("SLURM", f"cannot read {path}: {exc}", "make it readable UTF-8 text")]) \
            from None
    import yaml

    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise ClusterFileError([Problem("SLURM", f"{path} is not valid YAML/JSON{at}",
                                        f"fix its syntax ({FIX_SHAPE})")]) from None
    return parse_cluster_file(data, path, strategy)


# --- the job on the shared directory --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Where a job's files live on the shared directory (content-addressed where they can be)."""

    shared_dir: str
    cluster: str
    job: str

    @property
    def job_dir(self) -> str:
        return f"{self.shared_dir}/jobs/{self.cluster}/{self.job}"

    def release(self, digest: str) -> str:
        return f"{self.shared_dir}/releases/{digest}"

    def datasets(self, digest: str) -> str:
        return f"{self.shared_dir}/datasets/{digest}"

    def venv(self, digest: str) -> str:
        return f"{self.shared_dir}/venvs/{digest}"

    def spec(self, digest: str) -> str:
        return f"{self.job_dir}/spec-{digest[:16]}.json"

    @property
    def submitted(self) -> str:
        return f"{self.job_dir}/submitted.json"

    def chief_dir(self, slot: str) -> str:
        return f"{self.job_dir}/tasks/{slot}"


def job_name(cluster: str, job: str) -> str:
    """The Slurm job name: tfcluster-<cluster>-<job> (a second `make train` finds a queued job by it)."""
    return f"tfcluster-{cluster}-{job}"


def slurm_time(seconds: int) -> str:
    """``--time`` in Slurm's D-HH:MM:SS, rounded up to whole minutes (Slurm's own resolution)."""
    minutes = -(-int(seconds) // 60)
    days, rest = divmod(minutes, 1440)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


@dataclass(frozen=True)
class Submission:
    """Everything one submission needs, in plain values: the cluster file, the job, the staged digests."""

    cluster: ClusterFile
    cluster_name: str
    job: str
    release: str  # the release's digest
    spec: Mapping[str, Any]
    datasets: str = ""  # the datasets' digest ('' none)
    venv: str = ""  # the built venv's lock digest ('' none)
    max_duration: int | None = None
    layout: Layout = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout", Layout(self.cluster.shared_dir, self.cluster_name, self.job))

    @property
    def spec_digest(self) -> str:
        import hashlib

        return hashlib.sha256(json.dumps(self.spec, sort_keys=True).encode()).hexdigest()

    @property
    def spec_path(self) -> str:
        return self.layout.spec(self.spec_digest)

    @property
    def script_path(self) -> str:
        return f"{self.layout.job_dir}/run-{self.spec_digest[:16]}.sbatch"

    @property
    def python(self) -> str:
        return self.cluster.python.interpreter(self.cluster.shared_dir, self.venv)


def render_sbatch(sub: Submission) -> str:
    """The batch script: the allocation in #SBATCH lines, one fail-fast srun step of tfcluster.host.slurm_task, run
    from the release (the job directory, which the tasks write, is never first on sys.path). Every value in it was
    checked (names, numbers, plain paths); the shell words are quoted all the same."""
    cf, layout = sub.cluster, sub.layout
    lines = ["#!/bin/bash",
             f"# tfcluster job {sub.job} of cluster {sub.cluster_name}: written by `make train CLUSTER=slurm` "
             "(tfcluster/kinds/slurm.py)",
             f"#SBATCH --job-name={job_name(sub.cluster_name, sub.job)}",
             f"#SBATCH --partition={cf.partition}"]
    lines += [f"#SBATCH --account={cf.account}"] if cf.account else []
    lines += [f"#SBATCH --qos={cf.qos}"] if cf.qos else []
    lines += [f"#SBATCH --nodes={cf.nodes}", f"#SBATCH --ntasks-per-node={cf.tasks_per_node}"]
    lines += [f"#SBATCH --cpus-per-task={cf.cpus_per_task}"] if cf.cpus_per_task else []
    lines += [f"#SBATCH --gpus-per-node={cf.gpus_per_node}"] if cf.gpus_per_node else []
    lines += [f"#SBATCH --time={slurm_time(sub.max_duration)}"] if sub.max_duration else []
    lines += [f"#SBATCH --signal=TERM@{cf.grace}", "#SBATCH --requeue", "#SBATCH --open-mode=append",
              f"#SBATCH --output={layout.job_dir}/logs/batch.out", f"#SBATCH --chdir={layout.release(sub.release)}",
              "set -u"]
    lines += [f"module load {shlex.quote(cf.python.module)}"] if cf.python.module else []
    lines += [f"export PYTHONPATH={shlex.quote(layout.release(sub.release))}"]
    step = ["srun", "--kill-on-bad-exit=1", "--distribution=block", f"--nodes={cf.nodes}",
            f"--ntasks-per-node={cf.tasks_per_node}"]
    step += [f"--gpus-per-task={cf.gpus_per_task}"] if cf.gpus_per_node and cf.tasks_per_node > 1 else []
    step += [sub.python, "-m", "tfcluster.host.slurm_task", "run", sub.spec_path]
    lines.append("exec " + shlex.join(step))
    return "\n".join(lines) + "\n"


def job_spec(cf: ClusterFile, *, job: str, layout: Layout, release: str, datasets: str, strategy: str,
             program: Mapping[str, Any], legacy_keras: bool, max_duration: int | None) -> dict[str, Any]:
    """What every task reads (tfcluster.host.slurm_task.load_spec): the layout, the program and its environment."""
    resolved = contract.resolve_strategy({t: ["x"] * n for t, n in cf.tasks.items() if t != contract.EVALUATOR},
                                         strategy)
    collective = "nccl" if resolved == "multi_worker_mirrored" and cf.gpus_per_node > 0 else "ring"
    return {"job": job, "job_dir": layout.job_dir, "release": layout.release(release),
            "datasets": layout.datasets(datasets) if datasets else "", "tasks": dict(cf.tasks),
            "base_port": cf.port, "strategy": strategy, "program": dict(program), "gpus_per_task": cf.gpus_per_task,
            "collective": collective, "legacy_keras": legacy_keras, "max_duration": max_duration or 0,
            "grace": cf.grace}


def sample_tf_configs(cf: ClusterFile, strategy: str) -> list[str]:
    """`make plan`: every task's slot, node and TF_CONFIG on a sample allocation ``node[1-N]``, in PROCID order."""
    nodes = slurm.expand_hostlist(SAMPLE_NODES.format(n=cf.nodes))
    lines = [f"sample allocation: SLURM_STEP_NODELIST={SAMPLE_NODES.format(n=cf.nodes)} "
             f"SLURM_STEP_TASKS_PER_NODE={cf.tasks_per_node}(x{cf.nodes}) (Slurm's order, never sorted)"]
    for procid in range(cf.task_count):
        task = slurm.resolve(slurm.sample_step(nodes, cf.tasks_per_node, procid), cf.tasks, cf.port, strategy)
        lines.append(f"  task {procid:<3} {task.node:<10} {task.slot:<12} TF_CONFIG={task.tf_config or '(none)'}")
    return lines
