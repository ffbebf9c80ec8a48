"""The sent log's view of a SACK block: which segments in flight it covers only in part
(Linux tags whole skbs, so those stay unSACKed)."""

from __future__ import annotations

from rcunet.core.tcp.sent_log import SentLog


def _log(*ranges: tuple[int, int]) -> SentLog:
    log = SentLog()
    for seq, end in ranges:
        log.sent(seq, end, 100, retransmission=False)
    return log


def test_a_block_straddles_the_segments_it_covers_only_in_part() -> None:
    log = _log((1000, 2000), (2000, 3000), (3000, 4000), (4000, 5000))
    assert log.straddling(2000, 4000) == []  # two whole segments
    assert log.straddling(2500, 4000) == [(2000, 3000)]
    assert log.straddling(1500, 4500) == [(1000, 2000), (4000, 5000)]
    assert log.straddling(3999, 4000) == [(3000, 4000)]  # the last byte of one
    assert log.straddling(5000, 6000) == []  # nothing in flight there


def test_sequence_numbers_wrap() -> None:
    top = 0xFFFFFFFF - 499
    log = _log((top, (top + 1000) & 0xFFFFFFFF), ((top + 1000) & 0xFFFFFFFF, 1500))
    assert log.straddling(top + 200, 1500) == [(top, 500)]
