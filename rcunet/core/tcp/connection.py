"""The TCP connection engine: one sans-IO state machine per connection (RFC 9293).

Three things drive a ``Connection`` (aioquic's shape):

* segments from the peer: ``on_segment(seg, now)``;
* the clock: ``on_timer(now)`` once ``now >= next_deadline()``;
* the application: ``send``, ``recv``, ``shutdown_write``, ``close``, ``abort``.

After any of these the caller collects what the call produced -- **every entry point may
leave output pending**: ``take_segments()`` (``rcunet.wire.tcp.Repr`` values to put on the
wire), ``take_events()`` (``events.py``) and ``next_deadline()``.  Nothing here reads a
clock, draws a random number or touches a socket: ``now`` (int ns), the ISN and the
timestamp offset are arguments.

The listener lives in the host (it owns the SYN queue); ``listen.py`` has its protocol
decisions (re-exported here): ``listen_action`` classifies a segment that reached a
listening socket, ``reset_for`` builds the RST the RFC asks for when no connection
matches.  ``Connection.accept_syn`` turns a SYN into a SYN-RECEIVED connection that
answers with SYN,ACK, and ``rcunet.core.tcp.syncookies`` covers SYN-queue overflow.

A host drives it like this (one connection, its socket lock held)::

    conn = Connection.connect(local_port=lport, remote_port=80, iss=isn, now=now,
                              options=Options.from_tuning(tuning, mss=route_mss))
    ...
    conn.on_segment(tcp.Repr.parse(payload, src, dst), now)    # from the rx worker
    conn.on_timer(now)                                           # when the wheel fires
    n = conn.send(data, now); data = conn.recv(65536, now)      # from the application
    for seg in conn.take_segments(): transmit(seg.build(src=..., dst=...))
    for event in conn.take_events(): wake_waiters(event)
    wheel.schedule(conn, conn.next_deadline())

Input follows RFC 9293 §3.10.7 step by step (the methods are named after the steps), with
RFC 5961 (blind in-window attacks), RFC 7323 (window scale, timestamps, PAWS), RFC 2018 /
6675 (SACK), RFC 5681 / 6582 (congestion control, NewReno) and RFC 6298 (RTO).  Where
Linux chooses among RFC options, or deviates, this file does what Linux does and says so.

Concurrency: none.  A Connection is touched only by whoever holds its socket lock
(reference §5.1); the engine keeps no references to anything shared except the
``Counters`` object the caller passes in, which must not be shared across threads.
"""

from __future__ import annotations

import dataclasses
import errno as errnos

from rcunet.core.tcp import congestion
from rcunet.core.tcp.buffers import RecvQueue, SendQueue
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.delack import DelayedAck
from rcunet.core.tcp.events import (
    Closed,
    ConnectionFailed,
    DataReceived,
    Established,
    Event,
    FinReceived,
    ResetReceived,
    SendSpaceAvailable,
    TimeWaitEntered,
)
from rcunet.core.tcp.listen import (
    MAX_WSCALE,
    ListenAction,
    choose_wscale,
    listen_action,
    reset_for,
    seg_len,
)
from rcunet.core.tcp.options import SECOND, Options
from rcunet.core.tcp.reassembly import Assembler
from rcunet.core.tcp.rto import RtoEstimator, retransmits_timed_out
from rcunet.core.tcp.sack import DUP_THRESH, ReceiverBlocks, Scoreboard
from rcunet.core.tcp.state import TRANSITIONS, State
from rcunet.core.tcp.tcb import Tcb
from rcunet.core.tcp.timers import Timers
from rcunet.sync.shared import lockfree_read_slots
from rcunet.wire import tcp
from rcunet.wire.seqnum import add, ge, gt, le, lt, sub

FIN, SYN, RST, PSH, ACK = tcp.FIN, tcp.SYN, tcp.RST, tcp.PSH, tcp.ACK
MASK32 = 0xFFFFFFFF
#: Half the sequence space: ``(a - b) & MASK32 >= HALF32`` is ``seqnum.lt(a, b)`` and
#: ``((a - b + HALF32) & MASK32) - HALF32`` is ``seqnum.sub(a, b)`` (RFC 1982 / RFC 9293
#: §3.4 mod-2**32 arithmetic), the forms the per-segment paths inline instead of a call.
HALF32 = 0x80000000
# The states as module constants: ``State.X`` is two type-attribute lookups per use (the
# metaclass's, then the class's), which free-threaded 3.13 makes through the
# interpreter-wide type cache on every read; a global is one dict lookup.
CLOSED = State.CLOSED
LISTEN = State.LISTEN
SYN_SENT = State.SYN_SENT
SYN_RECEIVED = State.SYN_RECEIVED
ESTABLISHED = State.ESTABLISHED
FIN_WAIT_1 = State.FIN_WAIT_1
FIN_WAIT_2 = State.FIN_WAIT_2
CLOSE_WAIT = State.CLOSE_WAIT
CLOSING = State.CLOSING
LAST_ACK = State.LAST_ACK
TIME_WAIT = State.TIME_WAIT

MS = 1_000_000
#: RFC 7323 §5.5: TS.Recent is invalid after 24 days of idleness.
PAWS_IDLE_LIMIT = 24 * 86400 * SECOND
#: Linux TCP_PAWS_WINDOW: TSvals this many ticks older than TS.Recent still pass PAWS.
PAWS_WINDOW = 1
#: Bytes of option space a timestamp takes on every segment (RFC 7323 §3.2, aligned).
TS_OPTION_LEN = 12
#: Linux TCP_MSS_DEFAULT / TCP_MIN_MSS: bounds of the first receive-MSS estimate
#: (tcp_initialize_rcv_mss); the estimate then grows to the segments seen.
RCV_MSS_HINT = 536
RCV_MSS_MIN = 88
#: Builds a segment (``tcp.Repr``) from its fields in order: see ``_make``.
_new_tuple = tuple.__new__
#: Synchronized states in which an ABORT sends RST (RFC 9293 §3.10.5).
#: States in which send() queues data (SYN-SENT/RECEIVED: sent once established).
_SEND_STATES = (SYN_SENT, SYN_RECEIVED, ESTABLISHED, CLOSE_WAIT)
_ABORT_SENDS_RST = (SYN_RECEIVED, ESTABLISHED, FIN_WAIT_1,
                    FIN_WAIT_2, CLOSE_WAIT)


