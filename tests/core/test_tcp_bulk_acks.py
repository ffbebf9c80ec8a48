"""Bulk transfer with a large MSS (64 KB loopback-like links): the receiver's MSS estimate,
Linux's delayed-ACK threshold and the Nagle push of a blocked writer must keep data moving
without waiting for the 40 ms delayed-ACK timer; and Options memoisation."""

from __future__ import annotations

from tcp_harness import (
    ISS_LOCAL,
    ISS_REMOTE,
    MS,
    established,
    plain_options,
    recv_nothing,
    recv_one,
    seg,
    send,
)

from rcunet.core.tcp.common import RCV_MSS_HINT
from rcunet.core.tcp.sndbuf import TX_SKB_TRUESIZE

BIG_MSS = 65495


def test_receive_mss_estimate_starts_small_and_grows_with_segments() -> None:
    conn = established(plain_options(mss=BIG_MSS), peer_mss=BIG_MSS)
    assert conn.tcb.rcv_mss == RCV_MSS_HINT  # Linux tcp_initialize_rcv_mss
    send(conn, seg(payload=bytes(16384)))
    assert conn.tcb.rcv_mss == 16384


def test_more_than_one_receive_mss_unacked_is_acked_at_once() -> None:
    """A writer whose send buffer (64 KB) is below two of our MSS sends 16 KB then 48 KB
    while our buffer has room beyond the window offered: the second segment is
    acknowledged at once (the window does not shrink), not after the delayed-ACK timer."""
    conn = established(plain_options(mss=BIG_MSS, rcvbuf=1 << 20, window_scaling=True),
                       peer_mss=BIG_MSS, quickacks_spent=True)
    assert send(conn, seg(payload=bytes(16384))) == []
    assert conn.timers.delack_at is not None  # one segment: delayed
    out = send(conn, seg(seq=ISS_REMOTE + 1 + 16384, payload=bytes(49151)))
    assert len(out) == 1 and out[0].ack == ISS_REMOTE + 1 + 65535
    assert conn.timers.delack_at is None


def test_unread_data_holds_the_ack_until_recv() -> None:
    """Linux __tcp_ack_snd_check: more than one MSS unacknowledged is ACKed on arrival only
    if the window would not shrink; while the application has not read, its recv() sends
    the ACK (tcp_cleanup_rbuf) -- the sender meanwhile fills whole segments."""
    conn = established(plain_options(mss=BIG_MSS), peer_mss=BIG_MSS, quickacks_spent=True)
    # the first window: half of the 128 KB buffer rounded down to the MSS, 65495 bytes
    # (tcp_select_initial_window); the sender fills it
    assert send(conn, seg(payload=bytes(16384))) == []
    assert send(conn, seg(seq=ISS_REMOTE + 1 + 16384, payload=bytes(BIG_MSS - 16384))) == []
    assert conn.timers.delack_at is not None  # the timer still bounds the wait
    assert len(conn.recv(16384, 0)) == 16384
    out = conn.take_segments()
    assert len(out) == 1 and out[0].ack == ISS_REMOTE + 1 + BIG_MSS
    assert conn.timers.delack_at is None


def test_unread_data_is_acked_by_the_delayed_ack_timer() -> None:
    """Two segments fill the 2920-byte window of an 8 KB buffer: the window would
    shrink (__tcp_select_window offers 1460 < rcv_wnd), so the ACK waits for the timer."""
    conn = established(plain_options(rcvbuf=8192), quickacks_spent=True)
    assert send(conn, seg(payload=bytes(1460))) == []
    assert send(conn, seg(seq=ISS_REMOTE + 1 + 1460, payload=bytes(1460))) == []
    deadline = conn.next_deadline()
    assert deadline == 40 * MS
    conn.on_timer(deadline)
    out = conn.take_segments()
    assert len(out) == 1 and out[0].ack == ISS_REMOTE + 1 + 2920


def test_a_reader_that_keeps_up_acks_every_second_segment() -> None:
    """RFC 5681 §4.2 with a buffer the two segments fill: each recv() that finds more
    than one segment unacknowledged sends the ACK the input path held (tcp_cleanup_rbuf),
    offering the window again (kept at 2920: within one MSS of rcv_ssthresh, 3726)."""
    conn = established(plain_options(rcvbuf=8192), quickacks_spent=True)
    for i in range(3):
        base = ISS_REMOTE + 1 + 2920 * i
        assert send(conn, seg(seq=base, payload=bytes(1460))) == []
        assert send(conn, seg(seq=base + 1460, payload=bytes(1460))) == []
        assert len(conn.recv(4096, 0)) == 2920
        out = conn.take_segments()
        assert len(out) == 1 and out[0].ack == base + 2920 and out[0].window == 2920


def test_second_full_segment_is_acked_at_once_while_the_window_holds() -> None:
    """__tcp_ack_snd_check: more than one MSS unacknowledged and a window that would not
    shrink (the 128 KB buffer has room beyond the 64240 offered): ACKed on arrival."""
    conn = established(quickacks_spent=True)
    assert send(conn, seg(payload=bytes(1460))) == []
    out = send(conn, seg(seq=ISS_REMOTE + 1 + 1460, payload=bytes(1460)))
    assert len(out) == 1 and out[0].ack == ISS_REMOTE + 1 + 2920


