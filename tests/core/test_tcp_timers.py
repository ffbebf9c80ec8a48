"""Timers on the virtual clock: RTO (RFC 6298), delayed ACK, Nagle, persist, keepalive, PAWS."""

from __future__ import annotations

import errno

import pytest
from tcp_harness import (
    ACK,
    ISS_LOCAL,
    ISS_REMOTE,
    MS,
    RST,
    SECOND,
    Impairments,
    Net,
    established,
    plain_options,
    recv_nothing,
    recv_one,
    seg,
    send,
    spend_quickacks,
)

from rcunet.core.tcp import ConnectionFailed, Options, SendSpaceAvailable, State
from rcunet.core.tcp.rto import RtoEstimator, retransmits_timed_out

L1 = ISS_LOCAL + 1
R1 = ISS_REMOTE + 1


def rtt_100ms() -> object:
    """ESTABLISHED (passive) whose handshake measured an RTT of exactly 100 ms."""
    from rcunet.core.tcp import Connection

    syn = seg(seq=ISS_REMOTE, ack=0, flags=0x02, mss=1460)
    conn = Connection.accept_syn(syn, iss=ISS_LOCAL, now=0, options=plain_options())
    conn.take_segments()
    conn.on_segment(seg(), 100 * MS)
    conn.take_segments()
    return conn


# ====================================================================== RFC 6298
def test_rto_estimator_follows_linux() -> None:
    """tcp_rtt_estimator / tcp_set_rto: RTO = SRTT + max(4 mdev, rto_min), the floor on
    the variance term (RFC 6298 §2.4 floors the sum, at 1 s)."""
    est = RtoEstimator(SECOND, 200 * MS, 120 * SECOND)
    assert est.rto == SECOND  # RFC 6298 §2.1
    est.on_sample(100 * MS)  # SRTT = R, mdev = R/2: RTO = 3 R
    assert (est.srtt, est.rttvar, est.rto) == (100 * MS, 50 * MS, 300 * MS)
    est.on_sample(200 * MS)  # mdev = 3/4*50 + 1/4*|200-100|; SRTT = 7/8*100 + 1/8*200
    assert est.rttvar == 62_500_000 and est.srtt == 112_500_000
    assert est.rto == 112_500_000 + 4 * 62_500_000
    for _ in range(50):
        est.on_sample(1 * MS)
    # never below SRTT + rto_min (the variance term decays towards it)
    assert est.srtt < 2 * MS and 0 <= est.rto - est.srtt - 200 * MS < MS
    for _ in range(20):
        est.on_timeout()
    assert est.rto == 120 * SECOND  # RFC 6298 §2.5 cap


def test_a_steady_rtt_keeps_the_rto_at_srtt_plus_rto_min() -> None:
    est = RtoEstimator(SECOND, 200 * MS, 120 * SECOND)
    for _ in range(20):
        est.on_sample(100 * MS)
    assert est.rttvar < 5 * MS and est.rto == 300 * MS  # RFC 6298 would give 200 ms


def test_rto_variance_term_decays_once_per_round_trip() -> None:
    """Linux keeps the largest deviation of a round trip (mdev_max) and lowers rttvar by a
    quarter of the excess only when SND.UNA passes the round trip's end (rtt_seq)."""
    est = RtoEstimator(SECOND, 200 * MS, 120 * SECOND)
    est.on_sample(100 * MS, 1000, 2000)  # rtt_seq = 2000
    # inside the round trip: mdev = 3/4 * 50 + 1/4 * 400 ms, var = 4 mdev = 550 ms
    est.on_sample(500 * MS, 1500, 2000)
    assert est.rttvar == 137_500_000 and est.rto == est.srtt + 550 * MS
    est.on_sample(150 * MS, 1800, 2000)  # still inside: the variance term stays
    assert est.rto - est.srtt == 550 * MS
    est.on_sample(150 * MS, 2100, 3000)  # that round trip's largest deviation was it
    assert est.rto - est.srtt == 550 * MS
    est.on_sample(150 * MS, 3100, 4000)  # this one's was smaller: var -= a quarter of it
    assert 200 * MS < est.rto - est.srtt < 550 * MS


def test_linux_retries2_time_bound() -> None:
    assert retransmits_timed_out(15, 200 * MS, 120 * SECOND) == 924_600 * MS
    assert retransmits_timed_out(3, 200 * MS, 120 * SECOND) == 3 * SECOND


