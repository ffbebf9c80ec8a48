"""The TCP state machine, one section per state (smoltcp style), driven by hand.

Peer segments come from ``seg(...)`` (a template overridden field by field); ``recv_one``
and ``recv_nothing`` check what the engine emitted.  Time is virtual (int ns).
"""

from __future__ import annotations

import errno

import pytest
from tcp_harness import (
    ACK,
    FIN,
    ISS_LOCAL,
    ISS_REMOTE,
    LOCAL_PORT,
    MS,
    PSH,
    REMOTE_PORT,
    RST,
    SECOND,
    SYN,
    Net,
    established,
    plain_options,
    recv_nothing,
    recv_one,
    seg,
    send,
)

from rcunet.core.tcp import (
    Closed,
    Connection,
    ConnectionFailed,
    DataReceived,
    Established,
    FinReceived,
    ResetReceived,
    State,
    TimeWaitEntered,
)
from rcunet.core.tcp.connection import ListenAction, listen_action, reset_for
from rcunet.core.tcp.state import TRANSITIONS, add_transition_probe, remove_transition_probe
from rcunet.core.tcp.timewait import TimeWait, TwAction, reuse_iss

L1 = ISS_LOCAL + 1
R1 = ISS_REMOTE + 1


def syn_sent(**kw: object) -> Connection:
    conn = Connection.connect(local_port=LOCAL_PORT, remote_port=REMOTE_PORT, iss=ISS_LOCAL,
                              now=0, options=plain_options(**kw))
    out = recv_one(conn)
    assert out.flags == SYN and out.seq == ISS_LOCAL
    return conn


def syn_received() -> Connection:
    syn = seg(seq=ISS_REMOTE, ack=0, flags=SYN, mss=1460)
    conn = Connection.accept_syn(syn, iss=ISS_LOCAL, now=0, options=plain_options())
    out = recv_one(conn)
    assert (out.flags, out.seq, out.ack) == (SYN | ACK, ISS_LOCAL, R1)
    return conn


def fin_wait_1() -> Connection:
    conn = established()
    conn.shutdown_write(0)
    out = recv_one(conn)
    assert out.flags == ACK | FIN and out.seq == L1
    assert conn.state is State.FIN_WAIT_1
    return conn


def fin_wait_2() -> Connection:
    conn = fin_wait_1()
    recv_nothing_after(conn, seg(ack=L1 + 1))
    assert conn.state is State.FIN_WAIT_2
    return conn


def close_wait() -> Connection:
    conn = established()
    out = send(conn, seg(flags=ACK | FIN))
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1 + 1)]
    assert conn.state is State.CLOSE_WAIT
    return conn


def last_ack() -> Connection:
    conn = close_wait()
    conn.take_events()
    conn.shutdown_write(0)
    out = recv_one(conn)
    assert out.flags == ACK | FIN and out.seq == L1
    assert conn.state is State.LAST_ACK
    return conn


def closing() -> Connection:
    conn = fin_wait_1()
    out = send(conn, seg(flags=ACK | FIN, ack=L1))  # FIN without ACKing ours
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1 + 1)]
    assert conn.state is State.CLOSING
    return conn


def time_wait() -> Connection:
    conn = fin_wait_2()
    out = send(conn, seg(flags=ACK | FIN, ack=L1 + 1))
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1 + 1)]
    assert conn.state is State.TIME_WAIT
    return conn


def recv_nothing_after(conn: Connection, segment) -> None:
    __tracebackhide__ = True
    conn.on_segment(segment, 0)
    recv_nothing(conn)


# ====================================================================== table
def test_state_names_use_rfc_spelling() -> None:
    assert str(State.SYN_RECEIVED) == "SYN-RECEIVED"
    assert str(State.TIME_WAIT) == "TIME-WAIT"


def test_every_state_but_listen_appears_in_the_transition_table() -> None:
    seen = {s for pair in TRANSITIONS for s in pair}
    assert seen == set(State) - {State.LISTEN}


# ====================================================================== LISTEN (host side)
def test_listen_actions() -> None:
    assert listen_action(seg(flags=RST)) is ListenAction.DROP
    assert listen_action(seg(flags=ACK)) is ListenAction.RESET
    assert listen_action(seg(flags=SYN, ack=0)) is ListenAction.SYN
    assert listen_action(seg(flags=SYN | FIN, ack=0)) is ListenAction.DROP
    assert listen_action(seg(flags=0, payload=b"x")) is ListenAction.DROP


def test_reset_for_ack_uses_its_ack_number() -> None:
    r = reset_for(seg(flags=ACK, ack=1234))
    assert r is not None and (r.flags, r.seq) == (RST, 1234)


def test_reset_for_non_ack_acks_the_segment() -> None:
    r = reset_for(seg(flags=SYN, seq=500, ack=0, payload=b"abc"))
    assert r is not None and (r.flags, r.seq, r.ack) == (RST | ACK, 0, 504)
    assert reset_for(seg(flags=RST)) is None


def test_accept_syn_rejects_non_syn() -> None:
    with pytest.raises(ValueError):
        Connection.accept_syn(seg(flags=ACK), iss=1, now=0)


