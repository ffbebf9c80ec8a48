"""The receiving half of a connection (RFC 9293 §3.10.7.4 steps one and seven/eight:
the window test, segment text and the FIN; RFC 2018 / 2883 SACK and D-SACK blocks): the
receive queue, the out-of-order queue, RCV.NXT's advance, the window we offer (Linux's
tcp_select_window arithmetic, rcunet.core.tcp.window, which also avoids the silly window
syndrome of RFC 9293 §3.8.6.2.2) and when an ACK is owed.  ``Receiver`` is the
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
from rcunet.core.tcp.window import (
    DEFAULT_SCALING_RATIO,
    MAX_WSCALE,
    MIN_WINDOW_CLAMP,
    PAGE_SIZE,
    SKB_EMPTY_TRUESIZE,
    buffer_space_clamp,
    grow_increment,
    measured_ratio,
    rx_truesize,
    select_window,
    win_from_space,
)
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
        "bytes_received", "rcv_ooopack",
        "ofo_rmem", "scaling_ratio", "window_clamp", "rcv_ssthresh")

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
        # Linux's receive-window state (rcunet.core.tcp.window): the truesize the
        # out-of-order queue holds (the receive queue keeps its own, ``rx.rmem``),
        # payload over truesize as last measured, the most any window may be, and the
        # window's slow-start threshold (tp->rcv_ssthresh)
        self.ofo_rmem = 0
        self.scaling_ratio = DEFAULT_SCALING_RATIO
        self.window_clamp = 0
        self.rcv_ssthresh = 0

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
        moves past it, and the window's left edge with it (rcv_wup = rcv_nxt): the
        SYN,ACK acknowledges the data and offers its whole window beyond it."""
        self.rx.append(memoryview(data), rx_truesize(len(data)))
        self.advance_rcv(len(data))
        t = self.tcb
        t.first_window(sub(t.rcv_adv, t.rcv_nxt) + len(data))

    def drop_out_of_order(self) -> None:
        """Nobody will read what arrived beyond a hole (close(), CLOSED)."""
        self.ofo.clear()
        self.ofo_rmem = 0

    def discard(self) -> None:
        """The connection is reset: nothing queued will be read."""
        self.rx.clear()
        self.ofo.clear()
        self.ofo_rmem = 0

    # ------------------------------------------------------------ buffer and window
    @property
    def rmem(self) -> int:
        """sk_rmem_alloc: the truesize of every segment held, in order or not."""
        return self.rx.rmem + self.ofo_rmem

    def offer_first_window(self, conn: Connection, window: int) -> None:
        """tcp_select_initial_window's clamp and rcv_ssthresh for the window of our SYN
        or SYN,ACK: the socket's clamp (SO_RCVBUF, TCP_WINDOW_CLAMP; else the largest),
        no more than the window scale can express."""
        clamp = conn.options.window_clamp or 0xFFFF << MAX_WSCALE
        self.window_clamp = min(clamp, 0xFFFF << self.tcb.rcv_wscale)
        self.rcv_ssthresh = window

    def init_buffer_space(self, conn: Connection) -> int:
        """tcp_init_buffer_space at ESTABLISHED: the clamp keeps one segment of the full
        space in reserve, rcv_ssthresh stays under it.  Returns the first round trip's
        receive space for autotuning (rcvq_space.space)."""
        o = conn.options
        maxwin = win_from_space(self.scaling_ratio, o.rcvbuf)
        self.window_clamp = buffer_space_clamp(maxwin, self.window_clamp, o.mss)
        self.rcv_ssthresh = min(self.rcv_ssthresh, self.window_clamp)
        return min(self.rcv_ssthresh, self.tcb.offered_window, o.initial_cwnd * o.mss)

    def set_window_clamp(self, value: int) -> None:
        """tcp_set_window_clamp: a lower clamp pulls rcv_ssthresh down with it
        (__tcp_adjust_rcv_ssthresh); a higher one lets it rise to the window offered."""
        old, new = self.window_clamp, max(MIN_WINDOW_CLAMP, value)
        if new == old:
            return
        self.window_clamp = new
        if new < old:
            self.rcv_ssthresh = min(self.rcv_ssthresh, new)
        else:
            self.rcv_ssthresh = max(min(self.tcb.offered_window, new), self.rcv_ssthresh)

    def ofo_extent(self) -> int:
        """Bytes from RCV.NXT to the end of the out-of-order queue (0: empty)."""
        return self.ofo.end()

    def rcvbuf_grown(self, rcvbuf: int) -> None:
        """tcp_rcvbuf_grow: autotuning grew the buffer; the clamp follows it."""
        self.window_clamp = win_from_space(self.scaling_ratio, rcvbuf)

    def measure_rcv_mss(self, conn: Connection, length: int) -> None:
        """tcp_measure_rcv_mss: a segment at least as large as the estimate and not
        equal to it re-measures the scaling ratio from its truesize; a new ratio moves the
        clamp to the full space at that ratio.  Then the estimate grows to the segment."""
        t = self.tcb
        if length >= t.rcv_mss and length != t.rcv_mss:
            ratio = measured_ratio(length, rx_truesize(length))
            if ratio != self.scaling_ratio:
                self.scaling_ratio = ratio
                self.set_window_clamp(win_from_space(ratio, conn.options.rcvbuf))
        t.rcv_mss = max(t.rcv_mss, min(length, conn.options.mss))

    def grow_window(self, conn: Connection, length: int, truesize: int) -> None:
        """tcp_grow_window: raise rcv_ssthresh for a segment received, within the room
        the clamp and the free space leave."""
        o = conn.options
        room = min(self.window_clamp, self.space(conn)) - self.rcv_ssthresh
        if room <= 0:
            return
        incr = grow_increment(self.scaling_ratio, length, truesize, self.rcv_ssthresh,
                              o.rmem_limit, o.mss, self.tcb.rcv_mss)
        if incr:
            self.rcv_ssthresh += min(room, incr)

    def space(self, conn: Connection) -> int:
        """tcp_space: the buffer's free memory as window bytes (negative when over)."""
        return win_from_space(self.scaling_ratio, conn.options.rcvbuf - self.rmem)

    def select_window(self, conn: Connection) -> int:
        """__tcp_select_window for this connection now."""
        t = self.tcb
        o = conn.options
        return select_window(self.space(conn), win_from_space(self.scaling_ratio, o.rcvbuf),
                             self.window_clamp, self.rcv_ssthresh, t.offered_window,
                             t.rcv_mss, t.rcv_wscale, o.shrink_window)

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
        if off == 0 and (data or fin) and self.rmem > conn.options.rcvbuf:
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
            self.measure_rcv_mss(conn, len(data))
            if off == 0:
                self.autotune.rtt_measure(seg, len(data), now)
                gap_filled = self.deliver_in_order(conn, data, bool(seg.flags & PSH), now)
            else:
                self.queue_out_of_order(conn, off, data)
        if fin:
            # The first FIN position wins; one below data we already hold is contradictory.
            fin_off = sub(add(seq, len(payload)), t.rcv_nxt)
            if self.fin_offset is None and fin_off >= self.ofo.end():
                self.fin_offset = fin_off
        self.maybe_take_fin(conn, gap_filled, now)

    def deliver_in_order(self, conn: Connection, data: memoryview, psh: bool, now: int) -> bool:
        """Queue in-order data (and what it joins from the out-of-order queue), decide
        its ACK; True when it filled a gap."""
        had_holes = bool(len(self.ofo))
        if had_holes:
            self.dsack_ofo_overlap(conn, len(data))
        self.delack.data_received(len(data), psh, conn.options, now)
        n = len(data)
        truesize = rx_truesize(n)
        self.rx.append(data, truesize)
        self.advance_rcv(n)
        while (chunk := self.ofo.pop_front()) is not None:
            self.take_from_ofo(chunk)
            n += len(chunk)
        if len(data) >= 128:  # tcp_event_data_recv
            self.grow_window(conn, len(data), _adjusted(truesize, len(data)))
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
                and self.select_window(conn) >= self.tcb.offered_window)

    def take_from_ofo(self, chunk: bytes) -> None:
        """A range of the out-of-order queue joins the receive queue, with its charge
        (the queue's own charge in full once it is empty)."""
        size = min(rx_truesize(len(chunk)), self.ofo_rmem)
        if not len(self.ofo):
            size = self.ofo_rmem
        self.ofo_rmem -= size
        self.rx.append(chunk, size)
        self.advance_rcv(len(chunk))

    def advance_rcv(self, n: int) -> None:
        t = self.tcb
        t.rcv_nxt = add(t.rcv_nxt, n)
        self.bytes_received += n  # tcp_rcv_nxt_update
        self.ofo.advance(n)
        self.rx_blocks.advance(n)
        if self.fin_offset is not None:
            self.fin_offset -= n

    def queue_out_of_order(self, conn: Connection, off: int, data: memoryview) -> None:
        truesize = rx_truesize(len(data))
        if self.tcb.sack_ok:  # tcp_data_queue_ofo: grown before the charge, SACK only
            self.grow_window(conn, len(data), truesize)
        added = self.ofo.add(off, data)
        if added:
            self.ofo_rmem += truesize
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
                       or self.rmem > conn.options.rcvbuf)
            self.ack_now = self.delack.fin_in_established(at_once, conn.options, now)
            return
        self.ack_now = True  # FIN-WAIT-1/2: tcp_fin sends the ACK at once (tcp_send_ack)
        if st is FIN_WAIT_1:
            # Our FIN is not ACKed (an ACK of it moved us to FIN-WAIT-2 in the fifth step).
            conn._set_state(CLOSING)  # simultaneous close
        elif st is FIN_WAIT_2:
            conn._enter_time_wait(now)

    def acceptable(self, conn: Connection, seq: int, length: int) -> bool:
        """The four-case table of RFC 9293 §3.10.7.4 against the largest window we
        offered: after a window shrank, a segment that any earlier window took is still
        acceptable (RFC 7323 §2.4's receiver MUST; Linux tcp_sequence with
        tcp_max_receive_window), else the peer's ACKs would be lost to us until the
        application read enough.  What it carries past the window offered now is
        trimmed later (``process_text_and_fin``).

        Zero window, data at RCV.NXT: accepted here so its ACK and RST/URG are processed
        ("special allowance", same section); the text is then trimmed off entirely.
        """
        t = self.tcb
        wnd = t.max_rcv_wnd
        if length == 0:
            if wnd == 0:
                return seq == t.rcv_nxt
            return self.in_rcv_window(seq, wnd)
        if wnd == 0:
            return seq == t.rcv_nxt
        return (self.in_rcv_window(seq, wnd)
                or self.in_rcv_window(add(seq, length - 1), wnd))

    def after_window(self, seq: int) -> bool:
        """SEG.SEQ past the right edge of every window we offered (tcp_sequence:
        after(seq, rcv_nxt + tcp_max_receive_window))."""
        t = self.tcb
        return sub(seq, t.rcv_nxt) > t.max_rcv_wnd

    def end_beyond_window(self, seg: tcp.Repr, length: int) -> bool:
        """Linux tcp_sequence: the segment's end passes the right edge of every window we
        offered and the receive queue holds unread data.  A FIN may stand one past the
        window offered now; into an empty queue the segment is taken whole (tcp_data_queue
        then forces the memory)."""
        t = self.tcb
        end = sub(add(seg.seq, length), t.rcv_nxt)
        if end <= t.max_rcv_wnd or (seg.flags & FIN and end - 1 <= t.rcv_wnd):
            return False
        return len(self.rx) > 0

    def in_rcv_window(self, seq: int, wnd: int) -> bool:
        off = sub(seq, self.tcb.rcv_nxt)
        return 0 <= off < wnd

    def maybe_window_update(self, conn: Connection, copied: int) -> None:
        """__tcp_cleanup_rbuf after recv() copied ``copied`` bytes: ACK at once when an
        ACK is due and more than one segment is unacknowledged (the input path held it
        while nobody read), or when the read emptied the queue of a pushed short segment;
        else only when the window we would offer now is at least twice what is left of
        the one offered, and only while that left part is at most half the clamp."""
        t = self.tcb
        if not conn.state.receives_data:
            return
        if (conn.timers.delack_at is not None and self.rcv_unacked > t.rcv_mss
                or copied > 0 and self.delack.read_wants_ack(not self.rmem)):
            self.ack_now = True
            return
        if copied <= 0:
            return
        now_wnd = t.rcv_wnd  # tcp_receive_window
        if 2 * now_wnd <= self.window_clamp:
            new_wnd = self.select_window(conn)
            if new_wnd and new_wnd >= 2 * now_wnd:
                self.ack_now = True

    def window_field(self, conn: Connection) -> int:
        """tcp_select_window: the 16-bit window the next segment carries.  A window below
        what is left of the last one offered is not offered (the right edge never moves
        left) unless tcp_shrink_window allows it with a window scale in use."""
        t = self.tcb
        ws = t.rcv_wscale
        cur = t.rcv_wnd  # tcp_receive_window
        new = self.select_window(conn)
        if new < cur and not (conn.options.shrink_window and ws):
            if new == 0:
                self.counters.add("TcpExtTCPWantZeroWindowAdv")
            new = -(-cur >> ws) << ws  # ALIGN(cur_win, 1 << rcv_wscale)
        old = t.offered_window
        new = min(new, 0xFFFF << ws)
        t.advertise(new)  # tp->rcv_wnd = new_win; tp->rcv_wup = rcv_nxt
        field = new >> ws
        if field == 0:
            if old:
                self.counters.add("TcpExtTCPToZeroWindowAdv")
        elif old == 0:
            self.counters.add("TcpExtTCPFromZeroWindowAdv")
        return field


def _adjusted(truesize: int, length: int) -> int:
    """truesize_adjust for an in-order segment: one whose payload is all in page chunks
    (no linear data once the headers are pulled) is not charged its empty head."""
    if truesize > PAGE_SIZE and truesize - SKB_EMPTY_TRUESIZE >= length:
        return truesize - SKB_EMPTY_TRUESIZE
    return truesize
