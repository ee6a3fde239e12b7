"""`make status`'s AUTOSTOP cell (tfcluster/run/follow.py, issue 22): which guard runs (the boot guard of a host that
was never prepared, or the autostop role's) and the expiry, beside the setting and the idle time."""

from __future__ import annotations

import json

import pytest

from tfcluster.run import follow

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def line(**status: object) -> str:
    return json.dumps({"installed": True, "enabled": True, "idle_minutes": 30, "mode": "jobs", "idle_seconds": 65,
                       **status})


@pytest.mark.parametrize(("status", "cell"), [
    ({"guard": "role"}, "30 min (idle 1m05s)"),
    ({"guard": "boot"}, "boot: 30 min (idle 1m05s)"),
    ({"guard": "role", "expires_at": "2027-01-16T04:00:00Z", "expired": False}, "30 min (idle 1m05s), exp. in 20h"),
    ({"guard": "boot", "enabled": False, "expires_at": "2027-01-15T10:30:00Z", "expired": False},
     "boot: off, exp. in 2h30m"),
    ({"expires_at": "2027-01-15T07:00:00Z", "expired": True}, "30 min (idle 1m05s), EXPIRED"),  # held, or going
    ({"expires_at": "not a time"}, "30 min (idle 1m05s)"),
    ({"guard": "boot\x1b[2J", "expires_at": None}, "30 min (idle 1m05s)"),  # an unknown guard is not shown
])
def test_the_cell_says_the_guard_and_the_expiry(status: dict[str, object], cell: str) -> None:
    assert follow.autostop_cell(line(**status), NOW) == cell


def test_the_table_passes_its_clock_to_the_cell() -> None:
    task = {"host": "w0", "slot": "worker:0", "state": "inactive"}
    rows = follow.status_table([task], now=NOW, autostop={"w0": line(guard="boot",
                                                                     expires_at="2027-01-15T09:00:00Z")})
    assert rows[1].endswith("boot: 30 min (idle 1m05s), exp. in 1h")