# ====================================================================== SYN-SENT
def test_syn_sent_synack_establishes() -> None:
    conn = syn_sent()
    out = send(conn, seg(seq=ISS_REMOTE, ack=L1, flags=SYN | ACK, mss=1000))
    assert [(o.flags, o.seq, o.ack) for o in out] == [(ACK, L1, R1)]
    assert conn.state is State.ESTABLISHED
    assert Established() in conn.take_events()
    assert conn.tcb.snd_mss == 1000


def test_syn_sent_bad_ack_gets_reset() -> None:
    conn = syn_sent()
    out = send(conn, seg(seq=ISS_REMOTE, ack=L1 + 5, flags=SYN | ACK))
    assert [(o.flags, o.seq) for o in out] == [(RST, L1 + 5)]
    assert conn.state is State.SYN_SENT


def test_syn_sent_rst_with_good_ack_is_econnrefused() -> None:
    conn = syn_sent()
    recv_nothing_after(conn, seg(seq=0, ack=L1, flags=RST | ACK))
    assert conn.state is State.CLOSED
    events = conn.take_events()
    assert ConnectionFailed(errno.ECONNREFUSED) in events and Closed() in events
    with pytest.raises(ConnectionRefusedError):
        conn.recv(10, 0)


def test_syn_sent_rst_without_ack_is_ignored() -> None:
    conn = syn_sent()  # RFC 5961 §3.2: a RST must acknowledge our SYN
    recv_nothing_after(conn, seg(seq=ISS_REMOTE, ack=0, flags=RST))
    assert conn.state is State.SYN_SENT


def test_syn_sent_rst_with_bad_ack_is_ignored() -> None:
    conn = syn_sent()
    recv_nothing_after(conn, seg(ack=L1 + 100, flags=RST | ACK))
    assert conn.state is State.SYN_SENT


def test_syn_sent_plain_ack_or_data_dropped() -> None:
    conn = syn_sent()
    recv_nothing_after(conn, seg(flags=0, payload=b"x"))
    assert conn.state is State.SYN_SENT


def test_simultaneous_open() -> None:
    conn = syn_sent()
    out = send(conn, seg(seq=ISS_REMOTE, ack=0, flags=SYN))
    assert [(o.flags, o.seq, o.ack) for o in out] == [(SYN | ACK, ISS_LOCAL, R1)]
    assert conn.state is State.SYN_RECEIVED
    # The peer's SYN,ACK repeats its SYN; Linux takes its ACK instead of challenging it,
    # then ACKs the repeated SYN at once as a duplicate (tcp_data_queue)
    out = send(conn, seg(seq=ISS_REMOTE, ack=L1, flags=SYN | ACK))
    assert [(o.flags, o.seq, o.ack) for o in out] == [(ACK, L1, R1)]
    assert conn.state is State.ESTABLISHED


def test_simultaneous_open_plain_ack_also_establishes() -> None:
    conn = syn_sent()
    send(conn, seg(seq=ISS_REMOTE, ack=0, flags=SYN))
    recv_nothing_after(conn, seg(seq=R1, ack=L1, flags=ACK))
    assert conn.state is State.ESTABLISHED


def test_simultaneous_open_over_the_wire() -> None:
    a = Connection.connect(local_port=1, remote_port=2, iss=100, now=0, options=plain_options())
    b = Connection.connect(local_port=2, remote_port=1, iss=900, now=0, options=plain_options())
    sa, sb = a.take_segments(), b.take_segments()
    for s in sb:
        a.on_segment(s, 1)
    for s in sa:
        b.on_segment(s, 1)
    assert a.state is b.state is State.SYN_RECEIVED
    sa, sb = a.take_segments(), b.take_segments()  # the SYN,ACKs
    for s in sb:
        a.on_segment(s, 2)
    for s in sa:
        b.on_segment(s, 2)
    assert a.state is b.state is State.ESTABLISHED
    assert Established() in a.take_events() and Established() in b.take_events()


def test_close_in_syn_sent_deletes_tcb() -> None:
    conn = syn_sent()
    conn.close(0)
    recv_nothing(conn)
    assert conn.state is State.CLOSED and Closed() in conn.take_events()


def test_syn_retransmission_schedule_and_etimedout() -> None:
    conn = syn_sent()
    times = []
    while conn.state is State.SYN_SENT:
        at = conn.next_deadline()
        assert at is not None
        conn.on_timer(at)
        times.append(at)
        for out in conn.take_segments():
            assert out.flags == SYN and out.seq == ISS_LOCAL
    # Linux: 1 s initial RTO, doubled, tcp_syn_retries = 6 -> give up at 127 s.
    assert times == [s * SECOND for s in (1, 3, 7, 15, 31, 63, 127)]
    assert ConnectionFailed(errno.ETIMEDOUT) in conn.take_events()
    assert conn.counters["TcpExtTCPSynRetrans"] == 6


def test_lost_syn_sets_loss_window_and_fallback_rto() -> None:
    conn = syn_sent()
    conn.on_timer(SECOND)
    conn.take_segments()
    conn.on_segment(seg(seq=ISS_REMOTE, ack=L1, flags=SYN | ACK), SECOND + 10 * MS)
    assert conn.cc.cwnd == conn.tcb.snd_mss  # RFC 5681 §3.1
    assert conn.rto.rto == 3 * SECOND  # RFC 6298 §5.7 (no valid sample: SYN retransmitted)


