"""The receiving half of a connection (RFC 9293 §3.10.7.4 steps one and seven/eight:
the window test, segment text and the FIN; RFC 9293 §3.8.6.2.2 receiver SWS avoidance;
RFC 2018 / 2883 SACK and D-SACK blocks): the receive queue, the out-of-order queue,
RCV.NXT's advance, the window we offer and when an ACK is owed.  ``Receiver`` is the
only writer of its fields; its ``DelayedAck`` decides the ACK's timing and
``Autotune`` the buffer's growth."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp.autotune import Autotune
from rcunet.core.tcp.buffers import RecvQueue
from rcunet.core.tcp.common import (
    CLOSE_WAIT,
    CLOSING,
    ESTABLISHED,
    FIN,
    FIN_WAIT_1,
    FIN_WAIT_2,
    MD5_OPTION_LEN,
    PSH,
    TIME_WAIT,
    TS_OPTION_LEN,
)
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.delack import DelayedAck
from rcunet.core.tcp.events import DataReceived, FinReceived
from rcunet.core.tcp.options import Options
from rcunet.core.tcp.reassembly import Assembler
from rcunet.core.tcp.sack import ReceiverBlocks
from rcunet.core.tcp.tcb import Tcb
from rcunet.wire import tcp
from rcunet.wire.seqnum import add, lt, sub

if TYPE_CHECKING:
    from rcunet.core.tcp.connection import Connection


class Receiver:
    """A connection's receiving half.  Methods that change the connection's state (a
    FIN, an abort on data after close) take the connection; the receiver keeps no
    reference to it."""

    # lockfree_read_slots: read by whichever thread holds the socket lock (Connection)
    __slots__ = lockfree_read_slots(
        "tcb", "counters", "delack", "autotune",
        "rx", "ofo", "rx_blocks", "fin_offset", "dsack", "rcv_unacked", "ack_now",
        "bytes_received", "rcv_ooopack")

    def __init__(self, tcb: Tcb, counters: Counters, delack: DelayedAck, autotune: Autotune,
                 ofo_max_ranges: int) -> None:
        self.tcb = tcb
        self.counters = counters
        self.delack = delack
        self.autotune = autotune
        self.rx = RecvQueue()  # in-order bytes the application has not read yet
        self.ofo = Assembler(ofo_max_ranges)
        self.rx_blocks = ReceiverBlocks()
        self.fin_offset: int | None = None  # peer FIN beyond a hole, relative to RCV.NXT
        self.dsack: tuple[int, int] | None = None  # duplicate range for the next ACK
        self.rcv_unacked = 0  # bytes received since our last ACK (delayed ACK)
        self.ack_now = False  # an ACK goes out with this engine call's output
        self.bytes_received = 0  # tp->bytes_received (TCP_INFO)
        self.rcv_ooopack = 0  # tp->rcv_ooopack: segments queued out of order (TCP_INFO)

    # ------------------------------------------------------------ ACKs
    def ack_at_once(self) -> None:
        """The next output pass sends an ACK (RFC 9293's "send an ACK" in §3.10.7)."""
        self.ack_now = True

    def ack_sent(self, options: Options) -> None:
        """A segment carrying our ACK went out (tcp_event_ack_sent)."""
        self.delack.ack_sent(options)
        self.ack_now = False
        self.rcv_unacked = 0

    def sack_blocks(self, payload_len: int) -> tuple[tuple[int, int], ...]:
        """The SACK blocks for an ACK (RFC 2018 §4), a pending D-SACK first (RFC 2883
        §4), as many as fit; call only when SACK was agreed."""
        if not len(self.ofo) and self.dsack is None:
            return ()
        t = self.tcb
        # RFC 2018 §3: what the 40 bytes of option space leave after the timestamps and
        # the MD5 signature, NOP NOP kind length then 8 per block (tcp_established_options:
        # none beside both)
        used = (TS_OPTION_LEN if t.ts_ok else 0) + (MD5_OPTION_LEN if t.md5 else 0)
        limit = min(4, max(0, (40 - used - 4) // 8))
        if payload_len:
            # a data segment carries only the blocks that fit in what its payload
            # leaves of snd_mss (NOP NOP kind len: 4 bytes, then 8 per block), so
            # header + data never exceed the MTU; pure ACKs carry them all
            limit = min(limit, max(0, (t.snd_mss - payload_len - 4) // 8))
        held = self.ofo.ranges() if limit else []
        blocks: tuple[tuple[int, int], ...] = ()
        if self.dsack is not None and limit:
            blocks = (self.dsack,)
            self.dsack = None
            limit -= 1
        return blocks + tuple((add(t.rcv_nxt, s), add(t.rcv_nxt, e))
                              for s, e in self.rx_blocks.blocks(held, limit))

    # ------------------------------------------------------------ the application's side
    def read(self, max_bytes: int) -> bytes:
        """Take up to ``max_bytes`` in-order bytes off the receive queue."""
        return self.rx.read(max_bytes)

    def take_syn_data(self, conn: Connection, data: bytes) -> None:
        """tcp_fastopen_create_child: a SYN's data joins the receive queue and RCV.NXT
        moves past it."""
        self.rx.append(memoryview(data))
        self.advance_rcv(len(data))

    def drop_out_of_order(self) -> None:
        """Nobody will read what arrived beyond a hole (close(), CLOSED)."""
        self.ofo.clear()

    def discard(self) -> None:
        """The connection is reset: nothing queued will be read."""
        self.rx.clear()
        self.ofo.clear()

    # ------------------------------------------------------------ segments
    def process_text_and_fin(self, conn: Connection, seg: tcp.Repr, seq: int, now: int) -> None:
        t = self.tcb
        fin = bool(seg.flags & FIN)
        payload = seg.payload
        if not conn.state.receives_data:
            if fin and conn.state.fin_received:
                self.ack_now = True  # a retransmitted FIN: ACK it again
                if conn.state is TIME_WAIT:
                    conn.timers.time_wait_at = now + conn.options.time_wait_timeout  # restart 2MSL
            elif payload:
                self.ack_now = True
            return
        off = sub(seq, t.rcv_nxt)
        data = memoryview(payload) if payload else memoryview(b"")
        if off < 0:  # trim the duplicate prefix
            cut = -off
            if data:
                self.note_dsack(seq, add(seq, min(cut, len(data))))
            if cut > len(data) or (cut == len(data) and not fin):
                return
            data, off = data[cut:], 0
        wnd = t.rcv_wnd
        if self.fin_offset is not None and off + len(data) > self.fin_offset:
            data = data[: max(0, self.fin_offset - off)]  # nothing exists beyond the FIN
        if off == 0 and wnd > 0 and not len(self.rx):
            pass  # in order into an empty queue: taken whole (_end_beyond_window)
        elif (0 < off < wnd and not len(self.rx)
              and self.ofo.buffered + len(data) <= conn.options.rcvbuf):
            pass  # out of order, starting in the window, into an empty queue: queued
            # whole while the buffer has room (tcp_data_queue_ofo, tcp_try_rmem_schedule)
        elif off + len(data) > wnd:  # trim to the window; a FIN beyond it goes too
            if wnd == 0 and data:
                self.counters.add("TcpExtTCPZeroWindowDrop")
            data = data[: max(0, wnd - off)]
            fin = False
            self.ack_now = True
        if off == 0 and (data or fin) and len(self.rx) > conn.options.rcvbuf:
            # tcp_data_queue: tcp_try_rmem_schedule fails (the queue is over SO_RCVBUF),
            # the segment is still taken into an empty queue or if it is a bare FIN, and
            # the ACK goes out at once (ICSK_ACK_NOMEM | ICSK_ACK_NOW)
            self.ack_now = True
        gap_filled = False
        if data and conn._orphaned:
            conn._abort_on_data(seg)  # new data after close() resets the connection
            return
        if data:
            conn.timers.data_received(now)
            t.rcv_mss = max(t.rcv_mss, min(len(data), conn.options.mss))
            if off == 0:
                self.autotune.rtt_measure(seg, len(data), now)
                gap_filled = self.deliver_in_order(conn, data, bool(seg.flags & PSH), now)
            else:
                self.queue_out_of_order(conn, off, data)
        if fin:
            # The first FIN position wins; one below data we already hold is contradictory.
            fin_off = sub(add(seq, len(payload)), t.rcv_nxt)
            if self.fin_offset is None and fin_off >= max((e for _, e in self.ofo.ranges()),
                                                           default=0):
                self.fin_offset = fin_off
        self.maybe_take_fin(conn, gap_filled, now)

    def deliver_in_order(self, conn: Connection, data: memoryview, psh: bool, now: int) -> bool:
        """Queue in-order data (and what it joins from the out-of-order queue), decide
        its ACK; True when it filled a gap."""
        had_holes = bool(len(self.ofo))
        if had_holes:
            self.dsack_ofo_overlap(conn, len(data))
        self.delack.data_received(len(data), psh, conn.options, now)
        self.rx.append(data)
        n = len(data)
        self.advance_rcv(n)
        while (chunk := self.ofo.pop_front()) is not None:
            self.rx.append(chunk)
            self.advance_rcv(len(chunk))
            n += len(chunk)
        conn._events.append(DataReceived(n))
        self.rcv_unacked += n
        if had_holes:
            self.ack_now = True  # RFC 5681 §4.2: ACK at once when a gap is (partly) filled
        elif self.full_segments_unacked(conn):
            self.ack_now = True
        elif self.delack.in_quickack_mode():
            self.ack_now = True  # __tcp_ack_snd_check: "We ACK each frame"
        elif self.delack.delay(conn.options, now):
            self.ack_now = True
        return had_holes

    def dsack_ofo_overlap(self, conn: Connection, n: int) -> None:
        """In-order data covering bytes the out-of-order queue already held: D-SACK the
        first such range, up to the new RCV.NXT (Linux tcp_ofo_queue: tcp_dsack_extend
        for each queued skb below dsack_high; RFC 2883 §4.1.1)."""
        for start, end in self.ofo.ranges():
            if start >= n:
                return
            rcv_nxt = self.tcb.rcv_nxt
            self.note_dsack(add(rcv_nxt, start), add(rcv_nxt, min(end, n)))
            return

    def full_segments_unacked(self, conn: Connection, fin: int = 0) -> bool:
        """RFC 5681 §4.2: ACK at least every second full-sized segment; Linux's test
        (__tcp_ack_snd_check): more than one receive MSS not yet acknowledged, and the
        window would not shrink -- while the application has not read, recv() sends this
        ACK (``maybe_window_update``), or the delayed-ACK timer does.  ``fin``: 1 when a
        FIN just arrived, whose sequence number counts (rcv_nxt - rcv_wup)."""
        return (self.rcv_unacked + fin > self.tcb.rcv_mss
                and self.free_window(conn) >= self.tcb.offered_window)

    def advance_rcv(self, n: int) -> None:
        t = self.tcb
        t.rcv_nxt = add(t.rcv_nxt, n)
        self.bytes_received += n  # tcp_rcv_nxt_update
        self.ofo.advance(n)
        self.rx_blocks.advance(n)
        if self.fin_offset is not None:
            self.fin_offset -= n

    def queue_out_of_order(self, conn: Connection, off: int, data: memoryview) -> None:
        added = self.ofo.add(off, data)
        self.delack.schedule()  # tcp_data_queue_ofo: inet_csk_schedule_ack
        if added is None:
            self.counters.add("TcpExtTCPOFODrop")
        else:
            self.counters.add("TcpExtTCPOFOQueue")
            self.rcv_ooopack += 1  # tcp_data_queue_ofo
            if added < len(data):
                self.counters.add("TcpExtTCPOFOMerge")  # overlapped what we already held
            if added == 0:
                start = add(self.tcb.rcv_nxt, off)
                self.note_dsack(start, add(start, len(data)))
            self.rx_blocks.note(off)
        self.ack_now = True  # RFC 5681 §4.2: out-of-order data gets an immediate dup ACK

    def note_dsack(self, start: int, end: int) -> None:
        """Report duplicate data in the next ACK's first SACK block (RFC 2883, Linux tcp_dsack).

        The sender uses it to detect spurious retransmissions; ours ignores such blocks.
        """
        if self.tcb.sack_ok and self.dsack is None and lt(start, end):
            self.dsack = (start, end)
            self.counters.add("TcpExtTCPDSACKOldSent")
        self.ack_now = True

    def maybe_take_fin(self, conn: Connection, gap_filled: bool, now: int) -> None:
        """Eighth step: a FIN counts once every byte before it has arrived (Linux
        tcp_fin).  ``gap_filled``: the segment that completed it filled a gap."""
        if self.fin_offset != 0 or not conn.state.receives_data:
            return
        t = self.tcb
        self.fin_offset = None
        t.rcv_nxt = add(t.rcv_nxt, 1)
        self.bytes_received += 1  # tcp_rcv_nxt_update counts the FIN's sequence number
        self.dsack = None  # tcp_fin: tcp_sack_reset (no D-SACK after the FIN)
        conn._events.append(FinReceived())
        st = conn.state
        if st is ESTABLISHED:
            conn._set_state(CLOSE_WAIT)
            # the ACK goes at once when a gap was filled (the FIN came from the
            # out-of-order queue: ICSK_ACK_NOW), more than one full segment is
            # unacknowledged, or tcp_data_queue found the queue over SO_RCVBUF
            at_once = (gap_filled or self.full_segments_unacked(conn, fin=1)
                       or len(self.rx) > conn.options.rcvbuf)
            self.ack_now = self.delack.fin_in_established(at_once, conn.options, now)
            return
        self.ack_now = True  # FIN-WAIT-1/2: tcp_fin sends the ACK at once (tcp_send_ack)
        if st is FIN_WAIT_1:
            # Our FIN is not ACKed (an ACK of it moved us to FIN-WAIT-2 in the fifth step).
            conn._set_state(CLOSING)  # simultaneous close
        elif st is FIN_WAIT_2:
            conn._enter_time_wait(now)

    def acceptable(self, conn: Connection, seq: int, length: int) -> bool:
        """The four-case table of RFC 9293 §3.10.7.4 against the advertised window.

        Zero window, data at RCV.NXT: accepted here so its ACK and RST/URG are processed
        ("special allowance", same section); the text is then trimmed off entirely.
        """
        t = self.tcb
        wnd = t.rcv_wnd
        if length == 0:
            if wnd == 0:
                return seq == t.rcv_nxt
            return self.in_rcv_window(seq, wnd)
        if wnd == 0:
            return seq == t.rcv_nxt
        return (self.in_rcv_window(seq, wnd)
                or self.in_rcv_window(add(seq, length - 1), wnd))

    def after_window(self, seq: int) -> bool:
        """SEG.SEQ past the window's right edge (tcp_sequence: after(seq, seq_limit))."""
        t = self.tcb
        return sub(seq, t.rcv_nxt) > t.rcv_wnd

    def end_beyond_window(self, seg: tcp.Repr, length: int) -> bool:
        """Linux tcp_sequence (6.x): the segment's end passes RCV.NXT + RCV.WND and the
        receive queue holds unread data.  A FIN may stand one past the edge; into an empty
        queue the segment is taken whole (tcp_data_queue then forces the memory)."""
        t = self.tcb
        over = sub(add(seg.seq, length), t.rcv_nxt) - t.rcv_wnd
        if over <= 0 or (over == 1 and seg.flags & FIN):
            return False
        return len(self.rx) > 0

    def in_rcv_window(self, seq: int, wnd: int) -> bool:
        off = sub(seq, self.tcb.rcv_nxt)
        return 0 <= off < wnd

    def maybe_window_update(self, conn: Connection) -> None:
        """After recv(): ACK at once when an ACK is due and more than one segment is
        unacknowledged (the input path held it while nobody read), or when the window at
        least doubles (Linux __tcp_cleanup_rbuf)."""
        t = self.tcb
        if not conn.state.receives_data:
            return
        if (conn.timers.delack_at is not None and self.rcv_unacked > t.rcv_mss
                or self.delack.read_wants_ack(not self.rx)):
            self.ack_now = True
            return
        now_wnd = t.rcv_wnd
        cap = self.window_cap(conn)
        if 2 * now_wnd <= cap:
            new_wnd = (self.free_window(conn) >> t.rcv_wscale) << t.rcv_wscale
            if new_wnd and new_wnd >= 2 * now_wnd:
                self.ack_now = True

    def window_cap(self, conn: Connection) -> int:
        """The most any window may be: the buffer, what the scale can express, and the
        window clamp (Linux __tcp_select_window: min(window_clamp, tcp_full_space))."""
        cap = min(conn.options.rcvbuf, 0xFFFF << self.tcb.rcv_wscale)
        clamp = self.autotune.window_clamp
        return min(cap, clamp) if clamp else cap

    def free_window(self, conn: Connection) -> int:
        """The window the buffer allows now (Linux __tcp_select_window before rounding):
        the buffer's free bytes, within the clamp."""
        free = max(0, min(conn.options.rcvbuf, 0xFFFF << self.tcb.rcv_wscale) - len(self.rx))
        clamp = self.autotune.window_clamp
        return min(free, clamp) if clamp else free

    def window_field(self, conn: Connection) -> int:
        """The 16-bit window to advertise, with receiver SWS avoidance (RFC 9293 §3.8.6.2.2).

        The right edge never moves left except by scaling granularity (RFC 7323 §2.4);
        it moves right only by at least min(buffer/2, MSS).
        """
        t = self.tcb
        ws = t.rcv_wscale
        cap = self.window_cap(conn)
        free = self.free_window(conn)
        cur = t.rcv_wnd
        if free - cur < min(cap // 2, t.rcv_mss):
            field = cur >> ws
        else:
            field = free >> ws
        field = min(field, 0xFFFF)
        edge = add(t.rcv_nxt, field << ws)
        if lt(t.rcv_adv, edge):
            t.rcv_adv = edge
        return field
