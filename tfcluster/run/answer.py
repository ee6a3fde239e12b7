"""A host's status answer as data: any JSON value. :func:`status_problem` says what makes one unusable (not an
object, a state that is not a job state, a field of the wrong type), :func:`poll_problem` why a poll gave no usable
status; :func:`kind` and :func:`shown` put a wrong value into words for a message. Used by the wait's decision
(tfcluster/run/wait.py), the wait plugin and the scheduler's watch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping

from tfcluster.core.contract import JOB_STATES

SHOWN_LIMIT = 60  # characters of a wrong value quoted in a message


def kind(value: object) -> str:
    """A JSON value's type in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, (list, tuple)) else ("a JSON object" if isinstance(value, Mapping)
                                                              else type(value).__name__)


def shown(value: object) -> str:
    """A value as JSON (ASCII only: no control character reaches a terminal), cut to SHOWN_LIMIT characters."""
    try:
        text = json.dumps(value, ensure_ascii=True, sort_keys=True, default=repr)
    except (ValueError, TypeError, RecursionError):
        text = ascii(value)
    return text if len(text) <= SHOWN_LIMIT else text[:SHOWN_LIMIT - 3] + "..."


def number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def lines(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(line, str) for line in value)


# Each field a decision or the view reads: what it must be (besides null).
FIELD_RULES: dict[str, tuple[Callable[[object], bool], str]] = {
    **{key: (number, "a number") for key in ("now", "progress_mtime", "log_mtime", "started_at", "max_duration")},
    **{key: (whole, "a whole number") for key in ("restarts", "exit_code", "pid", "signal")},
    **{key: (lambda v: isinstance(v, str), "a string") for key in ("name", "model_dir", "unit", "progress_error")},
    "progress": (lambda v: isinstance(v, Mapping), "an object"),
    "done": (lambda v: isinstance(v, bool), "true/false"),
    "log_tail": (lines, "a list of strings"),
}


def status_problem(status: object) -> str | None:
    """What makes a host's status answer unusable (None: it is usable): see the module docstring."""
    if not isinstance(status, Mapping):
        return f"the status is {kind(status)}, not a JSON object"
    state = status.get("state")
    if not isinstance(state, str) or state not in JOB_STATES:
        return f"state is {shown(state)}, not a job state ({', '.join(JOB_STATES)})"
    for key, (valid, what) in FIELD_RULES.items():
        value = status.get(key)
        if value is not None and not valid(value):
            return f"{key} is {shown(value)}, not {what} or null"
    return None


def log_lines(status: object) -> list[str]:
    """The log tail of a usable status answer ([] for any other)."""
    if status_problem(status) is not None:
        return []
    return list(status.get("log_tail") or [])  # type: ignore[union-attr]


def poll_problem(poll: object) -> str | None:
    """Why one poll gives no usable status (None: it does)."""
    if not isinstance(poll, Mapping):
        return f"the poll answer is {kind(poll)}, not a JSON object"
    if "status" not in poll or poll["status"] is None:
        error = poll.get("error")
        return (error if isinstance(error, str) else shown(error)) if error else "no answer"
    return status_problem(poll["status"])
