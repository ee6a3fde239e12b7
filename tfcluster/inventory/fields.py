"""Checks of single values as they enter the inventory: addresses, ports, counts, names, paths.

Every string the inventory passes to Ansible is checked here against a pattern (names and users through
``tfcluster.core.contract.name_problem``), so none can carry Jinja (``{{ ... }}``), a shell word or a path escape; the
builder also marks every string unsafe (``tfcluster/inventory/build.py``), so Ansible never templates one.
"""

from __future__ import annotations

import re
from pathlib import Path

from tfcluster.core.addresses import is_address, is_int
from tfcluster.core.contract import Problem, is_digits, name_problem

# Characters a path handed to ssh may not hold: ssh expands '%' tokens, '"' and '\' break its quoting.
_PATH_REFUSED = re.compile(r'[%"\\\x00-\x1f\x7f]')




def int_or_text(value: str | None) -> object:
    """Tag or setting text as an int where it is one; otherwise the text itself (so validation names it)."""
    if value is None:
        return None
    text = value.strip()
    return int(text) if is_digits(text) else value










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
