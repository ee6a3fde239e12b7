"""Host text made safe for the operator's terminal: every control character is shown as an escape, never obeyed.

Whatever a host sends back (status.json fields, log lines, exception text, metrics.json values, the output of a
command run over ssh) may hold terminal controls: ESC/CSI/OSC sequences that move the cursor, clear the screen,
set the window title or write the clipboard (OSC 52), BEL, CR and backspace that overwrite what was printed, and
unicode bidi controls that reorder the text shown. Every printer on the control machine passes such text through
:func:`printable` (one line), :func:`printable_lines` (many lines) or :class:`PrintableWriter` (a stream: `make
logs`); only the view's own cursor codes reach the terminal raw.

Shown escaped: C0 controls (U+0000-U+001F, tab excepted: it becomes a space), DEL, C1 controls (U+0080-U+009F),
every format character (Unicode category Cf: the bidi embeddings, overrides, isolates and marks, zero-width
characters, the byte order mark, the tag characters U+E0000-U+E007F, ...; :data:`FORMAT_RANGES`), the line and
paragraph separators (U+2028, U+2029) and lone surrogates (a JSON ``"\\ud800"``: unprintable). The escape is the
text ``\\x1b``, ``\\u202e``, ``\\U000e0041`` (``\\n`` and ``\\r`` for LF and CR). Applying it twice changes nothing.

Stdlib only, on the ground floor: anything may import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TextIO

MORE = "..."  # ends a text cut at its limit
STREAM_LINE_LIMIT = 8192  # characters of one streamed line; a longer one is broken (a line never held whole)


def _escape(code: int) -> str:
    named = {0x0A: "\\n", 0x0D: "\\r"}
    if code in named:
        return named[code]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


# Unicode category Cf (format characters) as of Unicode 15, inclusive ranges, with the whole Tags block (U+E0000-
# U+E007F). Listed, not scanned (no cost at import); a unit test checks
# that every Cf character of the running Python's unicodedata is here.
FORMAT_RANGES = ((0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F),
                 (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x202A, 0x202E),
                 (0x2060, 0x2064), (0x2066, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
                 (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
                 (0xE0000, 0xE007F))
_FORMAT = [code for low, high in FORMAT_RANGES for code in range(low, high + 1)]
_CONTROLS = [*range(0x00, 0x20), *range(0x7F, 0xA0), *_FORMAT, 0x2028, 0x2029, *range(0xD800, 0xE000)]
SHOWN: dict[int, str] = {code: _escape(code) for code in _CONTROLS} | {ord("\t"): " "}  # for str.translate


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    try:
        return str(value)
    except ValueError:  # an int past Python's digit limit
        return f"<{type(value).__name__}>"


def printable(value: Any, limit: int | None = None) -> str:
    """``value`` as one line of text safe to print: each control character shown as its escape (``\\x1b``), a tab
    as a space; with ``limit``, at most that many characters, a longer text cut and ending in ``...``."""
    text = _text(value)
    cut = limit is not None and len(text) > limit
    if limit is not None:
        text = text[:limit]  # an escape is never shorter than its character: nothing past here can be shown
    shown = text.translate(SHOWN)
    if limit is None or (not cut and len(shown) <= limit):
        return shown
    keep, pieces, size = max(0, limit - len(MORE)), [], 0
    for char in text:  # cut between escapes, never inside one
        piece = SHOWN.get(ord(char), char)
        if size + len(piece) > keep:
            break
        pieces.append(piece)
        size += len(piece)
    return ("".join(pieces) + MORE)[:limit]


def _split(text: str) -> list[str]:
    """The lines of ``text`` (LF or CRLF ends a line; a last line end adds no empty line)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def printable_lines(text: Any, limit: int | None = None, last: int | None = None) -> list[str]:
    """Multi-line host text as printable lines: a string is split at its line ends, a list or tuple gives one line
    per item (an item holding line ends gives several); each line escaped and cut to ``limit`` (:func:`printable`);
    ``last``: only the last so many lines."""
    if isinstance(text, (list, tuple)):
        lines = [line for item in text for line in (_split(_text(item)) or [""])]
    else:
        lines = _split(_text(text))
    if last is not None:
        lines = lines[-last:] if last > 0 else []
    return [printable(line, limit) for line in lines]


class PrintableWriter:
    """A text stream that prints what is written to it onto ``out`` one escaped line at a time (the line end kept,
    a CRLF printed as a newline), flushing after each write: for a host's log that is followed as it grows. A
    partial line waits for its end (or :meth:`close`); one longer than ``limit`` characters is broken there."""

    def __init__(self, out: TextIO, limit: int = STREAM_LINE_LIMIT) -> None:
        self.out = out
        self.limit = max(1, limit)
        self._pending = ""

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + _text(text)).split("\n")
        for line in lines:
            self._emit(line.removesuffix("\r"))
        if len(self._pending) > self.limit:
            whole = (len(self._pending) - 1) // self.limit * self.limit  # keep 1..limit characters for the end
            self._emit(self._pending[:whole])
            self._pending = self._pending[whole:]
        self.out.flush()
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def _emit(self, line: str) -> None:
        """``line`` escaped, in pieces of ``limit`` characters, each ended by a newline."""
        for start in range(0, max(1, len(line)), self.limit):
            self.out.write(printable(line[start:start + self.limit]) + "\n")

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        """Print a last line without its end (the stream ``out`` stays open)."""
        if self._pending:
            self._emit(self._pending.removesuffix("\r"))
            self._pending = ""
        self.out.flush()
