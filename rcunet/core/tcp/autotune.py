"""Buffer autotuning: the receiver's RTT estimate and receive-space adjustment (Linux
DRS: tcp_rcv_rtt_measure*, tcp_rcv_space_adjust) and the send buffer's growth at
ESTABLISHED (tcp_init_buffer_space / tcp_sndbuf_expand)."""

from __future__ import annotations

from rcunet.core.tcp.common import (
    MS,
)
from rcunet.wire import tcp
from rcunet.wire.seqnum import add, lt, sub


class AutotuneMixin:
    """``Connection``'s receive and send buffer autotuning."""

    __slots__ = ()

    def _rcv_rtt_measure(self, seg: tcp.Repr, length: int, now: int) -> None:
        """Sample the round trip as the receiver sees it, for ``_rcv_space_adjust``.

        With timestamps (tcp_rcv_rtt_measure_ts): the age of the TSval a full-sized
        segment echoes, at least one tick, smoothed by 1/8.  Without: the time one
        advertised window takes to arrive (tcp_rcv_rtt_measure), keeping the minimum.
        """
        t = self.tcb
        if t.ts_ok:
            if seg.timestamp is None or seg.timestamp[1] == self._rcv_rtt_tsecr:
                return
            self._rcv_rtt_tsecr = seg.timestamp[1]
            if length < t.rcv_mss or not seg.timestamp[1]:
                return
            ticks = sub(self._ts_val(now), seg.timestamp[1])
            if ticks >= 0:
                sample = max(ticks, 1) * MS
                rtt = self._rcv_rtt
                self._rcv_rtt = sample if not rtt else rtt + (sample - rtt) // 8
            return
        if self._rcv_rtt_seq is not None and lt(add(t.rcv_nxt, length), self._rcv_rtt_seq):
            return
        if self._rcv_rtt_seq is not None:
            sample = max(now - self._rcv_rtt_at, 1)
            if not self._rcv_rtt or sample < self._rcv_rtt:
                self._rcv_rtt = sample
        self._rcv_rtt_seq = add(t.rcv_nxt, length + t.rcv_wnd)
        self._rcv_rtt_at = now

    def _rcv_space_adjust(self, now: int) -> None:
        """After recv(): grow the receive buffer to what the reader consumes per round
        trip (Linux tcp_rcv_space_adjust, "dynamic right-sizing").

        Twice the bytes read in the last round trip plus 16 segments, more while the
        rate still grows (the sender is in slow start), up to ``rcvbuf_max`` and what
        the window scale can express.  The window, the window-update test and the
        backlog limit all follow the grown ``options.rcvbuf``.
        """
        started = self._rcv_space_at
        if started is None or not self._rcv_rtt or now - started < self._rcv_rtt:
            return
        copied = self._copied - self._rcv_space_copied
        space = self._rcv_space
        if copied > space:
            o = self.options
            ceiling = min(o.rcvbuf_max, 0xFFFF << self.tcb.rcv_wscale)
            if ceiling > o.rcvbuf:
                rcvwin = 2 * copied + 16 * o.mss
                if space:
                    rcvwin += 2 * (rcvwin * (copied - space) // space)
                rcvbuf = min(rcvwin, ceiling)
                if rcvbuf > o.rcvbuf:
                    self.options = o.with_rcvbuf(rcvbuf)
            self._rcv_space = copied
        self._rcv_space_copied, self._rcv_space_at = self._copied, now

    @property
    def rcvbuf(self) -> int:
        """The receive buffer now (it grows with autotuning): what SO_RCVBUF reports."""
        return self.options.rcvbuf

    def _expand_sndbuf(self) -> None:
        """Linux tcp_init_buffer_space -> tcp_sndbuf_expand: room for two windows of
        max(IW, cwnd) full segments (counted here in payload bytes), up to ``sndbuf_max``.
        Without it a 64 KB MSS (loopback) leaves room for one segment: the writer stalls on
        every ACK and sends a half-empty segment beside each full one."""
        o = self.options
        if not o.sndbuf_max:
            return
        t = self.tcb
        segments = max(o.initial_cwnd, self.cc.cwnd // max(t.snd_mss, 1))
        want = min(o.sndbuf_max, 2 * segments * t.snd_mss)
        if want > o.sndbuf:
            self.options = o.with_sndbuf(want)