# ====================================================================== SYN-RECEIVED
def test_syn_received_ack_establishes() -> None:
    conn = syn_received()
    recv_nothing_after(conn, seg())
    assert conn.state is State.ESTABLISHED
    assert conn.counters["TcpPassiveOpens"] == 1


def test_syn_received_ack_with_data_establishes_and_delivers() -> None:
    conn = syn_received()
    conn.on_segment(seg(payload=b"hello", flags=ACK | PSH), 0)
    assert conn.state is State.ESTABLISHED
    assert conn.recv(100, 0) == b"hello"


def test_syn_received_bad_ack_gets_reset() -> None:
    conn = syn_received()
    out = send(conn, seg(ack=L1 + 7))
    assert [(o.flags, o.seq) for o in out] == [(RST, L1 + 7)]
    assert conn.state is State.SYN_RECEIVED


def test_syn_received_duplicate_syn_retransmits_synack_rate_limited() -> None:
    conn = syn_received()
    out = send(conn, seg(seq=ISS_REMOTE, ack=0, flags=SYN), now=100 * MS)
    assert [(o.flags, o.seq) for o in out] == [(SYN | ACK, ISS_LOCAL)]
    assert conn.next_deadline() == SECOND  # the retransmission timer is left alone
    assert send(conn, seg(seq=ISS_REMOTE, ack=0, flags=SYN), now=200 * MS) == []
    assert conn.counters["TcpExtTCPACKSkippedSynRecv"] == 1


def test_syn_received_rst_closes_quietly() -> None:
    conn = syn_received()
    recv_nothing_after(conn, seg(flags=RST))
    assert conn.state is State.CLOSED
    events = conn.take_events()
    assert ResetReceived() in events and Closed() in events
    assert not any(isinstance(e, ConnectionFailed) for e in events)


def test_synack_retransmissions_give_up() -> None:
    conn = syn_received()
    n = 0
    while conn.state is State.SYN_RECEIVED:
        conn.on_timer(conn.next_deadline())
        n += len(conn.take_segments())
    assert n == 5  # tcp_synack_retries


# ====================================================================== ESTABLISHED
def test_established_receives_in_order_data() -> None:
    conn = established(quickacks_spent=True)
    recv_nothing_after(conn, seg(payload=b"abc"))  # delayed ACK
    assert conn.take_events() == [DataReceived(3)]
    assert conn.recv(2, 0) == b"ab" and conn.recv(10, 0) == b"c"
    with pytest.raises(BlockingIOError):
        conn.recv(10, 0)


def test_established_sends_data() -> None:
    conn = established()
    assert conn.send(b"hello", 0) == 5
    out = recv_one(conn)
    assert (out.seq, out.ack, out.flags, bytes(out.payload)) == (L1, R1, ACK | PSH, b"hello")
    recv_nothing_after(conn, seg(ack=L1 + 5))
    assert conn.tcb.snd_una == L1 + 5 and conn.next_deadline() is None


def test_established_fin_goes_close_wait() -> None:
    conn = close_wait()
    assert FinReceived() in conn.take_events()
    assert conn.recv(10, 0) == b""  # EOF


def test_established_rst_exact_seq_is_econnreset() -> None:
    conn = established()
    recv_nothing_after(conn, seg(flags=RST, seq=R1))
    assert conn.state is State.CLOSED
    assert ConnectionFailed(errno.ECONNRESET) in conn.take_events()
    with pytest.raises(ConnectionResetError):
        conn.recv(10, 0)
    assert conn.recv(10, 0) == b""  # the error is reported once
    assert conn.counters["TcpEstabResets"] == 1


def test_established_rst_in_window_gets_challenge_ack() -> None:
    conn = established()
    out = send(conn, seg(flags=RST, seq=R1 + 100))
    assert [(o.flags, o.seq, o.ack) for o in out] == [(ACK, L1, R1)]
    assert conn.state is State.ESTABLISHED
    assert conn.counters["TcpExtTCPChallengeACK"] == 1


def test_established_rst_out_of_window_is_silently_dropped() -> None:
    conn = established()
    recv_nothing_after(conn, seg(flags=RST, seq=R1 + 1_000_000))
    recv_nothing_after(conn, seg(flags=RST, seq=R1 - 1))
    assert conn.state is State.ESTABLISHED


def test_established_syn_gets_challenge_ack_whatever_its_seq() -> None:
    for seq in (R1, R1 + 10, R1 + 5_000_000):
        conn = established()
        out = send(conn, seg(flags=SYN, seq=seq, ack=0))
        assert [(o.flags, o.ack) for o in out] == [(ACK, R1)], seq
        assert conn.state is State.ESTABLISHED
        assert conn.counters["TcpExtTCPSYNChallenge"] == 1


