"""The lab's pure parts: names, slots, subnets and the files it writes (no root, no hosts)."""

from __future__ import annotations

import json

import pytest
import yaml

from lab.cli import build_parser
from lab.config import (
    LabError,
    LabSpec,
    check_name,
    check_subnet,
    default_slots,
    make_spec,
    parse_slots,
    pick_subnet,
    slot_names,
)
from lab.render import (
    render_etc_hosts,
    render_front_network,
    render_hosts_file,
    render_known_hosts,
    render_network,
    render_ssh_config,
    render_sshd_delay,
)
from lab.rootfs import PACKAGES


@pytest.mark.parametrize("name", ["a", "chief-0", "worker-10", "abcdefghijkl"])
def test_valid_names(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "Chief", "0worker", "abcdefghijklm", "a_b", "a.b", "-a"])
def test_invalid_names_say_the_rule(name: str) -> None:
    with pytest.raises(LabError, match=r"is not valid: use 1-12 characters a-z, 0-9 and '-', starting with a letter"):
        check_name(name)


def test_slots_are_numbered_per_task_type() -> None:
    assert slot_names(["chief", "ps", "worker", "worker", "ps"]) == [
        ("chief-0", "chief", 0), ("ps-0", "ps", 0), ("worker-0", "worker", 0), ("worker-1", "worker", 1),
        ("ps-1", "ps", 1)]


@pytest.mark.parametrize(("count", "slots"), [(1, ("chief",)), (3, ("chief", "worker", "worker"))])
def test_default_slots(count: int, slots: tuple[str, ...]) -> None:
    assert default_slots(count) == slots


def test_default_slots_needs_a_host() -> None:
    with pytest.raises(LabError, match=r"--hosts 0: a lab needs at least one host"):
        default_slots(0)


def test_parse_slots() -> None:
    assert parse_slots(" chief, ps ,worker ") == ("chief", "ps", "worker")


@pytest.mark.parametrize(("text", "message"), [
    ("chief,boss,cook", r"unknown task type\(s\) boss, cook; use chief, worker, ps, evaluator"),
    (" , ", r"--slots ' , ' names no host; give task types, e.g. chief,worker,worker"),
])
def test_parse_slots_errors(text: str, message: str) -> None:
    with pytest.raises(LabError, match=message):
        parse_slots(text)


def test_pick_subnet_skips_every_network_in_use() -> None:
    used = ["192.0.2.2/24", "10.247.61.1/24", "10.247.62.0/23", "127.0.0.1/8"]
    assert pick_subnet(used) == "10.247.64.0/24"
    assert pick_subnet([]) == "10.247.61.0/24"


def test_pick_subnet_when_all_are_taken() -> None:
    with pytest.raises(LabError, match=r"every candidate lab subnet overlaps .* pass --subnet with a free /24"):
        pick_subnet(["10.0.0.0/8"])


@pytest.mark.parametrize(("subnet", "used", "message"), [
    ("10.1.2.0/33", [], r"--subnet '10.1.2.0/33' is not an IPv4 network in CIDR form"),
    ("10.1.2.5/24", [], r"is not an IPv4 network in CIDR form"),  # host bits set
    ("8.8.8.0/24", [], r"--subnet 8.8.8.0/24 is not a private network"),
    ("10.1.2.0/29", [], r"--subnet 10.1.2.0/29 is too small for 3 hosts; use a /24"),
    ("10.1.2.0/24", ["10.1.0.0/16"], r"--subnet 10.1.2.0/24 overlaps 10.1.0.0/16, already on this machine"),
])
def test_check_subnet_errors(subnet: str, used: list[str], message: str) -> None:
    with pytest.raises(LabError, match=message):
        check_subnet(subnet, 3, used)


def test_spec_addresses_and_names() -> None:
    spec = make_spec("tfclab", ("chief", "ps", "worker", "worker"), "10.9.8.0/24")
    assert [(h.name, h.address, h.task_type, h.index, h.port) for h in spec.hosts] == [
        ("chief-0", "10.9.8.11", "chief", 0, 12345), ("ps-0", "10.9.8.12", "ps", 0, 12345),
        ("worker-0", "10.9.8.13", "worker", 0, 12345), ("worker-1", "10.9.8.14", "worker", 1, 12345)]
    assert spec.bridge == "br-tfclab"
    assert spec.control_address == "10.9.8.1"
    assert spec.host("ps-0").veth == "vb-ps-0"
    assert LabSpec.from_json(spec.to_json()) == spec