class Connection:
    """One TCP connection.  See the module docstring for how to drive it.

    Public state for the host: ``state``, ``tcb`` (RFC 9293 variables), ``timers``,
    ``local_port``/``remote_port``, ``counters``, ``error`` (pending errno or None).
    """

    # Slots with the GIL: about 60 attributes, past the 30 an instance dict shares its
    # keys for, so without them every connection built (two per tcp_crr transaction) grew
    # its own dict through several resizes; slot loads and stores are also the cheaper
    # ones.  Free-threaded builds keep a dict (``lockfree_read_slots``): a connection is
    # driven by whichever thread holds its socket lock - the receive path that made a
    # child, then the thread that accepted it - and there a slot read of a value another
    # thread made takes the instance's lock on every read.
    __slots__ = lockfree_read_slots(
        "cc", "counters", "error", "local_addr", "local_port", "options", "passive",
        "quiet", "remote_addr", "remote_port", "rto", "scoreboard", "state", "tcb",
        "timers",
        "_ack_now", "_delack", "_cwnd_limited", "_max_flight", "_max_flight_seq",
        "_challenge_count", "_challenge_window_at", "_closed_reported",
        "_copied", "_dsack", "_dupacks", "_events", "_fin_offset", "_fin_queued",
        "_first_rtx_at", "_high_rxt", "_keepalive_probes", "_last_oow_ack_at",
        "_last_rcv_at", "_now", "_ofo", "_orphaned", "_out", "_peer_ws_offered",
        "_persist_backoff", "_probes_out", "_rcv_rtt", "_rcv_rtt_at", "_rcv_rtt_seq",
        "_rcv_rtt_tsecr", "_rcv_space", "_rcv_space_at", "_rcv_space_copied",
        "_rcv_unacked", "_recover", "_recovery", "_retransmits", "_rtt_seq", "_rtt_start",
        "_rx", "_rx_blocks", "_send_blocked", "_syn_retransmitted", "_syn_sent_at", "_tx",
        "_tx_seq",
    )

    def __init__(self, *, local_port: int, remote_port: int, iss: int,
                 options: Options | None = None, ts_offset: int = 0,
                 counters: Counters | None = None, passive: bool = False,
                 local_addr: bytes = b"", remote_addr: bytes = b"") -> None:
        self.options = options = options if options is not None else Options()
        options.validate()
        # The 4-tuple: the engine itself only uses the ports (addresses are the host's,
        # for lookups and checksums); kept here so the host needs no side table.
        self.local_addr = local_addr
        self.remote_addr = remote_addr
        self.local_port = local_port
        self.remote_port = remote_port
        self.counters = counters if counters is not None else Counters()
        self.state = CLOSED
        self.passive = passive
        self.tcb = t = Tcb()
        t.iss = iss & MASK32
        t.snd_una = t.snd_nxt = t.snd_max = t.iss
        t.ts_offset = ts_offset & MASK32
        # Linux tcp_select_initial_window: the scale covers what the buffer may grow to.
        t.rcv_wscale = choose_wscale(options.window_space) if options.window_scaling else 0
        t.snd_mss = min(options.default_peer_mss, options.mss)
        t.rcv_mss = self._initial_rcv_mss()
        self.timers = Timers()
        self.rto = RtoEstimator(options.rto_initial, options.rto_min, options.rto_max)
        self.cc = congestion.create(options.congestion_control, t.snd_mss, options.initial_cwnd)
        # send side: _tx holds every byte from _tx_seq (first unacknowledged data byte) on
        self._tx = SendQueue()
        self._tx_seq = add(t.iss, 1)
        self._fin_queued = False  # the application shut down its direction
        self._send_blocked = False  # send() refused bytes: report SendSpaceAvailable
        # receive side
        self._rx = RecvQueue()  # in-order bytes the application has not read yet
        self._ofo = Assembler(options.ofo_max_ranges)
        self._rx_blocks = ReceiverBlocks()
        self._fin_offset: int | None = None  # peer FIN beyond a hole, relative to RCV.NXT
        self._dsack: tuple[int, int] | None = None  # duplicate range for the next ACK
        self._rcv_unacked = 0  # bytes received since our last ACK (delayed ACK)
        self._ack_now = False
        self._delack = DelayedAck()  # quick-ack mode and the adaptive ato (Linux)
        # tcp_cwnd_validate's bookkeeping for tcp_is_cwnd_limited: the largest flight of
        # the current window (max_packets_out, in bytes), where that window ends
        # (max_packets_seq) and whether cwnd limited a send in it (is_cwnd_limited).
        self._max_flight = 0
        self._max_flight_seq = t.iss
        self._cwnd_limited = False
        self._orphaned = False  # close() was called: nobody reads any more
        # receive-buffer autotuning (Linux rcvq_space, rcv_rtt_est; see _rcv_space_adjust)
        self._copied = 0  # bytes the application has read (Linux copied_seq, unwrapped)
        self._rcv_space = 0  # bytes read in the last measured round trip
        self._rcv_space_copied = 0  # ``_copied`` when the measurement started
        self._rcv_space_at: int | None = None
        self._rcv_rtt = 0  # receiver's RTT estimate in ns (0: none yet)
        self._rcv_rtt_tsecr: int | None = None  # TSecr of the last timestamp sample
        self._rcv_rtt_seq: int | None = None  # window measurement: ends at this RCV.NXT
        self._rcv_rtt_at = 0
        # timing and recovery
        self._syn_sent_at: int | None = None
        self._syn_retransmitted = False
        self._retransmits = 0  # consecutive RTO expiries
        self._first_rtx_at: int | None = None  # Linux retrans_stamp
        self._rtt_seq: int | None = None  # Karn timing: end seq of the timed segment
        self._rtt_start = 0
        self._dupacks = 0
        self._recovery: str | None = None  # None, "reno" (RFC 6582) or "sack" (RFC 6675)
        # RFC 6582 "recover" / RFC 6675 RecoveryPoint; None until the first loss (the RFC
        # starts it at ISS) and again once SND.UNA is far past it, so it never wraps.
        self._recover: int | None = None
        self._high_rxt = t.iss  # RFC 6675 HighRxt
        self.scoreboard = Scoreboard()
        self._persist_backoff = 0
        self._keepalive_probes = 0
        self._probes_out = 0  # unanswered zero-window probes (Linux icsk_probes_out)
        self._last_rcv_at = 0
        self._challenge_window_at: int | None = None
        self._challenge_count = 0
        self._last_oow_ack_at: int | None = None
        self._peer_ws_offered = False
        # outputs
        self._out: list[tcp.Repr] = []
        self._events: list[Event] = []
        self.error: int | None = None  # errno the application has not seen yet
        #: The last send()/recv() produced no segment, event, counter or timer change:
        #: its caller has nothing to collect (the common small write and plain read).
        self.quiet = False
        self._closed_reported = False
        self._now = 0

    # ------------------------------------------------------------------ construction
    @classmethod
    def connect(cls, *, local_port: int, remote_port: int, iss: int, now: int,
                options: Options | None = None, ts_offset: int = 0,
                counters: Counters | None = None,
                ts_recent: tuple[int, int] | None = None,
                local_addr: bytes = b"", remote_addr: bytes = b"") -> Connection:
        """Active OPEN (RFC 9293 §3.10.1): CLOSED -> SYN-SENT, SYN pending.

        ``ts_recent`` is (TS.Recent, stamp) inherited from a TIME-WAIT connection this one
        replaces (``reuse_timestamps()`` of the old one; Linux tcp_twsk_unique copies them), so
        PAWS rejects old duplicates of the previous incarnation.
        """
        conn = cls(local_port=local_port, remote_port=remote_port, iss=iss, options=options,
                   ts_offset=ts_offset, counters=counters, local_addr=local_addr,
                   remote_addr=remote_addr)
        conn._now = now
        if ts_recent is not None:
            conn.tcb.ts_recent, conn.tcb.ts_recent_stamp = ts_recent
        conn.counters.add("TcpActiveOpens")
        conn._set_state(SYN_SENT)
        conn._send_syn(now)
        return conn

    @classmethod
    def accept_syn(cls, syn: tcp.Repr, *, iss: int, now: int, options: Options | None = None,
                   ts_offset: int = 0, counters: Counters | None = None,
                   local_addr: bytes = b"", remote_addr: bytes = b"") -> Connection:
        """A listener took ``syn`` (``listen_action`` said SYN): SYN-RECEIVED, SYN,ACK pending.

        RFC 9293 §3.10.7.2 third check.  Data carried by the SYN is dropped (no TCP Fast
        Open), as Linux does; the peer retransmits it.
        """
        if listen_action(syn) is not ListenAction.SYN:
            raise ValueError("accept_syn needs a SYN without ACK, RST or FIN")
        conn = cls(local_port=syn.dst_port, remote_port=syn.src_port, iss=iss, options=options,
                   ts_offset=ts_offset, counters=counters, passive=True,
                   local_addr=local_addr, remote_addr=remote_addr)
        conn._now = now
        conn._take_peer_syn(syn, now)
        conn._set_state(SYN_RECEIVED)
        conn._send_syn(now)
        return conn

    @classmethod
    def from_cookie(cls, ack: tcp.Repr, *, mss: int, wscale: int | None, sack_ok: bool,
                    ts_ok: bool, now: int, options: Options | None = None, ts_offset: int = 0,
                    counters: Counters | None = None, local_addr: bytes = b"",
                    remote_addr: bytes = b"") -> Connection:
        """An ESTABLISHED connection rebuilt from a valid SYN-cookie ACK (RFC 4987 §3.6).

        ``mss``/``wscale``/``sack_ok``/``ts_ok`` are what ``syncookies.check`` decoded.
        The ACK itself is then processed like any segment (it may carry data).
        """
        conn = cls(local_port=ack.dst_port, remote_port=ack.src_port, iss=(ack.ack - 1) & MASK32,
                   options=options, ts_offset=ts_offset, counters=counters, passive=True,
                   local_addr=local_addr, remote_addr=remote_addr)
        conn._now = now
        t = conn.tcb
        opts = conn.options
        t.irs = (ack.seq - 1) & MASK32
        t.rcv_nxt = ack.seq
        t.snd_una = t.snd_nxt = t.snd_max = ack.ack
        if wscale is not None and opts.window_scaling:
            t.snd_wscale = min(wscale, MAX_WSCALE)
        else:
            t.rcv_wscale = 0
        t.ts_ok = ts_ok and opts.timestamps and ack.timestamp is not None
        if t.ts_ok and ack.timestamp is not None:
            t.ts_recent, t.ts_recent_stamp = ack.timestamp[0], now
        t.sack_ok = sack_ok and opts.sack
        conn._set_mss(mss)
        t.rcv_adv = add(t.rcv_nxt, min(opts.rcvbuf, 0xFFFF))  # what the SYN,ACK offered
        t.snd_wl1, t.snd_wl2 = (ack.seq - 1) & MASK32, ack.ack
        conn._set_state(ESTABLISHED)
        conn._on_established(now)
        conn.on_segment(ack, now)
        return conn

    def __repr__(self) -> str:
        t = self.tcb
        return (f"<Connection :{self.local_port}->:{self.remote_port} {self.state} "
                f"snd_una={t.snd_una} snd_nxt={t.snd_nxt} snd_wnd={t.snd_wnd} "
                f"rcv_nxt={t.rcv_nxt} rcv_wnd={t.rcv_wnd}>")

    # ------------------------------------------------------------------ outputs
    def take_segments(self) -> list[tcp.Repr]:
        """Segments to transmit, oldest first; the list is handed over (not copied)."""
        out, self._out = self._out, []
        return out

    def take_events(self) -> list[Event]:
        out, self._events = self._events, []
        return out

    def next_deadline(self) -> int | None:
        """When ``on_timer`` must run next (absolute ns), or None."""
        return self.timers.next_at()

    @property
    def readable(self) -> int:
        """Bytes ``recv`` can return now."""
        return len(self._rx)

    @property
    def send_space(self) -> int:
        return max(0, self.options.sndbuf - len(self._tx))

    @property
    def unacked(self) -> int:
        """Bytes in the send buffer (unsent and unacknowledged)."""
        return len(self._tx)

    @property
    def at_eof(self) -> bool:
        """The peer's FIN has been received and every byte before it read."""
        return self.state.fin_received and not self._rx

    # ------------------------------------------------------------------ application API
    def send(self, data: bytes | bytearray | memoryview, now: int) -> int:
        """Queue ``data``; return how many bytes the send buffer took (0 when full)."""
        self._now = now
        self.quiet = False
        self._raise_pending_error()
        if self._fin_queued or self.state not in _SEND_STATES:
            raise BrokenPipeError(errnos.EPIPE, "send after shutdown or close")
        n = min(len(data), self.send_space)
        if n < len(data):
            self._send_blocked = True
        if n:
            self._tx.append(memoryview(data)[:n] if n < len(data) else data)
            if self._nagle_holds_tail():
                self.quiet = True
            else:
                self._output(now)
        return n

    def push_pending(self, now: int) -> None:
        """Send what the output rules allow now (Linux tcp_push_pending_frames): after
        TCP_NODELAY is set, the tail Nagle held goes out."""
        self._now = now
        self._output(now)

    def _nagle_holds_tail(self) -> bool:
        """Would ``_output`` send nothing after an append?  True when the unsent bytes are
        less than a segment, data is in flight and Nagle applies (RFC 1122 §4.2.3.4), and
        nothing else is pending: the common case of a writer's small chunks joining the
        segment after the one in flight, where running the whole output path is waste."""
        t = self.tcb
        return (self._recovery is None and not self._ack_now and not self._send_blocked
                and not self.options.nodelay and t.snd_una != t.snd_max
                and t.snd_nxt == t.snd_max  # unsent bytes: sub(add(tx_seq, len), snd_nxt)
                and ((self._tx_seq + len(self._tx) - t.snd_nxt + HALF32) & MASK32) - HALF32
                < t.snd_mss)

    def recv(self, max_bytes: int, now: int) -> bytes:
        """Up to ``max_bytes`` in-order bytes; b"" at EOF.

        Raises BlockingIOError (EAGAIN) when nothing is readable yet, and the connection's
        error (ECONNRESET, ETIMEDOUT, ...) once, after any data that arrived before it.
        """
        self._now = now
        self.quiet = False
        if max_bytes < 0:
            raise OSError(errnos.EINVAL, "negative recv size")
        if self._rx and max_bytes:
            data = self._rx.read(max_bytes)
            self._copied += len(data)
            self._rcv_space_adjust(now)
            self._maybe_window_update()
            if self._ack_now:  # reading changes nothing on the send side: only an ACK
                self._output(now)
            else:
                self.quiet = True
            return data
        return self._nothing_readable(max_bytes)

    def peek(self, max_bytes: int) -> bytes:
        """recv() with MSG_PEEK: the same bytes, left in the receive queue (no window
        update, no ACK: nothing was consumed)."""
        if max_bytes < 0:
            raise OSError(errnos.EINVAL, "negative recv size")
        if self._rx and max_bytes:
            return self._rx.peek(max_bytes)
        return self._nothing_readable(max_bytes)

    def _nothing_readable(self, max_bytes: int) -> bytes:
        """What a read finds with no data queued: the pending error, EOF or EAGAIN."""
        if max_bytes == 0:
            return b""
        self._raise_pending_error()
        if self.state.fin_received or self.state is CLOSED:
            return b""
        raise BlockingIOError(errnos.EAGAIN, "no data")

    def shutdown_write(self, now: int) -> None:
        """SHUT_WR: send FIN after the queued data (RFC 9293 §3.10.4 CLOSE)."""
        self._now = now
        st = self.state
        if st is CLOSED:
            raise OSError(errnos.ENOTCONN, "not connected")
        if self._fin_queued:
            return
        self._fin_queued = True
        if st is ESTABLISHED:
            self._set_state(FIN_WAIT_1)
        elif st is CLOSE_WAIT:
            self._set_state(LAST_ACK)
        # SYN-SENT / SYN-RECEIVED: "queue ... until ESTABLISHED" (RFC 9293 §3.10.4)
        self._output(now)

    def close(self, now: int) -> None:
        """close(): FIN after queued data; RST instead if unread data would be lost.

        RFC 9293 §3.10.4 plus RFC 2525 §2.17 (Linux TCPAbortOnClose): closing with unread
        received data resets the connection.  In SYN-SENT the TCB is just deleted.
        """
        self._now = now
        st = self.state
        if st is CLOSED:
            return
        if st is SYN_SENT:
            self._enter_closed()
            self._output(now)
            return
        if self._rx:  # Linux looks at the receive queue only; out-of-order data just goes
            self.counters.add("TcpExtTCPAbortOnClose")
            self._abort(now)
            return
        self._orphaned = True
        self._ofo.clear()
        if not self._fin_queued and st is not TIME_WAIT:
            self.shutdown_write(now)
        if self.state is FIN_WAIT_2:
            self.timers.fin_wait2_at = now + self.options.fin_timeout
        self._output(now)

    def abort(self, now: int) -> None:
        """ABORT (RFC 9293 §3.10.5), e.g. close() with SO_LINGER {1, 0}: RST, then CLOSED."""
        self._now = now
        if self.state is not CLOSED:
            self.counters.add("TcpExtTCPAbortOnData")  # Linux counts a linger-0 close here
            self._abort(now)

    def update_options(self, now: int, **changes: object) -> None:
        """setsockopt(): TCP_NODELAY, SO_KEEPALIVE, TCP_KEEPIDLE/INTVL/CNT, timeouts...

        Takes effect at once: turning Nagle off flushes held data (Linux does the same in
        tcp_push_pending_frames), turning keep-alive on arms its timer.  Buffer sizes,
        MSS and the congestion algorithm are fixed once the connection exists.
        """
        fixed = {"mss", "rcvbuf", "sndbuf", "window_scaling", "timestamps", "sack",
                 "congestion_control", "initial_cwnd", "ofo_max_ranges"} & changes.keys()
        if fixed:
            raise OSError(errnos.EINVAL, f"cannot change {sorted(fixed)} on a live connection")
        self._now = now
        new = dataclasses.replace(self.options, **changes)  # type: ignore[arg-type]
        new.validate()
        self.options = new
        if new.keepalive and self.state in (ESTABLISHED, CLOSE_WAIT,
                                            FIN_WAIT_2):
            self.timers.keepalive_at = self._last_rcv_at + new.keepalive_time
        elif not new.keepalive:
            self.timers.keepalive_at = None
        self._output(now)

    def _abort(self, now: int) -> None:
        if self.state in _ABORT_SENDS_RST:
            self._emit(self._make(self.tcb.snd_nxt, RST | ACK, now))
            self.counters.add("TcpOutRsts")
        self._tx.clear()
        self._rx.clear()
        self._ofo.clear()
        self._enter_closed()

    # ------------------------------------------------------------------ TIME-WAIT helpers
    def time_wait_accepts_syn(self, syn: tcp.Repr) -> bool:
        """May this SYN open a new incarnation while we sit in TIME-WAIT? (RFC 6191 §2)

        With timestamps: its TSval is newer than TS.Recent.  Without: its sequence number
        is beyond RCV.NXT (RFC 1122 §4.2.2.13).  The host then starts the new connection
        with ``reuse_iss()`` and retires this one.
        """
        t = self.tcb
        if self.state is not TIME_WAIT or not (syn.flags & SYN) or syn.flags & (ACK | RST):
            return False
        if t.ts_ok and syn.timestamp is not None:
            return gt(syn.timestamp[0], t.ts_recent)
        return gt(syn.seq, t.rcv_nxt)

    def reuse_timestamps(self) -> tuple[int, int] | None:
        """(TS.Recent, stamp) for ``connect(ts_recent=...)``; None without timestamps.

        Linux reuses a TIME-WAIT 4-tuple for connect() only when this is not None
        (reference §3.4: "A tw without timestamps is never reused by connect()").
        """
        t = self.tcb
        if not t.ts_ok or t.ts_recent_stamp is None:
            return None
        return t.ts_recent, t.ts_recent_stamp

    def reuse_iss(self) -> int:
        """ISS for a connection replacing this TIME-WAIT one: Linux tw_snd_nxt + 65535 + 2."""
        iss = add(self.tcb.snd_nxt, 65535 + 2)
        return iss or 1

    # ------------------------------------------------------------------ input
    def on_segment(self, seg: tcp.Repr, now: int) -> None:
        """Process one segment addressed to this connection (RFC 9293 §3.10.7)."""
        self._now = now
        values = self.counters.values  # counters.add("TcpInSegs"), inlined: every segment
        values["TcpInSegs"] = values["TcpInSegs"] + 1 if "TcpInSegs" in values else 1
        if seg.checksum_ok is False:
            self.counters.add("TcpInErrs")
            self.counters.add("TcpInCsumErrors")
            return
        st = self.state
        if st is ESTABLISHED and self._fast_path(seg, now):
            self._output(now)  # header prediction took it: no walk of the state machine
            return
        if st is CLOSED:
            reply = reset_for(seg)  # §3.10.7.1
            if reply is not None:
                self._emit(reply)
                self.counters.add("TcpOutRsts")
        elif st is SYN_SENT:
            self._input_syn_sent(seg, now)
        elif st is not LISTEN:
            self._input_synchronized(seg, now)
        self._output(now)

    def _fast_path(self, seg: tcp.Repr, now: int) -> bool:
        """Header prediction (Van Jacobson; Linux tcp_rcv_established): in ESTABLISHED, a
        segment carrying the next expected bytes and an ACK for new data (or data with an
        ACK that changes nothing), with nothing unusual about it or about us, needs only
        the ACK bookkeeping and the in-order delivery of §3.10.7.4.  Returns False,
        having changed nothing, when the full path must run.

        What qualifies: ACK and at most PSH; SEG.SEQ = RCV.NXT; no SACK blocks; the
        timestamp (if both use them) not older than TS.Recent, so PAWS passes; SND.UNA =<
        SEG.ACK =< SND.MAX; a payload that fits the window; and no recovery, duplicate
        ACKs, SACK scoreboard, out-of-order queue, pending FIN or close() on our side.  A
        pure ACK that acknowledges nothing new goes the full way (it may be a duplicate).
        """
        t = self.tcb
        flags = seg.flags
        if flags & ~PSH != ACK or seg.seq != t.rcv_nxt or seg.sack_blocks:
            return False
        ack = seg.ack
        new_ack = ack != t.snd_una
        payload = seg.payload
        if ((not new_ack and not payload) or self._recovery is not None or self._dupacks
                or self._fin_offset is not None or self._orphaned or len(self._ofo)
                or self.scoreboard.highest_sacked or self._fin_queued):
            return False
        # Sequence arithmetic inlined, as everywhere on this path (see HALF32):
        # lt(a, b) is (a - b) & MASK32 >= HALF32, le(a, b) is a == b or lt(a, b).
        snd_una, snd_max = t.snd_una, t.snd_max
        if new_ack and not ((snd_una - ack) & MASK32 >= HALF32
                            and (ack == snd_max or (ack - snd_max) & MASK32 >= HALF32)):
            return False
        ts = seg.timestamp
        if t.ts_ok and (ts is None or (ts[0] - t.ts_recent) & MASK32 >= HALF32):
            return False
        if payload and len(payload) > t.rcv_wnd:
            return False
        self._last_rcv_at = now
        self._keepalive_probes = 0
        self._probes_out = 0
        if new_ack:
            acked = ((ack - snd_una + HALF32) & MASK32) - HALF32  # sub
            self._ack_advance(seg, now)
            if self._is_cwnd_limited():  # as _loss_detection does for a new ACK
                self.cc.on_ack(acked, now, self.rto.srtt)
        seq, wl1 = seg.seq, t.snd_wl1
        if (wl1 - seq) & MASK32 >= HALF32 or (wl1 == seq and (
                t.snd_wl2 == ack or (t.snd_wl2 - ack) & MASK32 >= HALF32)):
            t.snd_wnd = seg.window << t.snd_wscale  # window update (fifth step)
            if t.snd_wnd > t.max_snd_wnd:
                t.max_snd_wnd = t.snd_wnd
            t.snd_wl1, t.snd_wl2 = seq, ack
        if ts is not None and t.ts_ok and (
                seq == t.last_ack_sent or (seq - t.last_ack_sent) & MASK32 >= HALF32):
            t.ts_recent, t.ts_recent_stamp = ts[0], now  # RFC 7323 §4.3 (2), as below
        if payload:
            data = memoryview(payload)
            t.rcv_mss = max(t.rcv_mss, min(len(data), self.options.mss))
            self._rcv_rtt_measure(seg, len(data), now)
            self._deliver_in_order(data, now)
        return True

    def _input_syn_sent(self, seg: tcp.Repr, now: int) -> None:
        """RFC 9293 §3.10.7.3 (SYN-SENT), with RFC 5961 §3.2's RST rule."""
        t = self.tcb
        flags = seg.flags
        if flags & ACK:
            # first: "If SEG.ACK =< ISS or SEG.ACK > SND.NXT, send a reset (unless RST)"
            bad = le(seg.ack, t.iss) or gt(seg.ack, t.snd_max)
            if not bad and not flags & RST and self._synack_tsecr_invalid(seg, now):
                # Linux: a TSecr we never sent marks an old or forged SYN,ACK.
                self.counters.add("TcpExtPAWSActive")
                bad = True
            if bad:
                if not flags & RST:
                    self._emit(tcp.Repr(src_port=self.local_port, dst_port=self.remote_port,
                                        seq=seg.ack, ack=0, flags=RST, window=0))
                    self.counters.add("TcpOutRsts")
                return
        if flags & RST:
            # second: only a RST that acknowledges our SYN is acceptable (RFC 5961 §3.2)
            if flags & ACK:
                self.counters.add("TcpAttemptFails")
                self._events.append(ResetReceived())
                self._fail(errnos.ECONNREFUSED)
            return
        if not flags & SYN:
            return  # fifth: "drop the segment and return"
        if (t.ts_recent_stamp is not None and seg.timestamp is not None
                and self._paws_reject(seg, now)):
            return  # PAWS against an inherited TS.Recent (Linux, SYN-SENT)
        self._take_peer_syn(seg, now)
        if flags & ACK:
            self._rtt_sample_handshake(seg, now)
            t.snd_una = seg.ack
            self._set_state(ESTABLISHED)
            self._on_established(now)
            self._ack_now = True
            self._process_text_and_fin(seg, add(seg.seq, 1), now)
        else:
            # Simultaneous open: "enter SYN-RECEIVED, form a SYN,ACK segment and send it".
            # Text in the SYN is dropped (the peer retransmits it once synchronized).
            self._set_state(SYN_RECEIVED)
            self._send_syn(now)

    def _synack_tsecr_invalid(self, seg: tcp.Repr, now: int) -> bool:
        """TSecr of a SYN,ACK must echo a TSval we sent since our first SYN."""
        if not self.options.timestamps or seg.timestamp is None or not seg.timestamp[1]:
            return False
        first = self._ts_val(self._syn_sent_at if self._syn_sent_at is not None else now)
        tsecr = seg.timestamp[1]
        return not (ge(tsecr, first) and le(tsecr, self._ts_val(now)))

    def _input_synchronized(self, seg: tcp.Repr, now: int) -> None:
        """RFC 9293 §3.10.7.4: SYN-RECEIVED and every synchronized state."""
        t = self.tcb
        flags = seg.flags
        length = seg_len(seg)
        # RFC 7323 §5.3 R1: PAWS, before the sequence check.
        if (t.ts_ok and seg.timestamp is not None and not flags & RST
                and self._paws_discard(seg, now)):
            self.counters.add("TcpExtPAWSEstab")
            self._send_dupack(seg, now, "TcpExtTCPACKSkippedPAWS")
            return
        if self._is_simultaneous_open_synack(seg):
            # Linux tcp_validate_incoming: in a simultaneous open the peer's SYN,ACK
            # repeats its SYN (not acceptable by the §3.10.7.4 table) but its ACK
            # completes the handshake; take the ACK, skip the challenge.
            seg = seg._replace(seq=add(seg.seq, 1), flags=flags & ~SYN)
            flags, length = seg.flags, seg_len(seg)
        if self.state is SYN_RECEIVED and flags & (SYN | ACK) == SYN and seg.seq == t.irs:
            # The peer retransmitted its SYN: so do we, rate limited (Linux tcp_check_req).
            if not self._oow_rate_limited(now, "TcpExtTCPACKSkippedSynRecv"):
                self._send_syn(now, retransmit=True, rearm=False)
            return
        # first: sequence number check
        if not self._acceptable(seg.seq, length):
            if flags & RST:
                if self._rst_after_fin(seg):
                    self._on_reset()
                return  # "If the RST bit is set ... drop the segment and return"
            if flags & FIN and self.state is TIME_WAIT:
                # RFC 9293 §3.10.7.4 TIME-WAIT: a retransmitted FIN is ACKed and restarts 2MSL.
                self.timers.time_wait_at = now + self.options.time_wait_timeout
            if flags & SYN:
                self._challenge_ack(now, syn=True)  # RFC 5961 §4.2, whatever the seq
                return
            if seg.payload and lt(seg.seq, t.rcv_nxt):  # old data: D-SACK it (Linux)
                end = add(seg.seq, len(seg.payload))
                self._note_dsack(seg.seq, end if lt(end, t.rcv_nxt) else t.rcv_nxt)
            self._send_dupack(seg, now, "TcpExtTCPACKSkippedSeq")
            return
        # second: RST (RFC 5961 §3.2)
        if flags & RST:
            if seg.seq == t.rcv_nxt:
                self._on_reset()
            else:
                self._challenge_ack(now)
            return
        # fourth: SYN (RFC 5961 §4.2)
        if flags & SYN:
            self._challenge_ack(now, syn=True)
            return
        # fifth: ACK
        if not flags & ACK:
            return
        self._last_rcv_at = now
        self._keepalive_probes = 0
        self._probes_out = 0
        if self.state is SYN_RECEIVED:
            if not (lt(t.snd_una, seg.ack) and le(seg.ack, t.snd_max)):
                self._emit(tcp.Repr(src_port=self.local_port, dst_port=self.remote_port,
                                    seq=seg.ack, ack=0, flags=RST, window=0))
                self.counters.add("TcpOutRsts")
                return
            self._rtt_sample_handshake(seg, now)
            t.snd_una = seg.ack
            t.snd_wnd = seg.window << t.snd_wscale
            t.max_snd_wnd = max(t.max_snd_wnd, t.snd_wnd)
            t.snd_wl1, t.snd_wl2 = seg.seq, seg.ack
            self._set_state(ESTABLISHED)
            self._on_established(now)
        elif not self._process_ack(seg, now):
            return
        if self.state is CLOSED:
            return
        self._update_ts_recent(seg, now)
        # sixth (URG) is not implemented: urgent data is delivered inline, as RFC 6093 advises.
        self._process_text_and_fin(seg, seg.seq, now)

    def _rst_after_fin(self, seg: tcp.Repr) -> bool:
        """Linux tcp_reset_check: once the peer's FIN is in, a RST at RCV.NXT-1 counts too."""
        return (self.state in (CLOSE_WAIT, CLOSING, LAST_ACK)
                and seg.seq == (self.tcb.rcv_nxt - 1) & MASK32)

    def _is_simultaneous_open_synack(self, seg: tcp.Repr) -> bool:
        t = self.tcb
        return (self.state is SYN_RECEIVED and not self.passive
                and seg.flags & (SYN | ACK | RST | FIN) == SYN | ACK and not seg.payload
                and add(seg.seq, 1) == t.rcv_nxt and seg.ack == t.snd_nxt)

    # --- first: acceptability --------------------------------------------------------
    def _acceptable(self, seq: int, length: int) -> bool:
        """The four-case table of RFC 9293 §3.10.7.4 against the advertised window.

        Zero window, data at RCV.NXT: accepted here so its ACK and RST/URG are processed
        ("special allowance", same section); the text is then trimmed off entirely.
        """
        t = self.tcb
        wnd = t.rcv_wnd
        if length == 0:
            if wnd == 0:
                return seq == t.rcv_nxt
            return self._in_rcv_window(seq, wnd)
        if wnd == 0:
            return seq == t.rcv_nxt
        return self._in_rcv_window(seq, wnd) or self._in_rcv_window(add(seq, length - 1), wnd)

    def _in_rcv_window(self, seq: int, wnd: int) -> bool:
        off = sub(seq, self.tcb.rcv_nxt)
        return 0 <= off < wnd

    def _paws_reject(self, seg: tcp.Repr, now: int, window: int = 0) -> bool:
        """RFC 7323 §5.3 R1: TSval older than TS.Recent (unless TS.Recent went stale, §5.5).

        Linux tcp_paws_check: ``window`` ticks of slack, and no check while TS.Recent is 0.
        """
        t = self.tcb
        assert seg.timestamp is not None
        if t.ts_recent_stamp is not None and now - t.ts_recent_stamp > PAWS_IDLE_LIMIT:
            return False
        return t.ts_recent != 0 and sub(t.ts_recent, seg.timestamp[0]) > window

    def _paws_discard(self, seg: tcp.Repr, now: int) -> bool:
        """Linux tcp_paws_discard: PAWS with one tick of slack, sparing "disordered" ACKs.

        A pure duplicate ACK that changes nothing and is at most one RTO older than
        TS.Recent is a reordered ACK, not an old duplicate: dropping it would only lose
        a dupack (Linux tcp_disordered_ack).
        """
        if not self._paws_reject(seg, now, window=PAWS_WINDOW):
            return False
        t = self.tcb
        assert seg.timestamp is not None
        disordered = (seg.flags & (ACK | SYN | FIN | RST) == ACK and not seg.payload
                      and seg.seq == t.rcv_nxt and seg.ack == t.snd_una
                      and not self._may_update_window(seg)
                      and sub(t.ts_recent, seg.timestamp[0]) <= self.rto.rto // MS)
        return not disordered

    def _may_update_window(self, seg: tcp.Repr) -> bool:
        """Linux tcp_may_update_window: would this ACK change SND.WND?"""
        t = self.tcb
        window = seg.window << t.snd_wscale
        return (gt(seg.ack, t.snd_una) or gt(seg.seq, t.snd_wl1)
                or (seg.seq == t.snd_wl1 and (window > t.snd_wnd or window == 0)))

    def _update_ts_recent(self, seg: tcp.Repr, now: int) -> None:
        """RFC 7323 §4.3 (2): TSval >= TS.Recent and SEG.SEQ =< Last.ACK.sent.

        Done only once the segment passed the RST, SYN and ACK checks, as Linux does
        (tcp_replace_ts_recent), so a rejected segment cannot move TS.Recent.
        """
        t = self.tcb
        if not t.ts_ok or seg.timestamp is None:
            return
        tsval = seg.timestamp[0]
        if ge(tsval, t.ts_recent) and le(seg.seq, t.last_ack_sent):
            t.ts_recent, t.ts_recent_stamp = tsval, now

    # --- second: RST -------------------------------------------------------------------
    def _on_reset(self) -> None:
        """An acceptable RST: errno by state as Linux's tcp_reset."""
        st = self.state
        self._events.append(ResetReceived())
        if st in (ESTABLISHED, CLOSE_WAIT):
            self.counters.add("TcpEstabResets")
        if st is SYN_RECEIVED and self.passive:
            self._enter_closed()  # RFC 9293: "return this connection to LISTEN"
        elif st is SYN_RECEIVED:
            self._fail(errnos.ECONNREFUSED)
        elif st is CLOSE_WAIT:
            self._fail(errnos.EPIPE)
        elif st in (CLOSING, LAST_ACK, TIME_WAIT):
            self._enter_closed()
        else:
            self._fail(errnos.ECONNRESET)

    # --- challenge ACKs and rate limits ------------------------------------------------------
    def _challenge_ack(self, now: int, syn: bool = False) -> None:
        """RFC 5961 §3.2/§4.2 challenge ACK, rate limited (§7; Linux: also 500 ms per socket)."""
        if syn:
            self.counters.add("TcpExtTCPSYNChallenge")
        if self._oow_rate_limited(now, "TcpExtTCPACKSkippedChallenge"):
            return
        if self._challenge_window_at is None or now - self._challenge_window_at >= SECOND:
            self._challenge_window_at, self._challenge_count = now, 0
        if self._challenge_count >= self.options.challenge_ack_limit:
            self.counters.add("TcpExtTCPACKSkippedChallenge")
            return
        self._challenge_count += 1
        self.counters.add("TcpExtTCPChallengeACK")
        self._ack_now = True

    def _send_dupack(self, seg: tcp.Repr, now: int, skipped_counter: str) -> None:
        """ACK an unacceptable segment (RFC 9293 §3.10.7.4 first).

        Linux (tcp_oow_rate_limited) rate-limits the answer only for segments without
        data, which could otherwise start an ACK loop; data always gets its dup ACK.
        """
        if not seg.payload and self._oow_rate_limited(now, skipped_counter):
            return
        self._ack_now = True

    def _oow_rate_limited(self, now: int, counter: str) -> bool:
        last = self._last_oow_ack_at
        if last is not None and now - last < self.options.invalid_ratelimit:
            self.counters.add(counter)
            return True
        self._last_oow_ack_at = now
        return False

    # --- fifth: ACK --------------------------------------------------------------------
    def _process_ack(self, seg: tcp.Repr, now: int) -> bool:
        """RFC 9293 §3.10.7.4 fifth with RFC 5961 §5.2's range; False drops the segment."""
        t = self.tcb
        ack = seg.ack
        if gt(ack, t.snd_max):
            # "If the ACK acks something not yet sent ... send an ACK, drop the segment"
            self._challenge_ack(now)
            return False
        if lt(ack, (t.snd_una - t.max_snd_wnd) & MASK32):
            # RFC 5961 §5.2: older than SND.UNA - MAX.SND.WND
            self._challenge_ack(now)
            return False
        prior_wnd = t.snd_wnd
        prior_flight = sub(t.snd_max, t.snd_una)
        new_ack = gt(ack, t.snd_una)
        acked = sub(ack, t.snd_una) if new_ack else 0
        if new_ack:
            self._ack_advance(seg, now)
        # window update (RFC 9293 §3.10.7.4 fifth, ESTABLISHED)
        if le(t.snd_una, ack) and (lt(t.snd_wl1, seg.seq) or
                                   (t.snd_wl1 == seg.seq and le(t.snd_wl2, ack))):
            t.snd_wnd = seg.window << t.snd_wscale
            t.max_snd_wnd = max(t.max_snd_wnd, t.snd_wnd)
            t.snd_wl1, t.snd_wl2 = seg.seq, ack
        newly_sacked = self._update_scoreboard(seg) if t.sack_ok else 0
        if self.scoreboard.ranges()[:1] and self.scoreboard.ranges()[0][0] == 0:
            # SACKed bytes at SND.UNA would have been ACKed cumulatively: the receiver
            # reneged (or lies).  Forget its SACKs (RFC 2018 §8; Linux tcp_check_sack_reneging).
            self.counters.add("TcpExtTCPSACKReneging")
            self.scoreboard.clear()
            newly_sacked = 0
        self._loss_detection(seg, ack, new_ack, acked, prior_wnd, prior_flight, newly_sacked,
                             now)
        # state-specific ACK handling
        st = self.state
        if self._fin_acked:
            if st is FIN_WAIT_1:
                self._set_state(FIN_WAIT_2)
                if self._orphaned:
                    self.timers.fin_wait2_at = now + self.options.fin_timeout
            elif st is CLOSING:
                self._enter_time_wait(now)
            elif st is LAST_ACK:
                self._enter_closed()
                return False
        return True

    @property
    def _fin_acked(self) -> bool:
        if not self._fin_queued or self._tx:
            return False
        return self.tcb.snd_una == add(self._tx_seq, 1) and self.tcb.snd_max == self.tcb.snd_una

    def _ack_advance(self, seg: tcp.Repr, now: int) -> None:
        """New data acknowledged: RTT, send buffer, RTO timer (RFC 6298 §5.2/5.3)."""
        t = self.tcb
        ack = seg.ack
        # sub/add/lt inlined (see HALF32): once per ACK of new data
        acked = ((ack - t.snd_una + HALF32) & MASK32) - HALF32
        self._rtt_sample(seg, now)
        data_acked = min(max(((ack - self._tx_seq + HALF32) & MASK32) - HALF32, 0),
                         len(self._tx))
        if data_acked:
            self._tx.drop(data_acked)
            self._tx_seq = (self._tx_seq + data_acked) & MASK32
        t.snd_una = ack
        if (t.snd_nxt - ack) & MASK32 >= HALF32:
            t.snd_nxt = ack  # after go-back-N the ACK may jump past SND.NXT
        if (self._high_rxt - ack) & MASK32 >= HALF32:
            self._high_rxt = ack
        self.scoreboard.advance(acked)
        if self._recover is not None and self._recovery is None \
                and sub(ack, self._recover) > 1 << 30:
            self._recover = None
        self._retransmits = 0
        self._first_rtx_at = None
        self.timers.rto_at = None if t.snd_una == t.snd_max else now + self.rto.rto
        if self._send_blocked and self.send_space:
            self._send_blocked = False
            self._events.append(SendSpaceAvailable(self.send_space))

    def _rtt_sample(self, seg: tcp.Repr, now: int) -> None:
        """RTTM (RFC 7323 §4) from TSecr, else Karn's timed segment (RFC 6298 §3)."""
        t = self.tcb
        if t.ts_ok and seg.timestamp is not None and seg.timestamp[1]:
            rtt_ms = sub(self._ts_val(now), seg.timestamp[1])
            if rtt_ms >= 0:
                self.rto.on_sample(max(rtt_ms, 1) * MS)
            return
        if self._rtt_seq is not None and ge(seg.ack, self._rtt_seq):
            self.rto.on_sample(now - self._rtt_start)
            self._rtt_seq = None

    def _rtt_sample_handshake(self, seg: tcp.Repr, now: int) -> None:
        t = self.tcb
        if t.ts_ok and seg.timestamp is not None and seg.timestamp[1]:
            rtt_ms = sub(self._ts_val(now), seg.timestamp[1])
            if 0 <= rtt_ms:
                self.rto.on_sample(max(rtt_ms, 1) * MS)
        elif not self._syn_retransmitted and self._syn_sent_at is not None:
            self.rto.on_sample(now - self._syn_sent_at)  # Karn: only unretransmitted SYNs

    def _update_scoreboard(self, seg: tcp.Repr) -> int:
        """Fold the peer's SACK blocks in, ignoring any outside [SND.UNA, SND.MAX] (RFC 2018)."""
        t = self.tcb
        limit = sub(t.snd_max, t.snd_una)
        new = 0
        for left, right in seg.sack_blocks:
            start, end = sub(left, t.snd_una), sub(right, t.snd_una)
            if 0 <= start < end <= limit:
                new += self.scoreboard.add(start, end)
        return new

    # --- loss detection and recovery (RFC 5681 §3.2, RFC 6582, RFC 6675) ------------------
    def _loss_detection(self, seg: tcp.Repr, ack: int, new_ack: bool, acked: int,
                        prior_wnd: int, prior_flight: int, newly_sacked: int, now: int) -> None:
        t = self.tcb
        outstanding = t.snd_max != t.snd_una
        # RFC 5681 §2 duplicate ACK; RFC 6675 §2 also counts an ACK carrying new SACK info.
        is_dup = (not new_ack and ack == t.snd_una and outstanding and not seg.payload
                  and not seg.flags & (SYN | FIN)
                  and (newly_sacked > 0 or (t.snd_wnd == prior_wnd and not seg.sack_blocks)))
        if self._recovery is None:
            if new_ack:
                self._dupacks = 0
                # Grow cwnd only while it limits us (Linux tcp_is_cwnd_limited).
                if self._is_cwnd_limited():
                    self.cc.on_ack(acked, now, self.rto.srtt)
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
        if self._recovery == "reno":
            if new_ack:
                # RFC 6582 §3.2 step 3, partial ACK: retransmit the first unacknowledged
                # segment, deflate cwnd by the amount acked, add back one SMSS.
                self._retransmit_at(t.snd_una, now)
                self.cc.cwnd = max(self.cc.cwnd - acked + (t.snd_mss if acked >= t.snd_mss else 0),
                                   t.snd_mss)
            elif is_dup:
                self.cc.cwnd += t.snd_mss  # RFC 5681 §3.2 step 4 (kept by RFC 6582)

    def _enter_recovery(self, now: int) -> None:
        t = self.tcb
        flight = sub(t.snd_max, t.snd_una)
        self.cc.on_congestion(now, flight)
        self._recover = (t.snd_max - 1) & MASK32  # RFC 6582 recover / RFC 6675 RecoveryPoint
        self.counters.add("TcpExtTCPFastRetrans")
        if t.sack_ok:
            self._recovery = "sack"
            self.counters.add("TcpExtTCPSackRecovery")
            self.cc.cwnd = self.cc.ssthresh  # RFC 6675 §5 step (4.2)
            self._high_rxt = t.snd_una
            hole = self.scoreboard.next_seg_rule3(0, t.snd_mss)
            end = self._retransmit_at(t.snd_una, now, hole[1] if hole else None)  # step (4.3)
            if end is not None:
                self._high_rxt = end
        else:
            self._recovery = "reno"
            self.counters.add("TcpExtTCPRenoRecovery")
            self._retransmit_at(t.snd_una, now)  # RFC 5681 §3.2 step 3
            self.cc.cwnd = self.cc.ssthresh + 3 * t.snd_mss
        self._rtt_seq = None  # Karn

    def _exit_recovery(self, now: int) -> None:
        t = self.tcb
        if self._recovery == "reno":
            # RFC 6582 §3.2 step 3, full ACK, option (1)
            flight = sub(t.snd_max, t.snd_una)
            self.cc.cwnd = min(self.cc.ssthresh, max(flight, t.snd_mss) + t.snd_mss)
        else:
            self.cc.on_recovery_exit(now)
        self._recovery = None
        self._dupacks = 0

    # --- seventh and eighth: text and FIN -------------------------------------------------
    def _process_text_and_fin(self, seg: tcp.Repr, seq: int, now: int) -> None:
        t = self.tcb
        fin = bool(seg.flags & FIN)
        payload = seg.payload
        if not self.state.receives_data:
            if fin and self.state.fin_received:
                self._ack_now = True  # a retransmitted FIN: ACK it again
                if self.state is TIME_WAIT:
                    self.timers.time_wait_at = now + self.options.time_wait_timeout  # restart 2MSL
            elif payload:
                self._ack_now = True
            return
        off = sub(seq, t.rcv_nxt)
        data = memoryview(payload) if payload else memoryview(b"")
        if off < 0:  # trim the duplicate prefix
            cut = -off
            if data:
                self._note_dsack(seq, add(seq, min(cut, len(data))))
            if cut > len(data) or (cut == len(data) and not fin):
                return
            data, off = data[cut:], 0
        wnd = t.rcv_wnd
        if self._fin_offset is not None and off + len(data) > self._fin_offset:
            data = data[: max(0, self._fin_offset - off)]  # nothing exists beyond the FIN
        if off + len(data) > wnd:  # trim to the window; a FIN beyond it goes too
            if wnd == 0 and data:
                self.counters.add("TcpExtTCPZeroWindowDrop")
            data = data[: max(0, wnd - off)]
            fin = False
            self._ack_now = True
        if data and self._orphaned:
            # Linux: new data after close() resets the connection (TCPAbortOnData).
            self.counters.add("TcpExtTCPAbortOnData")
            self._abort(now)
            return
        if data:
            self._last_rcv_at = now
            t.rcv_mss = max(t.rcv_mss, min(len(data), self.options.mss))
            if off == 0:
                self._rcv_rtt_measure(seg, len(data), now)
                self._deliver_in_order(data, now)
            else:
                self._queue_out_of_order(off, data)
        if fin:
            # The first FIN position wins; one below data we already hold is contradictory.
            fin_off = sub(add(seq, len(payload)), t.rcv_nxt)
            if self._fin_offset is None and fin_off >= max((e for _, e in self._ofo.ranges()),
                                                           default=0):
                self._fin_offset = fin_off
        self._maybe_take_fin(now)

    # --- receive-buffer autotuning (Linux DRS: tcp_rcv_rtt_measure*, tcp_rcv_space_adjust) ---
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

    def _deliver_in_order(self, data: memoryview, now: int) -> None:
        t = self.tcb
        had_holes = bool(len(self._ofo))
        self._rx.append(data)
        n = len(data)
        self._advance_rcv(n)
        while (chunk := self._ofo.pop_front()) is not None:
            self._rx.append(chunk)
            self._advance_rcv(len(chunk))
            n += len(chunk)
        self._events.append(DataReceived(n))
        self._rcv_unacked += n
        delack = self._delack
        delack.data_received(now, t.rcv_wnd, t.rcv_mss, self.rto.rto)
        if had_holes:
            self._ack_now = True  # RFC 5681 §4.2: ACK at once when a gap is (partly) filled
        elif delack.quick and not delack.pingpong:
            self._ack_now = True  # quick-ack mode (__tcp_ack_snd_check)
        elif self._rcv_unacked > t.rcv_mss and self._free_window() >= self._offered_window():
            # RFC 5681 §4.2: at least every second full-sized segment; Linux's test
            # (__tcp_ack_snd_check): more than one receive MSS not yet acknowledged, and
            # the window would not shrink -- while the application has not read, recv()
            # sends this ACK (``_maybe_window_update``), or the delayed-ACK timer does.
            self._ack_now = True
        elif self.timers.delack_at is None:
            self.timers.delack_at = now + delack.timeout(self.rto.srtt)

    def _advance_rcv(self, n: int) -> None:
        t = self.tcb
        t.rcv_nxt = (t.rcv_nxt + n) & MASK32  # add, inlined (see HALF32): every delivery
        self._ofo.advance(n)
        self._rx_blocks.advance(n)
        if self._fin_offset is not None:
            self._fin_offset -= n

    def _queue_out_of_order(self, off: int, data: memoryview) -> None:
        added = self._ofo.add(off, data)
        if added is None:
            self.counters.add("TcpExtTCPOFODrop")
        else:
            self.counters.add("TcpExtTCPOFOQueue")
            if added < len(data):
                self.counters.add("TcpExtTCPOFOMerge")  # overlapped what we already held
            if added == 0:
                start = add(self.tcb.rcv_nxt, off)
                self._note_dsack(start, add(start, len(data)))
            self._rx_blocks.note(off)
        self._ack_now = True  # RFC 5681 §4.2: out-of-order data gets an immediate dup ACK
        self._delack.enter_quickack_mode(self.tcb.rcv_wnd, self.tcb.rcv_mss)

    def _note_dsack(self, start: int, end: int) -> None:
        """Report duplicate data in the next ACK's first SACK block (RFC 2883, Linux tcp_dsack).

        The sender uses it to detect spurious retransmissions; ours ignores such blocks.
        """
        if self.tcb.sack_ok and self._dsack is None and lt(start, end):
            self._dsack = (start, end)
            self.counters.add("TcpExtTCPDSACKOldSent")
        self._ack_now = True

    def _maybe_take_fin(self, now: int) -> None:
        """Eighth step: a FIN counts once every byte before it has arrived."""
        if self._fin_offset != 0 or not self.state.receives_data:
            return
        t = self.tcb
        self._fin_offset = None
        t.rcv_nxt = add(t.rcv_nxt, 1)
        self._dsack = None  # tcp_fin: tcp_sack_reset (no D-SACK after the FIN)
        self._events.append(FinReceived())
        st = self.state
        if st is ESTABLISHED:
            self._set_state(CLOSE_WAIT)
            self._ack_fin_in_established(now)
            return
        self._ack_now = True  # FIN-WAIT-1/2: tcp_fin sends the ACK at once (tcp_send_ack)
        if st is FIN_WAIT_1:
            # Our FIN is not ACKed (an ACK of it moved us to FIN-WAIT-2 in the fifth step).
            self._set_state(CLOSING)  # simultaneous close
        elif st is FIN_WAIT_2:
            self._enter_time_wait(now)

    def _ack_fin_in_established(self, now: int) -> None:
        """Linux tcp_fin in ESTABLISHED: CLOSE-WAIT and pingpong mode
        (inet_csk_enter_pingpong_mode), so the ACK follows __tcp_ack_snd_check without
        quick-ack mode: at once when more than one full segment is unacknowledged,
        otherwise after ato -- which is 0 on a connection that never received data (the
        delayed-ACK timer then fires at once), 40 ms or more once it has."""
        delack = self._delack
        delack.pingpong = 1
        t = self.tcb
        received = sub(t.rcv_nxt, add(t.irs, 2)) > 0  # data before the FIN: ato was set
        if self._rcv_unacked > t.rcv_mss or not delack.ato or not received:
            self._ack_now = True
            return
        self._ack_now = False
        if self.timers.delack_at is None:
            self.timers.delack_at = now + delack.timeout(self.rto.srtt)

    # ------------------------------------------------------------------ timers
    def on_timer(self, now: int) -> None:
        """Run every deadline that is due (virtual time: call with ``next_deadline()``)."""
        self._now = now
        tm = self.timers
        if tm.time_wait_at is not None and now >= tm.time_wait_at:
            tm.time_wait_at = None
            self._enter_closed()
        if tm.fin_wait2_at is not None and now >= tm.fin_wait2_at:
            tm.fin_wait2_at = None
            if self.state is FIN_WAIT_2:
                self._enter_closed()
        if tm.rto_at is not None and now >= tm.rto_at:
            tm.rto_at = None
            self._on_rto(now)
        if tm.persist_at is not None and now >= tm.persist_at:
            tm.persist_at = None
            self._on_persist(now)
        if tm.delack_at is not None and now >= tm.delack_at:
            tm.delack_at = None
            if self.state.synchronized or self.state is SYN_RECEIVED:
                self.counters.add("TcpExtDelayedACKs")
                self._ack_now = True
        if tm.keepalive_at is not None and now >= tm.keepalive_at:
            tm.keepalive_at = None
            self._on_keepalive(now)
        self._output(now)

    def _on_rto(self, now: int) -> None:
        """RFC 6298 §5.4-5.6, with Linux's give-up rules (tcp_write_timeout)."""
        t = self.tcb
        o = self.options
        st = self.state
        if st in (SYN_SENT, SYN_RECEIVED):
            passive_synack = st is SYN_RECEIVED and self.passive
            limit = o.synack_retries if passive_synack else o.syn_retries
            if self._retransmits >= limit:
                self.counters.add("TcpExtTCPAbortOnTimeout")
                if st is SYN_SENT:
                    self.counters.add("TcpAttemptFails")
                if self.passive:
                    self._enter_closed()
                else:
                    self._fail(errnos.ETIMEDOUT)
                return
            self._retransmits += 1
            self._syn_retransmitted = True
            self.rto.on_timeout()
            self.counters.add("TcpExtTCPTimeouts")
            self.counters.add("TcpExtTCPSynRetrans")
            self.counters.add("TcpRetransSegs")
            self._send_syn(now, retransmit=True)
            return
        if t.snd_una == t.snd_max or st is CLOSED or st is TIME_WAIT:
            return
        if self._first_rtx_at is None:
            self._first_rtx_at = now - self.rto.rto  # ~ when the head was first sent
        if t.snd_wnd == 0 and not self._orphaned:
            # Linux tcp_retransmit_timer: the receiver shrank its window to zero under
            # data in flight.  Retransmissions are now window probes; give up only when
            # the peer has not ACKed anything for 2 * TCP_RTO_MAX (tcp_rtx_probe0_timed_out).
            timed_out = now - self._last_rcv_at > 2 * o.rto_max
        else:
            timed_out = now - self._first_rtx_at >= retransmits_timed_out(
                o.retries2, o.rto_min, o.rto_max)
        if timed_out:
            self.counters.add("TcpExtTCPAbortOnTimeout")
            self._abort_timeout()
            return
        self._retransmits += 1
        self.counters.add("TcpExtTCPTimeouts")
        flight = sub(t.snd_max, t.snd_una)
        self.cc.on_timeout(now, flight)
        # RFC 6582 §3.2 step 4: no fast retransmit for data sent before the timeout.
        self._recover = (t.snd_max - 1) & MASK32
        self._recovery = None
        self._dupacks = 0
        self.scoreboard.clear()  # RFC 2018 §8: the receiver may renege; forget SACKs
        self._high_rxt = t.snd_una
        self._rtt_seq = None
        self.rto.on_timeout()
        t.snd_nxt = t.snd_una  # go back N; the head goes out even beyond the window
        end = self._retransmit_at(t.snd_una, now)
        if end is not None:
            t.snd_nxt = end
        self.timers.rto_at = now + self.rto.rto

    def _abort_timeout(self) -> None:
        self._tx.clear()
        self._fail(errnos.ETIMEDOUT)

    def _on_persist(self, now: int) -> None:
        """RFC 9293 §3.8.6.1 zero-window probe (Linux: an old-seq ACK, tcp_xmit_probe_skb)."""
        t = self.tcb
        if not self.state.synchronized or t.snd_una != t.snd_max or self.state is TIME_WAIT:
            return
        if not self._tx and not self._fin_queued:
            return
        room = sub(add(t.snd_una, t.snd_wnd), t.snd_nxt)
        if room > 0 and self._try_send(now, room=t.snd_mss, force=True):
            self._persist_backoff = 0
            return
        if self._probes_out >= self.options.retries2:
            # Linux tcp_probe_timer: a peer that answers no probe at all is given up on;
            # one that keeps answering with a zero window is probed forever.
            self.counters.add("TcpExtTCPAbortOnTimeout")
            self._abort_timeout()
            return
        self.counters.add("TcpExtTCPWinProbe")
        self._emit(self._make((t.snd_una - 1) & MASK32, ACK, now))
        self._probes_out += 1
        self._persist_backoff += 1
        self.timers.persist_at = now + self._persist_interval()

    def _persist_interval(self) -> int:
        return min(self.rto.base_rto << self._persist_backoff, self.options.rto_max)

    def _on_keepalive(self, now: int) -> None:
        """RFC 1122 §4.2.3.6 keep-alive, Linux's timing (tcp_keepalive_timer)."""
        o = self.options
        t = self.tcb
        if not o.keepalive or self.state not in (ESTABLISHED, CLOSE_WAIT,
                                                 FIN_WAIT_2):
            return
        if t.snd_una != t.snd_max or self._tx:
            self.timers.keepalive_at = now + o.keepalive_time  # data in flight: RTO covers it
            return
        idle = now - self._last_rcv_at
        if idle < o.keepalive_time and self._keepalive_probes == 0:
            self.timers.keepalive_at = self._last_rcv_at + o.keepalive_time
            return
        if self._keepalive_probes >= o.keepalive_probes:
            # tcp_keepalive_timer gives up with tcp_send_active_reset, then tcp_write_err
            self._emit(self._make(t.snd_nxt, RST | ACK, now))
            self.counters.add("TcpOutRsts")
            self.counters.add("TcpExtTCPAbortOnTimeout")
            self._fail(errnos.ETIMEDOUT)
            return
        self._keepalive_probes += 1
        self.counters.add("TcpExtTCPKeepAlive")
        self._emit(self._make((t.snd_una - 1) & MASK32, ACK, now))
        self.timers.keepalive_at = now + o.keepalive_intvl

    # ------------------------------------------------------------------ state changes
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

    def _set_state(self, new: State) -> None:
        old = self.state
        if (old, new) not in TRANSITIONS:
            raise AssertionError(f"TCP transition {old} -> {new} is not in the table")
        self.state = new

    def _on_established(self, now: int) -> None:
        t = self.tcb
        self.timers.rto_at = None
        self._retransmits = 0
        self._last_rcv_at = now
        if self._syn_retransmitted:
            if self.rto.srtt is None:
                # RFC 6298 §5.7: no valid sample and the SYN was retransmitted
                self.rto.base_rto = max(self.rto.base_rto, self.options.rto_fallback)
            self.rto.backoff = 0
            self.cc.set_loss_window()  # RFC 5681 §3.1: IW = 1 segment after a lost SYN
        if self.passive:
            self.counters.add("TcpPassiveOpens")
        if self.options.keepalive:
            self.timers.keepalive_at = now + self.options.keepalive_time
        self._expand_sndbuf()
        # Linux tcp_init_buffer_space: the first round trip may bring the initial window.
        self._rcv_space = min(self._syn_window(), self.options.initial_cwnd * self.options.mss)
        self._rcv_space_copied, self._rcv_space_at = self._copied, now
        self._events.append(Established())
        if self._fin_queued:
            self._set_state(FIN_WAIT_1)
        t.snd_nxt = t.snd_max = t.snd_una

    def _enter_time_wait(self, now: int) -> None:
        self._set_state(TIME_WAIT)
        self.timers.stop_all()
        self.timers.time_wait_at = now + self.options.time_wait_timeout
        self.counters.add("TcpExtTW")
        self._events.append(TimeWaitEntered())

    def _enter_closed(self) -> None:
        if self.state is not CLOSED:
            self._set_state(CLOSED)
        self.timers.stop_all()
        self._ofo.clear()
        if not self._closed_reported:
            self._closed_reported = True
            self._events.append(Closed())

    def _fail(self, err: int) -> None:
        self.error = err
        self._tx.clear()
        self._events.append(ConnectionFailed(err))
        self._enter_closed()

    def _raise_pending_error(self) -> None:
        err = self.error
        if err is not None:
            self.error = None
            raise OSError(err, errnos.errorcode.get(err, "error"))

    # ------------------------------------------------------------------ handshake helpers
    def _take_peer_syn(self, seg: tcp.Repr, now: int) -> None:
        """Record the peer's SYN: IRS and the options both sides agreed on (RFC 7323, 2018)."""
        t = self.tcb
        o = self.options
        t.irs = seg.seq
        t.rcv_nxt = add(seg.seq, 1)
        if o.window_scaling and seg.window_scale is not None:
            t.snd_wscale = min(seg.window_scale, MAX_WSCALE)  # RFC 7323 §2.3
        else:
            t.snd_wscale = 0
            t.rcv_wscale = 0  # "both sides must send Window Scale ... to enable scaling"
        t.ts_ok = o.timestamps and seg.timestamp is not None
        if t.ts_ok and seg.timestamp is not None:
            t.ts_recent, t.ts_recent_stamp = seg.timestamp[0], now
        t.sack_ok = o.sack and seg.sack_permitted
        self._peer_ws_offered = seg.window_scale is not None
        peer_mss = seg.mss if seg.mss is not None else o.default_peer_mss
        self._set_mss(peer_mss)
        t.snd_wnd = seg.window  # RFC 7323 §2.2: the SYN's window is never scaled
        t.max_snd_wnd = max(t.max_snd_wnd, t.snd_wnd)
        t.snd_wl1, t.snd_wl2 = seg.seq, seg.ack
        t.rcv_adv = add(t.rcv_nxt, self._syn_window())

    def _set_mss(self, peer_mss: int) -> None:
        """Effective send MSS (RFC 9293 §3.7.1), minus the timestamp option Linux reserves."""
        t = self.tcb
        o = self.options
        mss = min(max(peer_mss, o.min_snd_mss), o.mss)
        if t.ts_ok:
            mss -= TS_OPTION_LEN
        t.snd_mss = max(mss, 1)
        t.rcv_mss = self._initial_rcv_mss()
        self.cc = congestion.create(o.congestion_control, t.snd_mss, o.initial_cwnd)

    def mtu_reduced(self, path_mss: int, now: int) -> bool:
        """The path got narrower: ICMP fragmentation-needed / packet-too-big left room for
        ``path_mss`` bytes of TCP payload plus a bare 20-byte header (the path MTU minus
        both headers).  Linux tcp_v4_mtu_reduced -> tcp_sync_mss + tcp_simple_retransmit:
        lower the send MSS, and resend what is in flight in segments that fit now.  The
        drops were not congestion, so cwnd and ssthresh stay.  Returns whether the MSS
        went down."""
        if self.state in (LISTEN, CLOSED, TIME_WAIT):
            return False
        t = self.tcb
        mss = path_mss - (TS_OPTION_LEN if t.ts_ok else 0)  # tcp_mtu_to_mss
        mss = max(mss, self.options.min_snd_mss)
        if mss >= t.snd_mss:
            return False
        t.snd_mss = mss
        if self.state is SYN_SENT or t.snd_una == t.snd_max:
            return True
        self._now = now
        # tcp_simple_retransmit: everything in flight was sized for the old path; go back to
        # snd_una without a congestion response.  Duplicate ACKs for the old flight must not
        # start a fast retransmit (RFC 6582 §3.2 step 4, as after a timeout).
        self._recover = (t.snd_max - 1) & MASK32
        self._rtt_seq = None  # Karn
        self._high_rxt = t.snd_una
        t.snd_nxt = t.snd_una
        end = self._retransmit_at(t.snd_una, now)
        if end is not None:
            t.snd_nxt = end
        self._output(now)
        return True

    def _initial_rcv_mss(self) -> int:
        """Linux tcp_initialize_rcv_mss: a small first guess at the peer's segment size
        (delayed-ACK counting), raised by every larger segment received.  Starting at the
        send MSS instead would leave a sender whose send buffer holds less than two of
        our MSS waiting for the delayed-ACK timer on every window (64 KB loopback MSS)."""
        t = self.tcb
        hint = min(self.options.mss, t.snd_mss, self._syn_window() // 2, RCV_MSS_HINT)
        return max(hint, RCV_MSS_MIN)

    def _syn_window(self) -> int:
        return min(self.options.rcvbuf, 0xFFFF)

    def _send_syn(self, now: int, retransmit: bool = False, rearm: bool = True) -> None:
        """SYN (SYN-SENT) or SYN,ACK (SYN-RECEIVED) with our options."""
        t = self.tcb
        o = self.options
        is_synack = self.state is SYN_RECEIVED
        flags = SYN | (ACK if is_synack else 0)
        # In a SYN,ACK, offer only what the peer's SYN offered (RFC 7323 §2.2, §3.2; 2018 §2).
        if is_synack:
            wscale = t.rcv_wscale if (o.window_scaling and self._peer_ws_offered) else None
            sack_permitted = t.sack_ok
            ts = (self._ts_val(now), t.ts_recent) if t.ts_ok else None
        else:
            wscale = t.rcv_wscale if o.window_scaling else None
            sack_permitted = o.sack
            ts = (self._ts_val(now), 0) if o.timestamps else None
        seg = tcp.Repr(src_port=self.local_port, dst_port=self.remote_port, seq=t.iss,
                       ack=t.rcv_nxt if is_synack else 0, flags=flags, window=self._syn_window(),
                       mss=o.mss, window_scale=wscale, sack_permitted=sack_permitted,
                       timestamp=ts)
        if is_synack:
            t.last_ack_sent = t.rcv_nxt
        self._emit(seg)
        if not retransmit and self._syn_sent_at is None:
            self._syn_sent_at = now
        t.snd_nxt = t.snd_max = add(t.iss, 1)
        if rearm or self.timers.rto_at is None:
            self.timers.rto_at = now + self.rto.rto

    # ------------------------------------------------------------------ output
    def _output(self, now: int) -> None:
        """Generate whatever the state allows: data, FIN, ACKs; then arm the timers."""
        st = self.state
        t = self.tcb
        if st.synchronized and st is not TIME_WAIT:
            if self._recovery == "sack":
                self._send_sack_recovery(now)
            else:
                sent = len(self._out)
                while self._try_send(now, room=self._cwnd_room()):
                    pass
                if len(self._out) > sent:
                    self._push_last(sent)
            self._cwnd_validate()
            self._arm_persist(now)
        if self._ack_now and st is not CLOSED and st is not SYN_SENT:
            self._emit_pure_ack(now)
        if self.timers.rto_at is None and t.snd_una != t.snd_max and st is not CLOSED \
                and st is not TIME_WAIT:
            self.timers.rto_at = now + self.rto.rto  # RFC 6298 §5.1

    def _push_last(self, first: int) -> None:
        """PSH on the last new-data segment of a transmission burst, as Linux's segments
        carry it: tcp_push marks the tail of each write, and the part tcp_write_xmit
        sends when cwnd or the window cuts a write short keeps the mark (the kernel
        selftests' slow-start and EOR scripts, and packetdrill's gtests, expect it)."""
        out = self._out
        for i in range(len(out) - 1, first - 1, -1):
            seg = out[i]
            if seg.payload and not seg.flags & (SYN | RST):
                if not seg.flags & PSH:
                    out[i] = seg._replace(flags=seg.flags | PSH)
                return

    def _cwnd_validate(self) -> None:
        """Linux tcp_cwnd_validate (after tcp_write_xmit): remember the window's largest
        flight and whether cwnd was what stopped us, for ``_is_cwnd_limited``."""
        t = self.tcb
        flight = ((t.snd_nxt - t.snd_una + HALF32) & MASK32) - HALF32
        limited = flight >= self.cc.cwnd
        if ge(t.snd_una, self._max_flight_seq) or flight > self._max_flight:
            self._max_flight = flight
            self._max_flight_seq = t.snd_nxt
            self._cwnd_limited = limited
        elif limited:
            self._cwnd_limited = True

    def _is_cwnd_limited(self) -> bool:
        """Linux tcp_is_cwnd_limited: grow cwnd only while it limits the sender; in slow
        start, until it is twice the largest flight of the window."""
        if self._cwnd_limited:
            return True
        cc = self.cc
        return cc.in_slow_start and cc.cwnd < 2 * self._max_flight

    def _cwnd_room(self) -> int:
        """Bytes congestion control lets us put in flight now.

        RFC 3042 limited transmit: the first two duplicate ACKs each allow one more new
        segment beyond cwnd (cwnd itself is unchanged).
        """
        t = self.tcb
        snd_nxt = t.snd_nxt
        # seqnum.sub(snd_nxt, snd_una) and seqnum.lt inlined (see HALF32): once per send
        room = self.cc.cwnd - (((snd_nxt - t.snd_una + HALF32) & MASK32) - HALF32)
        if self._recovery is None and self._dupacks and snd_nxt == t.snd_max:
            room += min(self._dupacks, 2) * t.snd_mss
        if t.sack_ok and (snd_nxt - t.snd_max) & MASK32 >= HALF32:
            # going back N after an RTO: what the peer SACKed since is not in flight
            room += self._sacked_below(t.snd_nxt)
        return room

    def _sacked_below(self, seq: int) -> int:
        limit = sub(seq, self.tcb.snd_una)
        return sum(max(0, min(e, limit) - s) for s, e in self.scoreboard.ranges())

    def _emit_pure_ack(self, now: int) -> None:
        self._emit(self._make(self.tcb.snd_nxt, ACK, now))

    def _try_send(self, now: int, room: int, force: bool = False) -> bool:
        """Send one segment from SND.NXT if the windows, Nagle and SWS rules allow it.

        ``room`` is what congestion control allows (cwnd minus flight, or one SMSS in
        SACK recovery).  ``force`` overrides SWS/Nagle (persist timer expiry).
        """
        t = self.tcb
        # Sequence arithmetic inlined (see HALF32; this runs at least once per engine
        # call that may send): lt(a, b) is (a - b) & MASK32 >= HALF32, sub(a, b) is
        # ((a - b + HALF32) & MASK32) - HALF32, add(a, n) is (a + n) & MASK32.
        sacked_limit = (self._skip_sacked() if (t.snd_nxt - t.snd_max) & MASK32 >= HALF32
                        else None)  # may move snd_nxt: loaded after it
        snd_nxt = t.snd_nxt
        data_end = (self._tx_seq + len(self._tx)) & MASK32
        avail = ((data_end - snd_nxt + HALF32) & MASK32) - HALF32
        if avail < 0 or (avail == 0 and not self._fin_queued):
            return False  # nothing (more) to send: the common second call from _output
        fin_pending = self._fin_queued and self.state in (
            FIN_WAIT_1, CLOSING, LAST_ACK) and le(snd_nxt, data_end) \
            and not self._fin_acked
        win_room = ((t.snd_una + t.snd_wnd - snd_nxt + HALF32) & MASK32) - HALF32
        n = min(avail, t.snd_mss, win_room, room)
        if sacked_limit is not None:
            n = min(n, sacked_limit)
        if n < 0:
            n = 0
        retransmission = (snd_nxt - t.snd_max) & MASK32 >= HALF32
        if n == 0 and not (fin_pending and avail == 0):
            return False
        if not retransmission and not force and n < avail:
            # Sender SWS avoidance (RFC 9293 §3.8.6.2.1): a full segment, or half the
            # largest window the peer ever offered.
            if n < t.snd_mss and n < t.max_snd_wnd // 2:
                return False
        if (not retransmission and not force and n == avail and n < t.snd_mss and n > 0
                and not self.options.nodelay and not fin_pending
                and t.snd_una != t.snd_max and not self._send_blocked):
            # Nagle (RFC 1122 §4.2.3.4): small segment while data is in flight.  Not while
            # the writer waits for buffer space: nothing more can join this segment (Linux
            # pushes with TCP_NAGLE_PUSH before sleeping in tcp_sendmsg).
            return False
        fin = fin_pending and n == avail and win_room > n
        if n == 0 and not fin:
            return False
        seq = snd_nxt
        off = ((seq - self._tx_seq + HALF32) & MASK32) - HALF32
        payload = self._tx.slice(off, n)
        flags = ACK | (PSH if n and n == avail else 0) | (FIN if fin else 0)
        self._emit(self._make(seq, flags, now, payload))
        end = (seq + n + (1 if fin else 0)) & MASK32
        if retransmission:
            self.counters.add("TcpRetransSegs")
        elif self._rtt_seq is None and not t.ts_ok:
            self._rtt_seq, self._rtt_start = end, now  # time this segment (Karn, RFC 6298 §3)
        t.snd_nxt = end
        if (t.snd_max - end) & MASK32 >= HALF32:  # gt(end, snd_max)
            t.snd_max = end
        if self.timers.rto_at is None:
            self.timers.rto_at = now + self.rto.rto  # RFC 6298 §5.1
        self.timers.persist_at = None
        return True

    def _skip_sacked(self) -> int | None:
        """Go-back-N after an RTO skips what the peer SACKed since (RFC 6675 §5.1).

        Moves SND.NXT past SACKed ranges; returns how many bytes may go before the next
        SACKed range (None: no limit).  SACK information from before the timeout was
        discarded (RFC 2018 §8), so only fresh reports are trusted here.
        """
        t = self.tcb
        if not t.sack_ok:
            return None
        off = sub(t.snd_nxt, t.snd_una)
        for start, end in self.scoreboard.ranges():
            if end <= off:
                continue
            if start <= off:
                off = end
                t.snd_nxt = add(t.snd_una, off)
                continue
            return start - off
        return None

    def _retransmit_at(self, seq: int, now: int, max_len: int | None = None) -> int | None:
        """Retransmit one segment starting at ``seq``; return its end sequence number."""
        t = self.tcb
        off = sub(seq, self._tx_seq)
        if off < 0:
            return None
        limit = t.snd_mss if max_len is None else min(max_len, t.snd_mss)
        n = max(0, min(limit, len(self._tx) - off))
        fin = (self._fin_queued and off + n == len(self._tx)
               and self.state in (FIN_WAIT_1, CLOSING, LAST_ACK)
               and lt(add(seq, n), t.snd_max))
        if n == 0 and not fin:
            return None
        flags = ACK | (FIN if fin else 0) | (PSH if off + n == len(self._tx) and n else 0)
        self._emit(self._make(seq, flags, now, self._tx.slice(off, n)))
        self.counters.add("TcpRetransSegs")
        end = add(seq, n + (1 if fin else 0))
        if self._rtt_seq is not None and lt(seq, self._rtt_seq):
            self._rtt_seq = None  # Karn: never time a retransmitted segment
        if self.timers.rto_at is None:
            self.timers.rto_at = now + self.rto.rto
        return end

    def _send_sack_recovery(self, now: int) -> None:
        """RFC 6675 §5 step (C): while cwnd - pipe >= 1 SMSS, send NextSeg()."""
        t = self.tcb
        mss = t.snd_mss
        sb = self.scoreboard
        for _ in range(1000):  # bounded: each pass sends a segment or stops
            una = t.snd_una
            high_data = sub(t.snd_max, una)
            hrx = max(0, sub(self._high_rxt, una))
            if self.cc.cwnd - sb.pipe(hrx, high_data, mss) < mss:
                return
            nxt = sb.next_seg(hrx, mss)  # rule 1: lost and not yet retransmitted
            if nxt is None and self._try_send(now, room=mss):
                continue  # rule 2: new data
            if nxt is None:
                nxt = sb.next_seg_rule3(hrx, mss)  # rule 3
            if nxt is None:
                return
            end = self._retransmit_at(add(una, nxt[0]), now, nxt[1])
            if end is None:
                return
            self._high_rxt = end

    def _arm_persist(self, now: int) -> None:
        """Start the persist timer when data waits on a closed window with nothing in flight."""
        t = self.tcb
        if t.snd_una != t.snd_max:
            return
        waiting = bool(self._tx) or (self._fin_queued and not self._fin_acked)
        if not waiting:
            self.timers.persist_at = None
            self._persist_backoff = 0
            return
        if self.timers.persist_at is None:
            self.timers.persist_at = now + self._persist_interval()

    def _maybe_window_update(self) -> None:
        """After recv(): ACK at once when an ACK is due and more than one segment is
        unacknowledged (the input path held it while nobody read), or when the window at
        least doubles (Linux __tcp_cleanup_rbuf)."""
        t = self.tcb
        if not self.state.receives_data:
            return
        if self.timers.delack_at is not None and self._rcv_unacked > t.rcv_mss:
            self._ack_now = True
            return
        now_wnd = t.rcv_wnd
        cap = min(self.options.rcvbuf, 0xFFFF << t.rcv_wscale)
        if 2 * now_wnd <= cap:
            new_wnd = ((cap - len(self._rx)) >> t.rcv_wscale) << t.rcv_wscale
            if new_wnd and new_wnd >= 2 * now_wnd:
                self._ack_now = True

    def _free_window(self) -> int:
        """The window the buffer allows now (Linux __tcp_select_window before rounding)."""
        cap = min(self.options.rcvbuf, 0xFFFF << self.tcb.rcv_wscale)
        return max(0, cap - len(self._rx))

    def _offered_window(self) -> int:
        """The window our last ACK offered, from its RCV.NXT (Linux tp->rcv_wnd)."""
        t = self.tcb
        return max(0, sub(t.rcv_adv, t.last_ack_sent))

    def _window_field(self) -> int:
        """The 16-bit window to advertise, with receiver SWS avoidance (RFC 9293 §3.8.6.2.2).

        The right edge never moves left except by scaling granularity (RFC 7323 §2.4);
        it moves right only by at least min(buffer/2, MSS).
        """
        t = self.tcb
        ws = t.rcv_wscale
        cap = min(self.options.rcvbuf, 0xFFFF << ws)
        free = max(0, cap - len(self._rx))
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

    def _ts_val(self, now: int) -> int:
        """Our TSval: a millisecond clock plus the per-connection offset (RFC 7323 §5.4)."""
        return (now // MS + self.tcb.ts_offset) & MASK32

    def _make(self, seq: int, flags: int, now: int, payload: bytes = b"") -> tcp.Repr:
        """A non-SYN segment with our window, timestamps and SACK blocks."""
        t = self.tcb
        ts = (self._ts_val(now), t.ts_recent) if t.ts_ok else None
        blocks: tuple[tuple[int, int], ...] = ()
        if flags & ACK:
            ack = t.rcv_nxt
            if t.sack_ok and (len(self._ofo) or self._dsack is not None):
                limit = 3 if t.ts_ok else 4  # RFC 2018 §3: 40 bytes of option space
                held = self._ofo.ranges()
                if self._dsack is not None:  # RFC 2883 §4: the D-SACK block goes first
                    blocks = (self._dsack,)
                    self._dsack = None
                    limit -= 1
                blocks += tuple((add(t.rcv_nxt, s), add(t.rcv_nxt, e))
                                for s, e in self._rx_blocks.blocks(held, limit))
            window = self._window_field()
            t.last_ack_sent = ack
            self._delack.ack_sent(self._rcv_unacked > 0)
            self._ack_now = False
            self._rcv_unacked = 0
            self.timers.delack_at = None
        else:
            ack, window = 0, 0
        if flags & RST:
            window, blocks = 0, ()
        # tcp.Repr(src_port=..., ..., timestamp=ts, sack_blocks=blocks) built as the tuple
        # it is: the NamedTuple's keyword __new__ costs about 1 us, once per segment
        return _new_tuple(tcp.Repr, (self.local_port, self.remote_port, seq & MASK32, ack,
                                     flags, window, payload, 0, None, None, False, blocks, ts,
                                     (), 0, None))

    def _emit(self, seg: tcp.Repr) -> None:
        self._out.append(seg)
        values = self.counters.values  # counters.add("TcpOutSegs"), inlined: every segment
        values["TcpOutSegs"] = values["TcpOutSegs"] + 1 if "TcpOutSegs" in values else 1


__all__ = ["Connection", "ListenAction", "choose_wscale", "listen_action", "reset_for",
           "seg_len"]
