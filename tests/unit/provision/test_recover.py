"""A lost host's slot (tfcluster/provision/recover.py, issue 40): which slots lost their instance, from what EC2
answers (data: only the state's instances are read), and the address of the one resource replaced."""

from __future__ import annotations

from typing import Any

import pytest

from tfcluster.provision import recover

HOSTS = [{"name": "chief-0", "task_type": "chief", "task_index": 0, "instance_id": "i-c"},
         {"name": "worker-0", "task_type": "worker", "task_index": 0, "instance_id": "i-w0"},
         {"name": "worker-1", "task_type": "worker", "task_index": 1, "instance_id": "i-w1"}]


class FakeEC2:
    def __init__(self, states: dict[str, Any], impaired: tuple[str, ...] = ()) -> None:
        self.states, self.impaired = states, impaired
        self.asked: list[str] = []

    def describe_instances(self, InstanceIds: list[str]) -> dict[str, Any]:
        self.asked += InstanceIds
        found = [{"InstanceId": i, **self.states[i]} for i in InstanceIds if i in self.states]
        if not found:
            raise RuntimeError("An error occurred (InvalidInstanceID.NotFound) when calling DescribeInstances")
        return {"Reservations": [{"Instances": found}]}

    def describe_instance_status(self, InstanceIds: list[str]) -> dict[str, Any]:
        return {"InstanceStatuses": [{"InstanceId": i, "InstanceStatus": {"Status": "impaired" if i in self.impaired
                                                                          else "ok"},
                                      "SystemStatus": {"Status": "ok"}} for i in InstanceIds]}


def running() -> dict[str, Any]:
    return {"State": {"Name": "running"}}


@pytest.mark.parametrize(("states", "impaired", "lost"), [
    ({"i-c": running(), "i-w0": running(), "i-w1": running()}, (), {}),
    ({"i-c": running(), "i-w0": running(),
      "i-w1": {"State": {"Name": "terminated"}, "StateReason": {"Code": "Server.SpotInstanceTermination",
                                                                "Message": "Server.SpotInstanceTermination: Spot "
                                                                           "instance termination"}}},
     (), {"worker-1": "terminated (Server.SpotInstanceTermination: Spot instance termination)"}),
    ({"i-c": running(), "i-w1": running()}, (), {"worker-0": "gone from EC2"}),  # no longer known to EC2
    ({"i-c": running(), "i-w0": {"State": {"Name": "stopped"}}, "i-w1": running()}, ("i-w1",),
     {"worker-0": "stopped", "worker-1": "running, InstanceStatus check impaired"}),
    ({"i-c": {"State": {"Name": "pending"}}, "i-w0": running(), "i-w1": running()}, (), {}),  # booting: not lost
])
def test_the_slots_whose_instance_is_lost(states: dict[str, Any], impaired: tuple[str, ...],
                                          lost: dict[str, str]) -> None:
    ec2 = FakeEC2(states, impaired)
    assert recover.lost_slots(ec2, {"hosts": HOSTS}) == lost
    assert set(ec2.asked) == {"i-c", "i-w0", "i-w1"}  # the state's instances, and only those


def test_a_reason_ec2_writes_is_escaped() -> None:
    ec2 = FakeEC2({"i-c": running(), "i-w0": running(),
                   "i-w1": {"State": {"Name": "terminated"}, "StateReason": {"Message": "x\x1b[2J"}}})
    assert recover.lost_slots(ec2, {"hosts": HOSTS}) == {"worker-1": "terminated (x\\x1b[2J)"}


def test_an_ec2_error_other_than_not_found_is_raised() -> None:
    class Broken(FakeEC2):
        def describe_instances(self, InstanceIds: list[str]) -> dict[str, Any]:
            raise RuntimeError("RequestLimitExceeded")

    with pytest.raises(RuntimeError, match="RequestLimitExceeded"):
        recover.lost_slots(Broken({}), {"hosts": HOSTS})


def test_no_state_no_slot() -> None:
    assert recover.lost_slots(FakeEC2({}), {}) == {}


@pytest.mark.parametrize(("spot", "address"), [
    (True, 'module.cluster.aws_spot_instance_request.this["worker-1"]'),
    (False, 'module.cluster.aws_instance.this["worker-1"]'),
    (None, 'module.cluster.aws_instance.this["worker-1"]'),
])
def test_the_one_resource_replaced(spot: bool | None, address: str) -> None:
    assert recover.resource_address({"spot": spot}, "worker-1") == address


def test_the_wait_asks_ec2_about_a_host_it_cannot_reach_and_fails_it_at_once() -> None:
    from tfcluster.run.gone import InstanceCheck
    from tfcluster.run.wait import FAILED_DECISION, Settings, decide

    clock = [0.0]
    ec2 = FakeEC2({"i-w0": running(), "i-w1": {"State": {"Name": "terminated"}}})
    check = InstanceCheck({"w0": "i-w0", "w1": "i-w1"}, "us-east-1", client=lambda: ec2, clock=lambda: clock[0])
    away = {"w0": {"status": {"state": "running", "restarts": 0}}, "w1": {"error": "ssh: timeout", "unreachable": True}}
    assert check.mark(away, {"w0": 0, "w1": 1}) == away and ec2.asked == []  # one failed poll: not asked yet
    marked = check.mark(away, {"w0": 0, "w1": 2})
    assert marked["w1"]["gone"] == "terminated" and "gone" not in marked["w0"] and ec2.asked == ["i-w1"]
    check.mark(away, {"w0": 0, "w1": 3})
    assert ec2.asked == ["i-w1"]  # at most once every EVERY seconds
    out = decide(marked, {"w0": "worker:0", "w1": "worker:1"}, {}, now=1000.0, started=900.0,
                 settings=Settings(chief="w0"))
    assert out["decision"] == FAILED_DECISION and out["culprit"] == "w1"
    assert out["message"] == "w1 is lost: its instance is terminated"


def test_ec2_out_of_reach_changes_nothing() -> None:
    from tfcluster.run.gone import InstanceCheck

    def broken() -> Any:
        raise OSError("no route to the EC2 endpoint")

    check = InstanceCheck({"w1": "i-w1"}, None, client=broken)
    away = {"w1": {"error": "ssh: timeout", "unreachable": True}}
    assert check.mark(away, {"w1": 5}) == away
