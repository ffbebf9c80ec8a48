"""Buffer autotuning: the receiver's RTT estimate and receive-space adjustment (Linux
DRS: tcp_rcv_rtt_measure*, tcp_rcv_space_adjust) and the send buffer's growth at
ESTABLISHED (tcp_init_buffer_space / tcp_sndbuf_expand)."""

from __future__ import annotations

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp.common import MS, TS_OPTION_LEN
from rcunet.core.tcp.options import Options
from rcunet.core.tcp.sndbuf import sndbuf_expand
from rcunet.core.tcp.tcb import Tcb
from rcunet.core.tcp.window import space_from_win
from rcunet.wire import tcp
from rcunet.wire.seqnum import add, lt, sub


class Autotune:
    """A connection's buffer autotuning (Linux rcvq_space, rcv_rtt_est):
    the only writer of these fields.  It proposes buffer sizes; the connection, which
    owns the options, applies them."""

    # lockfree_read_slots: read by whichever thread holds the socket lock (Connection)
    __slots__ = lockfree_read_slots(
        "tcb", "copied", "rcv_space", "rcv_space_copied", "rcv_space_at", "rcv_rtt",
        "rcv_rtt_tsecr", "rcv_rtt_seq", "rcv_rtt_at")

    def __init__(self, tcb: Tcb) -> None:
        self.tcb = tcb
        self.copied = 0  # bytes the application has read (Linux copied_seq, unwrapped)
        self.rcv_space = 0  # bytes read in the last measured round trip
        self.rcv_space_copied = 0  # ``copied`` when the measurement started
        self.rcv_space_at: int | None = None  # when it started (None: not established)
        self.rcv_rtt = 0  # receiver's RTT estimate in ns (0: none yet)
        self.rcv_rtt_tsecr: int | None = None  # TSecr of the last timestamp sample
        self.rcv_rtt_seq: int | None = None  # window measurement: ends at this RCV.NXT
        self.rcv_rtt_at = 0

    def start(self, now: int, rcv_space: int) -> None:
        """Linux tcp_init_buffer_space at ESTABLISHED: the first round trip's space (the
        receiver computes it with the window clamp)."""
        self.rcv_space = rcv_space
        self.rcv_space_copied, self.rcv_space_at = self.copied, now

    def rtt_measure(self, seg: tcp.Repr, length: int, now: int) -> None:
        """Sample the round trip as the receiver sees it, for ``space_adjust``.

        With timestamps (tcp_rcv_rtt_measure_ts): the age of the TSval a full-sized
        segment echoes, at least one tick, smoothed by 1/8.  Without: the time one
        advertised window takes to arrive (tcp_rcv_rtt_measure), keeping the minimum.
        """
        t = self.tcb
        if t.ts_ok:
            if seg.timestamp is None or seg.timestamp[1] == self.rcv_rtt_tsecr:
                return
            self.rcv_rtt_tsecr = seg.timestamp[1]
            if length < t.rcv_mss or not seg.timestamp[1]:
                return
            ticks = sub(t.ts_val(now), seg.timestamp[1])
            if ticks >= 0:
                sample = max(ticks, 1) * MS
                rtt = self.rcv_rtt
                self.rcv_rtt = sample if not rtt else rtt + (sample - rtt) // 8
            return
        if self.rcv_rtt_seq is not None and lt(add(t.rcv_nxt, length), self.rcv_rtt_seq):
            return
        if self.rcv_rtt_seq is not None:
            sample = max(now - self.rcv_rtt_at, 1)
            if not self.rcv_rtt or sample < self.rcv_rtt:
                self.rcv_rtt = sample
        self.rcv_rtt_seq = add(t.rcv_nxt, length + t.rcv_wnd)
        self.rcv_rtt_at = now

    def on_read(self, n: int, inq: int, ofo_extent: int, ratio: int, options: Options,
                now: int) -> int:
        """The application read ``n`` bytes, ``inq`` stay unread: the receive buffer it
        should have now (Linux tcp_rcv_space_adjust, "dynamic right-sizing"), or 0 to
        keep it.

        Once per measured round trip, the bytes read in it less those still queued
        become the new receive space; when they exceed the last, tcp_rcvbuf_grow sizes
        the buffer for twice them ("DRS is always one RTT late") plus the growth: in
        proportion to the RTT below tcp_rcvbuf_low_rtt, else twice the rate's increase
        (the sender may double it in slow start), plus what the out-of-order queue
        already spans (``ofo_extent``), as buffer memory at the measured scaling ratio
        (tcp_space_from_win), up to tcp_rmem[2] (``rcvbuf_max``; 0: SO_RCVBUF fixed it
        or tcp_moderate_rcvbuf is off).
        """
        self.copied += n
        started = self.rcv_space_at
        if started is None or not self.rcv_rtt or now - started < self.rcv_rtt:
            return 0
        copied = self.copied - self.rcv_space_copied - inq
        grown = 0
        if copied > self.rcv_space:
            grown = self.rcvbuf_grow(copied, ofo_extent, ratio, options)
        self.rcv_space_copied, self.rcv_space_at = self.copied, now
        return grown

    def rcvbuf_grow(self, newval: int, ofo_extent: int, ratio: int, options: Options) -> int:
        """tcp_rcvbuf_grow: record ``newval`` as the receive space; the buffer it asks
        for if larger than the present one, else 0."""
        oldval, self.rcv_space = self.rcv_space, newval
        if not options.rcvbuf_max:
            return 0
        rcvwin = newval << 1
        rtt_us = self.rcv_rtt // 1000
        low_rtt = options.rcvbuf_low_rtt
        if rtt_us < low_rtt:
            grow = rcvwin * rtt_us // low_rtt  # small RTT: no inflation of the buffer
        else:
            grow = (rcvwin << 1) * (newval - oldval) // max(oldval, 1)
        rcvwin += grow + ofo_extent
        rcvbuf = min(space_from_win(ratio, rcvwin), options.rcvbuf_max)
        return rcvbuf if rcvbuf > options.rcvbuf else 0


def expanded_sndbuf(options: Options, tcb: Tcb, cwnd: int) -> int:
    """Linux tcp_init_buffer_space -> tcp_sndbuf_expand (rcunet.core.tcp.sndbuf): the
    send buffer for two windows of max(IW, cwnd) segments of the largest MSS either end
    announced (max(rx_opt.mss_clamp, mss_cache): the send MSS and the timestamp option
    it leaves room for), up to ``sndbuf_max``; 0 to keep it (also when SO_SNDBUF fixed
    the buffer: ``sndbuf_max`` 0)."""
    if not options.sndbuf_max:
        return 0
    mss = max(tcb.snd_mss, 1)
    segments = max(options.initial_cwnd, cwnd // mss)
    clamp = mss + (TS_OPTION_LEN if tcb.ts_ok else 0)
    return sndbuf_expand(options.sndbuf, options.sndbuf_max, clamp, segments)
