"""The lab tool on a 3-host lab: identity, SSH, peers, air gap, link cut/restore, reboot, systemd restarts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from lab import Lab, LabError

# the lab tool's own labs (fixed names pt3, ...): one at a time
pytestmark = [pytest.mark.xdist_group("labtool"), pytest.mark.lab]


def _wait(predicate, timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"{what} not within {timeout} s")


def _plain(value: object) -> object:
    """A host var without the inventory's `__ansible_unsafe` marker (values Ansible must never template)."""
    return value["__ansible_unsafe"] if isinstance(value, dict) and "__ansible_unsafe" in value else value


def test_three_hosts_boot_with_their_own_identity(lab3: Lab) -> None:
    seen_ids, seen_addresses = set(), set()
    for host in lab3.hosts:
        out = lab3.ssh(host.name, "systemctl is-system-running; hostname; cat /etc/machine-id; "
                                  "ip -4 -o addr show dev host0").stdout.splitlines()
        assert out[0] == "running", f"{host.name}: {out}"
        assert out[1] == host.name
        seen_ids.add(out[2])
        assert f"inet {host.address}/24" in out[3]
        seen_addresses.add(host.address)
    assert len(seen_ids) == 3, "every host has its own machine-id"
    assert len(seen_addresses) == 3
    assert lab3.boot_seconds is not None and lab3.boot_seconds < 30, f"boot took {lab3.boot_seconds:.1f} s"


