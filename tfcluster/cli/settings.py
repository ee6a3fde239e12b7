"""What a user asked for on the `make` command line, read from the environment and checked before anything runs.

The Makefile exports its variables (CLUSTER, JOB, WORKERS, ...) to the `tfcluster` command, which reads them here:
they never pass through a shell or Jinja. Every bad value is reported at once, as ``FIELD: MESSAGE. Fix: FIX``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tfcluster import kinds
from tfcluster.cli import health_knobs
from tfcluster.core import contract
from tfcluster.core.contract import Problem
from tfcluster.core.duration import (
    STALL,
    UNREACHABLE_GRACE,
    DurationError,
    SettingError,
    autostop_vars,
    parse_duration,
)
from tfcluster.core.paths import REPO_ROOT
from tfcluster.prepare import lock

KERAS: tuple[str, ...] = ("legacy", "3")


class SettingsError(ValueError):
    """Every problem of the settings; str() lists them."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class Settings:
    """One command's settings (the Make variables, validated)."""

    cluster: str = "local"
    job: str = "mnist"
    workers: int = 2
    strategy: str = "auto"
    hosts_file: Path | None = None
    cluster_file: Path | None = None  # the kind's cluster file (SLURM=slurm.yml for CLUSTER=slurm)
    script: Path | None = None
    script_args: tuple[str, ...] = ()
    script_requirements: Path | None = None
    script_keras: str = "legacy"
    trainer_args: tuple[str, ...] = ()
    epochs: int | None = None
    max_duration: int | None = None  # seconds
    stall: int | None = None  # STALL: seconds without progress, 0 off; None: the role's (10 min; off for a SCRIPT)
    unreachable_grace: int | None = None  # UNREACHABLE_GRACE: seconds; None: the role's (30 min)
    straggler: dict[str, float] | None = None  # STRAGGLER: {"below", "after"}; None: the role's (15 %, 2 min)
    hang: float | None = None  # HANG: a factor of a task's usual time between steps, 0 off; None: the role's (10)
    netcheck: str | None = None  # NETCHECK: on | strict | off; None: the role's (on)
    recover: int | None = None  # RECOVER: recoveries of a lost AWS host; None: the kind's (1 on spot, else 0)
    # ALLOW_SHARED_NETWORK=1: local slots run on this machine's network where no private namespace can be made
    # (refused otherwise); None: the role's (false)
    allow_shared_network: bool | None = None
    autostop: dict[str, object] = field(default_factory=dict)  # make autostop IDLE=... MODE=...: the role's vars
    ttl: int | None = None  # TTL: seconds of the cluster's lifetime (None: off, or the default of the provision)
    down: str | None = None  # DOWN=1: an idle AWS host terminates ("terminate"); DOWN=0: it stops ("stop")
    ami: str | None = None  # AMI=refresh: the next apply replaces every host with the newest image
    all_or_nothing: bool = False  # ALL_OR_NOTHING=1: an apply that launched only some slots tears them down
    verbose: bool = False
    auto_approve: bool = False
    host: str | None = None  # make logs HOST=...
    ansible_args: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()  # DATASETS=mnist: what a SCRIPT job reads from $TFCLUSTER_DATASETS
    prepare_force: bool = False  # PREPARE=force: run every role even where the prepared digest matches
    wheelhouse: Path | None = None
    cluster_name: str = ""  # TFCLUSTER_CLUSTER, default tfcluster-<cluster>
    tf_dir: Path | None = None  # TFCLUSTER_TF_DIR, default infra/<cluster>
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> kinds.Kind:
        """The cluster kind (tfcluster.kinds): what differs between CLUSTER=local, aws and onprem."""
        return kinds.get(self.cluster)

    @property
    def target(self) -> kinds.Target:
        """The cluster, in the plain values its kind needs."""
        return kinds.Target(kind=self.cluster, name=self.cluster_name, strategy=self.strategy, workers=self.workers,
                            tf_dir=self.tf_dir, hosts_file=self.hosts_file, wheelhouse=self.wheelhouse,
                            auto_approve=self.auto_approve, cluster_file=self.cluster_file, job=self.job)

    @property
    def artifacts(self) -> Path:
        """artifacts/<cluster>/<job>/ on this machine."""
        return REPO_ROOT / "artifacts" / self.cluster / self.job