def test_retransmission_timeouts_back_off_exactly() -> None:
    conn = rtt_100ms()
    assert conn.rto.rto == 300 * MS
    conn.send(b"x" * 100, SECOND)
    first = recv_one(conn)
    times = []
    for _ in range(4):
        at = conn.next_deadline()
        conn.on_timer(at)
        out = recv_one(conn)
        assert (out.seq, bytes(out.payload)) == (first.seq, bytes(first.payload))
        times.append(at - SECOND)
    assert times == [300 * MS, 900 * MS, 2100 * MS, 4500 * MS]  # 0.3, +0.6, +1.2, +2.4
    assert conn.counters["TcpRetransSegs"] == 4 and conn.counters["TcpExtTCPTimeouts"] == 4
    # An ACK for the data ends the backoff; Karn: no sample from the retransmitted segment.
    conn.on_segment(seg(ack=L1 + 100), SECOND + 5 * SECOND)
    assert conn.next_deadline() is None and conn.rto.srtt == 100 * MS


def test_gives_up_with_etimedout_after_retries2() -> None:
    conn = established(plain_options(retries2=3))
    assert conn.rto.rto == 200 * MS
    conn.send(b"data", 0)
    recv_one(conn)
    expiries = []
    while conn.state is State.ESTABLISHED:
        at = conn.next_deadline()
        conn.on_timer(at)
        expiries.append((at, len(conn.take_segments())))
    # retransmissions at 0.2, 0.6, 1.4 s; the expiry at 3.0 s reaches Linux's bound
    assert expiries == [(200 * MS, 1), (600 * MS, 1), (1400 * MS, 1), (3000 * MS, 0)]
    assert ConnectionFailed(errno.ETIMEDOUT) in conn.take_events()
    assert conn.counters["TcpExtTCPAbortOnTimeout"] == 1
    with pytest.raises(TimeoutError):
        conn.recv(1, 4 * SECOND)


def test_timestamps_give_rtt_samples() -> None:
    net = Net(delay=25 * MS)
    net.run(until=SECOND)
    assert net.client.rto.srtt == 50 * MS  # the SYN,ACK's TSecr, in milliseconds
    net.client.send(b"ping", net.now)
    net.flush()
    net.run(until=SECOND + 100 * MS)
    # the server's first data is ACKed at once (quick-ack mode): R = 50 ms
    assert net.client.rto.srtt == 50 * MS
    assert net.server is not None
    spend_quickacks(net.server)
    net.client.send(b"ping", net.now)  # within an RTO of the first: no new quick ACKs
    net.flush()
    net.run(until=2 * SECOND)
    # past quick-ack mode the ping's ACK waits 40 ms: R = 90 ms, SRTT = 7/8 * 50 + 1/8 * 90
    assert net.client.rto.srtt == 55 * MS


# ====================================================================== delayed ACK
def test_single_segment_is_acked_after_40ms() -> None:
    conn = established(quickacks_spent=True)
    recv_nothing_after = send(conn, seg(payload=b"a" * 100), now=0)
    assert recv_nothing_after == []
    assert conn.next_deadline() == 40 * MS
    conn.on_timer(40 * MS)
    out = recv_one(conn)
    assert (out.flags, out.ack) == (ACK, R1 + 100)
    assert conn.counters["TcpExtDelayedACKs"] == 1


def test_every_second_full_segment_is_acked_at_once() -> None:
    """While the buffer has room beyond the window offered (the window does not shrink;
    with the whole buffer offered, unread data holds the ACK until recv: bulk_acks tests)."""
    conn = established(plain_options(rcvbuf=1 << 20, window_scaling=True),
                       quickacks_spent=True)
    assert send(conn, seg(payload=b"a" * 1460)) == []
    out = send(conn, seg(seq=R1 + 1460, payload=b"b" * 1460))
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1 + 2920)]
    assert conn.next_deadline() is None


def test_out_of_order_segment_is_acked_at_once() -> None:
    conn = established()
    out = send(conn, seg(seq=R1 + 1000, payload=b"z" * 10))
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1)]


# ====================================================================== Nagle
def test_nagle_holds_small_segments_while_data_is_in_flight() -> None:
    conn = established()
    conn.send(b"a", 0)
    assert bytes(recv_one(conn).payload) == b"a"
    conn.send(b"b", 0)
    conn.send(b"c", 0)
    recv_nothing(conn)
    conn.on_segment(seg(ack=L1 + 1), 10 * MS)
    assert bytes(recv_one(conn).payload) == b"bc"