def test_challenge_acks_are_rate_limited_per_connection() -> None:
    conn = established()
    assert len(send(conn, seg(flags=RST, seq=R1 + 5), now=0)) == 1
    assert send(conn, seg(flags=RST, seq=R1 + 6), now=100 * MS) == []
    assert conn.counters["TcpExtTCPACKSkippedChallenge"] == 1
    assert len(send(conn, seg(flags=RST, seq=R1 + 7), now=600 * MS)) == 1


def test_ack_for_unsent_data_is_challenged_and_dropped() -> None:
    """Linux tcp_ack (after(ack, snd_nxt)): a challenge ACK and the segment dropped,
    in ESTABLISHED (tcp_rcv_established) as in the other full-socket states
    (tcp_rcv_state_process); each answer is rate limited per socket."""
    conn = established()
    out = send(conn, seg(ack=L1 + 1000, payload=b"data"))
    assert [(o.flags, o.seq, o.ack) for o in out] == [(ACK, L1, R1)]
    assert conn.readable == 0 and conn.tcb.snd_una == L1
    assert conn.counters["TcpExtTCPChallengeACK"] == 1
    assert send(conn, seg(ack=L1 + 1000, payload=b"data"), now=100 * MS) == []
    assert conn.counters["TcpExtTCPACKSkippedChallenge"] == 1
    conn.shutdown_write(0)
    assert [o.flags for o in conn.take_segments()] == [ACK | FIN]
    out = send(conn, seg(ack=L1 + 1000, payload=b"data"), now=600 * MS)
    assert [(o.flags, o.seq, o.ack) for o in out] == [(ACK, L1 + 1, R1)]
    assert conn.readable == 0 and conn.tcb.snd_una == L1


def test_ack_for_unsent_data_in_a_timewait_sock_gets_no_answer() -> None:
    """What Linux holds as a timewait sock (an orphaned FIN-WAIT-2, TIME-WAIT) drops a
    bare in-window ACK silently, whatever it acknowledges (tcp_timewait_state_process)."""
    conn = fin_wait_2()
    conn.close(0)
    assert send(conn, seg(ack=L1 + 1000)) == []
    assert conn.state is State.FIN_WAIT_2
    conn = time_wait()
    assert send(conn, seg(seq=R1 + 1, ack=L1 + 1000)) == []
    assert conn.counters["TcpExtTCPChallengeACK"] == 0


def test_ack_too_old_is_dropped_rfc5961() -> None:
    conn = established()
    out = send(conn, seg(ack=L1 - 70000, payload=b"data"))
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1)]
    assert conn.readable == 0


def test_old_but_acceptable_ack_still_delivers_data() -> None:
    conn = established()
    conn.on_segment(seg(ack=L1 - 10, payload=b"data"), 0)
    assert conn.readable == 4


def test_segment_without_ack_is_dropped() -> None:
    conn = established()
    recv_nothing_after(conn, seg(flags=0, payload=b"zz"))
    assert conn.readable == 0


def test_out_of_window_data_gets_duplicate_ack() -> None:
    conn = established()
    out = send(conn, seg(seq=R1 + 70000, payload=b"far"))
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1)]
    out = send(conn, seg(seq=R1 - 3, payload=b"old"))  # entirely duplicate data
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1)]
    assert conn.readable == 0


def test_partially_duplicate_segment_is_trimmed() -> None:
    conn = established()
    conn.on_segment(seg(payload=b"abc"), 0)
    conn.on_segment(seg(seq=R1 + 1, payload=b"bcdef"), 0)
    assert conn.recv(100, 0) == b"abcdef"


def test_send_after_shutdown_is_epipe() -> None:
    conn = fin_wait_1()
    with pytest.raises(BrokenPipeError):
        conn.send(b"x", 0)


def test_close_with_unread_data_sends_rst() -> None:
    conn = established()
    conn.on_segment(seg(payload=b"unread"), 0)
    conn.take_segments()
    conn.close(0)
    out = recv_one(conn)
    assert out.flags & RST and out.seq == L1
    assert conn.state is State.CLOSED
    assert conn.counters["TcpExtTCPAbortOnClose"] == 1


def test_abort_sends_rst_and_closes() -> None:
    conn = established()
    conn.send(b"pending", 0)
    conn.take_segments()
    conn.abort(0)
    out = recv_one(conn)
    assert out.flags & RST and out.seq == L1 + 7
    assert conn.state is State.CLOSED and conn.unacked == 0


def test_data_after_close_resets() -> None:
    conn = fin_wait_2()
    conn.close(0)
    out = send(conn, seg(ack=L1 + 1, payload=b"late"))
    # answered as if no socket matched (tcp_v4_send_reset): <SEQ=SEG.ACK><CTL=RST>
    assert [(o.flags, o.seq) for o in out] == [(RST, L1 + 1)]
    assert conn.state is State.CLOSED
    assert conn.counters["TcpExtTCPAbortOnData"] == 1


# ====================================================================== FIN-WAIT-1
def test_fin_wait_1_fin_and_ack_together_time_wait() -> None:
    conn = fin_wait_1()
    out = send(conn, seg(flags=ACK | FIN, ack=L1 + 1))
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1 + 1)]
    assert conn.state is State.TIME_WAIT
    assert TimeWaitEntered() in conn.take_events()