def _words(env: Mapping[str, str], key: str, problems: list[Problem]) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(env.get(key, "")))
    except ValueError as exc:
        problems.append(Problem(key, f"cannot be split into arguments ({exc})",
                                "balance the quotes, e.g. SCRIPT_ARGS=\"--name 'two words'\""))
        return ()


def _path(env: Mapping[str, str], key: str, problems: list[Problem], *, must_exist: bool = True) -> Path | None:
    raw = env.get(key, "").strip()
    if not raw:
        return None
    path = Path(raw).expanduser()
    path = path if path.is_absolute() else (Path(env.get("PWD") or Path.cwd()) / path)
    if must_exist and not path.exists():
        problems.append(Problem(key, f"{raw} does not exist", f"give an existing path for {key}"))
    return path


def _int(env: Mapping[str, str], key: str, low: int, problems: list[Problem]) -> int | None:
    """A whole number of ASCII digits (str.isdigit() also takes '²' and '٣', which int() refuses or reads)."""
    raw = env.get(key, "").strip()
    if not raw:
        return None
    if not re.fullmatch(r"[0-9]+", raw) or int(raw) < low:
        problems.append(Problem(key, f"{raw!r} is not a whole number >= {low}",
                                f"set {key} to a number >= {low}, in digits 0-9"))
        return None
    return int(raw)


def _choice(env: Mapping[str, str], key: str, choices: tuple[str, ...], default: str,
            problems: list[Problem]) -> str:
    value = env.get(key, "").strip() or default
    if value not in choices:
        problems.append(Problem(key, f"{value!r} is not one of {', '.join(choices)}",
                                f"use {key}={choices[0]} (or one of {', '.join(choices)})"))
        return default
    return value


def _flag(env: Mapping[str, str], key: str) -> bool:
    return env.get(key, "").strip().lower() in ("1", "true", "yes", "on")


def _name(env: Mapping[str, str], key: str, kind: str, default: str, problems: list[Problem]) -> str:
    value = env.get(key, "").strip() or default
    problem = contract.name_problem(kind, value, key)
    if problem:
        problems.append(problem)
    return value


def _duration(env: Mapping[str, str], key: str, problems: list[Problem]) -> int | None:
    try:
        return parse_duration(env.get(key, "").strip() or "off", key)
    except DurationError as exc:
        problems.append(exc.problem)
        return None


def _stall(env: Mapping[str, str], problems: list[Problem]) -> int | None:
    """STALL=20m | off: seconds without progress that stop the job (0: off); None when not given."""
    raw = env.get("STALL", "").strip()
    if not raw:
        return None
    try:
        seconds = parse_duration(raw, STALL)
    except DurationError as exc:
        problems.append(exc.problem)
        return None
    return 0 if seconds is None else seconds


def _unreachable_grace(env: Mapping[str, str], problems: list[Problem]) -> int | None:
    """UNREACHABLE_GRACE=1h: how long a host may stay unreachable from here before the job fails; None when not
    given."""
    raw = env.get("UNREACHABLE_GRACE", "").strip()
    if not raw:
        return None
    try:
        return parse_duration(raw, UNREACHABLE_GRACE)
    except DurationError as exc:
        problems.append(exc.problem)
        return None


def _autostop(env: Mapping[str, str], problems: list[Problem]) -> dict[str, object]:
    """make autostop IDLE=... MODE=...: the role's vars (nothing without IDLE)."""
    if not env.get("IDLE", "").strip():
        return {}
    try:
        return autostop_vars(env["IDLE"], env.get("MODE", "").strip() or None)
    except SettingError as exc:
        problems.append(exc.problem)
        return {}


