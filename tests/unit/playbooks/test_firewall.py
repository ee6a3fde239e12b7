"""The firewall role's rules (playbooks/roles/firewall): rendered by Ansible's own templating, loaded with nft in a
private network namespace (this machine's rules are never touched), and tried with real connections as three
users: the job user reaches the training port over loopback, root and anyone else are refused. Also: nothing but
the training port is filtered (NCCL's ports pass), the role is on for on-prem and AWS hosts, and an active ufw or
firewalld is found."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfcluster import kinds

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "playbooks" / "collections" / "ansible_collections" / "tfcluster" / "cluster" / "roles" / "firewall"
PEERS = ["10.1.2.3", "192.0.2.0/24", "fd00::7"]


def _trusted(value: Any) -> Any:
    try:  # ansible-core >= 2.19 templates only trusted strings (the role's own files are)
        from ansible.template import trust_as_template
    except ImportError:  # pragma: no cover - older ansible-core
        return value
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    return value


def render(text: str, **overrides: Any) -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    variables: dict[str, Any] = {}
    for part in ("defaults", "vars"):
        variables.update(_trusted(yaml.safe_load((ROLE / part / "main.yml").read_text())))
    variables.update({"firewall_peers": PEERS, "firewall_port": 4711, "firewall_job_user": "nobody",
                      "ansible_managed": "Ansible managed", **overrides})
    return Templar(loader=DataLoader(), variables=variables).template(_trusted(text))


def rules(**overrides: Any) -> str:
    return str(render((ROLE / "templates" / "firewall.nft.j2").read_text(), **overrides))


def test_only_the_training_port_is_filtered_so_nccl_passes() -> None:
    text = rules()
    filtering = [line.strip() for line in text.splitlines() if line.strip().endswith(("drop", "reset", "reject"))]
    assert filtering == ['tcp dport 4711 drop',
                         'oif "lo" tcp dport 4711 meta skuid != "nobody" reject with tcp reset']
    assert text.count("policy accept;") == 2 and "policy drop" not in text
    assert "ip saddr { 10.1.2.3, 192.0.2.0/24 } accept" in text and "ip6 saddr { fd00::7 } accept" in text


@pytest.mark.parametrize(("cluster", "enabled"), [("onprem", True), ("aws", True), ("local", False)])
def test_the_firewall_is_on_for_onprem_and_aws_hosts(cluster: str, enabled: bool) -> None:
    """The kind decides (its traits, from the inventory); the role only reads them."""
    traits = json.loads(kinds.get(cluster).traits.to_json())
    value = render("{{ _firewall_active }}", tfcluster_kind_traits=traits, tfcluster_local=False,
                   ansible_connection="ssh")
    assert str(value) == str(enabled)


def test_without_the_kind_s_traits_the_firewall_stays_off() -> None:
    assert str(render("{{ _firewall_active }}", tfcluster_local=False, ansible_connection="ssh")) == "False"


def _unit(name: str, state: str | None) -> dict[str, Any]:
    return {"item": name, "status": {} if state is None else {"ActiveState": state}}


@pytest.mark.parametrize(("ufw", "ufw_conf_rc", "firewalld", "others"), [
    ("active", 1, "inactive", []),  # Ubuntu's default: ufw.service active (exited), ufw itself disabled
    ("active", 0, "inactive", ["ufw"]),
    ("inactive", None, "active", ["firewalld"]),
    ("active", 0, "active", ["ufw", "firewalld"]),
    (None, None, None, []),  # no such units
])
def test_an_active_ufw_or_firewalld_is_found(ufw: str | None, ufw_conf_rc: int | None, firewalld: str | None,
                                             others: list[str]) -> None:
    conf = {"skipped": True} if ufw_conf_rc is None else {"rc": ufw_conf_rc}
    found = render("{{ _firewall_others }}", _firewall_ufw_conf=conf, _firewall_managers={
        "results": [_unit("ufw.service", ufw), _unit("firewalld.service", firewalld)]})
    assert list(found) == others


PROBE = """
set -eu
ip link set lo up
nft -c -f "$RULES"
nft -f "$RULES"
first=$(nft list table inet tfcluster)
nft -f "$RULES"
[ "$first" = "$(nft list table inet tfcluster)" ] && echo "reload: same"
/usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(8); time.sleep(8)' "$PORT" &
server=$!
sleep 0.5
try() {
  setpriv --reuid="$2" --regid="$2" --clear-groups /usr/bin/python3 -c 'import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), 2).close(); print(sys.argv[1], "connects")
except OSError as e:
    print(sys.argv[1], "refused", e.errno)' "$1" "$PORT"
}
try job "$JOB_UID"
try root 0
try other "$OTHER_UID"
kill "$server"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="loading nftables rules (in a private network namespace) needs root")
@pytest.mark.skipif(shutil.which("nft") is None, reason="nft is not installed here (apt-get install nftables)")
@pytest.mark.skipif(shutil.which("setpriv") is None or shutil.which("ip") is None,
                    reason="setpriv (util-linux) and ip (iproute2) are needed")
def test_on_loopback_only_the_job_user_reaches_the_training_port(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    nobody = pwd.getpwnam("nobody")
    path = tmp_path / "firewall.nft"
    path.write_text(rules(firewall_port=port))
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "RULES": str(path), "PORT": str(port),
           "JOB_UID": str(nobody.pw_uid), "OTHER_UID": "1"}
    probe = subprocess.run(["unshare", "--net", "sh", "-c", PROBE], capture_output=True, text=True, env=env,
                           timeout=60, check=False)
    if probe.returncode != 0 and "unshare failed" in probe.stderr:
        pytest.skip(f"this container forbids network namespaces: {probe.stderr.strip()}")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines() == ["reload: same", "job connects", "root refused 111", "other refused 111"]
