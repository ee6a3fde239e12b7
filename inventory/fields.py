"""Checks of single values as they enter the inventory: addresses, ports, counts, names, paths.

Every string the inventory passes to Ansible is checked here against a pattern (names and users through
``tfcluster.contract.name_problem``), so none can carry Jinja (``{{ ... }}``), a shell word or a path escape; the
builder also marks every string unsafe (``inventory/build.py``), so Ansible never templates one.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from tfcluster.contract import Problem, is_digits, name_problem

# A DNS name or IPv4 address: letters, digits, '-', '_' and dots; no ':' (IPv6 is checked apart), no spaces.
_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?")
# What an IPv6 address is written with (embedded IPv4 included); no '%' zone, which ipaddress would accept with any
# text after it (a newline, quotes, `$()`, `{{ }}`: issue 18).
_IPV6 = re.compile(r"[0-9A-Fa-f:.]{2,45}")
ZONE_FIX = ("give a global or unique-local IPv6 address (or a DNS name) without '%' and a zone: link-local fe80:: "
            "addresses need one and are not supported")
# Characters a path handed to ssh may not hold: ssh expands '%' tokens, '"' and '\' break its quoting.
_PATH_REFUSED = re.compile(r'[%"\\\x00-\x1f\x7f]')


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def int_or_text(value: str | None) -> object:
    """Tag or setting text as an int where it is one; otherwise the text itself (so validation names it)."""
    if value is None:
        return None
    text = value.strip()
    return int(text) if is_digits(text) else value


def is_address(value: object) -> bool:
    """An IPv4/IPv6 address or a DNS name (no port, no spaces, no brackets, no IPv6 zone ``%...``)."""
    if not isinstance(value, str):
        return False
    if ":" in value:
        if not _IPV6.fullmatch(value):
            return False
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            return False
        return True
    return bool(_HOSTNAME.fullmatch(value)) and ".." not in value


def _zoned(value: str) -> bool:
    """An IPv6 address with a zone (``fe80::1%eth0``): what ``ipaddress`` accepts and no address field does."""
    address, sep, _zone = value.partition("%")
    return bool(sep) and ":" in address and is_address(address)


def address_problem(field: str, value: object, fix: str, what: str = "address") -> Problem | None:
    """None for a valid address; else the problem, named ``field``."""
    if is_address(value):
        return None
    if value in (None, ""):
        return Problem(field, f"{what} is missing", fix)
    if isinstance(value, str) and _zoned(value):
        zone = value[value.index("%"):]
        return Problem(field, f"{what} {value!r} holds an IPv6 zone ({zone!r}), which no address field accepts",
                       ZONE_FIX)
    if isinstance(value, str) and ":" in value and not value.startswith("["):
        return Problem(field, f"{what} {value!r} holds a ':' but is not an IPv6 address",
                       "give the port in its own field, and only the IP or DNS name as the address")
    return Problem(field, f"{what} {value!r} is not an IP address or DNS name", fix)


def port_problem(field: str, value: object, fix: str, what: str = "port") -> Problem | None:
    if is_int(value) and 1 <= value <= 65535:  # type: ignore[operator]
        return None
    return Problem(field, f"{what} {value!r} is not a whole number in 1..65535", fix)


def count_problem(field: str, value: object, fix: str, what: str) -> Problem | None:
    if is_int(value) and value >= 0:  # type: ignore[operator]
        return None
    return Problem(field, f"{what} {value!r} is not a whole number >= 0", fix)


def optional_name_problem(kind: str, field: str, value: object) -> Problem | None:
    """contract.name_problem for a value that may be absent (None)."""
    return None if value is None else name_problem(kind, value, field)


def label(prefix: str, *idents: object) -> str:
    """``prefix (IDENT)`` with the first ident that is a valid host name or address, else ``prefix`` alone (an
    invalid value is named by its own problem, not repeated in every label)."""
    for ident in idents:
        if is_address(ident) or (isinstance(ident, str) and name_problem("host", ident) is None):
            return f"{prefix} ({ident})"
    return prefix


def path_problem(field: str, raw: str) -> Problem | None:
    """A file path given to ssh (known_hosts, identity): no '%', quotes, backslashes or control characters."""
    bad = sorted(set(_PATH_REFUSED.findall(raw)))
    if bad:
        return Problem(field, f"{raw!r} holds {', '.join(map(repr, bad))}, which ssh would expand or split",
                       f"use a path without {', '.join(map(repr, bad))}")
    return None


def absolute(raw: str) -> Path:
    """``~`` expanded, made absolute (ssh runs in another directory than the one the user typed in)."""
    return Path(raw).expanduser().absolute()
