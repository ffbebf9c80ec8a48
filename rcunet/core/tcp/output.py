"""What the connection sends now (RFC 9293 §3.8.6 windows, Nagle, SWS avoidance; RFC 6298
timers armed; RFC 2018 SACK blocks and RFC 7323 timestamps on every segment)."""

from __future__ import annotations

from rcunet.core.tcp.common import (
    ACK,
    CLOSED,
    HALF32,
    MASK32,
    RST,
    SYN_RECEIVED,
    SYN_SENT,
    TIME_WAIT,
    segment_repr,
)
from rcunet.wire import tcp
from rcunet.wire.seqnum import add


class OutputMixin:
    """``Connection``'s output."""

    __slots__ = ()

    def _output(self, now: int) -> None:
        """Generate whatever the state allows: data, FIN, ACKs; then arm the timers."""
        st = self.state
        t = self.tcb
        if (st.synchronized and st is not TIME_WAIT) or (
                self.fastopen_child and st is SYN_RECEIVED):
            # (a Fast Open child sends before the handshake completes: tcp_sendmsg's
            # tcp_passive_fastopen exception, RFC 7413 §4.2.2)
            self.sender.transmit(self, now)
        if self._ack_now and st is not CLOSED and st is not SYN_SENT:
            self._emit_pure_ack(now)
        if self.timers.rto_at is None and t.snd_una != t.snd_max and st is not CLOSED \
                and st is not TIME_WAIT:
            self.timers.rto_at = now + self.rto.rto  # RFC 6298 §5.1

    def _emit_pure_ack(self, now: int) -> None:
        self._emit(self._make(self._acceptable_seq(), ACK, now))

    def _acceptable_seq(self) -> int:
        """The sequence number of a segment that carries no data (an ACK, a RST): the
        highest one sent, as Linux's tcp_acceptable_seq (its snd_nxt never moves back;
        BSD's tcp_output uses snd_max), or the send window's right edge if that is
        lower.  Not SND.NXT: after an RTO rolled it back, the peer already holds the
        bytes above it, finds such an ACK below RCV.NXT and drops it unread; with both
        ends in go-back-N each dropped the other's ACKs for ever."""
        t = self.tcb
        snd_max = t.snd_max
        wnd_end = (t.snd_una + t.snd_wnd) & MASK32
        # not lt(wnd_end, snd_max), or past it by less than one window unit (Linux)
        if (wnd_end - snd_max) & MASK32 < HALF32 \
                or (snd_max - wnd_end) & MASK32 < 1 << t.rcv_wscale:
            return snd_max
        return wnd_end

    def _maybe_window_update(self) -> None:
        """After recv(): ACK at once when an ACK is due and more than one segment is
        unacknowledged (the input path held it while nobody read), or when the window at
        least doubles (Linux __tcp_cleanup_rbuf)."""
        t = self.tcb
        if not self.state.receives_data:
            return
        if (self.timers.delack_at is not None and self._rcv_unacked > t.rcv_mss
                or self.delack.read_wants_ack(not self._rx)):
            self._ack_now = True
            return
        now_wnd = t.rcv_wnd
        cap = self._window_cap()
        if 2 * now_wnd <= cap:
            new_wnd = (self._free_window() >> t.rcv_wscale) << t.rcv_wscale
            if new_wnd and new_wnd >= 2 * now_wnd:
                self._ack_now = True

    def _window_cap(self) -> int:
        """The most any window may be: the buffer, what the scale can express, and the
        window clamp (Linux __tcp_select_window: min(window_clamp, tcp_full_space))."""
        cap = min(self.options.rcvbuf, 0xFFFF << self.tcb.rcv_wscale)
        clamp = self.autotune.window_clamp
        return min(cap, clamp) if clamp else cap

    def _free_window(self) -> int:
        """The window the buffer allows now (Linux __tcp_select_window before rounding):
        the buffer's free bytes, within the clamp."""
        free = max(0, min(self.options.rcvbuf, 0xFFFF << self.tcb.rcv_wscale) - len(self._rx))
        clamp = self.autotune.window_clamp
        return min(free, clamp) if clamp else free

    def _window_field(self) -> int:
        """The 16-bit window to advertise, with receiver SWS avoidance (RFC 9293 §3.8.6.2.2).

        The right edge never moves left except by scaling granularity (RFC 7323 §2.4);
        it moves right only by at least min(buffer/2, MSS).
        """
        t = self.tcb
        ws = t.rcv_wscale
        cap = self._window_cap()
        free = self._free_window()
        cur = t.rcv_wnd
        if free - cur < min(cap // 2, t.rcv_mss):
            field = cur >> ws
        else:
            field = free >> ws
        field = min(field, 0xFFFF)
        edge = (t.rcv_nxt + (field << ws)) & MASK32  # add, inlined (see HALF32)
        if (t.rcv_adv - edge) & MASK32 >= HALF32:  # gt(edge, rcv_adv)
            t.rcv_adv = edge
        return field

    def _make(self, seq: int, flags: int, now: int, payload: bytes = b"") -> tcp.Repr:
        """A non-SYN segment with our window, timestamps and SACK blocks."""
        t = self.tcb
        ts = (self.tcb.ts_val(now), t.ts_recent) if t.ts_ok else None
        blocks: tuple[tuple[int, int], ...] = ()
        if flags & ACK:
            ack = t.rcv_nxt
            if t.sack_ok and (len(self._ofo) or self._dsack is not None):
                limit = 3 if t.ts_ok else 4  # RFC 2018 §3: 40 bytes of option space
                if payload:
                    # a data segment carries only the blocks that fit in what its payload
                    # leaves of snd_mss (NOP NOP kind len: 4 bytes, then 8 per block), so
                    # header + data never exceed the MTU; pure ACKs carry them all
                    limit = min(limit, max(0, (t.snd_mss - len(payload) - 4) // 8))
                held = self._ofo.ranges() if limit else []
                if self._dsack is not None and limit:  # RFC 2883 §4: D-SACK goes first
                    blocks = (self._dsack,)
                    self._dsack = None
                    limit -= 1
                blocks += tuple((add(t.rcv_nxt, s), add(t.rcv_nxt, e))
                                for s, e in self._rx_blocks.blocks(held, limit))
            window = self._window_field()
            t.last_ack_sent = ack
            self.delack.ack_sent(self.options)
            self._ack_now = False
            self._rcv_unacked = 0
        else:
            ack, window = 0, 0
        if flags & RST:
            # an active reset (tcp_send_active_reset) goes out through tcp_transmit_skb,
            # which gives it the receive window like any segment: no SACK blocks, though
            blocks = ()
        return segment_repr(self.local_port, self.remote_port, seq & MASK32, ack, flags,
                            window, payload, blocks, ts)

    def _emit(self, seg: tcp.Repr) -> None:
        self._out.append(seg)
        values = self.counters.values  # counters.add("TcpOutSegs"), inlined: every segment
        values["TcpOutSegs"] = values["TcpOutSegs"] + 1 if "TcpOutSegs" in values else 1
