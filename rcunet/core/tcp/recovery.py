"""Loss detection and fast recovery: duplicate ACKs and SACK loss marks decide when to
enter recovery (RFC 5681 §3.2, RFC 6675 §5); the recovery itself is an algorithm object,
NewReno (RFC 6582) or SACK (RFC 6675), which sets cwnd through the congestion
controller's ``set_cwnd`` and decides what recovery sends.  ``LossRecovery`` is the
connection's part that holds the state (``recover``, ``high_rxt``, ``dupacks``, the SACK
scoreboard, the algorithm in use); the algorithm objects hold none of their own, so one
instance of each serves every connection.  Later RACK-TLP and PRR belong here too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp.common import FIN, SYN
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.prr import CaState, Reduction, cwnd_at_end, cwr_ends, enters_cwr
from rcunet.core.tcp.sack import DUP_THRESH, Scoreboard
from rcunet.core.tcp.tcb import Tcb
from rcunet.wire import tcp
from rcunet.wire.seqnum import add, gt, lt, sub

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


NEWRENO = NewRenoRecovery()
SACK = SackRecovery()


class LossRecovery:
    """A connection's loss detection and recovery state; the only writer of it.  It
    decides; the connection (its sender) sends what an algorithm asks for."""

    # lockfree_read_slots: read by whichever thread holds the socket lock (Connection)
    __slots__ = lockfree_read_slots("tcb", "counters", "algorithm", "dupacks", "recover",
                                    "high_rxt", "scoreboard", "cwr", "cwr_high")

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
        #: The ECN-triggered cwnd reduction in progress (Linux's TCP_CA_CWR), else None;
        #: it ends once data above ``cwr_high`` (tp->high_seq) is acknowledged.
        self.cwr: Reduction | None = None
        self.cwr_high = tcb.iss

    def idle(self) -> bool:
        """Nothing to track: no recovery, no duplicate ACKs, nothing SACKed (what header
        prediction requires)."""
        return (self.algorithm is None and not self.dupacks and self.cwr is None
                and not self.scoreboard.highest_sacked)

    def ca_state(self) -> CaState:
        """Linux's icsk_ca_state as far as this part decides it (Loss is the timers')."""
        if self.algorithm is not None:
            return CaState.RECOVERY
        if self.cwr is not None:
            return CaState.CWR
        return CaState.DISORDER if self.dupacks or self.scoreboard.highest_sacked \
            else CaState.OPEN

    def enter_cwr(self, conn: Connection, now: int) -> bool:
        """A congestion signal without loss (an ECN echo): tcp_enter_cwr.  From Open or
        Disorder only, ssthresh from the congestion control and a PRR reduction towards
        it over the next round trip (tcp_init_cwnd_reduction); True when it began (the
        caller queues RFC 3168's CWR)."""
        if not enters_cwr(self.ca_state()):
            return False
        t = self.tcb
        cc = conn.cc
        prior_cwnd = cc.cwnd
        cc.on_congestion(now, sub(t.snd_max, t.snd_una))
        self.cwr = Reduction.begin(prior_cwnd, cc.ssthresh)
        self.cwr_high = t.snd_max  # tp->high_seq = tp->snd_nxt
        return True

    def end_cwr(self, conn: Connection) -> None:
        """tcp_fastretrans_alert's exit from CWR: once SND.UNA is past high_seq (the
        CWR flag has reached the receiver), cwnd settles at ssthresh
        (tcp_end_cwnd_reduction)."""
        if self.cwr is not None and cwr_ends(CaState.CWR, self.tcb.snd_una, self.cwr_high):
            cc = conn.cc
            cc.set_cwnd(cwnd_at_end(cc.cwnd, cc.ssthresh, CaState.CWR, False))
            self.cwr = None

    def cwr_on_ack(self, conn: Connection, acked: int, newly_sacked: int) -> None:
        """PRR during CWR (tcp_cong_control -> tcp_cwnd_reduction): cwnd becomes what
        is in flight plus what this ACK lets out.  prr_out is what went out above
        high_seq: CWR retransmits nothing."""
        reduction = self.cwr
        if reduction is None:
            return
        t = self.tcb
        reduction.out = max(0, sub(t.snd_max, self.cwr_high))
        in_flight = sub(t.snd_max, t.snd_una) - self.sacked_below(t.snd_max)
        cwnd = reduction.on_ack(in_flight, acked + newly_sacked, 0, acked > 0, t.snd_mss)
        if cwnd is not None:
            conn.cc.set_cwnd(max(cwnd, t.snd_mss))


    def take_sack(self, seg: tcp.Repr) -> int:
        """Fold the peer's SACK blocks in, ignoring any outside [SND.UNA, SND.MAX] (RFC
        2018); returns the bytes newly SACKed.  SACKed bytes at SND.UNA would have been
        ACKed cumulatively: the receiver reneged (or lies), and its SACKs are forgotten
        (RFC 2018 §8; Linux tcp_check_sack_reneging)."""
        t = self.tcb
        sb = self.scoreboard
        new = 0
        if t.sack_ok:
            limit = sub(t.snd_max, t.snd_una)
            for left, right in seg.sack_blocks:
                start, end = sub(left, t.snd_una), sub(right, t.snd_una)
                if 0 <= start < end <= limit:
                    new += sb.add(start, end)
        ranges = sb.ranges()
        if ranges and ranges[0][0] == 0:
            self.counters.add("TcpExtTCPSACKReneging")
            sb.clear()
            new = 0
        return new

    def on_ack_advance(self, ack: int, acked: int) -> None:
        """SND.UNA moved to ``ack`` (``acked`` bytes on): HighRxt never trails it, the
        scoreboard slides, and a RecoveryPoint far behind is forgotten."""
        if lt(self.high_rxt, ack):
            self.high_rxt = ack
        self.scoreboard.advance(acked)
        if self.recover is not None and self.algorithm is None \
                and sub(ack, self.recover) > 1 << 30:
            self.recover = None

    def detect(self, conn: Connection, seg: tcp.Repr, ack: int, new_ack: bool, acked: int,
               prior_wnd: int, newly_sacked: int, now: int) -> None:
        """Count duplicate ACKs and enter, drive or leave recovery (RFC 5681 §3.2,
        RFC 6582, RFC 6675 §5).  Outside recovery the caller has grown cwnd first."""
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
            algorithm.exit(conn, now)
            self.algorithm = None
            self.dupacks = 0
            return
        algorithm.on_ack(conn, new_ack, is_dup, acked, now)

    def _enter(self, conn: Connection, now: int) -> None:
        t = self.tcb
        if self.cwr is None:  # tcp_enter_recovery: a CWR reduction already set ssthresh
            conn.cc.on_congestion(now, sub(t.snd_max, t.snd_una))
        self.cwr = None
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

    def on_timeout(self) -> None:
        """An RTO: no fast retransmit for data sent before it (RFC 6582 §3.2 step 4), no
        recovery, and the SACKs are forgotten (RFC 2018 §8: the receiver may renege)."""
        t = self.tcb
        self.recover = add(t.snd_max, -1)
        self.algorithm = None
        self.cwr = None  # tcp_enter_loss: Loss replaces CWR
        self.dupacks = 0
        self.scoreboard.clear()
        self.high_rxt = t.snd_una

    def on_path_shrunk(self) -> None:
        """tcp_simple_retransmit: everything in flight goes again from SND.UNA, and
        duplicate ACKs for the old flight must not start a fast retransmit (RFC 6582
        §3.2 step 4, as after a timeout); no congestion response."""
        t = self.tcb
        self.recover = add(t.snd_max, -1)
        self.high_rxt = t.snd_una

    def sacked_below(self, seq: int) -> int:
        """Bytes SACKed between SND.UNA and ``seq``."""
        limit = sub(seq, self.tcb.snd_una)
        return sum(max(0, min(e, limit) - s) for s, e in self.scoreboard.ranges())