def test_a_machine_prefix_names_the_links_and_keeps_the_host_names() -> None:
    """Two labs with the same host names side by side (the flow labs): their machines, so their links, differ."""
    spec = make_spec("flow-gw3", ("chief", "worker"), "10.9.8.0/24", names=["f-chief", "f-w0"], machine_prefix="gw3")
    assert [(h.name, h.machine_name, h.veth) for h in spec.hosts] == [("f-chief", "gw3f-chief", "vb-gw3f-chief"),
                                                                       ("f-w0", "gw3f-w0", "vb-gw3f-w0")]
    assert LabSpec.from_json(spec.to_json()) == spec
    assert make_spec("x", ("chief",), "10.9.8.0/24", names=["f-chief"]).hosts[0].veth == "vb-f-chief"
    with pytest.raises(LabError, match="machine name 'gw3abcdefghijk' is not valid"):
        make_spec("x", ("chief",), "10.9.8.0/24", names=["abcdefghijk"], machine_prefix="gw3")


def test_spec_with_names_and_binds() -> None:
    spec = make_spec("x", ("chief", "worker"), "10.9.8.0/24", names=["gpu-a", "gpu-b"], port=2222,
                     bind_ro=["/work/main/.venv"])
    assert [(h.name, h.task_type, h.index, h.port) for h in spec.hosts] == [("gpu-a", "chief", 0, 2222),
                                                                            ("gpu-b", "worker", 0, 2222)]
    assert spec.bind_ro == ("/work/main/.venv",)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"names": ["a"]}, r"1 host names for 2 slots; give one name per slot"),
    ({"names": ["a", "a"]}, r"host names repeat: a, a; give each host its own name"),
    ({"names": ["a", "B"]}, r"host name 'B' is not valid"),
    ({"port": 0}, r"--port 0 is not a TCP port \(1..65535\)"),
    ({"bind_ro": ["relative/venv"]}, r"--bind-ro 'relative/venv' must be an absolute path"),
])
def test_spec_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(LabError, match=message):
        make_spec("x", ("chief", "worker"), "10.9.8.0/24", **kwargs)  # type: ignore[arg-type]


def test_spec_rejects_a_bad_lab_name() -> None:
    with pytest.raises(LabError, match=r"lab name 'My_Lab' is not valid"):
        make_spec("My_Lab", ("chief",), "10.9.8.0/24")


def test_unknown_host_lists_the_known_ones() -> None:
    spec = make_spec("x", ("chief", "worker"), "10.9.8.0/24")
    with pytest.raises(LabError, match=r"lab 'x' has no host 'ps-0'; its hosts are: chief-0, worker-0"):
        spec.host("ps-0")


def test_etc_hosts_names_every_peer_and_the_control_machine() -> None:
    spec = make_spec("x", ("chief", "worker"), "10.9.8.0/24")
    lines = render_etc_hosts(spec).splitlines()
    assert "10.9.8.1\tlab-control" in lines
    assert lines[-2:] == ["10.9.8.11\tchief-0", "10.9.8.12\tworker-0"]


def test_network_file_is_static_and_keeps_the_address_through_a_cut() -> None:
    spec = make_spec("x", ("chief", "worker"), "10.9.8.0/24")
    text = render_network(spec.hosts[1], spec)
    assert "Name=host0" in text
    assert "Address=10.9.8.12/24" in text
    assert "IgnoreCarrierLoss=yes" in text and "ConfigureWithoutCarrier=yes" in text
    assert "Gateway" not in text and "DHCP" not in text  # air-gapped: nothing off the bridge


