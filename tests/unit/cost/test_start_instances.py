"""`make start`'s EC2 side (tfcluster/cost/clusters.py start_instances, moto): only the applied state's instances
are started, and only once each; what carries the cluster tag without being the state's is left alone; an instance
that is gone (DOWN=1 terminated it) cannot be started and says what to do; a start that never completes is bounded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tfcluster.core.contract import TAG_KEYS
from tfcluster.cost import clusters

CLUSTER = "tfcluster-aws"


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "x")
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


def launch(ec2: Any, slots: Sequence[tuple[str, int]], cluster: str = CLUSTER) -> list[str]:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ids = []
    for task_type, index in slots:
        tags = [{"Key": TAG_KEYS["cluster"], "Value": cluster}, {"Key": TAG_KEYS["task_type"], "Value": task_type},
                {"Key": TAG_KEYS["task_index"], "Value": str(index)}]
        reply = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
                                  TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
        ids.append(reply["Instances"][0]["InstanceId"])
    return ids


def states(ec2: Any, ids: Sequence[str]) -> dict[str, str]:
    return {i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances(InstanceIds=list(ids))["Reservations"]
            for i in r["Instances"]}


def test_the_states_stopped_instances_start_and_nothing_else(ec2: Any) -> None:
    ours = launch(ec2, [("chief", 0), ("worker", 0)])
    other = launch(ec2, [("worker", 1)])  # tagged like a host of the cluster, but not in the state
    ec2.stop_instances(InstanceIds=[ours[1], *other])
    state = {ours[0]: "chief:0", ours[1]: "worker:0"}
    result = clusters.start_instances(ec2, CLUSTER, state, interval=0.01)
    assert result.started == (ours[1],) and result.already == (ours[0],)
    assert [n.instance_id for n in result.not_ours] == other
    assert states(ec2, ours) == {ours[0]: "running", ours[1]: "running"}
    assert states(ec2, other) == {other[0]: "stopped"}
    text = clusters.start_text(CLUSTER, result)
    assert f"started 1 instance(s): {ours[1]}; already running: {ours[0]}" in text and "per hour" in text


def test_a_terminated_instance_cannot_be_started_and_says_to_provision(ec2: Any) -> None:
    ids = launch(ec2, [("worker", 0), ("worker", 1)])
    ec2.stop_instances(InstanceIds=[ids[0]])
    ec2.terminate_instances(InstanceIds=[ids[1]])
    with pytest.raises(clusters.StartError, match=r"cannot be started\. Fix: `make provision CLUSTER=aws`") as caught:
        clusters.start_instances(ec2, CLUSTER, {ids[0]: "worker:0", ids[1]: "worker:1"}, interval=0.01)
    assert ids[1] in str(caught.value)
    assert states(ec2, [ids[0]]) == {ids[0]: "stopped"}  # nothing was started: refused before


def test_a_start_that_never_completes_is_bounded() -> None:
    class Stuck:
        """An EC2 whose instance stays pending."""

        def __init__(self) -> None:
            self.started: list[list[str]] = []

        def get_paginator(self, name: str) -> Any:
            instance = {"InstanceId": "i-1", "State": {"Name": "pending"}, "InstanceType": "g5.xlarge",
                        "Tags": [{"Key": TAG_KEYS["cluster"], "Value": CLUSTER},
                                 {"Key": TAG_KEYS["task_type"], "Value": "worker"},
                                 {"Key": TAG_KEYS["task_index"], "Value": "0"}]}
            return type("P", (), {"paginate": lambda self, **_: [{"Reservations": [{"Instances": [instance]}]}]})()

    now = [0.0]
    with pytest.raises(clusters.StartError, match=r"not running after 30 s: i-1 \(pending\)"):
        clusters.start_instances(Stuck(), CLUSTER, {"i-1": "worker:0"}, timeout=30, interval=10,
                                 sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
