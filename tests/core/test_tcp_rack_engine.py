"""RACK-TLP and PRR in the engine (the default, net.ipv4.tcp_recovery=1): loss by time,
the reordering window and timer, the tail loss probe, PRR's cwnd during recovery and
CWR, and tcp_recovery=0 falling back to duplicate ACKs."""

from __future__ import annotations

from tcp_harness import ISS_LOCAL, MS, established, plain_options, seg

from rcunet.core.tcp.recovery import RACK

L1 = ISS_LOCAL + 1
MSS = 1460
RTT = 10 * MS


def sender(segments: int = 10, peer_mss: int = MSS, **kw: object):
    """SACK on, one round trip measured (srtt = min_rtt = 10 ms), then ``segments``
    full segments out at t = RTT."""
    conn = established(plain_options(sack=True, nodelay=True, mss=peer_mss, **kw),
                       peer_mss=peer_mss)
    conn.send(b"x" * MSS, 0)
    conn.take_segments()
    conn.on_segment(seg(ack=L1 + MSS), RTT)
    conn.take_segments()
    conn.cc.set_cwnd(max(conn.cc.cwnd, segments * MSS))
    conn.send(b"y" * (segments * MSS), RTT)
    out = conn.take_segments()
    assert len(out) == segments
    return conn


def at(i: int) -> int:
    """The first byte of the i-th segment after the measured one."""
    return L1 + (i + 1) * MSS


def sack(conn, now: int, ack: int, *blocks: tuple[int, int]) -> list:
    conn.on_segment(seg(ack=ack, sack_blocks=tuple((at(a), at(b)) for a, b in blocks)), now)
    return conn.take_segments()


