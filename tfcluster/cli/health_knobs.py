"""The job-health knobs of `make train` and `make wait` (docs/jobs.md "Job health"), checked like every setting:

    STRAGGLER=15%        a task this far under the others' pace is named (default), for 2 min (the default)
    STRAGGLER=25%,5m     ... 25 % under, for 5 minutes;  STRAGGLER=off: nobody is named
    HANG=10              no task steps for 10x its usual time between steps: a hang (default); HANG=off: STALL only
    NETCHECK=on|strict|off  the network check before the gang start (on: links are measured and named; strict: a
                         slow link refuses to start)
    RECOVER=N            AWS: a lost host's slot is replaced and the job resumed up to N times (default 1 on spot
                         clusters, else 0)

Each parser returns the value, or None when the knob is not given (the role's default holds), and appends a
Problem naming the knob and the fix otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tfcluster.core.contract import Problem
from tfcluster.core.duration import OFF_WORDS, DurationError, DurationKind, parse_duration

STRAGGLER_FOR = DurationKind("STRAGGLER", "time a task must stay slower before it is named", "STRAGGLER=15%,2m",
                             minimum=10, allow_off=False)
NETCHECK_MODES = ("on", "strict", "off")
_PERCENT = re.compile(r"([0-9]{1,2})\s*%?")
_FACTOR = re.compile(r"[0-9]+(\.[0-9]+)?")


def straggler(env: Mapping[str, str], problems: list[Problem]) -> dict[str, float] | None:
    """STRAGGLER=PCT[%][,DURATION] | off -> {"below": 0.15, "after": 120.0}; off -> below 0."""
    raw = env.get("STRAGGLER", "").strip().lower()
    if not raw:
        return None
    if raw in OFF_WORDS:
        return {"below": 0.0, "after": 120.0}
    percent, _, after = raw.partition(",")
    match = _PERCENT.fullmatch(percent.strip())
    if match is None or not 1 <= int(match.group(1)) <= 90:
        problems.append(Problem("STRAGGLER", f"{raw!r} is not a share below the others' pace",
                                "give a percent from 1 to 90 and optionally a duration, e.g. STRAGGLER=15% or "
                                "STRAGGLER=25%,5m, or STRAGGLER=off"))
        return None
    seconds = 120.0
    if after.strip():
        try:
            seconds = float(parse_duration(after.strip(), STRAGGLER_FOR) or 120)
        except DurationError as exc:
            problems.append(exc.problem)
            return None
    return {"below": int(match.group(1)) / 100, "after": seconds}


def hang(env: Mapping[str, str], problems: list[Problem]) -> float | None:
    """HANG=FACTOR | off -> the factor (0.0 = off)."""
    raw = env.get("HANG", "").strip().lower()
    if not raw:
        return None
    if raw in OFF_WORDS:
        return 0.0
    if not _FACTOR.fullmatch(raw) or not 2 <= float(raw) <= 1000:
        problems.append(Problem("HANG", f"{raw!r} is not a factor of a task's usual time between steps",
                                "give a number from 2 to 1000, e.g. HANG=10, or HANG=off (only STALL then)"))
        return None
    return float(raw)


def netcheck(env: Mapping[str, str], problems: list[Problem]) -> str | None:
    raw = env.get("NETCHECK", "").strip().lower()
    if not raw:
        return None
    if raw not in NETCHECK_MODES:
        problems.append(Problem("NETCHECK", f"{raw!r} is not a network check mode",
                                "NETCHECK=on (measure and name slow links), strict (refuse to start on one) or off"))
        return None
    return raw


def recover(env: Mapping[str, str], problems: list[Problem]) -> int | None:
    raw = env.get("RECOVER", "").strip()
    if not raw:
        return None
    if not re.fullmatch(r"[0-9]{1,2}", raw):
        problems.append(Problem("RECOVER", f"{raw!r} is not a number of recoveries",
                                "give a whole number from 0 to 99, e.g. RECOVER=1 (0: a lost host fails the job)"))
        return None
    return int(raw)
