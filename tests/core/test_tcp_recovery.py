"""Loss recovery: NewReno fast retransmit/recovery (RFC 5681/6582), SACK (RFC 2018/6675), CUBIC."""

from __future__ import annotations

import math

from tcp_harness import (
    ACK,
    ISS_LOCAL,
    ISS_REMOTE,
    MS,
    SECOND,
    established,
    plain_options,
    recv_one,
    seg,
)

from rcunet.core.tcp.congestion import Cubic, NewReno, create
from rcunet.core.tcp.congestion.cubic import CUBE_FACTOR, cubic_root
from rcunet.core.tcp.prr import CaState
from rcunet.core.tcp.reassembly import Assembler
from rcunet.core.tcp.recovery import NEWRENO
from rcunet.core.tcp.sack import ReceiverBlocks, Scoreboard

L1 = ISS_LOCAL + 1
R1 = ISS_REMOTE + 1
MSS = 1460


def sender(**kw: object):
    conn = established(plain_options(**kw))
    conn.send(bytes(range(256)) * 120, 0)  # 30720 bytes; IW = 10 segments go out
    out = conn.take_segments()
    assert [o.seq for o in out] == [L1 + i * MSS for i in range(10)]
    return conn


def dupack(conn, now: int, **kw: object) -> list:
    conn.on_segment(seg(ack=L1, **kw), now)
    return conn.take_segments()


# ====================================================================== NewReno
def test_three_dupacks_trigger_fast_retransmit() -> None:
    conn = sender(congestion_control="reno")
    # RFC 3042 limited transmit: each of the first two dupacks releases one new segment
    first, second = dupack(conn, MS), dupack(conn, 2 * MS)
    assert [o.seq for o in first + second] == [L1 + 10 * MSS, L1 + 11 * MSS]
    assert conn.cc.cwnd == 10 * MSS  # ... without touching cwnd
    out = dupack(conn, 3 * MS)
    assert [(o.seq, len(o.payload)) for o in out] == [(L1, MSS)]
    assert conn.cc.ssthresh == 6 * MSS  # RFC 5681 eq. 4: FlightSize (12 segments) / 2
    assert conn.cc.cwnd == 9 * MSS  # ssthresh + 3 SMSS
    assert conn.counters["TcpExtTCPFastRetrans"] == 1
    assert conn.counters["TcpExtTCPRenoRecovery"] == 1


def test_newreno_inflates_then_handles_partial_and_full_ack() -> None:
    conn = sender(congestion_control="reno")
    for i in range(3):
        dupack(conn, (i + 1) * MS)
    # more dupacks inflate cwnd by one SMSS each; new data goes once cwnd > flight
    sent = []
    for i in range(5):
        sent += dupack(conn, (10 + i) * MS)
    assert conn.cc.cwnd == 14 * MSS
    assert [o.seq for o in sent] == [L1 + 12 * MSS, L1 + 13 * MSS]  # once cwnd > flight
    # partial ACK (segment 4 was also lost): retransmit it at once (RFC 6582 §3.2 step 3)
    conn.on_segment(seg(ack=L1 + 4 * MSS), 30 * MS)
    out = conn.take_segments()
    assert out[0].seq == L1 + 4 * MSS and len(out[0].payload) == MSS
    # deflated: cwnd = 14 - 4 acked + 1 = 11 SMSS over 10 in flight -> one new segment
    assert conn.cc.cwnd == 11 * MSS and [o.seq for o in out[1:]] == [L1 + 14 * MSS]
    assert conn._recovery is NEWRENO
    # full ACK beyond "recover" (12 segments were out at the loss): leave recovery,
    # cwnd = min(ssthresh, max(FlightSize, SMSS) + SMSS) with 3 segments still in flight
    conn.on_segment(seg(ack=L1 + 12 * MSS), 60 * MS)
    assert conn._recovery is None
    assert conn.cc.cwnd == 4 * MSS


def test_no_second_fast_retransmit_for_data_before_recover() -> None:
    conn = sender(congestion_control="reno")
    for i in range(3):
        dupack(conn, (i + 1) * MS)
    conn.on_timer(conn.next_deadline())  # RTO during recovery
    conn.take_segments()
    for i in range(4):  # dupacks for data sent before the timeout: RFC 6582 step 2
        dupack(conn, 2 * SECOND + i * MS)
    assert conn.counters["TcpExtTCPFastRetrans"] == 1


