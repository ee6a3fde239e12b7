"""SSH host keys and known_hosts lines, wherever they enter (a host file's ``host_keys``, an instance's console
output, the user's own known_hosts): checked, and written only as checked lines. Standard library only.

Every known_hosts line the project writes is built by ``known_hosts_line``: exactly ``PATTERN TYPE BASE64``, PATTERN
one checked address (``address`` or ``[address]:port``: never a wildcard, a list, a negation, a hashed name or a
``@cert-authority``/``@revoked`` marker), TYPE one of ``KEY_TYPES``, BASE64 a key blob of that type. A line that
would not fit raises ``KnownHostsLineError`` and is never written. The inventory renders a host file's keys
(``tfcluster.inventory.build.render_known_hosts``); provision renders the instances'
(tfcluster/provision/known_hosts.py).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable

from .addresses import address_problem, port_problem
from .contract import Problem

KEY_TYPES: tuple[str, ...] = (
    "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa",
    "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")  # a tab may separate the parts, nothing else
KEY_FIX = ("give each key as `TYPE BASE64` from the host's /etc/ssh/ssh_host_*_key.pub, e.g. "
           "\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA...\"")


def _blob_type(blob: bytes) -> str | None:
    """The key type written at the start of an SSH public key blob (uint32 length + name), or None."""
    if len(blob) < 4:
        return None
    size = int.from_bytes(blob[:4], "big")
    if size > 64 or len(blob) < 4 + size:
        return None
    try:
        return blob[4:4 + size].decode("ascii")
    except UnicodeDecodeError:
        return None


def key_problem(field: str, value: object) -> Problem | None:
    """None for ``TYPE BASE64 [comment]`` whose base64 decodes to a key blob of that TYPE."""
    parts = value.split() if isinstance(value, str) else []
    if len(parts) < 2 or "{" in parts[0]:
        return Problem(field, f"{value!r} is not a public host key", KEY_FIX)
    if _CONTROL.search(str(value).strip(" \n")):
        return Problem(field, f"{value!r} holds a line break or control character",
                       f"give one key per list item: {KEY_FIX}")
    key_type, data = parts[0], parts[1]
    if key_type not in KEY_TYPES:
        return Problem(field, f"key type {key_type!r} is not an SSH host key type",
                       f"use one of {', '.join(KEY_TYPES)}")
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return Problem(field, f"the {key_type} key is not valid base64", KEY_FIX)
    if _blob_type(blob) != key_type:
        return Problem(field, f"the base64 part is not a {key_type} key", KEY_FIX)
    return None


def parse_host_keys(field: str, value: object) -> tuple[tuple[str, ...], list[Problem]]:
    """Keys as ``TYPE BASE64`` (comments dropped: they never leave the inventory) and the problems found."""
    if value is None:
        return (), []
    if isinstance(value, str) or not isinstance(value, list):
        return (), [Problem(field, f"must be a list of keys, got {type(value).__name__}",
                            "write host_keys: [\"ssh-ed25519 AAAA...\"]")]
    problems = [p for i, key in enumerate(value) if (p := key_problem(f"{field}[{i}]", key))]
    if problems:
        return (), problems
    return tuple(" ".join(str(key).split()[:2]) for key in value), []


class KnownHostsLineError(ValueError):
    """A known_hosts line that would not be ``PATTERN TYPE BASE64``; ``problem`` names the part and the fix."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


_BLOB = r"[A-Za-z0-9+/]+={0,2}"
# The shape of every line written, checked again on the finished text: one plain host or [host]:port, a type, a blob.
_LINE = re.compile(r"(?P<pattern>[A-Za-z0-9_.:-]+|\[[A-Za-z0-9_.:-]+\]:[1-9][0-9]{0,4}) (?P<type>"
                   + "|".join(re.escape(t) for t in KEY_TYPES) + rf") {_BLOB}")


def host_pattern(address: str, ssh_port: int | None) -> str:
    """How known_hosts names a host: the address, or ``[address]:port`` for a port other than 22."""
    return address if ssh_port in (None, 22) else f"[{address}]:{ssh_port}"


def checked_pattern(address: object, port: object, field: str = "known_hosts") -> str:
    """``host_pattern`` of a checked address and SSH port (None: 22); raises KnownHostsLineError naming ``field``."""
    problem = (address_problem(f"{field}.address", address, "give the host's IP address or DNS name")
               or (None if port is None else port_problem(f"{field}.port", port, "give the SSH port in 1..65535")))
    if problem:
        raise KnownHostsLineError(problem)
    return host_pattern(str(address), port)  # type: ignore[arg-type]


def known_hosts_line(address: object, port: object, key: object, field: str = "known_hosts") -> str:
    """``PATTERN TYPE BASE64`` for one key of the host at ``address`` (SSH ``port``, None for 22), every part
    checked (a key's comment is dropped); raises KnownHostsLineError naming ``field`` for anything else."""
    pattern = checked_pattern(address, port, field)
    problem = key_problem(f"{field}.key", key)
    if problem:
        raise KnownHostsLineError(problem)
    key_type, blob = str(key).split()[:2]
    line = f"{pattern} {key_type} {blob}"
    if not _LINE.fullmatch(line):  # not reachable after the checks above; a line that does not fit is never written
        raise KnownHostsLineError(Problem(field, f"{line!r} is not `PATTERN TYPE BASE64`", KEY_FIX))
    return line


def lines(entries: Iterable[tuple[str, int | None, tuple[str, ...]]], field: str = "known_hosts") -> list[str]:
    """One checked line per (address, port, key); raises KnownHostsLineError on the first that does not fit."""
    return [known_hosts_line(address, port, key, field) for address, port, keys in entries for key in keys]


