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
        if self.receiver.ack_now and st is not CLOSED and st is not SYN_SENT:
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

    def _make(self, seq: int, flags: int, now: int, payload: bytes = b"") -> tcp.Repr:
        """A non-SYN segment with our window, timestamps and SACK blocks."""
        t = self.tcb
        ts = (self.tcb.ts_val(now), t.ts_recent) if t.ts_ok else None
        blocks: tuple[tuple[int, int], ...] = ()
        if flags & ACK:
            receiver = self.receiver
            ack = t.rcv_nxt
            if t.sack_ok:
                blocks = receiver.sack_blocks(len(payload))
            window = receiver.window_field(self)
            t.last_ack_sent = ack
            receiver.ack_sent(self.options)
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
