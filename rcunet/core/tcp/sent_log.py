"""The segments in flight in the order they were last sent (Linux's tsorted_sent_queue,
with the per-skb xmit time and the TCPCB_LOST / TCPCB_EVER_RETRANS marks): what RACK
walks to decide loss by time, and what PRR counts as in flight.  A segment leaves the
log when it is cumulatively ACKed or SACKed.  Pure; sequence numbers 32-bit, times µs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rcunet.wire.seqnum import gt, le, lt, sub


# Its own __init__ (init=False): the one dataclass generates runs interpreted under mypyc.
@dataclass(slots=True, init=False)
class Sent:
    """One segment sent and not yet (S)ACKed."""

    seq: int
    end: int
    #: When it was last (re)sent (µs).
    xmit_time: int
    #: Ever retransmitted (TCPCB_EVER_RETRANS): its ACK is an ambiguous RTT sample.
    retransmitted: bool
    #: Marked lost and not retransmitted since (TCPCB_LOST without TCPCB_SACKED_RETRANS).
    lost: bool
    #: A retransmission not marked lost since (TCPCB_SACKED_RETRANS: tp->retrans_out).
    in_retrans: bool
    #: A retransmission of data marked lost, which Linux still counts lost until it is
    #: (S)ACKed (TCPCB_LOST kept with TCPCB_SACKED_RETRANS: tp->lost_out).
    lost_retrans: bool

    def __init__(self, seq: int, end: int, xmit_time: int, retransmitted: bool = False,
                 lost: bool = False, in_retrans: bool = False,
                 lost_retrans: bool = False) -> None:
        self.seq = seq
        self.end = end
        self.xmit_time = xmit_time
        self.retransmitted = retransmitted
        self.lost = lost
        self.in_retrans = in_retrans
        self.lost_retrans = lost_retrans


class SentLog:
    """Segments in flight, oldest transmission first (a dict keeps insertion order)."""

    __slots__ = ("_by_seq", "lost_count", "_last_us", "_last_end")

    def __init__(self) -> None:
        self._by_seq: dict[int, Sent] = {}
        #: How many entries are marked lost (lets the fast path skip a walk).
        self.lost_count = 0
        self._last_us = 0  # the latest transmission's time, and its end
        self._last_end = 0

    def __len__(self) -> int:
        return len(self._by_seq)

    def __iter__(self) -> Iterator[Sent]:
        return iter(self._by_seq.values())

    def sent(self, seq: int, end: int, now_us: int, retransmission: bool) -> None:
        """A segment went out: new data joins the tail; a retransmission replaces what
        it covers and moves to the tail (tcp_update_skb_after_send).

        RACK orders transmissions by time, ties by sequence (tcp_skb_sent_after: one
        burst shares a timestamp and goes out in sequence order).  On a virtual clock a
        retransmission can follow higher new data within the same microsecond, which a
        real clock would have told apart: it is stamped one microsecond later, so it
        still counts as sent after them."""
        if lt(now_us, self._last_us):
            now_us = self._last_us
        if now_us == self._last_us and lt(seq, self._last_end):
            now_us += 1
        self._last_us, self._last_end = now_us, end
        was_lost = False
        if retransmission:
            covered = [s for s in self._by_seq.values()
                       if not lt(s.seq, seq) and lt(s.seq, end)]
            for old in covered:
                was_lost = was_lost or old.lost or old.lost_retrans
                self._remove(old)
        elif seq in self._by_seq:
            self._remove(self._by_seq[seq])
        self._by_seq[seq] = Sent(seq, end, now_us, retransmission,
                                 in_retrans=retransmission, lost_retrans=was_lost)

    def acked(self, ack: int) -> list[Sent]:
        """SND.UNA moved to ``ack``: the segments wholly below it leave the log."""
        done = [s for s in self._by_seq.values() if le(s.end, ack)]
        for s in done:
            self._remove(s)
        return done

    def straddling(self, left: int, right: int) -> list[tuple[int, int]]:
        """The [seq, end) of the segments the block [left, right) covers only in part,
        in sequence order."""
        return sorted(((s.seq, s.end) for s in self._by_seq.values()
                       if lt(s.seq, right) and gt(s.end, left)
                       and (lt(s.seq, left) or gt(s.end, right))),
                      key=lambda r: sub(r[0], left))

    def sacked(self, blocks: list[tuple[int, int]]) -> list[Sent]:
        """The segments wholly inside a SACKed block (absolute sequence numbers) leave."""
        done = [s for s in self._by_seq.values()
                if any(not lt(s.seq, left) and le(s.end, right) for left, right in blocks)]
        for s in done:
            self._remove(s)
        return done

    def mark_lost(self, s: Sent) -> int:
        """Mark one entry lost; returns its bytes (0 if it already was)."""
        if s.lost:
            return 0
        s.lost = True
        s.in_retrans = False  # tcp_mark_skb_lost: retrans_out no longer counts it
        self.lost_count += 1
        return sub(s.end, s.seq)

    def mark_all_lost(self) -> None:
        """An RTO: everything in flight is lost (tcp_timeout_mark_lost)."""
        for s in self._by_seq.values():
            self.mark_lost(s)

    def unmark_lost(self) -> None:
        """Nothing is lost any more (tcp_undo_cwnd_reduction with unmark_loss)."""
        for s in self._by_seq.values():
            s.lost = s.lost_retrans = False
        self.lost_count = 0

    def lost_and_retrans_out(self) -> tuple[int, int]:
        """Linux's tp->lost_out and tp->retrans_out, in segments (TCP_INFO's tcpi_lost
        and tcpi_retrans): marked lost (retransmitted since or not), and retransmitted
        and not marked lost again; neither yet (S)ACKed."""
        lost = retrans = 0
        for s in self._by_seq.values():
            if s.lost or (s.in_retrans and s.lost_retrans):
                lost += 1
            if s.in_retrans:
                retrans += 1
        return lost, retrans

    def lost_in_order(self, snd_una: int) -> list[Sent]:
        """The lost entries by sequence number, what recovery retransmits first."""
        if not self.lost_count:
            return []
        return sorted((s for s in self._by_seq.values() if s.lost),
                      key=lambda s: sub(s.seq, snd_una))

    def in_flight(self, snd_una: int) -> int:
        """Bytes in flight (tcp_packets_in_flight: out, less SACKed and lost, plus
        retransmitted): the entries not marked lost, from SND.UNA on."""
        total = 0
        for s in self._by_seq.values():
            if not s.lost:
                total += sub(s.end, s.seq if gt(s.seq, snd_una) else snd_una)
        return total

    def segments_in_flight(self) -> int:
        """tcp_packets_in_flight: the entries not marked lost, in segments."""
        return len(self._by_seq) - self.lost_count

    def last(self) -> Sent | None:
        """The highest segment sent (what a tail loss probe retransmits)."""
        best: Sent | None = None
        for s in self._by_seq.values():
            if best is None or gt(s.end, best.end):
                best = s
        return best

    def clear(self) -> None:
        self._by_seq.clear()
        self.lost_count = 0

    def _remove(self, s: Sent) -> None:
        del self._by_seq[s.seq]
        if s.lost:
            self.lost_count -= 1
