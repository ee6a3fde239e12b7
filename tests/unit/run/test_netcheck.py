"""The network check's report (tfcluster/run/netcheck.py, issue 40): each link's rate, the slow and the unmeasured
ones named; the hosts' answers are data."""

from __future__ import annotations

from typing import Any

import pytest

from tfcluster.run.netcheck import report

ORDER = ["a", "b", "c", "d"]


def answers(**rates: Any) -> dict[str, Any]:
    return {host: ({"to": f"{host}-next:2222", "mbit_s": rate} if not isinstance(rate, dict) else rate)
            for host, rate in rates.items()}


def test_a_link_under_half_the_median_is_named_and_strict_refuses() -> None:
    found = report(answers(a=940.0, b=935.0, c=48.0, d=941.5), ORDER)
    assert found.median == pytest.approx(937.5) and [link.source for link in found.slow] == ["c"]
    lines = found.lines()
    assert lines[2] == "network: c -> c-next:2222 48 Mbit/s  SLOW: under half the median"
    assert lines[0] == "network: a -> a-next:2222 940 Mbit/s" and lines[-1] == \
        "network: median 938 Mbit/s over 4 link(s)"
    assert found.refusal().startswith("slow or unmeasured network link(s): c -> c-next:2222 (median 938 Mbit/s). "
                                      "Nothing was started (NETCHECK=strict). Fix:")


def test_even_links_name_nobody_and_a_floor_names_them_all() -> None:
    even = answers(a=900, b=910, c=905, d=899)
    assert report(even, ORDER).slow == [] and report(even, ORDER).refusal() == ""
    assert len(report(even, ORDER, floor=10_000).slow) == 4


@pytest.mark.parametrize("bad", [{"to": "x:1", "error": "ConnectionRefusedError: ..."}, {"to": "x:1", "mbit_s": -3},
                                 {"to": "x:1", "mbit_s": float("nan")}, {"to": "x:1", "mbit_s": True}, "junk", None])
def test_an_unmeasured_link_is_named_with_why(bad: Any) -> None:
    found = report({**answers(a=900, b=910, c=905), "d": bad}, ORDER)
    assert [link.source for link in found.slow] == ["d"]
    assert "network: d -> " in found.lines()[3] and "not measured" in found.lines()[3]
    assert "d -> " in found.refusal()


def test_host_text_is_escaped() -> None:
    found = report({"a": {"to": "\x1b[2Jevil", "error": "boom\x07"}, "b": {"to": "x", "mbit_s": 10}}, ["a", "b"])
    assert all("\x1b" not in line and "\x07" not in line for line in found.lines())
