"""Linux tcp_delack_max: the longest a delayed ACK waits is icsk_delack_max
(TCP_DELACK_MAX_US), but always a jiffy below the RTO floor (TCP_RTO_MIN_US), so the
peer's retransmission timer never beats our ACK."""

from __future__ import annotations

import pytest

from rcunet.core.tcp import Options
from rcunet.core.tcp.delack import delack_max
from rcunet.core.tcp.options import MS
from rcunet.tuning import Tuning


@pytest.mark.parametrize(("delack", "rto_min", "expected"), [
    (200 * MS, 200 * MS, 199 * MS),  # the defaults: rto_min - 1 jiffy wins
    (20 * MS, 200 * MS, 20 * MS),  # TCP_DELACK_MAX_US
    (200 * MS, 5 * MS, 4 * MS),  # TCP_RTO_MIN_US
    (200 * MS, 1 * MS, 1 * MS),  # max(rto_min, 2 jiffies) - 1 jiffy
])
def test_delack_max(delack: int, rto_min: int, expected: int) -> None:
    assert delack_max(Options(delack_max=delack, rto_min=rto_min)) == expected


def test_sysctls_reach_new_connections() -> None:
    """net.ipv4.tcp_rto_max_ms and tcp_rto_min_us become the options' bounds; the
    latter in whole jiffies (usecs_to_jiffies rounds up)."""
    options = Options.from_tuning(Tuning(tcp_rto_max_ms=5000, tcp_rto_min_us=1500))
    assert options.rto_max == 5000 * MS
    assert options.rto_min == 2 * MS


def test_an_rto_floor_above_the_initial_rto_is_a_valid_setting() -> None:
    """net.ipv4.tcp_rto_min_us has no upper bound in Linux: 2 s is a floor a
    connection runs with (RTO = SRTT + 2 s), not a configuration error."""
    options = Options.from_tuning(Tuning(tcp_rto_min_us=2_000_000))
    assert options.rto_min == 2000 * MS
    assert delack_max(options) == 200 * MS
