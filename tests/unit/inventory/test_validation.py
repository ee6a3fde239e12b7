"""Every validation error the inventory can give: one row per message (the whole line), all collected together."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tfcluster.core.contract import EXIT_BAD_INPUT, Problem
from tfcluster.inventory.build import _name_tfconfig_problem, validate_cluster
from tfcluster.inventory.model import HostSpec, InventoryError, SourceResult


def _spec(label: str, task_type: object = "worker", index: object = 0, address: object = "10.0.0.1",
          port: object = 2222, **kw: object) -> HostSpec:
    return HostSpec(label=label, task_type=task_type, task_index=index, address=address, port=port, **kw)


def _problems(specs: list[HostSpec], strategy: str = "auto") -> list[str]:
    with pytest.raises(InventoryError) as info:
        validate_cluster(SourceResult(specs=tuple(specs), empty_fix="add hosts"), strategy, "c")
    return [str(p) for p in info.value.problems]


W0 = _spec("w0", index=0, address="10.0.0.1")
W1 = _spec("w1", index=1, address="10.0.0.2")
W = _spec("w", index=0, address="10.0.0.2")  # the only worker
TYPES = "use one of chief, worker, ps, evaluator"
INDEX_FIX = "give the host's index within its task type, counting from 0"
ADDRESS_FIX = "give the host an address (IP or DNS name) that Ansible can reach"
TF_ADDRESS_FIX = "give the address peers use for training, or leave it out to use address"
PORT_FIX = "give the training port, a whole number in 1..65535"
HOST_FIX = "use 1-64 letters, digits, '_', '.' or '-', starting and ending with a letter or digit"
USER_FIX = "use a POSIX user name: lowercase letters, digits, '_' or '-', e.g. ubuntu"
INJECTION = "{{ lookup('pipe', 'id') }}"

CASES = [
    ("no hosts", [], "auto", "hosts: no hosts found. Fix: add hosts"),
    ("unknown task type", [W0, _spec("x", task_type="gpu", address="10.0.0.9")], "auto",
     f"x.task_type: task_type 'gpu' is not a task type. Fix: {TYPES}"),
    ("missing task type", [W0, _spec("x", task_type=None, address="10.0.0.9")], "auto",
     f"x.task_type: task_type is missing. Fix: {TYPES}"),
    ("negative index", [_spec("x", index=-1)], "auto",
     f"x.task_index: task_index -1 is not a whole number >= 0. Fix: {INDEX_FIX}"),
    ("text index", [_spec("x", index="1")], "auto",
     f"x.task_index: task_index '1' is not a whole number >= 0. Fix: {INDEX_FIX}"),
    ("missing index", [_spec("x", index=None)], "auto", f"x.task_index: task_index is missing. Fix: {INDEX_FIX}"),
    ("missing address", [_spec("x", address=None)], "auto", f"x.address: address is missing. Fix: {ADDRESS_FIX}"),
    ("blank address", [_spec("x", address="a b")], "auto",
     f"x.address: address 'a b' is not an IP address or DNS name. Fix: {ADDRESS_FIX}"),
    ("address with port", [_spec("x", address="10.0.0.1:99")], "auto",
     "x.address: address '10.0.0.1:99' holds a ':' but is not an IPv6 address. Fix: give the port in its own field, "
     "and only the IP or DNS name as the address"),
    ("address with dots", [_spec("x", address="a..b")], "auto",
     f"x.address: address 'a..b' is not an IP address or DNS name. Fix: {ADDRESS_FIX}"),
    ("bad tf_address", [_spec("x", tf_address="")], "auto",
     f"x.tf_address: tf_address is missing. Fix: {TF_ADDRESS_FIX}"),
    ("tf_address not an address", [_spec("x", tf_address=7)], "auto",
     f"x.tf_address: tf_address 7 is not an IP address or DNS name. Fix: {TF_ADDRESS_FIX}"),
    ("port too big", [_spec("x", port=70000)], "auto", f"x.port: port 70000 is not a whole number in 1..65535. "
                                                       f"Fix: {PORT_FIX}"),
    ("port text", [_spec("x", port="http")], "auto", f"x.port: port 'http' is not a whole number in 1..65535. "
                                                     f"Fix: {PORT_FIX}"),
    ("port bool", [_spec("x", port=True)], "auto", f"x.port: port True is not a whole number in 1..65535. "
                                                   f"Fix: {PORT_FIX}"),
    ("ssh port", [_spec("x", ssh_port=0)], "auto",
     "x.ssh_port: ssh_port 0 is not a whole number in 1..65535. Fix: give the SSH port in 1..65535 or leave it out"),
    ("gpus", [_spec("x", gpus=-2)], "auto",
     "x.gpus: gpus -2 is not a whole number >= 0. Fix: give the host's GPU count (0 for none)"),
    ("connection", [_spec("x", connection="winrm")], "auto",
     "x.connection: connection 'winrm' is not supported. Fix: use one of ssh, local"),
    ("empty ssh user", [_spec("x", ssh_user="")], "auto", f"x.ssh_user: '' is not a valid user name. Fix: {USER_FIX}"),
    ("ssh user injection", [_spec("x", ssh_user=INJECTION)], "auto",
     f"x.ssh_user: {INJECTION!r} is not a valid user name. Fix: {USER_FIX}"),
    ("ssh user with ;", [_spec("x", ssh_user="root;id")], "auto",
     f"x.ssh_user: 'root;id' is not a valid user name. Fix: {USER_FIX}"),
    ("name with space", [_spec("x", name="a b")], "auto", f"x.name: 'a b' is not a valid host name. Fix: {HOST_FIX}"),
    ("name with slash", [_spec("x", name="../etc")], "auto",
     f"x.name: '../etc' is not a valid host name. Fix: {HOST_FIX}"),
    ("name with ..", [_spec("x", name="a..b")], "auto", f"x.name: 'a..b' is not a valid host name. Fix: {HOST_FIX}"),
    ("name with $", [_spec("x", name="a$b")], "auto", f"x.name: 'a$b' is not a valid host name. Fix: {HOST_FIX}"),
    ("name injection", [_spec("x", name=INJECTION)], "auto",
     f"x.name: {INJECTION!r} is not a valid host name. Fix: {HOST_FIX}"),
    ("derived name too long", [_spec("x", index=10 ** 60)], "auto",
     f"x.name: 'worker-{10 ** 60}' is not a valid host name (derived from task_type and task_index). "
     f"Fix: give the host a name, or an index that fits: {HOST_FIX}"),
    ("host key", [_spec("x", host_keys=["ssh-ed25519 notbase64!"])], "auto",
     "x.host_keys[0]: the ssh-ed25519 key is not valid base64. Fix: give each key as `TYPE BASE64` from the host's "
     "/etc/ssh/ssh_host_*_key.pub, e.g. \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA...\""),
    ("duplicate slot", [W0, _spec("dup", index=0, address="10.0.0.3")], "auto",
     "dup.task_index: slot worker 0 is also taken by w0. Fix: give each worker host its own task_index (0, 1, 2, ...)"),
    ("index gap", [W0, _spec("w3", index=3, address="10.0.0.4")], "auto",
     "w3.task_index: worker indices must run from 0 without gaps; missing 1, 2 (hosts after the gap: w3). "
     "Fix: renumber the worker hosts 0..1 or add the missing worker 1, 2"),
    ("gap from zero", [_spec("w1", index=1)], "auto",
     "w1.task_index: worker indices must run from 0 without gaps; missing 0 (hosts after the gap: w1). "
     "Fix: renumber the worker hosts 0..0 or add the missing worker 0"),
    ("huge gap is summarised", [W0, _spec("far", index=10 ** 12, address="10.0.0.4")], "auto",
     "far.task_index: worker indices must run from 0 without gaps; missing 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ... "
     f"({10 ** 12 - 1} in all) (hosts after the gap: far). Fix: renumber the worker hosts 0..1 or add the missing "
     f"worker 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ... ({10 ** 12 - 1} in all)"),
    ("address:port clash", [W0, _spec("w1", index=1, address="10.0.0.1")], "auto",
     "w1.port: address 10.0.0.1:2222 is also used by w0. Fix: give hosts that share an address different training "
     "ports"),
    ("duplicate name", [_spec("a", name="n1"), _spec("b", index=1, address="10.0.0.2", name="n1")], "auto",
     "b.name: host name 'n1' is also used by a. Fix: give every host a unique name"),
    ("two chiefs", [_spec("c0", task_type="chief"), _spec("c1", task_type="chief", index=1, address="10.0.0.2")],
     "auto", "cluster.chief: 2 chiefs listed, at most one is allowed. Fix: keep one chief and make the others workers"),
    ("ps without chief", [_spec("p", task_type="ps"), W], "parameter_server",
     "cluster.chief: parameter_server needs exactly one chief (the coordinator). Fix: add one chief task"),
    ("ps without ps", [_spec("c", task_type="chief"), W], "parameter_server",
     "cluster.ps: parameter_server needs at least one ps task. Fix: add a ps task"),
    ("ps without worker", [_spec("c", task_type="chief"), _spec("p", task_type="ps", address="10.0.0.2")],
     "parameter_server", "cluster.worker: parameter_server needs at least one worker. Fix: add a worker task"),
    ("mwms with ps", [_spec("p", task_type="ps"), W], "multi_worker_mirrored",
     "cluster.ps: multi_worker_mirrored takes no ps tasks. Fix: remove the ps tasks, or use strategy parameter_server"),
    ("mwms without workers", [_spec("e", task_type="evaluator")], "multi_worker_mirrored",
     "cluster.worker: multi_worker_mirrored needs at least one worker or chief. Fix: add workers to the cluster"),
    ("mirrored on two hosts", [W0, W1], "mirrored",
     "cluster: mirrored runs on one host with all GPUs of one host, but 2 tasks are listed. Fix: use one host "
     "without TF_CONFIG, or strategy multi_worker_mirrored"),
    ("tpu on two hosts", [W0, W1], "tpu",
     "cluster: tpu runs on one host with one Cloud TPU VM (--tpu local), but 2 tasks are listed. Fix: use one host "
     "without TF_CONFIG, or strategy multi_worker_mirrored"),
    ("two evaluators", [W0, _spec("e0", task_type="evaluator", address="10.0.0.5"),
                        _spec("e1", task_type="evaluator", index=1, address="10.0.0.6")], "auto",
     "e1.task.index: evaluator index 1 is out of range. Fix: there is one evaluator: use index 0"),
]


@pytest.mark.parametrize(("specs", "strategy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_problem_is_reported(specs: list[HostSpec], strategy: str, expected: str) -> None:
    assert _problems(specs, strategy) == [expected]


def test_tfconfig_problem_is_named_with_the_host() -> None:
    """A tfcluster.core.contract problem about cluster.worker[3] is relabelled with the host that holds that slot."""
    problem = Problem("cluster.worker[3]", "address is odd", "fix it")
    named = _name_tfconfig_problem(problem, {"worker": ("a:1",) * 4}, {("worker", 3): "hosts[7] (gpu-d)"})
    assert str(named) == "hosts[7] (gpu-d) (cluster.worker[3]): address is odd. Fix: fix it"
    assert _name_tfconfig_problem(Problem("cluster", "m", "f"), {}, {}) == Problem("cluster", "m", "f")


def test_ipv6_address_is_bracketed_in_tf_config() -> None:
    cluster = validate_cluster(SourceResult(specs=(_spec("v6", address="fd00::1"),), empty_fix="x"), "auto", "c")
    assert cluster.spec == {"worker": ("[fd00::1]:2222",)}
    assert cluster.hosts[0].address == "fd00::1"  # Ansible connects without brackets


def test_all_problems_are_collected_together() -> None:
    specs = [
        _spec("a", task_type="gpu"),
        _spec("b", address=None, index=1),
        _spec("c", index=0, address="10.0.0.3"),
        _spec("d", index=0, address="10.0.0.4"),
        _spec("e", index=5, address="10.0.0.3"),
        _spec("f", task_type="ps", address="10.0.0.9"),
    ]
    problems = _problems(specs, "multi_worker_mirrored")
    fields = sorted(p.split(":")[0] for p in problems)
    assert fields == ["a.task_type", "b.address", "cluster.ps", "d.task_index", "e.port", "e.task_index"], problems


def test_broken_host_still_counts_for_strategy_rules() -> None:
    """A ps whose address is missing is reported once, not also as 'parameter_server needs a ps'."""
    specs = [_spec("c", task_type="chief"), _spec("p", task_type="ps", address=None),
             _spec("w", address="10.0.0.3")]
    assert _problems(specs, "parameter_server") == [f"p.address: address is missing. Fix: {ADDRESS_FIX}"]


def test_same_label_twice_still_finds_the_duplicate_slot() -> None:
    """Hosts are told apart by identity, not by label."""
    twins = [_spec("same", address="10.0.0.1"), _spec("same", address="10.0.0.2")]
    assert _problems(twins) == ["same.task_index: slot worker 0 is also taken by same. Fix: give each worker host its "
                                "own task_index (0, 1, 2, ...)"]


def test_no_partial_inventory_on_error(cli, tmp_path: Path) -> None:
    hosts = tmp_path / "h.yml"
    hosts.write_text(yaml.safe_dump({"hosts": [{"address": "10.0.0.1"}, {"address": "10.0.0.1"}]}))
    code, out, err = cli({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(hosts)}, "--list")
    assert code == EXIT_BAD_INPUT
    assert out == ""
    assert ("hosts[1] (10.0.0.1).port: address 10.0.0.1:2222 is also used by hosts[0] (10.0.0.1). Fix: give hosts "
            "that share an address different training ports") in err
    assert err.rstrip().endswith("No inventory was printed.")