def _down(env: Mapping[str, str], cluster: str, problems: list[Problem]) -> str | None:
    """DOWN=1: an idle AWS host terminates; DOWN=0: it stops."""
    raw = env.get("DOWN", "").strip()
    down = {"": None, "1": "terminate", "0": "stop"}.get(raw, "?")
    if down == "?":
        problems.append(Problem("DOWN", f"{raw!r} is neither 1 nor 0",
                                "DOWN=1: an idle AWS host is terminated; DOWN=0: it is stopped (the default)"))
        return None
    if down is not None and not kinds.KINDS[cluster].has_instances:
        clouds = ", ".join(name for name, kind in kinds.KINDS.items() if kind.has_instances)
        problems.append(Problem("DOWN", f"only CLUSTER={clouds} hosts can be stopped or terminated, not {cluster}",
                                f"use DOWN with CLUSTER={clouds}, or leave it out"))
    return down


def _instances_only(key: str, cluster: str, problems: list[Problem]) -> None:
    if not kinds.KINDS[cluster].has_instances:
        clouds = ", ".join(name for name, kind in kinds.KINDS.items() if kind.has_instances)
        problems.append(Problem(key, f"applies to cloud instances (CLUSTER={clouds}), not CLUSTER={cluster}",
                                f"use {key} with CLUSTER={clouds}, or leave it out"))


def _ami(env: Mapping[str, str], cluster: str, problems: list[Problem]) -> str | None:
    """AMI=refresh: `make provision` replaces every host with the newest image (the kept AMI is decided again)."""
    raw = env.get("AMI", "").strip()
    if not raw:
        return None
    if raw != "refresh":
        problems.append(Problem("AMI", f"{raw!r} is not refresh",
                                "AMI=refresh replaces every host with the newest image (collect first: their disks "
                                "are lost); pin an image with ami_id in terraform.tfvars"))
        return None
    _instances_only("AMI", cluster, problems)
    return raw


def _all_or_nothing(env: Mapping[str, str], cluster: str, problems: list[Problem]) -> bool:
    """ALL_OR_NOTHING=1: an apply that could not launch every slot tears down what it launched."""
    raw = env.get("ALL_OR_NOTHING", "").strip()
    if raw not in ("", "0", "1"):
        problems.append(Problem("ALL_OR_NOTHING", f"{raw!r} is neither 1 nor 0",
                                "ALL_OR_NOTHING=1 tears down what launched when not every slot could be launched"))
        return False
    if raw == "1":
        _instances_only("ALL_OR_NOTHING", cluster, problems)
    return raw == "1"


def _allow_shared_network(env: Mapping[str, str], problems: list[Problem]) -> bool | None:
    """ALLOW_SHARED_NETWORK=1|0|true|false: whether local slots may run without their private network namespace."""
    raw = env.get("ALLOW_SHARED_NETWORK", "").strip().lower()
    if not raw:
        return None
    if raw not in ("1", "0", "true", "false"):
        problems.append(Problem("ALLOW_SHARED_NETWORK", f"{raw!r} is neither 1 nor 0",
                                "ALLOW_SHARED_NETWORK=1 lets local slots run with their training ports open to this "
                                "machine's users and network where no private network namespace can be made; 0 (the "
                                "default) refuses to start them there"))
        return None
    return raw in ("1", "true")


def _datasets(env: Mapping[str, str], problems: list[Problem]) -> tuple[str, ...]:
    datasets = tuple(d for d in env.get("DATASETS", "").replace(",", " ").split() if d)
    problems.extend(Problem("DATASETS", f"{name!r} is not a dataset name", "list names like DATASETS=mnist")
                    for name in datasets if not name.isidentifier())
    return datasets


def _script(env: Mapping[str, str], problems: list[Problem]) -> Path | None:
    script = _path(env, "SCRIPT", problems)
    if script is not None and not (script.is_dir() or script.suffix == ".py"):
        problems.append(Problem("SCRIPT", f"{script} is neither a .py file nor a package directory",
                                "point SCRIPT at your training script (.py) or a package with __main__.py"))
    return script


