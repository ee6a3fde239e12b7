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
    render_etc_hosts,
    render_hosts_file,
    render_known_hosts,
    render_network,
    render_ssh_config,
    slot_names,
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
    assert doc == {"cluster_name": "pt", "hosts": [
        {"name": "chief-0", "address": "10.9.8.11", "ssh_user": "root", "ssh_port": 22, "task_type": "chief",
         "task_index": 0, "port": 12345, "gpus": 0},
        {"name": "worker-0", "address": "10.9.8.12", "ssh_user": "root", "ssh_port": 22, "task_type": "worker",
         "task_index": 0, "port": 12345, "gpus": 0}]}
    assert "ANSIBLE_PRIVATE_KEY_FILE=/k/id_ed25519" in render_hosts_file(spec, "/k/id_ed25519")


def test_hosts_file_is_accepted_by_the_static_source() -> None:
    from pathlib import Path

    static = pytest.importorskip("inventory.sources.static")
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
