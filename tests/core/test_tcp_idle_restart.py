"""Congestion window restart after idle (rcunet.core.tcp.idle): tcp_cwnd_restart's
halving and floor, tcp_current_ssthresh, and when the check applies."""

from __future__ import annotations

import pytest

from rcunet.core.tcp.idle import current_ssthresh, idle_restart_due, restarted_cwnd

RTO = 300


@pytest.mark.parametrize(("cwnd", "idle", "expect"), [
    (40, 250, 40),   # the check lets only idle > RTO through; one RTO halves nothing
    (40, 500, 20),   # one RTO beyond the first: halved once
    (40, 700, 10),   # two: 40 -> 20 -> 10
    (40, 5000, 10),  # never below the initial window
    (6, 5000, 6),    # a cwnd below the initial window is the floor itself
    (41, 650, 10),   # halving is a shift: 41 -> 20 -> 10
])
def test_restart_halves_per_rto_down_to_the_initial_window(cwnd: int, idle: int,
                                                            expect: int) -> None:
    assert restarted_cwnd(cwnd, 10, idle, RTO) == expect


def test_ssthresh_remembers_three_quarters_of_cwnd_unless_reducing() -> None:
    assert current_ssthresh(40, 20, reducing=False) == 30
    assert current_ssthresh(40, 35, reducing=False) == 35
    assert current_ssthresh(40, 20, reducing=True) == 20


@pytest.mark.parametrize(("kwargs", "due"), [
    ({}, True),
    ({"enabled": False}, False),
    ({"in_flight": True}, False),
    ({"last_data_sent_at": None}, False),
    ({"now": 1300}, False),  # idle exactly one RTO: not more than it
])
def test_restart_applies_after_more_than_an_rto_with_nothing_in_flight(
        kwargs: dict[str, object], due: bool) -> None:
    args: dict[str, object] = {"enabled": True, "in_flight": False,
                               "last_data_sent_at": 1000, "now": 1301, "rto": RTO}
    args.update(kwargs)
    assert idle_restart_due(**args) is due  # type: ignore[arg-type]
