"""The trainer's command line: every bad input exits 2 with FIELD + fix, before TensorFlow is imported."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import cli, config
from trainer.config import ConfigError, build_parser, parse_invocation
from trainer.devices import TpuHost

REPO = Path(__file__).resolve().parents[3]
W2 = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}
TPU_VM = TpuHost("tpu-vm-1", ("/dev/accel0",), True, None, "2.20.0")


def tfc(cluster: object, task_type: object = "worker", index: object = 0) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


@pytest.mark.parametrize(("argv", "tf_config", "expected"), [
    ([], None, ("mirrored", "local:0", True)),
    ([], tfc(W2, "worker", 0), ("multi_worker_mirrored", "worker:0", True)),
    ([], tfc(W2, "worker", 1), ("multi_worker_mirrored", "worker:1", False)),
    ([], tfc({"chief": ["h:1"], "worker": ["h:2"]}, "worker", 0), ("multi_worker_mirrored", "worker:0", False)),
    ([], tfc({"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3"]}, "ps", 0), ("parameter_server", "ps:0", False)),
    ([], tfc({"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3"]}, "chief", 0), ("parameter_server", "chief:0",
     True)),
    (["--strategy", "tpu"], None, ("tpu", "local:0", True)),
    (["--strategy", "tpu", "--tpu", "local"], None, ("tpu", "local:0", True)),
    (["--strategy", "mirrored"], None, ("mirrored", "local:0", True)),
])
def test_valid_invocations(tmp_path: Path, argv: list[str], tf_config: str | None,
                           expected: tuple[str, str, bool]) -> None:
    env = {"TF_CONFIG": tf_config} if tf_config else {}
    inv = parse_invocation(["--model-dir", str(tmp_path), "--dataset", "synthetic", *argv], env, lambda: TPU_VM)
    assert (inv.strategy, inv.task, inv.is_chief) == expected
    assert inv.config.optimisation.batch_size_per_replica == 64 and inv.config.model_dir == str(tmp_path)
    assert inv.tpu == "local"


BAD = [
    # (argv, TF_CONFIG, field, words in the message)
    ([], "{not json", "TF_CONFIG", "not valid JSON"),
    ([], tfc(W2, "master", 0), "task.type", "unknown task type"),
    ([], tfc(W2, "worker", 2), "task.index", "out of range"),
    ([], tfc({}, "worker", 0), "cluster", "empty"),
    ([], tfc({"worker": ["127.0.0.1:2222", "127.0.0.1:2222"]}), "cluster.worker[1]", "also used by"),
    ([], tfc({"worker": ["h:1"], "evaluator": ["h:2"]}), "cluster.evaluator", "must not be listed"),
    ([], tfc({"ps": ["h:1"], "worker": ["h:2"]}, "worker", 0), "cluster.chief", "exactly one chief"),
    (["--strategy", "parameter_server"], tfc(W2), "cluster.chief", "exactly one chief"),
    (["--strategy", "multi_worker_mirrored"], None, "TF_CONFIG", "is not set"),
    ([], tfc(W2, "evaluator", 0), "task.type", "no side-car evaluator"),
    (["--strategy", "tpu"], None, "--strategy", "tpu runs only on a single Cloud TPU VM (tpu='local')"),
    (["--strategy", "tpu", "--tpu", "grpc://10.0.0.2:8470"], None, "argv", "invalid choice"),
    (["--tpu", "local"], None, "--tpu", "only used with --strategy tpu"),
    (["--jit-compile", "on"], tfc(W2), "--jit-compile", "no CPU collectives"),
    (["--imds-endpoint", "169.254.169.254"], None, "--imds-endpoint", "not an http(s) URL"),
    (["--data", "/nonexistent/mnist.npz", "--dataset", "mnist"], None, "--data", "does not exist"),
    (["--data", "s3://B/key.npz", "--dataset", "mnist"], None, "--data", "not an s3://BUCKET/KEY"),
    (["--data", "ftp://x/y.npz", "--dataset", "mnist"], None, "--data", "unsupported URI scheme"),
    (["--dataset", "tfrecord"], None, "--data", "needs a file glob"),
    (["--dataset", "tfrecord", "--data", "/nonexistent/*.tfrecord"], None, "--data", "no file matches"),
    (["--data", "x.npz"], None, "--data", "takes no --data"),
    (["--data-sha256", "abc"], None, "--data-sha256", "64 lowercase hex"),
    (["--epochs", "0"], None, "argv", "must be at least 1"),
    (["--batch-size-per-replica", "many"], None, "argv", "not a whole number"),
    (["--learning-rate", "-1"], None, "argv", "greater than 0"),
    (["--strategy", "nccl"], None, "argv", "invalid choice"),
    (["--no-such-flag"], None, "argv", "unrecognized arguments"),
]


@pytest.mark.parametrize(("argv", "tf_config", "field", "words"), BAD)
def test_bad_input_names_field_and_fix(tmp_path: Path, argv: list[str], tf_config: str | None, field: str,
                                       words: str) -> None:
    env = {"TF_CONFIG": tf_config} if tf_config else {}
    base = ["--model-dir", str(tmp_path)] + ([] if "--dataset" in argv else ["--dataset", "synthetic"])
    with pytest.raises(ConfigError) as err:
        parse_invocation([*base, *argv], env)
    fields = [p.field for p in err.value.problems]
    assert field in fields, err.value
    problem = err.value.problems[fields.index(field)]
    assert words in problem.message and problem.fix
    assert f"{field}: " in str(err.value) and "Fix: " in str(err.value)


def test_model_dir_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ConfigError, match=r"--model-dir: .* is not a directory"):
        parse_invocation(["--model-dir", str(f), "--dataset", "synthetic"], {})


def test_missing_model_dir_flag() -> None:
    with pytest.raises(ConfigError, match="--model-dir"):
        parse_invocation(["--dataset", "synthetic"], {})


def test_every_flag_is_documented_in_help_and_docs(repo: Path) -> None:
    parser = build_parser()
    text = parser.format_help()
    docs = (repo / "docs" / "trainer.md").read_text()
    flags = [opt for action in parser._actions for opt in action.option_strings if opt.startswith("--")]
    assert len(flags) >= 25
    for action in parser._actions:
        if action.option_strings and action.option_strings[0] != "-h":
            assert action.help and len(action.help) > 10, action.option_strings
    for flag in flags:
        assert flag in text
        if flag != "--help":
            assert f"`{flag}" in docs, f"{flag} is not documented in docs/trainer.md"
    assert "Exit codes: 0 done, 1 training failure, 2 bad input" in " ".join(text.split())


def test_config_fields_match_flags() -> None:
    dests = {a.dest for a in build_parser()._actions if a.dest != "help"}
    assert dests == {"model_dir", *config.FLAG_FIELDS}
    groups = {g.title: {a.dest for a in g._group_actions} for g in build_parser()._action_groups}
    for name, cls in config.GROUPS.items():  # one --help group per TrainConfig group, with exactly its flags
        assert groups[name] == {dest for dest, (group, _) in config.FLAG_FIELDS.items() if group == name}, name
        fields = {f.name for g, f in config.FLAG_FIELDS.values() if g == name}
        assert {f.name for f in dataclasses.fields(cls)} == fields


# config.json's "config" keys (one per flag, flat) as written before TrainConfig was grouped: readers keep working.
CONFIG_JSON_KEYS = {
    "model_dir", "strategy", "tpu", "dataset", "data", "data_sha256", "s3_endpoint_url", "cache_dir",
    "synthetic_examples", "max_examples", "model", "epochs", "steps_per_epoch", "batch_size_per_replica",
    "learning_rate", "steps_per_execution", "shuffle_buffer", "seed", "jit_compile", "mixed_precision", "collective",
    "gpus", "require_gpu", "evaluate", "tensorboard", "checkpoint_s3", "status_file", "status_interval", "spot_watch",
    "imds_endpoint", "spot_poll_interval", "server_timeout", "log_level"}


def test_config_is_grouped_and_config_json_stays_flat(tmp_path: Path) -> None:
    argv = ["--model-dir", str(tmp_path), "--dataset", "synthetic", "--epochs", "7", "--model", "cnn-heavy",
            "--checkpoint-s3", "s3://bucket/jobs/a", "--spot-watch", "off", "--no-tensorboard"]
    cfg = parse_invocation(argv, {}).config
    assert isinstance(cfg.data, config.DataConfig) and cfg.data.dataset == "synthetic" and cfg.data.path is None
    assert (cfg.optimisation.epochs, cfg.model.name, cfg.s3.checkpoint, cfg.spot.watch) == \
        (7, "cnn-heavy", "s3://bucket/jobs/a", "off")
    assert cfg.reporting.tensorboard is False and cfg.distribution.strategy == "auto"
    flat = cfg.to_dict()
    assert set(flat) == CONFIG_JSON_KEYS
    assert (flat["epochs"], flat["model"], flat["checkpoint_s3"], flat["spot_watch"], flat["data"]) == \
        (7, "cnn-heavy", "s3://bucket/jobs/a", "off", None)
    assert config.TrainConfig.from_flags(flat) == cfg
    with pytest.raises(TypeError, match="no_such_flag"):
        config.TrainConfig.from_flags({**flat, "no_such_flag": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.optimisation.epochs = 8  # type: ignore[misc]


def test_prepare_writes_config_json_and_clears_done(tmp_path: Path) -> None:
    (tmp_path / "DONE").write_text("{}")
    inv = cli.prepare(["--model-dir", str(tmp_path), "--dataset", "synthetic", "--epochs", "7"], {})
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["config"]["epochs"] == 7 and written["strategy"] == "mirrored" and written["task"] == "local:0"
    assert written == json.loads(json.dumps(inv.to_dict()))
    assert not (tmp_path / "DONE").exists()


def test_non_chief_writes_no_config(tmp_path: Path) -> None:
    cli.prepare(["--model-dir", str(tmp_path), "--dataset", "synthetic"], {"TF_CONFIG": tfc(W2, "worker", 1)})
    assert not (tmp_path / "config.json").exists()


def _run(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = ("import sys; from trainer.cli import main; rc = main(sys.argv[1:]); "
            "print('TF_IMPORTED' if 'tensorflow' in sys.modules else 'TF_NOT_IMPORTED'); sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env={"PATH": "/usr/bin:/bin", **env},
                          capture_output=True, text=True, timeout=60, check=False)


def test_bad_tf_config_exits_2_before_tensorflow(tmp_path: Path) -> None:
    result = _run(["--model-dir", str(tmp_path / "m"), "--dataset", "synthetic"],
                  {"TF_CONFIG": tfc({"worker": ["127.0.0.1:1", "127.0.0.1:1"]})}, tmp_path)
    assert result.returncode == 2
    assert "TF_NOT_IMPORTED" in result.stdout
    assert "cluster.worker[1]: address 127.0.0.1:1 is also used by worker[0]. Fix:" in result.stderr


def test_strategy_tpu_without_a_tpu_exits_2_before_tensorflow(tmp_path: Path) -> None:
    result = _run(["--model-dir", str(tmp_path / "m"), "--strategy", "tpu", "--dataset", "synthetic"], {}, tmp_path)
    assert result.returncode == 2 and "TF_NOT_IMPORTED" in result.stdout
    assert "--strategy: host " in result.stderr and "single Cloud TPU VM (tpu='local')" in result.stderr
    assert "no TPU device (/dev/accel* or /dev/vfio/[0-9]*)" in result.stderr and "Fix: " in result.stderr


def test_a_malloc_pad_that_is_not_bytes_exits_2_before_tensorflow(tmp_path: Path) -> None:
    result = _run(["--model-dir", str(tmp_path / "m"), "--dataset", "synthetic"],
                  {"TFCLUSTER_MALLOC_TOP_PAD": "64M", "PYTHONPATH": str(REPO)}, tmp_path)
    assert result.returncode == 2 and "TF_NOT_IMPORTED" in result.stdout, result.stderr
    assert "TFCLUSTER_MALLOC_TOP_PAD='64M' is not a number of bytes. Fix:" in result.stderr
    assert json.loads((tmp_path / "m" / "status.json").read_text())["state"] == "failed"


def test_help_exits_0() -> None:
    result = subprocess.run([sys.executable, "-m", "trainer", "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0 and "--batch-size-per-replica" in result.stdout


def test_select_legacy_keras_sets_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # pretend TF is already imported
    with pytest.raises(RuntimeError, match="before legacy Keras"):
        cli.select_legacy_keras()
    monkeypatch.delitem(sys.modules, "tensorflow")
    cli.select_legacy_keras()
    import os

    assert os.environ["TF_USE_LEGACY_KERAS"] == "1"
