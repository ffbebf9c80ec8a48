"""A TCP socket on a Host: its table identity (``SockEntry``), the Linux-style socket lock
(``SocketLock``: owner + backlog), the sans-IO ``Connection`` it drives, the listener's
queues and the calls ``rcunet.api.socket.Socket`` delegates to.  Its socket options are
``rcunet.host.tcp.sockopt`` (functions of the socket); its life, ``rcunet.host.tcp.life``.

The protocol work shared by every socket (input, output, timers, teardown, the listener
path) lives in ``rcunet.host.tcp.TcpLayer``; this module is the user side.

Seed 001 (reference §5.2-5.3): ``recv`` copies out of the receive buffer while owning the
socket and collects the pooled buffers ("skbs") whose bytes it consumed.  With
``Tuning.tcp_defer_free`` they are freed after ``release_sock``, each handed back to the
worker that allocated it (``DeferredFreeList.free``); legacy frees them inside the lock
section (``free_now``).  While lock statistics are on (the Host's ``Tuning.lock_stat``, or
``rcunet.sync.lockstat.enable()``) every owner section records its hold time
(``lock_stats``); otherwise a section costs no clock read and no accounting.
"""

from __future__ import annotations

import _thread
import errno
import socket as _pysocket
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from rcunet.core.errqueue import ErrorQueue, TxTimestamps, Zerocopy, iov_after
from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp import (
    Closed,
    Connection,
    DataReceived,
    Established,
    SendSpaceAvailable,
    TimeWaitEntered,
)
from rcunet.core.tcp import State as CState
from rcunet.core.tcp.delack import DELACK_MAX
from rcunet.core.tcp.options import MS, jiffies_ns
from rcunet.core.tcp.timewait import TimeWait
from rcunet.host.sockerr import oserror, wire
from rcunet.host.socklock import BACKLOG_EXTRA, SocketLock
from rcunet.host.tcp import connopts, md5, sockopt
from rcunet.host.tcp import errq as tcp_errq
from rcunet.host.tcp import fastopen_opts as tcp_fastopen
from rcunet.host.tcp.ipopts import IP_PMTUDISC_WANT
from rcunet.host.tcp.life import (
    CLOSE,
    FINISHED,
    LISTEN_CLOSED,
    TABLE_STATE,
    UNHASHED,
    USER_CLOSED,
    TeardownRequest,
    advance,
    ask_teardown,
    reopen,
)
from rcunet.host.tcp.poll import PollFd
from rcunet.host.wakeups import open_gates
from rcunet.sync import lock as _lock_mod
from rcunet.sync import signals
from rcunet.sync.deferred import Buffer
from rcunet.sync.lock import LockClass
from rcunet.sync.spin import spin_until
from rcunet.tables.entry import AF_INET, SockEntry, State
from rcunet.wire import tcp
from rcunet.wire.addr import ANY4, ANY6

if TYPE_CHECKING:
    from rcunet.host.routecache import DstEntry
    from rcunet.host.tcp.layer import TcpLayer
    from rcunet.host.timers import Timer

WQ_LOCK = LockClass("tcp_sock.wq")
#: Transmit serialisation per socket; an inline link nests the peer's under ours.
XMIT_LOCK = LockClass("tcp_xmit_lock", nests_with_self=True)
RSKQ_LOCK = LockClass("rskq_lock")

# Plain ints: ``flags & socket.MSG_DONTWAIT`` would go through IntFlag's Python-level
# __rand__ on every send and recv.
MSG_DONTWAIT = int(_pysocket.MSG_DONTWAIT)
MSG_WAITALL = int(_pysocket.MSG_WAITALL)
MSG_PEEK = int(_pysocket.MSG_PEEK)
MSG_MORE = int(getattr(_pysocket, "MSG_MORE", 0x8000))
MSG_EOR = int(getattr(_pysocket, "MSG_EOR", 0x80))
MSG_NOSIGNAL = int(getattr(_pysocket, "MSG_NOSIGNAL", 0x4000))
#: send() flags TCP takes (Linux tcp_sendmsg; MSG_NOSIGNAL: no SIGPIPE here anyway)
_SEND_FLAGS = MSG_DONTWAIT | MSG_MORE | MSG_EOR | MSG_NOSIGNAL
SHUT_RD, SHUT_WR, SHUT_RDWR = _pysocket.SHUT_RD, _pysocket.SHUT_WR, _pysocket.SHUT_RDWR
#: Per-segment memory charged against the backlog limit besides its payload (truesize).
SEGMENT_OVERHEAD = 256

#: Work a receive worker or timer left for the owner's ``release_sock`` (bits of
#: ``SocketLock.deferred``, Linux's TCP_*_DEFERRED flags; plain ints, as ``|=`` on an
#: enum.Flag runs Python-level code: 1.67 against 0.035 us per ``|=``, 3.11, timeit).
TIMER_DEFERRED = 1
MTU_REDUCED_DEFERRED = 2
#: An ICMP error met an owned socket: kept as soft_err only (tcp_v4_err does not abort a
#: connect the user is inside), so release_sock has nothing to do for it.
ICMP_DEFERRED = 4

#: The calls ``engine`` takes that may answer with nothing to collect
#: (``Connection.quiet``): a send whose bytes joined a segment Nagle holds.  Plain sends
#: and reads are ``engine_send`` and ``engine_recv``, which ask ``_quiet`` themselves.
_QUIET_CALLS: frozenset[object] = frozenset({tcp_errq.send_noted})


def _acquire(gate: _thread.LockType, deadline: float | None) -> bool:
    """A sleeper's ``gate.acquire()`` until ``deadline``; True once acquired.  The main
    thread sleeps through rcunet.sync.signals, which runs the signal handlers (Ctrl-C)
    that compiled code leaves due."""
    if _thread.get_ident() == signals.main_ident:  # atomic: module-attribute load
        return signals.acquire_in_main_thread(gate, deadline)
    if deadline is None:
        return gate.acquire()
    remaining = deadline - time.monotonic()
    return remaining > 0 and gate.acquire(timeout=remaining)


