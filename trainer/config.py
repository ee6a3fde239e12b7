"""The trainer's command line: argparse -> a frozen, validated :class:`TrainConfig`. No TensorFlow here.

Everything a bad invocation can get wrong is found here, before TensorFlow is imported or any server starts, and
reported as :class:`tfcluster.contract.Problem` values (``FIELD: MESSAGE. Fix: FIX``); ``python -m trainer`` then
exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfcluster import contract as tfconfig
from tfcluster.contract import Problem, TFConfig, TFConfigError

DATASETS: tuple[str, ...] = ("mnist", "tfrecord", "synthetic")
MODELS: tuple[str, ...] = ("cnn", "cnn-heavy")
SPOT_WATCH: tuple[str, ...] = ("auto", "on", "off")
JIT: tuple[str, ...] = ("auto", "on", "off")
DEFAULT_IMDS = "http://169.254.169.254"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_PREEMPTED = 3


@dataclass(frozen=True)
class TrainConfig:
    """Resolved trainer settings (one per flag). Written to ``MODEL_DIR/config.json``."""

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
    evaluate: bool = True
    tensorboard: bool = True
    status_file: str | None = None
    status_interval: float = 2.0
    spot_watch: str = "auto"
    imds_endpoint: str = DEFAULT_IMDS
    spot_poll_interval: float = 5.0
    server_timeout: float = 600.0
    log_level: str = "INFO"

    @property
    def status_path(self) -> str:
        return self.status_file or os.path.join(self.model_dir, "status.json")

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
    def is_chief(self) -> bool:
        return self.tf_config is None or self.tf_config.is_chief

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "strategy": self.strategy, "task": self.task,
                "is_chief": self.is_chief,
                "tf_config": None if self.tf_config is None else self.tf_config.to_dict()}


class ConfigError(ValueError):
    """Bad input; ``problems`` lists every one found."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("invalid trainer input:\n" + "\n".join(f"  - {p}" for p in self.problems))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError (exit 2 with a Problem) instead of printing and exiting itself."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError([Problem("argv", message, f"see `{self.prog} --help`")])


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m trainer",
        description="tfcluster trainer: one program for every host. Reads TF_CONFIG from the environment.",
        epilog="Exit codes: 0 done, 1 training failure, 2 bad input (nothing started), 3 spot preemption "
               "(a backup was saved; restart to resume). Model dir layout: config.json, status.json, "
               "checkpoints/, backup/, logs/, export/, metrics.json, MANIFEST.sha256, DONE (written last).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("job")
    g.add_argument("--model-dir", required=True,
                   help="output directory of this task (the same path on every host; chief writes the artifacts)")
    g.add_argument("--strategy", default="auto", choices=tfconfig.STRATEGY_CHOICES,
                   help="tf.distribute strategy; auto: no TF_CONFIG -> mirrored, ps in cluster -> parameter_server, "
                        "else multi_worker_mirrored")
    g.add_argument("--tpu", default=None, help="TPU name or grpc:// address for --strategy tpu")
    d = p.add_argument_group("data")
    d.add_argument("--dataset", default="mnist", choices=DATASETS,
                   help="mnist: npz with x_train/y_train/x_test/y_test; tfrecord: files with 'image' (784 bytes) "
                        "and 'label' (int64) features; synthetic: generated in memory (tests)")
    d.add_argument("--data", default=None,
                   help="mnist: local .npz path or s3://BUCKET/KEY (default CACHE_DIR/mnist.npz); tfrecord: file glob "
                        "(sharded by FILE across workers)")
    d.add_argument("--data-sha256", default=None, help="expected sha256 of the --data file (checked before training)")
    d.add_argument("--s3-endpoint-url", default=os.environ.get("TFCLUSTER_S3_ENDPOINT_URL"),
                   help="S3 endpoint for s3:// data (env TFCLUSTER_S3_ENDPOINT_URL; default: AWS)")
    d.add_argument("--cache-dir", default=None,
                   help="dataset cache (env TFCLUSTER_DATASETS; default <repo>/.cache/datasets)")
    d.add_argument("--synthetic-examples", type=_positive_int, default=4096,
                   help="training examples of --dataset synthetic")
    d.add_argument("--max-examples", type=_positive_int, default=None,
                   help="use only the first N training examples (quick runs)")
    d.add_argument("--shuffle-buffer", type=_positive_int, default=10000, help="shuffle buffer, in examples")
    d.add_argument("--seed", type=int, default=42, help="seed of shuffling and weight initialisation")
    t = p.add_argument_group("training")
    t.add_argument("--model", default="cnn", choices=MODELS,
                   help="cnn: Conv32-MaxPool-Dense10 (the Keras multi-worker reference); cnn-heavy: "
                        "Conv64-Conv64-MaxPool-Dense128-Dense10 (compute-bound, for scaling)")
    t.add_argument("--epochs", type=_positive_int, default=3, help="epochs to train in total (resumes included)")
    t.add_argument("--steps-per-epoch", type=_positive_int, default=None,
                   help="steps per epoch (default: training examples // global batch)")
    t.add_argument("--batch-size-per-replica", type=_positive_int, default=64,
                   help="per-replica batch; global batch = this x replicas")
    t.add_argument("--learning-rate", type=_positive_float, default=0.001, help="Adam learning rate")
    t.add_argument("--steps-per-execution", type=_positive_int, default=50,
                   help="train steps per tf.function call (fewer Python round trips)")
    t.add_argument("--jit-compile", default="auto", choices=JIT,
                   help="XLA: auto = on for mirrored/tpu, off for multi-worker (XLA has no CPU collectives)")
    t.add_argument("--mixed-precision", default="off", choices=("off", "float16", "bfloat16"),
                   help="Keras mixed-precision policy (float16 for GPUs, bfloat16 for TPUs/CPUs with bf16 units); "
                        "the softmax output stays float32")
    t.add_argument("--no-evaluate", dest="evaluate", action="store_false",
                   help="skip evaluating the exported model on the test split")
    t.add_argument("--no-tensorboard", dest="tensorboard", action="store_false",
                   help="do not write TensorBoard logs to MODEL_DIR/logs")
    o = p.add_argument_group("operations")
    o.add_argument("--status-file", default=None, help="progress file polled by the orchestration "
                   "(default MODEL_DIR/status.json)")
    o.add_argument("--status-interval", type=_positive_float, default=2.0,
                   help="seconds between status file updates")
    o.add_argument("--spot-watch", default=os.environ.get("TFCLUSTER_SPOT_WATCH", "auto"), choices=SPOT_WATCH,
                   help="watch the EC2 spot interruption notice (IMDSv2); auto = only if IMDS answers at start "
                        "(env TFCLUSTER_SPOT_WATCH)")
    o.add_argument("--imds-endpoint", default=os.environ.get("TFCLUSTER_IMDS_ENDPOINT", DEFAULT_IMDS),
                   help="instance metadata endpoint (env TFCLUSTER_IMDS_ENDPOINT)")
    o.add_argument("--spot-poll-interval", type=_positive_float, default=5.0,
                   help="seconds between spot notice polls")
    o.add_argument("--server-timeout", type=_positive_float, default=600.0,
                   help="parameter_server: a ps/worker task exits 1 when the chief has been unreachable this long")
    o.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="Python log level")
    return p


