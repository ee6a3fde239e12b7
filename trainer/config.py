"""The trainer's command line: argparse -> a frozen, validated :class:`TrainConfig`. No TensorFlow here.

:class:`TrainConfig` is grouped as ``--help`` groups the flags (data, model, optimisation, distribution, s3,
reporting, spot: one frozen dataclass each). Every default lives once, in those dataclasses: the parser leaves a flag
that was not given out of its result (``argparse.SUPPRESS``), the environment fills the flags that have an
environment variable (:data:`ENV_DEFAULTS`), and the dataclasses fill the rest. ``--help`` shows the dataclass
default.

Everything a bad invocation can get wrong is found here, before TensorFlow is imported or any server starts, and
reported as :class:`tfcluster.core.contract.Problem` values (``FIELD: MESSAGE. Fix: FIX``); ``python -m trainer`` then
exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfcluster.core import contract
from tfcluster.core.contract import Problem, TFConfig, TFConfigError
from trainer.devices import TpuHost, probe_tpu_host, resolve_collective, tpu_problem

DATASETS: tuple[str, ...] = ("mnist", "tfrecord", "synthetic")
# The models, as data (trainer/model.py builds them): hidden layers, then Flatten -> Dense(10, softmax).
# ("conv", filters) is Conv2D(filters, 3, relu); ("pool",) MaxPooling2D(2); ("dense", units) Flatten + Dense(relu).
MODELS: dict[str, tuple[tuple[Any, ...], ...]] = {
    "cnn": (("conv", 32), ("pool",)),  # the Keras multi-worker reference
    "cnn-heavy": (("conv", 64), ("conv", 64), ("pool",), ("dense", 128)),  # compute-bound, for scaling
}
SPOT_WATCH: tuple[str, ...] = ("auto", "on", "off")
JIT: tuple[str, ...] = ("auto", "on", "off")
PRECISIONS: tuple[str, ...] = ("off", "float16", "bfloat16")
COLLECTIVES: tuple[str, ...] = ("auto", "nccl", "ring")
LOG_LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR")
DEFAULT_IMDS = "http://169.254.169.254"
TPU_LOCAL = "local"  # TPUClusterResolver(tpu="local"): the chips of the TPU VM the trainer runs on

# Flags whose default comes from the environment when the flag is not given.
ENV_DEFAULTS: dict[str, str] = {
    "s3_endpoint_url": contract.ENV_S3_ENDPOINT_URL,
    "checkpoint_s3": contract.ENV_CHECKPOINT_S3,
    "spot_watch": "TFCLUSTER_SPOT_WATCH",
    "imds_endpoint": "TFCLUSTER_IMDS_ENDPOINT",
    "collective": contract.ENV_COLLECTIVE,
    "gpus": contract.ENV_GPUS,
}


def _flag(default: Any, flag: str) -> Any:
    """A field whose flag is named otherwise (``--data`` is ``DataConfig.path``)."""
    return dataclasses.field(default=default, metadata={"flag": flag})


@dataclass(frozen=True)
class DataConfig:
    """--dataset, --data, ...: what is trained on, and how it is read and shuffled."""

    dataset: str = "mnist"
    path: str | None = _flag(None, "data")
    sha256: str | None = _flag(None, "data_sha256")
    cache_dir: str | None = None
    synthetic_examples: int = 4096
    max_examples: int | None = None
    shuffle_buffer: int = 10000
    seed: int = 42


@dataclass(frozen=True)
class ModelConfig:
    """--model, --mixed-precision, --jit-compile, --no-evaluate."""

    name: str = _flag("cnn", "model")
    mixed_precision: str = "off"
    jit_compile: str = "auto"
    evaluate: bool = True


@dataclass(frozen=True)
class OptimisationConfig:
    """--epochs, --steps-per-epoch, --batch-size-per-replica, --learning-rate, --steps-per-execution."""

    epochs: int = 3
    steps_per_epoch: int | None = None
    batch_size_per_replica: int = 64
    learning_rate: float = 0.001
    steps_per_execution: int = 50


@dataclass(frozen=True)
class DistributionConfig:
    """--strategy, --tpu, --collective, --gpus, --require-gpu, --server-timeout."""

    strategy: str = "auto"
    tpu: str | None = None
    collective: str = "auto"
    gpus: int = 0
    require_gpu: bool | None = None
    server_timeout: float = 600.0


@dataclass(frozen=True)
class S3Config:
    """--checkpoint-s3, --s3-endpoint-url (also for s3:// data)."""

    checkpoint: str | None = _flag(None, "checkpoint_s3")
    endpoint_url: str | None = _flag(None, "s3_endpoint_url")


@dataclass(frozen=True)
class ReportingConfig:
    """--status-file, --status-interval, --no-tensorboard, --log-level."""

    status_file: str | None = None
    status_interval: float = 2.0
    tensorboard: bool = True
    log_level: str = "INFO"


@dataclass(frozen=True)
class SpotConfig:
    """--spot-watch, --imds-endpoint, --spot-poll-interval."""

    watch: str = _flag("auto", "spot_watch")
    imds_endpoint: str = DEFAULT_IMDS
    poll_interval: float = _flag(5.0, "spot_poll_interval")


GROUPS: dict[str, type] = {"data": DataConfig, "model": ModelConfig, "optimisation": OptimisationConfig,
                           "distribution": DistributionConfig, "s3": S3Config, "reporting": ReportingConfig,
                           "spot": SpotConfig}


def _flag_fields() -> dict[str, tuple[str, dataclasses.Field[Any]]]:
    """Flag dest -> (group, field of that group's dataclass), in flag order."""
    out: dict[str, tuple[str, dataclasses.Field[Any]]] = {}
    for group, cls in GROUPS.items():
        for f in dataclasses.fields(cls):
            out[f.metadata.get("flag", f.name)] = (group, f)
    return out


FLAG_FIELDS = _flag_fields()


@dataclass(frozen=True)
class TrainConfig:
    """Resolved trainer settings, grouped as ``--help`` groups the flags; the dataclasses' defaults are the flags'
    defaults. Written to ``MODEL_DIR/config.json`` flat, one key per flag (:meth:`to_dict`)."""

    model_dir: str
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimisation: OptimisationConfig = dataclasses.field(default_factory=OptimisationConfig)
    distribution: DistributionConfig = dataclasses.field(default_factory=DistributionConfig)
    s3: S3Config = dataclasses.field(default_factory=S3Config)
    reporting: ReportingConfig = dataclasses.field(default_factory=ReportingConfig)
    spot: SpotConfig = dataclasses.field(default_factory=SpotConfig)

    @classmethod
    def from_flags(cls, values: Mapping[str, Any]) -> TrainConfig:
        """From flag dests (``{"model_dir": ..., "data": ..., "spot_watch": ...}``); absent flags take defaults."""
        unknown = set(values) - set(FLAG_FIELDS) - {"model_dir"}
        if unknown:
            raise TypeError(f"unknown trainer flag(s): {', '.join(sorted(unknown))}")
        grouped: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
        for dest, value in values.items():
            if dest != "model_dir":
                group, f = FLAG_FIELDS[dest]
                grouped[group][f.name] = value
        return cls(model_dir=values["model_dir"], **{g: GROUPS[g](**kw) for g, kw in grouped.items()})

    @property
    def status_path(self) -> str:
        return self.reporting.status_file or os.path.join(self.model_dir, contract.STATUS)

    def to_dict(self) -> dict[str, Any]:
        """Flat, one key per flag dest: config.json's ``config`` (the same keys as before the groups)."""
        flat: dict[str, Any] = {"model_dir": self.model_dir}
        for dest, (group, f) in FLAG_FIELDS.items():
            flat[dest] = getattr(getattr(self, group), f.name)
        return flat


@dataclass(frozen=True)
class Invocation:
    """What ``main`` needs: the config, the validated TF_CONFIG (None on one host) and the resolved strategy."""

    config: TrainConfig
    tf_config: TFConfig | None
    strategy: str

    @property
    def task(self) -> str:
        if self.tf_config is None or self.tf_config.task_type is None:
            return "local:0"
        return f"{self.tf_config.task_type}:{self.tf_config.task_index}"

    @property
    def task_type(self) -> str | None:
        return None if self.tf_config is None else self.tf_config.task_type

    @property
    def is_chief(self) -> bool:
        return self.tf_config is None or self.tf_config.is_chief

    @property
    def serves_only(self) -> bool:
        """ps and worker tasks of a parameter-server cluster only run a server (and read no data)."""
        return self.strategy == "parameter_server" and self.task_type in (contract.PS, contract.WORKER)

    @property
    def collective(self) -> str | None:
        return resolve_collective(self.config.distribution.collective, self.strategy)

    @property
    def tpu(self) -> str:
        """The TPU of --strategy tpu: ``local`` (this TPU VM), the only one supported."""
        return self.config.distribution.tpu or TPU_LOCAL

    @property
    def require_gpu(self) -> bool:
        """``--require-gpu`` as given, else on when GPUs are declared (``--gpus``, env TFCLUSTER_GPUS)."""
        dist = self.config.distribution
        return dist.gpus > 0 if dist.require_gpu is None else dist.require_gpu

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "strategy": self.strategy, "task": self.task,
                "is_chief": self.is_chief, "collective": self.collective,
                "tf_config": None if self.tf_config is None else self.tf_config.to_dict()}


