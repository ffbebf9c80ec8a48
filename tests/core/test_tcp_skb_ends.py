"""Send-queue skb ends (Connection.send's ``skb_ends``): Linux transmits skbs, so where a
MSG_ZEROCOPY skb is full (MAX_SKB_FRAGS page frags) a segment ends, on first transmission
and on retransmission, with PSH (tcp_mark_push), and no FIN rides on a segment that stops
before the data does."""

from __future__ import annotations

from tcp_harness import ACK, FIN, ISS_LOCAL, PSH, SECOND, established, plain_options, seg

from rcunet.core.errqueue import iov_after, skb_ends


def _lens(segments: list) -> list[tuple[int, int, bool]]:
    return [(s.seq - ISS_LOCAL - 1, len(s.payload), bool(s.flags & PSH)) for s in segments]


def test_a_segment_stops_at_an_skb_end_and_nagle_holds_the_short_rest() -> None:
    conn = established(plain_options(nodelay=False))
    assert conn.send(b"a" * 20, 0, skb_ends=(17,)) == 20
    assert _lens(conn.take_segments()) == [(0, 17, True)]
    conn.on_segment(seg(ack=ISS_LOCAL + 1 + 17), 1)
    assert _lens(conn.take_segments()) == [(17, 3, True)]


def test_a_retransmission_stops_at_the_skb_end() -> None:
    conn = established(plain_options(nodelay=True))
    conn.send(b"b" * 30, 0, skb_ends=(10, 20))
    assert _lens(conn.take_segments()) == [(0, 10, True), (10, 10, True), (20, 10, True)]
    conn.on_timer(conn.next_deadline() or SECOND)
    again = _lens(conn.take_segments())
    assert again[0] == (0, 10, True)  # not 0..30: the first skb alone
    assert all(length == 10 for _off, length, _psh in again)


def test_fin_waits_for_the_last_skb() -> None:
    conn = established(plain_options(nodelay=True), peer_window=0)
    conn.send(b"c" * 5, 0, skb_ends=(3,))
    conn.close(0)
    assert not [s for s in conn.take_segments() if s.payload]  # the window is shut
    conn.on_segment(seg(window=65535), 1)
    out = conn.take_segments()
    assert [(len(s.payload), bool(s.flags & FIN)) for s in out] == [(3, False), (2, True)]
    assert all(s.flags & ACK for s in out)


def test_ends_past_what_the_buffer_took_are_dropped() -> None:
    conn = established(plain_options(nodelay=True, sndbuf=8))
    # the first skb's 5 bytes and its truesize pass the 8-byte buffer: no second skb
    assert conn.send(b"d" * 20, 0, skb_ends=(5, 17)) == 5
    assert list(conn.sender.skb_ends) == [ISS_LOCAL + 1 + 5]


def test_skb_ends_of_iovecs() -> None:
    assert skb_ends((1,) * 18, 18, 0) == ((17,), 1)
    assert skb_ends((1,) * 64, 64, 0) == ((17, 34, 51), 13)
    assert skb_ends((1,) * 5, 5, 15) == ((2,), 3)  # the tail skb had 15 frags
    assert skb_ends((4096 * 20,), 4096 * 20, 0) == ((4096 * 17,), 3)  # pages of one buffer
    assert skb_ends((1,) * 18, 10, 0) == ((), 10)  # only what was queued
    assert iov_after((3, 4, 5), 5) == (2, 5)
    assert iov_after((3, 4, 5), 12) == ()
