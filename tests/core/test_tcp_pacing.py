"""The pacing rate and the TSO packet size it gives (Linux tcp_update_pacing_rate,
tcp_tso_autosize), and the PSH marks the sender puts where those packets end."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rcunet.core.tcp.congestion.base import INITIAL_SSTHRESH
from rcunet.core.tcp.options import Options
from rcunet.core.tcp.pacing import (
    GSO_MAX_SIZE,
    pacing_rate,
    ssthresh_segments,
    tso_autosize,
)
from rcunet.core.tcp.prr import INFINITE_SSTHRESH


def test_pacing_rate_doubles_in_slow_start_and_adds_a_fifth_after() -> None:
    """mss 1000, cwnd 10, srtt 100 ms: 100 kB/s is the window per RTT; slow start (cwnd
    under half of ssthresh) paces at 200% of it, congestion avoidance at 120%."""
    assert pacing_rate(1000, 10, INFINITE_SSTHRESH, 0, 100_000) == 200_000
    assert pacing_rate(1000, 10, 10, 0, 100_000) == 120_000
    # packets_out above cwnd counts (max(cwnd, packets_out)); no sample: undivided
    assert pacing_rate(1000, 10, INFINITE_SSTHRESH, 20, 100_000) == 400_000
    assert pacing_rate(1000, 10, INFINITE_SSTHRESH, 0, 0) == 1000 * 80_000 * 200 * 10


def test_ssthresh_not_yet_set_is_infinite() -> None:
    assert ssthresh_segments(INITIAL_SSTHRESH, 1000) == INFINITE_SSTHRESH
    assert ssthresh_segments(7000, 1000) == 7


def test_tso_autosize_is_a_millisecond_of_the_rate_at_least_min_tso_segs() -> None:
    # 200 kB/s gives 195 bytes a millisecond: the floor decides
    assert tso_autosize(200_000, 1000, 100_000, 2) == 2
    assert tso_autosize(200_000, 1000, 100_000, 10) == 10
    # 10 MB/s gives 9765 bytes: nine segments of 1000
    assert tso_autosize(10_000_000, 1000, 100_000, 2) == 9


def test_tso_autosize_grows_on_a_short_path_and_stops_at_a_gso_packet() -> None:
    """tcp_tso_rtt_log 9: a min_rtt of r * 512 µs adds GSO_MAX_SIZE >> r bytes; no
    sample yet (tcp_min_rtt ~0U) adds nothing; never more than one GSO packet."""
    assert tso_autosize(0, 1000, 1000, 2) == (GSO_MAX_SIZE >> 1) // 1000
    assert tso_autosize(0, 1000, 100, 2) == GSO_MAX_SIZE // 1000
    assert tso_autosize(0, 1000, 0, 2) == 2
    assert tso_autosize(10**12, 1000, 100_000, 2) == GSO_MAX_SIZE // 1000


@given(rate=st.integers(0, 10**10), mss=st.integers(88, 9000),
       min_rtt=st.integers(0, 10**7), floor=st.integers(1, 255))
def test_tso_autosize_bounds(rate: int, mss: int, min_rtt: int, floor: int) -> None:
    segs = tso_autosize(rate, mss, min_rtt, floor)
    assert segs >= floor
    assert segs == floor or segs * mss <= GSO_MAX_SIZE


def test_min_tso_segs_is_a_u8_from_one() -> None:
    assert Options(min_tso_segs=255).min_tso_segs == 255
    for bad in (0, 256):
        with pytest.raises(ValueError):
            Options(min_tso_segs=bad).validate()