def test_window_update_is_not_a_dupack() -> None:
    conn = sender(congestion_control="reno")
    for i, w in enumerate((60000, 50000, 40000)):
        dupack(conn, (i + 1) * MS, window=w)
    assert conn.counters["TcpExtTCPFastRetrans"] == 0


# ====================================================================== SACK (RFC 6675)
# tcp_recovery=0: duplicate ACKs and RFC 6675's IsLost decide, as Linux without RACK
# (test_tcp_rack_engine has the default, RACK-TLP with PRR).
def blocks(*segs: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    return tuple((L1 + a * MSS, L1 + b * MSS) for a, b in segs)


def test_sack_recovery_retransmits_every_hole_once() -> None:
    conn = sender(sack=True, congestion_control="reno", recovery=0)
    out = dupack(conn, MS, sack_blocks=blocks((1, 5), (6, 10)))
    # IsLost(HighACK + 1) already holds: enter recovery on this first ACK (RFC 6675 §5)
    # both holes first; then pipe = 2 retransmitted segments < cwnd = ssthresh = 5 SMSS,
    # so three new segments follow (RFC 6675 §5 step (C), NextSeg rule 2)
    assert [o.seq for o in out] == [L1, L1 + 5 * MSS] + [L1 + i * MSS for i in (10, 11, 12)]
    assert conn.counters["TcpExtTCPSackRecovery"] == 1
    # more SACK information for the same holes does not repeat them (HighRxt)
    out = dupack(conn, 2 * MS, sack_blocks=blocks((1, 5), (6, 10)))
    assert all(o.seq >= L1 + 10 * MSS for o in out)
    conn.on_segment(seg(ack=L1 + 10 * MSS), 30 * MS)
    assert conn._recovery is None and conn.cc.cwnd == conn.cc.ssthresh


def test_sack_recovery_sends_new_data_as_pipe_drains() -> None:
    conn = sender(sack=True, congestion_control="reno", recovery=0)
    sent = []
    for i, hi in enumerate((2, 3, 4, 5, 6, 7, 8, 9, 10)):
        sent += dupack(conn, (i + 1) * MS, sack_blocks=blocks((1, hi)))
    seqs = [o.seq for o in sent]
    assert seqs[:3] == [L1 + 10 * MSS, L1 + 11 * MSS, L1]  # limited transmit, then the hole
    assert seqs.count(L1) == 1
    assert all(s >= L1 + 10 * MSS for s in seqs[3:])  # then only new data
    assert len(seqs) >= 5


def test_sack_blocks_outside_sent_data_are_ignored() -> None:
    conn = sender(sack=True)
    for i in range(5):
        dupack(conn, (i + 1) * MS, sack_blocks=((L1 + 50 * MSS, L1 + 60 * MSS),
                                               (L1 - 5000, L1 - 10)))
    assert conn.scoreboard.sacked_bytes == 0


def test_receiver_reports_most_recent_block_first() -> None:
    conn = established(plain_options(sack=True))
    conn.on_segment(seg(seq=R1 + 1000, payload=b"a" * 100), 0)
    conn.take_segments()
    conn.on_segment(seg(seq=R1 + 3000, payload=b"b" * 100), 0)
    out = recv_one(conn)
    assert out.flags == ACK and out.ack == R1
    assert out.sack_blocks == ((R1 + 3000, R1 + 3100), (R1 + 1000, R1 + 1100))
    conn.on_segment(seg(seq=R1 + 1100, payload=b"c" * 100), 0)
    assert recv_one(conn).sack_blocks == ((R1 + 1000, R1 + 1200), (R1 + 3000, R1 + 3100))


def test_scoreboard_pipe_and_lost_boundary() -> None:
    sb = Scoreboard()
    sb.add(1 * MSS, 5 * MSS)
    sb.add(6 * MSS, 10 * MSS)
    assert sb.lost_boundary(MSS) == 10 * MSS - 1 - 2 * MSS
    assert sb.is_lost(0, MSS) and sb.is_lost(5 * MSS, MSS)
    assert sb.pipe(high_rxt=0, high_data=10 * MSS, smss=MSS) == 0
    assert sb.pipe(high_rxt=MSS, high_data=12 * MSS, smss=MSS) == MSS + 2 * MSS
    assert sb.next_seg(0, MSS) == (0, MSS)
    assert sb.next_seg(MSS, MSS) == (5 * MSS, MSS)
    sb.advance(5 * MSS)
    assert sb.ranges() == [(MSS, 5 * MSS)]


def test_reassembly_first_arrival_wins_and_ranges_are_bounded() -> None:
    asm = Assembler(max_ranges=3)
    assert asm.add(10, b"AAAA") == 4
    assert asm.add(8, b"bbbbbbbb") == 4  # only the bytes around what we hold are new
    assert asm.ranges() == [(8, 16)]
    assert asm.add(20, b"x") == 1 and asm.add(30, b"y") == 1
    assert asm.add(40, b"z") is None  # a fourth island is refused
    asm.advance(8)
    assert asm.pop_front() == b"bbAAAAbb"
    assert asm.buffered == 2


def test_receiver_blocks_order() -> None:
    rb = ReceiverBlocks()
    rb.note(50)
    rb.note(10)
    held = [(10, 20), (50, 60), (70, 80)]
    assert rb.blocks(held, 3) == [(10, 20), (50, 60), (70, 80)]
    assert rb.blocks(held, 2) == [(10, 20), (50, 60)]


# ====================================================================== congestion control
def test_reno_slow_start_and_congestion_avoidance() -> None:
    cc = NewReno(1000, 10)
    cc.on_ack(1000, 0, None)
    assert cc.cwnd == 11000
    cc.ssthresh = 11000
    for _ in range(11):
        cc.on_ack(1000, 0, None)
    assert cc.cwnd == 12000  # one SMSS per window of ACKed bytes
    cc.on_timeout(0, 20000)
    assert (cc.ssthresh, cc.cwnd) == (10000, 1000)


def run_cubic_epoch(cc: Cubic, seconds: float, rtt: int = 100 * MS, start: int = 0) -> int:
    now = start
    while now < start + int(seconds * SECOND):
        for _ in range(cc.cwnd // cc.mss):  # one window of ACKs per RTT
            cc.on_ack(cc.mss, now, rtt)
        now += rtt
    return now


def test_cubic_concave_then_convex_around_w_max() -> None:
    cc = Cubic(1000, 10)
    cc.set_cwnd(100_000)
    cc.on_congestion(0, 100_000)
    assert cc.ssthresh == 100 * 717 // 1024 * 1000  # cubictcp_recalc_ssthresh: beta 717/1024
    cc.set_cwnd(cc.ssthresh)
    k = cubic_root(CUBE_FACTOR * 30) / 1024  # bic_K: seconds to climb back to W_max
    assert math.isclose(k, math.cbrt(30 / 0.4), rel_tol=0.01)  # RFC 9438 eq. 2, C = 0.4
    reno = NewReno(1000, 10)
    reno.cwnd = reno.ssthresh = 70_000
    run_cubic_epoch(reno, k / 2)
    t = run_cubic_epoch(cc, k / 2)
    assert reno.cwnd < cc.cwnd < 100_000  # concave: fast, but still below W_max
    t = run_cubic_epoch(cc, k / 2, start=t)
    assert 95_000 <= cc.cwnd <= 105_000  # plateau around W_max at t = K
    run_cubic_epoch(cc, k, start=t)
    assert cc.cwnd > 110_000  # convex: probing beyond W_max


def test_cubic_fast_convergence_and_friendliness() -> None:
    cc = Cubic(1000, 10)
    cc.set_cwnd(100_000)
    cc.on_congestion(0, 100_000)
    assert cc.last_max_cwnd == 100
    cc.set_cwnd(80_000)
    cc.on_congestion(SECOND, 80_000)
    assert cc.last_max_cwnd == 80 * (1024 + 717) // 2048  # below the last W_max: 68
    assert create("cubic", 1000, 10).name == "cubic" and create("reno", 1000, 10).name == "reno"


def test_connection_uses_selected_algorithm() -> None:
    assert established(plain_options(congestion_control="cubic")).cc.name == "cubic"
    assert established(plain_options(congestion_control="reno")).cc.name == "reno"


def test_application_limited_sender_does_not_inflate_cwnd() -> None:
    conn = established(plain_options())
    initial = conn.cc.cwnd
    now = 0
    for _ in range(200):  # request/response: one small segment in flight at a time
        conn.send(b"req", now)
        out = recv_one(conn)
        now += 10 * MS
        conn.on_segment(seg(ack=(out.seq + 3) & 0xFFFFFFFF), now)
        conn.take_segments()
    assert conn.cc.cwnd == initial


def test_go_back_n_after_rto_skips_data_sacked_since() -> None:
    # (no tail loss probe: the RTO, not a probe of new data, is what goes out first; no
    # F-RTO: SACKs of never-retransmitted data would prove the RTO spurious and undo it,
    # tcp_process_loss step 3.b, test_frto_sack_of_original_data_undoes_the_rto)
    conn = sender(sack=True, congestion_control="reno", early_retrans=0, frto=0)
    conn.on_timer(conn.next_deadline())  # RTO: head retransmitted, cwnd = 1 SMSS
    assert [o.seq for o in conn.take_segments()] == [L1]
    assert conn.scoreboard.sacked_bytes == 0  # RFC 2018 §8: earlier SACKs forgotten
    # the head arrives; the peer also reports segments 2..4 (fresh SACK information)
    conn.on_segment(seg(ack=L1 + MSS, sack_blocks=blocks((2, 5))), 2 * SECOND)
    out = [o.seq for o in conn.take_segments()]
    # slow start grows cwnd by all this ACK delivered, the head and the three SACKed
    # (tcp_cong_control's acked_sacked): 5 SMSS; segment 1, then straight to segment 5
    # (2..4 are not resent)
    assert out == [L1 + MSS, L1 + 5 * MSS, L1 + 6 * MSS, L1 + 7 * MSS, L1 + 8 * MSS]
    assert conn.counters["TcpRetransSegs"] == 6


def test_receiver_reports_duplicates_with_dsack_first() -> None:
    conn = established(plain_options(sack=True))
    conn.on_segment(seg(payload=b"a" * 100), 0)
    conn.on_segment(seg(seq=R1 + 500, payload=b"c" * 100), 0)
    conn.take_segments()
    out = recv_after(conn, seg(seq=R1, payload=b"a" * 100))  # entirely old
    assert out.sack_blocks == ((R1, R1 + 100), (R1 + 500, R1 + 600))  # RFC 2883 §4
    out = recv_after(conn, seg(seq=R1 + 50, payload=b"a" * 50 + b"b" * 50))  # half old
    assert out.sack_blocks[0] == (R1 + 50, R1 + 100) and conn.readable == 150
    out = recv_after(conn, seg(seq=R1 + 500, payload=b"c" * 100))  # already queued
    assert out.sack_blocks[0] == (R1 + 500, R1 + 600)
    assert recv_after(conn, seg(seq=R1 + 150, payload=b"d")).sack_blocks == (
        (R1 + 500, R1 + 600),)  # reported once only
    assert conn.counters["TcpExtTCPDSACKOldSent"] == 3


def recv_after(conn, segment):
    conn.on_segment(segment, 0)
    return recv_one(conn)


def test_frto_sack_of_original_data_undoes_the_rto() -> None:
    # the SACK-enhanced F-RTO (RFC 5682 §4, Linux tcp_process_loss step 3.b): segments
    # 2..4, sent once before the RTO, are SACKed after it: they were never lost, the
    # timeout was spurious and is undone at once; segment 1, sent before them and not
    # delivered, is then a loss for RACK, and a fast recovery starts on the same ACK
    # (tcp_fastretrans_alert falls through from Loss once it is Open again)
    conn = sender(sack=True, congestion_control="reno", early_retrans=0)
    conn.on_timer(conn.next_deadline())
    conn.take_segments()
    assert conn.loss.ca_state() == CaState.LOSS and conn.loss.frto
    conn.on_segment(seg(ack=L1 + MSS, sack_blocks=blocks((2, 5))), 2 * SECOND)
    assert conn.counters["TcpExtTCPSpuriousRTOs"] == 1
    assert conn.counters["TcpExtTCPLossUndo"] == 1
    assert conn.loss.ca_state() == CaState.RECOVERY
    assert conn.take_segments()[0].seq == L1 + MSS