def test_hosts_file_is_the_static_inventory_format() -> None:
    spec = make_spec("pt", ("chief", "worker"), "10.9.8.0/24")
    doc = yaml.safe_load(render_hosts_file(spec, "/k/id_ed25519"))
    assert doc == {"cluster_name": "lab-pt", "hosts": [
        {"name": "chief-0", "address": "10.9.8.11", "ssh_user": "root", "ssh_port": 22, "task_type": "chief",
         "task_index": 0, "port": 12345, "gpus": 0},
        {"name": "worker-0", "address": "10.9.8.12", "ssh_user": "root", "ssh_port": 22, "task_type": "worker",
         "task_index": 0, "port": 12345, "gpus": 0}]}
    assert "ANSIBLE_PRIVATE_KEY_FILE=/k/id_ed25519" in render_hosts_file(spec, "/k/id_ed25519")


def test_hosts_file_is_accepted_by_the_static_source() -> None:
    from pathlib import Path

    static = pytest.importorskip("tfcluster.inventory.sources.static")
    spec = make_spec("pt", ("chief", "ps", "worker"), "10.9.8.0/24")
    result = static.static_hosts(yaml.safe_load(render_hosts_file(spec, "/k")), Path("hosts.yml"), 12345)
    assert result.problems == ()
    assert [(s.name, s.address, s.task_type, s.task_index) for s in result.specs] == [
        ("chief-0", "10.9.8.11", "chief", 0), ("ps-0", "10.9.8.12", "ps", 0), ("worker-0", "10.9.8.13", "worker", 0)]


def test_ssh_config_and_known_hosts() -> None:
    spec = make_spec("x", ("chief", "worker"), "10.9.8.0/24")
    cfg = render_ssh_config(spec, "/k/id", "/k/known")
    assert "Host worker-0 10.9.8.12\n  HostName 10.9.8.12\n  User root" in cfg
    assert "StrictHostKeyChecking yes" in cfg and "UserKnownHostsFile /k/known" in cfg
    known = render_known_hosts([(spec.hosts[0], "ssh-ed25519 AAAAC3 root@chief-0")])
    assert known == "chief-0,10.9.8.11 ssh-ed25519 AAAAC3\n"


def test_rootfs_has_what_an_ansible_target_and_the_runtime_need() -> None:
    assert {"systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-venv", "iproute2", "sudo",
            "procps"} <= set(PACKAGES)


def test_cli_parses_every_command() -> None:
    parser = build_parser()
    args = parser.parse_args(["up", "--slots", "chief,ps", "--bind-ro", "/a", "--bind-ro", "/b"])
    assert (args.slots, args.bind_ro, args.name) == ("chief,ps", ["/a", "/b"], "tfclab")
    assert parser.parse_args(["ssh", "worker-0", "systemctl", "status"]).remote == ["systemctl", "status"]
    assert parser.parse_args(["down", "--all"]).all is True
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--hosts", "2", "--slots", "chief"])  # one or the other
    assert json.loads(json.dumps(vars(parser.parse_args(["status", "--json"])), default=str))["json"] is True


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHxUpbbIf0WXCj8xWlhDn3UNHlSE4Z0T5qJcByZ3lG1X"


def cloud_spec(**kwargs: object) -> LabSpec:
    """The AWS twin's lab: instances at their private IPs, a bastion, the image's user, one late sshd."""
    settings: dict[str, object] = {
        "names": ["tw-worker-0", "tw-worker-1"], "addresses": ["10.42.0.77", "10.42.0.5"], "bastion": "tw-bastion",
        "front_subnet": "10.247.61.0/24", "user": "ubuntu", "user_key": KEY + " twin",
        "sshd_delay": {"tw-worker-1": 25}, **kwargs}
    return make_spec("twin", ("worker", "worker"), "10.42.0.0/24", port=2222, **settings)  # type: ignore[arg-type]


