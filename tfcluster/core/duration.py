"""Durations a user types: IDLE (autostop), MAX_DURATION (job deadline), TTL (cluster expiry), and the wait's STALL
(time without progress) and UNREACHABLE_GRACE (how long a host may stay unreachable from the control machine).

    parse_duration("1h30m", IDLE)        -> 5400
    parse_duration("10", IDLE)           -> 600      (IDLE alone takes bare minutes: `make autostop IDLE=10`)
    parse_duration("off", MAX_DURATION)  -> None     (no deadline)
    parse_duration("4", MAX_DURATION)    -> DurationError: ... a bare number has no unit ...

Accepted forms: one or more ``<whole number><unit>`` parts with the units s, m, h, d, largest first, each at most
once (``90s``, ``30m``, ``4h``, ``2d``, ``1h30m``, ``1d12h``); ``off`` (also ``none``/``never``) for "no limit";
a bare whole number only where the knob names its unit (IDLE: minutes); numbers are digits 0-9. Everything else is
refused with a message that names the variable, the value, and the accepted forms, before anything changes.
Standard library only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from .contract import AUTOSTOP_MODES as MODES
from .contract import Problem

UTC = timezone.utc  # datetime.UTC is Python >= 3.11; the control machine may run 3.10

UNITS: dict[str, int] = {"d": 86400, "h": 3600, "m": 60, "s": 1}
OFF_WORDS: frozenset[str] = frozenset({"off", "none", "never"})
# ASCII digits only: r"\d" and str.isdigit() also take other scripts' digits ('٣') and superscripts ('²').
_NUMBER = re.compile(r"[0-9]+")
_PART = re.compile(r"([0-9]+)([dhms])")
_WHOLE = re.compile(r"(?:[0-9]+[dhms])+")


@dataclass(frozen=True)
class DurationKind:
    """One knob: its name, what a bare number means (None: refused), and the range it accepts."""

    name: str
    what: str
    example: str
    bare_unit: str | None = None
    minimum: int = 1
    maximum: int = 365 * 86400
    allow_off: bool = True

    def forms(self) -> str:
        """The accepted forms, for error messages and help."""
        bare = f", a bare number of {_UNIT_WORDS[self.bare_unit]} (e.g. 10)" if self.bare_unit else ""
        off = ", or off" if self.allow_off else ""
        return (f"a whole number with a unit s, m, h or d, parts largest first (e.g. 90s, 30m, 4h, 2d, 1h30m)"
                f"{bare}{off}; from {format_duration(self.minimum)} to {format_duration(self.maximum)}")


_UNIT_WORDS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}

# The three knobs of the cost guard (issue 12). IDLE is checked every 60 s on a host: less than a minute means
# nothing there.
IDLE = DurationKind("IDLE", "idle time before a host powers itself off", "IDLE=30m", bare_unit="m", minimum=60)
MAX_DURATION = DurationKind("MAX_DURATION", "deadline of every task of the job", "MAX_DURATION=4h")
TTL = DurationKind("TTL", "lifetime of the cluster (the tfcluster:expires tag)", "TTL=24h", minimum=60)
# The wait (issue 21): a stall is checked about every poll (seconds); the grace has no "off" (a host that never comes
# back must end the wait some day), and under a minute would fail a job on an ssh reconnect.
STALL = DurationKind("STALL", "time without progress that stops the job (the built-in trainer: while it trains)",
                     "STALL=20m", minimum=30)
UNREACHABLE_GRACE = DurationKind("UNREACHABLE_GRACE", "time a host may stay unreachable from this machine before "
                                 "the job fails", "UNREACHABLE_GRACE=1h", minimum=60, maximum=7 * 86400,
                                 allow_off=False)
KINDS: dict[str, DurationKind] = {kind.name: kind for kind in (IDLE, MAX_DURATION, TTL, STALL, UNREACHABLE_GRACE)}


class SettingError(ValueError):
    """A setting a user gave is wrong; ``problem`` says where, what and how to fix it."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        super().__init__(str(problem))


class DurationError(SettingError):
    """A value that is not a duration of its kind."""


def _seconds(text: str, kind: DurationKind) -> int | None:
    """Seconds of ``text`` (already stripped and lowercased), or None when it is not a duration at all."""
    if _NUMBER.fullmatch(text) and kind.bare_unit:
        return int(text) * UNITS[kind.bare_unit]
    if not _WHOLE.fullmatch(text):
        return None
    parts = _PART.findall(text)
    order = [list(UNITS).index(unit) for _, unit in parts]
    if order != sorted(set(order)):  # each unit once, largest first: "30m1h" and "1h1h" are typos
        return None
    return sum(int(number) * UNITS[unit] for number, unit in parts)