def _data_problems(cfg: TrainConfig) -> list[Problem]:
    problems: list[Problem] = []
    if cfg.dataset == "tfrecord":
        if not cfg.data:
            problems.append(Problem("--data", "--dataset tfrecord needs a file glob",
                                    "pass --data '/path/train-*.tfrecord'"))
        elif "://" not in cfg.data and not glob.glob(cfg.data):
            problems.append(Problem("--data", f"no file matches {cfg.data!r}", "check the glob and the path"))
    elif cfg.dataset == "mnist" and cfg.data:
        scheme = urllib.parse.urlsplit(cfg.data).scheme
        if scheme == "s3":
            from trainer.datasets import DatasetError, parse_s3_uri

            try:
                parse_s3_uri(cfg.data)
            except DatasetError as exc:
                problems.append(Problem("--data", str(exc), "write it as s3://BUCKET/KEY"))
        elif scheme:
            problems.append(Problem("--data", f"unsupported URI scheme {scheme!r}",
                                    "give a local .npz path or an s3://BUCKET/KEY URI"))
        elif not Path(cfg.data).is_file():
            problems.append(Problem("--data", f"{cfg.data} does not exist",
                                    "run `python -m trainer.datasets fetch` or give the right path"))
    elif cfg.dataset == "synthetic" and cfg.data:
        problems.append(Problem("--data", "--dataset synthetic takes no --data", "drop --data"))
    if cfg.data_sha256 is not None:
        from trainer.datasets import is_sha256

        if not is_sha256(cfg.data_sha256):
            problems.append(Problem("--data-sha256", f"{cfg.data_sha256!r} is not 64 lowercase hex digits",
                                    "use the output of `python -m trainer.datasets sha256 FILE`"))
    return problems