def test_cloud_spec_puts_instances_at_their_addresses_and_a_bastion_on_both_networks() -> None:
    spec = cloud_spec()
    assert [(h.name, h.address, h.task_type, h.index, h.sshd_delay, h.front_address) for h in spec.hosts] == [
        ("tw-worker-0", "10.42.0.77", "worker", 0, 0, None), ("tw-worker-1", "10.42.0.5", "worker", 1, 25, None),
        ("tw-bastion", "10.42.0.254", "bastion", 0, 0, "10.247.61.11")]
    assert [h.name for h in spec.members] == ["tw-worker-0", "tw-worker-1"]
    assert spec.bastion is spec.hosts[2] and spec.front_bridge == "bf-twin" and spec.host("tw-bastion").front_veth \
        == "vf-tw-bastion"
    assert (spec.front_control_address, spec.front_subnet_prefix, spec.control_address) == ("10.247.61.1", 24,
                                                                                           "10.42.0.1")
    assert LabSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"addresses": ["10.42.0.1", "10.42.0.5"]}, r"address 10.42.0.1 is not a host address of 10.42.0.0/24 other than "
                                                r"\.1 \(the control machine's\)"),
    ({"addresses": ["10.43.0.9", "10.42.0.5"]}, r"address 10.43.0.9 is not a host address of 10.42.0.0/24"),
    ({"addresses": ["10.42.0.5", "10.42.0.5"]}, r"addresses repeat: 10.42.0.5, 10.42.0.5"),
    ({"addresses": ["10.42.0.5"]}, r"1 addresses for 2 slots"),
    ({"front_subnet": None}, r"a bastion needs a front network"),
    ({"front_subnet": "10.42.0.0/24"}, r"the front network 10.42.0.0/24 overlaps the lab's 10.42.0.0/24"),
    ({"bastion": "tw-worker-0"}, r"host names repeat"),
    ({"sshd_delay": {"nobody": 3}}, r"sshd_delay names no host of the lab: nobody"),
    ({"sshd_delay": {"tw-worker-0": 120}}, r"sshd_delay of tw-worker-0 is 120 s; use 0\.\.80"),
    ({"user": "root"}, r"user 'root' is not a login name for the lab to create"),
    ({"user_key": "not a key"}, r"user_key of ubuntu is not an OpenSSH public key line"),
])
def test_cloud_spec_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(LabError, match=message):
        cloud_spec(**kwargs)


def test_cloud_files() -> None:
    spec = cloud_spec()
    bastion = spec.host("tw-bastion")
    assert "Name=front0" in render_front_network(bastion, spec) and "Address=10.247.61.11/24" in \
        render_front_network(bastion, spec)
    assert render_sshd_delay(25) == "# Written by lab: sshd starts late.\n[Service]\nExecStartPre=/bin/sleep 25\n"
    direct = render_ssh_config(spec, "/k/id", "/k/known")
    assert "Host tw-bastion 10.42.0.254 10.247.61.11\n  HostName 10.247.61.11\n" in direct
    assert "ProxyJump" not in direct
    isolated = render_ssh_config(spec, "/k/id", "/k/known", isolated=True)
    assert "Host tw-worker-0 10.42.0.77\n  HostName 10.42.0.77\n  ProxyJump tw-bastion\n" in isolated
    assert "Host tw-bastion 10.42.0.254 10.247.61.11\n  HostName 10.247.61.11\n  User root" in isolated
    assert render_known_hosts([(bastion, KEY + " root@b")]) == f"tw-bastion,10.42.0.254,10.247.61.11 {KEY}\n"


def test_hosts_file_carries_host_keys_and_the_bastion_when_isolated() -> None:
    spec = cloud_spec()
    keys = {"tw-worker-0": KEY + " root@w0", "tw-worker-1": KEY, "tw-bastion": KEY}
    doc = yaml.safe_load(render_hosts_file(spec, "/k", keys))
    assert [h["name"] for h in doc["hosts"]] == ["tw-worker-0", "tw-worker-1"]  # the bastion is no member
    assert doc["hosts"][0]["host_keys"] == [KEY] and "bastion" not in doc
    doc = yaml.safe_load(render_hosts_file(spec, "/k", keys, isolated=True))
    assert doc["bastion"] == {"address": "10.247.61.11", "user": "root", "port": 22, "host_keys": [KEY]}


def test_hosts_file_with_keys_and_bastion_is_accepted_by_the_static_source() -> None:
    from pathlib import Path

    static = pytest.importorskip("tfcluster.inventory.sources.static")
    spec = cloud_spec()
    keys = {"tw-worker-0": KEY, "tw-worker-1": KEY, "tw-bastion": KEY}
    result = static.static_hosts(yaml.safe_load(render_hosts_file(spec, "/k", keys, isolated=True)),
                                 Path("hosts.yml"), 12345)
    assert result.problems == ()
    assert [(s.name, list(s.host_keys)) for s in result.specs] == [("tw-worker-0", [KEY]), ("tw-worker-1", [KEY])]
