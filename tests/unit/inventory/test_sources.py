"""Slot derivation per source: shuffled input gives identical output; terraform/static/local specifics."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.inventory.inventory_helpers import fixture_json, instance, runner_for
from tfcluster.inventory.build import build_inventory, dumps, unmarked, validate_cluster
from tfcluster.inventory.cli import Injected, load_cluster
from tfcluster.inventory.config import load_settings
from tfcluster.inventory.model import InventoryError, SourceResult
from tfcluster.inventory.sources.aws import instance_spec
from tfcluster.inventory.sources.local import local_hosts
from tfcluster.inventory.sources.terraform import Overrides, read_outputs, terraform_hosts


def _shuffles(items: list[Any], n: int = 5) -> list[list[Any]]:
    rng = random.Random(1234)
    out = []
    for _ in range(n):
        copy_ = list(items)
        rng.shuffle(copy_)
        out.append(copy_)
    return out


def _list(env: dict[str, str], injected: Injected = Injected()) -> str:  # noqa: B008
    return dumps(build_inventory(load_cluster(load_settings(env), injected)))


# ---- terraform ---------------------------------------------------------------------------------------------------

def _terraform_list(outputs: dict[str, Any], tmp_path: Path) -> str:
    env = {"TFCLUSTER_SOURCE": "terraform", "TFCLUSTER_TF_DIR": str(tmp_path)}
    return _list(env, Injected(terraform_runner=runner_for(outputs)))


def test_terraform_shuffled_output_gives_identical_inventory(tmp_path: Path) -> None:
    outputs = fixture_json("terraform_output_aws.json")
    reference = _terraform_list(outputs, tmp_path)
    for hosts in _shuffles(outputs["hosts"]["value"]):
        shuffled = copy.deepcopy(outputs)
        shuffled["hosts"]["value"] = hosts
        assert _terraform_list(shuffled, tmp_path) == reference


def test_terraform_aws_fixture_host_vars(tmp_path: Path) -> None:
    inv = unmarked(json.loads(_terraform_list(fixture_json("terraform_output_aws.json"), tmp_path)))
    assert inv["tfcluster"]["vars"] == {
        "tfcluster_cluster_name": "demo",
        "tfcluster_strategy": "parameter_server",
        "tfcluster_cluster_spec": {"chief": ["10.0.1.11:2222"], "ps": ["10.0.1.12:2222"],
                                   "worker": ["10.0.1.13:2222", "10.0.1.14:2222"]},
        "tfcluster_chief": "chief-0",
        "tfcluster_all_gpus": False,  # the ps has none
    }
    assert inv["evaluator"]["hosts"] == ["evaluator-0"]
    assert inv["worker"]["hosts"] == ["worker-0", "worker-1"]
    assert inv["_meta"]["hostvars"]["chief-0"] == {
        "ansible_host": "54.0.0.11", "ansible_connection": "ssh", "ansible_user": "ubuntu",
        "tfcluster_task_type": "chief", "tfcluster_task_index": 0, "tfcluster_port": 2222,
        "tfcluster_address": "10.0.1.11:2222", "tfcluster_gpus": 1, "tfcluster_instance_type": "g5.xlarge",
    }
    # ps has no public IP: Ansible reaches it on its private IP.
    assert inv["_meta"]["hostvars"]["ps-0"]["ansible_host"] == "10.0.1.12"


def test_terraform_local_fixture_is_local_connection(tmp_path: Path) -> None:
    inv = unmarked(json.loads(_terraform_list(fixture_json("terraform_output_local.json"), tmp_path)))
    hv = inv["_meta"]["hostvars"]
    assert [hv[f"worker-{i}"]["tfcluster_address"] for i in range(3)] == [
        "127.0.0.1:12345", "127.0.0.1:12346", "127.0.0.1:12347"]
    assert {v["ansible_connection"] for v in hv.values()} == {"local"}
    assert inv["tfcluster"]["vars"]["tfcluster_cluster_name"] == "local"


def test_terraform_host_fields_fall_back_to_module_outputs() -> None:
    outputs = {"hosts": [{"task_type": "worker", "task_index": 0, "private_ip": "10.0.0.5"}],
               "ssh_user": "ec2-user", "tf_port": 4000, "cluster_name": "xyz"}
    found = terraform_hosts(outputs, Overrides(port=1))
    host = validate_cluster(found, "auto", "c").hosts[0]
    assert (host.port, host.ssh_user, host.address, host.endpoint, host.connection, host.gpus) == (
        4000, "ec2-user", "10.0.0.5", "10.0.0.5:4000", "ssh", 0)
    assert found.cluster_name == "xyz"


@pytest.mark.parametrize(("code", "out", "err", "expected"), [
    (0, "{}", "", "terraform output: no `hosts` output in the state of {d} (missing or empty state). "
                  "Fix: run `make provision` first"),
    (0, "", "", "terraform output: no `hosts` output in the state of {d} (missing or empty state). "
                "Fix: run `make provision` first"),
    (1, "", "Error: Backend initialization required\n  please run init",
     "terraform output: `terraform output -json` in {d} failed (exit 1): Error: Backend initialization required "
     "please run init. Fix: run `make provision` first"),
    (0, "not json", "", "terraform output: `terraform output -json` in {d} printed no JSON (Expecting value). "
                        "Fix: check the terraform executable (`make setup`)"),
    (0, "[1]", "", "terraform output: expected a JSON object, got list. Fix: check the terraform executable "
                   "(`make setup`)"),
])
def test_terraform_output_failures(tmp_path: Path, code: int, out: str, err: str, expected: str) -> None:
    with pytest.raises(InventoryError) as info:
        read_outputs(tmp_path, lambda _d: (code, out, err))
    assert [str(p) for p in info.value.problems] == [expected.format(d=tmp_path)]


def test_terraform_empty_hosts_says_provision(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as info:
        _terraform_list({"hosts": {"value": []}}, tmp_path)
    assert [str(p) for p in info.value.problems] == [
        "hosts: no hosts found. Fix: the `hosts` output is empty: run `make provision` first"]


def test_terraform_executable_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tfcluster.inventory.sources import terraform as tf_source

    monkeypatch.setattr(tf_source.shutil, "which", lambda _name: None)
    monkeypatch.setattr(tf_source.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(InventoryError) as info:
        tf_source.find_terraform()
    assert str(info.value.problems[0]) == (
        f"terraform: no `terraform` executable on PATH or next to {tmp_path}/python. "
        "Fix: run `make setup`, or put terraform on PATH")
    (tmp_path / "terraform").write_text("#!/bin/sh\n")
    assert tf_source.find_terraform() == str(tmp_path / "terraform")


def test_terraform_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as info:
        read_outputs(tmp_path / "nope", runner_for({}))
    assert str(info.value.problems[0]) == (f"TFCLUSTER_TF_DIR: {tmp_path / 'nope'} is not a directory. "
                                          "Fix: point TFCLUSTER_TF_DIR at a Terraform root module such as infra/aws")


@pytest.mark.parametrize(("hosts", "expected"), [
    ("oops", "terraform output hosts: must be a list of objects, got str. Fix: fix the `hosts` output of the root "
             "module"),
    (["x", {"task_type": "worker", "task_index": 0, "private_ip": "10.0.0.1"}],
     "hosts[0]: must be an object, got str. Fix: fix the `hosts` output of the root module"),
    ([{"name": "w", "task_type": "worker", "task_index": 0, "private_ip": "10.0.0.1", "colour": "red"}],
     "hosts[0] (w): unknown field(s) colour. Fix: keep to connection, gpus, instance_id, instance_type, name, port, "
     "private_ip, public_ip, ssh_user, task_index, task_type (docs/inventory.md)"),
])
def test_terraform_bad_hosts_shape(tmp_path: Path, hosts: object, expected: str) -> None:
    with pytest.raises(InventoryError) as info:
        _terraform_list({"hosts": {"value": hosts}}, tmp_path)
    assert [str(p) for p in info.value.problems] == [expected]


# ---- static ------------------------------------------------------------------------------------------------------

ONE = {"hosts": [{"address": "10.0.0.1"}]}
STATIC_HOSTS = [
    {"address": "10.0.0.1", "task_type": "chief", "task_index": 0},
    {"address": "10.0.0.2", "task_type": "worker", "task_index": 0, "gpus": 2},
    {"address": "10.0.0.3", "task_type": "worker", "task_index": 1, "ssh_port": 2200},
    {"address": "10.0.0.4", "task_type": "worker", "task_index": 2},
    {"address": "10.0.0.5", "task_type": "evaluator", "task_index": 0},
]


def _static_list(tmp_path: Path, data: object) -> str:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return _list({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)})


def test_static_shuffled_file_gives_identical_inventory(tmp_path: Path) -> None:
    reference = _static_list(tmp_path, {"hosts": STATIC_HOSTS})
    for hosts in _shuffles(STATIC_HOSTS):
        assert _static_list(tmp_path, {"hosts": hosts}) == reference


def test_static_index_by_file_order(tmp_path: Path) -> None:
    data = {"defaults": {"ssh_user": "ops", "port": 3000}, "cluster_name": "lab", "hosts": [
        {"address": "b.lab"}, {"address": "a.lab", "task_type": "chief"}, {"address": "c.lab", "task_index": 0},
        {"address": "d.lab"}]}
    inv = unmarked(json.loads(_static_list(tmp_path, data)))
    hv = inv["_meta"]["hostvars"]
    # c.lab claims worker 0; b.lab and d.lab take the free indices 1 and 2 in file order.
    assert {n: (v["ansible_host"], v["tfcluster_task_index"]) for n, v in hv.items()} == {
        "chief-0": ("a.lab", 0), "worker-0": ("c.lab", 0), "worker-1": ("b.lab", 1), "worker-2": ("d.lab", 2)}
    assert hv["worker-1"]["ansible_user"] == "ops"
    assert hv["worker-1"]["tfcluster_port"] == 3000
    assert inv["tfcluster"]["vars"]["tfcluster_cluster_name"] == "lab"


def test_static_example_file_builds() -> None:
    example = Path(__file__).resolve().parents[3] / "inventory" / "onprem.example.yml"
    inv = json.loads(_list({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(example)}))
    assert inv["chief"]["hosts"] and inv["worker"]["hosts"]


@pytest.mark.parametrize(("data", "expected"), [
    ("just text", "{p}: must be a mapping with `hosts:`, got str. Fix: see inventory/onprem.example.yml for the "
                  "format"),
    ({"hostz": [], **ONE}, "hosts.yml.hostz: unknown top-level key. Fix: use only bastion, cluster_name, defaults, "
                           "hosts"),
    ({"connect": "private", **ONE}, "hosts.yml.connect: unknown top-level key. Fix: remove it: a host file has no "
                                    "connect mode, Ansible connects to each host's `address`; to go through a jump "
                                    "host, add `bastion: {{address: ..., user: ..., port: 22}}`"),
    ({"hosts": {"a": 1}}, ["hosts.yml.hosts: must be a list, got dict. Fix: see inventory/onprem.example.yml for the "
                           "format", "hosts: no hosts found. Fix: list the hosts under `hosts:` in {p}"]),
    ({"hosts": ["10.0.0.1", *ONE["hosts"]]}, "hosts[0]: must be a mapping of host fields, got str. Fix: see "
                                             "inventory/onprem.example.yml for the format"),
    ({"hosts": [{"address": "a", "idx": 1}]}, "hosts[0] (a).idx: unknown field. Fix: use only address, gpus, "
                                              "host_keys, name, port, ssh_port, ssh_user, task_index, task_type, "
                                              "tf_address"),
    ({"defaults": [1], **ONE}, "hosts.yml.defaults: must be a mapping. Fix: see inventory/onprem.example.yml for the "
                               "format"),
    ({"defaults": {"address": "x"}, **ONE}, "hosts.yml.defaults.address: unknown key. Fix: use only gpus, port, "
                                            "ssh_port, ssh_user"),
    ({"cluster_name": 5, **ONE}, "hosts.yml.cluster_name: 5 is not a valid cluster name. Fix: use 3-32 lowercase "
                                 "letters, digits or '-', starting with a letter (it names AWS resources)"),
    ({"cluster_name": "../x", **ONE}, "hosts.yml.cluster_name: '../x' is not a valid cluster name. Fix: use 3-32 "
                                      "lowercase letters, digits or '-', starting with a letter (it names AWS "
                                      "resources)"),
    ({"bastion": "jump", **ONE}, "hosts.yml.bastion: must be a mapping with address, host_keys, port, user, got "
                                 "str. Fix: write e.g. bastion: {{address: 203.0.113.5, user: ubuntu}}"),
    ({"bastion": {"address": "jump", "proxy": 1}, **ONE}, "hosts.yml.bastion.proxy: unknown field. Fix: use only "
                                                          "address, host_keys, port, user"),
    ({"bastion": {"user": "ops"}, **ONE}, "hosts.yml.bastion.address: address is missing. Fix: give the jump host's "
                                          "IP or DNS name"),
    ({"bastion": {"address": "jump", "host_keys": "ssh-ed25519 AAAA"}, **ONE},
     "hosts.yml.bastion.host_keys: must be a list of keys, got str. Fix: write host_keys: [\"ssh-ed25519 AAAA...\"]"),
    ({"hosts": []}, "hosts: no hosts found. Fix: list the hosts under `hosts:` in {p}"),
    (None, "hosts: no hosts found. Fix: list the hosts under `hosts:` in {p}"),
])
def test_static_file_problems(tmp_path: Path, data: object, expected: str | list[str]) -> None:
    with pytest.raises(InventoryError) as info:
        _static_list(tmp_path, data)
    lines = [expected] if isinstance(expected, str) else expected
    assert [str(p) for p in info.value.problems] == [line.format(p=tmp_path / "hosts.yml") for line in lines]


def test_static_file_missing_and_bad_yaml(tmp_path: Path) -> None:
    env = {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(tmp_path / "none.yml")}
    with pytest.raises(InventoryError) as info:
        _list(env)
    assert str(info.value.problems[0]) == (f"TFCLUSTER_HOSTS_FILE: {tmp_path / 'none.yml'} does not exist or is not "
                                          "a file. Fix: point TFCLUSTER_HOSTS_FILE at a host file like "
                                          "inventory/onprem.example.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("hosts:\n  - address: [unclosed\n")
    with pytest.raises(InventoryError) as info:
        _list({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(bad)})
    assert str(info.value.problems[0]).startswith(f"TFCLUSTER_HOSTS_FILE: {bad} is not valid YAML at line 3 ")
    binary = tmp_path / "bin.yml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InventoryError) as info:
        _list({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(binary)})
    assert str(info.value.problems[0]).startswith(f"TFCLUSTER_HOSTS_FILE: cannot read {binary}:")


def test_static_json_host_file(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"hosts": STATIC_HOSTS}))
    from_json = _list({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)})
    assert from_json == _static_list(tmp_path, {"hosts": STATIC_HOSTS})
    path.write_text('{"hosts": [}')
    with pytest.raises(InventoryError) as info:
        _list({"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(path)})
    assert str(info.value.problems[0]).startswith(
        f"TFCLUSTER_HOSTS_FILE: {path} is not valid JSON at line 1 column 12:")


# ---- aws (pure part; the moto test is in tests/integration/inventory) --------------------------------------------

def _aws_build(items: list[dict[str, Any]]) -> str:
    specs = tuple(instance_spec(i, 2222) for i in items)
    return dumps(build_inventory(validate_cluster(SourceResult(specs=specs, empty_fix="x"), "auto", "c")))


def test_aws_instances_shuffled_give_identical_cluster() -> None:
    instances = [instance(f"i-{n}", f"10.0.0.{n}", "worker", str(n)) for n in range(6)]
    instances.append(instance("i-c", "10.0.0.99", "chief", "0", port="2500", gpus="4", ssh_user="ec2-user"))
    reference = _aws_build(instances)
    for order in _shuffles(instances):
        assert _aws_build(order) == reference
    hv = unmarked(json.loads(reference))["_meta"]["hostvars"]
    assert (hv["chief-0"]["tfcluster_port"], hv["chief-0"]["tfcluster_gpus"], hv["chief-0"]["ansible_user"]) == (
        2500, 4, "ec2-user")
    assert hv["worker-5"]["tfcluster_address"] == "10.0.0.5:2222"


def test_aws_bad_tags_are_reported() -> None:
    spec = instance_spec({"InstanceId": "i-1", "Tags": [{"Key": "tfcluster:task_index", "Value": "one"}]}, 2222)
    assert spec.label == "i-1 (no IP)"
    assert (spec.task_type, spec.task_index, spec.address) == (None, "one", None)


# ---- local -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("workers", "strategy", "slots"), [
    (1, "auto", [("worker", 0, 22220)]),
    (3, "multi_worker_mirrored", [("worker", 0, 22220), ("worker", 1, 22221), ("worker", 2, 22222)]),
    (2, "parameter_server", [("chief", 0, 22220), ("ps", 0, 22221), ("worker", 0, 22222), ("worker", 1, 22223)]),
])
def test_local_slots_and_ports(workers: int, strategy: str, slots: list[tuple[str, int, int]]) -> None:
    found = local_hosts(workers, 22220, strategy)
    assert [(s.task_type, s.task_index, s.port) for s in found.specs] == slots
    assert {(s.address, s.connection) for s in found.specs} == {("127.0.0.1", "local")}


def test_local_env_gives_same_output_twice() -> None:
    env = {"TFCLUSTER_SOURCE": "local", "TFCLUSTER_WORKERS": "4", "TFCLUSTER_BASE_PORT": "30000"}
    first = _list(env)
    assert first == _list(env)
    inv = json.loads(first)
    assert inv["worker"]["hosts"] == ["worker-0", "worker-1", "worker-2", "worker-3"]
    assert inv["_meta"]["hostvars"]["worker-3"]["tfcluster_port"] == 30003
