"""Cluster listing from EC2 tags (tfcluster/cost/clusters.py) and the price table (tfcluster/cost/prices.py), with a
fake EC2
client: what counts as ours, grouping, cost, expiry, and the texts of make clusters / train / destroy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tfcluster.core.contract import TAG_KEYS
from tfcluster.cost import clusters, prices

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def raw(instance_id: str, tags: dict[str, str], *, itype: str = "g5.xlarge", state: str = "running",
        launched: datetime = NOW - timedelta(hours=3), spot: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"InstanceId": instance_id, "InstanceType": itype, "State": {"Name": state},
                           "LaunchTime": launched, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
    if spot:
        out["InstanceLifecycle"] = "spot"
    return out


def ours(cluster: str, task_type: str = "worker", index: int = 0, expires: str | None = None) -> dict[str, str]:
    tags = {TAG_KEYS["cluster"]: cluster, TAG_KEYS["task_type"]: task_type, TAG_KEYS["task_index"]: str(index),
            "Name": f"{cluster}-{task_type}-{index}"}
    if expires is not None:
        tags[TAG_KEYS["expires"]] = expires
    return tags


class FakeEC2:
    """describe_instances through a paginator (filters applied like EC2 does), modify_instance_attribute recorded."""

    class meta:
        region_name = "us-east-1"

    def __init__(self, instances: list[dict[str, Any]]) -> None:
        self.instances = instances
        self.modified: list[tuple[str, str]] = []
        self.filters: list[list[dict[str, Any]]] = []

    def get_paginator(self, name: str) -> FakeEC2:
        assert name == "describe_instances"
        return self

    def _match(self, instance: dict[str, Any], flt: dict[str, Any]) -> bool:
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        if flt["Name"] == "tag-key":
            return any(k in tags for k in flt["Values"])
        if flt["Name"].startswith("tag:"):
            return tags.get(flt["Name"][4:]) in flt["Values"]
        assert flt["Name"] == "instance-state-name"
        return instance["State"]["Name"] in flt["Values"]

    def paginate(self, Filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.filters.append(Filters)
        hits = [i for i in self.instances if all(self._match(i, f) for f in Filters)]
        return [{"Reservations": [{"Instances": hits[:2]}]}, {"Reservations": [{"Instances": hits[2:]}]}]

    def modify_instance_attribute(self, InstanceId: str, Attribute: str, Value: str) -> None:
        assert Attribute == "instanceInitiatedShutdownBehavior"
        self.modified.append((InstanceId, Value))


PAST = (NOW - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
FUTURE = (NOW + timedelta(hours=21)).strftime("%Y-%m-%dT%H:%M:%SZ")

FLEET = [
    raw("i-a2", ours("alpha", "worker", 1, FUTURE)),
    raw("i-a0", ours("alpha", "chief", 0, FUTURE)),
    raw("i-a1", ours("alpha", "worker", 0, FUTURE)),
    raw("i-b0", ours("old-run", "worker", 0, PAST), itype="g4dn.xlarge", state="stopped",
        launched=NOW - timedelta(days=2, hours=1)),
    raw("i-b1", ours("old-run", "worker", 1, PAST), itype="g4dn.xlarge", state="running",
        launched=NOW - timedelta(days=2, hours=1)),
    raw("i-gone", ours("alpha", "worker", 2, FUTURE), state="terminated"),
    raw("i-untagged", {}),
    raw("i-foreign", {"Name": "web-1", "skypilot-cluster-name": "sky-1"}),
    raw("i-handmade", {TAG_KEYS["cluster"]: "alpha"}),  # a cluster tag but no slot: not ours
    raw("i-badname", ours("Bad_Name")),
    raw("i-odd", ours("odd", "worker", 0, "next tuesday"), itype="x9.mega"),
]


def test_only_tfcluster_instances_are_listed_in_slot_order() -> None:
    ec2 = FakeEC2(FLEET)
    found = clusters.instances(ec2)
    assert [i.instance_id for i in found] == ["i-a0", "i-a1", "i-a2", "i-odd", "i-b0", "i-b1"]
    assert [i.slot for i in found[:3]] == ["chief:0", "worker:0", "worker:1"]
    assert ec2.filters[0][1] == {"Name": "instance-state-name", "Values": list(clusters.LIVE_STATES)}


def test_list_clusters() -> None:
    found = clusters.list_clusters(FakeEC2(FLEET), NOW)
    assert [c.name for c in found] == ["alpha", "odd", "old-run"]
    alpha, odd, old = found
    assert (alpha.types_text(), alpha.states_text(), alpha.age_seconds) == ("3 x g5.xlarge", "3 running", 3 * 3600)
    assert not alpha.expired and alpha.expiry_text() == "in 21h"
    assert alpha.cost() == prices.Estimate(per_hour=round(3 * prices.ON_DEMAND["g5.xlarge"], 4))
    assert old.expired and old.expiry_text() == "EXPIRED 2h ago"
    assert (old.states_text(), old.cost().per_hour) == ("1 running, 1 stopped", prices.ON_DEMAND["g4dn.xlarge"])
    assert odd.expires is None and odd.expiry_text() == "bad tag 'next tuesday'" and not odd.expired
    assert odd.cost().text() == "?"


def test_render_clusters() -> None:
    text = clusters.render_clusters(clusters.list_clusters(FakeEC2(FLEET), NOW), "us-east-1")
    lines = text.splitlines()
    assert lines[0].split() == ["CLUSTER", "AGE", "INSTANCES", "STATE", "EXPIRES", "$/HOUR", "(est.)"]
    assert lines[1].split() == ["alpha", "3h", "3", "x", "g5.xlarge", "3", "running", "in", "21h", "$3.02"]
    assert "EXPIRED 2h ago" in lines[3] and "$0.53" in lines[3]
    assert "3 cluster(s) in us-east-1; running now: about $3.54 + x9.mega (no price) per hour." in text
    assert ("EXPIRED (past their tfcluster:expires tag): old-run. Tear down: "
            "make destroy CLUSTER=aws TFCLUSTER_CLUSTER=old-run") in text
    assert f"on-demand us-east-1 list prices of {prices.AS_OF}" in text and "estimate" in text
    for hidden in ("i-untagged", "web-1", "sky-1", "Bad_Name", "i-gone"):
        assert hidden not in text
    assert clusters.render_clusters([], "eu-west-1") == "No tfcluster cluster in eu-west-1 (instances tagged " \
        "tfcluster:cluster)."


def test_running_summary() -> None:
    ec2 = FakeEC2(FLEET)
    text = clusters.running_summary(ec2, "alpha", NOW)
    assert text.startswith("Still running in us-east-1: cluster alpha, 3 x g5.xlarge (3 running), about $3.02 per "
                           "hour; expires in 21h. Tear it down: make destroy CLUSTER=aws TFCLUSTER_CLUSTER=alpha")
    assert "estimate" in text
    assert clusters.running_summary(ec2, "nothing-here", NOW) == "Nothing of cluster nothing-here is left in us-east-1."
    stopped = FakeEC2([raw("i-s", ours("sleepy"), state="stopped")])
    assert "no compute billed, the volumes still are" in clusters.running_summary(stopped, "sleepy", NOW)
    custom = clusters.running_summary(ec2, "alpha", NOW, teardown="tfcluster destroy {name}")
    assert "Tear it down: tfcluster destroy alpha" in custom


# The applied Terraform state of "alpha" / "old-run": instance id -> slot (from its hosts output).
ALPHA_STATE = {"i-a0": "chief:0", "i-a1": "worker:0", "i-a2": "worker:1"}
OLD_STATE = {"i-b0": "worker:0", "i-b1": "worker:1"}


def test_state_slots_from_the_hosts_output() -> None:
    hosts = [{"name": "chief-0", "task_type": "chief", "task_index": 0, "instance_id": "i-a0"},
             {"name": "worker-1", "task_type": "worker", "task_index": 1, "instance_id": "i-a2"},
             {"name": "worker-2", "task_type": "worker", "task_index": 2, "instance_id": None},  # not launched
             {"name": "x", "task_type": "boss", "task_index": 0, "instance_id": "i-x"},
             {"name": "y", "task_type": "worker", "task_index": True, "instance_id": "i-y"}, "junk"]
    assert clusters.state_slots(hosts) == {"i-a0": "chief:0", "i-a2": "worker:1"}
    assert clusters.state_slots(None) == {} and clusters.state_slots({"not": "a list"}) == {}


def test_remaining_instances() -> None:
    ec2 = FakeEC2(FLEET)
    left = clusters.remaining_instances(ec2, "old-run", OLD_STATE)
    assert [i.instance_id for i in left.ours] == ["i-b0", "i-b1"] and left.not_ours == ()
    assert ec2.filters[0][0] == {"Name": f"tag:{TAG_KEYS['cluster']}", "Values": ["old-run"]}
    text = clusters.render_remaining("old-run", left, "us-east-1")
    assert text.startswith("2 instance(s) of the Terraform state of old-run remain in us-east-1:")
    assert "terminate-instances --instance-ids i-b0 i-b1" in text
    gone = clusters.remaining_instances(ec2, "gone", {})
    assert gone.ours == () and gone.not_ours == ()
    assert clusters.render_remaining("gone", gone, "us-east-1") == (
        "0 instances tagged tfcluster:cluster=gone remain in us-east-1 (checked through the EC2 API).")


def imposters(cluster: str) -> list[dict[str, Any]]:
    """Instances that carry the cluster's tag but are not the state's: a full contract tag set on an instance the
    state does not hold, a state instance whose slot tags were changed, a bare cluster tag."""
    return [raw("i-imposter", ours(cluster, "chief", 0)), raw("i-swapped", ours(cluster, "chief", 0)),
            raw("i-handmade", {TAG_KEYS["cluster"]: cluster}),
            raw("i-noindex", {TAG_KEYS["cluster"]: cluster, TAG_KEYS["task_type"]: "worker"})]


def test_a_tagged_instance_outside_the_state_is_not_ours() -> None:
    ec2 = FakeEC2([raw("i-1", ours("alpha", "worker", 0)), *imposters("alpha")])
    found = clusters.members(ec2, "alpha", {"i-1": "worker:0", "i-swapped": "worker:1", "i-noindex": "worker:0"})
    assert [i.instance_id for i in found.ours] == ["i-1"]
    why = {n.instance_id: n.reason for n in found.not_ours}
    assert why == {"i-imposter": "not in the Terraform state of alpha",
                   "i-handmade": "not in the Terraform state of alpha",
                   "i-swapped": "tagged chief:0, but the Terraform state holds it as worker:1",
                   "i-noindex": "its task_type/task_index tags are not a slot (the state holds it as worker:0)"}


def test_set_shutdown_behavior_skips_spot_and_foreign_instances() -> None:
    ec2 = FakeEC2([raw("i-1", ours("alpha", "worker", 0)), raw("i-2", ours("alpha", "worker", 1), spot=True),
                   raw("i-4", ours("beta")), *imposters("alpha")])
    state = {"i-1": "worker:0", "i-2": "worker:1", "i-swapped": "worker:2"}
    change = clusters.set_shutdown_behavior(ec2, "alpha", "terminate", state)
    assert change.changed == ("i-1",)
    assert ec2.modified == [("i-1", "terminate")]  # never the imposters, the spot host or beta's
    assert [n.instance_id for n in change.not_ours] == ["i-handmade", "i-imposter", "i-noindex", "i-swapped"]
    text = "\n".join(clusters.render_not_ours("alpha", change.not_ours))
    assert text.startswith("4 instance(s) tagged tfcluster:cluster=alpha are not ours, left alone (not modified):")
    assert "i-imposter  running  not in the Terraform state of alpha" in text and "Fix: " in text
    assert clusters.render_not_ours("alpha", ()) == []
    nothing = clusters.set_shutdown_behavior(FakeEC2(imposters("alpha")), "alpha", "stop", {})
    assert nothing.changed == () and len(nothing.not_ours) == 4  # no state: nothing is ours, nothing changes
    with pytest.raises(ValueError, match="use one of stop, terminate"):
        clusters.set_shutdown_behavior(ec2, "alpha", "hibernate", state)


def test_destroy_check_names_what_is_not_in_the_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """make destroy: Terraform destroys what its state holds; the check afterwards fails only on the state's own
    instances and names an imposter carrying the cluster tag as not in the state, leaving it alone."""
    from tfcluster.provision import aws as provision_aws

    hosts = [{"name": "worker-0", "task_type": "worker", "task_index": 0, "instance_id": "i-1"}]
    ec2 = FakeEC2([raw("i-1", ours("alpha", "worker", 0), state="terminated"), *imposters("alpha")])
    monkeypatch.setattr(provision_aws, "outputs", lambda *_: {"cluster_name": "alpha", "hosts": hosts})
    monkeypatch.setattr(provision_aws, "run_terraform", lambda *_a, **_k: None)
    monkeypatch.setattr(provision_aws, "target_for", lambda *_: None)
    monkeypatch.setattr(provision_aws, "ec2_client", lambda _target: ec2)
    monkeypatch.setattr(provision_aws.hostkeys, "path_for", lambda name: tmp_path / name)
    with caplog.at_level("INFO", logger="provision"):
        provision_aws.destroy(tmp_path, {}, [], [], [])
    assert ec2.modified == []
    log = caplog.text
    assert "0 instances of the Terraform state of alpha remain" in log
    assert "not ours, left alone" in log and "i-imposter  running  not in the Terraform state of alpha" in log

    ec2.instances[0]["State"]["Name"] = "running"  # the state's own host survived the destroy
    with pytest.raises(provision_aws.ProvisionError) as failed:
        provision_aws.destroy(tmp_path, {}, [], [], [])
    assert "1 instance(s) of the Terraform state of alpha remain" in str(failed.value)
    assert "i-1" in str(failed.value) and "not in the Terraform state of alpha" in str(failed.value)


@pytest.mark.parametrize(("types", "per_hour", "text"), [
    ([], 0, "$0.00"),
    (["g5.xlarge", "g5.xlarge"], 2.012, "$2.01"),
    (["g5.xlarge", "zz.big"], 1.006, "$1.01 + zz.big (no price)"),
    (["zz.big"], 0, "?"),
    (["p5.48xlarge"] * 2, 196.64, "$196.64"),
])
def test_estimate(types: list[str], per_hour: float, text: str) -> None:
    estimate = prices.estimate(types)
    assert estimate.per_hour == pytest.approx(per_hour)
    assert estimate.text() == text


def test_price_table_is_dated_and_covers_the_default_type() -> None:
    assert datetime.strptime(prices.AS_OF, "%Y-%m-%d")
    assert prices.price("g5.xlarge") == 1.006  # infra's default and the demo's instance type
    assert all(0 < p < 200 for p in prices.ON_DEMAND.values())
    assert "us-east-1" in prices.note() and "eu-west-1, prices there differ" in prices.note("eu-west-1")
