"""Checks of the values that name a host on the network, wherever they enter (a host file, EC2 tags, Terraform outputs,
a bastion setting): IPv4/IPv6 addresses and DNS names, never with an IPv6 zone, and ports. Standard library only."""

from __future__ import annotations

import ipaddress
import re

from .contract import Problem

# A DNS name or IPv4 address: letters, digits, '-', '_' and dots; no ':' (IPv6 is checked apart), no spaces.
_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?")

# What an IPv6 address is written with (embedded IPv4 included); no '%' zone, which ipaddress would accept with any
# text after it (a newline, quotes, `$()`, `{{ }}`: issue 18).
_IPV6 = re.compile(r"[0-9A-Fa-f:.]{2,45}")

ZONE_FIX = ("give a global or unique-local IPv6 address (or a DNS name) without '%' and a zone: link-local fe80:: "
            "addresses need one and are not supported")

def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

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
