"""What a compromised host or a hostile training script may write into a status field, a log line, an exception or
metrics.json, with what the operator's terminal must show instead (tfcluster/core/text.py); shared by the printers'
tests."""

from __future__ import annotations

from tfcluster.core import text

PAYLOADS = {
    "csi": ("\x1b[2J\x1b[31mred\x1b[0m", "\\x1b[2J\\x1b[31mred\\x1b[0m"),
    "osc52": ("\x1b]52;c;cm0gLXJmIH4=\x07", "\\x1b]52;c;cm0gLXJmIH4=\\x07"),
    "cr": ("ok\rFAKE", "ok\\rFAKE"),
    "backspace": ("abc\x08\x08X", "abc\\x08\\x08X"),
    "c1_csi": ("\x9b2J", "\\x9b2J"),
    "bidi": ("invoice\u202efdp.exe", "invoice\\u202efdp.exe"),
    "isolate": ("a\u2066b\u2069", "a\\u2066b\\u2069"),
    "del_nul": ("x\x7f\x00", "x\\x7f\\x00"),
    "surrogate": ("\ud800", "\\ud800"),
    "newline": ("one\ntwo", "one\\ntwo"),
}
RAW_SHOWN = list(PAYLOADS.values())
IDS = list(PAYLOADS.keys())


def assert_clean(lines: list[str] | str) -> None:
    """No character a terminal would obey (tab included: it is shown as a space)."""
    for line in [lines] if isinstance(lines, str) else lines:
        bad = [char for char in line if ord(char) in text.SHOWN]
        assert not bad, f"{line!r} holds {bad!r}"