def test_nodelay_sends_small_segments_at_once() -> None:
    conn2 = established(plain_options(nodelay=True))
    conn2.send(b"a", 0)
    first = conn2.take_segments()
    conn2.send(b"b", 0)
    second = conn2.take_segments()
    assert [bytes(o.payload) for o in first + second] == [b"a", b"b"]


def test_full_segments_are_not_delayed_by_nagle() -> None:
    conn = established()
    conn.send(b"a", 0)
    recv_one(conn)
    conn.send(b"x" * 3000, 0)
    assert [len(o.payload) for o in conn.take_segments()] == [1460, 1460]  # 80 bytes wait


# ====================================================================== zero window, persist
def test_zero_window_probes_back_off_and_resume() -> None:
    conn = rtt_100ms()  # RTO 300 ms
    conn.on_segment(seg(window=0), 200 * MS)
    conn.send(b"q" * 500, 200 * MS)
    recv_nothing(conn)
    probes = []
    for _ in range(4):
        at = conn.next_deadline()
        conn.on_timer(at)
        out = recv_one(conn)
        assert out.seq == ISS_LOCAL and not out.payload  # SND.UNA - 1: forces an ACK
        probes.append(at - 200 * MS)
        conn.on_segment(seg(window=0), at + 100 * MS)  # the peer answers: still closed
        recv_nothing(conn)
    assert probes == [300 * MS, 900 * MS, 2100 * MS, 4500 * MS]
    assert conn.counters["TcpExtTCPWinProbe"] == 4
    assert conn.state is State.ESTABLISHED  # a peer that answers is never given up on
    conn.on_segment(seg(window=8192), 5 * SECOND)
    out = recv_one(conn)
    assert len(out.payload) == 500 and out.seq == L1


def test_peer_keeps_window_closed_forever_without_growing_memory() -> None:
    net = Net(server_opts=Options(rcvbuf=4096))
    net.run(until=SECOND)
    sent = 0
    for _ in range(20):
        sent += net.client.send(b"m" * 100_000, net.now)
        net.flush()
        net.run(until=net.now + 60 * SECOND)
    assert net.server.readable <= 4096 and net.client.unacked <= Options().sndbuf
    assert net.client.state is State.ESTABLISHED
    assert net.client.counters["TcpExtTCPWinProbe"] > 3
    got = bytearray()
    while len(got) < sent:
        got += net.server.recv(1 << 20, net.now) if net.server.readable else b""
        net.flush()
        if not net.step():
            break
    assert bytes(got) == b"m" * sent


def test_send_space_available_after_ack() -> None:
    conn = established(plain_options(sndbuf=1000))
    assert conn.send(b"x" * 1000, 0, eor=True) == 1000
    assert conn.send(b"x" * 500, 0) == 0  # a new skb past the buffer: the writer waits
    conn.take_segments()
    conn.on_segment(seg(ack=L1 + 1000), 10 * MS)
    assert SendSpaceAvailable(1000) in conn.take_events()


# ====================================================================== keepalive
def test_keepalive_probes_then_etimedout() -> None:
    opts = plain_options(keepalive=True, keepalive_time=10 * SECOND,
                         keepalive_intvl=SECOND, keepalive_probes=3)
    conn = established(opts)
    times = []
    resets = []
    while conn.state is State.ESTABLISHED:
        at = conn.next_deadline()
        conn.on_timer(at)
        for out in conn.take_segments():
            if out.flags & RST:
                resets.append((at, out.seq, out.flags))
                continue
            assert out.seq == ISS_LOCAL and out.flags == ACK and not out.payload
            times.append(at)
    assert times == [10 * SECOND, 11 * SECOND, 12 * SECOND]
    # giving up sends RST (Linux tcp_keepalive_timer: tcp_send_active_reset)
    assert resets == [(13 * SECOND, ISS_LOCAL + 1, RST | ACK)]
    assert conn.counters["TcpExtTCPKeepAlive"] == 3
    assert ConnectionFailed(errno.ETIMEDOUT) in conn.take_events()


def test_keepalive_answer_resets_the_count() -> None:
    opts = plain_options(keepalive=True, keepalive_time=10 * SECOND,
                         keepalive_intvl=SECOND, keepalive_probes=2)
    conn = established(opts)
    conn.on_timer(10 * SECOND)
    recv_one(conn)
    conn.on_segment(seg(), 10 * SECOND + 5 * MS)  # the peer's ACK
    conn.on_timer(conn.next_deadline())
    assert conn.state is State.ESTABLISHED
    assert conn.next_deadline() == 20 * SECOND + 5 * MS


