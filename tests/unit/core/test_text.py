"""tfcluster.core.text: host text shown, never obeyed, by the operator's terminal."""

from __future__ import annotations

import io
import sys
import unicodedata

import pytest

from tests.escapes import IDS, RAW_SHOWN, assert_clean
from tfcluster.core.text import FORMAT_RANGES, SHOWN, PrintableWriter, printable, printable_lines


@pytest.mark.parametrize(("raw", "shown"), RAW_SHOWN, ids=IDS)
def test_every_control_character_is_shown_as_its_escape(raw: str, shown: str) -> None:
    assert printable(raw) == shown
    assert printable(printable(raw)) == shown  # idempotent: escaping twice shows the same text
    assert_clean(printable(raw))


@pytest.mark.parametrize(("value", "shown"), [
    ("plain text, ünïcödé, 中文", "plain text, ünïcödé, 中文"),
    ("a\tb", "a b"),
    (12, "12"),
    (None, "None"),
    (b"\x1b[1m\xff", "\\x1b[1m\ufffd"),
    ({"k": "\x1b"}, "{'k': '\\x1b'}"),  # the repr's own escape
])
def test_any_value_becomes_text(value: object, shown: str) -> None:
    assert printable(value) == shown


@pytest.mark.parametrize(("value", "limit", "shown"), [
    ("abcdef", 6, "abcdef"),
    ("abcdefg", 6, "abc..."),
    ("\x1b\x1b\x1b", 8, "\\x1b..."),  # cut between escapes, never inside one
    ("\x1b", 4, "\\x1b"),
    ("abc", 2, ".."),
    ("x" * 10_000_000, 10, "xxxxxxx..."),
])
def test_a_limit_cuts_the_text_and_says_so(value: str, limit: int, shown: str) -> None:
    assert printable(value, limit) == shown
    assert len(printable(value, limit)) <= limit


def test_lines_are_split_escaped_capped_and_the_last_kept() -> None:
    assert printable_lines("a\r\nb\x1b[1A\n\nc\n") == ["a", "b\\x1b[1A", "", "c"]
    assert printable_lines("") == []
    assert printable_lines(["one", "", "two\nthree", 4]) == ["one", "", "two", "three", "4"]
    assert printable_lines([f"line {i}" for i in range(30)], last=3) == ["line 27", "line 28", "line 29"]
    assert printable_lines(["x" * 50], limit=10) == ["xxxxxxx..."]
    assert printable_lines("a\nb", last=0) == []


def test_the_stream_writer_prints_whole_escaped_lines_as_they_come() -> None:
    out = io.StringIO()
    writer = PrintableWriter(out, limit=30)
    writer.write("step 1\r")
    assert out.getvalue() == ""  # a partial line waits for its end
    writer.write("\nlo\x1b]52;c;")
    assert out.getvalue() == "step 1\n"  # CRLF is a line end
    writer.write("Zm9v\x07 gone\n" + "9" * 35)
    writer.close()
    assert out.getvalue().split("\n") == ["step 1", "lo\\x1b]52;c;Zm9v\\x07 gone", "9" * 30, "9" * 5, ""]
    assert_clean(out.getvalue().split("\n"))
    out = io.StringIO()
    writer = PrintableWriter(out, limit=4)
    writer.write("abcdefgh")
    writer.write("\nij\n")
    assert out.getvalue() == "abcd\nefgh\nij\n"  # a line of twice the limit: no empty line after it


@pytest.mark.parametrize(("raw", "shown"), [
    ("a\u200bb", "a\\u200bb"),  # zero-width space
    ("invoice\u202efdp.exe", "invoice\\u202efdp.exe"),  # right-to-left override
    ("x\u2066y", "x\\u2066y"),  # left-to-right isolate
    ("tag\U000e0041\U000e007f", "tag\\U000e0041\\U000e007f"),  # tag characters (hidden text)
    ("\ufeffbom", "\\ufeffbom"),  # byte order mark / zero-width no-break space
    ("soft\u00adhyphen\u2060joiner", "soft\\xadhyphen\\u2060joiner"),
])
def test_every_format_character_is_shown_as_its_escape(raw: str, shown: str) -> None:
    assert printable(raw) == shown
    assert printable(shown) == shown  # the escape is plain ASCII: escaping twice changes nothing
    assert printable_lines(raw + "\n" + raw) == [shown, shown]
    assert_clean(printable(raw))


def test_the_whole_cf_category_of_this_python_is_escaped() -> None:
    """FORMAT_RANGES is a list (no scan at import): it must hold every Cf character the running Python knows."""
    missing = [hex(code) for code in range(sys.maxunicode + 1)
               if unicodedata.category(chr(code)) == "Cf" and code not in SHOWN]
    assert not missing, f"Unicode {unicodedata.unidata_version} has Cf characters not in FORMAT_RANGES: {missing}"
    assert all(unicodedata.category(chr(code)) in {"Cf", "Cn"}
               for low, high in FORMAT_RANGES for code in range(low, high + 1))  # and only format (or unassigned)


def test_a_limit_never_cuts_inside_a_long_escape() -> None:
    assert printable("\U000e0041" * 3, 14) == "\\U000e0041..."
    assert printable("ab\U000e0041", 12) == "ab\\U000e0041"