def _script_requirements(env: Mapping[str, str], problems: list[Problem]) -> Path | None:
    """SCRIPT_REQUIREMENTS: a hash-pinned lock without the runtime's packages (`make lock SCRIPT_REQUIREMENTS=FILE`
    writes FILE.lock); hosts install it with pip --require-hashes, for the job alone."""
    path = _path(env, "SCRIPT_REQUIREMENTS", problems)
    problem = lock.script_lock_problem(path) if path is not None and path.exists() else None
    if problem:
        problems.append(problem)
    return path


def _cluster_file(env: Mapping[str, str], cluster: str, problems: list[Problem]) -> Path | None:
    """The kind's cluster file (its ``cluster_file_setting``, e.g. SLURM=slurm.yml): required by that kind only."""
    key = kinds.KINDS[cluster].cluster_file_setting
    if key is None:
        return None
    if not env.get(key, "").strip():
        problems.append(Problem(key, f"is not set, and CLUSTER={cluster} reads its cluster file from it",
                                f"name it: {key}=slurm.yml (see examples/slurm.example.yml)"))
        return None
    return _path(env, key, problems, must_exist=True)


def _host(env: Mapping[str, str], problems: list[Problem]) -> str | None:
    host = env.get("HOST", "").strip() or None
    if host is not None and (problem := contract.name_problem("host", host, "HOST")):
        problems.append(problem)
    return host


def load(env: Mapping[str, str]) -> Settings:
    """Settings from the environment the Makefile exports; raises SettingsError listing every problem."""
    problems: list[Problem] = []
    cluster = _choice(env, "CLUSTER", kinds.NAMES, "local", problems)
    prepare = env.get("PREPARE", "").strip()
    if prepare not in ("", "force"):
        problems.append(Problem("PREPARE", f"{prepare!r} is not a prepare mode",
                                "PREPARE=force runs every prepare role even where the prepared digest matches"))
    settings = Settings(
        cluster=cluster,
        job=_name(env, "JOB", "job", "mnist", problems),
        workers=_int(env, "WORKERS", 1, problems) or 2,
        strategy=_choice(env, "STRATEGY", contract.STRATEGY_CHOICES, "auto", problems),
        hosts_file=_path(env, "HOSTS", problems, must_exist=True) if kinds.KINDS[cluster].needs_host_file else None,
        cluster_file=_cluster_file(env, cluster, problems),
        script=_script(env, problems),
        script_args=_words(env, "SCRIPT_ARGS", problems),
        script_requirements=_script_requirements(env, problems),
        script_keras=_choice(env, "KERAS", KERAS, "legacy", problems),
        trainer_args=_words(env, "TRAINER_ARGS", problems),
        epochs=_int(env, "EPOCHS", 1, problems),
        max_duration=_duration(env, "MAX_DURATION", problems),
        stall=_stall(env, problems),
        unreachable_grace=_unreachable_grace(env, problems),
        straggler=health_knobs.straggler(env, problems),
        hang=health_knobs.hang(env, problems),
        netcheck=health_knobs.netcheck(env, problems),
        recover=health_knobs.recover(env, problems),
        allow_shared_network=_allow_shared_network(env, problems),
        autostop=_autostop(env, problems),
        ttl=_duration(env, "TTL", problems),
        down=_down(env, cluster, problems),
        ami=_ami(env, cluster, problems),
        all_or_nothing=_all_or_nothing(env, cluster, problems),
        verbose=_flag(env, "VERBOSE"),
        auto_approve=_flag(env, "AUTO_APPROVE"),
        host=_host(env, problems),
        ansible_args=_words(env, "ANSIBLE_ARGS", problems),
        datasets=_datasets(env, problems),
        prepare_force=prepare == "force",
        wheelhouse=_path(env, "WHEELHOUSE", problems, must_exist=False),
        cluster_name=_name(env, "TFCLUSTER_CLUSTER", "cluster", f"tfcluster-{cluster}", problems),
        tf_dir=_path(env, "TFCLUSTER_TF_DIR", problems, must_exist=False),
    )
    if settings.cluster_file is not None and settings.cluster_file.is_file():
        problems += settings.kind.setting_problems(settings.target)  # the cluster file's fields, checked where read
    if problems:
        raise SettingsError(problems)
    return settings
