"""Table tests of the shared TF_CONFIG rules (tfcluster/core/contract.py)."""

from __future__ import annotations

import json

import pytest

from tfcluster.core.contract import TFConfigError, build_tf_config, chief_of, parse_tf_config, resolve_strategy

W2 = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
PS = {"chief": ["10.0.0.1:2222"], "ps": ["10.0.0.2:2222"], "worker": ["10.0.0.3:2222", "10.0.0.4:2222"]}


def _tf(cluster: object, task_type: object = "worker", index: object = 0) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


@pytest.mark.parametrize(
    ("raw", "strategy", "field", "words"),
    [
        ("{not json", "auto", "TF_CONFIG", "not valid JSON"),
        ("[1, 2]", "auto", "TF_CONFIG", "must be a JSON object"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), "auto", "cluster", "is missing"),
        (json.dumps({"cluster": W2}), "auto", "task", "missing or not an object"),
        (json.dumps({"cluster": W2, "task": {"type": "worker"}}), "auto", "task", "needs both"),
        (_tf({"gpu": ["a:1"]}), "auto", "cluster.gpu", "unknown task type 'gpu'"),
        (_tf(W2, "master", 0), "auto", "task.type", "unknown task type 'master'"),
        (_tf(W2, "worker", 2), "auto", "task.index", "out of range"),
        (_tf(W2, "worker", -1), "auto", "task.index", "out of range"),
        (_tf(W2, "worker", "0"), "auto", "task.index", "not an integer"),
        (_tf(W2, "chief", 0), "auto", "task.index", "cluster has 0 chief"),
        (_tf({}), "auto", "cluster", "the cluster is empty"),
        (_tf({"worker": []}), "auto", "cluster", "the cluster is empty"),
        (_tf({"worker": ["10.0.0.1:2222", "10.0.0.1:2222"]}), "auto", "cluster.worker[1]", "also used by worker[0]"),
        (_tf({"worker": ["10.0.0.1:2222"], "evaluator": ["10.0.0.9:2222"]}), "auto", "cluster.evaluator",
         "must not be listed inside cluster"),
        (_tf({"worker": ["10.0.0.1"]}), "auto", "cluster.worker[0]", "has no port"),
        (_tf({"worker": ["10.0.0.1:99999"]}), "auto", "cluster.worker[0]", "not in 1..65535"),
        (_tf({"worker": "10.0.0.1:2222"}), "auto", "cluster.worker", "must be a list"),
        (_tf(["10.0.0.1:2222"]), "auto", "cluster", "must be an object"),
        (_tf({"chief": ["a:1", "b:1"], "worker": ["c:1"]}, "worker", 0), "auto", "cluster.chief", "2 chiefs"),
        (_tf({"ps": ["a:1"], "worker": ["b:1"]}), "auto", "cluster.chief", "exactly one chief"),
        (_tf({"chief": ["a:1"], "worker": ["b:1"]}, "chief", 0), "parameter_server", "cluster.ps",
         "at least one ps"),
        (_tf({"chief": ["a:1"], "ps": ["b:1"]}, "chief", 0), "parameter_server", "cluster.worker",
         "at least one worker"),
        (_tf(PS, "worker", 0), "multi_worker_mirrored", "cluster.ps", "takes no ps tasks"),
        (_tf(W2), "mirrored", "cluster", "runs on one host"),
        (_tf(W2), "tpu", "cluster", "one Cloud TPU VM"),
        (_tf(W2), "horovod", "strategy", "unknown strategy"),
        (None, "multi_worker_mirrored", "TF_CONFIG", "is not set"),
        ("", "parameter_server", "TF_CONFIG", "is not set"),
    ],
)
def test_bad_tf_config_names_field_and_fix(raw: str | None, strategy: str, field: str, words: str) -> None:
    with pytest.raises(TFConfigError) as err:
        parse_tf_config(raw, strategy)
    fields = [p.field for p in err.value.problems]
    assert field in fields, err.value
    problem = err.value.problems[fields.index(field)]
    assert words in problem.message
    assert problem.fix  # every problem tells the user what to do
    assert "Fix:" in str(err.value)


def test_all_problems_reported_together() -> None:
    raw = _tf({"worker": ["a", "b:0", "c:1"], "evaluator": ["e:1"], "gpu": []})
    with pytest.raises(TFConfigError) as err:
        parse_tf_config(raw)
    assert {p.field for p in err.value.problems} == {
        "cluster.worker[0]", "cluster.worker[1]", "cluster.evaluator", "cluster.gpu"}


@pytest.mark.parametrize(
    ("cluster", "strategy", "expected"),
    [
        (None, "auto", "mirrored"),
        ({}, "auto", "mirrored"),
        (W2, "auto", "multi_worker_mirrored"),
        ({"chief": ["a:1"], "worker": ["b:1"]}, "auto", "multi_worker_mirrored"),
        (PS, "auto", "parameter_server"),
        (W2, "parameter_server", "parameter_server"),
        (None, "tpu", "tpu"),
    ],
)
def test_resolve_strategy(cluster: dict | None, strategy: str, expected: str) -> None:
    assert resolve_strategy(cluster, strategy) == expected


@pytest.mark.parametrize(
    ("cluster", "task", "chief", "is_chief", "replicas"),
    [
        (W2, ("worker", 0), ("worker", 0), True, 2),
        (W2, ("worker", 1), ("worker", 0), False, 2),
        ({"chief": ["a:1"], "worker": ["b:1"]}, ("worker", 0), ("chief", 0), False, 2),
        ({"chief": ["a:1"], "worker": ["b:1"]}, ("chief", 0), ("chief", 0), True, 2),
        (PS, ("ps", 0), ("chief", 0), False, 3),
        (W2, ("evaluator", 0), ("worker", 0), False, 2),
    ],
)
def test_valid_configs(cluster: dict, task: tuple[str, int], chief: tuple[str, int], is_chief: bool,
                       replicas: int) -> None:
    cfg = parse_tf_config(_tf(cluster, *task))
    assert cfg is not None
    assert cfg.chief() == chief == chief_of(cluster)
    assert cfg.is_chief is is_chief
    assert cfg.num_workers == replicas
    assert json.loads(cfg.to_json()) == {"cluster": cluster, "task": {"type": task[0], "index": task[1]}}


def test_blank_tf_config_is_single_host() -> None:
    assert parse_tf_config(None) is None
    assert parse_tf_config("  ") is None
    assert parse_tf_config(None, "mirrored") is None


def test_build_round_trips_through_parse() -> None:
    cfg = build_tf_config(PS, "worker", 1)
    again = parse_tf_config(cfg.to_json())
    assert again == cfg


def test_evaluator_index_must_be_zero() -> None:
    with pytest.raises(TFConfigError, match="one evaluator"):
        build_tf_config(W2, "evaluator", 1)


def test_error_names_the_source() -> None:
    with pytest.raises(TFConfigError, match=r"^host worker-3 TF_CONFIG is invalid"):
        build_tf_config({"worker": []}, "worker", 0, source="host worker-3 TF_CONFIG")