class TcpSock(SockEntry):
    """One TCP socket (listener, connection, or a listener's child).

    Concurrency:
      sl          the socket lock (reference §5.1).  "Holding the socket lock" below means
                  owning it (``lock_sock``) or holding ``sl.slock`` while not owned (the
                  receive/timer path, via ``bh_deliver``/``bh_defer``).
      conn, rx_skbs, timer, teardown, user options   guarded by the socket lock; the
                  socket is their only writer (the engine's output reaches them through
                  ``engine``; teardown: ``life.ask_teardown``).
      life        the socket's life: an int of steps (USER_CLOSED, LISTEN_CLOSED,
                  FINISHED, UNHASHED, FORGOTTEN), each taken once, in the order
                  ``rcunet.host.tcp.life.REQUIRES`` allows, by ``life.advance``
                  under wq; read without a lock (one attribute load, see host/tcp/life.py).
      outbox      deque of segments to transmit: appended under the socket lock, drained
                  by ``TcpLayer.flush`` with ``popleft`` (both atomic).
      dst         the pinned route (sk_dst_cache), guarded-by: xmit (the transmitter);
                  released by the transmitter once the life is FINISHED.
      acceptq, embryos, syn_qlen     guarded-by: rskq_lock (a leaf but for wq),
                  which ``listen`` makes under the socket lock before the socket is
                  hashed as a listener (no other socket ever takes it).  LISTEN_CLOSED
                  is taken, and read, under it too.
      wake_seq    guarded-by: wq (a leaf lock); a waiter sleeps on a gate of its own (a
                  held raw lock) listed in ``wq_gates`` (guarded-by wq; None until the
                  first waiter: a socket that never blocks allocates nothing) until it
                  changes.  ``wakeup`` takes the list under wq and opens the gates after
                  releasing wq, so a woken thread never queues on its waker's lock.
      hold_*      guarded-by: wq (owner-section statistics, kept while lock statistics are on).
      state       the table state, one attribute store under the socket lock.
    Lock order: tcbinfo_lock (legacy) > bucket locks (bhash > bhash2 > ehash) > slock >
    rskq_lock > tcp_sock.wq > tcp_sock.poll.  slock is never held while transmitting.
    """

    # Slots with the GIL; on free-threaded builds SockEntry's dict holds these too
    # (lockfree_read_slots: a slot read of a value another thread made takes the
    # instance's lock there, and receive paths and user threads all read a socket).
    __slots__ = lockfree_read_slots(
        "layer", "host", "sl", "conn", "wq", "wq_gates", "wake_seq", "outbox",
        "rx_skbs", "timer", "teardown", "listener", "acceptq", "embryos", "syn_qlen",
        "max_ack_backlog", "life", "rskq_lock", "last_overflow_at", "rcvbuf", "sndbuf", "nodelay",
        "cork", "inq", "user_timeout", "notsent_lowat", "rto_min", "rto_max", "delack_max",
        "md5_keys",
        "keepalive", "keepidle", "keepintvl", "keepcnt", "syncnt", "user_mss", "linger",
        "shutdown_rd", "poll", "hold_ns",
        "hold_count", "hold_max_ns", "soft_err", "mtu_info", "held_err", "xmit", "tx_csum_offload",
        "dst",
        "sndbuf_locked",
        "rcvbuf_locked", "zerocopy", "zc", "errq", "err_reports", "write_wakes", "ts", "mark",
        "tos", "pmtudisc", "freebind",
        "fastopen_max_qlen", "fastopen_qlen", "fastopen_keys", "fastopen_no_cookie",
        "fastopen_connect", "tfo_listener", "fastopen_defer",
        base=SockEntry,
    )

    def __init__(self, layer: TcpLayer, family: int) -> None:
        super().__init__(family, ANY4 if family == AF_INET else ANY6)
        self.layer = layer
        self.host = layer.host
        self.sl = SocketLock(self._do_rcv, backlog_limit=self._backlog_limit,
                             release_cb=self._release_cb, on_backlog_drop=self._backlog_drop,
                             # the lock's detach breaks the cycle of bound methods
                             process_bh=self._rcv_bh)
        self.conn: Connection | None = None
        self.wq = WQ_LOCK.new()
        self.wq_gates: list[Any] | None = None  # guarded-by: wq (made by _wait)
        self.wake_seq = 0
        self.outbox: deque[Any] = deque()
        # One entry per data delivery, in delivery order: [Buffer or None, bytes of it
        # not yet read].  The engine's receive queue holds views of those bytes.
        self.rx_skbs: deque[list[Any]] = deque()
        self.timer: Timer | None = None
        self.teardown: TeardownRequest | None = None  # what post() tears down (host/tcp/life.py)
        self.listener: TcpSock | None = None  # set while an embryonic child (SYN_RECV)
        self.acceptq: deque[TcpSock] = deque()
        self.embryos: set[TcpSock] = set()
        self.syn_qlen = 0
        self.max_ack_backlog = 0
        self.life = 0  # life.py's steps; written by life.advance/reopen under wq
        self.rskq_lock: Any = None  # a listener's: made by listen()
        self.last_overflow_at: int | None = None
        tuning = layer.host.tuning
        self.rcvbuf = tuning.tcp_rmem[1]
        self.sndbuf = tuning.tcp_wmem[1]  # the engine grows it at ESTABLISHED (tcp_sndbuf_expand)
        self.sndbuf_locked = False  # SO_SNDBUF set: no autotuning (Linux SOCK_SNDBUF_LOCK)
        self.rcvbuf_locked = False  # SO_RCVBUF set: no autotuning (Linux SOCK_RCVBUF_LOCK)
        self.nodelay = False
        self.cork = False  # TCP_CORK
        self.inq = False  # TCP_INQ: recvmsg reports the bytes left (TCP_CM_INQ)
        self.user_timeout = 0  # TCP_USER_TIMEOUT, ms (0: tcp_retries2 decides)
        self.notsent_lowat = 0  # TCP_NOTSENT_LOWAT (0: net.ipv4.tcp_notsent_lowat)
        # icsk_rto_min, icsk_rto_max, icsk_delack_max (ns): the sysctls when the socket
        # is made (tcp_init_sock), then TCP_RTO_MIN_US, TCP_RTO_MAX_MS, TCP_DELACK_MAX_US
        self.rto_min = jiffies_ns(tuning.tcp_rto_min_us)
        self.rto_max = tuning.tcp_rto_max_ms * MS
        self.delack_max = DELACK_MAX
        # TCP_MD5SIG keys (host/tcp/md5.py), newest first; None while there are none.
        # Replaced whole under the socket lock; read with no lock by the receive path
        # and the transmitter (atomic: one attribute load, pairs with that store).
        self.md5_keys: md5.Keys | None = None
        self.keepalive = False
        self.keepidle: int | None = None  # TCP_KEEPIDLE seconds; None: the sysctl
        self.keepintvl: int | None = None
        self.keepcnt: int | None = None
        self.syncnt: int | None = None  # TCP_SYNCNT (icsk_syn_retries); None: the sysctl
        self.user_mss = 0
        self.linger: tuple[bool, int] = (False, 0)
        self.shutdown_rd = False
        self.poll: PollFd | None = None
        self.hold_ns = 0  # guarded-by: wq
        self.hold_count = 0  # guarded-by: wq
        self.hold_max_ns = 0  # guarded-by: wq
        self.soft_err = 0
        self.mtu_info: tuple[int, int | None] | None = None  # tp->mtu_info: (path MTU, quoted seq)
        self.held_err = 0  # an error met after a call had moved data: the next call's
        self.xmit = XMIT_LOCK.new()
        self.tx_csum_offload = False  # the route's link offloads checksums (set at connect)
        # sk_dst_cache: the pinned route (one reference held), guarded-by: xmit
        self.dst: DstEntry | None = None
        # SO_ZEROCOPY, its ranges in flight, sk_error_queue, sk_error_report count: host/tcp/errq.py
        self.zerocopy, self.err_reports = False, 0
        # sk_stream_write_space wakeups so far (SendSpaceAvailable): an edge-triggered
        # EPOLLOUT and a writer asleep in sk_stream_wait_memory see one as their wakeup
        self.write_wakes = 0
        self.zc: Zerocopy | None = None
        self.errq: ErrorQueue | None = None
        self.ts: TxTimestamps | None = None  # SO_TIMESTAMPING (host/tcp/errq.py)
        self.mark = 0  # SO_MARK: kept and reported (rcunet has no policy routing)
        # IP_TOS (its DSCP bits: ECN's two are the connection's), IP_MTU_DISCOVER
        # (inet->pmtudisc, Linux's default IP_PMTUDISC_WANT), IP_FREEBIND.  Each one
        # attribute store by setsockopt; the transmit path loads each once per segment.
        self.tos = 0
        self.pmtudisc = IP_PMTUDISC_WANT
        self.freebind = False
        # Fast Open (host/tcp/fastopen_opts.py): queue limit, count (guarded-by rskq_lock),
        # TCP_FASTOPEN_KEY keys; a Fast Open child's listener until its handshake ends.
        self.fastopen_max_qlen = self.fastopen_qlen = 0
        self.fastopen_keys: tuple[bytes, ...] = ()
        self.fastopen_no_cookie = self.fastopen_connect = False
        self.tfo_listener: TcpSock | None = None
        self.fastopen_defer: tuple[bytes, int] | None = None  # connect() left to a write

    # ------------------------------------------------------------------ socket lock
    def _backlog_limit(self) -> int:
        # sk_rcvbuf grows with autotuning: the connection's buffer once there is one.
        conn = self.conn  # atomic: attribute loads; the owner may grow conn.options meanwhile
        rcvbuf = self.rcvbuf if conn is None else max(self.rcvbuf, conn.options.rcvbuf)
        return 2 * rcvbuf + self.sndbuf // 2 + BACKLOG_EXTRA  # tcp_add_backlog (2024)

    def _rcv_bh(self, item: tuple[tcp.Repr, Buffer | None]) -> bool:
        """tcp_v4_do_rcv from a receive worker (``slock`` held, not owned; the caller took
        the legacy global lock) for ``item`` = (segment, its buffer): True when the
        socket's waiters are to be woken once slock is released (the socket lock's
        ``process_bh``, called by ``SocketLock.bh_deliver``)."""
        seg, buf = item
        conn = self.conn
        if conn is None:
            self.layer.buffers.free_maybe(buf)
            return False
        return self.engine_segment(conn, seg, buf, True)

    def _do_rcv(self, item: tuple[tcp.Repr, Buffer | None]) -> None:
        """sk_backlog_rcv: one segment under the socket lock (the owner's backlog)."""
        seg, buf = item
        conn = self.conn
        if conn is None:
            self.layer.buffers.free_maybe(buf)
            return
        legacy = self.layer.legacy_input_lock(self, seg)  # the owner holds no slock
        if legacy is not None:
            legacy.acquire()
        try:
            self.engine_segment(conn, seg, buf, False)
        finally:
            if legacy is not None:
                legacy.release()

    def _release_cb(self, work: int) -> None:
        if work & TIMER_DEFERRED:
            self.run_timer()
        if work & MTU_REDUCED_DEFERRED:
            self.layer.icmp.mtu_reduced_locked(self)
        # ICMP_DEFERRED needs nothing here (see its definition).

    def _backlog_drop(self, item: Any) -> None:
        self.host.counters.inc("TcpExtTCPBacklogDrop")
        if item[1] is not None:
            self.layer.buffers.free(item[1])

    def _lock(self) -> int:
        """lock_sock; returns when the owner section began, or 0 when it is not timed
        (lock statistics off: no clock read, no accounting in ``_unlock``)."""
        self.sl.lock_sock()
        # atomic: attribute loads (Host.set_tuning replaces tuning whole; the lockstat
        # switch is one module global, read as stats_enabled() reads it, without the
        # call: twice per socket call): a section that starts timed is recorded
        if self.host.tuning.lock_stat or _lock_mod._stats_on:
            return perf_counter_ns()
        return 0

    def _unlock(self, since: int) -> None:
        """release_sock (processing the backlog), then record a timed owner section."""
        self.sl.release_sock()
        if since:
            self._record_hold(perf_counter_ns() - since)
        self.post()

    def _record_hold(self, held: int) -> None:
        with self.wq:  # the next owner may already run: account under a leaf lock
            self.hold_ns += held
            self.hold_count += 1
            if held > self.hold_max_ns:
                self.hold_max_ns = held
        self.layer.record_hold(held)

    def lock_stats(self) -> dict[str, int]:
        """Owner-section hold times (of the sections timed while lock statistics were on)
        and the deepest backlog seen (for the seed-001 lab)."""
        with self.sl.slock:
            backlog_max, drops = self.sl.backlog_max_seen, self.sl.backlog_drops
        with self.wq:
            holds, total, longest = self.hold_count, self.hold_ns, self.hold_max_ns
        return {"holds": holds, "hold_ns_total": total, "hold_ns_max": longest,
                "backlog_max_bytes": backlog_max, "backlog_drops": drops}

    # ------------------------------------------------------------------ the engine
    # Every call into the engine is one of the methods below, each of which runs
    # ``_collect`` in its ``finally``: no call site can forget the collection.  ``engine``
    # takes any call; the others are the per-segment and per-call hot ones, typed, so the
    # compiled build calls the engine's method directly (no argument tuple, no
    # Python-level dispatch).
    def engine(self, call: Callable[..., Any] | None = None, *args: Any,
               buf: Buffer | None = None, softirq: bool = False) -> Any:
        """The one way into the engine, socket lock held: ``call(*args)``, one of
        ``self.conn``'s methods (or a function that drives it), then what the engine
        produced is collected (``_collect``), whatever the call returned or raised.
        ``call`` None: only the collection, of what the connection made when it was
        ``attach``-ed or since the last call.

        ``buf``: the pooled buffer the segment's bytes are in (a delivery keeps it until
        they are read).  ``softirq``: a receive worker under slock, whose caller wakes
        the waiters once slock is released: the result is then True when they are owed
        a wakeup.  Nothing is collected after a send or a recv the engine answered with
        nothing to collect (``_quiet``)."""
        conn = self.conn
        assert conn is not None
        result: Any = None
        quiet = False
        try:
            if call is not None:
                result = call(*args)
                quiet = self._quiet(conn) and call in _QUIET_CALLS
        finally:
            woke = False if quiet else self._collect(conn, buf, softirq)
        return woke if softirq else result

    def engine_segment(self, conn: Connection, seg: tcp.Repr, buf: Buffer | None,
                       softirq: bool) -> bool:
        """``engine(conn.on_segment, seg, now, buf=buf, softirq=softirq)``, typed: one
        received segment (``conn`` is ``self.conn``)."""
        try:
            conn.on_segment(seg, self.host.now())
        finally:
            woke = self._collect(conn, buf, softirq)
        return woke

    def engine_send(self, conn: Connection, view: memoryview, now: int, more: bool,
                    eor: bool) -> int:
        """``engine(conn.send, view, now, (), more, eor)``, typed."""
        quiet = False
        try:
            n = conn.send(view, now, (), more, eor)
            quiet = self._quiet(conn)
        finally:
            if not quiet:
                self._collect(conn, None, False)
        return n

    def engine_recv(self, conn: Connection, bufsize: int, now: int) -> bytes | None:
        """``engine(conn.try_recv, bufsize, now)``, typed: None when nothing is readable
        yet (EAGAIN)."""
        quiet = False
        try:
            data = conn.try_recv(bufsize, now)
            quiet = self._quiet(conn)
        finally:
            if not quiet:
                self._collect(conn, None, False)
        return data

    def engine_timer(self, conn: Connection, now: int) -> None:
        """``engine(conn.on_timer, now)``, typed."""
        try:
            conn.on_timer(now)
        finally:
            self._collect(conn, None, False)

    def _quiet(self, conn: Connection) -> bool:
        """After a send or a recv: the engine answered with nothing to collect
        (``Connection.quiet``) and no poll fd mirrors the socket.  (atomic: attribute
        loads; quiet is the engine's, written by the call just made, in this thread)"""
        return conn.quiet and self.poll is None

    def _collect(self, conn: Connection, buf: Buffer | None, softirq: bool) -> bool:
        """What the engine produced, to where it goes: segments to the outbox, events
        (data to the receive queue, the handshake's end, the teardown it asks for),
        counters, the table state and the timer at its next deadline.  ``buf`` and
        ``softirq`` as ``engine`` takes them; True when a softirq caller owes the waiters
        a wakeup.  Socket lock held."""
        wake = not softirq
        layer = self.layer
        segments = conn.take_segments()
        if segments:
            self.outbox.extend(segments)
        events = conn.take_events()
        for event in events:
            kind = type(event)
            if isinstance(event, DataReceived):
                # Every delivery gets an entry, with a buffer or not: the receive
                # queue keeps views of the delivered bytes (no copy), so a buffer
                # goes back to its pool only once all the bytes delivered with it
                # were read (_consume_skbs counts them off in delivery order).
                self.rx_skbs.append([buf, event.length])
                buf = None
            elif kind is Established:
                if self.listener is not None:
                    layer.listeners.publish_child(self)
                elif self.tfo_listener is not None:
                    layer.fastopen.release(self)  # reqsk_fastopen_remove
                elif conn.fastopen_active is not None:
                    layer.fastopen.synack_seen(self, conn)  # tcp_fastopen_cache_set
            elif kind is SendSpaceAvailable:
                self.write_wakes += 1  # owner: the socket lock's holder
            elif kind is TimeWaitEntered:
                self.teardown = ask_teardown(self.teardown, TimeWait.of(conn))
            elif kind is Closed:
                self.teardown = ask_teardown(self.teardown, CLOSE)
        if buf is not None:
            layer.buffers.free(buf)
        if not self.life & FINISHED:  # atomic: one load; FINISHED is taken in post
            self.state = TABLE_STATE[conn.state]
        if conn.counters.values:  # a dict's truth: no take() when nothing counted
            # the engine's counts to the host's: Counters.inc per name, with the
            # shard fetched once (most engine calls count something)
            shard = self.host.counters.shard()
            for name, n in conn.counters.take().items():
                shard[name] = shard.get(name, 0) + n  # owner: this thread only
        # MSG_ZEROCOPY completions, transmit timestamps: sk_error_report
        reported = (self.zc is not None or self.ts is not None) and tcp_errq.collect(
            self, conn, segments)
        if (events or reported) and wake:
            self.wakeup()
        elif self.poll is not None:
            self.update_poll()
        self._arm_timer()
        # the caller wakes the socket after unlocking
        return (bool(events) or reported) and not wake

    def attach(self, conn: Connection, *, tx_csum_offload: bool) -> None:
        """The socket takes a new connection (connect, a listener's child): the table
        state follows it; what it made (its SYN or SYN,ACK) waits for ``engine()``.
        ``tx_csum_offload``: its route's link does checksums.  Socket lock held, or a
        child no other thread has seen yet."""
        self.conn = conn
        self.state = TABLE_STATE[conn.state]
        self.tx_csum_offload = tx_csum_offload

    def take_receive_queue(self) -> list[Buffer]:
        """Empty the receive queue's buffer list (close, disconnect, the last release):
        the pooled buffers, for the caller to free after the lock section."""
        unread = [skb[0] for skb in self.rx_skbs if skb[0] is not None]
        self.rx_skbs.clear()
        return unread

    def update_options_locked(self, push: bool = False) -> None:
        """setsockopt reached a live connection: the engine takes the socket's options
        (``Connection.update_options``: keep-alive timer, what Nagle held).  Socket lock
        held."""
        conn = self.conn
        if conn is None or conn.state is CState.CLOSED:
            return
        self.engine(partial(conn.update_options, **connopts.live_options(self)), self.host.now(),
                    push)

    def update_buffers_locked(self, receive: bool) -> None:
        """SO_RCVBUF (``receive``) or SO_SNDBUF reached a live connection: the engine
        takes the new size (``Connection.set_buffers``).  Socket lock held."""
        conn = self.conn
        if conn is None or conn.state is CState.CLOSED:
            return
        sizes = {"rcvbuf": self.rcvbuf} if receive else {"sndbuf": self.sndbuf}
        self.engine(partial(conn.set_buffers, **sizes), self.host.now())

    def disconnect(self) -> None:
        """connect(AF_UNSPEC) on a connection, Linux tcp_disconnect: the engine drops the
        connection (RST where due); the teardown after the unlock unhashes it and frees
        its port (and its place in a Fast Open queue), and connect() may start anew."""
        unread: list[Buffer] = []
        since = self._lock()
        try:
            conn = self.conn
            if conn is not None and conn.state is not CState.CLOSED:
                self.engine(conn.disconnect, self.host.now())
            self.shutdown_rd = False
            unread = self.take_receive_queue()
        finally:
            self._unlock(since)
        self.layer.buffers.free_deferred(unread)

    def post(self) -> None:
        """After a socket-lock section: transmit, then any teardown the engine asked for
        (only when nobody owns the socket; the owner's own ``post`` does it)."""
        if self.outbox:
            self.layer.transmit.flush(self)
        if self.teardown is None or self.sl.owned:  # atomic loads; re-checked by the claim
            return
        todo = self._claim_teardown()
        if todo is not None:
            self.layer.teardown.run(self, None if todo is CLOSE else todo)

    def _claim_teardown(self) -> TeardownRequest | None:
        """Under ``slock``: take the teardown asked for, if the socket is not owned and this
        thread takes FINISHED.  A function of its own so that the read under the lock is a
        fresh load (compiled, the unlocked check in ``post`` narrows ``self.teardown`` to
        not-None for the rest of that function: another thread's claim in between would
        fail that type check)."""
        with self.sl.slock:
            if self.sl.owned:
                return None
            todo = self.teardown
            self.teardown = None
            # One teardown per connection: between taking TIME_WAIT here and its
            # hashdance, the socket is still hashed, and another thread's segment (a
            # RST answering our ACK of a retransmitted FIN) can make the engine ask
            # for a close too.  Linux has no such window (tcp_time_wait runs under
            # the socket lock); the later request is dropped, as RFC 1337 would drop
            # that RST in TIME_WAIT.  Whoever takes FINISHED (``advance``: once)
            # does the teardown.
            if todo is None or not advance(self, FINISHED):
                return None
            return todo

    # ------------------------------------------------------------------ the timer
    def _arm_timer(self) -> None:
        """One host timer per connection at the engine's next deadline.  A later deadline
        keeps the armed (earlier) timer, which fires, finds nothing due and re-arms
        (Linux's sk_reset_timer is as lazy); only an earlier one schedules anew.
        Socket lock held."""
        conn = self.conn
        if self.life & FINISHED or conn is None:  # atomic: one load, paired with post's
            return
        at = conn.timers.next_at()  # conn.next_deadline(), one call less per segment
        if at is None:
            return
        timer = self.timer
        if timer is not None and not timer.cancelled and timer.at <= at:
            return
        if timer is not None:
            timer.cancel()
        self.timer = self.host.timers.schedule(at, self._timer_fired)

    def _timer_fired(self, now: int) -> None:
        self.sl.bh_defer(TIMER_DEFERRED, self.run_timer)
        self.post()

    def run_timer(self) -> None:
        """The timer fired (or was deferred to release_sock): run the engine's due
        timers.  Socket lock held."""
        now = self.host.now()
        timer = self.timer
        if timer is not None and timer.at <= now:
            self.timer = None
        conn = self.conn
        if self.life & FINISHED or conn is None:  # atomic: one load, paired with post's
            return
        due = conn.next_deadline()
        if due is not None and due <= now:
            self.engine_timer(conn, now)
        else:
            self._arm_timer()

    def cancel_timer(self) -> None:
        """The teardown: no timer fires for this socket again (FINISHED is taken, so none
        is armed again)."""
        timer, self.timer = self.timer, None
        if timer is not None:
            timer.cancel()

    # ------------------------------------------------------------------ options
    def setsockopt(self, level: int, opt: int, value: int | bytes) -> None:
        sockopt.setsockopt(self, level, opt, value)

    def getsockopt(self, level: int, opt: int, buflen: int | None = None) -> int | bytes:
        return sockopt.getsockopt(self, level, opt, buflen)

    def recv_cmsgs(self) -> list[tuple[int, int, bytes]]:
        """The control messages a recvmsg that just read data gets (TCP_CM_INQ)."""
        return sockopt.recv_cmsgs(self)

    # ------------------------------------------------------------------ a listener's queues
    # A listener writes its own queues, and a child its own ``listener``/``tfo_listener``,
    # all under the listener's rskq_lock (LISTEN_CLOSED is read under it too).
    def queue_child(self, child: TcpSock, *, fastopen: bool) -> bool:
        """A new child counts in this listener's SYN queue (an embryo, until its
        handshake completes: ``publish``) or, opening fast, in its Fast Open queue
        (tcp_fastopen_create_child); False once the listener stopped listening."""
        with self.rskq_lock:
            if self.life & LISTEN_CLOSED:
                return False
            if fastopen:
                self.fastopen_qlen += 1
                child.tfo_listener = self
            else:
                child.listener = self
                self.embryos.add(child)  # before ehash: the final ACK may race us
                self.syn_qlen += 1
        return True

    def publish(self, child: TcpSock) -> bool:
        """inet_csk_reqsk_queue_add: ``child`` leaves the SYN queue (if it was there) for
        the accept queue; False when the listener stopped listening meanwhile (nobody
        will accept the child)."""
        child.listener = None
        with self.rskq_lock:
            if child in self.embryos:
                self.embryos.discard(child)
                self.syn_qlen -= 1
            closed = self.life & LISTEN_CLOSED
            if not closed:
                self.acceptq.append(child)
        return not closed

    def leave_syn_queue(self) -> bool:
        """An embryonic child died before its handshake completed: it leaves its
        listener's SYN queue.  False when it was not an embryo."""
        listener, self.listener = self.listener, None
        if listener is None:
            return False
        with listener.rskq_lock:
            if self in listener.embryos:
                listener.embryos.discard(self)
                listener.syn_qlen -= 1
        return True

    def leave_fastopen_queue(self) -> None:
        """reqsk_fastopen_remove: a Fast Open child's handshake completed or it died; its
        place in the listener's Fast Open queue is free again."""
        lsk, self.tfo_listener = self.tfo_listener, None
        if lsk is None:
            return
        with lsk.rskq_lock:
            if lsk.fastopen_qlen > 0:
                lsk.fastopen_qlen -= 1

    def accept_pop(self) -> TcpSock | None:
        """inet_csk_accept's dequeue: the oldest complete child, or None."""
        with self.rskq_lock:
            return self.acceptq.popleft() if self.acceptq else None

    def stop_listening(self) -> list[TcpSock]:
        """LISTEN_CLOSED: the queues take no more children; the children they held (to
        abort), each no longer an embryo of this listener."""
        with self.rskq_lock:
            advance(self, LISTEN_CLOSED)
            children = list(self.acceptq) + list(self.embryos)
            self.acceptq.clear()
            self.embryos.clear()
            self.syn_qlen = 0
        for child in children:
            child.listener = None
        return children

    def note_overflow(self, now: int) -> None:
        """The SYN queue overflowed: SYN cookies are checked for a while (one store;
        read by ``Listeners._cookie_ack``)."""
        self.last_overflow_at = now

    # ------------------------------------------------------------------ ICMP errors
    def note_soft_error(self, err: int) -> None:
        """An ICMP error the next SO_ERROR or failed call reports (one store)."""
        self.soft_err = err

    def note_mtu_info(self, mtu: int, seq: int | None) -> None:
        """tp->mtu_info: the path MTU an ICMP error reported, with the sequence number
        it quoted, for ``IcmpErrors.mtu_reduced_locked`` (one store; read locked)."""
        self.mtu_info = (mtu, seq)

    def take_mtu_info(self) -> tuple[int, int | None] | None:
        info, self.mtu_info = self.mtu_info, None
        return info

    # ------------------------------------------------------------------ waking and polling
    def wakeup(self) -> None:
        """Something a waiter may care about changed (called with the socket lock held).
        The sleepers' gates are opened after ``wq`` is released, so a woken thread never
        queues on the lock its waker still holds (Linux: __wake_up with autoremove)."""
        with self.wq:
            self.wake_seq += 1
            gates = self.wq_gates
            if gates:
                self.wq_gates = []
            else:
                # Not the (empty) live list: a sleeper may append to it once wq is
                # released, and its gate must stay listed for the next wakeup to open
                # (opened here too, it would be opened twice: "release unlocked lock").
                gates = None
        if gates:
            open_gates(gates)  # at once, or at the end of a link's receive batch
        if self.poll is not None:
            self.update_poll()

    def update_poll(self) -> None:
        poll = self.poll  # atomic: attribute load, pairs with the store in fileno()
        if poll is not None:
            poll.refresh(self.poll_levels)

    def poll_levels(self) -> tuple[bool, bool]:
        """(readable, writable) as tcp_poll reports them.  Lockless reads of single
        attributes, ordered after the change that called for them by ``PollFd.refresh``
        (which reads them under its lock, see there)."""
        # atomic: one load of life, paired with advance(LISTEN_CLOSED) in Listeners.close
        listen_closed = bool(self.life & LISTEN_CLOSED)
        if listen_closed or self.state == State.LISTEN:
            return bool(self.acceptq) or listen_closed, False
        conn = self.conn
        errq = self.errq  # atomic: attribute load, then len() of a deque
        if conn is None and not errq and self.fastopen_defer is not None:
            return False, True  # tcp_poll: a deferred Fast Open connect is writable
        if conn is None or errq:
            return True, True  # EPOLLHUP (TCP_CLOSE) or EPOLLERR: select() reports both
        st = conn.state
        if st is CState.SYN_SENT or st is CState.SYN_RECEIVED:
            return False, False
        failed = conn.error is not None or st is CState.CLOSED
        readable = conn.readable > 0 or failed or st.fin_received or self.shutdown_rd
        if st is CState.ESTABLISHED or st is CState.CLOSE_WAIT:
            # atomic: attribute loads and len() of the send queue's deques (the engine's
            # writes under the socket lock); a stale answer is refreshed by the next event
            writable = failed or conn.writeable()
        else:
            writable = True  # SEND_SHUTDOWN: writable, so a write fails at once (EPIPE)
        return readable, writable

    def fileno(self) -> int:
        with self.wq:
            if self.poll is None:
                self.poll = PollFd()
            poll = self.poll
        poll.refresh(self.poll_levels)
        return poll.fileno()

    def _wait(self, seen: int, deadline: float | None) -> bool:
        """Sleep until ``wake_seq`` moves past ``seen``; False at the deadline."""
        host = self.host
        poller = host.busy_poller  # atomic: attribute load, stored before start()
        if poller is not None:
            polled = poller.wait(self, seen, deadline)
            if polled is not None:
                return polled
            with poller.asleep():  # a poller that lets go hands the link back at once
                return self._sleep(seen, deadline)
        spin = host.wait_spin  # atomic: attribute load, stored before start()
        if spin and self._spin(seen, deadline, spin):
            host.counters.inc("RcunetWaitSpinHits")
            return True
        return self._sleep(seen, deadline)

    def _spin(self, seen: int, deadline: float | None, spin: float) -> bool:
        """Spin-then-park (``Host.wait_spin``): re-check ``wake_seq`` for up to ``spin``
        seconds, yielding the CPU between checks; True once it moved.  A wakeup that
        finds no gate opens none, so the waker wakes no thread: the spinner sees it."""
        if deadline is not None:
            spin = min(spin, deadline - time.monotonic())
            if spin <= 0:
                return False
        # atomic: one attribute load per check; wake_seq is stored under wq by wakeup()
        return spin_until(lambda: self.wake_seq != seen, spin)

    def _sleep(self, seen: int, deadline: float | None) -> bool:
        """``_wait`` on this thread's own gate."""
        gate = _thread.allocate_lock()
        gate.acquire()
        with self.wq:
            if self.wake_seq != seen:
                return True
            gates = self.wq_gates
            if gates is None:
                gates = self.wq_gates = []
            gates.append(gate)
        try:
            if _acquire(gate, deadline):
                return True
        except BaseException:  # a signal handler's KeyboardInterrupt: leave no gate behind
            self._drop_gate(gate)
            raise
        self._drop_gate(gate)
        return self.wake_seq != seen  # atomic: attribute load; woken at the deadline?

    def _drop_gate(self, gate: _thread.LockType) -> None:
        """A sleeper that stops waiting takes its gate off the wait list (a waker that
        took it first owns it, and opens a gate nobody waits on)."""
        with self.wq:
            gates = self.wq_gates  # not None: this sleeper listed its gate in it
            if gates is not None and gate in gates:
                gates.remove(gate)

    def _deadline(self, timeout: float | None) -> float | None:
        if timeout is not None and timeout > 0 and self.host.deterministic:
            raise oserror(errno.EWOULDBLOCK, "a deterministic Host cannot block: "
                                             "use non-blocking sockets and run the network")
        if timeout is None and self.host.deterministic:
            raise oserror(errno.EWOULDBLOCK, "a deterministic Host cannot block: "
                                             "use non-blocking sockets and run the network")
        return None if timeout is None else time.monotonic() + timeout

    def _block_or_fail(self, seen: int, timeout: float | None, deadline: float | None,
                       eagain: int = errno.EAGAIN) -> None:
        if timeout == 0.0:
            raise oserror(eagain)
        if not self._wait(seen, deadline):
            raise TimeoutError("timed out")

    # ------------------------------------------------------------------ bind / listen / connect
    def bind(self, addr: bytes, port: int) -> None:
        w = wire(addr)
        # inet_bind / __inet6_bind: a foreign address needs IP_FREEBIND
        # (inet_addr_valid_or_nonlocal, ipv6_can_nonlocal_bind)
        if addr not in (ANY4, ANY6) and not self.freebind and not self.host.ip.is_local(w):
            raise oserror(errno.EADDRNOTAVAIL, "cannot assign requested address")
        since = self._lock()
        try:
            if self.conn is not None or self.state != State.CLOSE or self.tb is not None:
                raise oserror(errno.EINVAL, "socket is already bound")
            self.layer.sync_tuning()
            self.layer.hashinfo.bind_socket(self, addr, port)
        finally:
            self._unlock(since)

    def listen(self, backlog: int) -> None:
        since = self._lock()
        try:
            if self.conn is not None:
                raise oserror(errno.EINVAL, "listen() on a connected socket")
            somaxconn = self.host.tuning.somaxconn
            if self.rskq_lock is None:  # owned: no other listen() races this store
                self.rskq_lock = RSKQ_LOCK.new()
            with self.rskq_lock:
                self.max_ack_backlog = max(0, min(backlog, somaxconn))
            if self.state != State.LISTEN:
                tcp_fastopen.on_listen(self, backlog)
                self.layer.sync_tuning()
                self.layer.hashinfo.listen_socket(self)
        finally:
            self._unlock(since)

    def connect(self, addr: bytes, port: int, timeout: float | None) -> None:
        since = self._lock()
        try:
            conn = self.conn
            if self.state == State.LISTEN:
                raise oserror(errno.EISCONN, "connect() on a listening socket")
            if conn is not None:
                if conn.state is CState.SYN_SENT:
                    raise oserror(errno.EALREADY)
                if conn.state is not CState.CLOSED:
                    raise oserror(errno.EISCONN)
                self.start_over()
            if self.fastopen_defer is not None:
                raise oserror(errno.EISCONN)
            if tcp_fastopen.defer_connect_locked(self, addr, port):
                return  # TCP_FASTOPEN_CONNECT: the first write sends the SYN
            self.layer.connect_locked(self, addr, port,
                                      fastopen=b"" if self.fastopen_connect else None)
            with self.wq:
                seen = self.wake_seq
        finally:
            self._unlock(since)
        if timeout == 0.0:
            raise oserror(errno.EINPROGRESS)
        deadline = self._deadline(timeout)
        conn = self.conn
        assert conn is not None
        while conn.state is CState.SYN_SENT:
            if not self._wait(seen, deadline):
                raise TimeoutError("timed out")
            seen = self.wake_seq
        if conn.state is CState.CLOSED:
            err = self._take_error() or errno.ECONNREFUSED
            raise oserror(err)

    # ------------------------------------------------------------------ accept
    def accept(self, timeout: float | None) -> TcpSock:
        if self.state != State.LISTEN:
            raise oserror(errno.EINVAL, "accept() on a socket that is not listening")
        deadline = None if timeout == 0.0 else self._deadline(timeout)
        while True:
            with self.wq:
                seen = self.wake_seq
            child = self.layer.listeners.accept(self)
            if child is not None:
                return child
            # atomic: one load of life, paired with advance(LISTEN_CLOSED) in Listeners.close
            if self.life & LISTEN_CLOSED or self.state != State.LISTEN:
                raise oserror(errno.EINVAL, "the listener was closed")
            self._block_or_fail(seen, timeout, deadline)

    # ------------------------------------------------------------------ data
    def send(self, data: bytes | memoryview, timeout: float | None, flags: int = 0,
             zc_more: bool = False, iov: tuple[int, ...] | None = None) -> int:
        """send(): MSG_DONTWAIT, MSG_MORE (the tail waits for more: TCP_NAGLE_CORK),
        MSG_EOR (the write ends a record no later write joins), MSG_NOSIGNAL,
        MSG_ZEROCOPY.  ``zc_more``: goes on with a MSG_ZEROCOPY send that queued bytes
        (no new id); ``iov``: the lengths of the buffers ``data`` gathers (sendmsg)."""
        if flags & MSG_DONTWAIT:
            timeout = 0.0
        if flags & ~(_SEND_FLAGS | tcp_errq.MSG_ZEROCOPY):
            raise oserror(errno.EOPNOTSUPP, "send supports MSG_DONTWAIT, MSG_MORE, "
                          "MSG_EOR, MSG_NOSIGNAL and MSG_ZEROCOPY")
        more, eor = bool(flags & MSG_MORE), bool(flags & MSG_EOR)
        view = memoryview(data)
        total = len(view)
        deadline = None if timeout == 0.0 else self._deadline(timeout)
        sent = 0
        zerocopy = bool(flags & tcp_errq.MSG_ZEROCOPY) and total > 0
        while True:
            # atomic: one attribute load (wake_seq is stored under wq by wakeup); _wait
            # compares again under wq, so a stale value costs one retry, never a lost wakeup
            seen = self.wake_seq
            since = self._lock()
            waiting: Connection | None = None
            try:
                zc = 0 if not zerocopy else 2 if zc_more or sent else 1
                sent += self._send_locked(view[sent:], zc, timeout is not None,
                                          iov_after(iov, sent) if iov and sent else iov, more,
                                          eor)
                if sent < total and timeout != 0.0:
                    waiting = self.wait_connect_begin_locked()
            except OSError as exc:
                if not sent:
                    raise
                self._hold_err(exc)  # bytes were queued: count them now, report the
                return sent  # error on the next call (sk_err stays set)
            finally:
                self._unlock(since)
            # Blocking send queues everything (Linux); with a timeout or non-blocking,
            # the first bytes queued end the call (Python's poll-then-send).
            if sent == total or (sent and timeout is not None):
                return sent
            try:
                self._block_or_fail(seen, timeout, deadline)
            except TimeoutError:
                if sent:
                    return sent
                raise
            finally:
                if waiting is not None:
                    self.wait_connect_end(waiting)

    def wait_connect_begin_locked(self) -> Connection | None:
        """A writer is about to wait for the handshake (sk_stream_wait_connect, and
        inet_wait_for_connect's writebias for a Fast Open sendto): it counts in the
        connection's ``write_pending`` until ``wait_connect_end``, so the SYN-ACK's ACK
        waits for its data.  None when no handshake is under way.  Socket lock held."""
        conn = self.conn
        if conn is None or conn.state is not CState.SYN_SENT:
            return None
        conn.write_pending += 1
        return conn

    def wait_connect_begin(self) -> Connection | None:
        """``wait_connect_begin_locked`` for a caller that does not hold the lock."""
        since = self._lock()
        try:
            return self.wait_connect_begin_locked()
        finally:
            self._unlock(since)

    def wait_connect_end(self, conn: Connection) -> None:
        """The writer counted by ``wait_connect_begin`` stopped waiting."""
        since = self._lock()
        try:
            conn.write_pending -= 1
        finally:
            self._unlock(since)

    def _hold_err(self, exc: OSError) -> None:
        """A call that had moved data met ``exc``: it returns what it moved, and the next
        call reports the error (``_raise_held_err``)."""
        self.held_err = exc.errno or errno.EIO

    def _raise_held_err(self) -> None:
        err, self.held_err = self.held_err, 0
        raise oserror(err)

    def _send_locked(self, view: memoryview, zc: int = 0, partial_ends: bool = True,
                     iov: tuple[int, ...] | None = None, more: bool = False,
                     eor: bool = False) -> int:
        """One round of a send; ``zc``: MSG_ZEROCOPY, its first (1) or a later round (2);
        ``partial_ends``: queueing part of ``view`` ends the call (a timestamp request);
        ``more``, ``eor``: MSG_MORE, MSG_EOR."""
        if self.held_err:
            self._raise_held_err()
        conn = self.conn
        if conn is None and self.fastopen_defer is not None:
            return tcp_fastopen.send_deferred_locked(self, view, zc == 1)
        if conn is None or self.state == State.LISTEN:
            raise oserror(errno.EPIPE)
        if self.soft_err and conn.state is CState.CLOSED:
            err, self.soft_err = self.soft_err, 0
            raise oserror(err)
        if conn.state is CState.SYN_SENT and conn.error is None:
            return 0  # sk_stream_wait_connect: nothing is queued before the handshake
        now = self.host.now()
        if not len(view):
            return 0
        n: int
        if zc and self.zerocopy or self.ts is not None:
            n = self.engine(tcp_errq.send_noted, self, conn, view, now, zc, partial_ends, iov)
        else:
            n = self.engine_send(conn, view, now, more, eor)
        return n

    def sendall(self, data: bytes | memoryview, timeout: float | None) -> None:
        view = data if type(data) is memoryview else memoryview(data)
        deadline = None if timeout is None else time.monotonic() + timeout
        sent = 0
        if len(view) and not self.host.deterministic:
            # send()'s first round, inline: the send buffer usually takes everything, and
            # then none of send()'s blocking set-up is needed (an error with nothing
            # queued is raised as send() raises it; a deterministic Host's blocking call
            # fails in send() before queueing anything)
            since = self._lock()
            try:
                sent = self._send_locked(view)
            finally:
                self._unlock(since)
        while sent < len(view):
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if remaining == 0.0 and timeout != 0.0:
                raise TimeoutError("timed out")
            sent += self.send(view[sent:], remaining)  # a view: no copy of the rest

    def recv(self, bufsize: int, timeout: float | None, flags: int = 0) -> bytes:
        if bufsize < 0:
            raise ValueError("negative buffersize in recv")
        if flags & MSG_DONTWAIT:
            timeout = 0.0
        if flags & ~(MSG_DONTWAIT | MSG_WAITALL | MSG_PEEK):
            raise oserror(errno.EOPNOTSUPP,
                          "recv supports MSG_DONTWAIT, MSG_WAITALL and MSG_PEEK")
        deadline = None if timeout == 0.0 else self._deadline(timeout)
        if flags & MSG_PEEK:
            # MSG_PEEK|MSG_WAITALL waits for bufsize bytes (or EOF) and returns them all,
            # still queued (tcp_recvmsg's target with peek_seq)
            want = bufsize if flags & MSG_WAITALL and timeout != 0.0 else 1
            return self._recv_once(bufsize, timeout, deadline, peek_want=want)
        if not flags & MSG_WAITALL or timeout == 0.0:
            return self._recv_once(bufsize, timeout, deadline)
        # MSG_WAITALL: until bufsize bytes, EOF, an error or the timeout (then what we got)
        parts: list[bytes] = []
        got = 0
        while got < bufsize:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                chunk = self._recv_once(bufsize - got, timeout, deadline)
            except TimeoutError:
                if got:
                    break
                raise
            except OSError as exc:
                if not got:
                    raise
                self._hold_err(exc)
                break
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
            if remaining == 0.0:
                break
        return b"".join(parts)

    def _recv_once(self, bufsize: int, timeout: float | None, deadline: float | None,
                   peek_want: int = 0) -> bytes:
        """One read; ``peek_want`` > 0: MSG_PEEK, ready once that many bytes are queued."""
        layer = self.layer
        defer = self.host.tuning.tcp_defer_free
        while True:
            seen = self.wake_seq  # atomic: attribute load; see send()
            consumed: list[Buffer] = []
            since = self._lock()
            try:
                if peek_want:
                    data = self._peek_locked(bufsize, peek_want)
                else:
                    data = self._recv_locked(bufsize, consumed)
                if not defer:
                    layer.buffers.free_now(consumed)  # legacy: inside the lock section
            finally:
                self._unlock(since)
            if defer and consumed:
                layer.buffers.free_deferred(consumed)  # after release_sock (seed 001)
            if data is not None:
                return data
            self._block_or_fail(seen, timeout, deadline)

    def _reader_locked(self) -> Connection | None:
        """The connection a read takes bytes from, after a held error (ENOTCONN when
        there is none); None: reading was shut down and nothing is left queued."""
        if self.held_err:
            self._raise_held_err()
        conn = self.conn
        if conn is None and self.fastopen_defer is not None:
            raise oserror(errno.EAGAIN)  # SYN_SENT, the SYN not sent yet
        if conn is None or self.state == State.LISTEN:
            raise oserror(errno.ENOTCONN)
        if self.shutdown_rd and not conn.readable:
            return None
        return conn

    def _recv_locked(self, bufsize: int, consumed: list[Buffer]) -> bytes | None:
        conn = self._reader_locked()
        if conn is None:
            return b""
        data = self.engine_recv(conn, bufsize, self.host.now())
        if data is None:
            return None
        self._consume_skbs(len(data), consumed)
        return data

    def _peek_locked(self, bufsize: int, want: int) -> bytes | None:
        """MSG_PEEK: the bytes recv() would return, left queued; None until ``want`` of
        them (or EOF) are there.  A pending error is reported as recv() reports it."""
        conn = self._reader_locked()
        if conn is None:
            return b""
        more_may_come = not (conn.state.fin_received or conn.state is CState.CLOSED
                             or conn.error is not None)
        if 0 < conn.readable < min(want, bufsize) and more_may_come:
            return None  # MSG_WAITALL: not all there yet
        try:
            return conn.peek(bufsize)
        except BlockingIOError:
            return None

    def _consume_skbs(self, n: int, consumed: list[Buffer]) -> None:
        skbs = self.rx_skbs
        while n > 0 and skbs:
            head = skbs[0]
            if head[1] <= n:
                n -= head[1]
                buf = skbs.popleft()[0]
                if buf is not None:  # None: bytes delivered without a pooled buffer
                    consumed.append(buf)
            else:
                head[1] -= n
                n = 0

    def recv_errqueue(self, bufsize: int, ancbufsize: int
                      ) -> tuple[bytes, list[tuple[int, int, bytes]], int]:
        """``recvmsg(MSG_ERRQUEUE)`` (``tcp_errq.recv_errqueue``): never waits."""
        since = self._lock()
        try:
            result = tcp_errq.recv_errqueue(self, bufsize, ancbufsize)
        finally:
            self._unlock(since)
        return result

    def _take_error(self) -> int:
        conn = self.conn
        if conn is not None and conn.error is not None:
            err, conn.error = conn.error, None
            return err
        err, self.soft_err = self.soft_err, 0
        return err

    # ------------------------------------------------------------------ shutdown / close
    def shutdown(self, how: int) -> None:
        if how not in (SHUT_RD, SHUT_WR, SHUT_RDWR):
            raise oserror(errno.EINVAL)
        if self.state == State.LISTEN:
            if how != SHUT_WR:
                self.layer.listeners.close(self, forget=False)
            return
        since = self._lock()
        try:
            conn = self.conn
            if conn is None or conn.state is CState.CLOSED:
                raise oserror(errno.ENOTCONN)
            if how in (SHUT_RD, SHUT_RDWR):
                self.shutdown_rd = True
            if how in (SHUT_WR, SHUT_RDWR) and conn.state is not CState.SYN_SENT:
                self.engine(conn.shutdown_write, self.host.now())
            else:
                self.engine()
            self.wakeup()
        finally:
            self._unlock(since)

    def close(self) -> None:
        # atomic: one load of life; a close racing this one on the same socket is the
        # user's own race (the socket lock below orders them)
        life = self.life
        if life & USER_CLOSED:
            return
        if life & LISTEN_CLOSED or self.state == State.LISTEN:
            advance(self, USER_CLOSED)
            self.layer.listeners.close(self, forget=True)
            return
        unread: list[Buffer] = []
        since = self._lock()
        try:
            advance(self, USER_CLOSED)
            conn = self.conn
            if conn is not None:
                now = self.host.now()
                if self.linger == (True, 0):
                    if conn.state is not CState.CLOSED:
                        self.host.counters.inc("TcpExtTCPAbortOnLinger")
                    self.engine(conn.abort, now)
                else:
                    self.engine(conn.close, now)
            unread = self.take_receive_queue()
        finally:
            self._unlock(since)
        self.layer.buffers.free_deferred(unread)
        if self.conn is None:
            self.layer.release_unconnected(self)
        elif self.linger[0] and self.linger[1] > 0 and not self.host.deterministic:
            self._linger_wait(self.linger[1])
        # The teardown takes UNHASHED before it reads USER_CLOSED; we took USER_CLOSED
        # before reading UNHASHED (both under wq, so the later taker sees the earlier):
        # at least one side releases the socket (``forget`` takes FORGOTTEN once).  Not
        # FINISHED: ``post`` takes it when it claims the teardown, before the socket
        # leaves ehash and bhash, and a socket forgotten then would leave ``sockets``
        # while its table entries stay behind.
        if self.life & UNHASHED:
            self.layer.forget(self)

    def take_time_wait_reuse(self) -> tuple[int, tuple[int, int] | None]:
        """What a TIME_WAIT this connect took over (tcp_twsk_unique, in the tables) left
        for the new incarnation: its ISN (0: choose one) and its (TS.Recent, stamp), or
        None without timestamps; taken once.  Socket lock held."""
        iss = self.write_seq
        ts_recent = (self.ts_recent, self.ts_recent_stamp) if self.ts_recent_stamp else None
        self.write_seq = self.ts_recent = self.ts_recent_stamp = 0
        return iss, ts_recent

    def abort(self) -> None:
        """close() with SO_LINGER {1, 0}: RST (a Host shutting down)."""
        self.linger = (True, 0)
        self.close()

    def start_over(self) -> None:
        """connect() after a failed attempt (tcp_disconnect): the old connection goes
        and the life starts anew; EALREADY while the failed attempt is still tearing
        down.  Socket lock held."""
        if not reopen(self):
            raise oserror(errno.EALREADY)  # the failed attempt is still tearing down
        self.conn = None

    def _linger_wait(self, seconds: int) -> None:
        """SO_LINGER {1, t}: close() waits until the FIN is acknowledged, or t seconds."""
        conn = self.conn
        deadline = time.monotonic() + seconds
        # atomic: one load of life per round, paired with advance(FINISHED) in post
        while conn is not None and not self.life & FINISHED and conn.state not in (
                CState.FIN_WAIT_2, CState.TIME_WAIT, CState.CLOSED):
            with self.wq:
                seen = self.wake_seq
            if not self._wait(seen, deadline):
                return

    def destroy(self) -> None:
        """The last reference went away (``put_entry``): release the poll fd, and break
        the socket lock's reference cycle so the socket is freed at once (no collector)."""
        self.sl.detach()
        poll, self.poll = self.poll, None
        if poll is not None:
            poll.close()