class ConfigError(ValueError):
    """Bad input; ``problems`` lists every one found."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("invalid trainer input:\n" + "\n".join(f"  - {p}" for p in self.problems))


def _number(convert: Callable[[str], Any], what: str, low: float, strict: bool) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} must be {'greater than' if strict else 'at least'} {low:g}")
        return value

    return parse


positive_int = _number(int, "a whole number", 1, strict=False)
count = _number(int, "a whole number", 0, strict=False)
positive_float = _number(float, "a number", 0, strict=True)


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError (exit 2 with a Problem) instead of printing and exiting itself."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError([Problem("argv", message, f"see `{self.prog} --help`")])


def _add(group: argparse._ArgumentGroup, flag: str, text: str, **kw: Any) -> None:
    """A flag with no parser default (the dataclass holds it); its help ends with that default and its env."""
    dest = kw.get("dest") or flag.lstrip("-").replace("-", "_")
    default = FLAG_FIELDS[dest][1].default
    if kw.get("action") not in ("store_false", "store_true"):
        text += f" (default: {default}" + (f"; env {ENV_DEFAULTS[dest]}" if dest in ENV_DEFAULTS else "") + ")"
    group.add_argument(flag, help=text, default=argparse.SUPPRESS, **kw)


def _data_flags(d: argparse._ArgumentGroup) -> None:
    _add(d, "--dataset", "mnist: npz with x_train/y_train/x_test/y_test; tfrecord: files with 'image' (784 bytes) "
         "and 'label' (int64) features; synthetic: generated in memory (tests)", choices=DATASETS)
    _add(d, "--data", "mnist: local .npz path or s3://BUCKET/KEY (None: CACHE_DIR/mnist.npz); tfrecord: file glob "
         "(sharded by FILE across workers)")
    _add(d, "--data-sha256", "expected sha256 of the --data file (checked before training)")
    _add(d, "--cache-dir", "dataset cache (None: env TFCLUSTER_DATASETS, else <repo>/.cache/datasets)")
    _add(d, "--synthetic-examples", "training examples of --dataset synthetic", type=positive_int)
    _add(d, "--max-examples", "use only the first N training examples (quick runs)", type=positive_int)
    _add(d, "--shuffle-buffer", "shuffle buffer, in examples", type=positive_int)
    _add(d, "--seed", "seed of shuffling and weight initialisation", type=int)


def _model_flags(m: argparse._ArgumentGroup) -> None:
    _add(m, "--model", "cnn: Conv32-MaxPool-Dense10 (the Keras multi-worker reference); cnn-heavy: "
         "Conv64-Conv64-MaxPool-Dense128-Dense10 (compute-bound, for scaling)", choices=tuple(MODELS))
    _add(m, "--mixed-precision", "Keras mixed-precision policy (float16 for GPUs, bfloat16 for TPUs/CPUs with bf16 "
         "units); the softmax output stays float32", choices=PRECISIONS)
    _add(m, "--jit-compile", "XLA: auto = on for mirrored/tpu on GPUs, off on CPU and for multi-worker (XLA has no "
         "CPU collectives)", choices=JIT)
    _add(m, "--no-evaluate", "skip evaluating the exported model on the test split", dest="evaluate",
         action="store_false")


def _optimisation_flags(o: argparse._ArgumentGroup) -> None:
    _add(o, "--epochs", "epochs to train in total (resumes included)", type=positive_int)
    _add(o, "--steps-per-epoch", "steps per epoch (None: training examples // global batch)", type=positive_int)
    _add(o, "--batch-size-per-replica", "per-replica batch; global batch = this x replicas", type=positive_int)
    _add(o, "--learning-rate", "Adam learning rate", type=positive_float)
    _add(o, "--steps-per-execution", "train steps per tf.function call (fewer Python round trips)",
         type=positive_int)


def _distribution_flags(g: argparse._ArgumentGroup) -> None:
    _add(g, "--strategy", "tf.distribute strategy; auto: no TF_CONFIG -> mirrored, ps in cluster -> "
         "parameter_server, else multi_worker_mirrored", choices=contract.STRATEGY_CHOICES)
    _add(g, "--tpu", f"the TPU of --strategy tpu: {TPU_LOCAL} (the default there, and the only one: this Cloud TPU "
         "VM's own chips, TensorFlow <= 2.20 with its TPU runtime)", choices=(TPU_LOCAL,))
    _add(g, "--collective", "all-reduce of multi_worker_mirrored: nccl (every task has GPUs) or ring (gRPC); "
         "auto = ring", choices=COLLECTIVES)
    _add(g, "--gpus", "GPUs declared for this host; with --require-gpu fewer visible GPUs exit 2", type=count)
    _add(g, "--require-gpu", "refuse to train when TensorFlow sees fewer GPUs than --gpus (None: on when --gpus > 0)",
         action=argparse.BooleanOptionalAction)
    _add(g, "--server-timeout", "parameter_server: a ps/worker task exits 1 when the chief has been unreachable this "
         "long", type=positive_float)


def _s3_flags(g: argparse._ArgumentGroup) -> None:
    _add(g, "--checkpoint-s3", "s3://BUCKET/PREFIX: upload every backup to PREFIX/backup/<task>/ and the finished "
         "model dir to PREFIX/model/ (DONE last); a task without a local backup resumes from S3")
    _add(g, "--s3-endpoint-url", "S3 endpoint for s3:// data and --checkpoint-s3 (None: AWS)")


def _reporting_flags(g: argparse._ArgumentGroup) -> None:
    _add(g, "--status-file", "progress file polled by the orchestration (None: MODEL_DIR/status.json)")
    _add(g, "--status-interval", "seconds between status file updates", type=positive_float)
    _add(g, "--no-tensorboard", "do not write TensorBoard logs to MODEL_DIR/logs", dest="tensorboard",
         action="store_false")
    _add(g, "--log-level", "Python log level", choices=LOG_LEVELS)


def _spot_flags(g: argparse._ArgumentGroup) -> None:
    _add(g, "--spot-watch", "watch the EC2 spot interruption notice (IMDSv2); auto = only if IMDS answers at start",
         choices=SPOT_WATCH)
    _add(g, "--imds-endpoint", "instance metadata endpoint")
    _add(g, "--spot-poll-interval", "seconds between spot notice polls", type=positive_float)


# One --help group per TrainConfig group, in this order.
_FLAG_GROUPS: dict[str, Callable[[argparse._ArgumentGroup], None]] = {
    "data": _data_flags, "model": _model_flags, "optimisation": _optimisation_flags,
    "distribution": _distribution_flags, "s3": _s3_flags, "reporting": _reporting_flags, "spot": _spot_flags}


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m trainer",
        description="tfcluster trainer: one program for every host. Reads TF_CONFIG from the environment.",
        epilog=f"Exit codes: {contract.EXIT_OK} done, {contract.EXIT_FAILURE} training failure, "
               f"{contract.EXIT_BAD_INPUT} bad input (nothing started), {contract.EXIT_PREEMPTED} stopped after a "
               "backup (spot notice or SIGTERM; re-run to resume). Model dir layout: "
               f"{contract.CONFIG}, {contract.STATUS}, {contract.CHECKPOINTS}/, {contract.BACKUP}/, {contract.LOGS}/, "
               f"{contract.EXPORT}/, {contract.METRICS}, {contract.MANIFEST}, {contract.DONE} (written last).")
    p.add_argument_group("job").add_argument(
        "--model-dir", required=True,
        help="output directory of this task (the same path on every host; chief writes the artifacts)")
    for group, add in _FLAG_GROUPS.items():
        add(p.add_argument_group(group))
    return p


_ENV_TYPES: dict[str, Callable[[str], Any]] = {"gpus": count}
_ENV_CHOICES: dict[str, tuple[str, ...]] = {"spot_watch": SPOT_WATCH, "collective": COLLECTIVES}


def env_values(env: Mapping[str, str], given: Mapping[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """The defaults the environment gives to flags not on the command line, and the problems of bad values."""
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    for dest, key in ENV_DEFAULTS.items():
        raw = env.get(key, "").strip()
        if dest in given or not raw:
            continue
        try:
            value = _ENV_TYPES.get(dest, str)(raw)
        except argparse.ArgumentTypeError as exc:
            problems.append(Problem(key, str(exc), f"set {key} to a valid value or unset it"))
            continue
        if dest in _ENV_CHOICES and value not in _ENV_CHOICES[dest]:
            problems.append(Problem(key, f"{raw!r} is not one of {', '.join(_ENV_CHOICES[dest])}",
                                    f"set {key} to one of them or unset it"))
            continue
        values[dest] = value
    return values, problems


def _mnist_data_problems(data: str) -> list[Problem]:
    scheme = urllib.parse.urlsplit(data).scheme
    if scheme == "s3":
        from trainer.s3 import parse_object_uri

        try:
            parse_object_uri(data)
        except ValueError as exc:
            return [Problem("--data", str(exc), "write it as s3://BUCKET/KEY")]
    elif scheme:
        return [Problem("--data", f"unsupported URI scheme {scheme!r}",
                        "give a local .npz path or an s3://BUCKET/KEY URI")]
    elif not Path(data).is_file():
        return [Problem("--data", f"{data} does not exist",
                        "run `python -m trainer.datasets fetch` or give the right path")]
    return []


def _data_problems(data: DataConfig) -> list[Problem]:
    problems: list[Problem] = []
    if data.dataset == "tfrecord":
        if not data.path:
            problems.append(Problem("--data", "--dataset tfrecord needs a file glob",
                                    "pass --data '/path/train-*.tfrecord'"))
        elif "://" not in data.path and not glob.glob(data.path):
            problems.append(Problem("--data", f"no file matches {data.path!r}", "check the glob and the path"))
    elif data.dataset == "mnist" and data.path:
        problems += _mnist_data_problems(data.path)
    elif data.dataset == "synthetic" and data.path:
        problems.append(Problem("--data", "--dataset synthetic takes no --data", "drop --data"))
    if data.sha256 is not None:
        from trainer.s3 import is_sha256

        if not is_sha256(data.sha256):
            problems.append(Problem("--data-sha256", f"{data.sha256!r} is not 64 lowercase hex digits",
                                    "use the output of `python -m trainer.datasets sha256 FILE`"))
    return problems


def _operations_problems(cfg: TrainConfig) -> list[Problem]:
    problems: list[Problem] = []
    imds = urllib.parse.urlsplit(cfg.spot.imds_endpoint)
    if imds.scheme not in ("http", "https") or not imds.netloc:
        problems.append(Problem("--imds-endpoint", f"{cfg.spot.imds_endpoint!r} is not an http(s) URL",
                                "use e.g. http://169.254.169.254"))
    if cfg.s3.checkpoint:
        from trainer.s3 import parse_prefix_uri

        try:
            parse_prefix_uri(cfg.s3.checkpoint)
        except ValueError as exc:
            problems.append(Problem("--checkpoint-s3", str(exc), "write it as s3://BUCKET/PREFIX (env "
                                    f"{contract.ENV_CHECKPOINT_S3})"))
    return problems


def config_problems(cfg: TrainConfig, strategy: str,
                    tpu_host: Callable[[], TpuHost] = probe_tpu_host) -> list[Problem]:
    """Problems of the flags themselves and of the flags against the resolved strategy. ``tpu_host`` looks at this
    host for a TPU (only under --strategy tpu; without TensorFlow)."""
    jit = cfg.model.jit_compile
    checks: list[tuple[bool, str, str, str]] = [
        (not cfg.model_dir.strip(), "--model-dir", "is empty", "give a directory path"),
        (bool(cfg.model_dir.strip()) and Path(cfg.model_dir).exists() and not Path(cfg.model_dir).is_dir(),
         "--model-dir", f"{cfg.model_dir} exists and is not a directory", "choose another path"),
        (bool(cfg.distribution.tpu) and strategy != "tpu", "--tpu", f"--tpu is only used with --strategy tpu, "
         f"strategy is {strategy}", "drop --tpu or pass --strategy tpu"),
        (strategy == "parameter_server" and jit == "on", "--jit-compile",
         "XLA is not supported with parameter_server", "use --jit-compile auto or off"),
        (strategy == "multi_worker_mirrored" and jit == "on", "--jit-compile",
         "XLA has no CPU collectives: multi_worker_mirrored workers crash", "use --jit-compile auto or off"),
    ]
    problems = [Problem(field, message, fix) for wrong, field, message, fix in checks if wrong]
    tpu = tpu_problem(tpu_host()) if strategy == "tpu" else None
    return problems + ([tpu] if tpu else []) + _operations_problems(cfg) + _data_problems(cfg.data)


def _task_problems(tf_config: TFConfig | None, strategy: str) -> list[Problem]:
    if tf_config is None:
        return []
    if tf_config.task_type == contract.EVALUATOR:
        return [Problem("task.type", "this trainer runs no side-car evaluator (the chief evaluates the exported "
                        "model)", "do not start a task with type evaluator")]
    if strategy == "multi_worker_mirrored" and tf_config.task_type == contract.PS:
        return [Problem("task.type", "a ps task needs strategy parameter_server",
                        "use --strategy parameter_server or auto")]
    return []


def parse_invocation(argv: Sequence[str] | None, env: Mapping[str, str],
                     tpu_host: Callable[[], TpuHost] = probe_tpu_host) -> Invocation:
    """argv + environment -> a validated Invocation; raises ConfigError listing every problem found."""
    given = vars(build_parser().parse_args(argv))
    from_env, problems = env_values(env, given)
    cfg = TrainConfig.from_flags({**from_env, **given})
    tf_config: TFConfig | None = None
    try:
        tf_config = contract.parse_tf_config(env.get(contract.ENV_TF_CONFIG), cfg.distribution.strategy)
    except TFConfigError as exc:
        problems.extend(exc.problems)
    strategy = contract.resolve_strategy(None if tf_config is None else tf_config.cluster, cfg.distribution.strategy)
    problems += _task_problems(tf_config, strategy) + config_problems(cfg, strategy, tpu_host)
    if problems:
        raise ConfigError(problems)
    return Invocation(cfg, tf_config, strategy)

