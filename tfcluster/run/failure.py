"""What went wrong, from a failed task's log: the Python exception's type and message line, and where in the user's
code it was raised. A pure function over log lines.

A TensorFlow failure often ends its log with a dump of tensors, or Keras's "Detected at node" lines, after the
exception line: the tail of the log then shows numbers, not the error. This finds the last traceback in the log,
its exception line (the first line of the message only) and its last frame outside the Python installation
(site-packages, dist-packages, the standard library): the user's script, or the built-in trainer.

The log is the host's: each field returned is escaped (tfcluster.core.text.printable) and cut to its limit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tfcluster.core.text import printable

TRACEBACK = "Traceback (most recent call last):"
FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
# After a traceback's frames: any "Name: message" line. Elsewhere only names that look like exceptions.
RAISED = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Iteration))"
                       r"(?::\s?(?P<message>.*))?$")
LIBRARY = re.compile(r"(site-packages|dist-packages)/|/lib/python3[.\d]*/|^<frozen ")
MESSAGE_LIMIT = 300  # characters of the exception's message returned
TYPE_LIMIT = 120  # of its type's dotted name
FRAME_LIMIT = 400  # of FILE:LINE in FUNCTION: CODE


def _frames(lines: Sequence[str], start: int) -> tuple[list[dict[str, Any]], int]:
    """The frames after a Traceback header at ``start``, and the index of the first line after them."""
    frames: list[dict[str, Any]] = []
    index = start + 1
    while index < len(lines):
        match = FRAME.match(lines[index])
        if match:
            frame = {"file": match["file"], "line": int(match["line"]), "function": match["func"].strip(), "code": ""}
            nxt = lines[index + 1] if index + 1 < len(lines) else ""
            if nxt.startswith("    ") and not FRAME.match(nxt):
                frame["code"] = nxt.strip()
                index += 1
            frames.append(frame)
        elif not (lines[index].startswith(" ") or not lines[index].strip()):
            break
        index += 1
    return frames, index


def _exception_line(lines: Sequence[str], start: int) -> tuple[str, str] | None:
    for text in lines[start:start + 5]:
        match = RAISED.match(text.strip())
        if match:
            return match["type"], (match["message"] or "").strip()
    return None


def _user_frame(frames: Sequence[dict[str, Any]]) -> str | None:
    for frame in reversed(frames):
        if not LIBRARY.search(frame["file"]):
            where = "{}:{} in {}".format(frame["file"], frame["line"], frame["function"])
            return f"{where}: {frame['code']}" if frame["code"] else where
    return None


def summarize(lines: Sequence[str]) -> dict[str, Any] | None:
    """{type, message, frame} of the last Python exception in ``lines``; None when there is none. ``frame`` is
    ``FILE:LINE in FUNCTION: CODE`` of the last frame in the user's code (None when every frame is a library's)."""
    starts = [i for i, text in enumerate(lines) if text.strip() == TRACEBACK]
    if starts:
        frames, after = _frames(lines, starts[-1])
        found = _exception_line(lines, after)
        if found:
            return _shown(found[0], found[1], _user_frame(frames))
    for text in reversed(lines):  # no traceback in the window: a bare "SomeError: message" line still says a lot
        match = EXCEPTION.match(text.strip())
        if match and match["message"] is not None:
            return _shown(match["type"], match["message"].strip(), None)
    return None


def _shown(kind: str, message: str, frame: str | None) -> dict[str, Any]:
    return {"type": printable(kind, TYPE_LIMIT), "message": printable(message, MESSAGE_LIMIT),
            "frame": None if frame is None else printable(frame, FRAME_LIMIT)}
