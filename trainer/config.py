"""The trainer's command line: argparse -> a frozen, validated :class:`TrainConfig`. No TensorFlow here.

Every default lives once, in :class:`TrainConfig`: the parser leaves a flag that was not given out of its result
(``argparse.SUPPRESS``), the environment fills the flags that have an environment variable (:data:`ENV_DEFAULTS`),
and the dataclass fills the rest. ``--help`` shows the dataclass default.

Everything a bad invocation can get wrong is found here, before TensorFlow is imported or any server starts, and
reported as :class:`tfcluster.contract.Problem` values (``FIELD: MESSAGE. Fix: FIX``); ``python -m trainer`` then
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

from tfcluster import contract
from tfcluster.contract import Problem, TFConfig, TFConfigError
from trainer.devices import resolve_collective

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

# Flags whose default comes from the environment when the flag is not given.
ENV_DEFAULTS: dict[str, str] = {
    "s3_endpoint_url": contract.ENV_S3_ENDPOINT_URL,
    "checkpoint_s3": contract.ENV_CHECKPOINT_S3,
    "spot_watch": "TFCLUSTER_SPOT_WATCH",
    "imds_endpoint": "TFCLUSTER_IMDS_ENDPOINT",
    "collective": contract.ENV_COLLECTIVE,
    "gpus": contract.ENV_GPUS,
}


@dataclass(frozen=True)
class TrainConfig:
    """Resolved trainer settings (one per flag; these are the defaults). Written to ``MODEL_DIR/config.json``."""

    model_dir: str
    strategy: str = "auto"
    tpu: str | None = None
    dataset: str = "mnist"
    data: str | None = None
    data_sha256: str | None = None
    s3_endpoint_url: str | None = None
    cache_dir: str | None = None
    synthetic_examples: int = 4096
    max_examples: int | None = None
    model: str = "cnn"
    epochs: int = 3
    steps_per_epoch: int | None = None
    batch_size_per_replica: int = 64
    learning_rate: float = 0.001
    steps_per_execution: int = 50
    shuffle_buffer: int = 10000
    seed: int = 42
    jit_compile: str = "auto"
    mixed_precision: str = "off"
    collective: str = "auto"
    gpus: int = 0
    require_gpu: bool | None = None
    evaluate: bool = True
    tensorboard: bool = True
    checkpoint_s3: str | None = None
    status_file: str | None = None
    status_interval: float = 2.0
    spot_watch: str = "auto"
    imds_endpoint: str = DEFAULT_IMDS
    spot_poll_interval: float = 5.0
    server_timeout: float = 600.0
    log_level: str = "INFO"

    @property
    def status_path(self) -> str:
        return self.status_file or os.path.join(self.model_dir, contract.STATUS)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
        return resolve_collective(self.config.collective, self.strategy)

    @property
    def require_gpu(self) -> bool:
        """``--require-gpu`` as given, else on when GPUs are declared (``--gpus``, env TFCLUSTER_GPUS)."""
        return self.config.gpus > 0 if self.config.require_gpu is None else self.config.require_gpu

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
    field = TrainConfig.__dataclass_fields__[dest]
    default = None if field.default is dataclasses.MISSING else field.default
    if kw.get("action") not in ("store_false", "store_true"):
        text += f" (default: {default}" + (f"; env {ENV_DEFAULTS[dest]}" if dest in ENV_DEFAULTS else "") + ")"
    group.add_argument(flag, help=text, default=argparse.SUPPRESS, **kw)


def _job_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("job")
    g.add_argument("--model-dir", required=True,
                   help="output directory of this task (the same path on every host; chief writes the artifacts)")
    _add(g, "--strategy", "tf.distribute strategy; auto: no TF_CONFIG -> mirrored, ps in cluster -> "
         "parameter_server, else multi_worker_mirrored", choices=contract.STRATEGY_CHOICES)
    _add(g, "--tpu", "TPU name or grpc:// address for --strategy tpu")


def _data_flags(p: argparse.ArgumentParser) -> None:
    d = p.add_argument_group("data")
    _add(d, "--dataset", "mnist: npz with x_train/y_train/x_test/y_test; tfrecord: files with 'image' (784 bytes) "
         "and 'label' (int64) features; synthetic: generated in memory (tests)", choices=DATASETS)
    _add(d, "--data", "mnist: local .npz path or s3://BUCKET/KEY (None: CACHE_DIR/mnist.npz); tfrecord: file glob "
         "(sharded by FILE across workers)")
    _add(d, "--data-sha256", "expected sha256 of the --data file (checked before training)")
    _add(d, "--s3-endpoint-url", "S3 endpoint for s3:// data and --checkpoint-s3 (None: AWS)")
    _add(d, "--cache-dir", "dataset cache (None: env TFCLUSTER_DATASETS, else <repo>/.cache/datasets)")
    _add(d, "--synthetic-examples", "training examples of --dataset synthetic", type=positive_int)
    _add(d, "--max-examples", "use only the first N training examples (quick runs)", type=positive_int)
    _add(d, "--shuffle-buffer", "shuffle buffer, in examples", type=positive_int)
    _add(d, "--seed", "seed of shuffling and weight initialisation", type=int)


def _training_flags(p: argparse.ArgumentParser) -> None:
    t = p.add_argument_group("training")
    _add(t, "--model", "cnn: Conv32-MaxPool-Dense10 (the Keras multi-worker reference); cnn-heavy: "
         "Conv64-Conv64-MaxPool-Dense128-Dense10 (compute-bound, for scaling)", choices=tuple(MODELS))
    _add(t, "--epochs", "epochs to train in total (resumes included)", type=positive_int)
    _add(t, "--steps-per-epoch", "steps per epoch (None: training examples // global batch)", type=positive_int)
    _add(t, "--batch-size-per-replica", "per-replica batch; global batch = this x replicas", type=positive_int)
    _add(t, "--learning-rate", "Adam learning rate", type=positive_float)
    _add(t, "--steps-per-execution", "train steps per tf.function call (fewer Python round trips)",
         type=positive_int)
    _add(t, "--jit-compile", "XLA: auto = on for mirrored/tpu on GPUs, off on CPU and for multi-worker (XLA has no "
         "CPU collectives)", choices=JIT)
    _add(t, "--mixed-precision", "Keras mixed-precision policy (float16 for GPUs, bfloat16 for TPUs/CPUs with bf16 "
         "units); the softmax output stays float32", choices=PRECISIONS)
    _add(t, "--collective", "all-reduce of multi_worker_mirrored: nccl (every task has GPUs) or ring (gRPC); "
         "auto = ring", choices=COLLECTIVES)
    _add(t, "--gpus", "GPUs declared for this host; with --require-gpu fewer visible GPUs exit 2", type=count)
    _add(t, "--require-gpu", "refuse to train when TensorFlow sees fewer GPUs than --gpus (None: on when --gpus > 0)",
         action=argparse.BooleanOptionalAction)
    _add(t, "--no-evaluate", "skip evaluating the exported model on the test split", dest="evaluate",
         action="store_false")
    _add(t, "--no-tensorboard", "do not write TensorBoard logs to MODEL_DIR/logs", dest="tensorboard",
         action="store_false")


def _operations_flags(p: argparse.ArgumentParser) -> None:
    o = p.add_argument_group("operations")
    _add(o, "--checkpoint-s3", "s3://BUCKET/PREFIX: upload every backup to PREFIX/backup/<task>/ and the finished "
         "model dir to PREFIX/model/ (DONE last); a task without a local backup resumes from S3")
    _add(o, "--status-file", "progress file polled by the orchestration (None: MODEL_DIR/status.json)")
    _add(o, "--status-interval", "seconds between status file updates", type=positive_float)
    _add(o, "--spot-watch", "watch the EC2 spot interruption notice (IMDSv2); auto = only if IMDS answers at start",
         choices=SPOT_WATCH)
    _add(o, "--imds-endpoint", "instance metadata endpoint")
    _add(o, "--spot-poll-interval", "seconds between spot notice polls", type=positive_float)
    _add(o, "--server-timeout", "parameter_server: a ps/worker task exits 1 when the chief has been unreachable this "
         "long", type=positive_float)
    _add(o, "--log-level", "Python log level", choices=LOG_LEVELS)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m trainer",
        description="tfcluster trainer: one program for every host. Reads TF_CONFIG from the environment.",
        epilog=f"Exit codes: {contract.EXIT_OK} done, {contract.EXIT_FAILURE} training failure, "
               f"{contract.EXIT_BAD_INPUT} bad input (nothing started), {contract.EXIT_PREEMPTED} stopped after a "
               "backup (spot notice or SIGTERM; re-run to resume). Model dir layout: "
               f"{contract.CONFIG}, {contract.STATUS}, {contract.CHECKPOINTS}/, {contract.BACKUP}/, {contract.LOGS}/, "
               f"{contract.EXPORT}/, {contract.METRICS}, {contract.MANIFEST}, {contract.DONE} (written last).")
    for add in (_job_flags, _data_flags, _training_flags, _operations_flags):
        add(p)
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


def _data_problems(cfg: TrainConfig) -> list[Problem]:
    problems: list[Problem] = []
    if cfg.dataset == "tfrecord":
        if not cfg.data:
            problems.append(Problem("--data", "--dataset tfrecord needs a file glob",
                                    "pass --data '/path/train-*.tfrecord'"))
        elif "://" not in cfg.data and not glob.glob(cfg.data):
            problems.append(Problem("--data", f"no file matches {cfg.data!r}", "check the glob and the path"))
    elif cfg.dataset == "mnist" and cfg.data:
        problems += _mnist_data_problems(cfg.data)
    elif cfg.dataset == "synthetic" and cfg.data:
        problems.append(Problem("--data", "--dataset synthetic takes no --data", "drop --data"))
    if cfg.data_sha256 is not None:
        from trainer.s3 import is_sha256

        if not is_sha256(cfg.data_sha256):
            problems.append(Problem("--data-sha256", f"{cfg.data_sha256!r} is not 64 lowercase hex digits",
                                    "use the output of `python -m trainer.datasets sha256 FILE`"))
    return problems


def _operations_problems(cfg: TrainConfig) -> list[Problem]:
    problems: list[Problem] = []
    imds = urllib.parse.urlsplit(cfg.imds_endpoint)
    if imds.scheme not in ("http", "https") or not imds.netloc:
        problems.append(Problem("--imds-endpoint", f"{cfg.imds_endpoint!r} is not an http(s) URL",
                                "use e.g. http://169.254.169.254"))
    if cfg.checkpoint_s3:
        from trainer.s3 import parse_prefix_uri

        try:
            parse_prefix_uri(cfg.checkpoint_s3)
        except ValueError as exc:
            problems.append(Problem("--checkpoint-s3", str(exc), "write it as s3://BUCKET/PREFIX (env "
                                    f"{contract.ENV_CHECKPOINT_S3})"))
    return problems


def config_problems(cfg: TrainConfig, strategy: str) -> list[Problem]:
    """Problems of the flags themselves and of the flags against the resolved strategy."""
    checks: list[tuple[bool, str, str, str]] = [
        (not cfg.model_dir.strip(), "--model-dir", "is empty", "give a directory path"),
        (bool(cfg.model_dir.strip()) and Path(cfg.model_dir).exists() and not Path(cfg.model_dir).is_dir(),
         "--model-dir", f"{cfg.model_dir} exists and is not a directory", "choose another path"),
        (strategy == "tpu" and not cfg.tpu, "--tpu", "--strategy tpu needs a TPU name or address",
         "pass --tpu NAME (or grpc://HOST:8470)"),
        (bool(cfg.tpu) and strategy != "tpu", "--tpu", f"--tpu is only used with --strategy tpu, strategy is "
         f"{strategy}", "drop --tpu or pass --strategy tpu"),
        (strategy == "parameter_server" and cfg.jit_compile == "on", "--jit-compile",
         "XLA is not supported with parameter_server", "use --jit-compile auto or off"),
        (strategy == "multi_worker_mirrored" and cfg.jit_compile == "on", "--jit-compile",
         "XLA has no CPU collectives: multi_worker_mirrored workers crash", "use --jit-compile auto or off"),
    ]
    problems = [Problem(field, message, fix) for wrong, field, message, fix in checks if wrong]
    return problems + _operations_problems(cfg) + _data_problems(cfg)


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


def parse_invocation(argv: Sequence[str] | None, env: Mapping[str, str]) -> Invocation:
    """argv + environment -> a validated Invocation; raises ConfigError listing every problem found."""
    given = vars(build_parser().parse_args(argv))
    from_env, problems = env_values(env, given)
    cfg = TrainConfig(**{**from_env, **given})
    tf_config: TFConfig | None = None
    try:
        tf_config = contract.parse_tf_config(env.get(contract.ENV_TF_CONFIG), cfg.strategy)
    except TFConfigError as exc:
        problems.extend(exc.problems)
    strategy = contract.resolve_strategy(None if tf_config is None else tf_config.cluster, cfg.strategy)
    problems += _task_problems(tf_config, strategy) + config_problems(cfg, strategy)
    if problems:
        raise ConfigError(problems)
    return Invocation(cfg, tf_config, strategy)

