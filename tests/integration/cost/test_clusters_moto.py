"""`make clusters`, the end of `make train` and the `make destroy` check against moto's EC2 over HTTP on 127.0.0.1:
two clusters (one past its tfcluster:expires tag) are listed with cost, untagged and foreign instances are never
listed nor touched, the shutdown behaviour changes on the instances of the cluster's Terraform state only (an
instance someone else tagged with the cluster's full tag set is named as not ours and left as it was), and after
termination 0 instances of the state remain."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.ports import free_port
from tfcluster.core.contract import TAG_KEYS
from tfcluster.core.duration import expires_at
from tfcluster.cost import clusters, prices

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

pytestmark = pytest.mark.integration
REGION = "us-east-1"


@pytest.fixture(scope="module")
def ec2() -> Iterator[Any]:
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # moto keeps one account state per process, shared by every server in it (the inventory tests' too): start
    # from an empty account.
    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/moto-api/reset", method="POST"),
                           timeout=30).close()
    try:
        yield boto3.client("ec2", region_name=REGION, endpoint_url=f"http://127.0.0.1:{port}",
                           aws_access_key_id="testing", aws_secret_access_key="testing")
    finally:
        server.stop()


def launch(ec2: Any, tags: list[dict[str, str]], instance_type: str = "g5.xlarge") -> str:
    image = ec2.describe_images()["Images"][0]["ImageId"]
    spec = [{"ResourceType": "instance", "Tags": tags}] if tags else []
    out = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType=instance_type,
                            TagSpecifications=spec)
    return str(out["Instances"][0]["InstanceId"])


def cluster_tags(cluster: str, task_type: str, index: int, expires: str | None) -> list[dict[str, str]]:
    tags = {TAG_KEYS["cluster"]: cluster, TAG_KEYS["task_type"]: task_type, TAG_KEYS["task_index"]: str(index),
            TAG_KEYS["port"]: "2222", TAG_KEYS["gpus"]: "1", TAG_KEYS["ssh_user"]: "ubuntu"}
    if expires:
        tags[TAG_KEYS["expires"]] = expires
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def shutdown_behavior(ec2: Any, instance_id: str) -> str:
    out = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="instanceInitiatedShutdownBehavior")
    return str(out["InstanceInitiatedShutdownBehavior"]["Value"])


def test_clusters_listing_train_summary_and_destroy_check(ec2: Any) -> None:
    now = datetime.now(UTC)
    fresh = expires_at(24 * 3600, now)
    stale = expires_at(3600, now - timedelta(hours=3))  # created 3 h ago with a 1 h TTL
    live = [launch(ec2, cluster_tags("tfcluster-aws", t, i, fresh)) for t, i in (("chief", 0), ("worker", 0))]
    old = [launch(ec2, cluster_tags("forgotten", "worker", i, stale), "g4dn.xlarge") for i in (0, 1)]
    untagged = launch(ec2, [])
    foreign = launch(ec2, [{"Key": "Name", "Value": "web-1"}, {"Key": "team", "Value": "ops"}])
    handmade = launch(ec2, [{"Key": TAG_KEYS["cluster"], "Value": "tfcluster-aws"}])  # no slot: not ours
    state = clusters.state_slots([{"name": "chief-0", "task_type": "chief", "task_index": 0, "instance_id": live[0]},
                                  {"name": "worker-0", "task_type": "worker", "task_index": 0, "instance_id": live[1]}])
    ec2.stop_instances(InstanceIds=[old[1]])

    found = clusters.list_clusters(ec2, now)
    assert [c.name for c in found] == ["forgotten", "tfcluster-aws"]
    forgotten, aws = found
    assert [i.instance_id for i in aws.instances] == live  # chief first, then worker 0
    assert forgotten.expired and not aws.expired
    assert aws.cost().per_hour == pytest.approx(2 * prices.ON_DEMAND["g5.xlarge"])
    assert forgotten.cost().per_hour == pytest.approx(prices.ON_DEMAND["g4dn.xlarge"])  # the stopped one is free

    text = clusters.clusters_report(ec2, now)
    print(text)
    assert "EXPIRED 2h ago" in text and "in 23h59m" in text
    assert "EXPIRED (past their tfcluster:expires tag): forgotten" in text
    assert "1 running, 1 stopped" in text and "2 x g4dn.xlarge" in text
    assert f"about ${2 * 1.006 + 0.526:.2f} per hour" in text and "estimate" in text
    for other in (untagged, foreign, handmade):
        assert other not in text

    summary = clusters.running_summary(ec2, "tfcluster-aws", now)
    print(summary)
    assert summary.startswith(f"Still running in {REGION}: cluster tfcluster-aws, 2 x g5.xlarge (2 running), "
                              "about $2.01 per hour; expires in ")
    assert "Tear it down: make destroy CLUSTER=aws TFCLUSTER_CLUSTER=tfcluster-aws" in summary

    # make autostop DOWN=1: the instances of the cluster's state only; a copy of the chief's whole tag set on an
    # instance the state does not hold is not ours
    imposter = launch(ec2, cluster_tags("tfcluster-aws", "chief", 0, fresh))
    change = clusters.set_shutdown_behavior(ec2, "tfcluster-aws", "terminate", state)
    assert sorted(change.changed) == sorted(live)
    assert [shutdown_behavior(ec2, i) for i in live] == ["terminate", "terminate"]
    assert shutdown_behavior(ec2, imposter) == "stop"
    assert shutdown_behavior(ec2, handmade) == "stop" and shutdown_behavior(ec2, old[0]) == "stop"
    assert sorted(n.instance_id for n in change.not_ours) == sorted([handmade, imposter])
    assert f"  {imposter}  running  not in the Terraform state of tfcluster-aws" in clusters.render_not_ours(
        "tfcluster-aws", change.not_ours)

    # make destroy: terminate the state's instances, then the EC2 API says 0 of them remain; the imposter is
    # named as not in the state (not as left behind) and nothing else was touched
    assert len(clusters.remaining_instances(ec2, "tfcluster-aws", state).ours) == 2
    ec2.terminate_instances(InstanceIds=live)
    left = clusters.remaining_instances(ec2, "tfcluster-aws", state)
    assert left.ours == ()
    text = clusters.render_remaining("tfcluster-aws", left, REGION)
    assert text.startswith(f"0 instances of the Terraform state of tfcluster-aws remain in {REGION} (checked "
                           "through the EC2 API).\n2 instance(s) tagged tfcluster:cluster=tfcluster-aws are not ours")
    states = {r["Instances"][0]["InstanceId"]: r["Instances"][0]["State"]["Name"]
              for r in ec2.describe_instances(InstanceIds=[untagged, foreign, handmade, imposter])["Reservations"]}
    assert set(states.values()) == {"running"}
    ec2.terminate_instances(InstanceIds=[handmade, imposter])
    empty = clusters.remaining_instances(ec2, "tfcluster-aws", state)
    assert clusters.render_remaining("tfcluster-aws", empty, REGION) == (
        f"0 instances tagged tfcluster:cluster=tfcluster-aws remain in {REGION} (checked through the EC2 API).")
    assert [c.name for c in clusters.list_clusters(ec2, now)] == ["forgotten"]