# ====================================================================== PAWS (RFC 7323)
def test_paws_drops_old_timestamps() -> None:
    conn = established(plain_options(timestamps=True))
    assert conn.tcb.ts_ok and conn.tcb.snd_mss == 1448
    conn.on_segment(seg(payload=b"new", timestamp=(2000, 0)), 0)
    conn.take_segments()  # its quick ACK
    assert conn.tcb.ts_recent == 2000
    out = send(conn, seg(seq=R1 + 3, payload=b"old", timestamp=(1500, 0)), now=MS)
    assert [(o.flags, o.ack) for o in out] == [(ACK, R1 + 3)]
    assert conn.readable == 3 and conn.counters["TcpExtPAWSEstab"] == 1
    # timestamps wrap modulo 2**32: 0x10 is newer than 0xFFFFFFF0
    conn.tcb.ts_recent = 0xFFFFFFF0
    conn.on_segment(seg(seq=R1 + 3, payload=b"wrap", timestamp=(0x10, 0)), 2 * MS)
    assert conn.readable == 7


def test_paws_ignores_stale_ts_recent_after_24_days() -> None:
    conn = established(plain_options(timestamps=True))
    conn.on_segment(seg(payload=b"a", timestamp=(2000, 0)), 0)
    later = 25 * 86400 * SECOND
    conn.on_segment(seg(seq=R1 + 1, payload=b"b", timestamp=(5, 0)), later)
    assert conn.readable == 2


def test_rst_is_not_subject_to_paws() -> None:
    conn = established(plain_options(timestamps=True))
    conn.on_segment(seg(payload=b"a", timestamp=(2000, 0)), 0)
    conn.on_segment(seg(seq=R1 + 1, flags=0x04, timestamp=(1, 0)), MS)
    assert conn.state is State.CLOSED


# ====================================================================== window scaling, buffers
def test_window_scaling_negotiated_and_applied() -> None:
    net = Net(client_opts=Options(rcvbuf=1 << 20), server_opts=Options(rcvbuf=1 << 20))
    net.run(until=SECOND)
    c, s = net.client, net.server
    assert c.tcb.rcv_wscale == 5 and s.tcb.snd_wscale == 5
    # the first scaled segment offers rcv_ssthresh, the SYN's 65535, aligned up to the
    # scale (2048 << 5): the window then grows with the data (tcp_grow_window)
    assert s.tcb.snd_wnd == 65536


def test_no_scaling_when_one_side_does_not_offer() -> None:
    net = Net(client_opts=Options(window_scaling=False), server_opts=Options(rcvbuf=1 << 20))
    net.run(until=SECOND)
    assert net.server.tcb.rcv_wscale == 0 and net.server.tcb.snd_wscale == 0
    assert net.client.tcb.snd_wnd <= 0xFFFF


def test_receive_window_update_after_reading() -> None:
    net = Net(server_opts=Options(rcvbuf=8192), imp=Impairments())
    net.run(until=SECOND)
    data = bytes(range(256)) * 200  # 51200 bytes through an 8 KB window
    sent = net.client.send(data, net.now)
    net.flush()
    got = bytearray()
    for _ in range(100_000):
        if net.server.readable:
            got += net.server.recv(3000, net.now)
            net.flush()
        if sent < len(data):
            sent += net.client.send(data[sent:], net.now)
            net.flush()
        if len(got) == len(data) or not net.step():
            break
    assert bytes(got) == data
    assert net.now < 10 * SECOND  # window updates, not persist probes, kept it moving


def test_setting_nodelay_flushes_held_data() -> None:
    conn = established()
    conn.send(b"a", 0)
    recv_one(conn)
    conn.send(b"b", 0)
    recv_nothing(conn)  # Nagle holds it
    conn.update_options(MS, nodelay=True)
    assert bytes(recv_one(conn).payload) == b"b"


def test_enabling_keepalive_on_a_live_connection() -> None:
    conn = established()
    assert conn.next_deadline() is None
    conn.update_options(5 * SECOND, keepalive=True, keepalive_time=60 * SECOND)
    # a full idle time from the setsockopt (Linux tcp_set_keepalive), as the host did
    assert conn.next_deadline() == 65 * SECOND
    conn.update_options(6 * SECOND, keepalive=False)
    assert conn.next_deadline() is None
    with pytest.raises(OSError):
        conn.update_options(0, rcvbuf=1)


