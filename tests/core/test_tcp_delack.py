"""Linux's delayed-ACK engine (core/tcp/delack.py): quick-ack mode sized by the window we
offered, pingpong mode, re-entry on old data.  (ato's growth over a connection is
tests/drill/lx_delack_quickack_ato.pkt.)"""

from __future__ import annotations

from tcp_harness import ISS_REMOTE, MS, PSH, established, plain_options, seg, send

R1 = ISS_REMOTE + 1


def test_quick_acks_open_half_the_offered_window() -> None:
    """tcp_incr_quickack: rcv_wnd / (2 * rcv_mss) quick ACKs -- 4000 / (2 * 536) = 3, the
    first window being half the 8000-byte buffer (tcp_select_initial_window) -- then the
    fourth small segment waits for the delayed-ACK timer."""
    conn = established(plain_options(rcvbuf=8000, mss=1000))
    for i in range(3):
        out = send(conn, seg(seq=R1 + 10 * i, payload=b"x" * 10, flags=PSH | 0x10),
                   now=i * MS)
        assert [o.ack for o in out] == [R1 + 10 * (i + 1)]
    assert send(conn, seg(seq=R1 + 30, payload=b"x" * 10), now=3 * MS) == []
    assert conn.timers.delack_at == 3 * MS + 40 * MS


def test_a_reply_within_ato_makes_the_connection_interactive() -> None:
    """tcp_event_data_sent -> inet_csk_inc_pingpong_cnt: quick ACKs stop; the delayed ACK
    that then has to fire leaves pingpong mode (tcp_delack_timer_handler)."""
    conn = established()
    assert len(send(conn, seg(payload=b"req1"), now=0)) == 1  # quick ACK
    conn.send(b"resp", MS)
    assert [o.payload for o in conn.take_segments()] == [b"resp"]
    assert conn.delack.pingpong == 1
    assert send(conn, seg(seq=R1 + 4, payload=b"req2"), now=2 * MS) == []  # delayed
    deadline = conn.next_deadline()
    assert deadline is not None
    conn.on_timer(deadline)
    assert len(conn.take_segments()) == 1 and conn.delack.pingpong == 0
    assert len(send(conn, seg(seq=R1 + 8, payload=b"req3"), now=deadline + MS)) == 1


def test_old_data_reenters_quickack_mode() -> None:
    """tcp_send_dupack: a retransmission of data we hold means our ACK was lost."""
    conn = established(plain_options(rcvbuf=2000))
    seq = R1
    for i in range(3):
        send(conn, seg(seq=seq, payload=b"z" * 10), now=i * MS)
        seq += 10
    assert conn.timers.delack_at is not None  # quick ACKs spent
    conn.on_timer(conn.timers.delack_at)
    conn.take_segments()
    assert len(send(conn, seg(seq=R1, payload=b"z" * 10), now=100 * MS)) == 1  # dup ACK
    assert len(send(conn, seg(seq=seq, payload=b"z" * 10), now=101 * MS)) == 1  # quick
