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

The engine is a set of typed parts the Connection holds, as gVisor splits its endpoint:
``receiver`` (``Receiver``: receive queue, out-of-order queue, the window we offer, the
ACK owed; it holds ``delack`` and ``autotune``), ``sender`` (``Sender``: send queue,
PSH marks, Nagle, what goes out and what is retransmitted), ``loss`` (``LossRecovery``:
duplicate ACKs, the SACK scoreboard, NewReno/SACK recovery), ``timers`` (``Timers``:
deadlines, their back-off, what each does on expiry) and ``challenges``
(``ChallengeAcks``).  Each part is the only writer of its own fields; Connection runs
the state machine and calls them.  A part never holds the Connection (methods that
need it take it as an argument), so a connection has no reference cycle and is freed
by its reference count.

Concurrency: none.  A Connection is touched only by whoever holds its socket lock
(reference §5.1); the engine keeps no references to anything shared except the
``Counters`` object the caller passes in, which must not be shared across threads.
"""

from __future__ import annotations

import dataclasses
import errno as errnos

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp import congestion
from rcunet.core.tcp import state as states
from rcunet.core.tcp.accecn import EcnMode, synack_combine_saving
from rcunet.core.tcp.autotune import Autotune, expanded_sndbuf
from rcunet.core.tcp.buffers import SendQueue
from rcunet.core.tcp.challenge import ChallengeAcks
from rcunet.core.tcp.chrono import BUSY, SNDBUF_LIMITED, Chrono
from rcunet.core.tcp.common import (
    ABORT_SENDS_RST,
    ACK,
    CLOSE_WAIT,
    CLOSED,
    CLOSING,
    ESTABLISHED,
    FIN,
    FIN_WAIT_1,
    FIN_WAIT_2,
    LAST_ACK,
    LISTEN,
    MASK32,
    MD5_OPTION_LEN,
    MS,
    PAWS_IDLE_LIMIT,
    PAWS_WINDOW,
    PSH,
    RCV_MSS_HINT,
    RCV_MSS_MIN,
    RST,
    SYN,
    SYN_RECEIVED,
    SYN_SENT,
    TIME_WAIT,
    TS_OPTION_LEN,
    segment_repr,
    syn_repr,
)
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.delack import DELACK_MAX, PINGPONG_THRESH, DelayedAck
from rcunet.core.tcp.ecnstate import EcnState
from rcunet.core.tcp.events import (
    Closed,
    ConnectionFailed,
    DataReceived,
    Established,
    Event,
    ResetReceived,
    SendSpaceAvailable,
    TimeWaitEntered,
)
from rcunet.core.tcp.fastopen import OPT_EXP, ActiveOpen, syn_cookie
from rcunet.core.tcp.idle import current_ssthresh, idle_restart_due, restarted_cwnd
from rcunet.core.tcp.listen import (
    MAX_WSCALE,
    ListenAction,
    choose_wscale,
    listen_action,
    reset_for,
    seg_len,
)
from rcunet.core.tcp.options import Options
from rcunet.core.tcp.prr import CaState
from rcunet.core.tcp.receiver import Receiver
from rcunet.core.tcp.recovery import REORDERING, LossRecovery, Recovery
from rcunet.core.tcp.rto import RtoEstimator
from rcunet.core.tcp.sack import Scoreboard
from rcunet.core.tcp.sender import Sender
from rcunet.core.tcp.state import TRANSITIONS, State
from rcunet.core.tcp.stats import TrafficStats
from rcunet.core.tcp.tcb import Tcb
from rcunet.core.tcp.timers import Timers
from rcunet.core.tcp.timewait import TimeWait, reuse_iss
from rcunet.core.tcp.window import TS_OPTION_BYTES, initial_window
from rcunet.wire import tcp
from rcunet.wire.seqnum import add, ge, gt, le, lt, sub


def _no_data() -> BlockingIOError:
    """What recv() and peek() raise when nothing is readable yet."""
    return BlockingIOError(errnos.EAGAIN, "no data")


class Connection:
    """One TCP connection.  See the module docstring for how to drive it.

    Public state for the host: ``state``, ``tcb`` (RFC 9293 variables), ``timers``,
    ``local_port``/``remote_port``, ``counters``, ``error`` (pending errno or None).
    """

    # Slots with the GIL: slot loads and stores are the cheaper ones, and no connection
    # (two are built per tcp_crr transaction) grows a dict.  Free-threaded builds keep a
    # dict (``lockfree_read_slots``): a connection is driven by whichever thread holds its
    # socket lock - the receive path that made a child, then the thread that accepted it -
    # and there a slot read of a value another thread made takes the instance's lock on
    # every read.  The parts it holds (Receiver, Sender, LossRecovery, Timers, DelayedAck,
    # Autotune, ChallengeAcks) are driven the same way and use ``lockfree_read_slots``
    # too (Tcb keeps its dataclass slots, as before).
    __slots__ = lockfree_read_slots(
        "autotune", "cc", "challenges", "chrono", "stats", "counters", "delack", "ecn", "error",
        "fastopen_active", "fastopen_child", "local_addr", "local_port", "loss", "options",
        "passive", "quiet", "receiver", "remote_addr", "remote_port", "rto", "sender", "state",
        "syn_data_acked", "tcb", "timers", "write_pending",
        "_closed_reported", "_events", "_now", "_orphaned", "_out", "_peer_ws_offered",
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
        t.md5 = options.md5
        # Linux tcp_select_initial_window: the scale covers what the buffer may grow to.
        t.rcv_wscale = choose_wscale(options.window_space) if options.window_scaling else 0
        t.snd_mss = min(options.default_peer_mss, options.mss)
        t.rcv_mss = self._initial_rcv_mss()
        self.timers = Timers()
        self.rto = RtoEstimator(options.rto_initial, options.rto_min, options.rto_max)
        self.cc = self._new_congestion_control()
        self.chrono = Chrono()  # busy / rwnd- / sndbuf-limited time (TCP_INFO)
        self.stats = TrafficStats()  # segments and bytes each way (TCP_INFO)
        self.sender = Sender(t, self.timers, self.rto, self.counters, self.chrono)
        self.delack = DelayedAck(t, self.timers, self.rto, self.counters)  # Linux icsk_ack
        self.autotune = Autotune(t)  # receive-buffer autotuning and the window clamp
        self.receiver = Receiver(t, self.counters, self.delack, self.autotune,
                                 options.ofo_max_ranges)
        self._orphaned = False  # close() was called: nobody reads any more
        self.loss = LossRecovery(t, self.counters)  # SACK scoreboard, fast recovery
        self.challenges = ChallengeAcks(self.counters)
        self.ecn = EcnState(self.counters)  # ECN / AccECN feedback, negotiated by the handshake
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
        #: A passive Fast Open child (Linux tp->fastopen_rsk): it took the SYN's data,
        #: may send in SYN-RECEIVED, and a RST there is ECONNRESET (RFC 7413 §4.2).
        self.fastopen_child = False
        #: An active Fast Open (the SYN carried a Fast Open option or data), else None.
        self.fastopen_active: ActiveOpen | None = None
        #: The SYN's data was acknowledged by the SYN-ACK (Linux tp->syn_data_acked:
        #: TCP_INFO's TCPI_OPT_SYN_DATA).
        self.syn_data_acked = False
        #: Writers blocked until the handshake completes (Linux sk->sk_write_pending,
        #: counted by sk_stream_wait_connect): the host's socket is the only writer.
        self.write_pending = 0

    @staticmethod
    def connect(*, local_port: int, remote_port: int, iss: int, now: int,
                options: Options | None = None, ts_offset: int = 0,
                counters: Counters | None = None,
                ts_recent: tuple[int, int] | None = None,
                local_addr: bytes = b"", remote_addr: bytes = b"",
                syn_data: bytes = b"", fastopen_option: tuple[int, bytes] | None = None
                ) -> Connection:
        """Active OPEN (RFC 9293 §3.10.1): CLOSED -> SYN-SENT, SYN pending.

        ``ts_recent`` is (TS.Recent, stamp) inherited from a TIME-WAIT connection this one
        replaces (``reuse_timestamps()`` of the old one; Linux tcp_twsk_unique copies them), so
        PAWS rejects old duplicates of the previous incarnation.

        TCP Fast Open (RFC 7413, Linux tcp_send_syn_data): ``syn_data`` rides in the SYN
        (it is also the first bytes of the send queue) and ``fastopen_option`` (a cookie,
        or a cookie request) among its options.  A retransmitted SYN carries neither; data
        the SYN-ACK does not acknowledge is sent again once the connection is open.
        """
        conn = Connection(local_port=local_port, remote_port=remote_port, iss=iss,
                          options=options, ts_offset=ts_offset, counters=counters,
                          local_addr=local_addr, remote_addr=remote_addr)
        conn._now = now
        if ts_recent is not None:
            conn.tcb.ts_recent, conn.tcb.ts_recent_stamp = ts_recent
        conn.counters.add("TcpActiveOpens")
        conn._set_state(SYN_SENT)
        extra: tuple[tuple[int, bytes], ...] = ()
        if syn_data or fastopen_option is not None:
            conn.fastopen_active = ActiveOpen(
                option_sent=fastopen_option is not None,
                exp=fastopen_option is not None and fastopen_option[0] == OPT_EXP,
                data_len=len(syn_data))
            if fastopen_option is not None:
                extra = (fastopen_option,)
            if syn_data:
                conn.sender.queue_syn_data(bytes(syn_data))
        conn._send_syn(now, extra=extra, payload=bytes(syn_data))
        return conn

    @staticmethod
    def accept_syn(syn: tcp.Repr, *, iss: int, now: int, options: Options | None = None,
                   ts_offset: int = 0, counters: Counters | None = None,
                   local_addr: bytes = b"", remote_addr: bytes = b"", fastopen: bool = False,
                   synack_options: tuple[tuple[int, bytes], ...] = ()) -> Connection:
        """A listener took ``syn`` (``listen_action`` said SYN): SYN-RECEIVED, SYN,ACK pending.

        RFC 9293 §3.10.7.2 third check.  Without ``fastopen`` data carried by the SYN is
        dropped, as Linux does; the peer retransmits it.  With ``fastopen`` (the
        listener's Fast Open decision, ``fastopen.server_decision``) the connection is a
        Fast Open child (Linux tcp_fastopen_create_child): the SYN's data is queued for
        the application at once and the SYN,ACK acknowledges it (RFC 7413 §4.2.2).
        ``synack_options`` go into the first SYN,ACK only (a Fast Open cookie: Linux's
        request socket does not keep it for retransmissions).
        """
        if listen_action(syn) is not ListenAction.SYN:
            raise ValueError("accept_syn needs a SYN without ACK, RST or FIN")
        conn = Connection(local_port=syn.dst_port, remote_port=syn.src_port, iss=iss,
                          options=options, ts_offset=ts_offset, counters=counters,
                          passive=True, local_addr=local_addr, remote_addr=remote_addr)
        conn._now = now
        conn.stats.segment_in(0)  # tcp_create_openreq_child: segs_in 1 (the SYN)
        conn._take_peer_syn(syn, now)
        conn.ecn.answer(conn.options, syn)
        conn._set_state(SYN_RECEIVED)
        if fastopen:
            conn._take_syn_data(syn)
        conn._send_syn(now, extra=synack_options)
        return conn

    def _take_syn_data(self, syn: tcp.Repr) -> None:
        """tcp_fastopen_create_child: the SYN's payload joins the receive queue (a copy:
        the SYN's buffer goes back to its pool) and RCV.NXT moves past it."""
        self.fastopen_child = True
        data = bytes(syn.payload)
        if not data:
            return
        self.receiver.take_syn_data(self, data)
        self._events.append(DataReceived(len(data)))
        self.syn_data_acked = True

    @staticmethod
    def from_cookie(ack: tcp.Repr, *, mss: int, wscale: int | None, sack_ok: bool,
                    ts_ok: bool, now: int, options: Options | None = None, ts_offset: int = 0,
                    counters: Counters | None = None, local_addr: bytes = b"",
                    remote_addr: bytes = b"") -> Connection:
        """An ESTABLISHED connection rebuilt from a valid SYN-cookie ACK (RFC 4987 §3.6).

        ``mss``/``wscale``/``sack_ok``/``ts_ok`` are what ``syncookies.check`` decoded.
        The ACK itself is then processed like any segment (it may carry data).
        """
        conn = Connection(local_port=ack.dst_port, remote_port=ack.src_port,
                          iss=add(ack.ack, -1), options=options, ts_offset=ts_offset,
                          counters=counters, passive=True, local_addr=local_addr,
                          remote_addr=remote_addr)
        conn._now = now
        t = conn.tcb
        opts = conn.options
        t.irs = add(ack.seq, -1)
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
        t.first_window(conn._syn_window())  # what the SYN,ACK offered
        conn.receiver.offer_first_window(conn, conn._syn_window())
        t.snd_wl1 = add(ack.seq, -1)
        conn._set_state(ESTABLISHED)
        conn._on_established(now)
        conn.on_segment(ack, now)
        return conn

    def __repr__(self) -> str:
        t = self.tcb
        return (f"<Connection :{self.local_port}->:{self.remote_port} {self.state} "
                f"snd_una={t.snd_una} snd_nxt={t.snd_nxt} snd_wnd={t.snd_wnd} "
                f"rcv_nxt={t.rcv_nxt} rcv_wnd={t.rcv_wnd}>")

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
    def rcvbuf(self) -> int:
        """The receive buffer now (it grows with autotuning): what SO_RCVBUF reports."""
        return self.options.rcvbuf

    @property
    def scoreboard(self) -> Scoreboard:
        """The RFC 6675 scoreboard of what the peer SACKed (``loss`` keeps it)."""
        return self.loss.scoreboard

    @property
    def _recovery(self) -> Recovery | None:
        """The fast recovery in progress, or None (TCP_INFO's ca_state reads it)."""
        return self.loss.algorithm

    def _window_field(self) -> int:
        """The window field the next ACK carries (``Receiver.window_field``)."""
        return self.receiver.window_field(self)

    @property
    def _tx(self) -> SendQueue:
        """The send queue: unacknowledged and unsent bytes (``ss``'s Send-Q)."""
        return self.sender.tx

    @property
    def _retransmits(self) -> int:
        """Consecutive RTO expiries (TCP_INFO's retransmits)."""
        return self.timers.retransmits

    @property
    def _probes_out(self) -> int:
        """Unanswered zero-window probes (TCP_INFO's probes)."""
        return self.timers.probes_out

    @property
    def _last_rcv_at(self) -> int:
        """When the peer last sent data or an acceptable ACK (TCP_INFO's last_data_recv)."""
        return self.timers.last_rcv_at

    @property
    def _rcv_space(self) -> int:
        """Bytes read in the last measured round trip (TCP_INFO's rcv_space)."""
        return self.autotune.rcv_space

    @property
    def readable(self) -> int:
        """Bytes ``recv`` can return now."""
        return len(self.receiver.rx)

    @property
    def send_space(self) -> int:
        return self.sender.send_space(self.options)

    @property
    def notsent(self) -> int:
        """Bytes written and not yet sent (Linux write_seq - snd_nxt: our SND.MAX)."""
        return self.sender.notsent()

    @property
    def unacked(self) -> int:
        """Bytes in the send buffer (unsent and unacknowledged)."""
        return len(self.sender.tx)

    @property
    def write_seq(self) -> int:
        """The sequence number the next byte written will take (Linux ``tp->write_seq``)."""
        return self.sender.write_seq

    @property
    def una_seq(self) -> int:
        """The first data byte the peer has not acknowledged: every byte before it has
        left the send queue (``tcp_clean_rtx_queue``)."""
        return self.sender.tx_seq

    @property
    def at_eof(self) -> bool:
        """The peer's FIN has been received and every byte before it read."""
        return self.state.fin_received and not self.receiver.rx

    def recv(self, max_bytes: int, now: int) -> bytes:
        """Up to ``max_bytes`` in-order bytes; b"" at EOF.

        Raises BlockingIOError (EAGAIN) when nothing is readable yet, and the connection's
        error (ECONNRESET, ETIMEDOUT, ...) once, after any data that arrived before it.
        """
        data = self.try_recv(max_bytes, now)
        if data is None:
            raise _no_data()
        return data

    def try_recv(self, max_bytes: int, now: int) -> bytes | None:
        """``recv`` that answers None where it would raise EAGAIN: a reader that will
        wait (the host's blocking recv) asks without raising and catching an exception
        each time it finds nothing.  Nothing to collect then (``quiet``)."""
        self._now = now
        self.quiet = False
        if max_bytes < 0:
            raise OSError(errnos.EINVAL, "negative recv size")
        if self.receiver.rx and max_bytes:
            data = self.receiver.read(max_bytes)
            receiver = self.receiver
            rcvbuf = self.autotune.on_read(len(data), len(receiver.rx), receiver.ofo_extent(),
                                           receiver.scaling_ratio, self.options, now)
            if rcvbuf:  # the window, its update test and the backlog limit follow it
                self.options = self.options.with_rcvbuf(rcvbuf)
                self.receiver.rcvbuf_grown(rcvbuf)
            self.receiver.maybe_window_update(self, len(data))
            if self.receiver.ack_now:  # reading changes nothing on the send side: only an ACK
                self._output(now)
            else:
                self.quiet = True
            return data
        nothing = self._nothing_readable(max_bytes)
        self.quiet = nothing is None
        return nothing

    def peek(self, max_bytes: int) -> bytes:
        """recv() with MSG_PEEK: the same bytes, left in the receive queue (no window
        update, no ACK: nothing was consumed)."""
        if max_bytes < 0:
            raise OSError(errnos.EINVAL, "negative recv size")
        if self.receiver.rx and max_bytes:
            return self.receiver.rx.peek(max_bytes)
        data = self._nothing_readable(max_bytes)
        if data is None:
            raise _no_data()
        return data

    def _nothing_readable(self, max_bytes: int) -> bytes | None:
        """What a read finds with no data queued: the pending error (raised), EOF (b"")
        or None: nothing yet (EAGAIN)."""
        if max_bytes == 0:
            return b""
        self._raise_pending_error()
        if self.state.fin_received or self.state is CLOSED:
            return b""
        return None

    def shutdown_write(self, now: int) -> None:
        """SHUT_WR: send FIN after the queued data (RFC 9293 §3.10.4 CLOSE)."""
        self._now = now
        st = self.state
        if st is CLOSED:
            raise OSError(errnos.ENOTCONN, "not connected")
        if not self.sender.shut_down():
            return
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
        if self.receiver.rx:  # Linux looks at the receive queue only; out-of-order goes
            self.counters.add("TcpExtTCPAbortOnClose")
            self._abort(now)
            return
        self._orphaned = True
        self.receiver.drop_out_of_order()
        if not self.sender.fin_queued and st is not TIME_WAIT:
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

    def on_timer(self, now: int) -> None:
        """Run every deadline that is due (virtual time: call with ``next_deadline()``)."""
        self._now = now
        self.timers.fire(self, now)

    def _abort_timeout(self) -> None:
        """A timer gave up on the peer: nothing more will be sent (tcp_write_err)."""
        self.sender.discard()
        self._fail(errnos.ETIMEDOUT)

    def expire_fin_wait2(self, now: int) -> None:
        """End FIN-WAIT-2 now as its timeout would (tcp_fin_timeout's end in
        tcp_keepalive_timer: tcp_done, no segment): every byte and our FIN are
        acknowledged, so the peer has all it will get and a RST would only cost it its
        EOF.  Nothing happens in any other state."""
        self._now = now
        if self.state is FIN_WAIT_2:
            self.timers.fin_wait2_at = None
            self._enter_closed()

    def disconnect(self, now: int) -> None:
        """connect(AF_UNSPEC), Linux tcp_disconnect: drop the connection at once, with a
        RST in the states tcp_need_reset names (SYN-RECEIVED, ESTABLISHED, FIN-WAIT-1/2,
        CLOSE-WAIT); nothing is queued or readable afterwards."""
        self._now = now
        if self.state is not CLOSED:
            self._abort(now)

    def fail(self, err: int, now: int) -> None:
        """The connection dies with ``err`` and sends nothing (an ICMP error in
        SYN-RECEIVED of a Fast Open child: Linux tcp_v4_err sets sk_err and calls
        tcp_done; a fatal one for a child still a request: tcp_req_err drops it).
        Data already received stays readable; then ``err``."""
        self._now = now
        if self.state is not CLOSED:
            self._fail(err)

    def set_buffers(self, now: int, rcvbuf: int | None = None,
                    sndbuf: int | None = None) -> None:
        """SO_RCVBUF / SO_SNDBUF on a live connection: Linux's sock_setsockopt changes
        sk_rcvbuf / sk_sndbuf at once and stops their autotuning (SOCK_RCVBUF_LOCK,
        SOCK_SNDBUF_LOCK).  The window clamp stays as it is; the windows that follow are
        computed from the new buffer (and never shrink, tcp_select_window)."""
        self._now = now
        changes: dict[str, int] = {}
        if rcvbuf is not None:
            changes.update(rcvbuf=rcvbuf, rcvbuf_max=0)
        if sndbuf is not None:
            changes.update(sndbuf=sndbuf, sndbuf_max=0)
        self.options = dataclasses.replace(self.options, **changes)  # type: ignore[arg-type]

    def update_options(self, now: int, push: bool = False, **changes: object) -> None:
        """setsockopt(): TCP_NODELAY, SO_KEEPALIVE, TCP_KEEPIDLE/INTVL/CNT, timeouts...

        Takes effect at once: turning Nagle off flushes held data (Linux does the same in
        tcp_push_pending_frames), turning keep-alive on arms its timer.  Buffer sizes,
        MSS and the congestion algorithm are fixed once the connection exists.
        ``push``: the caller set TCP_NODELAY (again), which pushes the tail once past
        TCP_CORK and Nagle, as Linux's __tcp_sock_set_nodelay does.
        """
        fixed = {"mss", "rcvbuf", "sndbuf", "window_scaling", "timestamps", "sack",
                 "congestion_control", "initial_cwnd", "ofo_max_ranges"} & changes.keys()
        if fixed:
            raise OSError(errnos.EINVAL, f"cannot change {sorted(fixed)} on a live connection")
        self._now = now
        old = self.options
        new = dataclasses.replace(old, **changes)  # type: ignore[arg-type]
        new.validate()
        self.options = new
        # TCP_RTO_MIN_US, TCP_RTO_MAX_MS: the estimator reads its bounds at the next
        # sample or backoff, as Linux reads icsk_rto_min / icsk_rto_max there
        self.rto.rto_min, self.rto.rto_max = new.rto_min, new.rto_max
        if new.keepalive and self.state.synchronized:
            # SO_KEEPALIVE / TCP_KEEPIDLE restart the keepalive timer a full idle time
            # from now (Linux tcp_set_keepalive -> inet_csk_reset_keepalive_timer)
            self.timers.keepalive_at = now + new.keepalive_time
        elif not new.keepalive:
            self.timers.keepalive_at = None
        # Setting TCP_NODELAY, or clearing TCP_CORK with it set, pushes the tail once past
        # the cork as well (__tcp_sock_set_nodelay, __tcp_sock_set_cork: TCP_NAGLE_PUSH)
        self.sender.push_pass(self, now, new.nodelay and (push or not old.nodelay
                                                         or (old.cork and not new.cork)))

    def send(self, data: bytes | bytearray | memoryview, now: int,
             skb_ends: tuple[int, ...] = (), more: bool = False, eor: bool = False) -> int:
        """Queue ``data``; return how many bytes the send buffer took (0 when full).
        ``skb_ends``: offsets into ``data`` where an skb ends (no segment crosses one;
        0 ends the skb the bytes before ``data`` are in); those past what was taken are
        dropped.  ``more`` is MSG_MORE: this write's partial tail waits for more
        (tcp_push with TCP_NAGLE_CORK) and gets no PSH; ``eor`` is MSG_EOR: the write
        ends a record, which no later write's bytes join in a segment (Linux
        tcp_skb_can_collapse_to).  Both apply only when every byte was taken (Linux sets
        them on the last skb)."""
        self._now = now
        self.quiet = False
        self._raise_pending_error()
        return self.sender.write(self, data, now, skb_ends, more, eor)

    def slow_start_after_idle_check(self, now: int) -> None:
        """tcp_slow_start_after_idle_check, as a write queues new data: after more than
        an RTO idle with nothing in flight, tcp_cwnd_restart (rcunet.core.tcp.idle)."""
        t, cc = self.tcb, self.cc
        last = self.stats.last_data_sent_at
        rto = self.rto.rto
        if last is None or not idle_restart_due(
                enabled=self.options.slow_start_after_idle, in_flight=t.snd_max != t.snd_una,
                last_data_sent_at=last, now=now, rto=rto):
            return
        mss = cc.mss
        cwnd = cc.cwnd // mss
        reducing = self.loss.ca_state() in (CaState.CWR, CaState.RECOVERY)
        ssthresh = current_ssthresh(cwnd, cc.ssthresh // mss, reducing)
        if ssthresh > cc.ssthresh // mss:  # else unchanged (and "infinite" stays so)
            cc.ssthresh = ssthresh * mss
        cc.set_cwnd(restarted_cwnd(cwnd, self.options.initial_cwnd, now - last, rto) * mss)

    def _abort(self, now: int) -> None:
        if self.state in ABORT_SENDS_RST:
            self._emit(self._make(self._acceptable_seq(), RST | ACK, now))
            self.counters.add("TcpOutRsts")
        self.sender.discard()
        self.receiver.discard()
        self._enter_closed()

    def _abort_on_data(self, seg: tcp.Repr) -> None:
        """New data after close() (Linux tcp_rcv_state_process, TCPAbortOnData):
        tcp_reset ends the connection and its caller answers the segment as if no
        socket matched it (tcp_v4_send_reset: <SEQ=SEG.ACK><CTL=RST>), not with a
        reset from our own sequence space."""
        self.counters.add("TcpExtTCPAbortOnData")
        rst = reset_for(seg)
        if rst is not None:
            self._emit(rst)
            self.counters.add("TcpOutRsts")
        self.sender.discard()
        self.receiver.discard()
        self._enter_closed()

    def time_wait_accepts_syn(self, syn: tcp.Repr) -> bool:
        """May this SYN open a new incarnation while we sit in TIME-WAIT?  The rule is
        ``TimeWait.accepts_syn`` (``core/tcp/timewait.py``), the one the host runs; the
        host then starts the new connection with ``reuse_iss()`` and retires this one."""
        return self.state is TIME_WAIT and TimeWait.of(self).accepts_syn(syn)

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
        """ISS for a connection replacing this TIME-WAIT one (``timewait.reuse_iss``)."""
        return reuse_iss(self.tcb.snd_nxt)

    def _set_state(self, new: State) -> None:
        old = self.state
        if (old, new) not in TRANSITIONS:
            raise AssertionError(f"TCP transition {old} -> {new} is not in the table")
        self.state = new
        for probe in states.TRANSITION_PROBES:  # one global load: the tuple attached now
            probe(old, new)

    def _on_established(self, now: int) -> None:
        t = self.tcb
        self.timers.established(now)
        self.loss.end_rto_episode(now)  # a handshake that timed out is through
        self.loss.handshake_delivered()
        if self.timers.syn_retransmitted:
            if self.rto.srtt is None:
                # RFC 6298 §5.7: no valid sample and the SYN was retransmitted
                self.rto.base_rto = max(self.rto.base_rto, self.options.rto_fallback)
            self.rto.backoff = 0
            self.cc.set_loss_window()  # RFC 5681 §3.1: IW = 1 segment after a lost SYN
        if self.passive:
            self.counters.add("TcpPassiveOpens")
        if self.options.keepalive:
            self.timers.keepalive_at = now + self.options.keepalive_time
        o = self.options
        sndbuf = expanded_sndbuf(o, t, self.cc.cwnd)
        if sndbuf:
            self.options = o = o.with_sndbuf(sndbuf)
        self.autotune.start(now, self.receiver.init_buffer_space(self))
        self._events.append(Established())
        if self.sender.fin_queued:
            self._set_state(FIN_WAIT_1)
        if self.fastopen_active is not None and not lt(t.snd_max, t.snd_una):
            # SYN data the SYN-ACK did not acknowledge is retransmitted, not new data
            # (tcp_rcv_fastopen_synack: tcp_mark_skb_lost, tcp_non_congestion_loss_retransmit):
            # no Nagle, no SWS wait for its tail
            t.snd_nxt = t.snd_una
        elif not self.fastopen_child:  # a Fast Open child may have data in flight
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
        self.receiver.drop_out_of_order()
        if not self._closed_reported:
            self._closed_reported = True
            self._events.append(Closed())

    def _fail(self, err: int) -> None:
        self.error = err
        self.sender.discard()
        self._events.append(ConnectionFailed(err))
        self._enter_closed()

    def _raise_pending_error(self) -> None:
        err = self.error
        if err is not None:
            self.error = None
            raise OSError(err, errnos.errorcode.get(err, "error"))

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
        t.sack_ok = o.sack and seg.sack_permitted
        # tcp_synack_options: MD5, timestamps and SACK blocks do not fit one segment;
        # a keyed SYN,ACK keeps SACK and drops the timestamps ("ireq->tstamp_ok &=
        # !ireq->sack_ok")
        t.ts_ok = o.timestamps and seg.timestamp is not None and not (
            self.passive and t.md5 and t.sack_ok)
        if t.ts_ok and seg.timestamp is not None:
            t.ts_recent, t.ts_recent_stamp = seg.timestamp[0], now
        self._peer_ws_offered = seg.window_scale is not None
        peer_mss = seg.mss if seg.mss is not None else o.default_peer_mss
        self._set_mss(peer_mss)
        t.snd_wnd = seg.window  # RFC 7323 §2.2: the SYN's window is never scaled
        t.max_snd_wnd = max(t.max_snd_wnd, t.snd_wnd)
        t.snd_wl1 = seg.seq
        t.first_window(self._syn_window())
        self.receiver.offer_first_window(self, self._syn_window())

    def _set_mss(self, peer_mss: int) -> None:
        """Effective send MSS (RFC 9293 §3.7.1), minus the timestamp option Linux reserves."""
        t = self.tcb
        o = self.options
        mss = min(max(peer_mss, o.min_snd_mss), o.path_mss or o.mss)
        if t.ts_ok:
            mss -= TS_OPTION_LEN
        if t.md5:
            mss -= MD5_OPTION_LEN  # tcp_mtu_to_mss: tcp_header_len counts the option
        t.snd_mss = max(mss, 1)
        t.rcv_mss = self._initial_rcv_mss()
        self.cc = self._new_congestion_control()

    def _new_congestion_control(self) -> congestion.CongestionControl:
        """The options' algorithm at the current send MSS, counting into the
        connection's counters."""
        o = self.options
        return congestion.create(o.congestion_control, self.tcb.snd_mss, o.initial_cwnd,
                                 o.cubic, self.counters)

    def _reserve_option_space(self) -> None:
        """The AccECN option rides on our segments from now on: the send MSS leaves room
        for it, as Linux's tcp_current_mss does for every established option."""
        t = self.tcb
        space = self.ecn.option_space(self.options, t.ts_ok)
        if space:
            t.snd_mss = max(t.snd_mss - space, 1)
            self.cc.set_mss(t.snd_mss)

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
        mss = path_mss - (TS_OPTION_LEN if t.ts_ok else 0) - (
            MD5_OPTION_LEN if t.md5 else 0)  # tcp_mtu_to_mss
        mss = max(mss, self.options.min_snd_mss)
        fo = self.fastopen_active
        if self.state is SYN_SENT and fo is not None and fo.data_len > mss:
            # tcp_simple_retransmit: the SYN's data no longer fits the path.  The SYN goes
            # again at once, without data, advertising the path's MSS (tcp_advertise_mss:
            # the route's advmss is lowered with its MTU); the data follows the handshake.
            self._now = now
            self.options = dataclasses.replace(self.options, mss=max(path_mss, 88))
            t.snd_mss = min(t.snd_mss, mss)
            self.counters.add("TcpRetransSegs")  # not a timeout: no backoff, cwnd stays
            self._send_syn(now, retransmit=True)
            return True
        if mss >= t.snd_mss:
            return False
        t.snd_mss = mss
        if self.state is SYN_SENT:
            return True
        if t.snd_una == t.snd_max:
            return True
        self._now = now
        # tcp_simple_retransmit: everything in flight was sized for the old path; go back to
        # snd_una without a congestion response.  Duplicate ACKs for the old flight must not
        # start a fast retransmit (RFC 6582 §3.2 step 4, as after a timeout).
        self.loss.on_path_shrunk()
        self.sender.stop_rtt_timing()  # Karn
        t.snd_nxt = t.snd_una
        end = self.sender.retransmit_at(self, t.snd_una, now)
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
        """The window field of our SYN or SYN,ACK (never scaled, RFC 7323 §2.2)."""
        return min(self._first_window(), 0xFFFF)

    def _first_window(self) -> int:
        """tcp_select_initial_window's rcv_wnd (rcunet.core.tcp.window): half the buffer,
        rounded down to our MSS -- in a SYN,ACK less the timestamp option when the peer's
        SYN carried one (tcp_openreq_init_rwin), in a SYN the MSS itself (tcp_connect_init)."""
        o = self.options
        mss = o.mss - TS_OPTION_BYTES if self.passive and self.tcb.ts_ok else o.mss
        return initial_window(o.rcvbuf, o.window_clamp, mss)

    def _send_syn(self, now: int, retransmit: bool = False, rearm: bool = True,
                  extra: tuple[tuple[int, bytes], ...] = (), payload: bytes = b"",
                  timed_out: bool = False) -> None:
        """SYN (SYN-SENT) or SYN,ACK (SYN-RECEIVED) with our options (and ``extra``
        ones after them: a Fast Open cookie).  ``timed_out``: the retransmission timer
        sends it, its expiry already counted in ``timers.retransmits``."""
        t = self.tcb
        o = self.options
        is_synack = self.state is SYN_RECEIVED
        flags = SYN | (ACK if is_synack else 0)
        if is_synack:
            timeouts = self.timers.retransmits - (1 if timed_out else 0)
            flags |= self.ecn.synack(retransmit, timeouts)
        else:
            flags |= self.ecn.syn(o, self.timers.retransmits if retransmit else 0)
        # In a SYN,ACK, offer only what the peer's SYN offered (RFC 7323 §2.2, §3.2; 2018 §2).
        if is_synack:
            wscale = t.rcv_wscale if (o.window_scaling and self._peer_ws_offered) else None
            sack_permitted = t.sack_ok
            ts = (self.tcb.ts_val(now), t.ts_recent) if t.ts_ok else None
        else:
            wscale = t.rcv_wscale if o.window_scaling else None
            sack_permitted = o.sack
            # Linux tcp_syn_options echoes TS.Recent: 0, or what TIME-WAIT reuse
            # inherited; a keyed SYN offers no timestamps (the MD5 option takes the room)
            ts = (self.tcb.ts_val(now), t.ts_recent) if o.timestamps and not t.md5 else None
        if t.md5 and extra:
            extra = _fitting(extra, MD5_OPTION_LEN + 4 + (4 if wscale is not None else 0)
                             + (12 if ts is not None else 4 if sack_permitted else 0))
        if is_synack and self.ecn.mode is EcnMode.ACCECN:
            extra = self._synack_accecn_option(o, wscale, sack_permitted, ts, extra,
                                               retransmit)
        seg = syn_repr(self.local_port, self.remote_port, t.iss, t.rcv_nxt if is_synack else 0,
                       flags, self._syn_window(), payload, o.mss, wscale, sack_permitted, ts,
                       extra)
        if is_synack:
            t.last_ack_sent = t.rcv_nxt
        self._emit(seg)
        if not retransmit:
            self.timers.syn_sent(now)
        if not (retransmit and self.fastopen_child or (retransmit or is_synack)
                and self.fastopen_active is not None):
            # (a Fast Open child retransmits only its SYN,ACK: data it sent in
            # SYN-RECEIVED stays in flight, tcp_fastopen_synack_timer; a Fast Open
            # client's SYN data stays in flight behind a data-less SYN, retransmitted
            # or turned into the SYN,ACK of a simultaneous open, tcp_send_synack)
            t.snd_nxt = t.snd_max = add(t.iss, 1 + len(payload))
        if rearm or self.timers.rto_at is None:
            self.timers.rto_at = now + self.rto.rto

    def _synack_accecn_option(self, o: Options, wscale: int | None, sack_permitted: bool,
                              ts: tuple[int, int] | None,
                              extra: tuple[tuple[int, bytes], ...], retransmit: bool
                              ) -> tuple[tuple[int, bytes], ...]:
        """``extra`` with an AccECN SYN-ACK's option in front, sized to the room the
        other options leave (tcp_synack_options with tcp_options_fit_accecn)."""
        used = 4 + (4 if wscale is not None else 0) + (
            12 if ts is not None else 4 if sack_permitted else 0) + (
            MD5_OPTION_LEN if self.tcb.md5 else 0)
        used += sum((2 + len(data) + 3) & ~3 for _kind, data in extra)
        saving = synack_combine_saving(sack_permitted, ts is not None, wscale is not None)
        return self.ecn.synack_option(o, used, saving, retransmit) + extra

    # ------------------------------------------------ segment arrival (RFC 9293 §3.10.7)
    def on_segment(self, seg: tcp.Repr, now: int) -> None:
        """Process one segment addressed to this connection (RFC 9293 §3.10.7)."""
        self._now = now
        self.counters.add("TcpInSegs")
        if seg.checksum_ok is False:
            self.counters.add("TcpInErrs")
            self.counters.add("TcpInCsumErrors")
            return
        self.stats.segment_in(len(seg.payload))
        st = self.state
        if st is ESTABLISHED and self.options.header_prediction and self._fast_path(seg, now):
            self._output(now)  # header prediction took it: no walk of the state machine
            self._check_space(now)
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
        self._check_space(now)

    def _check_space(self, now: int) -> None:
        """tcp_check_space (tcp_data_snd_check, once the segment's ACK freed space and
        what it let out was sent): with SOCK_NOSPACE set, tcp_new_space first grows the
        buffer for the current cwnd unless SO_SNDBUF fixed it or cwnd is full
        (tcp_should_expand_sndbuf, tcp_sndbuf_expand), then wakes a writer waiting for
        buffer space when the socket is writable again (sk_stream_write_space), which
        ends the sndbuf-limited time."""
        sender = self.sender
        if not sender.nospace:
            return  # no writer waits and poll did not ask: the common case, per segment
        t = self.tcb
        if sub(t.snd_max, t.snd_una) < self.cc.cwnd:  # tcp_should_expand_sndbuf
            sndbuf = expanded_sndbuf(self.options, t, self.cc.cwnd)
            if sndbuf:
                self.options = self.options.with_sndbuf(sndbuf)
        space = sender.write_space(self.options)
        if space:
            self._events.append(SendSpaceAvailable(space))
            self.chrono.stop(SNDBUF_LIMITED, now, self.sender.queues_empty())

    def writeable(self) -> bool:
        """tcp_poll's EPOLLOUT in ESTABLISHED and CLOSE_WAIT (__sk_stream_is_writeable
        with wake): a third of the send buffer free and the unsent bytes below half
        TCP_NOTSENT_LOWAT."""
        return self.sender.is_writeable(self.options)

    def poll_nospace(self) -> None:
        """tcp_poll found the socket unwritable: SOCK_NOSPACE, so the next
        sk_stream_write_space wakes the poller."""
        self.sender.note_nospace()

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

        Counted as Linux counts it: TcpExtTCPHPAcks when it took a new ACK, TcpExtTCPHPHits
        when it delivered data.  ``Options.header_prediction=False`` turns it off.
        """
        t = self.tcb
        flags = seg.flags
        if flags & ~PSH != ACK or seg.seq != t.rcv_nxt or seg.sack_blocks:
            return False
        ack = seg.ack
        new_ack = ack != t.snd_una
        payload = seg.payload
        if ((not new_ack and not payload) or not self.loss.idle()
                or self.ecn.mode is EcnMode.ACCECN  # every ACK's ACE and option are read
                or self.receiver.fin_offset is not None or self._orphaned or len(self.receiver.ofo)
                or self.sender.fin_queued):
            return False
        if new_ack and not (lt(t.snd_una, ack) and le(ack, t.snd_max)):
            return False
        ts = seg.timestamp
        if t.ts_ok and (ts is None or lt(ts[0], t.ts_recent)):
            return False
        if payload and len(payload) > t.rcv_wnd:
            return False
        self.timers.heard_from_peer(now)
        self._update_send_window(seg)  # SND.UNA =< SEG.ACK: checked above
        if new_ack:
            acked = sub(ack, t.snd_una)
            self._ack_advance(seg, now)
            self.sender.grow_cwnd(self, acked, now)
            self.counters.add("TcpExtTCPHPAcks")  # Linux tcp_ack without FLAG_SLOWPATH
        if ts is not None:
            self._update_ts_recent(seg, now)
        if payload:
            if self.ecn.mode is not EcnMode.DISABLED:
                self._ecn_input(seg)
            data = memoryview(payload)
            self.receiver.measure_rcv_mss(self, len(data))
            self.autotune.rtt_measure(seg, len(data), now)
            self.receiver.deliver_in_order(self, data, bool(flags & PSH), now)
            self.counters.add("TcpExtTCPHPHits")  # tcp_rcv_established's bulk receiver
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
        if (not flags & ACK and t.ts_recent_stamp is not None and seg.timestamp is not None
                and self._paws_reject(seg, now)):
            # PAWS against a TS.Recent inherited from TIME-WAIT: Linux
            # tcp_rcv_synsent_state_process checks it for a bare SYN only (simultaneous
            # open); a SYN,ACK's TSecr was validated above, its TSval is the new peer's.
            return
        self._take_peer_syn(seg, now)
        if flags & ACK:
            self.ecn.on_synack(seg, self.options)
            self._reserve_option_space()
            self._rtt_sample_handshake(seg, now)
            if self.fastopen_active is not None:
                self._fastopen_synack(seg)
            # tcp_ack's tcp_snd_una_update: the SYN (and SYN data) count as acknowledged
            self.stats.bytes_acked += sub(seg.ack, t.snd_una)
            t.snd_una = seg.ack
            self._set_state(ESTABLISHED)
            self._on_established(now)
            # whether to save the ACK is decided before the SYN-ACK's own text: Linux
            # decides after tcp_fastopen_add_skb, whose FIN enters pingpong mode, but its
            # reader then ACKs the data at once (rcv_nxt - rcv_wup > rcv_mss)
            save_ack = self._saves_synack_ack()
            self.receiver.process_text_and_fin(self, seg, add(seg.seq, 1), now)
            if self.state is not CLOSED:
                self._ack_synack(save_ack, now)
        else:
            # Simultaneous open: "enter SYN-RECEIVED, form a SYN,ACK segment and send it".
            # Text in the SYN is dropped (the peer retransmits it once synchronized).
            self.ecn.on_crossed_syn(seg)
            self._set_state(SYN_RECEIVED)
            self._send_syn(now)

    def _saves_synack_ack(self) -> bool:
        """tcp_rcv_synsent_state_process saves the SYN-ACK's ACK when a writer is
        blocked on the handshake (sk_write_pending) or the connection is interactive
        (inet_csk_in_pingpong_mode)."""
        return bool(self.write_pending) or self.delack.pingpong >= PINGPONG_THRESH

    def _ack_synack(self, save_ack: bool, now: int) -> None:
        """How tcp_rcv_synsent_state_process acknowledges the SYN-ACK.  A saved ACK
        (``save_ack``) is scheduled in quick-ack mode with the timer at TCP_DELACK_MAX,
        and the data about to go carries it (its send counts as a reply for pingpong).
        Otherwise the ACK goes at once, even when the SYN-ACK carried data (and a FIN)
        that would wait for the delayed-ACK timer (tcp_fastopen_add_skb)."""
        delack = self.delack
        delack.lrcvtime = now  # tcp_finish_connect
        if save_ack:
            delack.schedule()
            delack.enter_quickack_mode(self.options)
            self.timers.delack_at = now + DELACK_MAX
            return
        self.receiver.ack_at_once()

    def _fastopen_synack(self, seg: tcp.Repr) -> None:
        """Linux tcp_rcv_fastopen_synack: note the SYN-ACK's cookie (only if we sent the
        option) and MSS for the host's cookie cache, and take the SYN data it
        acknowledged off the send queue; the rest goes again once the connection is
        open (tcp_non_congestion_loss_retransmit)."""
        fo = self.fastopen_active
        assert fo is not None
        t = self.tcb
        fo.answered = True
        fo.peer_mss = seg.mss
        fo.retransmitted = self.timers.syn_retransmitted
        found = syn_cookie(seg.unknown_options) if fo.option_sent else None
        fo.cookie = found if found is not None and found.value else None
        acked = min(max(sub(seg.ack, add(t.iss, 1)), 0), fo.data_len)
        fo.data_acked = acked
        self.sender.syn_data_acked(acked)
        if fo.data_len:
            if acked == fo.data_len:
                self.syn_data_acked = True
                self.counters.add("TcpExtTCPFastOpenActive")
            else:
                self.counters.add("TcpExtTCPFastOpenActiveFail")

    def _synack_tsecr_invalid(self, seg: tcp.Repr, now: int) -> bool:
        """TSecr of a SYN,ACK must echo a TSval we sent since our first SYN."""
        if not self.options.timestamps or seg.timestamp is None or not seg.timestamp[1]:
            return False
        sent_at = self.timers.syn_sent_at
        first = self.tcb.ts_val(sent_at if sent_at is not None else now)
        tsecr = seg.timestamp[1]
        return not (ge(tsecr, first) and le(tsecr, self.tcb.ts_val(now)))

    def _input_synchronized(self, seg: tcp.Repr, now: int) -> None:
        """RFC 9293 §3.10.7.4: SYN-RECEIVED and every synchronized state."""
        t = self.tcb
        flags = seg.flags
        length = seg_len(seg)
        # RFC 7323 §5.3 R1: PAWS, before the sequence check.
        if (t.ts_ok and seg.timestamp is not None and not flags & RST
                and self._paws_discard(seg, now)):
            self.counters.add("TcpExtPAWSEstab")
            if self.challenges.dupack(self.options, seg, now, "TcpExtTCPACKSkippedPAWS"):
                self.receiver.ack_at_once()
            return
        if flags & (SYN | ACK) == SYN | ACK and not self.passive \
                and self.ecn.mode is EcnMode.ACCECN:
            self.ecn.on_repeated_synack(seg)
        repeated_syn = self._is_simultaneous_open_synack(seg)
        if repeated_syn:
            # Linux tcp_validate_incoming: in a simultaneous open the peer's SYN,ACK
            # repeats its SYN (not acceptable by the §3.10.7.4 table) but its ACK
            # completes the handshake; take the ACK, skip the challenge.
            seg = seg._replace(seq=add(seg.seq, 1), flags=flags & ~SYN)
            flags, length = seg.flags, seg_len(seg)
        if self.state is SYN_RECEIVED and flags & (SYN | ACK) == SYN and seg.seq == t.irs:
            # The peer retransmitted its SYN: so do we, rate limited (Linux tcp_check_req).
            if not self.challenges.rate_limited(self.options, now, "TcpExtTCPACKSkippedSynRecv"):
                self.ecn.on_repeated_syn(seg)
                self._send_syn(now, retransmit=True, rearm=False)
            return
        # first: sequence number check
        if not self.receiver.acceptable(self, seg.seq, length):
            if not flags & (RST | SYN) and self.receiver.after_window(seg.seq):
                self.counters.add("TcpExtBeyondWindow")  # tcp_sequence: INVALID_SEQUENCE
            if flags & RST:
                if self._rst_after_fin(seg):
                    self._on_reset()
                return  # "If the RST bit is set ... drop the segment and return"
            if flags & FIN and self.state is TIME_WAIT:
                # RFC 9293 §3.10.7.4 TIME-WAIT: a retransmitted FIN is ACKed and restarts 2MSL.
                self.timers.time_wait_at = now + self.options.time_wait_timeout
            if flags & SYN:
                # RFC 5961 §4.2, whatever the seq
                if self.challenges.challenge(self.options, now, syn=True):
                    self.receiver.ack_at_once()
                return
            if seg.payload and lt(seg.seq, t.rcv_nxt):
                # old data: our ACK was lost; D-SACK it and ACK quickly (tcp_send_dupack)
                self.delack.enter_quickack_mode(self.options)
                end = add(seg.seq, len(seg.payload))
                self.receiver.note_dsack(seg.seq, end if lt(end, t.rcv_nxt) else t.rcv_nxt)
            if self.challenges.dupack(self.options, seg, now, "TcpExtTCPACKSkippedSeq"):
                self.receiver.ack_at_once()
            return
        if self.receiver.end_beyond_window(seg, length):
            # Linux tcp_sequence (INVALID_END_SEQUENCE): a segment whose end passes the
            # window is dropped whole, ACK included, unless the receive queue is empty.
            if not flags & RST:
                if flags & SYN:
                    if self.challenges.challenge(self.options, now, syn=True):
                        self.receiver.ack_at_once()
                    return
                self.counters.add("TcpExtBeyondWindow")
                if self.challenges.dupack(self.options, seg, now, "TcpExtTCPACKSkippedSeq"):
                    self.receiver.ack_at_once()
            return
        # second: RST (RFC 5961 §3.2)
        if flags & RST:
            if seg.seq == t.rcv_nxt:
                self._on_reset()
            else:
                if self.challenges.challenge(self.options, now):
                    self.receiver.ack_at_once()
            return
        # fourth: SYN (RFC 5961 §4.2)
        if flags & SYN:
            if self.challenges.challenge(self.options, now, syn=True):
                self.receiver.ack_at_once()
            return
        # fifth: ACK
        if not flags & ACK:
            return
        self.timers.heard_from_peer(now)
        if self.state is SYN_RECEIVED:
            if not (lt(t.snd_una, seg.ack) and le(seg.ack, t.snd_max)):
                self._emit(tcp.Repr(src_port=self.local_port, dst_port=self.remote_port,
                                    seq=seg.ack, ack=0, flags=RST, window=0))
                self.counters.add("TcpOutRsts")
                return
            self._rtt_sample_handshake(seg, now)
            if self.fastopen_child and gt(seg.ack, add(t.iss, 1)):
                # it also acknowledges data a Fast Open child sent in SYN-RECEIVED
                t.snd_una = add(t.iss, 1)
                self._ack_advance(seg, now)
            t.snd_una = seg.ack
            t.snd_wnd = seg.window << t.snd_wscale
            t.max_snd_wnd = max(t.max_snd_wnd, t.snd_wnd)
            t.snd_wl1 = seg.seq
            self.ecn.on_third_ack(seg, self.options)
            self._reserve_option_space()
            self._set_state(ESTABLISHED)
            self._on_established(now)
            if repeated_syn:
                self._dsack_repeated_syn(seg)
        elif not self._process_ack(seg, now):
            return
        if self.state is CLOSED:
            return
        self._update_ts_recent(seg, now)
        if self.ecn.mode is not EcnMode.DISABLED:
            self._ecn_input(seg)
        # sixth (URG) is not implemented: urgent data is delivered inline, as RFC 6093 advises.
        self.receiver.process_text_and_fin(self, seg, seg.seq, now)

    def _dsack_repeated_syn(self, seg: tcp.Repr) -> None:
        """The SYN a simultaneous open's SYN,ACK repeats is a duplicate of one sequence
        number below RCV.NXT: Linux's tcp_data_queue takes it as a retransmission
        (its end_seq counts the SYN), D-SACKs it and ACKs at once in quickack mode.
        ``seg`` is the segment with its SYN already stepped over."""
        self.delack.enter_quickack_mode(self.options)
        syn_seq = add(seg.seq, -1)
        self.receiver.note_dsack(syn_seq, seg.seq)

    def _ecn_input(self, seg: tcp.Repr) -> None:
        """The data receiver's side of ECN for an acceptable segment: a first CE mark, the
        peer's CWR or a change of ECN field ACKs quickly (tcp_enter_quickack_mode(sk, 2)
        in tcp_data_ecn_check; ICSK_ACK_NOW in tcp_ecn_accept_cwr)."""
        if self.ecn.on_segment(seg):
            self.delack.enter_quickack_mode(self.options, 2)
            self.receiver.ack_at_once()

    def _rst_after_fin(self, seg: tcp.Repr) -> bool:
        """Linux tcp_reset_check: once the peer's FIN is in, a RST at RCV.NXT-1 counts too."""
        return (self.state in (CLOSE_WAIT, CLOSING, LAST_ACK)
                and seg.seq == add(self.tcb.rcv_nxt, -1))

    def _is_simultaneous_open_synack(self, seg: tcp.Repr) -> bool:
        t = self.tcb
        return (self.state is SYN_RECEIVED and not self.passive
                and seg.flags & (SYN | ACK | RST | FIN) == SYN | ACK and not seg.payload
                and add(seg.seq, 1) == t.rcv_nxt and seg.ack == t.snd_nxt)

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

    def _ts_progress(self, seg: tcp.Repr) -> bool:
        """Would this segment move TS.Recent forward (Linux tcp_replace_ts_recent's
        FLAG_TS_PROGRESS)?  Proof the ACK is new even when it ACKs and SACKs nothing."""
        t = self.tcb
        ts = seg.timestamp
        return (ts is not None and t.ts_ok and gt(ts[0], t.ts_recent)
                and le(seg.seq, t.last_ack_sent))

    def _update_ts_recent(self, seg: tcp.Repr, now: int) -> None:
        """RFC 7323 §4.3 (2): TSval >= TS.Recent and SEG.SEQ =< Last.ACK.sent.

        Done only once the segment passed the RST, SYN and ACK checks, as Linux does
        (tcp_replace_ts_recent), so a rejected segment cannot move TS.Recent.
        """
        t = self.tcb
        ts = seg.timestamp
        if ts is None or not t.ts_ok:
            return
        tsval, seq, last, recent = ts[0], seg.seq, t.last_ack_sent, t.ts_recent
        if ge(tsval, recent) and le(seq, last):
            t.ts_recent, t.ts_recent_stamp = tsval, now

    def _on_reset(self) -> None:
        """An acceptable RST: errno by state as Linux's tcp_reset."""
        st = self.state
        self._events.append(ResetReceived())
        if st in (ESTABLISHED, CLOSE_WAIT):
            self.counters.add("TcpEstabResets")
        if st is SYN_RECEIVED and self.passive and not self.fastopen_child:
            self._enter_closed()  # RFC 9293: "return this connection to LISTEN"
        elif st is SYN_RECEIVED and not self.fastopen_child:
            self._fail(errnos.ECONNREFUSED)  # an active open (simultaneous)
        elif st is CLOSE_WAIT:
            self._fail(errnos.EPIPE)
        elif st in (CLOSING, LAST_ACK, TIME_WAIT):
            self._enter_closed()
        else:
            self._fail(errnos.ECONNRESET)

    def _process_ack(self, seg: tcp.Repr, now: int) -> bool:
        """RFC 9293 §3.10.7.4 fifth with RFC 5961 §5.2's range; False drops the segment."""
        t = self.tcb
        ack = seg.ack
        if gt(ack, t.snd_max):
            # "If the ACK acks something not yet sent ... send an ACK, drop the segment"
            # (RFC 9293 §3.10.7.4, RFC 5961 §5.2).  Linux tcp_ack answers it with a
            # challenge ACK in ESTABLISHED, tcp_rcv_state_process in the other full-socket
            # states; what Linux keeps as a timewait sock drops a bare ACK silently.
            if not self._is_timewait_sock():
                if self.challenges.challenge(self.options, now):
                    self.receiver.ack_at_once()
            return False
        if lt(ack, add(t.snd_una, -t.max_snd_wnd)):
            # RFC 5961 §5.2: older than SND.UNA - MAX.SND.WND
            if self.challenges.challenge(self.options, now):
                self.receiver.ack_at_once()
            return False
        prior_wnd = t.snd_wnd
        self.loss.ack_begin()
        new_ack = gt(ack, t.snd_una)
        acked = sub(ack, t.snd_una) if new_ack else 0
        loss = self.loss
        # bytes this ACK covers that an earlier SACK delivered already -- or, without
        # SACK, that earlier duplicate ACKs did (tcp_add_reno_sack counts each one
        # delivered)
        sacked_before = 0
        if new_ack:
            sacked_before = (loss.sacked_below(ack) if t.sack_ok
                             else min(loss.dupacks * t.snd_mss, acked))
        if le(t.snd_una, ack):
            self._update_send_window(seg)
        if new_ack:
            self._ack_advance(seg, now)
        newly_sacked = loss.take_sack(seg, now)
        ecn_signal = self.ecn.mode is not EcnMode.DISABLED and \
            self.ecn.congestion_signal(seg, acked, t.snd_mss,
                                       new_ack or newly_sacked > 0 or self._ts_progress(seg))
        # tcp_cong_control runs after tcp_fastretrans_alert: in Loss, after the undo
        # it may decide (grown earlier, a Recovery that starts would count the growth)
        grow_after = loss.in_loss
        # tcp_cong_control grows cwnd by what this ACK delivered (tp->delivered's delta:
        # bytes an earlier SACK delivered do not grow it a second time)
        delivered = acked - sacked_before + newly_sacked
        may_raise = self._may_raise_cwnd(new_ack, newly_sacked)
        if may_raise and not grow_after and loss.algorithm is None and not loss.cwr \
                and not ecn_signal:
            self.sender.grow_cwnd(self, delivered, now)
        in_recovery = loss.algorithm is not None
        loss.detect(self, seg, ack, new_ack, acked, prior_wnd, newly_sacked, now)
        if may_raise and grow_after and loss.algorithm is None and not loss.cwr \
                and not ecn_signal:
            self.sender.grow_cwnd(self, delivered, now)
        if loss.algorithm is not None and not in_recovery:
            self.ecn.on_reduction()  # tcp_init_cwnd_reduction: tcp_ecn_queue_cwr
        elif ecn_signal and loss.enter_cwr(self, now, new_ack):  # tcp_try_to_open, FLAG_ECE
            self.ecn.on_reduction()
        # state-specific ACK handling
        st = self.state
        if self.sender.fin_acked():
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

    def _may_raise_cwnd(self, new_ack: bool, newly_sacked: int) -> bool:
        """tcp_may_raise_cwnd: once reordering beyond net.ipv4.tcp_reordering was seen,
        any delivery grows cwnd, SACKed out of order too (FLAG_FORWARD_PROGRESS); until
        then only an ACK of new data in order does (FLAG_DATA_ACKED, RFC 5681)."""
        if self.loss.reordering > REORDERING:
            return new_ack or newly_sacked > 0
        return new_ack

    def _is_timewait_sock(self) -> bool:
        """Would Linux hold this connection as a timewait sock, whose in-window bare ACKs
        get no answer (tcp_timewait_state_process)?  TIME-WAIT, and an orphaned
        FIN-WAIT-2 whose tcp_fin_timeout fits in TIME-WAIT's length (tcp_time_wait with
        TCP_FIN_WAIT2, from tcp_rcv_state_process and tcp_close)."""
        st = self.state
        return st is TIME_WAIT or (
            st is FIN_WAIT_2 and self._orphaned
            and self.options.fin_timeout <= self.options.time_wait_timeout)

    def _update_send_window(self, seg: tcp.Repr) -> None:
        """The window update for an ACK with SND.UNA =< SEG.ACK, before SND.UNA moves;
        both the full path and header prediction call it.

        RFC 9293 §3.10.7.4 takes the window when SND.WL1 < SEG.SEQ, or SND.WL1 = SEG.SEQ
        and SND.WL2 =< SEG.ACK.  That is not enough for a window that ends at SND.UNA +
        SND.WND: an ACK that moves SND.UNA on a segment older than the last update (data
        filling a hole) would leave SND.WND counted from an older ACK, and the window
        would end past the edge the peer offered.  Linux takes the window of every ACK
        that advances SND.UNA (tcp_ack_update_window, tcp_may_update_window's
        after(ack, snd_una)).  Any other ACK here has SEG.ACK = SND.UNA, never below
        SND.WL2, so the RFC's test reduces to SND.WL1 =< SEG.SEQ and keeps no SND.WL2.
        (Linux's also refuses a smaller window from a segment at SND.WL1.)"""
        t = self.tcb
        seq = seg.seq
        if gt(seg.ack, t.snd_una) or le(t.snd_wl1, seq):
            t.snd_wnd = seg.window << t.snd_wscale
            if t.snd_wnd > t.max_snd_wnd:
                t.max_snd_wnd = t.snd_wnd
            t.snd_wl1 = seq  # tcp_update_wl

    def _ack_advance(self, seg: tcp.Repr, now: int) -> None:
        """New data acknowledged: RTT, send buffer, RTO timer (RFC 6298 §5.2/5.3)."""
        t = self.tcb
        ack = seg.ack
        acked = sub(ack, t.snd_una)
        self._rtt_sample(seg, now)
        self.sender.drop_acked(ack)
        t.snd_una = ack
        self.stats.bytes_acked += acked  # tcp_snd_una_update
        if lt(t.snd_nxt, ack):
            t.snd_nxt = ack  # after go-back-N the ACK may jump past SND.NXT
        self.loss.on_ack_advance(ack, acked, now)
        self.timers.data_acked()
        self.timers.rto_at = None if t.snd_una == t.snd_max else now + self.rto.rto
        self.loss.schedule_probe(self, now)  # tcp_set_xmit_timer
        if t.snd_una == t.snd_max:
            self.chrono.stop(BUSY, now, self.sender.queues_empty())

    def _rtt_sample(self, seg: tcp.Repr, now: int) -> None:
        """RTTM (RFC 7323 §4) from TSecr, else Karn's timed segment (RFC 6298 §3)."""
        t = self.tcb
        if t.ts_ok and seg.timestamp is not None and seg.timestamp[1]:
            rtt_ms = sub(self.tcb.ts_val(now), seg.timestamp[1])
            if rtt_ms >= 0:
                self.rto.on_sample(max(rtt_ms, 1) * MS, seg.ack, t.snd_max)
            return
        sent_at = self.sender.rtt_sample(seg.ack)
        if sent_at is not None:
            self.rto.on_sample(now - sent_at, seg.ack, t.snd_max)

    def _rtt_sample_handshake(self, seg: tcp.Repr, now: int) -> None:
        """The handshake's RTT sample (tcp_synack_rtt_meas, tcp_ack_update_rtt): the
        estimator's first, and tcp_min_rtt's (which RACK and TCP_INFO read)."""
        t = self.tcb
        rtt: int | None = None
        if t.ts_ok and seg.timestamp is not None and seg.timestamp[1]:
            rtt_ms = sub(self.tcb.ts_val(now), seg.timestamp[1])
            if 0 <= rtt_ms:
                rtt = max(rtt_ms, 1) * MS
        elif not self.timers.syn_retransmitted and self.timers.syn_sent_at is not None:
            rtt = now - self.timers.syn_sent_at  # Karn: only unretransmitted SYNs
        if rtt is not None:
            self.rto.on_sample(rtt, seg.ack, t.snd_max)
            self.loss.rtt_seen(rtt // 1000)

    # ------------------------------------------------------------ what goes out
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
        wnd_end = add(t.snd_una, t.snd_wnd)
        # not lt(wnd_end, snd_max), or past it by less than one window unit (Linux)
        if not lt(wnd_end, snd_max) \
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
        seg = segment_repr(self.local_port, self.remote_port, seq & MASK32, ack, flags,
                           window, payload, blocks, ts)
        if self.ecn.mode is not EcnMode.DISABLED:
            # new data is what starts at or above SND.MAX (tcp_ecn_send: !before(seq, snd_nxt))
            seg = self.ecn.outgoing(seg, bool(payload) and not lt(seq, t.snd_max), self.options,
                                    now, self.rto.srtt, timewait=self._is_timewait_sock())
        return seg

    def _emit(self, seg: tcp.Repr) -> None:
        self._out.append(seg)
        self.counters.add("TcpOutSegs")
        if not (seg.flags & SYN and self.passive):
            # a listener's request sock sends the SYN-ACK in Linux (tcp_make_synack),
            # not the socket whose totals TCP_INFO reads
            if seg.payload and self.tcb.snd_max == self.tcb.snd_una:
                # tcp_event_data_sent: the first data with nothing in flight
                self.cc.on_tx_start(self._now, self.stats.last_data_sent_at)
            self.stats.segment_out(len(seg.payload), self._now)


def _fitting(extra: tuple[tuple[int, bytes], ...], used: int
             ) -> tuple[tuple[int, bytes], ...]:
    """The options of ``extra`` (a Fast Open cookie) that still fit the 40 bytes once
    ``used`` are taken, each padded to whole words: tcp_syn_options and
    tcp_synack_options leave out what has no room (a keyed SYN's cookie)."""
    kept = []
    for kind, data in extra:
        need = (2 + len(data) + 3) & ~3
        if used + need <= 40:
            kept.append((kind, data))
            used += need
    return tuple(kept)


__all__ = ["Connection", "ListenAction", "choose_wscale", "listen_action", "reset_for",
           "seg_len"]
