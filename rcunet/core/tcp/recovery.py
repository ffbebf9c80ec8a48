"""Loss detection and fast recovery.  As Linux (net.ipv4.tcp_recovery bit 0x1, its
default): on a SACK connection RACK (RFC 8985, tcp_recovery.c) marks segments lost by
time, recovery retransmits them with PRR (RFC 9937, tcp_cwnd_reduction) setting cwnd, and
a tail loss probe (tcp_schedule_loss_probe, tcp_send_loss_probe) repairs a lost tail
without an RTO.  Where Linux still counts duplicate ACKs (tcp_recovery=0, or no SACK):
RFC 5681 §3.2 and RFC 6675 §5 decide, NewReno (RFC 6582) or SACK (RFC 6675) recovers.

The recovery itself is an algorithm object which sets cwnd through the congestion
controller's ``set_cwnd`` and decides what recovery sends.  ``LossRecovery`` is the
connection's part that holds the state (``recover``, ``high_rxt``, ``dupacks``, the SACK
scoreboard, the log of segments in flight, RACK's and PRR's state, the algorithm in use);
the algorithm objects hold none of their own, so one instance of each serves every
connection."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp import rack as rack_rules
from rcunet.core.tcp.common import FIN, SYN
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.prr import CaState, Reduction, cwnd_at_end, cwr_ends, enters_cwr
from rcunet.core.tcp.rack import RACK_LOSS_DETECTION, RackState, Segment
from rcunet.core.tcp.sack import DUP_THRESH, Scoreboard
from rcunet.core.tcp.sack_validity import sort_blocks
from rcunet.core.tcp.sent_log import Sent, SentLog
from rcunet.core.tcp.tcb import Tcb
from rcunet.core.tcp.undo import (
    LossStep,
    dsack_undo,
    frto_armed,
    loss_ack,
    may_undo,
    packet_delayed,
    undo_reduction,
)
from rcunet.wire import tcp
from rcunet.wire.seqnum import add, gt, le, lt, sub

if TYPE_CHECKING:
    from rcunet.core.tcp.connection import Connection


class Recovery:
    """One fast-recovery algorithm."""

    name = "base"

    def enter(self, loss: LossRecovery, conn: Connection, now: int) -> None:
        """Loss detected: the algorithm's cwnd and first retransmission (``loss`` has
        set ssthresh and RecoveryPoint)."""
        raise NotImplementedError

    def on_ack(self, conn: Connection, new_ack: bool, is_dup: bool, acked: int,
               now: int) -> None:
        """An ACK below RecoveryPoint: a partial ACK or a duplicate."""

    def exit(self, conn: Connection, now: int) -> None:
        """A full ACK: recovery ends (``loss`` then forgets it)."""
        raise NotImplementedError

    def output(self, loss: LossRecovery, conn: Connection, now: int) -> None:
        """What the connection sends while in recovery."""
        while conn.sender.try_send(conn, now, room=conn.sender.cwnd_room(conn)):
            pass

    def __repr__(self) -> str:
        return f"<{self.name} recovery>"


class NewRenoRecovery(Recovery):
    """RFC 6582 (NewReno) on RFC 5681 §3.2's fast retransmit / fast recovery."""

    name = "reno"

    def enter(self, loss: LossRecovery, conn: Connection, now: int) -> None:
        t = conn.tcb
        conn.counters.add("TcpExtTCPRenoRecovery")
        conn.sender.retransmit_at(conn, t.snd_una, now)  # RFC 5681 §3.2 step 3
        conn.cc.set_cwnd(conn.cc.ssthresh + 3 * t.snd_mss)

    def on_ack(self, conn: Connection, new_ack: bool, is_dup: bool, acked: int,
               now: int) -> None:
        t = conn.tcb
        cc = conn.cc
        if new_ack:
            # RFC 6582 §3.2 step 3, partial ACK: retransmit the first unacknowledged
            # segment, deflate cwnd by the amount acked, add back one SMSS.
            conn.sender.retransmit_at(conn, t.snd_una, now)
            cc.set_cwnd(max(cc.cwnd - acked + (t.snd_mss if acked >= t.snd_mss else 0),
                            t.snd_mss))
        elif is_dup:
            cc.set_cwnd(cc.cwnd + t.snd_mss)  # RFC 5681 §3.2 step 4 (kept by RFC 6582)

    def exit(self, conn: Connection, now: int) -> None:
        # RFC 6582 §3.2 step 3, full ACK, option (1)
        t = conn.tcb
        flight = sub(t.snd_max, t.snd_una)
        conn.cc.set_cwnd(min(conn.cc.ssthresh, max(flight, t.snd_mss) + t.snd_mss))


class SackRecovery(Recovery):
    """RFC 6675: conservative SACK-based loss recovery."""

    name = "sack"

    def enter(self, loss: LossRecovery, conn: Connection, now: int) -> None:
        t = conn.tcb
        conn.counters.add("TcpExtTCPSackRecovery")
        conn.cc.set_cwnd(conn.cc.ssthresh)  # RFC 6675 §5 step (4.2)
        loss.high_rxt = t.snd_una
        hole = loss.scoreboard.next_seg_rule3(0, t.snd_mss)
        # step (4.3)
        end = conn.sender.retransmit_at(conn, t.snd_una, now, hole[1] if hole else None)
        if end is not None:
            loss.high_rxt = end

    def exit(self, conn: Connection, now: int) -> None:
        conn.cc.on_recovery_exit(now)

    def output(self, loss: LossRecovery, conn: Connection, now: int) -> None:
        """RFC 6675 §5 step (C): while cwnd - pipe >= 1 SMSS, send NextSeg()."""
        t = conn.tcb
        mss = t.snd_mss
        sb = loss.scoreboard
        for _ in range(1000):  # bounded: each pass sends a segment or stops
            una = t.snd_una
            high_data = sub(t.snd_max, una)
            hrx = max(0, sub(loss.high_rxt, una))
            if conn.cc.cwnd - sb.pipe(hrx, high_data, mss) < mss:
                return
            nxt = sb.next_seg(hrx, mss)  # rule 1: lost and not yet retransmitted
            if nxt is None and conn.sender.try_send(conn, now, room=mss):
                continue  # rule 2: new data
            if nxt is None:
                nxt = sb.next_seg_rule3(hrx, mss)  # rule 3
            if nxt is None:
                return
            end = conn.sender.retransmit_at(conn, add(una, nxt[0]), now, nxt[1])
            if end is None:
                return
            loss.high_rxt = end