def test_a_write_fills_the_open_tail_skb_whatever_the_buffer() -> None:
    """tcp_sendmsg_locked asks sk_stream_memory_free only before it starts a new skb:
    bytes that join the unsent tail skb (up to size_goal) are taken even past the
    buffer, and the skb's truesize is what the buffer is measured in."""
    conn = established(plain_options(sndbuf=3000))
    assert conn.send(bytes(1000), 0) == 1000
    assert len(recv_one(conn).payload) == 1000
    assert conn.send(bytes(1000), 0) == 1000
    recv_nothing(conn)  # Nagle: a small segment while data is in flight
    assert conn.send(bytes(2000), 0) == 2000  # joins the open tail skb
    assert [len(s.payload) for s in conn.take_segments()] == [1460, 1460]
    # the tail skb was sent but for its last 80 bytes (Nagle): tso_fragment split it
    assert conn.sender.wmem_queued() == 4000 + 3 * TX_SKB_TRUESIZE


def test_a_write_needing_a_new_skb_past_the_buffer_is_refused() -> None:
    """A MSG_EOR record's skb takes no more bytes: the next write needs a new skb, which
    the buffer refuses once the queue's truesize reaches it."""
    conn = established(plain_options(sndbuf=3000))
    assert conn.send(bytes(1000), 0, eor=True) == 1000
    assert conn.send(bytes(1000), 0, eor=True) == 1000  # 1960 < 3000: a second skb
    assert conn.send(bytes(2000), 0) == 0  # 3920 queued: no third


def test_nagle_holds_again_once_the_writer_has_room() -> None:
    conn = established(plain_options(sndbuf=3000))
    conn.send(bytes(1000), 0, eor=True)
    conn.send(bytes(1000), 0, eor=True)
    assert conn.send(bytes(2000), 0) == 0
    conn.take_segments()
    send(conn, seg(ack=ISS_LOCAL + 1 + 1000), 1 * MS)
    send(conn, seg(ack=ISS_LOCAL + 1 + 2000), 2 * MS)  # all acked: room again
    assert conn.send(bytes(100), 2 * MS) == 100
    assert len(recv_one(conn).payload) == 100  # nothing in flight: sent
    assert conn.send(bytes(100), 2 * MS) == 100
    recv_nothing(conn)  # in flight and not blocked: Nagle holds


#: tcp_sndbuf_expand's per_mss for BIG_MSS: roundup_pow_of_two(mss + MAX_TCP_HEADER +
#: skb_shared_info) + struct sk_buff
GROWN_PER_SEGMENT = 131072 + 256


def test_send_buffer_grows_at_established_up_to_its_ceiling() -> None:
    """Linux tcp_sndbuf_expand: two windows of IW segments at their worst-case truesize,
    at most tcp_wmem[2]."""
    conn = established(plain_options(mss=BIG_MSS, sndbuf=65536, sndbuf_max=4 << 20),
                       peer_mss=BIG_MSS)
    assert conn.options.sndbuf == 2 * 10 * GROWN_PER_SEGMENT
    assert conn.send(bytes(1 << 20), 0) == 1 << 20  # beyond the initial 64 KB
    capped = established(plain_options(mss=BIG_MSS, sndbuf=65536, sndbuf_max=200_000),
                         peer_mss=BIG_MSS)
    assert capped.options.sndbuf == 200_000


def test_send_buffer_never_shrinks_and_stays_put_without_a_ceiling() -> None:
    small_mss = established(plain_options(sndbuf=65536, sndbuf_max=4 << 20))
    # 2 * 10 * (4096 + 256): a 1460-byte segment's worst-case truesize, Linux's 87040
    assert small_mss.options.sndbuf == 87040
    assert established(plain_options(sndbuf=100_000, sndbuf_max=4 << 20)
                       ).options.sndbuf == 100_000  # never shrinks
    locked = established(plain_options(mss=BIG_MSS, sndbuf=65536), peer_mss=BIG_MSS)
    assert locked.options.sndbuf == 65536  # sndbuf_max=0: SO_SNDBUF set, no autotuning


def test_grown_options_are_shared_between_connections_of_one_configuration() -> None:
    options = plain_options(mss=BIG_MSS, sndbuf=65536, sndbuf_max=4 << 20)
    a = established(options, peer_mss=BIG_MSS)
    b = established(options, peer_mss=BIG_MSS)
    assert a.options is b.options and a.options.sndbuf == 2 * 10 * GROWN_PER_SEGMENT
    assert a.options.with_sndbuf(100_000).sndbuf == 100_000
    assert options.sndbuf == 65536  # the original is untouched (immutable)


def test_quiet_calls_leave_nothing_to_collect() -> None:
    """``Connection.quiet``: the socket skips collecting output after a send whose bytes
    Nagle holds, or a recv that sends no ACK -- they must really produce nothing."""
    conn = established()
    assert conn.send(bytes(1000), 0) == 1000
    assert not conn.quiet and len(recv_one(conn).payload) == 1000
    deadline = conn.next_deadline()
    # a small segment in flight: Nagle (Minshall's) holds the 100 bytes
    assert conn.send(bytes(100), 1 * MS) == 100
    assert conn.quiet
    assert conn.take_segments() == [] and conn.take_events() == []
    assert conn.next_deadline() == deadline
    send(conn, seg(ack=ISS_LOCAL + 1 + 1000, payload=bytes(1000)), 2 * MS)  # data, and
    conn.take_events()  # the ACK releases the 100 bytes
    assert len(conn.recv(500, 3 * MS)) == 500
    assert conn.quiet  # one small segment: the delayed-ACK timer answers it
    assert conn.take_segments() == [] and conn.take_events() == []
