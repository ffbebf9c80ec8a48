"""Loss detection and fast recovery: duplicate ACKs and SACK loss marks decide when to
enter recovery (RFC 5681 §3.2, RFC 6675 §5); the recovery itself is an object, NewReno
(RFC 6582) or SACK (RFC 6675), which sets cwnd through the congestion controller's
``set_cwnd`` and decides what recovery sends.  The recovery objects hold no state of
their own (``_recover``, ``_high_rxt``, ``_dupacks`` are the connection's), so one
instance of each serves every connection; ``Connection._recovery`` is None outside
recovery."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcunet.core.tcp.common import FIN, MASK32, SYN
from rcunet.core.tcp.sack import DUP_THRESH
from rcunet.wire import tcp
from rcunet.wire.seqnum import add, gt, sub

if TYPE_CHECKING:
    from rcunet.core.tcp.connection import Connection


class Recovery:
    """One fast-recovery algorithm."""

    name = "base"

    def enter(self, conn: Connection, now: int) -> None:
        """Loss detected: the algorithm's cwnd and first retransmission (the connection
        has set ssthresh and RecoveryPoint)."""
        raise NotImplementedError

    def on_ack(self, conn: Connection, new_ack: bool, is_dup: bool, acked: int,
               now: int) -> None:
        """An ACK below RecoveryPoint: a partial ACK or a duplicate."""

    def exit(self, conn: Connection, now: int) -> None:
        """A full ACK: recovery ends (the connection then forgets it)."""
        raise NotImplementedError

    def output(self, conn: Connection, now: int) -> None:
        """What the connection sends while in recovery."""
        while conn._try_send(now, room=conn._cwnd_room()):
            pass

    def __repr__(self) -> str:
        return f"<{self.name} recovery>"


class NewRenoRecovery(Recovery):
    """RFC 6582 (NewReno) on RFC 5681 §3.2's fast retransmit / fast recovery."""

    name = "reno"

    def enter(self, conn: Connection, now: int) -> None:
        t = conn.tcb
        conn.counters.add("TcpExtTCPRenoRecovery")
        conn._retransmit_at(t.snd_una, now)  # RFC 5681 §3.2 step 3
        conn.cc.set_cwnd(conn.cc.ssthresh + 3 * t.snd_mss)

    def on_ack(self, conn: Connection, new_ack: bool, is_dup: bool, acked: int,
               now: int) -> None:
        t = conn.tcb
        cc = conn.cc
        if new_ack:
            # RFC 6582 §3.2 step 3, partial ACK: retransmit the first unacknowledged
            # segment, deflate cwnd by the amount acked, add back one SMSS.
            conn._retransmit_at(t.snd_una, now)
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

    def enter(self, conn: Connection, now: int) -> None:
        t = conn.tcb
        conn.counters.add("TcpExtTCPSackRecovery")
        conn.cc.set_cwnd(conn.cc.ssthresh)  # RFC 6675 §5 step (4.2)
        conn._high_rxt = t.snd_una
        hole = conn.scoreboard.next_seg_rule3(0, t.snd_mss)
        end = conn._retransmit_at(t.snd_una, now, hole[1] if hole else None)  # step (4.3)
        if end is not None:
            conn._high_rxt = end

    def exit(self, conn: Connection, now: int) -> None:
        conn.cc.on_recovery_exit(now)

    def output(self, conn: Connection, now: int) -> None:
        """RFC 6675 §5 step (C): while cwnd - pipe >= 1 SMSS, send NextSeg()."""
        t = conn.tcb
        mss = t.snd_mss
        sb = conn.scoreboard
        for _ in range(1000):  # bounded: each pass sends a segment or stops
            una = t.snd_una
            high_data = sub(t.snd_max, una)
            hrx = max(0, sub(conn._high_rxt, una))
            if conn.cc.cwnd - sb.pipe(hrx, high_data, mss) < mss:
                return
            nxt = sb.next_seg(hrx, mss)  # rule 1: lost and not yet retransmitted
            if nxt is None and conn._try_send(now, room=mss):
                continue  # rule 2: new data
            if nxt is None:
                nxt = sb.next_seg_rule3(hrx, mss)  # rule 3
            if nxt is None:
                return
            end = conn._retransmit_at(add(una, nxt[0]), now, nxt[1])
            if end is None:
                return
            conn._high_rxt = end


NEWRENO = NewRenoRecovery()
SACK = SackRecovery()


class RecoveryMixin:
    """``Connection``'s loss detection and the entry to and exit from recovery."""

    __slots__ = ()

    def _loss_detection(self, seg: tcp.Repr, ack: int, new_ack: bool, acked: int,
                        prior_wnd: int, newly_sacked: int, now: int) -> None:
        t = self.tcb
        outstanding = t.snd_max != t.snd_una
        # RFC 5681 §2 duplicate ACK; RFC 6675 §2 also counts an ACK carrying new SACK info.
        is_dup = (not new_ack and ack == t.snd_una and outstanding and not seg.payload
                  and not seg.flags & (SYN | FIN)
                  and (newly_sacked > 0 or (t.snd_wnd == prior_wnd and not seg.sack_blocks)))
        recovery = self._recovery
        if recovery is None:
            if new_ack:
                self._dupacks = 0
                self._grow_cwnd(acked, now)
            elif is_dup:
                self._dupacks += 1
            lost = t.sack_ok and outstanding and self.scoreboard.is_lost(0, t.snd_mss)
            if outstanding and (self._dupacks >= DUP_THRESH or lost):
                # RFC 6582 §3.2 step 2: only if the ACK covers more than "recover".
                if self._recover is None or gt(ack, add(self._recover, 1)):
                    self._enter_recovery(now)
            return
        if self._recover is None or gt(ack, self._recover):
            self._exit_recovery(now)
            return
        recovery.on_ack(self, new_ack, is_dup, acked, now)

    def _grow_cwnd(self, acked: int, now: int) -> None:
        """New data acknowledged outside recovery: congestion control grows cwnd, but
        only while cwnd limits us (RFC 7661 §4.1 spirit; Linux tcp_cong_avoid asks
        tcp_is_cwnd_limited).  Header prediction calls it too."""
        if self._is_cwnd_limited():
            self.cc.on_ack(acked, now, self.rto.srtt)

    def _is_cwnd_limited(self) -> bool:
        """Linux tcp_is_cwnd_limited: cwnd limited a send in the current window, or, in
        slow start, cwnd is below twice the window's largest flight (``_cwnd_validate``
        keeps both), so slow start goes on while the ACKs drain the flight."""
        if self._cwnd_limited:
            return True
        cc = self.cc
        return cc.in_slow_start and cc.cwnd < 2 * self._max_flight

    def _enter_recovery(self, now: int) -> None:
        t = self.tcb
        flight = sub(t.snd_max, t.snd_una)
        self.cc.on_congestion(now, flight)
        self._recover = (t.snd_max - 1) & MASK32  # RFC 6582 recover / RFC 6675 RecoveryPoint
        self.counters.add("TcpExtTCPFastRetrans")
        recovery = self._recovery = SACK if t.sack_ok else NEWRENO
        recovery.enter(self, now)
        self._rtt_seq = None  # Karn

    def _exit_recovery(self, now: int) -> None:
        self._recovery.exit(self, now)
        self._recovery = None
        self._dupacks = 0