class RackRecovery(Recovery):
    """Linux's recovery with RACK (tcp_fastretrans_alert in TCP_CA_Recovery with
    tcp_is_rack): retransmit what RACK marked lost, oldest sequence first, then new data
    (tcp_xmit_retransmit_queue, tcp_write_xmit), while PRR's cwnd leaves room."""

    name = "rack"

    def enter(self, loss: LossRecovery, conn: Connection, now: int) -> None:
        conn.counters.add("TcpExtTCPSackRecovery")

    def exit(self, conn: Connection, now: int) -> None:
        pass  # LossRecovery ends PRR's reduction (tcp_end_cwnd_reduction)

    def output(self, loss: LossRecovery, conn: Connection, now: int) -> None:
        t = conn.tcb
        mss = t.snd_mss
        log = loss.log
        for _ in range(1000):  # bounded: each pass sends a segment or stops
            una = t.snd_una
            if conn.cc.cwnd // mss <= log.segments_in_flight():
                return  # tcp_xmit_retransmit_queue / tcp_cwnd_test count segments
            lost = log.lost_in_order(una)
            if lost:
                head = lost[0]
                seq = head.seq if gt(head.seq, una) else una
                if conn.sender.retransmit_at(conn, seq, now, sub(head.end, seq)) is None:
                    return
                conn.counters.add("TcpExtTCPFastRetrans")  # tcp_xmit_retransmit_queue
            elif not conn.sender.send_recovery_packet(conn, now, log.segments_in_flight()):
                return


NEWRENO = NewRenoRecovery()
SACK = SackRecovery()
RACK = RackRecovery()
#: Linux's tcp_reordering default: SACKed segments that make RACK's window 0 until
#: reordering is seen (the old dupack threshold).
REORDERING = 3
#: net.ipv4.tcp_max_reordering: the most tp->reordering grows to.
MAX_REORDERING = 300