def test_fin_wait_1_rst_is_econnreset() -> None:
    conn = fin_wait_1()
    recv_nothing_after(conn, seg(flags=RST))
    assert ConnectionFailed(errno.ECONNRESET) in conn.take_events()


def test_fin_wait_1_still_receives_data() -> None:
    conn = fin_wait_1()
    conn.on_segment(seg(payload=b"more", ack=L1 + 1), 0)
    assert conn.state is State.FIN_WAIT_2 and conn.recv(10, 0) == b"more"


# ====================================================================== FIN-WAIT-2
def test_fin_wait_2_fin_time_wait() -> None:
    time_wait()


def test_orphaned_fin_wait_2_times_out() -> None:
    conn = fin_wait_2()
    conn.close(0)
    assert conn.next_deadline() == 60 * SECOND  # tcp_fin_timeout
    conn.on_timer(60 * SECOND)
    assert conn.state is State.CLOSED


# ====================================================================== CLOSING
def test_closing_ack_goes_time_wait() -> None:
    conn = closing()
    recv_nothing_after(conn, seg(seq=R1 + 1, ack=L1 + 1))
    assert conn.state is State.TIME_WAIT


def test_simultaneous_close_over_the_wire() -> None:
    net = Net()
    net.run(until=SECOND)
    net.client.shutdown_write(net.now)
    net.server.shutdown_write(net.now)  # both FINs cross in flight
    net.flush()
    net.run(until=2 * SECOND)
    assert net.client.state is State.TIME_WAIT and net.server.state is State.TIME_WAIT
    net.run()
    assert net.client.state is State.CLOSED and net.server.state is State.CLOSED


def test_closing_rst_closes_without_error() -> None:
    conn = closing()
    recv_nothing_after(conn, seg(flags=RST, seq=R1 + 1))
    assert conn.state is State.CLOSED
    assert not any(isinstance(e, ConnectionFailed) for e in conn.take_events())


# ====================================================================== CLOSE-WAIT
def test_close_wait_can_still_send() -> None:
    conn = close_wait()
    assert conn.send(b"reply", 0) == 5
    assert bytes(recv_one(conn).payload) == b"reply"


def test_close_wait_rst_is_epipe_like_linux() -> None:
    conn = close_wait()
    recv_nothing_after(conn, seg(flags=RST, seq=R1 + 1))
    assert ConnectionFailed(errno.EPIPE) in conn.take_events()


def test_close_wait_rst_at_rcv_nxt_minus_one_accepted_like_linux() -> None:
    conn = close_wait()
    recv_nothing_after(conn, seg(flags=RST, seq=R1))
    assert conn.state is State.CLOSED


def test_close_wait_retransmitted_fin_is_acked() -> None:
    conn = close_wait()
    out = send(conn, seg(flags=ACK | FIN, seq=R1))
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1 + 1)]


# ====================================================================== LAST-ACK
def test_last_ack_ack_closes() -> None:
    conn = last_ack()
    recv_nothing_after(conn, seg(seq=R1 + 1, ack=L1 + 1))
    assert conn.state is State.CLOSED and Closed() in conn.take_events()


def test_last_ack_fin_retransmitted_on_timeout() -> None:
    conn = last_ack()
    conn.on_timer(conn.next_deadline())
    out = recv_one(conn)
    assert out.flags & FIN and out.seq == L1


# ====================================================================== TIME-WAIT
def test_time_wait_lasts_2msl_and_restarts_on_fin() -> None:
    conn = time_wait()
    assert conn.next_deadline() == 60 * SECOND
    out = send(conn, seg(flags=ACK | FIN, ack=L1 + 1), now=10 * SECOND)
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1 + 1)]
    assert conn.next_deadline() == 70 * SECOND
    conn.on_timer(70 * SECOND)
    assert conn.state is State.CLOSED


def test_time_wait_rst_closes() -> None:
    conn = time_wait()
    recv_nothing_after(conn, seg(flags=RST, seq=R1 + 1))
    assert conn.state is State.CLOSED


def test_time_wait_syn_reuse_rules() -> None:
    conn = time_wait()
    assert conn.time_wait_accepts_syn(seg(flags=SYN, seq=R1 + 100, ack=0))
    assert not conn.time_wait_accepts_syn(seg(flags=SYN, seq=R1 - 100, ack=0))
    assert conn.reuse_iss() == (L1 + 1 + 65537) & 0xFFFFFFFF


def test_configurable_2msl() -> None:
    conn = established(plain_options(time_wait_timeout=2 * SECOND))
    conn.shutdown_write(0)
    conn.on_segment(seg(flags=ACK | FIN, ack=L1 + 1), 0)
    assert conn.state is State.TIME_WAIT and conn.next_deadline() == 2 * SECOND


# ====================================================================== CLOSED
def test_closed_answers_with_reset() -> None:
    conn = established()
    conn.abort(0)
    conn.take_segments()
    out = send(conn, seg(payload=b"x", ack=L1 + 3))
    assert [(o.flags, o.seq) for o in out] == [(RST, L1 + 3)]
    with pytest.raises(BrokenPipeError):
        conn.send(b"x", 0)