def test_rack_waits_out_the_reordering_window_then_retransmits() -> None:
    conn = sender()
    # segment 1 SACKed one RTT after it was sent; segment 0, sent before it, is not ACKed
    assert sack(conn, 2 * RTT, at(0), (1, 2)) == []  # within RACK.rtt + reo_wnd
    reo = conn.timers.reo_at
    # reo_wnd = min(min_rtt / 4, srtt); the timer adds TCP_TIMEOUT_MIN (2 ms)
    reo_wnd_us = min(RTT // 4, conn.rto.srtt) // 1000
    assert reo == 2 * RTT + (reo_wnd_us + 2000) * 1000
    conn.on_timer(reo)
    out = conn.take_segments()
    assert out[0].seq == at(0)
    assert conn._recovery is RACK
    assert conn.counters["TcpExtTCPSackRecovery"] == 1


def test_three_sacked_segments_mark_the_hole_lost_at_once() -> None:
    conn = sender()
    out = sack(conn, 2 * RTT, at(0), (1, 4))  # sacked_out reaches tcp_reordering (3)
    assert out and out[0].seq == at(0)
    assert conn.counters["TcpExtTCPFastRetrans"] == 1


def test_reordering_inside_the_window_is_no_loss() -> None:
    conn = sender()
    sack(conn, 2 * RTT, at(0), (1, 2))
    out = sack(conn, 2 * RTT + MS, at(2))  # the "hole" arrives late: reordering
    assert all(o.seq >= at(10) for o in out)  # new data only
    assert conn._recovery is None and conn.counters["TcpRetransSegs"] == 0
    assert conn.counters["TcpExtTCPSACKReorder"] == 1
    assert conn.timers.reo_at is None or conn.loss.log.lost_count == 0


def test_tail_loss_probe_fires_at_two_srtt_and_retransmits_the_last_segment() -> None:
    conn = sender(segments=4)
    sack(conn, 2 * RTT, at(2))  # segments 0 and 1 ACKed; 2 and 3 are the lost tail
    srtt_us = conn.rto.srtt // 1000
    # 2 * srtt, plus TCP_TIMEOUT_MIN as more than one segment is out
    assert conn.timers.tlp_at == 2 * RTT + (2 * srtt_us + 2000) * 1000
    assert conn.next_deadline() == conn.timers.tlp_at
    conn.on_timer(conn.timers.tlp_at)
    out = conn.take_segments()
    assert [(o.seq, len(o.payload)) for o in out] == [(at(3), MSS)]
    assert conn.counters["TcpExtTCPLossProbes"] == 1
    # the probe repaired one loss: its ACK (plus one above it) ends the episode with a
    # cwnd reduction (tcp_process_tlp_ack: CWR entered and ended at once)
    ssthresh_before = conn.cc.ssthresh
    conn.send(b"z" * MSS, 3 * RTT)
    conn.take_segments()
    sack(conn, 4 * RTT, at(5))
    assert conn.counters["TcpExtTCPLossProbeRecovery"] == 1
    assert conn.cc.ssthresh < ssthresh_before and conn.cc.cwnd == conn.cc.ssthresh


def test_probe_of_new_data_when_the_window_allows() -> None:
    conn = sender(segments=4)
    conn.cc.set_cwnd(4 * MSS)
    conn.send(b"n" * MSS, 2 * RTT)  # cwnd-limited: waits
    assert conn.take_segments() == []
    conn.on_timer(conn.timers.tlp_at)
    out = conn.take_segments()
    assert [o.seq for o in out] == [at(4)]  # new data, not a retransmission
    assert conn.counters["TcpRetransSegs"] == 0


def test_prr_spreads_the_reduction_over_the_acks() -> None:
    conn = sender(segments=20, congestion_control="reno")
    conn.send(b"m" * (20 * MSS), RTT)  # more to send than cwnd lets out
    assert conn.take_segments() == []
    prior_cwnd = conn.cc.cwnd
    sent = [len(sack(conn, 2 * RTT, at(0), (1, 4)))]  # enters recovery: one retransmission
    ssthresh = conn.cc.ssthresh
    assert ssthresh == prior_cwnd // 2 // MSS * MSS or ssthresh == prior_cwnd // 2
    for k in range(5, 11):  # while in flight stays above ssthresh
        sent.append(len(sack(conn, 2 * RTT + k * MS, at(0), (1, k))))
    delivered = 9  # segments 1..9 SACKed
    # RFC 9937's proportional part, in segments as Linux counts:
    # ceil(ssthresh * prr_delivered / prior_cwnd) in total
    assert sum(sent) == -(-(ssthresh // MSS) * delivered // (prior_cwnd // MSS))
    # the retransmission and one new segment, then one for every two delivered
    assert sent == [2, 0, 1, 0, 1, 0, 1]
    for k in range(11, 20):  # the rest of the round
        sent.append(len(sack(conn, 2 * RTT + k * MS, at(0), (1, k))))
    # in flight down to ssthresh: packet conservation, one out per one delivered
    assert conn.loss.log.segments_in_flight() == ssthresh // MSS
    assert sent[-1] == 1 and conn.cc.cwnd == ssthresh
    # the cumulative ACK ends recovery; cwnd settles at ssthresh (tcp_end_cwnd_reduction)
    conn.on_segment(seg(ack=conn.tcb.snd_max), 4 * RTT)
    assert conn._recovery is None and conn.cc.cwnd == ssthresh


def test_cwr_reduces_with_prr_and_ends_at_ssthresh() -> None:
    conn = sender(segments=10, congestion_control="reno")
    conn.loss.enter_cwr(conn, 2 * RTT)  # what an ECN echo does (tcp_enter_cwr)
    ssthresh = conn.cc.ssthresh
    assert conn.loss.cwr and conn.cc.cwnd > ssthresh
    conn.loss.enter_cwr(conn, 2 * RTT)  # once per window
    assert conn.cc.ssthresh == ssthresh
    conn.on_segment(seg(ack=conn.tcb.snd_max), 3 * RTT)
    conn.take_segments()
    conn.on_segment(seg(ack=conn.tcb.snd_max), 4 * RTT)
    assert not conn.loss.cwr and conn.cc.cwnd == ssthresh


def test_tcp_recovery_zero_counts_duplicate_acks() -> None:
    conn = sender(recovery=0)
    assert sack(conn, 2 * RTT, at(0), (1, 2)) == []
    assert conn.timers.reo_at is None  # no RACK timer
    assert sack(conn, 2 * RTT, at(0), (1, 3)) == [] or conn._recovery is None
    out = sack(conn, 2 * RTT, at(0), (1, 4))  # RFC 6675 IsLost: three segments above
    assert out[0].seq == at(0) and conn._recovery is not RACK


def test_hystart_ack_train_ends_slow_start() -> None:
    """CUBIC's HyStart (tcp_cubic hystart_update): from 16 segments on, ACKs closely
    spaced for longer than half the minimum RTT show the window fills the path; slow
    start ends with ssthresh at the current cwnd."""
    conn = sender(segments=24)  # cwnd 24 segments, all sent at t = RTT
    assert conn.cc.in_slow_start
    now = 2 * RTT
    for i in range(24):  # one ACK per segment, 0.5 ms apart: a 12 ms train
        conn.on_segment(seg(ack=at(i) + MSS), now + i * MS // 2)
        conn.take_segments()
        if conn.cc.hystart.found:
            break
    assert conn.cc.hystart.found
    assert abs(conn.cc.ssthresh - conn.cc.cwnd) < MSS and not conn.cc.in_slow_start
    assert i * MS // 2 > RTT // 2  # after half the minimum RTT, not before


def test_dsack_of_every_retransmission_undoes_the_reduction() -> None:
    """tcp_try_undo_dsack: the retransmitted segment is reported twice -- the original
    was only reordered -- so cwnd and ssthresh go back to what they were."""
    conn = sender()
    cwnd, ssthresh = conn.cc.cwnd, conn.cc.ssthresh
    out = sack(conn, 2 * RTT, at(0), (1, 4))
    assert out[0].seq == at(0) and conn.cc.cwnd < cwnd
    # the original arrives late, then the retransmission: a DSACK below the cumulative
    # ACK (sooner than min_rtt after the retransmission: RACK does not take it)
    conn.on_segment(seg(ack=at(4), sack_blocks=((at(0), at(1)),)), 2 * RTT + MS)
    assert conn.counters["TcpExtTCPDSACKUndo"] == 1
    assert conn._recovery is None
    assert conn.cc.cwnd >= cwnd and conn.cc.ssthresh == max(ssthresh, cwnd * 3 // 4)


def test_timestamps_show_the_original_arrived_full_undo() -> None:
    """tcp_try_undo_recovery with tcp_packet_delayed: the ACK that ends recovery echoes
    a timestamp older than the first retransmission."""
    conn = sender(timestamps=True, peer_mss=MSS + 12)  # segments of MSS bytes still
    cwnd = conn.cc.cwnd
    old_ts = conn.tcb.ts_val(RTT)  # what the originals carried
    conn.on_segment(seg(ack=at(0), sack_blocks=((at(1), at(4)),),
                        timestamp=(2000, old_ts)), 2 * RTT)
    conn.take_segments()
    assert conn._recovery is RACK and conn.cc.cwnd < cwnd
    conn.on_segment(seg(ack=conn.tcb.snd_max, timestamp=(2001, old_ts)), 3 * RTT)
    assert conn.counters["TcpExtTCPFullUndo"] == 1
    assert conn._recovery is None and conn.cc.cwnd >= cwnd


def test_recovery_without_proof_is_not_undone() -> None:
    conn = sender(timestamps=True, peer_mss=MSS + 12)  # segments of MSS bytes still
    sack(conn, 2 * RTT, at(0), (1, 4))
    ssthresh = conn.cc.ssthresh
    conn.on_segment(seg(ack=conn.tcb.snd_max, timestamp=(2001, conn.tcb.ts_val(3 * RTT))),
                    3 * RTT)
    assert conn.counters["TcpExtTCPFullUndo"] == 0 and conn.cc.cwnd == ssthresh


def test_dsack_after_reordering_widens_the_window() -> None:
    """tcp_rack_update_reo_wnd: once reordering was seen, a DSACK (a retransmission that
    was not needed) widens reo_wnd by a step of min_rtt/4, at most once a round trip,
    and the wider window persists for 16 recoveries."""
    conn = sender()
    sack(conn, 2 * RTT, at(0), (1, 2))
    sack(conn, 2 * RTT + MS, at(2))  # reordering seen
    assert conn.loss.reord_seen and conn.loss.rack.reo_wnd_steps == 1
    sack(conn, 2 * RTT + 2 * MS, at(2), (3, 4))
    conn.on_timer(conn.timers.reo_at)  # segment 2 waited out the window: resent
    assert conn.take_segments()[0].seq == at(2)
    # it was only late: the original and the copy both arrive, the copy DSACKed
    conn.on_segment(seg(ack=at(4), sack_blocks=((at(2), at(3)),)), 3 * RTT)
    assert conn.counters["TcpExtTCPDSACKRecv"] == 1
    assert conn.loss.rack.reo_wnd_steps == 2 and conn.loss.rack.reo_wnd_persist == 16
    reo_wnd = conn.loss.rack.reo_wnd(reord_seen=True, ca_state=conn.loss.ca_state(),
                                     sacked_out=0, reordering=3,
                                     min_rtt_us=conn.loss.min_rtt_us, srtt_us=10**9)
    assert reo_wnd == 2 * (conn.loss.min_rtt_us // 4)


def test_bogus_sack_blocks_and_dsack_floods_are_counted_not_believed() -> None:
    conn = sender()
    # beyond SND.NXT, reversed, below SND.UNA: discarded (tcp_is_sackblock_valid)
    conn.on_segment(seg(ack=at(1), sack_blocks=((at(20), at(22)), (at(5), at(3)))),
                    2 * RTT)
    assert conn.counters["TcpExtTCPSACKDiscard"] == 2
    assert conn.scoreboard.sacked_bytes == 0
    # DSACKs of data never retransmitted: more duplicates than retransmissions
    for i in range(5):
        conn.on_segment(seg(ack=at(1), sack_blocks=((at(0), at(1)),)), 2 * RTT + i * MS)
    assert conn.counters["TcpExtTCPDSACKIgnoredDubious"] == 5
    assert conn.loss.dsack_dups == 0 and not conn.loss.rack.dsack_seen
    assert conn._recovery is None


def test_a_retransmission_after_new_data_in_the_same_microsecond_is_sent_after() -> None:
    """On the virtual clock new data and a retransmission can share a timestamp; RACK's
    tie-break by sequence would call the retransmission older, and a SACK of the new
    data would mark it lost again at once."""
    from rcunet.core.tcp.rack import sent_after
    from rcunet.core.tcp.sent_log import SentLog

    log = SentLog()
    log.sent(1000, 2000, 50, False)
    log.sent(5000, 6000, 70, False)  # new data
    log.sent(1000, 2000, 70, True)  # then the retransmission, same microsecond
    new, resent = sorted(log, key=lambda s: s.seq, reverse=True)
    assert sent_after(resent.xmit_time, new.xmit_time, resent.end, new.end)
    assert [s.seq for s in log] == [5000, 1000]  # send order