def parse_duration(value: object, kind: DurationKind | str) -> int | None:
    """Seconds of ``value`` for ``kind`` (a DurationKind or its name), or None for ``off``; DurationError when
    ``value`` is not an accepted form or out of range."""
    kind = KINDS[kind] if isinstance(kind, str) else kind
    text = str(value).strip().lower() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text in OFF_WORDS and kind.allow_off:
        return None
    seconds = _seconds(text, kind) if text else None
    if seconds is None:
        hint = ""
        if text and _NUMBER.fullmatch(text):
            hint = (" (0 is ambiguous: write off for no limit)" if int(text) == 0 else
                    f" (a bare number has no unit for {kind.name}: write e.g. {text}h or {text}m)")
        raise DurationError(Problem(kind.name, f"{value!r} is not a duration{hint}",
                                    f"give the {kind.what} as {kind.forms()}"))
    if not kind.minimum <= seconds <= kind.maximum:
        off = " (or off to turn it off)" if kind.allow_off else ""
        raise DurationError(Problem(kind.name, f"{value!r} is {format_duration(seconds)}, outside "
                                    f"{format_duration(kind.minimum)}..{format_duration(kind.maximum)}",
                                    f"give a duration from {format_duration(kind.minimum)} to "
                                    f"{format_duration(kind.maximum)}{off}, e.g. {kind.example}"))
    return seconds


def parse_settings(values: dict[str, object]) -> dict[str, int | None]:
    """Parse several knobs at once (``{"IDLE": "10", "TTL": "2d"}``); raise one DurationError per call naming every
    bad value, so nothing changes until all of them are right."""
    parsed: dict[str, int | None] = {}
    problems: list[Problem] = []
    for name, value in values.items():
        try:
            parsed[name] = parse_duration(value, name)
        except DurationError as exc:
            problems.append(exc.problem)
    if len(problems) == 1:
        raise DurationError(problems[0])
    if problems:
        raise DurationError(Problem(", ".join(p.field for p in problems),
                                    "; ".join(f"{p.field}: {p.message}" for p in problems),
                                    " | ".join(f"{p.field}: {p.fix}" for p in problems)))
    return parsed


def duration_text(seconds: float) -> str:
    """A duration in a sentence: ``45 s``, ``6 min``, ``4 min 5 s``, ``2.5 h``."""
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    return f"{seconds / 3600:.1f} h"


def format_duration(seconds: float | None) -> str:
    """``5400`` -> ``1h30m``; ``45`` -> ``45s``; ``0`` -> ``0s``; None -> ``off``. At most two parts, rounded down
    (``1d3h``), so listings stay short."""
    if seconds is None:
        return "off"
    left = max(0, int(seconds))
    parts: list[str] = []
    for unit, size in UNITS.items():
        if left >= size and len(parts) < 2:
            parts.append(f"{left // size}{unit}")
            left %= size
        elif parts:  # the second part must be the next unit, or none ("1d5m" would read as a typo)
            break
    return "".join(parts) or "0s"


def expires_at(ttl_seconds: int | None, now: datetime | None = None) -> str | None:
    """The ``tfcluster:expires`` value (RFC 3339 UTC, whole seconds, e.g. ``2025-01-31T12:00:00Z``) of a cluster
    created ``now`` with this TTL; None when the TTL is off."""
    if ttl_seconds is None:
        return None
    start = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    return (start + timedelta(seconds=ttl_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 time (``...Z`` or ``+00:00``; a time without offset counts as UTC), or None when ``text`` is
    not one. For the ``tfcluster:expires`` tag and the autostop status's ``last_active``."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def autostop_vars(idle: object, mode: object = None) -> dict[str, object]:
    """The extra vars of playbooks/autostop.yml for ``make autostop IDLE=... [MODE=...]``: IDLE=off turns autostop
    off; a duration turns it on with that many idle minutes (rounded up: a host never stops earlier than asked).
    MODE (jobs | jobs_and_ssh) defaults to jobs. Raises SettingError before anything changes."""
    if idle is None or (isinstance(idle, str) and not idle.strip()):
        raise DurationError(Problem(IDLE.name, "is not given", f"give {IDLE.forms()}, e.g. make autostop IDLE=30m"))
    mode = mode or MODES[0]
    if mode not in MODES:
        raise SettingError(Problem("MODE", f"{mode!r} is not an autostop mode",
                                   f"use {' or '.join(MODES)} (jobs_and_ssh: an SSH login keeps a host up too)"))
    seconds = parse_duration(idle, IDLE)
    if seconds is None:
        return {"autostop_enabled": False, "autostop_mode": mode}
    return {"autostop_enabled": True, "autostop_idle_minutes": math.ceil(seconds / 60), "autostop_mode": mode}