# ====================================================== full handshake over the wire
def test_handshake_and_close_over_the_wire() -> None:
    net = Net()
    net.run(until=SECOND)
    assert net.client.state is State.ESTABLISHED and net.server.state is State.ESTABLISHED
    assert net.client.tcb.ts_ok and net.client.tcb.sack_ok
    assert net.client.tcb.snd_wscale == net.server.tcb.rcv_wscale
    net.client.close(net.now)
    net.flush()
    net.run(until=2 * SECOND)
    assert net.server.state is State.CLOSE_WAIT and net.client.state is State.FIN_WAIT_2
    net.server.close(net.now)
    net.flush()
    net.run()
    assert net.client.state is State.CLOSED and net.server.state is State.CLOSED


# ====================================================================== RST in every state
RST_CASES = {
    # state: (fixture, RCV.NXT, errno the application sees or None)
    State.SYN_RECEIVED: (syn_received, R1, None),
    State.ESTABLISHED: (established, R1, errno.ECONNRESET),
    State.FIN_WAIT_1: (fin_wait_1, R1, errno.ECONNRESET),
    State.FIN_WAIT_2: (fin_wait_2, R1, errno.ECONNRESET),
    State.CLOSE_WAIT: (close_wait, R1 + 1, errno.EPIPE),
    State.CLOSING: (closing, R1 + 1, None),
    State.LAST_ACK: (last_ack, R1 + 1, None),
    State.TIME_WAIT: (time_wait, R1 + 1, None),
}


@pytest.mark.parametrize("state", list(RST_CASES), ids=str)
def test_rst_at_rcv_nxt_closes_every_state(state: State) -> None:
    make, rcv_nxt, err = RST_CASES[state]
    conn = make()
    conn.take_events()
    assert conn.state is state
    recv_nothing_after(conn, seg(flags=RST, seq=rcv_nxt))
    assert conn.state is State.CLOSED
    events = conn.take_events()
    assert ResetReceived() in events and Closed() in events
    failed = [e.errno for e in events if isinstance(e, ConnectionFailed)]
    assert failed == ([err] if err is not None else [])


@pytest.mark.parametrize("state", list(RST_CASES), ids=str)
def test_rst_in_window_but_not_at_rcv_nxt_is_challenged_in_every_state(state: State) -> None:
    make, rcv_nxt, _ = RST_CASES[state]
    conn = make()
    out = send(conn, seg(flags=RST, seq=rcv_nxt + 10))
    assert [(o.flags, o.ack) for o in out] == [(ACK, rcv_nxt)]
    assert conn.state is state
    recv_nothing_after(conn, seg(flags=RST, seq=rcv_nxt + 3_000_000))  # outside: silence
    assert conn.state is state


def test_rst_in_syn_sent_every_variant() -> None:
    for flags, ack, closed in ((RST, 0, False), (RST | ACK, L1 + 9, False),
                               (RST | ACK, ISS_LOCAL, False), (RST | ACK, L1, True)):
        conn = syn_sent()
        conn.on_segment(seg(flags=flags, ack=ack, seq=0), 0)
        assert (conn.state is State.CLOSED) is closed, (flags, ack)


# ====================================================================== coverage of the table
def test_every_transition_in_the_table_is_exercised() -> None:
    seen: set[tuple[State, State]] = set()

    def record(old: State, new: State) -> None:
        seen.add((old, new))

    add_transition_probe(record)
    try:
        _run_every_transition()
    finally:
        remove_transition_probe(record)
    assert seen == set(TRANSITIONS)


def test_a_detached_probe_sees_nothing() -> None:
    seen: list[tuple[State, State]] = []

    def record(old: State, new: State) -> None:
        seen.append((old, new))

    add_transition_probe(record)
    syn_sent()
    remove_transition_probe(record)
    assert seen == [(State.CLOSED, State.SYN_SENT)]
    syn_sent()
    assert len(seen) == 1
    with pytest.raises(ValueError):
        remove_transition_probe(record)


def _run_every_transition() -> None:
    from rcunet.core.tcp import syncookies

    for state in RST_CASES:
        test_rst_at_rcv_nxt_closes_every_state(state)
    test_syn_sent_synack_establishes()
    test_syn_sent_rst_with_good_ack_is_econnrefused()
    test_simultaneous_open()
    test_fin_wait_1_fin_and_ack_together_time_wait()
    test_closing_ack_goes_time_wait()
    test_last_ack_ack_closes()
    test_time_wait_lasts_2msl_and_restarts_on_fin()
    test_orphaned_fin_wait_2_times_out()
    test_close_wait_rst_is_epipe_like_linux()
    syn = seg(seq=5, ack=0, flags=SYN, mss=1460)
    synack = syncookies.syn_ack_for(syn, secret=b"s" * 16, saddr=b"\1" * 4, daddr=b"\2" * 4,
                                    now=0)
    assert syncookies.connection_from_ack(seg(seq=6, ack=synack.seq + 1), secret=b"s" * 16,
                                          saddr=b"\1" * 4, daddr=b"\2" * 4, now=0) is not None