def test_host_file_and_ssh_config_work_with_plain_tools(lab3: Lab) -> None:
    doc = yaml.safe_load(lab3.hosts_file.read_text())
    assert doc["cluster_name"] == "lab-pt3"
    assert [h["name"] for h in doc["hosts"]] == ["t-chief-0", "t-worker-0", "t-worker-1"]
    for entry in doc["hosts"]:
        host = lab3.host(entry["name"])
        on_host = lab3.ssh(host.name, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2]
        assert entry == {"name": host.name, "address": host.address, "ssh_user": "root", "ssh_port": 22,
                         "task_type": host.task_type, "task_index": host.index, "port": 12345, "gpus": 0,
                         "host_keys": [" ".join(on_host)]}
        # Plain ssh with the lab's key and known_hosts and strict host key checking: the host keys the lab
        # recorded are the ones the hosts present.
        proc = subprocess.run(["ssh", "-i", str(lab3.private_key), "-o", "BatchMode=yes",
                               "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={lab3.known_hosts}",
                               f"root@{host.address}", "hostname"],
                              capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == host.name
        proc = subprocess.run(["ssh", "-F", str(lab3.ssh_config), host.name, "hostname"],
                              capture_output=True, text=True, timeout=30, check=False)
        assert proc.stdout.strip() == host.name, proc.stderr
    assert [(h["task_type"], h["task_index"]) for h in doc["hosts"]] == [("chief", 0), ("worker", 0), ("worker", 1)]


def test_static_inventory_and_ansible_reach_every_host(lab3: Lab, repo: Path, venv_bin: Path) -> None:
    """The host file is what the inventory's static source reads; Ansible then reaches every host over SSH."""
    env = {**os.environ, **lab3.inventory_env(), "PATH": f"{venv_bin}:{os.environ['PATH']}",
           "ANSIBLE_CONFIG": str(repo / "ansible.cfg")}
    listed = subprocess.run([str(repo / "inventory/slots.py"), "--list"], capture_output=True, text=True,
                            env=env, cwd=repo, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr
    hostvars = json.loads(listed.stdout)["_meta"]["hostvars"]
    assert {n: tuple(_plain(v[k]) for k in ("ansible_host", "tfcluster_task_type", "tfcluster_task_index"))
            for n, v in hostvars.items()} == {h.name: (h.address, h.task_type, h.index) for h in lab3.hosts}
    ansible = subprocess.run([str(venv_bin / "ansible"), "-i", "inventory/slots.py", "tfcluster",
                              "-m", "ansible.builtin.command", "-a", "hostname"],
                             capture_output=True, text=True, env=env, cwd=repo, timeout=120, check=False)
    assert ansible.returncode == 0, ansible.stdout + ansible.stderr
    for host in lab3.hosts:
        assert f"{host.name} | CHANGED | rc=0 >>\n{host.name}" in ansible.stdout


def test_each_host_reaches_every_peer_by_name(lab3: Lab) -> None:
    names = [h.name for h in lab3.hosts]
    for host in names:
        peers = [p for p in names if p != host]
        script = "; ".join(f"python3 -c \"import socket; socket.create_connection(('{p}', 22), 3).close()\" "
                           f"&& ping -c1 -W2 {p} >/dev/null && echo ok {p}" for p in peers)
        out = lab3.ssh(host, script).stdout.split("\n")
        assert [line for line in out if line] == [f"ok {p}" for p in peers], f"{host}: {out}"
    # and the control machine, by the name every host knows it by
    assert lab3.ssh(names[0], "ping -c1 -W2 lab-control >/dev/null && echo ok").stdout.strip() == "ok"


def test_hosts_are_air_gapped(lab3: Lab) -> None:
    proc = lab3.ssh(lab3.hosts[0].name, "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), 3)\"",
                    check=False)
    assert proc.returncode != 0
    assert "Network is unreachable" in proc.stderr


def test_cut_makes_one_host_unreachable_and_restore_brings_it_back(lab3: Lab) -> None:
    chief, victim, other = (h.name for h in lab3.hosts)
    lab3.cut(victim)
    try:
        assert lab3.is_cut(victim)
        _wait(lambda: not lab3.reachable(victim, 0.5), 5, f"{victim} unreachable")
        assert lab3.ssh(victim, "true", check=False, timeout=20).returncode != 0
        assert lab3.ssh(chief, f"ping -c1 -W1 {victim}", check=False).returncode != 0
        # only that host: the others still reach each other and the control machine
        assert lab3.ssh(chief, f"ping -c1 -W1 {other} >/dev/null && echo ok").stdout.strip() == "ok"
        assert lab3.reachable(other)
    finally:
        lab3.restore(victim)
    assert not lab3.is_cut(victim)
    took = _wait(lambda: lab3.reachable(victim, 0.5), 10, f"{victim} reachable again")
    # same address and state after the cut (the host kept its configuration through the carrier loss)
    assert lab3.ssh(victim, "ip -4 -o addr show dev host0").stdout.split()[3] == f"{lab3.host(victim).address}/24"
    assert lab3.ssh(chief, f"ping -c1 -W2 {victim} >/dev/null && echo ok").stdout.strip() == "ok"
    assert took < 5


def test_unit_with_restart_on_failure_restarts_after_kill_9(lab3: Lab) -> None:
    host = lab3.hosts[1].name
    unit = ("[Unit]\nDescription=lab restart probe\n[Service]\nExecStart=/bin/sleep infinity\n"
            "Restart=on-failure\nRestartSec=1\n")
    lab3.ssh(host, "cat > /etc/systemd/system/lab-probe.service && systemctl daemon-reload && "
                   "systemctl start lab-probe.service", input=unit)
    try:
        first = int(lab3.ssh(host, "systemctl show -p MainPID --value lab-probe.service").stdout)
        assert first > 0
        lab3.ssh(host, f"kill -9 {first}")

        def restarted() -> bool:
            out = lab3.ssh(host, "systemctl show -p MainPID,ActiveState,NRestarts lab-probe.service").stdout
            props = dict(line.split("=", 1) for line in out.split())
            return props["ActiveState"] == "active" and int(props["MainPID"]) not in (0, first) \
                and props["NRestarts"] == "1"

        took = _wait(restarted, 15, "lab-probe.service restarted with a new PID")
        assert took < 10
    finally:
        lab3.ssh(host, "systemctl stop lab-probe.service; rm -f /etc/systemd/system/lab-probe.service; "
                       "systemctl daemon-reload", check=False)


def test_reboot_returns_the_host_with_its_disk_and_a_fresh_run(lab3: Lab) -> None:
    host = lab3.hosts[2].name
    before_pid = lab3.nspawn_pid(host)
    boots = lab3.boots(host)
    lab3.ssh(host, "echo kept > /root/survives; touch /run/gone-after-reboot")
    started = time.monotonic()
    lab3.reboot(host)
    took = time.monotonic() - started
    assert lab3.boots(host) == boots + 1
    assert lab3.nspawn_pid(host) != before_pid
    out = lab3.ssh(host, "systemctl is-system-running; hostname; cat /root/survives; "
                         "test -e /run/gone-after-reboot && echo still-there || echo gone").stdout.split()
    assert out == ["running", host, "kept", "gone"]
    assert lab3.ssh(lab3.hosts[0].name, f"ping -c1 -W2 {host} >/dev/null && echo ok").stdout.strip() == "ok"
    assert took < 30


def test_idle_host_memory_is_small(lab3: Lab) -> None:
    mib = [lab3.memory_kib(h.name) / 1024 for h in lab3.hosts]
    assert all(5 < m < 64 for m in mib), mib


def test_unknown_host_is_named_in_the_error(lab3: Lab) -> None:
    with pytest.raises(LabError, match=r"no host 'worker-9'; its hosts are: t-chief-0, t-worker-0, t-worker-1"):
        lab3.cut("worker-9")


def test_project_venv_runs_inside_a_host_when_bind_mounted(start_lab: Callable[..., Lab]) -> None:
    home = Path(sys.prefix, "pyvenv.cfg")
    if sys.prefix == sys.base_prefix or "home = /usr/bin" not in home.read_text():
        pytest.skip("needs the project venv built from Debian's /usr/bin/python3 (make setup)")
    lab = start_lab(slots=("chief",), name="ptvenv", names=["v-a"], bind_ro=[sys.prefix])
    out = lab.ssh("v-a", f"{sys.executable} -c 'import yaml, sys; print(sys.prefix, yaml.__version__)'").stdout
    assert out.split() == [sys.prefix, yaml.__version__]
    assert lab.ssh("v-a", f"touch {sys.prefix}/x", check=False).returncode != 0  # read-only
