"""aws source against moto's EC2 over HTTP on 127.0.0.1: tags give the slot, stopped instances are ignored,
DescribeInstances is paginated, and the whole CLI path (env -> boto3 -> inventory) works."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ports import free_port
from tfcluster.core.contract import EXIT_BAD_INPUT
from tfcluster.inventory.build import unmarked
from tfcluster.inventory.cli import Injected, main
from tfcluster.inventory.sources.aws import fetch_aws

boto3 = pytest.importorskip("boto3")

pytestmark = pytest.mark.integration
REGION = "us-east-1"


@pytest.fixture
def aws_env(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION,
           "AWS_ENDPOINT_URL": endpoint}
    for key in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_EC2", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def _ec2(endpoint: str) -> Any:
    return boto3.client("ec2", region_name=REGION, endpoint_url=endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def _launch(ec2: Any, cluster: str, slots: list[tuple[str, int]]) -> list[str]:
    """One instance per slot, launched in a random order (the inventory must not care)."""
    image = ec2.describe_images()["Images"][0]["ImageId"]
    ids = []
    for task_type, index in random.Random(7).sample(slots, len(slots)):
        tags = [{"Key": "tfcluster:cluster", "Value": cluster}, {"Key": "tfcluster:task_type", "Value": task_type},
                {"Key": "tfcluster:task_index", "Value": str(index)}, {"Key": "Name", "Value": f"{task_type}{index}"}]
        out = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="t3.micro",
                                TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
        ids.append(out["Instances"][0]["InstanceId"])
    return ids


class CountingClient:
    """Wraps a boto3 client to count DescribeInstances pages."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.pages = 0

    def get_paginator(self, name: str) -> Any:
        paginator = self.client.get_paginator(name)
        outer = self

        class Counting:
            def paginate(self, **kwargs: Any) -> Iterator[Any]:
                for page in paginator.paginate(**kwargs):
                    outer.pages += 1
                    yield page

        return Counting()


def test_aws_source_reads_tags_ignores_stopped_and_paginates(endpoint: str, aws_env: dict[str, str]) -> None:
    ec2 = _ec2(endpoint)
    slots = [("chief", 0)] + [("worker", i) for i in range(7)] + [("evaluator", 0)]
    _launch(ec2, "pager", slots)
    stopped = _launch(ec2, "pager", [("worker", 7)])
    ec2.stop_instances(InstanceIds=stopped)
    _launch(ec2, "other-cluster", [("worker", 0)])  # another cluster's instance: filtered out by the tag

    counting = CountingClient(ec2)
    found = fetch_aws("pager", 2222, client=counting, page_size=5)
    assert counting.pages >= 2, "DescribeInstances was not paginated"
    assert len(found.specs) == len(slots)  # stopped and foreign instances are not there
    assert stopped[0] not in {s.label.split()[0] for s in found.specs}

    out = io.StringIO()
    env = {**aws_env, "TFCLUSTER_SOURCE": "aws", "TFCLUSTER_CLUSTER": "pager"}
    assert main(["--list"], env, out, Injected(aws_page_size=5)) == 0
    inv = unmarked(json.loads(out.getvalue()))
    assert inv["worker"]["hosts"] == [f"worker-{i}" for i in range(7)]
    assert inv["chief"]["hosts"] == ["chief-0"] and inv["evaluator"]["hosts"] == ["evaluator-0"]
    assert inv["tfcluster"]["vars"]["tfcluster_cluster_name"] == "pager"
    spec = inv["tfcluster"]["vars"]["tfcluster_cluster_spec"]
    assert sorted(spec) == ["chief", "worker"] and len(spec["worker"]) == 7
    addresses = {v["tfcluster_address"] for v in inv["_meta"]["hostvars"].values()}
    assert len(addresses) == len(slots) and all(a.endswith(":2222") for a in addresses)  # contract.TF_PORT

    # Without our page size (the CLI default) the result is identical.
    again = io.StringIO()
    assert main(["--list"], env, again) == 0
    assert again.getvalue() == out.getvalue()


def test_aws_cli_errors(endpoint: str, aws_env: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    ec2 = _ec2(endpoint)
    _launch(ec2, "broken", [("worker", 0), ("worker", 0), ("gpu", 1)])
    out = io.StringIO()
    env = {**aws_env, "TFCLUSTER_SOURCE": "aws", "TFCLUSTER_CLUSTER": "broken"}
    assert main(["--list"], env, out) == EXIT_BAD_INPUT
    assert out.getvalue() == ""
    assert "task_index: slot worker 0 is also taken by i-" in caplog.text
    assert "task_type: task_type 'gpu' is not a task type. Fix: use one of chief, worker, ps, evaluator" in caplog.text

    caplog.clear()
    env = {**aws_env, "TFCLUSTER_SOURCE": "aws", "TFCLUSTER_CLUSTER": "nobody"}
    assert main(["--list"], env, io.StringIO()) == EXIT_BAD_INPUT
    assert ("hosts: no hosts found. Fix: no running instance is tagged tfcluster:cluster=nobody: run `make "
            "provision` first, or check TFCLUSTER_CLUSTER and AWS_REGION") in caplog.text


def test_aws_unreachable_endpoint_is_one_problem(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    env = {"TFCLUSTER_SOURCE": "aws", "TFCLUSTER_CLUSTER": "xyz"}
    assert main(["--list"], env, io.StringIO()) == EXIT_BAD_INPUT
    assert "EC2 DescribeInstances: failed: Could not connect to the endpoint URL" in caplog.text
    assert "Fix: check AWS credentials, region and AWS_ENDPOINT_URL" in caplog.text


def test_aws_no_region(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path) -> None:
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    assert main(["--list"], {"TFCLUSTER_SOURCE": "aws", "TFCLUSTER_CLUSTER": "xyz"}, io.StringIO()) == EXIT_BAD_INPUT
    assert ("AWS_REGION: no AWS region is set. Fix: export AWS_REGION=us-east-1 (or AWS_DEFAULT_REGION, or a profile "
            "with a region)") in caplog.text


def test_aws_no_credentials(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    assert main(["--list"], {"TFCLUSTER_SOURCE": "aws", "TFCLUSTER_CLUSTER": "xyz"}, io.StringIO()) == EXIT_BAD_INPUT
    assert ("AWS credentials: no AWS credentials found. Fix: export AWS_PROFILE or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY") in caplog.text
