"""Shared helpers of the inventory unit tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_json(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def runner_for(outputs: dict[str, Any], code: int = 0, err: str = "") -> Callable[[Path], tuple[int, str, str]]:
    """A fake `terraform output -json` that prints ``outputs``."""
    return lambda _tf_dir: (code, json.dumps(outputs), err)


class FakeEC2:
    """Just enough of a boto3 EC2 client for the aws source: one page of the given instances."""

    def __init__(self, instances: list[dict[str, Any]]) -> None:
        self.instances = instances
        self.filters: list[Any] = []

    def get_paginator(self, name: str) -> FakeEC2:
        assert name == "describe_instances"
        return self

    def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
        self.filters = kwargs["Filters"]
        return [{"Reservations": [{"Instances": self.instances}]}]


def instance(iid: str, private_ip: str | None, task_type: str, index: str, public_ip: str | None = None,
             **tags: str) -> dict[str, Any]:
    """A DescribeInstances entry of cluster `c` with the slot tags (extra tags by contract key: port=..., ...)."""
    from tfcluster.core.contract import TAG_KEYS

    all_tags = {TAG_KEYS["cluster"]: "c", TAG_KEYS["task_type"]: task_type, TAG_KEYS["task_index"]: index,
                **{TAG_KEYS[k]: v for k, v in tags.items()}}
    out: dict[str, Any] = {"InstanceId": iid, "Tags": [{"Key": k, "Value": v} for k, v in all_tags.items()]}
    if private_ip:
        out["PrivateIpAddress"] = private_ip
    if public_ip:
        out["PublicIpAddress"] = public_ip
    return out
