"""How Ansible reaches the hosts: the connect mode, the bastion, and the SSH options the inventory gives Ansible.

Modes (Terraform's ``connect`` output, or ``TFCLUSTER_CONNECT`` for the aws source):
  public   Ansible connects to each host's public IP (its private IP when it has none);
  private  to each host's private IP (a VPN, or a control machine inside the VPC);
  bastion  to each host's private IP through a jump host (``bastion``: address, user, port).
A static host file has no mode: each host's ``address`` is where Ansible connects, optionally through the file's
``bastion``. TF_CONFIG always uses the private IP (peers talk inside the VPC).

SSH options (group var ``ansible_ssh_common_args``): ``TFCLUSTER_KNOWN_HOSTS`` names the cluster's own known_hosts
file and ``TFCLUSTER_HOST_KEY_CHECKING`` (yes | accept-new) how strictly it is used; the jump to a bastion is a
``ProxyCommand`` running ``ssh -W`` with the same known-hosts options (``ProxyJump`` would not pass them on), the key
of ``ANSIBLE_PRIVATE_KEY_FILE`` when set, and ``BatchMode=yes`` so a jump never waits for a password.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfcluster.core.addresses import address_problem, port_problem
from tfcluster.core.contract import CONNECT_MODES, Problem, is_digits
from tfcluster.core.sshkeys import parse_host_keys
from tfcluster.inventory.fields import optional_name_problem
from tfcluster.inventory.model import Access, Bastion

HOST_KEY_CHECKING: tuple[str, ...] = ("yes", "accept-new")
BASTION_KEYS = frozenset({"address", "user", "port"})
_SSH_PLAIN = re.compile(r"[A-Za-z0-9_./+@,=~:-]+")  # an ssh option value that needs no quotes
_BASTION_TEXT = re.compile(r"(?:(?P<user>[^@]*)@)?(?P<host>\[[^\]]*\]|[^:\[\]]*)(?::(?P<port>.*))?")


@dataclass(frozen=True)
class SshTrust:
    """Host-key settings: the known_hosts file, how strictly it is checked, the key the jump host gets."""

    known_hosts: Path | None = None
    checking: str | None = None
    identity: Path | None = None

    def options(self) -> list[str]:
        """``-o`` options for one ssh command: UserKnownHostsFile and StrictHostKeyChecking where set."""
        out: list[str] = []
        if self.known_hosts is not None:
            out += ["-o", f"UserKnownHostsFile={_ssh_path(self.known_hosts)}"]
        if self.checking is not None:
            out += ["-o", f"StrictHostKeyChecking={self.checking}"]
        return out


NO_TRUST = SshTrust()  # no host-key options: Ansible's own settings apply


def _ssh_path(path: Path) -> str:
    """A path as an ssh option value, double-quoted unless plain (ssh splits option values on spaces and quotes)."""
    text = str(path)
    return text if _SSH_PLAIN.fullmatch(text) else f'"{text}"'


def jump_command(bastion: Bastion, trust: SshTrust) -> list[str]:
    """The argv of the ssh that carries each connection through the bastion (the ProxyCommand)."""
    argv = ["ssh", *trust.options(), "-o", "BatchMode=yes"]
    if trust.identity is not None:
        argv += ["-i", str(trust.identity)]
    target = f"{bastion.user}@{bastion.address}" if bastion.user else bastion.address
    return [*argv, "-W", "[%h]:%p", "-p", str(bastion.port), target]


def ssh_args(access: Access, trust: SshTrust) -> list[str]:
    """Every option Ansible's ssh gets from the inventory (empty: none to give)."""
    args = trust.options()
    if access.bastion is not None:
        args += ["-o", f"ProxyCommand={shlex.join(jump_command(access.bastion, trust))}"]
    return args


def parse_bastion(field: str, value: object, with_keys: bool = False) -> tuple[Bastion | None, list[Problem]]:
    """A bastion from ``{address, user, port}`` (plus ``host_keys`` in a host file); None when ``value`` is None."""
    if value is None:
        return None, []
    keys = BASTION_KEYS | {"host_keys"} if with_keys else BASTION_KEYS
    if not isinstance(value, Mapping):
        return None, [Problem(field, f"must be a mapping with {', '.join(sorted(keys))}, got "
                              f"{type(value).__name__}", "write e.g. bastion: {address: 203.0.113.5, user: ubuntu}")]
    problems = [Problem(f"{field}.{key}", "unknown field", f"use only {', '.join(sorted(keys))}")
                for key in sorted(set(value) - keys, key=str)]
    port = 22 if value.get("port") is None else value["port"]
    host_keys, key_problems = parse_host_keys(f"{field}.host_keys", value.get("host_keys"))
    found = [address_problem(f"{field}.address", value.get("address"), "give the jump host's IP or DNS name"),
             optional_name_problem("ssh_user", f"{field}.user", value.get("user")),
             port_problem(f"{field}.port", port, "give the jump host's SSH port in 1..65535, or leave it out for 22")]
    problems += [p for p in found if p] + key_problems
    if problems:
        return None, problems
    return Bastion(address=value["address"], port=port, user=value.get("user"), host_keys=host_keys), []


def parse_bastion_text(field: str, raw: str) -> tuple[Bastion | None, list[Problem]]:
    """``[user@]host[:port]`` (an IPv6 host in brackets) as a bastion."""
    match = _BASTION_TEXT.fullmatch(raw.strip())
    if not match:
        return None, [Problem(field, f"{raw!r} is not [user@]host[:port]",
                              f"write e.g. {field}=ubuntu@203.0.113.5 or {field}=ubuntu@[2001:db8::5]:2200")]
    host = match.group("host").removeprefix("[").removesuffix("]")
    port: Any = match.group("port")
    if port is not None:
        port = int(port) if is_digits(port) else port
    return parse_bastion(field, {"address": host, "user": match.group("user"), "port": port})


def resolve_access(mode: object, field: str, bastion: Bastion | None, bastion_fix: str) -> tuple[Access, list[Problem]]:
    """The access of a cloud source; a bastion mode without a bastion is a problem naming ``bastion_fix``."""
    if mode not in CONNECT_MODES:
        return Access(), [Problem(field, f"unknown connect mode {mode!r}", f"use one of {', '.join(CONNECT_MODES)}")]
    if mode == "bastion" and bastion is None:
        return Access(mode="bastion"), [Problem(field, "is bastion, but no bastion (jump host) is given", bastion_fix)]
    return Access(mode=str(mode), bastion=bastion if mode == "bastion" else None), []


def pick_addresses(mode: str, public_ip: object, private_ip: object, setting: str) -> dict[str, Any]:
    """HostSpec fields for a cloud host: where Ansible connects (per mode) and the TF_CONFIG address (private).

    ``setting`` names where the mode was chosen, for the fix of a host without the address that mode needs.
    """
    public_ip, private_ip = public_ip or None, private_ip or None
    tf_address = private_ip or public_ip
    out: dict[str, Any] = {"tf_address_field": "private_ip" if private_ip else "public_ip"}
    if mode == "public":
        out.update(address=public_ip or private_ip, address_field="public_ip" if public_ip else "private_ip",
                   address_fix="give the instance a public IP (or a private one)")
    else:
        out.update(address=private_ip, address_field="private_ip",
                   address_fix=f"{setting}={mode} reaches hosts by their private IP: give every host one, or choose "
                               f"{setting}=public")
    out["tf_address"] = None if tf_address == out["address"] else tf_address  # one value is checked once
    return out


