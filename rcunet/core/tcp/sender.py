"""The sending half of a connection (Linux tcp_sendmsg_locked and tcp_write_xmit; RFC
9293 §3.8.6 windows, Nagle, SWS avoidance; RFC 6298 timers armed): the send queue, the
PSH marks a write leaves, what goes out now and what is retransmitted.  ``Sender`` is
the only writer of its fields; it builds segments through the connection, which adds
the receiver's window, SACK blocks and timestamps."""

from __future__ import annotations

import errno as errnos
from collections import deque
from typing import TYPE_CHECKING

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp.buffers import SendQueue
from rcunet.core.tcp.chrono import BUSY, RWND_LIMITED, SNDBUF_LIMITED, Chrono
from rcunet.core.tcp.common import (
    ACK,
    CLOSE_WAIT,
    CLOSING,
    ESTABLISHED,
    FIN,
    FIN_WAIT_1,
    HALF32,
    LAST_ACK,
    MASK32,
    PSH,
    RST,
    SEND_STATES,
    SYN,
)
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.options import Options
from rcunet.core.tcp.pacing import pacing_rate, ssthresh_segments, tso_autosize
from rcunet.core.tcp.rto import RtoEstimator
from rcunet.core.tcp.sndbuf import TX_SKB_TRUESIZE, SendSkbs, is_writeable, memory_free
from rcunet.core.tcp.tcb import Tcb
from rcunet.core.tcp.timers import Timers
from rcunet.wire.seqnum import add, gt, le, lt, sub

if TYPE_CHECKING:
    from rcunet.core.tcp.connection import Connection

#: The payload one GSO skb may carry (Linux GSO_LEGACY_MAX_SIZE 65536 - 1 - MAX_TCP_HEADER)
GSO_MAX_SIZE = 65536 - 1 - 320