class LossRecovery:
    """A connection's loss detection and recovery state; the only writer of it.  It
    decides; the connection (its sender) sends what an algorithm asks for."""

    # lockfree_read_slots: read by whichever thread holds the socket lock (Connection)
    __slots__ = lockfree_read_slots(
        "tcb", "counters", "algorithm", "dupacks", "recover", "high_rxt", "scoreboard",
        "log", "rack", "reduction", "cwr", "in_loss", "fack", "reord_seen", "reord_low",
        "reordering", "min_rtt_us",
        "delivered", "prior_delivered", "ack_delivered", "ack_lost", "dsack_dups",
        "total_retrans", "bytes_retrans", "ca_rtt_us", "tlp_high_seq", "tlp_retrans",
        "dsack_tlp", "prior_snd_una", "undo_marker", "undo_retrans", "prior_ssthresh", "prior_cwnd",
        "retrans_stamp", "frto", "rexmit_new", "ack_orig_acked", "ack_dsack", "total_rto",
        "total_rto_recoveries", "total_rto_time", "rto_stamp", "timeout_rehash")

    def __init__(self, tcb: Tcb, counters: Counters) -> None:
        self.tcb = tcb
        self.counters = counters
        # None, or the recovery in progress: NEWRENO (RFC 6582) or SACK (RFC 6675)
        self.algorithm: Recovery | None = None
        self.dupacks = 0
        # RFC 6582 "recover" / RFC 6675 RecoveryPoint; None until the first loss (the RFC
        # starts it at ISS) and again once SND.UNA is far past it, so it never wraps.
        self.recover: int | None = None
        self.high_rxt = tcb.iss  # RFC 6675 HighRxt
        self.scoreboard = Scoreboard()
        self.log = SentLog()  # segments in flight, in the order last sent
        self.rack = RackState()  # tp->rack
        self.reduction: Reduction | None = None  # PRR's episode (Recovery or CWR)
        self.cwr = False  # TCP_CA_CWR: a reduction without loss (ECN, a repaired tail)
        self.in_loss = False  # TCP_CA_Loss: after an RTO, until ``recover`` is ACKed
        self.fack: int | None = None  # highest SACKed sequence (tp->highest_sack's end)
        self.reord_seen = 0  # tp->reord_seen: reordering events
        self.reord_low: int | None = None  # this pass's lowest reordered sequence
        self.reordering = REORDERING  # tp->reordering: how far, in segments
        self.min_rtt_us = 0  # tcp_min_rtt (0: no sample yet)
        self.delivered = 0  # tp->delivered, in segments
        self.prior_delivered = 0  # tp->delivered when this ACK began
        self.ack_delivered = 0  # segments this ACK delivered (ACKed or SACKed)
        self.ack_lost = 0  # segments this ACK marked lost
        self.dsack_dups = 0  # tp->dsack_dups
        self.total_retrans = 0  # tp->total_retrans
        self.bytes_retrans = 0  # tp->bytes_retrans (TCP_INFO's tcpi_bytes_retrans)
        #: This ACK's RTT sample for congestion control (tcp_clean_rtx_queue's ca_rtt_us:
        #: the most recently sent segment it delivered, never retransmitted), or None
        self.ca_rtt_us: int | None = None
        self.tlp_high_seq = 0  # SND.NXT when the tail loss probe went out, 0: none out
        self.tlp_retrans = False  # the probe was a retransmission
        self.dsack_tlp = False  # this ACK's DSACK reports the probe (FLAG_DSACK_TLP)
        self.prior_snd_una = tcb.snd_una  # SND.UNA before this ACK
        # tcp_init_undo: what a Recovery that proves unnecessary goes back to
        self.undo_marker: int | None = None  # SND.UNA when it began (None: no undo)
        self.undo_retrans = -1  # its retransmissions not yet DSACKed (-1: none sent)
        self.prior_ssthresh = 0
        self.prior_cwnd = 0
        self.retrans_stamp = 0  # TSval of its first retransmission (0: none)
        self.frto = False  # tp->frto: F-RTO (RFC 5682) judges the RTO in progress
        self.rexmit_new = False  # F-RTO step 2.b: new data goes before retransmissions
        self.ack_orig_acked = False  # this ACK (S)ACKed never-retransmitted data below
        #                              high_seq (FLAG_ORIG_SACK_ACKED)
        self.ack_dsack = False  # this ACK carried a DSACK (FLAG_DSACKING_ACK)
        # tcp_update_rto_stats / tcp_update_rto_time (TCP_INFO's tcpi_total_rto*):
        self.total_rto = 0  # RTO expiries, the SYN's and SYN-ACK's included
        self.total_rto_recoveries = 0  # episodes that began with an RTO
        self.total_rto_time = 0  # ms spent in finished episodes
        self.rto_stamp = 0  # ms (now // 1e6, never 0) when the episode began; 0: none
        self.timeout_rehash = 0  # tp->timeout_rehash: tcp_write_timeout's txhash changes

    def idle(self) -> bool:
        """Nothing to track: no recovery, no duplicate ACKs, nothing SACKed (what header
        prediction requires)."""
        return (self.algorithm is None and not self.dupacks
                and not self.scoreboard.highest_sacked and not self.log.lost_count
                and not self.tlp_high_seq and self.reduction is None and not self.in_loss)

    def ca_state(self) -> CaState:
        """Linux's icsk_ca_state (Disorder is not told apart from Open)."""
        if self.in_loss:
            return CaState.LOSS
        if self.algorithm is not None:
            return CaState.RECOVERY
        return CaState.CWR if self.cwr else CaState.OPEN

    def rack_on(self, conn: Connection) -> bool:
        """tcp_is_rack on a SACK connection: RACK decides loss, not duplicate ACKs."""
        return bool(conn.options.recovery & RACK_LOSS_DETECTION) and self.tcb.sack_ok

    # ------------------------------------------------------------ what went out
    def note_sent(self, seq: int, end: int, now: int, retransmission: bool) -> None:
        """The sender put [seq, end) on the wire (tcp_update_skb_after_send); PRR counts
        it (prr_out) during a reduction."""
        if seq == end:
            return
        self.log.sent(seq, end, now // 1000, retransmission)
        if retransmission:
            self.total_retrans += 1
            self.bytes_retrans += sub(end, seq)
            if self.undo_marker is not None:  # tcp_retransmit_skb's undo bookkeeping
                self.undo_retrans = max(self.undo_retrans, 0) + 1
                if not self.retrans_stamp and self.tcb.ts_ok:
                    self.retrans_stamp = self.tcb.ts_val(now) or 1
        if self.reduction is not None:
            self.reduction.sent(1)  # prr_out counts segments, as Linux

    # ------------------------------------------------------------ the peer's ACKs
    def ack_begin(self) -> None:
        """A new ACK is processed: what it delivers and marks lost is counted afresh."""
        self.prior_delivered = self.delivered
        self.ack_delivered = self.ack_lost = 0
        self.dsack_tlp = False
        self.ca_rtt_us = None
        self.prior_snd_una = self.tcb.snd_una
        self.ack_orig_acked = self.ack_dsack = False

    def _delivered(self, s: Sent, now: int) -> None:
        """One segment (S)ACKed: RACK advances (tcp_rack_advance), tp->delivered grows, a
        never-retransmitted segment below the highest SACK shows reordering
        (tcp_check_sack_reordering)."""
        now_us = now // 1000
        self.rack.advance(s.xmit_time, s.end, now_us, s.retransmitted, self.min_rtt_us)
        if not s.retransmitted:
            if le(s.end, self.high_seq()):
                self.ack_orig_acked = True  # tcp_sacktag_one, tcp_clean_rtx_queue
            rtt = now_us - s.xmit_time
            if rtt >= 0 and (self.ca_rtt_us is None or rtt < self.ca_rtt_us):
                self.ca_rtt_us = rtt
            if rtt >= 0 and (not self.min_rtt_us or rtt < self.min_rtt_us):
                self.min_rtt_us = max(rtt, 1)
            if self.fack is not None and lt(s.end, self.fack) and (
                    self.reord_low is None or lt(s.seq, self.reord_low)):
                self.reord_low = s.seq  # tcp_sacktag_one / tcp_clean_rtx_queue's reord
        self.delivered += 1
        self.ack_delivered += 1

    def _check_reordering(self) -> None:
        """tcp_check_sack_reordering, once for the segments one pass (S)ACKed: data sent
        before the highest SACK arrived after it.  The event is counted (reord_seen,
        TCPSACKReorder), and tp->reordering grows to the distance in segments, up to
        net.ipv4.tcp_max_reordering (300)."""
        low, self.reord_low = self.reord_low, None
        fack = self.fack
        if low is None or fack is None or not lt(low, fack):
            return
        mss = self.tcb.snd_mss
        metric = sub(fack, low)
        if mss and metric > self.reordering * mss:
            self.reordering = min((metric + mss - 1) // mss, MAX_REORDERING)
        self.reord_seen += 1
        self.counters.add("TcpExtTCPSACKReorder")

    def handshake_delivered(self) -> None:
        """The handshake completed: the SYN (or SYN-ACK) counts as delivered (tcp_ack's
        tcp_clean_rtx_queue for an active open; tcp_rcv_state_process's "SYN-ACK
        delivery isn't tracked in tcp_ack" for a passive one)."""
        self.delivered += 1

    def rtt_seen(self, rtt_us: int) -> None:
        """An RTT sample outside the segment log (the handshake's): tcp_update_rtt_min.
        A zero sample (a handshake in no time, which only a virtual clock gives) is
        left out, so the data's first sample sets the minimum."""
        if rtt_us > 0 and (not self.min_rtt_us or rtt_us < self.min_rtt_us):
            self.min_rtt_us = rtt_us

    def take_sack(self, seg: tcp.Repr, now: int = 0) -> int:
        """Fold the peer's SACK blocks in, as tcp_sacktag_write_queue sorts them
        (``sack_validity``: a DSACK recognised and judged, blocks outside [SND.UNA,
        SND.MAX] discarded and counted); returns the bytes newly SACKed.  SACKed bytes at
        SND.UNA would have been ACKed cumulatively: the receiver reneged (or lies), and
        its SACKs are forgotten (RFC 2018 §8; Linux tcp_check_sack_reneging)."""
        t = self.tcb
        sb = self.scoreboard
        new = 0
        if t.sack_ok and seg.sack_blocks:
            first = seg.sack_blocks[0]
            blocks = sort_blocks(tuple(seg.sack_blocks), ack=seg.ack, snd_una=t.snd_una,
                                 snd_nxt=t.snd_max, prior_snd_una=self.prior_snd_una,
                                 undo_marker=self.undo_marker or 0,
                                 max_window=t.max_snd_wnd)
            for name in blocks.discarded:
                self.counters.add(name)
            used = blocks.used
            if blocks.dsack is not None:
                self.ack_dsack = True
                valid = bool(used) and used[0] == first
                self._take_dsack(blocks.dsack, first[0], first[1], valid)
                used = used[1:] if valid else used
            prior_fack = self.fack
            for left, right in self._whole_segments(used):
                start, end = sub(left, t.snd_una), sub(right, t.snd_una)
                if 0 <= start < end:
                    new += sb.add(start, end)
                    if self.fack is None or gt(right, self.fack):
                        self.fack = right
            if new:
                fack, self.fack = self.fack, prior_fack  # reordering is judged against
                una = t.snd_una                          # the SACKs before this ACK
                # in sequence order, as tcp_sacktag_walk tags them
                for s in sorted(self.log.sacked(list(used)), key=lambda s: sub(s.seq, una)):
                    self._delivered(s, now)
                self.fack = fack
                self._check_reordering()
        ranges = sb.ranges()
        if ranges and ranges[0][0] == 0:
            self.counters.add("TcpExtTCPSACKReneging")
            sb.clear()
            new = 0
        return new

    def _whole_segments(self, blocks: list[tuple[int, int]] | tuple[tuple[int, int], ...]
                        ) -> list[tuple[int, int]]:
        """What of the SACK blocks marks anything: a block less the segments in flight
        it covers only in part.  Linux tags SACKed skbs, never bytes: a block over part
        of a one-segment skb leaves it unSACKed (tcp_match_skb_to_sack splits only a
        multi-segment skb, on MSS boundaries), and tcp_sacktag_walk skips it."""
        pieces: list[tuple[int, int]] = []
        for left, right in blocks:
            start = left
            for seq, end in self.log.straddling(left, right):
                if lt(start, seq):
                    pieces.append((start, seq))
                if gt(end, start):
                    start = end
            if lt(start, right):
                pieces.append((start, right))
        return pieces

    def _take_dsack(self, name: str, start: int, end: int, valid: bool) -> None:
        """tcp_dsack_seen: a believable DSACK counts its duplicates and, once reordering
        was seen and it does not report the loss probe, lets RACK widen its window; a
        valid one (tcp_is_sackblock_valid) of this episode's retransmissions counts
        toward undoing it."""
        t = self.tcb
        verdict = rack_rules.dsack_seen(
            start, end, max_window=t.max_snd_wnd, mss=t.snd_mss,
            tlp_high_seq=self.tlp_high_seq, dsack_dups=self.dsack_dups,
            total_retrans=self.total_retrans, reord_seen=self.reord_seen > 0)
        self.dsack_tlp = verdict.tlp
        if not verdict.dup_segs:
            self.counters.add("TcpExtTCPDSACKIgnoredDubious")
            return
        self.counters.add(name)
        self.dsack_dups += verdict.dup_segs
        if valid and self.undo_marker is not None and self.undo_retrans > 0 \
                and gt(end, self.undo_marker):
            # a retransmission of this episode arrived twice (tcp_sacktag_one)
            self.undo_retrans = max(0, self.undo_retrans - verdict.dup_segs)
        if verdict.widens_reo_wnd:
            self.rack.dsack_seen = True

    def on_ack_advance(self, ack: int, acked: int, now: int = 0) -> None:
        """SND.UNA moved to ``ack`` (``acked`` bytes on): HighRxt never trails it, the
        scoreboard slides, the ACKed segments leave the log (RACK advancing on each,
        as tcp_clean_rtx_queue), and a RecoveryPoint far behind is forgotten."""
        if lt(self.high_rxt, ack):
            self.high_rxt = ack
        self.scoreboard.advance(acked)
        self.ca_rtt_us = None
        # in sequence order, as tcp_clean_rtx_queue walks the retransmit queue: the last
        # segment's RTT is RACK.rtt (a resent head moved to the log's tail)
        delivered = self.log.acked(ack)
        if len(delivered) > 1:  # (mostly one: no key function made per ACK)
            delivered.sort(key=lambda s: sub(s.seq, ack))
        for s in delivered:
            self._delivered(s, now)
        self._check_reordering()
        if self.recover is not None and self.algorithm is None \
                and sub(ack, self.recover) > 1 << 30:
            self.recover = None

    def detect(self, conn: Connection, seg: tcp.Repr, ack: int, new_ack: bool, acked: int,
               prior_wnd: int, newly_sacked: int, now: int) -> None:
        """Count duplicate ACKs and enter, drive or leave recovery (RFC 5681 §3.2,
        RFC 6582, RFC 6675 §5), or with RACK as Linux's tcp_fastretrans_alert does.
        Outside recovery the caller has grown cwnd first."""
        if self.tlp_high_seq:
            self._tlp_ack(conn, seg, ack, new_ack, prior_wnd, newly_sacked, now)
        if self.cwr and self.algorithm is None:
            self._cwr_ack(conn, new_ack, now)
        if self.in_loss:
            self._process_loss(conn, seg, new_ack, prior_wnd, newly_sacked, now)
        if self.rack_on(conn):
            tsecr = seg.timestamp[1] if seg.timestamp is not None else None
            self._rack_detect(conn, ack, new_ack, tsecr, now)
            return
        t = self.tcb
        outstanding = t.snd_max != t.snd_una
        # RFC 5681 §2 duplicate ACK; RFC 6675 §2 also counts an ACK carrying new SACK info.
        is_dup = (not new_ack and ack == t.snd_una and outstanding and not seg.payload
                  and not seg.flags & (SYN | FIN)
                  and (newly_sacked > 0 or (t.snd_wnd == prior_wnd and not seg.sack_blocks)))
        algorithm = self.algorithm
        if algorithm is None:
            if new_ack:
                self.dupacks = 0
            elif is_dup:
                self.dupacks += 1
            lost = t.sack_ok and outstanding and self.scoreboard.is_lost(0, t.snd_mss)
            if outstanding and (self.dupacks >= DUP_THRESH or lost):
                # RFC 6582 §3.2 step 2: only if the ACK covers more than "recover".
                if self.recover is None or gt(ack, add(self.recover, 1)):
                    self._enter(conn, now)
            return
        if self.recover is None or gt(ack, self.recover):
            tsecr = seg.timestamp[1] if seg.timestamp is not None else None
            if self._may_undo(tsecr):  # tcp_try_undo_recovery, whatever detected the loss
                self._undo(conn, "TcpExtTCPFullUndo")
            else:
                algorithm.exit(conn, now)
                self.algorithm = None
                self.undo_marker = None
            self.dupacks = 0
            return
        algorithm.on_ack(conn, new_ack, is_dup, acked, now)

    # ------------------------------------------------------------ RACK
    def _mark_lost(self, conn: Connection, now: int, force: bool) -> None:
        """tcp_rack_mark_lost (``force``: tcp_rack_reo_timeout, which runs the walk
        whether or not RACK advanced): mark what waited longer than RACK.rtt + reo_wnd,
        and arm the reordering timer for the rest."""
        t = self.tcb
        srtt = conn.rto.srtt
        srtt_us = srtt // 1000 if srtt else 0
        reo_wnd = self.rack.reo_wnd(
            reord_seen=self.reord_seen > 0, ca_state=self.ca_state(),
            sacked_out=self.scoreboard.sacked_bytes // max(t.snd_mss, 1),
            reordering=self.reordering, min_rtt_us=self.min_rtt_us, srtt_us=srtt_us,
            tcp_recovery=conn.options.recovery)
        entries = list(self.log)
        segments = [Segment(s.xmit_time, s.end, s.lost) for s in entries]
        if force:
            self.rack.advanced = True
        elif not self.rack.advanced:
            return
        marking = rack_rules.mark_lost(self.rack, segments, now // 1000, reo_wnd)
        for index in marking.lost:
            if self.log.mark_lost(entries[index]):
                self.ack_lost += 1
        timers = conn.timers
        timers.reo_at = None if marking.reo_timer is None else now + marking.reo_timer * 1000

    def _rack_detect(self, conn: Connection, ack: int, new_ack: bool, tsecr: int | None,
                     now: int) -> None:
        """tcp_fastretrans_alert with RACK: the window adapts to DSACKs
        (tcp_rack_update_reo_wnd), RACK marks losses, any loss starts Recovery, and PRR
        sets cwnd for each ACK of a reduction (tcp_cong_control -> tcp_cwnd_reduction)."""
        o = conn.options
        self.rack.update_reo_wnd(self.prior_delivered, self.delivered, o.recovery)
        if self.in_loss:
            self._mark_lost(conn, now, force=False)  # go-back-N resends them anyway
            return
        self._mark_lost(conn, now, force=False)
        if self.algorithm is not None:
            if self.recover is None or gt(ack, self.recover):
                self._leave_recovery(conn, tsecr)
            elif dsack_undo(undo_marker=1 if self.undo_marker is not None else 0,
                            undo_retrans=self.undo_retrans):
                # tcp_try_undo_dsack: every retransmission arrived twice
                self._undo(conn, "TcpExtTCPDSACKUndo")
                self.rack.dsack_undo()
        if self.algorithm is None and self.log.lost_count:
            self._enter_rack(conn, now)
        self._prr(conn, new_ack)
        if new_ack:
            self.schedule_probe(conn, now)  # tcp_set_xmit_timer

    def _leave_recovery(self, conn: Connection, tsecr: int | None) -> None:
        """tcp_try_undo_recovery, then tcp_end_cwnd_reduction: everything up to
        high_seq is ACKed.  If the retransmissions were all DSACKed, or the ACK echoes
        a timestamp from before the first one (the originals arrived: tcp_packet_delayed),
        the reduction is undone; otherwise cwnd settles at ssthresh."""
        if self._may_undo(tsecr):
            self._undo(conn, "TcpExtTCPFullUndo")
            return
        self._end_reduction(conn)
        self.algorithm = None
        self.undo_marker = None
        self.rack.recovery_not_undone()

    def _init_undo(self, conn: Connection) -> None:
        """tcp_init_undo as a reduction begins: where it began and what cwnd and
        ssthresh were (tcp_current_ssthresh: at least 3/4 of cwnd)."""
        cc = conn.cc
        self.undo_marker = self.tcb.snd_una
        self.undo_retrans = -1
        self.retrans_stamp = 0
        self.prior_cwnd = cc.cwnd
        self.prior_ssthresh = max(cc.ssthresh, cc.cwnd * 3 // 4)

    def _may_undo(self, tsecr: int | None) -> bool:
        """tcp_may_undo: every retransmission DSACKed, or the ACK echoes a timestamp
        from before the first one (tcp_packet_delayed)."""
        t = self.tcb
        delayed = bool(self.retrans_stamp) and packet_delayed(
            retrans_stamp=self.retrans_stamp, tsecr=tsecr, sack=t.sack_ok,
            snd_una=t.snd_una, high_seq=add(self.recover or t.snd_una, 1))
        return may_undo(undo_marker=1 if self.undo_marker is not None else 0,
                        undo_retrans=self.undo_retrans, delayed=delayed)

    def _undo(self, conn: Connection, counter: str) -> None:
        """tcp_undo_cwnd_reduction: cwnd and ssthresh as before the reduction; the
        episode ends."""
        cc = conn.cc
        undone = undo_reduction(cwnd=cc.cwnd, ssthresh=cc.ssthresh,
                                prior_ssthresh=self.prior_ssthresh, prior_cwnd=self.prior_cwnd)
        cc.ssthresh = undone.ssthresh
        cc.set_cwnd(undone.cwnd)
        self.counters.add(counter)
        self.algorithm = None
        self.reduction = None
        self.undo_marker = None

    def on_reo_timer(self, conn: Connection, now: int) -> None:
        """tcp_rack_reo_timeout: the segments that waited out the reordering window are
        lost; Recovery starts (PRR counting one segment delivered) and they go again."""
        self.ack_begin()
        self._mark_lost(conn, now, force=True)
        if not self.ack_lost or self.in_loss:
            return
        if self.algorithm is None:
            self._enter_rack(conn, now)
        reduction = self.reduction
        if reduction is not None:
            t = self.tcb
            cwnd = reduction.on_ack(self.log.segments_in_flight(), 1, 0, False)
            if cwnd is not None:
                conn.cc.set_cwnd(max(cwnd, 1) * t.snd_mss)

    def _enter_rack(self, conn: Connection, now: int) -> None:
        """tcp_enter_recovery: ssthresh from the congestion control and the reduction
        begins (tcp_init_cwnd_reduction: no probe is outstanding any more), unless a CWR
        reduction is already under way, which Recovery takes over."""
        t = self.tcb
        if self.reduction is None:
            cc = conn.cc
            prior_cwnd = cc.cwnd
            self._init_undo(conn)
            cc.on_congestion(now, sub(t.snd_max, t.snd_una))
            self.reduction = self._begin_reduction(conn, prior_cwnd)
            self.tlp_high_seq = 0
        self.recover = add(t.snd_max, -1)  # Linux high_seq = SND.NXT
        self.cwr = False
        self.algorithm = RACK
        RACK.enter(self, conn, now)
        conn.sender.stop_rtt_timing()  # Karn

    def _prr(self, conn: Connection, new_ack: bool) -> None:
        """tcp_cwnd_reduction for this ACK: cwnd = in flight + PRR's send quota, in
        segments (tcp_packets_in_flight, prr_delivered and prr_out count segments)."""
        reduction = self.reduction
        if reduction is None:
            return
        t = self.tcb
        cwnd = reduction.on_ack(self.log.segments_in_flight(), self.ack_delivered,
                                self.ack_lost, new_ack)
        if cwnd is not None:
            conn.cc.set_cwnd(max(cwnd, 1) * t.snd_mss)

    def _begin_reduction(self, conn: Connection, prior_cwnd: int) -> Reduction:
        """tcp_init_cwnd_reduction, in segments as Linux counts cwnd (the congestion
        control has just set ssthresh)."""
        mss = self.tcb.snd_mss
        return Reduction.begin(max(prior_cwnd // mss, 1), max(conn.cc.ssthresh // mss, 1))

    def _end_reduction(self, conn: Connection) -> None:
        """tcp_end_cwnd_reduction: cwnd settles at ssthresh."""
        cc = conn.cc
        state = CaState.CWR if self.cwr else CaState.RECOVERY
        cc.set_cwnd(max(cwnd_at_end(cc.cwnd, cc.ssthresh, state, True), self.tcb.snd_mss))
        self.reduction = None
        self.cwr = False

    def enter_cwr(self, conn: Connection, now: int, new_ack: bool = False) -> bool:
        """tcp_enter_cwr: congestion without loss (an ECN echo) reduces cwnd with PRR
        over one round trip, from Open only; Recovery and Loss already reduce.  True
        when it began (the caller queues RFC 3168's CWR).  The ACK that carried the
        echo is the reduction's first: tcp_cong_control, after tcp_fastretrans_alert
        entered CWR, runs tcp_cwnd_reduction for what it delivered."""
        if not enters_cwr(self.ca_state()):
            return False
        t = self.tcb
        cc = conn.cc
        prior_cwnd = cc.cwnd
        cc.on_congestion(now, sub(t.snd_max, t.snd_una))
        self.recover = add(t.snd_max, -1)  # high_seq
        self.reduction = self._begin_reduction(conn, prior_cwnd)
        self.tlp_high_seq = 0
        self.cwr = True
        self._prr(conn, new_ack)
        return True

    def _cwr_ack(self, conn: Connection, new_ack: bool, now: int) -> None:
        """An ACK in CWR: the reduction ends once data above high_seq is ACKed
        (tcp_fastretrans_alert's CWR case); until then PRR paces it."""
        t = self.tcb
        high_seq = add(self.recover if self.recover is not None else t.snd_una, 1)
        if cwr_ends(CaState.CWR, t.snd_una, high_seq) or t.snd_una == t.snd_max:
            self._end_reduction(conn)
        elif not self.rack_on(conn):
            self._prr(conn, new_ack)

    # ------------------------------------------------------------ tail loss probe
    def schedule_probe(self, conn: Connection, now: int) -> None:
        """tcp_schedule_loss_probe, after new data went out or an ACK rearmed the RTO:
        the probe timer at 2*SRTT (plus the minimum RTO for a lone segment, whose ACK
        may be delayed), never after the RTO."""
        t = self.tcb
        timers = conn.timers
        if t.snd_una == t.snd_max or not rack_rules.may_schedule_probe(
                early_retrans=conn.options.early_retrans, packets_out=len(self.log),
                sack=t.sack_ok, ca_state=self.ca_state(),
                fastopen_pending=not conn.state.synchronized):
            timers.tlp_at = None
            return
        srtt = conn.rto.srtt
        rto_at = timers.rto_at
        timeout_us = rack_rules.probe_timeout(
            srtt_us=srtt // 1000 if srtt else 0, packets_out=len(self.log),
            rto_min_us=conn.options.rto_min // 1000,
            rto_remaining_us=(rto_at - now) // 1000 if rto_at is not None else 0)
        timers.tlp_at = now + timeout_us * 1000

    def send_probe(self, conn: Connection, now: int) -> None:
        """tcp_send_loss_probe: one new segment if the window takes it, else the last
        segment sent again (its last MSS); one probe per tail loss episode.  The RTO
        restarts from now."""
        t = self.tcb
        if t.snd_una == t.snd_max or self.ca_state() not in (CaState.OPEN, CaState.CWR):
            return
        self.tlp_retrans = False
        sender = conn.sender
        before = t.snd_max
        if sender.unsent() > 0 and sender.try_send(conn, now, room=t.snd_mss, force=True):
            sent = gt(t.snd_max, before)
        else:
            last = self.log.last()
            if last is None or self.tlp_high_seq:
                return
            seq = last.seq if sub(last.end, last.seq) <= t.snd_mss else add(last.end,
                                                                             -t.snd_mss)
            sent = sender.retransmit_at(conn, seq, now, sub(last.end, seq)) is not None
            self.tlp_retrans = sent
        if sent:
            self.tlp_high_seq = t.snd_max  # Linux snd_nxt: the highest sent
            self.counters.add("TcpExtTCPLossProbes")
            conn.timers.rto_at = now + conn.rto.rto

    def _tlp_ack(self, conn: Connection, seg: tcp.Repr, ack: int, new_ack: bool,
                 prior_wnd: int, newly_sacked: int, now: int) -> None:
        """tcp_process_tlp_ack: the probe's ACK tells whether it repaired a loss (then
        cwnd is reduced as for CWR, at once) or nothing was lost."""
        t = self.tcb
        verdict = rack_rules.tlp_ack(
            ack, tlp_high_seq=self.tlp_high_seq, tlp_retrans=self.tlp_retrans,
            dsack_tlp=self.dsack_tlp, snd_una_advanced=new_ack,
            not_dup=new_ack or bool(seg.payload) or t.snd_wnd != prior_wnd,
            data_sacked=newly_sacked > 0)
        if verdict is rack_rules.TlpAck.PENDING:
            return
        self.tlp_high_seq = 0
        if verdict is rack_rules.TlpAck.LOSS and self.algorithm is None and not self.cwr:
            cc = conn.cc
            cc.on_congestion(now, sub(t.snd_max, t.snd_una))
            cc.set_cwnd(max(cwnd_at_end(cc.cwnd, cc.ssthresh, CaState.CWR, True),
                            t.snd_mss))
            self.counters.add("TcpExtTCPLossProbeRecovery")

    def _enter(self, conn: Connection, now: int) -> None:
        t = self.tcb
        self._init_undo(conn)
        if not self.cwr:  # tcp_enter_recovery: a CWR reduction already set ssthresh
            conn.cc.on_congestion(now, sub(t.snd_max, t.snd_una))
        self.cwr = False
        self.reduction = None
        self.recover = add(t.snd_max, -1)  # RFC 6582 recover / RFC 6675 RecoveryPoint
        self.counters.add("TcpExtTCPFastRetrans")
        algorithm = self.algorithm = SACK if t.sack_ok else NEWRENO
        algorithm.enter(self, conn, now)
        conn.sender.stop_rtt_timing()  # Karn

    def output(self, conn: Connection, now: int) -> None:
        """What the connection sends in recovery (call only while ``algorithm`` is set)."""
        algorithm = self.algorithm
        assert algorithm is not None
        algorithm.output(self, conn, now)

    def enter_loss(self, conn: Connection, now: int, retransmits: int) -> None:
        """tcp_enter_loss, for an RTO (``retransmits``: the expiries before this one).
        ssthresh is reduced, and what to undo recorded, unless this window was already
        reduced (a Recovery or CWR in progress, a repeated RTO); cwnd is one segment, as
        everything in flight is now lost.  F-RTO is armed for a first RTO that does
        not interrupt a loss recovery, or a repeated one (RFC 5682 §3.1 step 1, §3.2).
        No fast retransmit for data sent before it (RFC 6582 §3.2 step 4), and the SACKs
        are forgotten (RFC 2018 §8: the receiver may renege)."""
        t = self.tcb
        cc = conn.cc
        state = self.ca_state()
        if state is CaState.OPEN or not gt(self.high_seq(), t.snd_una) or (
                state is CaState.LOSS and not retransmits):
            self._init_undo(conn)
            cc.on_congestion(now, sub(t.snd_max, t.snd_una))
        cc.set_cwnd(t.snd_mss)
        self.frto = frto_armed(tcp_frto=bool(conn.options.frto), ca_state=state,
                               retransmits=retransmits)
        self.rexmit_new = False
        self.count_rto(now, first=not retransmits)
        self._clear_for_loss()

    def count_rto(self, now: int, first: bool, rehash: bool = True) -> None:
        """tcp_update_rto_stats: one more RTO; the first of an episode starts its clock.
        ``rehash``: tcp_write_timeout ran for it and picked a new flow hash
        (sk_rethink_txhash, net.core.txrehash's default); a SYN-ACK's timer does not."""
        if first:
            self.total_rto_recoveries += 1
            self.rto_stamp = max(now // 1_000_000, 1)
        self.total_rto += 1
        if rehash:
            self.timeout_rehash += 1

    def note_syn_retransmit(self) -> None:
        """A SYN or SYN-ACK sent again: tcp_retransmit_skb's total_retrans (a passive
        child inherits the request's num_retrans)."""
        self.total_retrans += 1

    def end_rto_episode(self, now: int) -> None:
        """tcp_update_rto_time: the RTO episode is over (Loss left, or the handshake that
        timed out completed); its time joins the total."""
        if self.rto_stamp:
            self.total_rto_time += max(0, now // 1_000_000 - self.rto_stamp)
            self.rto_stamp = 0

    def rto_time(self, now: int) -> int:
        """tcpi_total_rto_time: the finished episodes' ms and the running one's."""
        running = max(0, now // 1_000_000 - self.rto_stamp) if self.rto_stamp else 0
        return self.total_rto_time + running

    def high_seq(self) -> int:
        """Linux's tp->high_seq: SND.NXT when the current reduction began (SND.UNA
        before any)."""
        return add(self.recover, 1) if self.recover is not None else self.tcb.snd_una

    def _process_loss(self, conn: Connection, seg: tcp.Repr, new_ack: bool, prior_wnd: int,
                      newly_sacked: int, now: int) -> None:
        """tcp_process_loss: an ACK in the Loss state (``undo.loss_ack`` decides).  The
        timeout is undone when it proves unneeded (tcp_try_undo_loss: the timestamps or
        DSACKs say so, or F-RTO saw never-retransmitted data acknowledged); F-RTO sends
        new data on the first ACK that advances, and gives up when a duplicate ACK or a
        SACK shows the loss was real; the state ends once high_seq is ACKed
        (tcp_try_undo_recovery)."""
        t = self.tcb
        tsecr = seg.timestamp[1] if seg.timestamp is not None else None
        # tcp_ack's num_dupack: nothing new acknowledged, no data, no window update, no DSACK
        dupack = (not new_ack and not seg.payload and t.snd_wnd == prior_wnd
                  and not self.ack_dsack)
        sender = conn.sender
        decision = loss_ack(
            frto=self.frto, snd_una=t.snd_una, snd_nxt=t.snd_max, high_seq=self.high_seq(),
            snd_una_advanced=new_ack, may_undo_now=self._may_undo(tsecr),
            orig_sack_acked=self.ack_orig_acked, data_sacked=newly_sacked > 0,
            dupack=dupack,
            can_send_new=sender.unsent() > 0 and gt(add(t.snd_una, t.snd_wnd), t.snd_max))
        self.frto = decision.frto
        if decision.high_seq_to_snd_nxt:
            self.recover = add(t.snd_max, -1)
        step = decision.step
        if step is LossStep.UNDO or step is LossStep.SPURIOUS_RTO:
            self._undo_loss(conn, spurious=step is LossStep.SPURIOUS_RTO)
        elif step is LossStep.RECOVERED:
            if self._may_undo(tsecr):  # tcp_try_undo_recovery
                self._undo(conn, "TcpExtTCPLossUndo")
            self.undo_marker = None
            self.in_loss = False
            self.frto = False
        elif step is LossStep.SEND_NEW:
            self.rexmit_new = True
        if not self.in_loss:
            self.end_rto_episode(now)

    def _undo_loss(self, conn: Connection, spurious: bool) -> None:
        """tcp_try_undo_loss: cwnd and ssthresh as before the RTO, and nothing is lost any
        more (tcp_undo_cwnd_reduction with unmark_loss: no further retransmissions, so
        SND.NXT leaves the go-back-N point for SND.MAX); the back-off count restarts.  A
        SACK connection, or an F-RTO undo, leaves Loss for Open."""
        t = self.tcb
        self._undo(conn, "TcpExtTCPLossUndo")
        if spurious:
            self.counters.add("TcpExtTCPSpuriousRTOs")
        self.log.unmark_lost()
        self.rack.advanced = True  # tcp_undo_cwnd_reduction: RACK re-examines losses
        conn.timers.rto_undone()
        self.rexmit_new = False
        t.snd_nxt = t.snd_max
        if spurious or t.sack_ok:
            self.in_loss = False
            self.frto = False

    def loss_output(self, conn: Connection, now: int) -> None:
        """What goes in the Loss state (tcp_xmit_recovery after tcp_process_loss): after
        F-RTO's step 2.b new data (REXMIT_NEW), and nothing more while that data waits
        for the ACK that judges the timeout; else the lost segments again, go-back-N
        from SND.NXT, and then new data, as cwnd allows."""
        t = self.tcb
        sender = conn.sender
        if self.rexmit_new:
            self.rexmit_new = False
            sender.send_new(conn, now)
            if not gt(t.snd_max, self.high_seq()):
                self.frto = False  # no new data could go: conventional recovery
        if self.frto and gt(t.snd_max, self.high_seq()):
            return
        while sender.try_send(conn, now, room=sender.cwnd_room(conn)):
            pass

    def _clear_for_loss(self) -> None:
        """tcp_enter_loss's reset of the recovery state: everything in flight lost
        (tcp_timeout_mark_lost), no fast recovery, no probe, high_seq = SND.NXT."""
        t = self.tcb
        self.recover = add(t.snd_max, -1)
        self.algorithm = None
        self.dupacks = 0
        self.scoreboard.clear()
        self.fack = None
        self.high_rxt = t.snd_una
        self.log.mark_all_lost()  # tcp_timeout_mark_lost
        self.reduction = None
        self.cwr = False
        self.in_loss = True
        self.tlp_high_seq = 0

    def on_path_shrunk(self) -> None:
        """tcp_simple_retransmit: everything in flight goes again from SND.UNA, and
        duplicate ACKs for the old flight must not start a fast retransmit (RFC 6582
        §3.2 step 4, as after a timeout); no congestion response."""
        t = self.tcb
        self.recover = add(t.snd_max, -1)
        self.high_rxt = t.snd_una

    def sacked_below(self, seq: int) -> int:
        """Bytes SACKed between SND.UNA and ``seq``."""
        return self.scoreboard.sacked_below(sub(seq, self.tcb.snd_una))
