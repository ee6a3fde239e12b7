"""Each cluster's own SSH known_hosts file: where it lives, how it is filled, and its removal on destroy.

    path_for(cluster_name)                  .cache/tfcluster/known_hosts/<cluster_name> in this checkout
    keys_in_console(text)                   host keys cloud-init printed between the SSH HOST KEY KEYS markers
    fetch_console_keys(ec2, {addr: id})     poll GetConsoleOutput until every instance printed its keys (bounded)
    user_entries(address, port)             a host's lines in the user's own known_hosts (a bastion they use)
    read(path)                              {address: keys} of the cluster's file as it is
    carried_keys(known, before, after)      the keys trusted for each instance, at its new address (make start)
    write(path, {addr: keys}) / remove(path)

On AWS, `make provision` fills the file from each instance's console output, keyed by the address Ansible uses
(public or private IP by the connect mode, `[addr]:port` off port 22), plus the bastion's lines from the user's own
known_hosts. A host key lives on the instance's disk and survives a stop and start, while cloud-init prints it on the
first boot only: an instance the file already trusted (the same instance id, maybe at a new public address after a
start) keeps its keys (`carried_keys`), by instance id, never by address alone. The `tfcluster` command then sets
TFCLUSTER_KNOWN_HOSTS to it, and the inventory passes
`-o UserKnownHostsFile=<file> -o StrictHostKeyChecking=yes` to every ssh (TFCLUSTER_HOST_KEY_CHECKING=accept-new is
the documented minimum when no console output is to be had: trust on first use). A changed key then stops the run
naming the host. `make destroy` removes the file. On-prem the file comes from the host file's `host_keys`
(tfcluster.inventory.build.render_known_hosts); the lab writes its hosts' keys there like a host file would.

Environment: TFCLUSTER_HOST_KEY_TIMEOUT (seconds to wait for console output, default 600),
TFCLUSTER_USER_KNOWN_HOSTS (the user's known_hosts, default ~/.ssh/known_hosts).
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tfcluster.core.contract import name_problem
from tfcluster.core.files import atomic_write_text
from tfcluster.core.paths import REPO_ROOT
from tfcluster.core.sshkeys import KEY_TYPES, KnownHostsLineError, checked_pattern, key_problem, known_hosts_line

LOG = logging.getLogger("known_hosts")
BEGIN = "-----BEGIN SSH HOST KEY KEYS-----"
END = "-----END SSH HOST KEY KEYS-----"
_KEY = re.compile(r"(?P<type>" + "|".join(re.escape(t) for t in KEY_TYPES) + r")\s+(?P<blob>[A-Za-z0-9+/]+={0,2})")
DEFAULT_TIMEOUT = 600.0  # real instances print their keys 1-4 minutes after "running"
ROOT = REPO_ROOT


class KnownHostsError(RuntimeError):
    """Host keys could not be had; the message names the hosts and the fix."""


def path_for(cluster_name: str, root: Path | None = None) -> Path:
    """The cluster's known_hosts file (the `tfcluster` command exports it as TFCLUSTER_KNOWN_HOSTS)."""
    problem = name_problem("cluster", cluster_name)
    if problem:
        raise KnownHostsError(str(problem))
    return (root or ROOT) / ".cache" / "tfcluster" / "known_hosts" / cluster_name


def keys_in_console(text: str) -> list[str]:
    """`TYPE BASE64` of each host key in the last complete BEGIN/END SSH HOST KEY KEYS block of a console log.

    Console lines may carry prefixes (timestamps, `ec2:`); the fingerprints block is ignored; a block that has not
    ended yet (still being printed) gives nothing."""
    start = text.rfind(BEGIN)
    end = text.find(END, start) if start >= 0 else -1
    if start < 0 or end < 0:
        return []
    keys = []
    for match in _KEY.finditer(text[start + len(BEGIN):end]):
        if key_problem("console", f"{match['type']} {match['blob']}") is None:
            keys.append(f"{match['type']} {match['blob']}")
    return list(dict.fromkeys(keys))


def _ready_port(address: str, pattern: str) -> int | None:
    """The SSH port a ready line's pattern names for ``address`` (None: 22); raises for any other pattern."""
    if pattern == address:
        return None
    prefix = f"[{address}]:"
    if pattern.startswith(prefix) and re.fullmatch(r"[0-9]{1,5}", pattern[len(prefix):]):
        return int(pattern[len(prefix):])
    raise KnownHostsError(f"known_hosts entry of {address!r}: the line's host {pattern!r} is not {address!r} or "
                          f"[{address}]:PORT. Fix: give that address's keys as `TYPE BASE64` (or `user_entries` lines)")


def _line(address: str, port: int, item: str) -> str:
    """One entry (`TYPE BASE64`, or a ready `PATTERN TYPE BASE64` line of this address) rebuilt by the checked line
    builder: the pattern comes from the address, never from the text."""
    words = item.split(None, 1) if isinstance(item, str) else []
    try:
        if words and words[0] not in KEY_TYPES and len(words) == 2:
            return known_hosts_line(address, _ready_port(address, words[0]), words[1])
        return known_hosts_line(address, port, item)
    except KnownHostsLineError as exc:
        raise KnownHostsError(f"known_hosts entry of {address!r}: {exc}") from exc


def render(entries: Mapping[str, Sequence[str]], port: int = 22) -> str:
    """known_hosts lines: one per (address, key), sorted by address; entries map address -> `TYPE BASE64` keys (at
    `port`) or ready lines of that address at any port (`user_entries`). Every line is built by
    tfcluster.core.sshkeys.known_hosts_line (`PATTERN TYPE BASE64`, each part checked); an address, port or key that
    would not fit raises KnownHostsError and nothing is written."""
    lines = [_line(address, port, item) for address in sorted(entries) for item in entries[address]]
    return "".join(f"{line}\n" for line in dict.fromkeys(lines))