class Sender:
    """A connection's sending half.  Methods that send take the connection, which
    builds and queues the segments; the sender keeps no reference to it."""

    # lockfree_read_slots: read by whichever thread holds the socket lock (Connection)
    __slots__ = lockfree_read_slots(
        "tcb", "timers", "rto", "counters", "chrono",
        "tx", "skbs", "tx_seq", "write_seq", "fin_queued", "send_blocked", "nospace", "skb_ends",
        "pushed_seq",
        "snd_sml",
        "psh_seq", "eor_marks", "psh_marks", "tso_ends", "more", "push_once", "forced_until",
        "max_flight", "max_flight_seq", "cwnd_limited", "rtt_seq", "rtt_start")

    def __init__(self, tcb: Tcb, timers: Timers, rto: RtoEstimator, counters: Counters,
                 chrono: Chrono) -> None:
        self.tcb = tcb
        self.timers = timers
        self.rto = rto
        self.counters = counters
        self.chrono = chrono
        # tx holds every byte from tx_seq (first unacknowledged data byte) on
        self.tx = SendQueue()
        self.skbs = SendSkbs()  # where Linux's skbs of tx end: its truesize (sndbuf.py)
        self.tx_seq = add(tcb.iss, 1)
        # Linux tp->write_seq, kept as a field as Linux keeps it: always
        # add(tx_seq, len(tx)) (the writes below move it; an ACK moves tx_seq and shrinks
        # tx by the same count).  It is read on every output pass.
        self.write_seq = self.tx_seq
        self.fin_queued = False  # the application shut down its direction
        self.send_blocked = False  # send() refused bytes: its writer waits (TCP_NAGLE_PUSH)
        # Linux SOCK_NOSPACE: a write was refused or poll found the socket unwritable;
        # ``write_space`` reports SendSpaceAvailable once it is writable again
        self.nospace = False
        # Sequence numbers where a send-queue skb ends before the data does (Linux's
        # MSG_ZEROCOPY skbs: MAX_SKB_FRAGS user pages, one uarg): no segment crosses
        # one (tcp_write_xmit sends skbs).  Empty for ordinary writes.
        self.skb_ends: deque[int] = deque()
        # PSH bookkeeping (Linux tp->pushed_seq): where the last write's push mark went,
        # and the end of a write that outgrew half the peer's largest window
        # (forced_push), whose cwnd- or window-limited bursts end with PSH
        self.pushed_seq = self.tx_seq
        self.snd_sml = tcb.iss  # end of the last sub-MSS segment sent (Linux tp->snd_sml)
        # Where segments carry PSH: the last write's tail (tcp_mark_push; None after a
        # MSG_MORE write, whose tail Linux leaves unmarked) and the ends of MSG_EOR records,
        # which no later byte joins (TCP_SKB_CB(skb)->eor); ``more``: the output pass
        # of a MSG_MORE send is corked (tcp_push with TCP_NAGLE_CORK)
        self.psh_seq: int | None = None
        self.eor_marks: deque[int] = deque()
        self.psh_marks: deque[int] = deque()  # forced_push marks inside long writes
        # Where each TSO packet of new data ended (``end_tso_packet``), in sequence
        # order, until acknowledged: a retransmission is cut into the same packets, as
        # Linux resends the skbs of its retransmission queue (``resent_packet_end``)
        self.tso_ends: deque[int] = deque()
        self.more = False
        self.push_once = False  # this output pass pushes past cork and Nagle (TCP_NAGLE_PUSH)
        self.forced_until: int | None = None
        # tcp_cwnd_validate's bookkeeping for tcp_is_cwnd_limited: the largest flight of
        # the current window (max_packets_out, in bytes), where that window ends
        # (cwnd_usage_seq) and whether cwnd limited a send in it.
        self.max_flight = 0
        self.max_flight_seq = tcb.iss
        self.cwnd_limited = False
        self.rtt_seq: int | None = None  # Karn timing: end seq of the timed segment
        self.rtt_start = 0

    # ------------------------------------------------------------ the application's side
    def wmem_queued(self) -> int:
        """sk_wmem_queued: the queue's bytes and the empty truesize of its skbs."""
        return len(self.tx) + self.skbs.overhead()

    def send_space(self, options: Options) -> int:
        """sk_stream_wspace: the send buffer less what the queue takes."""
        return max(0, options.sndbuf - self.wmem_queued())

    def notsent(self) -> int:
        """Bytes written and not yet sent (Linux write_seq - snd_nxt: our SND.MAX)."""
        return max(0, sub(self.write_seq, self.tcb.snd_max))

    def write(self, conn: Connection, data: bytes | bytearray | memoryview, now: int,
              skb_ends: tuple[int, ...], more: bool, eor: bool) -> int:
        """Queue what the send buffer takes of ``data`` (``Connection.send`` has the
        rules for ``skb_ends``, ``more`` and ``eor``) and send what may go now; returns
        the bytes taken."""
        if conn.state not in SEND_STATES or self.fin_queued:
            raise BrokenPipeError(errnos.EPIPE, "send after shutdown or close")
        n = self.fill_skbs(conn, len(data), skb_ends)
        if n:
            conn.slow_start_after_idle_check(now)  # tcp_skb_entail
            self.chrono.start(BUSY, now)
        if n < len(data):
            self.send_blocked = self.nospace = True  # wait_for_space: SOCK_NOSPACE
            more = eor = False  # the writer will wait: tcp_push(flags & ~MSG_MORE)
        if n:
            if skb_ends:
                start = self.write_seq
                self.skb_ends.extend(add(start, off) for off in skb_ends if off <= n)
            self.tx.append(memoryview(data)[:n] if n < len(data) else data)
            self.write_seq = add(self.write_seq, n)
            self.mark_push(conn, n, more, eor)
            if eor and n == len(data):
                self.skbs.tail_closed = True  # TCP_SKB_CB(skb)->eor: no later byte joins
            if self.nagle_holds_tail(conn):
                conn.quiet = True  # nothing was sent: the caller has nothing to collect
            else:
                self.more = more
                try:
                    conn._output(now)
                finally:
                    self.more = False
        return n

    def queue_syn_data(self, data: bytes) -> None:
        """TCP Fast Open: the SYN's data is the first bytes of the send queue, and the
        write's tail is pushed (tcp_sendmsg_fastopen -> tcp_push).  Those bytes stay
        one skb marked PSH whatever is written after them (tcp_send_syn_data sets
        TCPHDR_ACK | TCPHDR_PSH on it; later writes start a new skb, as it was sent):
        no segment crosses its end, and one ending there carries PSH (``skb_ends``)."""
        self.tx.append(memoryview(data))
        self.write_seq = add(self.write_seq, len(data))
        self.skbs.push(self.write_seq)
        self.psh_seq = self.pushed_seq = self.write_seq
        if data:
            self.skb_ends.append(self.write_seq)

    def shut_down(self) -> bool:
        """SHUT_WR: a FIN follows the queued data.  False if one already did."""
        if self.fin_queued:
            return False
        self.fin_queued = True
        return True

    def discard(self) -> None:
        """The connection is reset or gave up: nothing queued will be sent."""
        self.tx.clear()
        self.skbs.clear()
        self.write_seq = self.tx_seq

    def push_pass(self, conn: Connection, now: int, push: bool) -> None:
        """One output pass that pushes the tail past TCP_CORK and Nagle when ``push``
        (TCP_NAGLE_PUSH: setting TCP_NODELAY, clearing TCP_CORK)."""
        self.push_once = push
        try:
            conn._output(now)
        finally:
            self.push_once = False

    # ------------------------------------------------------------ the peer's ACKs
    def drop_acked(self, ack: int) -> None:
        """SEG.ACK moved SND.UNA to ``ack``: the acknowledged bytes leave the send queue."""
        data_acked = min(max(sub(ack, self.tx_seq), 0), len(self.tx))
        if data_acked:
            self.tx.drop(data_acked)
            self.tx_seq = add(self.tx_seq, data_acked)
            self.skbs.acked(self.tx_seq)

    def syn_data_acked(self, acked: int) -> None:
        """A Fast Open SYN-ACK acknowledged ``acked`` bytes of the SYN's data."""
        if acked:
            self.tx.drop(acked)
            self.tx_seq = add(self.tx_seq, acked)
            self.skbs.acked(self.tx_seq)

    def is_writeable(self, options: Options) -> bool:
        """__sk_stream_is_writeable(sk, 1), what tcp_poll and sk_stream_write_space ask:
        a third of the send buffer free and the unsent bytes below half the not-sent
        low-water mark (rcunet.core.tcp.sndbuf)."""
        return is_writeable(self.wmem_queued(), options.sndbuf, self.notsent(),
                            options.notsent_lowat, wake=True)

    def note_nospace(self) -> None:
        """tcp_poll found the socket unwritable: set SOCK_NOSPACE."""
        self.nospace = True

    def write_space(self, options: Options) -> int:
        """tcp_check_space -> sk_stream_write_space, after an ACK was processed and what
        it let out was sent: with SOCK_NOSPACE set and the socket writable again, clear
        it and return the room a waiting writer may use (0: no wakeup)."""
        if self.nospace and self.is_writeable(options):
            self.nospace = self.send_blocked = False
            return max(1, self.send_space(options))
        return 0

    def rtt_sample(self, ack: int) -> int | None:
        """Karn's timed segment (RFC 6298 §3): when ``ack`` covers it, the time it was
        sent, and timing stops; else None."""
        if self.rtt_seq is not None and (ack == self.rtt_seq or lt(self.rtt_seq, ack)):
            self.rtt_seq = None
            return self.rtt_start
        return None

    # ------------------------------------------------------------ output
    def transmit(self, conn: Connection, now: int) -> None:
        """What may go now (tcp_write_xmit): new data and the FIN within cwnd and the
        peer's window in the packets Linux would send (``send_tso_packets``), or what
        recovery sends; then PSH on a forced push's burst cut short, the cwnd-use
        bookkeeping and the persist timer."""
        out = conn._out
        sent = len(out)
        had_unsent = self.unsent() > 0  # tcp_write_xmit runs with a send head
        loss = conn.loss
        snd_max = self.tcb.snd_max
        if loss.in_loss and loss.algorithm is None:
            loss.loss_output(conn, now)
        elif loss.algorithm is None:
            self.send_tso_packets(conn, now)
        else:
            loss.output(conn, now)
        if self.tcb.snd_max != snd_max:
            loss.schedule_probe(conn, now)  # tcp_write_xmit sent new data
        burst = len(out) > sent
        if burst and self.tx:
            self.push_burst_end(conn, sent)
        if had_unsent:
            self.chrono_rwnd(conn, now)
            self.skbs.split(self.tcb.snd_max)  # the skb this pass stopped inside
        self.cwnd_validate(conn, burst, now)
        self.arm_persist(conn, now)

    def fill_skbs(self, conn: Connection, want: int, skb_ends: tuple[int, ...]) -> int:
        """How many of ``want`` bytes a write queues, and the skbs they fill
        (tcp_sendmsg_locked's loop): the unsent tail skb takes bytes up to size_goal; a
        new skb is started only while ``memory_free`` holds (the queue's truesize below
        the send buffer, the unsent bytes below TCP_NOTSENT_LOWAT).  A full skb that is
        the send head goes out at once (tcp_push_one), as does everything unsent once
        the write passed half the peer's largest window (forced_push): what cwnd and the
        window let out now leaves the queue's unsent part, and an skb sent in part is
        split (tso_fragment: one more empty skb; its unsent rest becomes the tail, which
        the write fills up again).  The split itself is recorded when the output pass
        sends (``transmit``).  ``skb_ends``: offsets where a MSG_ZEROCOPY skb ends."""
        if want <= 0:
            return 0
        o = conn.options
        t = self.tcb
        skbs = self.skbs
        goal = self.size_goal()
        sndbuf, lowat = o.sndbuf, o.notsent_lowat
        queued = self.wmem_queued()
        notsent = self.notsent()
        tail = skbs.open_tail(self.tx_seq, t.snd_max)
        sendable = self.sendable_now(conn)
        sendable -= sendable % t.snd_mss  # whole segments (tcp_snd_wnd_test, tcp_cwnd_test)
        half = t.max_snd_wnd >> 1
        since_push = sub(self.write_seq, self.pushed_seq)
        start = self.write_seq
        bounds = deque(skb_ends) if skb_ends else None
        taken = 0
        while taken < want:
            room = want - taken
            if bounds:
                while bounds and bounds[0] <= taken:
                    if bounds.popleft() == taken:
                        tail = None  # a zerocopy skb ends here: the next bytes start one
                if bounds:
                    room = min(room, bounds[0] - taken)
            if tail is None or tail >= goal:
                if not memory_free(queued, sndbuf, notsent, lowat):
                    break
                queued += TX_SKB_TRUESIZE  # tcp_stream_alloc_skb
                skbs.push(add(start, taken))
                tail = 0
            copy = min(goal - tail, room)
            taken += copy
            tail += copy
            queued += copy
            notsent += copy
            since_push += copy
            skbs.extend_tail(add(start, taken))
            if taken < want and tail >= goal and (since_push > half or tail == notsent):
                since_push = 0 if since_push > half else since_push
                sent = min(notsent, sendable)
                sendable -= sent
                in_tail = sent - (notsent - tail)
                notsent -= sent
                if in_tail >= tail:
                    tail = None  # sent whole: the next bytes need a new skb
                elif in_tail > 0:
                    queued += TX_SKB_TRUESIZE  # tso_fragment
                    tail -= in_tail
        return taken

    def send_tso_packets(self, conn: Connection, now: int) -> None:
        """tcp_write_xmit's loop for new data: each pass builds what Linux sends as one
        TSO packet -- as many segments as ``tso_quota`` allows, each one ``try_send``
        (windows, Nagle, SWS avoidance) lets out -- and ends it (``end_tso_packet``);
        a packet cut short by those rules ends the loop."""
        out = conn._out
        while True:
            quota = self.tso_quota(conn)
            first = len(out)
            snd_max = self.tcb.snd_max
            sent = 0
            while sent < quota and self.try_send(conn, now, room=self.cwnd_room(conn)):
                sent += 1
            if not sent:
                return
            self.end_tso_packet(conn, first, snd_max)
            if sent < quota:
                return

    def send_recovery_packet(self, conn: Connection, now: int, in_flight: int) -> bool:
        """One TSO packet of new data while loss recovery holds cwnd to the segments in
        flight (``in_flight``, tcp_packets_in_flight: neither SACKed nor marked lost):
        what tcp_write_xmit sends after tcp_xmit_retransmit_queue, a segment at a time
        as ``try_send`` allows.  False when nothing went out."""
        out = conn._out
        quota = self.tso_quota(conn, in_flight)
        first = len(out)
        snd_max = self.tcb.snd_max
        sent = 0
        while (sent < quota and in_flight + sent < conn.cc.cwnd // self.tcb.snd_mss
               and self.try_send(conn, now, room=self.tcb.snd_mss)):
            sent += 1
        if sent:
            self.end_tso_packet(conn, first, snd_max)
        return sent > 0

    def tso_quota(self, conn: Connection, in_flight: int | None = None) -> int:
        """The segments of the next TSO packet (at least one: ``try_send`` has the last
        word on cwnd): tcp_cwnd_test's share -- what cwnd leaves, at most half of cwnd so
        that two packets are in flight -- bounded by tcp_tso_segs (``tso_autosize``).
        ``in_flight``: the segments in flight, when recovery counts them (else what
        ``cwnd_room`` leaves)."""
        t = self.tcb
        mss = t.snd_mss
        cc = conn.cc
        cwnd = cc.cwnd // mss
        if in_flight is None:
            in_flight = -(-max(cc.cwnd - self.cwnd_room(conn), 0) // mss)
        quota = min(max(cwnd >> 1, 1), cwnd - in_flight)
        srtt_us = (self.rto.srtt or 0) // 1000
        rate = pacing_rate(mss, cwnd, ssthresh_segments(cc.ssthresh, mss), in_flight,
                           srtt_us)
        max_segs = tso_autosize(rate, mss, conn.loss.min_rtt_us, conn.options.min_tso_segs)
        return max(1, min(quota, max_segs))

    def end_tso_packet(self, conn: Connection, first: int, snd_max: int) -> None:
        """The segments queued since ``first`` are one TSO packet: where it ends is
        remembered (``tso_ends``: a retransmission is cut along the same boundaries, as
        Linux resends the skbs it sent), and a packet of new data (beyond ``snd_max``)
        of two segments or more ends with PSH, as Linux's TSO packets of a burst carry
        it (packetdrill's slow-start, Nagle and Fast Open scripts show it).  A packet
        of one segment keeps the marks of its write (``push_marked``)."""
        out = conn._out
        last = None
        segments = 0
        for i in range(first, len(out)):
            if out[i].payload:
                last = i
                segments += 1
        if last is None:
            return
        seg = out[last]
        end = add(seg.seq, len(seg.payload))
        if not gt(end, snd_max):
            return  # resent bytes: their packet ends were noted when they first went out
        self._drop_acked_marks(self.tso_ends)
        self.tso_ends.append(end)
        if segments >= 2 and not seg.flags & (PSH | SYN | RST):
            out[last] = seg._replace(flags=seg.flags | PSH)

    def resent_packet_end(self, conn: Connection, seq: int, end: int) -> bool:
        """Does a retransmission of [seq, end) end a resent TSO packet of two segments or
        more: ``end`` is where a packet ended when first sent, and the segment queued
        just before this one resent the bytes before ``seq`` of that same packet (no
        packet boundary at ``seq``).  Such a packet carries PSH as it did the first
        time; a lone segment resent from it does not."""
        ends = self.tso_ends
        if not ends:
            return False
        self._drop_acked_marks(ends)
        if end not in ends or seq in ends:
            return False
        out = conn._out
        if not out:
            return False
        prev = out[-1]
        return bool(prev.payload) and add(prev.seq, len(prev.payload)) == seq

    def sendable_now(self, conn: Connection) -> int:
        """Bytes cwnd and the peer's window let out now, beyond SND.MAX."""
        t = self.tcb
        flight = sub(t.snd_max, t.snd_una)
        return max(0, min(conn.cc.cwnd - flight, t.snd_wnd - flight))

    def size_goal(self) -> int:
        """tcp_xmit_size_goal: the bytes one skb takes, whole segments up to the GSO
        limit and half the largest window the peer offered (tcp_bound_to_half_wnd)."""
        t = self.tcb
        mss = t.snd_mss
        cutoff = t.max_snd_wnd >> 1 if t.max_snd_wnd > 536 else t.max_snd_wnd
        goal = min(GSO_MAX_SIZE, cutoff)
        return max(mss, goal // mss * mss)

    def mark_push(self, conn: Connection, n: int, more: bool, eor: bool) -> None:
        """tcp_sendmsg_locked's push marks for a write of ``n`` bytes: each skb of
        size_goal bytes it fills that ends more than half the peer's largest window past
        the last mark is marked (forced_push -> tcp_mark_push; rcunet has no skbs: they
        are counted from where what cwnd lets out at once ends, as Linux sends the head
        skb when it is full and tso_fragment leaves the rest to take more bytes), the
        parts of such a write that cwnd or the window let out end with PSH
        (``push_burst_end``), and the write's tail is pushed (tcp_push ->
        tcp_mark_push) unless MSG_MORE.  A MSG_EOR write's end is a record boundary that
        keeps its PSH."""
        end = self.write_seq
        half = self.tcb.max_snd_wnd >> 1
        if n > half:
            goal = self.size_goal()
            unsent = self.notsent()
            first = add(end, min(unsent, self.sendable_now(conn)) - unsent)
            left = sub(end, first)
            boundary = add(first, goal)
            for _ in range(max(0, (left - 1) // goal)):  # full skbs before the tail one
                if ((boundary - self.pushed_seq) & MASK32) > half:
                    self.psh_marks.append(boundary)
                    self.pushed_seq = boundary
                boundary = add(boundary, goal)
        forced = ((end - self.pushed_seq) & MASK32) > half
        if forced:
            self.forced_until = end
        if forced or not more:
            self.pushed_seq = end
            self.psh_seq = end
        else:
            self.psh_seq = None  # appending to the tail clears its mark ("if (!copied)")
        if eor:
            self.eor_marks.append(end)

    def nagle_holds_tail(self, conn: Connection) -> bool:
        """Would ``transmit`` send nothing after an append?  True when nothing but new data
        is pending (no recovery, no ACK owed, no retransmission), the unsent bytes are
        less than a segment and Nagle holds them (``nagle_applies``, the rule
        ``try_send`` applies): the common case of a writer's small chunks joining the
        segment after the one in flight, where running the whole output path is waste."""
        t = self.tcb
        return (conn.loss.algorithm is None and not conn.receiver.ack_now
                and t.snd_nxt == t.snd_max  # unsent bytes: sub(add(tx_seq, len), snd_nxt)
                and sub(self.write_seq, t.snd_nxt) < t.snd_mss
                and not self.eor_marks
                and self.nagle_applies(conn))

    def fin_acked(self) -> bool:
        """Our FIN is sent and acknowledged: every byte and the FIN are."""
        if not self.fin_queued or self.tx:
            return False
        return self.tcb.snd_una == add(self.tx_seq, 1) and self.tcb.snd_max == self.tcb.snd_una

    def queues_empty(self) -> bool:
        """tcp_rtx_and_write_queues_empty: nothing unacknowledged, nothing unsent."""
        return not len(self.tx) and self.tcb.snd_una == self.tcb.snd_max

    def unsent(self) -> int:
        t = self.tcb
        return sub(self.write_seq, t.snd_nxt)

    def chrono_rwnd(self, conn: Connection, now: int) -> None:
        """End of tcp_write_xmit: the peer's window held back a segment congestion
        control would have sent (tcp_snd_wnd_test failed) -- or it did not."""
        t = self.tcb
        unsent = self.unsent()
        win_room = sub(add(t.snd_una, t.snd_wnd), t.snd_nxt)
        if unsent > 0 and self.cwnd_room(conn) > 0 and win_room < min(unsent, t.snd_mss):
            self.chrono.start(RWND_LIMITED, now)
        else:
            self.chrono.stop(RWND_LIMITED, now, self.queues_empty())

    def push_burst_end(self, conn: Connection, first: int) -> None:
        """PSH on the last new-data segment of a burst that congestion control or the
        peer's window cut short while a write that outgrew half the peer's largest
        window is going out (forced_push in tcp_sendmsg_locked: tcp_mark_push on its
        skbs, then __tcp_push_pending_frames).  The packets of other bursts carry PSH
        as ``end_tso_packet`` decides; a burst that ends because the data ran out ended
        with the write's own PSH (``try_send``)."""
        t = self.tcb
        snd_nxt = t.snd_nxt
        if snd_nxt != t.snd_max:
            return  # still resending below SND.MAX: the burst was retransmissions
        forced = self.forced_until
        if forced is None or not lt(snd_nxt, forced):
            return
        unsent = sub(self.write_seq, snd_nxt)
        want = min(unsent, t.snd_mss)
        if want <= 0:
            return
        win_room = sub(add(t.snd_una, t.snd_wnd), snd_nxt)
        if win_room >= want and self.cwnd_room(conn) >= want:
            return  # not cwnd- or window-limited: Nagle or SWS held the rest
        out = conn._out
        for i in range(len(out) - 1, first - 1, -1):
            seg = out[i]
            if seg.payload:
                if not seg.flags & (PSH | SYN | RST):
                    out[i] = seg._replace(flags=seg.flags | PSH)
                return

    def cwnd_validate(self, conn: Connection, sent: bool, now: int) -> None:
        """Linux tcp_cwnd_validate (end of tcp_write_xmit): remember whether cwnd limited
        a send in the current window, else the window's largest flight, for
        ``is_cwnd_limited``; a new window starts once SND.UNA passes the last one's end."""
        t = self.tcb
        snd_una = t.snd_una
        flight = sub(t.snd_nxt, snd_una)
        # in whole segments, as Linux counts packets_out against snd_cwnd: a cwnd that
        # a reduction left between two multiples of the MSS (CUBIC's 0.7) is full once
        # no further segment fits
        mss = t.snd_mss
        limited = -(-flight // mss) >= conn.cc.cwnd // mss
        if not (sent or limited):
            return
        if (limited or not lt(snd_una, self.max_flight_seq)
                or (not self.cwnd_limited and flight > self.max_flight)):
            self.cwnd_limited = limited
            self.max_flight = flight
            self.max_flight_seq = t.snd_nxt
        if (self.nospace and not self.is_cwnd_limited(conn) and self.unsent() <= 0
                and conn.state in (ESTABLISHED, CLOSE_WAIT)):
            # not cwnd-limited, nothing left to send, the writer waits for buffer space:
            # the send buffer is what holds the flow back
            self.chrono.start(SNDBUF_LIMITED, now)

    def stop_rtt_timing(self) -> None:
        """Karn: the timed segment's sample would be ambiguous; time none until the next
        new segment goes out."""
        self.rtt_seq = None

    def grow_cwnd(self, conn: Connection, acked: int, now: int) -> None:
        """New data acknowledged outside recovery: congestion control grows cwnd, but
        only while cwnd limits us (RFC 7661 §4.1 spirit; Linux tcp_cong_avoid asks
        tcp_is_cwnd_limited).  Header prediction calls it too.  Congestion control sees
        the ACK's RTT sample first (tcp_ack's pkts_acked: CUBIC's HyStart)."""
        t = self.tcb
        conn.cc.on_rtt(conn.loss.ca_rtt_us, now, t.snd_una, t.snd_max)
        if self.is_cwnd_limited(conn):
            conn.cc.on_ack(acked, now, self.rto.srtt)

    def is_cwnd_limited(self, conn: Connection) -> bool:
        """Linux tcp_is_cwnd_limited: cwnd limited a send in the current window, or, in
        slow start, cwnd is below twice the window's largest flight (``cwnd_validate``
        keeps both), so slow start goes on while the ACKs drain the flight."""
        if self.cwnd_limited:
            return True
        cc = conn.cc
        return cc.in_slow_start and cc.cwnd < 2 * self.max_flight

    def nagle_applies(self, conn: Connection) -> bool:
        """Nagle (RFC 896, RFC 1122 §4.2.3.4) as Linux runs it, Minshall's variant
        (tcp_nagle_check, tcp_minshall_check): a segment smaller than SMSS waits while an
        earlier small segment is unacknowledged -- full segments in flight do not hold
        it -- unless TCP_NODELAY.  Not while the writer waits for buffer space: nothing
        more can join the segment (Linux pushes with TCP_NAGLE_PUSH before sleeping in
        tcp_sendmsg).  The one copy of the rule: ``try_send`` and ``write``'s shortcut
        (``nagle_holds_tail``) both ask it."""
        t = self.tcb
        sml = self.snd_sml
        # tcp_minshall_check: after(snd_sml, snd_una) && !after(snd_sml, snd_nxt), with
        # Linux's snd_nxt being our SND.MAX.  Only
        # small data segments move snd_sml, so a Fast Open child's SYN,ACK in flight
        # (its request socket's in Linux, not in packets_out) never holds one.
        return (not conn.options.nodelay and not self.send_blocked
                and lt(t.snd_una, sml) and not lt(t.snd_max, sml))

    def tail_held(self, conn: Connection) -> bool:
        """Does the partial segment at the tail wait?  tcp_nagle_check: TCP_CORK or a
        MSG_MORE send (TCP_NAGLE_CORK) holds it whatever is in flight, Nagle
        (``nagle_applies``) while a small segment is unacknowledged; a writer waiting
        for buffer space pushes past both (TCP_NAGLE_PUSH)."""
        if self.push_once:
            return False
        if (conn.options.cork or self.more) and not self.send_blocked:
            return True
        return self.nagle_applies(conn)

    def push_marked(self, end: int) -> bool:
        """Does a segment ending at ``end`` carry PSH: the last write's pushed tail
        (tcp_mark_push), a forced push inside a long write, the end of a MSG_ZEROCOPY skb
        (marked before a new one) or of a MSG_EOR record."""
        if end == self.psh_seq or end in self.eor_marks or end in self.skb_ends:
            return True
        marks = self.psh_marks
        if not marks:
            return False
        self._drop_acked_marks(marks)
        return end in marks

    def _drop_acked_marks(self, marks: deque[int]) -> None:
        """Forget the ``marks`` (sequence numbers in order) the peer acknowledged: no
        segment ends there again."""
        una = self.tcb.snd_una
        while marks and not lt(una, marks[0]):
            marks.popleft()

    def record_left(self, seq: int) -> int:
        """Bytes from ``seq`` to the end of its MSG_EOR record (a segment never joins
        two: tcp_skb_can_collapse_to); records wholly acknowledged are forgotten."""
        left = self._to_next_mark(self.eor_marks, seq)
        return HALF32 if left is None else left

    def cwnd_room(self, conn: Connection) -> int:
        """Bytes congestion control lets us put in flight now.

        RFC 3042 limited transmit: the first two duplicate ACKs each allow one more new
        segment beyond cwnd (cwnd itself is unchanged).  With SACK a SACKed segment has
        left the network (tcp_packets_in_flight: packets_out - sacked_out), which is how
        Linux sends a new segment for each of the first SACKed duplicate ACKs while RACK
        waits out its reordering window.
        """
        t = self.tcb
        loss = conn.loss
        if loss.in_loss and t.sack_ok:
            # Loss state: what is in flight is what Linux counts (tcp_packets_in_flight:
            # the segments not marked lost nor SACKed), F-RTO's new data included
            return conn.cc.cwnd - loss.log.in_flight(t.snd_una)
        snd_nxt = t.snd_nxt
        room = conn.cc.cwnd - sub(snd_nxt, t.snd_una)
        if t.sack_ok:
            if loss.algorithm is None or lt(snd_nxt, t.snd_max):
                # SACKed bytes are not in flight: before recovery, or going back N
                # after an RTO
                room += loss.sacked_below(snd_nxt)
        elif loss.algorithm is None and loss.dupacks and snd_nxt == t.snd_max:
            room += min(loss.dupacks, 2) * t.snd_mss
        return room

    def try_send(self, conn: Connection, now: int, room: int, force: bool = False,
                 push: bool = False) -> bool:
        """Send one segment from SND.NXT if the windows, Nagle and SWS rules allow it.

        ``room`` is what congestion control allows (cwnd minus flight, or one SMSS in
        SACK recovery).  ``force`` overrides SWS/Nagle (a loss probe, persist timer
        expiry); ``push`` sets PSH whatever the write's marks (tcp_write_wakeup's probe
        does; a loss probe's new data keeps its skb's flags, tcp_send_loss_probe).
        """
        t = self.tcb
        sacked_limit = (self.skip_sacked(conn) if lt(t.snd_nxt, t.snd_max)
                        else None)  # may move snd_nxt: loaded after it
        snd_nxt = t.snd_nxt
        data_end = self.write_seq
        avail = sub(data_end, snd_nxt)
        if avail < 0 or (avail == 0 and not self.fin_queued):
            return False  # nothing (more) to send: the common second call from _output
        fin_pending = self.fin_queued and conn.state in (
            FIN_WAIT_1, CLOSING, LAST_ACK) and le(snd_nxt, data_end) \
            and not self.fin_acked()
        if self.skb_ends:  # an skb ends before the data: this segment stops there
            bound = self.skb_bound(snd_nxt)
            if bound is not None and bound < avail:
                avail, fin_pending = bound, False
        win_room = sub(add(t.snd_una, t.snd_wnd), snd_nxt)
        record = avail  # bytes up to the end of the data, or of the MSG_EOR record
        if self.eor_marks:
            record = min(avail, self.record_left(snd_nxt))
        n = min(record, t.snd_mss, win_room, room)
        if sacked_limit is not None:
            n = min(n, sacked_limit)
        if n < 0:
            n = 0
        retransmission = lt(snd_nxt, t.snd_max)
        if n == 0 and not (fin_pending and avail == 0):
            return False
        if not retransmission and not force and n < record:
            # Sender SWS avoidance (RFC 9293 §3.8.6.2.1): a full segment, or half the
            # largest window the peer ever offered.
            if n < t.snd_mss and n < t.max_snd_wnd // 2:
                return False
        if (not retransmission and not force and n == avail and 0 < n < t.snd_mss
                and not fin_pending and self.tail_held(conn)):
            return False  # Nagle or the cork: this small segment waits
        fin = fin_pending and n == avail and win_room > n
        if n == 0 and not fin:
            return False
        seq = snd_nxt
        off = sub(seq, self.tx_seq)
        payload = self.tx.slice(off, n)
        flags = ACK | (FIN if fin else 0)
        if n and (push or self.push_marked(add(seq, n)) or (
                retransmission and self.resent_packet_end(conn, seq, add(seq, n)))):
            flags |= PSH  # tcp_write_wakeup (the probe timer's send) sets PSH as well
        conn._emit(conn._make(seq, flags, now, payload))
        if n:
            conn.delack.data_sent(now)
        end = add(seq, n + (1 if fin else 0))
        if 0 < n < t.snd_mss and not retransmission:
            self.snd_sml = end  # tcp_minshall_update
        if retransmission:
            self._retransmitted(seq, n)
        elif self.rtt_seq is None and not t.ts_ok:
            self.rtt_seq, self.rtt_start = end, now  # time this segment (Karn, RFC 6298 §3)
        conn.loss.note_sent(seq, end, now, retransmission)
        t.snd_nxt = end
        if gt(end, t.snd_max):
            t.snd_max = end
        if self.timers.rto_at is None:
            self.timers.rto_at = now + self.rto.rto  # RFC 6298 §5.1
        self.timers.persist_at = None
        return True

    def send_new(self, conn: Connection, now: int) -> None:
        """F-RTO step 2.b (tcp_xmit_recovery's REXMIT_NEW): never-sent data from SND.MAX
        as cwnd allows over what is really in flight (tcp_packets_in_flight: the lost
        segments are not), while the go-back-N point (SND.NXT) waits."""
        t = self.tcb
        resume = t.snd_nxt
        t.snd_nxt = t.snd_max
        log = conn.loss.log
        sent = False
        while self.try_send(conn, now, room=conn.cc.cwnd - log.in_flight(t.snd_una)):
            sent = True
        self.cwnd_validate(conn, sent, now)  # tcp_write_xmit's, over the flight it sent into
        self.skbs.split(t.snd_max)
        t.snd_nxt = resume

    def _retransmitted(self, seq: int, n: int) -> None:
        """A segment of ``n`` bytes at ``seq`` was resent: counted, and the skb it was
        cut from split where it ended (tcp_retransmit_skb's tcp_fragment)."""
        self.counters.add("TcpRetransSegs")
        if n:
            self.skbs.split(add(seq, n))

    def skb_bound(self, seq: int) -> int | None:
        """Bytes from ``seq`` to the next skb end after it (None: none before the data's
        end); ends the peer acknowledged are dropped first."""
        return self._to_next_mark(self.skb_ends, seq)

    def _to_next_mark(self, marks: deque[int], seq: int) -> int | None:
        """Bytes from ``seq`` to the first of ``marks`` after it (None: none); the marks
        the peer has acknowledged are dropped first."""
        una = self.tcb.snd_una
        while marks and not lt(una, marks[0]):
            marks.popleft()
        for mark in marks:
            left = sub(mark, seq)
            if left > 0:
                return left
        return None

    def skip_sacked(self, conn: Connection) -> int | None:
        """Go-back-N after an RTO skips what the peer SACKed since (RFC 6675 §5.1).

        Moves SND.NXT past SACKed ranges; returns how many bytes may go before the next
        SACKed range (None: no limit).  SACK information from before the timeout was
        discarded (RFC 2018 §8), so only fresh reports are trusted here.
        """
        t = self.tcb
        if not t.sack_ok:
            return None
        off = sub(t.snd_nxt, t.snd_una)
        for start, end in conn.loss.scoreboard.ranges():
            if end <= off:
                continue
            if start <= off:
                off = end
                t.snd_nxt = add(t.snd_una, off)
                continue
            return start - off
        return None

    def retransmit_at(self, conn: Connection, seq: int, now: int,
                      max_len: int | None = None) -> int | None:
        """Retransmit one segment starting at ``seq``; return its end sequence number."""
        t = self.tcb
        off = sub(seq, self.tx_seq)
        if off < 0:
            return None
        limit = t.snd_mss if max_len is None else min(max_len, t.snd_mss)
        # __tcp_retransmit_skb: never beyond the window the peer offers now (a receiver
        # behind unread data drops a segment whose end passes it, ACK and all); beyond
        # it only the head goes, a segment's worth, as a probe
        avail_wnd = sub(add(t.snd_una, t.snd_wnd), seq)
        if avail_wnd <= 0:
            if seq != t.snd_una:
                return None
            avail_wnd = t.snd_mss
        limit = min(limit, avail_wnd)
        bound = self.skb_bound(seq) if self.skb_ends else None
        if bound is not None:
            limit = min(limit, bound)
        if self.eor_marks:
            limit = min(limit, self.record_left(seq))
        n = max(0, min(limit, len(self.tx) - off))
        fin = (self.fin_queued and off + n == len(self.tx)
               and conn.state in (FIN_WAIT_1, CLOSING, LAST_ACK)
               and lt(add(seq, n), t.snd_max))
        if n == 0 and not fin:
            return None
        flags = ACK | (FIN if fin else 0) | (
            PSH if n and (off + n == len(self.tx) or n == bound
                          or self.push_marked(add(seq, n))
                          or self.resent_packet_end(conn, seq, add(seq, n))) else 0)
        conn._emit(conn._make(seq, flags, now, self.tx.slice(off, n)))
        if n:
            conn.delack.data_sent(now)
        self._retransmitted(seq, n)
        end = add(seq, n + (1 if fin else 0))
        conn.loss.note_sent(seq, end, now, True)
        if self.rtt_seq is not None and lt(seq, self.rtt_seq):
            self.rtt_seq = None  # Karn: never time a retransmitted segment
        if self.timers.rto_at is None:
            self.timers.rto_at = now + self.rto.rto
        return end

    def arm_persist(self, conn: Connection, now: int) -> None:
        """Start the persist timer when data waits on a closed window with nothing in flight."""
        t = self.tcb
        if t.snd_una != t.snd_max:
            return
        waiting = bool(self.tx) or (self.fin_queued and not self.fin_acked())
        tm = self.timers
        if not waiting:
            tm.persist_stop()
            return
        if tm.persist_at is None:
            tm.persist_at = now + tm.persist_interval(self.rto.base_rto, conn.options.rto_max)