# ====================================================================== TIME-WAIT reuse (§3.4)
def ts_syn_sent(now: int = 0, **kw: object) -> Connection:
    conn = Connection.connect(local_port=LOCAL_PORT, remote_port=REMOTE_PORT, iss=ISS_LOCAL,
                              now=now, options=plain_options(timestamps=True), ts_offset=500,
                              **kw)
    # Linux tcp_syn_options: the SYN echoes TS.Recent, 0 unless TIME-WAIT reuse left one
    inherited = kw.get("ts_recent")
    ecr = inherited[0] if isinstance(inherited, tuple) else 0
    assert recv_one(conn).timestamp == (500 + now // MS, ecr)
    return conn


def test_synack_with_a_tsecr_we_never_sent_is_reset() -> None:
    conn = ts_syn_sent(now=10 * MS)
    out = send(conn, seg(seq=ISS_REMOTE, ack=L1, flags=SYN | ACK, timestamp=(7, 123)),
               now=20 * MS)
    assert [(o.flags, o.seq) for o in out] == [(RST, L1)]
    assert conn.state is State.SYN_SENT and conn.counters["TcpExtPAWSActive"] == 1
    out = send(conn, seg(seq=ISS_REMOTE, ack=L1, flags=SYN | ACK, timestamp=(7, 510)),
               now=20 * MS)
    assert conn.state is State.ESTABLISHED


def test_reuse_timestamps_only_with_timestamps() -> None:
    assert time_wait().reuse_timestamps() is None  # never reused by connect() (§3.4)
    tw = established(plain_options(timestamps=True))
    tw.shutdown_write(0)
    tw.on_segment(seg(flags=ACK | FIN, ack=L1 + 1, timestamp=(4242, 0)), 7 * MS)
    assert tw.state is State.TIME_WAIT and tw.reuse_timestamps() == (4242, 7 * MS)
    # the new incarnation drops a simultaneous-open SYN older than the inherited TS.Recent
    new = ts_syn_sent(now=8 * MS, ts_recent=tw.reuse_timestamps())
    recv_nothing_after(new, seg(seq=ISS_REMOTE + 99, ack=0, flags=SYN, timestamp=(4000, 0)))
    assert new.state is State.SYN_SENT
    new.on_segment(seg(seq=ISS_REMOTE + 99, ack=0, flags=SYN, timestamp=(5000, 0)), 9 * MS)
    assert new.state is State.SYN_RECEIVED


def test_inherited_ts_recent_does_not_paws_check_a_synack() -> None:
    """Linux tcp_rcv_synsent_state_process runs PAWS for a bare SYN only: the peer's new
    incarnation may start its TSval clock anywhere."""
    new = ts_syn_sent(now=8 * MS, ts_recent=(4242, 7 * MS))
    new.on_segment(seg(seq=ISS_REMOTE, ack=L1, flags=SYN | ACK, timestamp=(100, 508)), 9 * MS)
    assert new.state is State.ESTABLISHED and new.tcb.ts_recent == 100


# ====================================================================== hostile data
def test_contradictory_retransmission_never_changes_queued_bytes() -> None:
    conn = established()
    conn.on_segment(seg(seq=R1 + 4, payload=b"EFGH"), 0)  # out of order
    conn.on_segment(seg(seq=R1 + 2, payload=b"xxxxxxxx"), 0)  # contradicts EFGH
    assert conn.counters["TcpExtTCPOFOMerge"] == 1
    conn.on_segment(seg(seq=R1, payload=b"AB"), 0)
    assert conn.recv(100, 0) == b"ABxxEFGHxx"
    conn.on_segment(seg(seq=R1, payload=b"zzzzzzzzzzzz"), 0)  # rewrites delivered bytes
    assert conn.recv(100, 0) == b"zz"  # only the two new bytes beyond RCV.NXT count


def test_out_of_order_queue_is_bounded_in_ranges() -> None:
    conn = established(plain_options(ofo_max_ranges=4))
    for i in range(10):  # one-byte islands
        conn.on_segment(seg(seq=R1 + 10 + 2 * i, payload=b"i"), 0)
    assert len(conn.receiver.ofo) == 4 and conn.receiver.ofo.buffered == 4
    assert conn.counters["TcpExtTCPOFODrop"] == 6 and conn.counters["TcpExtTCPOFOQueue"] == 4


def test_data_beyond_the_window_is_taken_into_an_empty_queue_only() -> None:
    """Linux tcp_sequence (6.x): an in-order segment whose end passes the window is taken
    whole while the receive queue is empty, dropped whole behind unread data."""
    conn = established(plain_options(rcvbuf=1000))
    conn.on_segment(seg(payload=b"a" * 3000), 0)  # the window was 500
    assert conn.readable == 3000
    conn.on_segment(seg(seq=R1 + 3000, payload=b"b" * 10), 0)  # zero window: dropped
    assert conn.readable == 3000 and conn.counters["TcpExtBeyondWindow"] == 1
    out = conn.take_segments()
    assert out and out[-1].window == 0 and out[-1].ack == R1 + 3000


def test_zero_window_still_processes_acks() -> None:
    """A pure ACK at a zero window is processed (RFC 9293 §3.10.7.4 allowance); a data
    segment there is dropped whole, its ACK with it, while data waits unread (Linux)."""
    conn = established(plain_options(rcvbuf=1000))
    conn.on_segment(seg(payload=b"a" * 1000), 0)  # into an empty queue: taken whole
    conn.send(b"reply", 0)
    conn.take_segments()
    conn.on_segment(seg(seq=R1 + 1000, ack=L1 + 2, payload=b"more"), 0)
    assert conn.tcb.snd_una == L1 and conn.readable == 1000
    conn.on_segment(seg(seq=R1 + 1000, ack=L1 + 5), 0)
    assert conn.tcb.snd_una == L1 + 5 and conn.readable == 1000


def test_counters_report_deltas_and_reject_unknown_names() -> None:
    conn = established(quickacks_spent=True)
    conn.counters.take()
    conn.on_segment(seg(payload=b"x"), 0)  # in order: header prediction takes it
    assert conn.counters.take() == {"TcpInSegs": 1, "TcpExtTCPHPHits": 1}
    assert conn.counters.take() == {}
    with pytest.raises(KeyError):
        conn.counters.add("NotACounter")


def test_ack_acceptability_boundaries_rfc5961() -> None:
    conn = established()
    conn.send(b"x" * 100, 0)
    conn.take_segments()
    conn.on_segment(seg(ack=L1 + 100), 0)  # SND.UNA = L1 + 100, MAX.SND.WND = 65535
    low = L1 + 100 - 65535
    conn.on_segment(seg(ack=low, payload=b"ok"), MS)  # oldest acceptable ACK: data taken
    assert conn.readable == 2
    conn.on_segment(seg(seq=R1 + 2, ack=low - 1, payload=b"no"), 600 * MS)
    assert conn.readable == 2 and conn.counters["TcpExtTCPChallengeACK"] == 1
    # unsent: dropped with a challenge (tcp_ack: after(ack, snd_nxt))
    conn.on_segment(seg(seq=R1 + 2, ack=L1 + 101, payload=b"no"), 1200 * MS)
    assert conn.readable == 2 and conn.counters["TcpExtTCPChallengeACK"] == 2
    conn.on_segment(seg(seq=R1 + 2, ack=L1 + 100, payload=b"ok"), 1300 * MS)
    assert conn.readable == 4


def ts_time_wait() -> Connection:
    """TIME-WAIT with timestamps: TS.Recent 4242 (taken at 7 ms), RCV.NXT = R1 + 1."""
    conn = established(plain_options(timestamps=True))
    conn.shutdown_write(0)
    conn.on_segment(seg(flags=ACK | FIN, ack=L1 + 1, timestamp=(4242, 0)), 7 * MS)
    assert conn.state is State.TIME_WAIT
    return conn


def test_time_wait_syn_rules_with_timestamps_are_linuxs() -> None:
    """tcp_timewait_state_process: a SYN beyond RCV.NXT opens a new incarnation even
    when its TSval only equals TS.Recent; PAWS rejects an older TSval whatever the
    sequence number.  (Connection's own copy of the rule used to demand a newer TSval
    whenever timestamps were on; the host's, which production ran, did not.)"""
    conn = ts_time_wait()
    assert conn.time_wait_accepts_syn(seg(flags=SYN, seq=R1 + 100, ack=0, timestamp=(4242, 0)))
    assert conn.time_wait_accepts_syn(seg(flags=SYN, seq=R1 - 100, ack=0, timestamp=(4243, 0)))
    assert not conn.time_wait_accepts_syn(seg(flags=SYN, seq=R1 + 100, ack=0,
                                              timestamp=(4241, 0)))
    assert not conn.time_wait_accepts_syn(seg(flags=SYN | ACK, seq=R1 + 100, ack=0,
                                              timestamp=(4243, 0)))


def test_time_wait_object_answers_as_the_connection_did() -> None:
    conn = ts_time_wait()
    tw = TimeWait.of(conn)
    assert (tw.snd_nxt, tw.rcv_nxt, tw.ts_recent, tw.ts_recent_stamp) == (
        L1 + 1, R1 + 1, 4242, 7 * MS)
    assert tw.action(seg(flags=RST, seq=R1 + 1)) is TwAction.KILL
    assert tw.action(seg(flags=SYN, seq=R1 + 100, ack=0, timestamp=(5000, 0))) \
        is TwAction.REOPEN
    assert tw.action(seg(flags=ACK | FIN, seq=R1, ack=L1 + 1)) is TwAction.ACK
    assert tw.action(seg(flags=ACK, seq=R1 + 1, ack=L1 + 1)) is TwAction.DROP
    ack = tw.ack_for(seg(flags=ACK | FIN, seq=R1, ack=L1 + 1), 9 * MS)
    assert (ack.flags, ack.seq, ack.ack) == (ACK, L1 + 1, R1 + 1)
    assert ack.timestamp == ((9 + tw.ts_offset) & 0xFFFFFFFF, 4242)


def test_reuse_iss_is_snd_nxt_plus_65537_and_never_zero() -> None:
    assert reuse_iss(5) == 5 + 65537
    assert reuse_iss(2**32 - 65537) == 1  # wraps to 0: 0 means "pick one"
    assert reuse_iss(2**32 - 1) == 65536