def _address_of(pattern: str) -> str:
    """The address of a line's host pattern: ``addr`` or ``[addr]:port``."""
    if pattern.startswith("[") and "]:" in pattern:
        return pattern[1:pattern.index("]:")]
    return pattern


def read(path: Path) -> dict[str, list[str]]:
    """{address: entries} of the cluster's own file (written by :func:`write`): ``TYPE BASE64`` for a host at port
    22, the whole line for any other port (a bastion's). {} when there is none; a line that is not one the builder
    writes raises KnownHostsError naming the file and the fix."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    found: dict[str, list[str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) != 3:
            raise KnownHostsError(f"{path}:{number} is not a `PATTERN TYPE BASE64` line. Fix: `make provision` "
                                  "writes the file again (the keys from the console output)")
        address = _address_of(words[0])
        entry = " ".join(words[1:]) if words[0] == address else line.strip()
        _line(address, 22, entry)  # checked by the same builder as every line written
        found.setdefault(address, []).append(entry)
    return found


def carried_keys(known: Mapping[str, Sequence[str]], before: Mapping[str, str],
                 after: Mapping[str, str]) -> dict[str, list[str]]:
    """{address now: the keys trusted for that instance}: for each instance of ``after`` ({address: instance id})
    that ``before`` held (by instance id, at whatever address) with keys in ``known`` (:func:`read`). A new
    instance id never inherits keys, whatever its address."""
    address_of = {iid: address for address, iid in before.items()}
    carried: dict[str, list[str]] = {}
    for address, iid in after.items():
        old = address_of.get(iid)
        keys = [k for k in known.get(old, []) if k.split()[0] in KEY_TYPES] if old is not None else []
        if keys:
            carried[address] = keys
    return carried


def write(path: Path, entries: Mapping[str, Sequence[str]], port: int = 22) -> Path:
    """Replace the cluster's file with these entries (0600; the directory 0700). Keys checked like a host file's."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_text(path, render(entries, port), mode=0o600)
    return path


def remove(path: Path) -> bool:
    """Remove the cluster's file (destroy); returns whether there was one."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def console_text(ec2: Any, instance_id: str) -> str:
    """The instance's console output (the latest on Nitro types; the buffered one elsewhere), decoded."""
    from botocore.exceptions import ClientError

    try:
        reply = ec2.get_console_output(InstanceId=instance_id, Latest=True)
    except ClientError:  # Latest is Nitro-only
        reply = ec2.get_console_output(InstanceId=instance_id)
    output = reply.get("Output") or ""
    try:
        return base64.b64decode(output).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return output  # some endpoints hand it back decoded


def fetch_console_keys(ec2: Any, instances: Mapping[str, str], *, timeout: float | None = None, interval: float = 10.0,
                       clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> tuple[dict[str, list[str]], list[str]]:
    """Poll GetConsoleOutput of {address: instance id} until each printed its host keys or `timeout` passes.

    Returns ({address: keys}, [addresses still without keys])."""
    timeout = float(os.environ.get("TFCLUSTER_HOST_KEY_TIMEOUT", DEFAULT_TIMEOUT)) if timeout is None else timeout
    deadline = clock() + timeout
    found: dict[str, list[str]] = {}
    while True:
        for address, instance_id in instances.items():
            if address not in found:
                keys = keys_in_console(console_text(ec2, instance_id))
                if keys:
                    found[address] = keys
        missing = [a for a in instances if a not in found]
        if not missing or clock() >= deadline:
            return found, missing
        LOG.info("waiting for the host keys of %d instance(s) in their console output (%.0f s left)", len(missing),
                 max(0.0, deadline - clock()))
        sleep(min(interval, max(0.1, deadline - clock())))


def user_known_hosts() -> Path:
    return Path(os.environ.get("TFCLUSTER_USER_KNOWN_HOSTS") or Path.home() / ".ssh" / "known_hosts")


def user_entries(address: str, port: int = 22, files: Iterable[Path] | None = None) -> list[str]:
    """The keys of `address` (at `port`) in the user's own known_hosts (`ssh-keygen -F`: hashed names and patterns
    that match it included) as lines of the checked builder, the pattern rebuilt from the address: a hashed `|1|`
    name, a wildcard or a host list is never copied; `@cert-authority` lines are dropped (they trust every host a CA
    signed, not this host's key), `@revoked` keys taken out, keys of another type or shape dropped."""
    try:
        pattern = checked_pattern(address, port, "bastion")
    except KnownHostsLineError as exc:
        raise KnownHostsError(str(exc)) from exc
    keys: list[str] = []
    revoked: set[str] = set()
    for path in files if files is not None else [user_known_hosts()]:
        if not path.is_file():
            continue
        found = subprocess.run(["ssh-keygen", "-F", pattern, "-f", str(path)],
                               capture_output=True, text=True, check=False)
        for line in found.stdout.splitlines():
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            if words[0] == "@revoked":
                revoked.add(" ".join(words[2:4]))
            elif not words[0].startswith("@"):
                keys.append(" ".join(words[1:3]))
    out = []
    for key in dict.fromkeys(keys):
        if key in revoked:
            continue
        try:
            out.append(known_hosts_line(address, port, key))
        except KnownHostsLineError:
            LOG.info("%r: a key of %s in the user's known_hosts is not one the cluster's file takes; skipped", key,
                     address)
    return out
