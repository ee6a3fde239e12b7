"""The text of every file the lab writes: into each host, and for the control machine. Pure functions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lab.config import CONTROL_NAME, SSH_PORT, SSH_USER, LabHost, LabSpec

SSHD_CONFIG = (
    "# Written by lab.\n"
    "HostKey /etc/ssh/ssh_host_ed25519_key\n"
    "PermitRootLogin prohibit-password\n"
    "PasswordAuthentication no\n"
    "KbdInteractiveAuthentication no\n"
    "UseDNS no\n"
    "MaxStartups 64:30:128\n"
    "MaxSessions 64\n"
)
HOST_KEY = "etc/ssh/ssh_host_ed25519_key"  # the one host key of a lab host (SSHD_CONFIG names only it)


# ---- files written into each host ---------------------------------------------------------------------------

def render_etc_hosts(spec: LabSpec) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             f"{spec.control_address}\t{CONTROL_NAME}"]
    lines += [f"{h.address}\t{h.name}" for h in spec.hosts]
    return "\n".join(lines) + "\n"


def render_network(host: LabHost, spec: LabSpec) -> str:
    """systemd-networkd file for host0 (the container end of the veth): a static address that survives a cut.

    No gateway: the lab is air-gapped, anything off the bridge fails at once with "Network is unreachable".
    """
    return _network_file("host0", f"{host.address}/{spec.network.prefixlen}", "a static address on the lab bridge")


def render_front_network(host: LabHost, spec: LabSpec) -> str:
    """networkd file for a bastion's front0 (its leg on the front bridge, where the control machine is)."""
    assert host.front_address is not None and spec.front_subnet is not None
    prefix = spec.front_subnet.split("/")[1]
    return _network_file("front0", f"{host.front_address}/{prefix}", "the bastion's address on the front bridge")


def _network_file(interface: str, address: str, what: str) -> str:
    return (
        f"# Written by lab: {what}.\n"
        f"[Match]\nName={interface}\n\n"
        "[Link]\nRequiredForOnline=yes\n\n"
        "[Network]\n"
        f"Address={address}\n"
        "LinkLocalAddressing=no\nIPv6AcceptRA=no\n"
        "ConfigureWithoutCarrier=yes\nIgnoreCarrierLoss=yes\n"
    )


def render_sshd_delay(seconds: int) -> str:
    """A drop-in for ssh.service: sshd listens `seconds` after boot (a cloud instance still booting)."""
    return f"# Written by lab: sshd starts late.\n[Service]\nExecStartPre=/bin/sleep {seconds}\n"


def render_sudoers(user: str) -> str:
    return f"# Written by lab: a cloud image's login user.\n{user} ALL=(ALL) NOPASSWD:ALL\n"


# ---- files written for the control machine -------------------------------------------------------------------

def render_hosts_file(spec: LabSpec, private_key: str, host_keys: Mapping[str, str] | None = None,
                      isolated: bool = False) -> str:
    """The on-prem host file for the inventory's static source (TFCLUSTER_SOURCE=static, TFCLUSTER_HOSTS_FILE).

    Format of inventory/onprem.example.yml, with each host's `host_keys` (what a user copies from the host's
    /etc/ssh/ssh_host_*_key.pub), and, for an isolated lab, the `bastion` the hosts are reached through. The static
    source accepts no key path, so Ansible gets the private key from ANSIBLE_PRIVATE_KEY_FILE
    (``Lab.inventory_env()``); the comment names it for a reader. Hand-written YAML (every value is a checked
    name, address, number or key) so the tool needs no PyYAML.
    """
    keys = host_keys or {}
    lines = [
        f"# On-prem host file written by lab for lab {spec.name!r}; `python -m lab down` removes it.",
        f"# SSH key: ANSIBLE_PRIVATE_KEY_FILE={private_key}  (`python -m lab env --name {spec.name}`)",
        f"cluster_name: {cluster_name(spec)}",
    ]
    bastion = spec.bastion
    if isolated and bastion is not None:
        lines += ["bastion:", f"  address: {bastion.front_address}", f"  user: {SSH_USER}", f"  port: {SSH_PORT}"]
        lines += _keys_lines(keys.get(bastion.name), "  ")
    lines.append("hosts:")
    for h in spec.members:
        lines += [
            f"  - name: {h.name}",
            f"    address: {h.address}",
            f"    ssh_user: {SSH_USER}",
            f"    ssh_port: {SSH_PORT}",
            f"    task_type: {h.task_type}",
            f"    task_index: {h.index}",
            f"    port: {h.port}",
            f"    gpus: {h.gpus}",
        ]
        lines += _keys_lines(keys.get(h.name), "    ")
    return "\n".join(lines) + "\n"


def cluster_name(spec: LabSpec) -> str:
    """The host file's cluster name: `lab-` + the lab's name (a cluster name has 3 to 32 characters)."""
    return f"lab-{spec.name}"


def _keys_lines(key: str | None, indent: str) -> list[str]:
    return [f"{indent}host_keys:", f'{indent}  - "{" ".join(key.split()[:2])}"'] if key else []


def render_ssh_config(spec: LabSpec, private_key: str, known_hosts: str, isolated: bool = False) -> str:
    """``ssh -F FILE HOST`` reaches a lab host by name, as root with the lab's key, with strict host key checking
    against the lab's known_hosts; the bastion by its front address; in an isolated lab the others through it."""
    blocks = [f"# ssh config written by lab for lab {spec.name!r}"]
    bastion = spec.bastion
    for h in spec.hosts:
        address = h.front_address if h is bastion else h.address
        names = " ".join(dict.fromkeys([h.name, h.address, address or h.address]))
        jump = f"  ProxyJump {bastion.name}\n" if isolated and bastion is not None and h is not bastion else ""
        blocks.append(
            f"Host {names}\n"
            f"  HostName {address}\n"
            f"{jump}"
            f"  User {SSH_USER}\n"
            f"  Port {SSH_PORT}\n"
            f"  IdentityFile {private_key}\n"
            "  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking yes\n"
            f"  UserKnownHostsFile {known_hosts}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  ConnectTimeout 5\n"
            "  ServerAliveInterval 5\n"
            "  ServerAliveCountMax 3\n"
            "  BatchMode yes\n"
            "  LogLevel ERROR"
        )
    return "\n\n".join(blocks) + "\n"


def render_known_hosts(entries: Iterable[tuple[LabHost, str]]) -> str:
    """``known_hosts`` lines from each host's public host key (``"ssh-ed25519 AAAA... comment"``): the host by
    name and address, a bastion by its front address too."""
    lines = []
    for host, public_key in entries:
        kind, blob = public_key.split()[:2]
        names = ",".join(dict.fromkeys(n for n in (host.name, host.address, host.front_address) if n))
        lines.append(f"{names} {kind} {blob}")
    return "\n".join(lines) + "\n"