def test_silent_peer_behind_a_zero_window_is_given_up_on() -> None:
    conn = established(plain_options(retries2=4))
    conn.on_segment(seg(window=0), 0)
    conn.send(b"q" * 10, 0)
    probes = 0
    while conn.state is State.ESTABLISHED:
        conn.on_timer(conn.next_deadline())
        probes += len(conn.take_segments())
    assert probes == 4  # tcp_retries2 unanswered probes, then ETIMEDOUT
    assert ConnectionFailed(errno.ETIMEDOUT) in conn.take_events()


def test_options_from_tuning_use_linux_sysctl_names() -> None:
    from rcunet.tuning import Tuning

    opts = Options.from_tuning(Tuning(tcp_sack=False, tcp_fin_timeout=30.0), mss=1400)
    assert not opts.sack and opts.mss == 1400 and opts.fin_timeout == 30 * SECOND
    assert opts.rcvbuf == Tuning().tcp_rmem[1] and opts.congestion_control == "cubic"


def test_options_take_switches_as_linux_writes_them() -> None:
    """``sysctl -w net.ipv4.tcp_timestamps=0`` stores an int; a socket option's value is
    one too: the switch is a bool in Options either way (the compiled build types it)."""
    from rcunet.tuning import Tuning

    opts = Options.from_tuning(Tuning(tcp_timestamps=0, tcp_sack=1, tcp_window_scaling=0),
                               nodelay=1, keepalive=0)
    switches = (opts.timestamps, opts.sack, opts.window_scaling, opts.nodelay, opts.keepalive)
    assert switches == (False, True, False, True, False)
    assert all(type(value) is bool for value in switches)


def test_paws_tolerates_one_tick_and_reordered_pure_acks_like_linux() -> None:
    conn = established(plain_options(timestamps=True))
    conn.on_segment(seg(payload=b"a", timestamp=(2000, 0)), 0)
    conn.take_segments()
    conn.on_segment(seg(seq=R1 + 1, payload=b"b", timestamp=(1999, 0)), MS)  # TCP_PAWS_WINDOW
    assert conn.readable == 2 and conn.counters["TcpExtPAWSEstab"] == 0
    conn.on_segment(seg(seq=R1 + 2, timestamp=(2000, 0)), 2 * MS)  # pure ACK: SND.WL1 = R1+2
    # a reordered pure duplicate ACK, 10 ms older, changing nothing: tcp_disordered_ack
    conn.on_segment(seg(seq=R1 + 2, timestamp=(1990, 0)), 2 * MS)
    assert conn.counters["TcpExtPAWSEstab"] == 0
    # ... but not if it would change the window
    conn.on_segment(seg(seq=R1 + 2, window=0, timestamp=(1990, 0)), 2 * MS)  # closes it
    assert conn.counters["TcpExtPAWSEstab"] == 1
    # the same age on a data segment is an old duplicate: dropped
    conn.on_segment(seg(seq=R1 + 2, payload=b"c", timestamp=(1990, 0)), 3 * MS)
    assert conn.readable == 2 and conn.counters["TcpExtPAWSEstab"] == 2


def test_window_shrunk_to_zero_under_flight_is_probed_not_timed_out() -> None:
    conn = established()
    conn.send(b"x" * 1000, 0)
    recv_one(conn)
    now = 0
    for _ in range(40):  # the peer answers every retransmission: window zero, nothing acked
        now = conn.next_deadline()
        conn.on_timer(now)
        conn.take_segments()
        conn.on_segment(seg(window=0), now + MS)
    assert now > 1000 * SECOND  # far beyond tcp_retries2's 924.6 s
    assert conn.state is State.ESTABLISHED
    silent_from = now
    while conn.state is State.ESTABLISHED:  # then it falls silent: 2 * TCP_RTO_MAX later, give up
        now = conn.next_deadline()
        conn.on_timer(now)
    assert 240 * SECOND < now - silent_from <= 360 * SECOND
    assert ConnectionFailed(errno.ETIMEDOUT) in conn.take_events()


def test_rto_resends_bytes_of_a_view_the_caller_released() -> None:
    """``send`` queues a large part of a ``bytes`` object by reference; the caller may
    release its view when ``send`` returns, and the retransmission still reads the
    bytes (it raised "operation forbidden on released memoryview object")."""
    conn = established()
    data = bytes(range(256)) * 16
    with memoryview(data)[1000:] as view:
        assert conn.send(view, 0) == len(view)
    first = conn.take_segments()
    assert first
    conn.on_timer(conn.next_deadline())
    again = conn.take_segments()
    assert again and bytes(again[0].payload) == bytes(first[0].payload)
    assert bytes(again[0].payload) == data[1000:1000 + len(again[0].payload)]