def config_problems(cfg: TrainConfig, strategy: str) -> list[Problem]:
    """Problems of the flags themselves and of the flags against the resolved strategy."""
    problems: list[Problem] = []
    if not cfg.model_dir.strip():
        problems.append(Problem("--model-dir", "is empty", "give a directory path"))
    elif "://" not in cfg.model_dir and Path(cfg.model_dir).exists() and not Path(cfg.model_dir).is_dir():
        problems.append(Problem("--model-dir", f"{cfg.model_dir} exists and is not a directory",
                                "choose another path"))
    if strategy == "tpu" and not cfg.tpu:
        problems.append(Problem("--tpu", "--strategy tpu needs a TPU name or address",
                                "pass --tpu NAME (or grpc://HOST:8470)"))
    if cfg.tpu and strategy != "tpu":
        problems.append(Problem("--tpu", f"--tpu is only used with --strategy tpu, strategy is {strategy}",
                                "drop --tpu or pass --strategy tpu"))
    if strategy == "parameter_server" and cfg.jit_compile == "on":
        problems.append(Problem("--jit-compile", "XLA is not supported with parameter_server",
                                "use --jit-compile auto or off"))
    if strategy == "multi_worker_mirrored" and cfg.jit_compile == "on":
        problems.append(Problem("--jit-compile", "XLA has no CPU collectives: multi_worker_mirrored workers crash",
                                "use --jit-compile auto or off"))
    imds = urllib.parse.urlsplit(cfg.imds_endpoint)
    if imds.scheme not in ("http", "https") or not imds.netloc:
        problems.append(Problem("--imds-endpoint", f"{cfg.imds_endpoint!r} is not an http(s) URL",
                                "use e.g. http://169.254.169.254"))
    return problems + _data_problems(cfg)


def parse_invocation(argv: Sequence[str] | None, env: Mapping[str, str]) -> Invocation:
    """argv + environment -> a validated Invocation; raises ConfigError listing every problem found."""
    ns = build_parser().parse_args(argv)
    values = vars(ns)
    cfg = TrainConfig(**values)
    problems: list[Problem] = []
    tf_config: TFConfig | None = None
    try:
        tf_config = tfconfig.parse_tf_config(env.get("TF_CONFIG"), cfg.strategy)
    except TFConfigError as exc:
        problems.extend(exc.problems)
    strategy = tfconfig.resolve_strategy(None if tf_config is None else tf_config.cluster, cfg.strategy)
    if tf_config is not None and tf_config.task_type == "evaluator":
        problems.append(Problem("task.type", "this trainer runs no side-car evaluator (the chief evaluates the "
                                "exported model)", "do not start a task with type evaluator"))
    if tf_config is not None and strategy == "multi_worker_mirrored" and tf_config.task_type == "ps":
        problems.append(Problem("task.type", "a ps task needs strategy parameter_server",
                                "use --strategy parameter_server or auto"))
    problems.extend(config_problems(cfg, strategy))
    if problems:
        raise ConfigError(problems)
    return Invocation(cfg, tf_config, strategy)


def write_config_json(inv: Invocation, path: str) -> None:
    from trainer.artifacts import atomic_write_text

    atomic_write_text(path, json.dumps(inv.to_dict(), indent=2, sort_keys=True) + "\n")
