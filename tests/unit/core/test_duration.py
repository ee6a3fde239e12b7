"""IDLE, MAX_DURATION and TTL values: accepted forms, refusals (with the accepted forms), formatting, expiry time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from tfcluster.core.duration import (
    IDLE,
    MAX_DURATION,
    TTL,
    DurationError,
    SettingError,
    autostop_vars,
    expires_at,
    format_duration,
    parse_duration,
    parse_settings,
    parse_time,
)


@pytest.mark.parametrize(("value", "kind", "seconds"), [
    ("90s", MAX_DURATION, 90),
    ("30m", IDLE, 1800),
    ("4h", MAX_DURATION, 14400),
    ("2d", TTL, 172800),
    ("1h30m", IDLE, 5400),
    ("1d12h", TTL, 129600),
    ("1d2h3m4s", MAX_DURATION, 93784),
    (" 4H ", MAX_DURATION, 14400),  # case and surrounding blanks do not matter
    ("10", IDLE, 600),  # IDLE alone takes bare minutes: make autostop IDLE=10
    (10, IDLE, 600),
    ("1m", IDLE, 60),  # the smallest IDLE: the timer checks once a minute
    ("off", IDLE, None),
    ("OFF", MAX_DURATION, None),
    ("none", TTL, None),
    ("never", TTL, None),
    ("365d", TTL, 365 * 86400),
])
def test_accepted(value: object, kind: object, seconds: int | None) -> None:
    assert parse_duration(value, kind) == seconds


@pytest.mark.parametrize(("value", "kind", "says"), [
    ("4", MAX_DURATION, "a bare number has no unit for MAX_DURATION: write e.g. 4h or 4m"),
    ("24", TTL, "a bare number has no unit for TTL"),
    ("0", MAX_DURATION, "0 is ambiguous: write off"),
    ("0", IDLE, "is 0s, outside 1m..365d"),
    ("30s", IDLE, "is 30s, outside 1m..365d"),
    ("30", TTL, "a bare number has no unit"),
    ("400d", TTL, "outside 1m..365d"),
    ("1.5h", MAX_DURATION, "is not a duration"),
    ("-5m", IDLE, "is not a duration"),
    ("30m1h", IDLE, "is not a duration"),  # parts largest first
    ("1h1h", IDLE, "is not a duration"),  # each unit once
    ("1w", TTL, "is not a duration"),
    ("4 h", MAX_DURATION, "is not a duration"),
    ("", IDLE, "is not a duration"),
    (None, IDLE, "is not a duration"),
    (True, IDLE, "is not a duration"),
    ("30min", IDLE, "is not a duration"),
])
def test_refused_with_the_accepted_forms(value: object, kind: object, says: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(value, kind)
    text = str(caught.value)
    assert says in text
    name = kind.name  # type: ignore[attr-defined]
    assert text.startswith(f"{name}: ")
    assert "e.g." in text and ("90s" in text or "=" in text)  # the fix shows accepted forms or an example


@pytest.mark.parametrize(("value", "kind"), [
    ("\u00b2", IDLE),  # superscript two: str.isdigit() says yes, int() raises
    ("\u00b2", MAX_DURATION),
    ("\u0663", IDLE),  # Arabic-Indic three: int() would read 3
    ("\u0663m", IDLE),
    ("1\u00b2h", TTL),
    ("\uff15m", MAX_DURATION),  # fullwidth five
])
def test_only_ascii_digits_are_numbers(value: str, kind: object) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(value, kind)
    assert caught.value.problem.fix.startswith("give the ") and "e.g. 90s" in caught.value.problem.fix


def test_message_lists_every_form() -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration("soon", IDLE)
    fix = caught.value.problem.fix
    for form in ("90s", "30m", "4h", "2d", "1h30m", "bare number of minutes", "off"):
        assert form in fix
    with pytest.raises(DurationError) as caught:
        parse_duration("soon", MAX_DURATION)
    assert "bare number" not in caught.value.problem.fix


def test_kind_by_name() -> None:
    assert parse_duration("2h", "TTL") == 7200
    with pytest.raises(KeyError):
        parse_duration("2h", "NOPE")


def test_parse_settings_refuses_all_bad_values_at_once() -> None:
    assert parse_settings({"IDLE": "10", "TTL": "2d", "MAX_DURATION": "off"}) == {
        "IDLE": 600, "TTL": 172800, "MAX_DURATION": None}
    with pytest.raises(DurationError) as caught:
        parse_settings({"IDLE": "soon", "TTL": "2d", "MAX_DURATION": "4"})
    assert caught.value.problem.field == "IDLE, MAX_DURATION"
    assert "'soon'" in str(caught.value) and "'4'" in str(caught.value)


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "off"), (0, "0s"), (45, "45s"), (60, "1m"), (5400, "1h30m"), (90061, "1d1h"), (86400 + 300, "1d"),
    (3 * 86400, "3d"), (-5, "0s"), (59.9, "59s"),
])
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text", ["45s", "1m30s", "30m", "4h", "2d", "1h30m", "1d12h"])
def test_format_parses_back(text: str) -> None:
    assert format_duration(parse_duration(text, MAX_DURATION)) == text


def test_expires_at() -> None:
    now = datetime(2026, 1, 31, 11, 30, 15, 999, tzinfo=UTC)
    assert expires_at(24 * 3600, now) == "2026-02-01T11:30:15Z"
    assert expires_at(None, now) is None
    local = datetime(2026, 1, 31, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    assert expires_at(60, local) == "2026-01-31T10:01:00Z"
    assert parse_time(expires_at(3600, now)) == datetime(2026, 1, 31, 12, 30, 15, tzinfo=UTC)


@pytest.mark.parametrize(("text", "moment"), [
    ("2026-02-01T11:30:15Z", datetime(2026, 2, 1, 11, 30, 15, tzinfo=UTC)),
    ("2026-02-01T13:30:15+02:00", datetime(2026, 2, 1, 11, 30, 15, tzinfo=UTC)),
    ("2026-02-01T11:30:15", datetime(2026, 2, 1, 11, 30, 15, tzinfo=UTC)),
    ("tomorrow", None), ("", None), (None, None), (123, None),
])
def test_parse_time(text: object, moment: datetime | None) -> None:
    assert parse_time(text) == moment


@pytest.mark.parametrize(("idle", "mode", "expected"), [
    ("10", None, {"autostop_enabled": True, "autostop_idle_minutes": 10, "autostop_mode": "jobs"}),
    ("90s", "jobs_and_ssh", {"autostop_enabled": True, "autostop_idle_minutes": 2, "autostop_mode": "jobs_and_ssh"}),
    ("1h", "", {"autostop_enabled": True, "autostop_idle_minutes": 60, "autostop_mode": "jobs"}),
    ("off", None, {"autostop_enabled": False, "autostop_mode": "jobs"}),
])
def test_autostop_vars(idle: str, mode: str | None, expected: dict[str, object]) -> None:
    assert autostop_vars(idle, mode) == expected


@pytest.mark.parametrize(("idle", "mode", "field", "says"), [
    (None, None, "IDLE", "is not given"),
    ("  ", None, "IDLE", "is not given"),
    ("10x", None, "IDLE", "is not a duration"),
    ("10", "ssh", "MODE", "'ssh' is not an autostop mode"),
])
def test_autostop_vars_refused(idle: object, mode: object, field: str, says: str) -> None:
    with pytest.raises(SettingError) as caught:
        autostop_vars(idle, mode)
    assert caught.value.problem.field == field
    assert says in caught.value.problem.message
