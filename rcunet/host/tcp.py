"""TCP on a Host: the per-host tables (``TcpHashInfo``: ehash with TIME_WAIT entries,
bhash/bhash2, lhash2, connect-time port selection), the receive path, the listener's SYN
and accept queues, SYN cookies, timers, TIME_WAIT and teardown.  Sockets are
``rcunet.host.tcp_sock.TcpSock``; the engine is ``rcunet.core.tcp.Connection``.

Receive path (``input``, a receive worker; Linux ``tcp_v4_rcv``):

1. parse; verify the checksum unless the interface offloads it (clean in-memory links);
2. look the 4-tuple up in ehash with no lock (pinned, re-checked: ``EstablishedTable``);
   an IPv4 miss retries the v4-mapped form (dual-stack sockets);
3. a socket: ``bh_deliver`` processes the segment under ``slock`` or, while a user thread
   owns the socket, appends it to the backlog that ``release_sock`` drains;
   a TIME_WAIT entry: ``_tw_input``; nothing: the listener table; nothing again: RST.

Segments the engine produces are queued on the socket's ``outbox`` under the socket lock
and transmitted by ``flush`` after the lock is dropped, so an inline link that runs the
peer's receive path in this thread never runs it under our lock.

Listener (Linux's request-socket design, FreeBSD's "fully initialised" rule of seed 004):
a SYN creates a child socket in SYN_RECV that lives in ehash and counts in the listener's
SYN queue; the child is appended to the accept queue only when the handshake completed
(``_publish_child``), so ``accept`` needs only the listener's ``rskq_lock``.  With
``Tuning.accept_no_global_lock`` False, a FreeBSD-9.2-style global ``tcbinfo_lock`` is
taken on accept, SYN processing and teardown (the "before" of seed 004): around the
accept queue, the listener's SYN and handshake-completing ACK, TIME_WAIT and unhashing,
and, as 9.2's ``tcp_input`` took ``INP_INFO_WLOCK``, around the input of every segment
that carries SYN, FIN or RST or reaches a connection not ESTABLISHED (``_input_global``).

Counters use nstat names (TcpActiveOpens, TcpExtListenOverflows, TcpExtTWRecycled, ...):
the engine's per-connection counters are moved to ``host.counters`` after each call.

For the seed-001 lab: ``TcpSock.lock_stats()`` (owner-section hold times, deepest backlog,
backlog drops), ``TcpLayer.lock_hold_ns``/``lock_holds`` (every socket of the host) and
``TcpLayer.deferred`` (buffers deferred to / drained by their allocating worker).

Fast paths a benchmark can use: on a clean in-memory link (``checksum_offload``) input
skips checksum verification and output leaves the checksum to the link (loopback and
on-link peers only), and ``inline_rx`` links run the peer's input in the sending thread.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import random
import threading
from functools import partial
from typing import TYPE_CHECKING, Any

from rcunet.core.tcp import (
    Closed,
    Connection,
    Counters,
    DataReceived,
    Established,
    ListenAction,
    TimeWaitEntered,
    listen_action,
    reset_for,
    syncookies,
)
from rcunet.core.tcp import State as CState
from rcunet.core.tcp.isn import initial_sequence, timestamp_offset
from rcunet.host.ip import LIMITED_BROADCAST, Delivery, is_multicast
from rcunet.host.tcp_sock import SEGMENT_OVERHEAD, TcpSock, oserror, wire
from rcunet.sync.deferred import Buffer, BufferPool, DeferredFreeList, PerThreadCounter
from rcunet.sync.hooks import yield_point
from rcunet.sync.lock import LockClass
from rcunet.sync.shared import lockfree_read_slots
from rcunet.tables import TcpHashInfo
from rcunet.tables.bind import v6_key
from rcunet.tables.ehash import destroy_entry, put_entry
from rcunet.tables.entry import AF_INET, AF_INET6, State, TableEntry, TimeWaitEntry, is_v4mapped
from rcunet.wire import icmpv4, icmpv6, tcp
from rcunet.wire.errors import WireError
from rcunet.wire.seqnum import gt, le, lt

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.host.routecache import DstEntry

TCBINFO_LOCK = LockClass("tcbinfo_lock")
MS = 1_000_000
MASK32 = 0xFFFFFFFF
_MAPPED = b"\0" * 10 + b"\xff\xff"
#: Pooled receive buffers ("skbs"): one size class for Ethernet-sized segments, one for
#: loopback's 64 KB ones.
SMALL_SKB, LARGE_SKB = 2048, 65536
_SKB_CLASSES = ((SMALL_SKB, 512), (LARGE_SKB, 64))
#: Syncookie ACKs are checked only this long after the SYN queue last overflowed.
COOKIE_WINDOW = 2 * 60 * 1_000_000_000
#: Address pairs whose timestamp offset ``_ts_offset`` remembers.
TS_OFFSET_CACHE = 4096

_TABLE_STATE = {
    CState.CLOSED: State.CLOSE, CState.LISTEN: State.LISTEN, CState.SYN_SENT: State.SYN_SENT,
    CState.SYN_RECEIVED: State.SYN_RECV, CState.ESTABLISHED: State.ESTABLISHED,
    CState.FIN_WAIT_1: State.FIN_WAIT1, CState.FIN_WAIT_2: State.FIN_WAIT2,
    CState.CLOSE_WAIT: State.CLOSE_WAIT, CState.CLOSING: State.CLOSING,
    CState.LAST_ACK: State.LAST_ACK, CState.TIME_WAIT: State.TIME_WAIT,
}


class TcpTimeWait(TimeWaitEntry):
    """A TIME_WAIT entry with what answering the old peer needs (``tcp_timewait_sock``)."""

    __slots__ = lockfree_read_slots("rcv_nxt", "ts_ok", "ts_offset", "window", "timer",
                                    base=TimeWaitEntry)

    def __init__(self, sk: TableEntry, snap: dict[str, int], *, now: int,
                 expires_at: int) -> None:
        super().__init__(sk, now=now, expires_at=expires_at, snd_nxt=snap["snd_nxt"],
                         ts_recent=snap["ts_recent"], ts_recent_stamp=snap["ts_recent_stamp"])
        self.rcv_nxt = snap["rcv_nxt"]
        self.ts_ok = bool(snap["ts_ok"])
        self.ts_offset = snap["ts_offset"]
        self.window = snap["window"]
        self.timer: Any = None


class TcpLayer:
    """The Host's TCP.

    Concurrency:
      hashinfo    internally synchronised tables (lock order bhash > bhash2 > ehash).
      sockets     guarded-by: _sockets_lock (every socket not yet released, for
                  ``close_all`` and leak checks).
      pools       per-thread BufferPools (threading.local), registered in ``deferred``.
      tcbinfo     taken only with ``accept_no_global_lock`` off; outermost lock.
      secret      immutable after __init__.
    """

    def __init__(self, host: Host) -> None:
        self.host = host
        self.hashinfo = TcpHashInfo(host.tuning, rng=random.Random(host.seed ^ 0x7C9),
                                    clock=host.now, counters=host.counters)
        self.secret = random.Random(host.seed ^ 0x15C).getrandbits(512).to_bytes(64, "big")
        self.sockets: set[TcpSock] = set()  # guarded-by: _sockets_lock
        self._sockets_lock = threading.Lock()
        self.deferred = DeferredFreeList()
        self._local = threading.local()
        self._pool_ids = itertools.count()
        self.tcbinfo = TCBINFO_LOCK.new()
        self._ts_offsets: dict[tuple[bytes, bytes], int] = {}  # see _ts_offset
        self.lock_hold_ns = PerThreadCounter()
        self.lock_holds = PerThreadCounter()
        host.ip.handlers[tcp.PROTOCOL] = self.input
        host.ip.error_handlers[tcp.PROTOCOL] = self.icmp_error

    # ------------------------------------------------------------------ helpers
    def _global(self) -> contextlib.AbstractContextManager[Any]:
        """The legacy global connection-table lock, or nothing (seed 004)."""
        if self.host.tuning.accept_no_global_lock:
            return contextlib.nullcontext()
        return self.tcbinfo

    def _input_global(self, sk: TcpSock, seg: tcp.Repr) -> Any:
        """FreeBSD 9.2's ``tcp_input``: the global write lock for a state-changing segment
        (SYN, FIN or RST) or any segment to a connection not ESTABLISHED, so the
        handshake, FIN and RST of a short connection all run under it.  Nothing in modern,
        and never for an ESTABLISHED connection's data and ACKs.  Taken outside slock
        (tcbinfo is the outermost lock) and released before the outbox is transmitted,
        so an inline link never enters the peer's input under it.  Returns the lock to
        take, or None (callers test it: no context-manager object per segment)."""
        if self.host.tuning.accept_no_global_lock:
            return None
        if seg.flags & (tcp.SYN | tcp.FIN | tcp.RST) or sk.state != State.ESTABLISHED:
            return self.tcbinfo
        return None

    def sync_tuning(self) -> None:
        """The tables read the Host's current Tuning (``Host.set_tuning`` replaces it)."""
        if self.hashinfo.tuning is not self.host.tuning:
            self.hashinfo.set_tuning(self.host.tuning)

    def _ts_offset(self, laddr: bytes, faddr: bytes) -> int:
        """The address pair's TSval offset (a keyed hash: the same for every connection
        between two addresses), remembered for the next connection.  Races are
        harmless: every thread computes the same value; dict subscript and set are
        atomic.  A subscript, not ``.get``: the key is a fresh tuple each time, and on
        free-threaded 3.13 ``dict.get`` then re-takes the dict's lock it already holds
        (``rcunet.sync.ftbench``), which spun on every connection."""
        key = (laddr, faddr)
        offsets = self._ts_offsets  # atomic: one attribute load (pairs with the reset)
        try:
            return offsets[key]
        except KeyError:  # the first connection between these addresses since a reset
            offset = timestamp_offset(self.secret, laddr, faddr)
        if len(offsets) >= TS_OFFSET_CACHE:
            offsets = self._ts_offsets = {}  # one store: bounded by the peers seen lately
        offsets[key] = offset
        return offset

    def record_hold(self, held_ns: int) -> None:
        self.lock_hold_ns.add(held_ns)
        self.lock_holds.add()

    # ------------------------------------------------------------------ receive buffers
    def _pools(self) -> tuple[BufferPool, BufferPool]:
        pools: tuple[BufferPool, BufferPool] | None = getattr(self._local, "pools", None)
        if pools is None:
            serial = next(self._pool_ids)
            made = []
            for size, capacity in _SKB_CLASSES:
                pool = BufferPool((self.host.id, serial, size), size, capacity)
                pool.bind_owner_thread()
                self.deferred.register(pool.owner, pool.recycle)  # type: ignore[arg-type]
                made.append(pool)
            pools = (made[0], made[1])
            self._local.pools = pools
        return pools

    def _alloc_skb(self, payload: memoryview) -> tuple[Buffer | None, memoryview]:
        """A pooled buffer holding ``payload``.  First the pool takes back what user
        threads handed to this worker (skb_defer_free_flush, which Linux runs once per
        softirq round; here when the worker needs a buffer of that pool, so segments
        without data pay nothing)."""
        n = len(payload)
        small, large = self._pools()
        pool = small if n <= SMALL_SKB else large
        if n > pool.buffer_size:
            return None, payload
        self.deferred.drain(pool.owner)
        buf = pool.alloc()
        view = buf.view[:n]
        view[:] = payload  # one copy (see Buffer.view)
        buf.length = n
        return buf, view

    def free_buffer(self, buf: Buffer) -> None:
        self.deferred.free(buf, buf.owner)

    def free_buffers_deferred(self, bufs: list[Buffer]) -> None:
        free = self.deferred.free
        for buf in bufs:
            free(buf, buf.owner)

    def free_buffers_now(self, bufs: list[Buffer]) -> None:
        free_now = self.deferred.free_now
        for buf in bufs:
            free_now(buf, buf.owner)

    # ------------------------------------------------------------------ sockets
    def new_socket(self, family: int) -> TcpSock:
        if family not in (AF_INET, AF_INET6):
            raise oserror(errno.EAFNOSUPPORT)
        sk = TcpSock(self, family)
        with self._sockets_lock:
            self.sockets.add(sk)
        return sk

    def forget(self, sk: TcpSock) -> None:
        """Drop the owner's reference of a socket that is out of every table."""
        with self._sockets_lock:
            if sk.forgotten:
                return
            sk.forgotten = True
            self.sockets.discard(sk)
        leftovers = [skb[0] for skb in sk.rx_skbs if skb[0] is not None]
        sk.rx_skbs.clear()
        self.free_buffers_deferred(leftovers)
        if sk.ref.put():
            destroy_entry(sk)

    def release_unconnected(self, sk: TcpSock) -> None:
        with self._global():
            self.hashinfo.close(sk)
        sk.finished = True

    def close_all(self) -> None:
        """Host shutdown: abort every connection, close listeners, drop TIME_WAIT."""
        with self._sockets_lock:
            sockets = list(self.sockets)
        for sk in sockets:
            if sk.state == State.LISTEN or sk.listen_closed:
                sk.user_closed = True
                self.close_listener(sk, forget=True)
            elif not sk.user_closed:
                sk.linger = (True, 0)
                sk.close()
            else:
                self._abort_orphan(sk)
        for entry in list(self.hashinfo.ehash.entries()):
            if isinstance(entry, TcpTimeWait):
                self._tw_kill(entry)

    # ------------------------------------------------------------------ active open
    def connect_locked(self, sk: TcpSock, addr: bytes, port: int) -> None:
        """tcp_v4_connect / tcp_v6_connect: route, source port, SYN.  Socket lock owned."""
        self.sync_tuning()
        host = self.host
        dst = wire(addr)
        if sk.family == AF_INET6 and is_v4mapped(addr) and sk.v6only:
            raise oserror(errno.ENETUNREACH)
        entry = host.dst_cache.lookup(dst, sk.bound_dev)
        if entry is None:
            raise oserror(errno.ENETUNREACH)
        try:
            local = host.ip.is_local(dst)
            src = dst if local else entry.src
            mtu = host.loopback.mtu if local else entry.mtu
            offload = _offloads(host, entry, dst, local)
        finally:
            entry.release()
        saddr = _family_form(sk.family, src)
        self.hashinfo.connect(sk, addr, port, saddr=saddr)
        now = host.now()
        laddr = wire(sk.laddr)
        iss = sk.write_seq or initial_sequence(self.secret, laddr, sk.lport, dst, port, now)
        # A TIME-WAIT tuple reused (tcp_twsk_unique) hands on its TS.Recent, so PAWS
        # rejects the previous incarnation's old duplicates on the new connection.
        ts_recent = (sk.ts_recent, sk.ts_recent_stamp) if sk.ts_recent_stamp else None
        sk.write_seq = sk.ts_recent = sk.ts_recent_stamp = 0
        conn = Connection.connect(
            local_port=sk.lport, remote_port=port, iss=iss, now=now,
            options=sk.conn_options(mtu - (40 if len(dst) == 4 else 60)),
            ts_offset=self._ts_offset(laddr, dst), counters=Counters(), ts_recent=ts_recent)
        sk.conn = conn
        sk.tx_csum_offload = offload
        self.after_engine(sk)

    # ------------------------------------------------------------------ input
    def input(self, info: Delivery, payload: memoryview) -> None:
        if info.to_multicast:
            return  # tcp_v4_rcv: only PACKET_HOST (never answer a broadcast with a RST)
        offload = info.iface.checksum_offload
        buf: Buffer | None = None
        view = payload
        n = len(payload)
        if n > 20 and n > (payload[12] >> 4) << 2:  # carries data: copy it into an skb
            buf, view = self._alloc_skb(payload)
        try:
            seg = tcp.Repr.parse(view) if offload else tcp.Repr.parse(view, info.src, info.dst)
        except WireError:
            self.host.counters.inc("TcpInErrs")
            self._free(buf)
            return
        if seg.checksum_ok is False:
            self.host.counters.inc("TcpInCsumErrors")
            self.host.counters.inc("TcpInErrs")
            self._free(buf)
            return
        src, dst, ifindex = info.src, info.dst, info.iface.ifindex
        found = self._lookup_established(dst, seg.dst_port, src, seg.src_port, ifindex)
        if found is not None:
            try:
                if isinstance(found, TcpSock):
                    self._deliver(found, seg, buf)
                    buf = None
                elif isinstance(found, TcpTimeWait):
                    self._tw_input(found, seg, info)
            finally:
                put_entry(found)
                self._free(buf)
            return
        try:
            listener = self.hashinfo.listen.lookup(dst, seg.dst_port, src, seg.src_port,
                                                   dif=ifindex)
            if isinstance(listener, TcpSock):
                self._listen_input(listener, seg, info)
            else:
                self._no_socket(seg, info)
        finally:
            self._free(buf)

    def _free(self, buf: Buffer | None) -> None:
        if buf is not None:
            self.deferred.free(buf, buf.owner)

    def _lookup_established(self, laddr: bytes, lport: int, faddr: bytes, fport: int,
                            dif: int) -> TableEntry | None:
        ehash = self.hashinfo.ehash
        found = ehash.lookup(laddr, lport, faddr, fport, dif)
        if found is None and len(laddr) == 4:  # a dual-stack IPv6 socket keys v4-mapped
            found = ehash.lookup(_MAPPED + laddr, lport, _MAPPED + faddr, fport, dif)
        return found

    def _deliver(self, sk: TcpSock, seg: tcp.Repr, buf: Buffer | None) -> None:
        listener = sk.listener
        if (listener is not None and seg.flags & tcp.ACK and not seg.flags & (tcp.SYN | tcp.RST)
                and self._acceptq_full(listener)):
            # tcp_check_req: the handshake cannot complete into a full accept queue; the
            # child stays in SYN_RECV and the peer retransmits.
            self.host.counters.inc("TcpExtListenOverflows")
            self.host.counters.inc("TcpExtListenDrops")
            self._free(buf)
            return
        # tcp_v4_rcv's bh_lock_sock / sock_owned_by_user / tcp_add_backlog, spelled out
        # (SocketLock.bh_deliver's steps without its two calls per segment)
        sl = sk.sl
        woke = False
        legacy = self._input_global(sk, seg)
        if legacy is not None:
            legacy.acquire()
        try:
            with sl.slock:
                if not sl.owned:
                    conn = sk.conn
                    if conn is None:
                        self._free(buf)
                    else:
                        conn.on_segment(seg, self.host.now())
                        woke = self.after_engine(sk, buf, wake=False)
                    queued = True
                else:
                    queued = sl.add_backlog_locked((seg, buf),
                                                   len(seg.payload) + SEGMENT_OVERHEAD)
        finally:
            if legacy is not None:
                legacy.release()
        if not queued:
            sk._backlog_drop((seg, buf))
        if woke:
            # After slock is released, so the woken owner does not queue on it (the
            # state it waits for was changed under slock: visible before this bump).
            sk.wakeup()
        self.post(sk)

    def process_segment_locked(self, sk: TcpSock, seg: tcp.Repr, buf: Buffer | None) -> None:
        """sk_backlog_rcv: one segment under the socket lock (slock or the owner)."""
        conn = sk.conn
        if conn is None:
            self._free(buf)
            return
        legacy = self._input_global(sk, seg)  # the owner holds no slock (release_sock)
        if legacy is not None:
            legacy.acquire()
        try:
            conn.on_segment(seg, self.host.now())
            self.after_engine(sk, buf)
        finally:
            if legacy is not None:
                legacy.release()

    def after_engine(self, sk: TcpSock, buf: Buffer | None = None, wake: bool = True) -> bool:
        """Collect what the engine produced: segments to the outbox, events to the
        socket (wakeups, accept queue, teardown), counters, the timer.  Socket lock held."""
        conn = sk.conn
        if conn is None:
            return False
        segments = conn.take_segments()
        if segments:
            sk.outbox.extend(segments)
        events = conn.take_events()
        for event in events:
            kind = type(event)
            if isinstance(event, DataReceived):
                # Every delivery gets an entry, with a buffer or not: the receive queue
                # keeps views of the delivered bytes (no copy), so a buffer goes back to
                # its pool only once all the bytes delivered with it were read
                # (TcpSock._consume_skbs counts them off in delivery order).
                sk.rx_skbs.append([buf, event.length])
                buf = None
            elif kind is Established:
                if sk.listener is not None:
                    self._publish_child(sk)
            elif kind is TimeWaitEntered:
                sk.teardown = ("time_wait", _tw_snapshot(sk, conn))
            elif kind is Closed:
                if sk.teardown is None:
                    sk.teardown = ("close", None)
        if buf is not None:
            self.deferred.free(buf, buf.owner)
        if not sk.finished:
            sk.state = _TABLE_STATE[conn.state]
        if conn.counters.values:  # a dict's truth: no take() when nothing was counted
            # the engine's counts to the host's: Counters.inc per name, with the shard
            # fetched once (most engine calls count something)
            shard = self.host.counters.shard()
            for name, n in conn.counters.take().items():
                shard[name] = shard.get(name, 0) + n  # owner: this thread only
        if events and wake:
            sk.wakeup()
        elif sk.poll is not None:
            sk.update_poll()
        self.arm_timer_locked(sk)
        return bool(events) and not wake  # the caller wakes the socket after unlocking

    def apply_options_locked(self, sk: TcpSock) -> None:
        conn = sk.conn
        if conn is None or conn.state is CState.CLOSED:
            return
        nagle_was_on = not conn.options.nodelay
        conn.options = sk.live_options(conn.options)
        if nagle_was_on and conn.options.nodelay and conn.state.synchronized:
            # __tcp_sock_set_nodelay: turning Nagle off pushes what it holds
            # (tcp_push_pending_frames)
            conn.push_pending(self.host.now())
            self.after_engine(sk)
        if conn.options.keepalive and conn.state.synchronized:
            # SO_KEEPALIVE / TCP_KEEPIDLE restart the keepalive timer (tcp_reset_keepalive_timer)
            conn.timers.keepalive_at = self.host.now() + conn.options.keepalive_time
        elif not conn.options.keepalive:
            conn.timers.keepalive_at = None
        self.arm_timer_locked(sk)

    # ------------------------------------------------------------------ output
    def post(self, sk: TcpSock) -> None:
        """After a socket-lock section: transmit, then any teardown the engine asked for
        (only when nobody owns the socket; the owner's own ``post`` does it)."""
        if sk.outbox:
            self.flush(sk)
        if sk.teardown is not None and not sk.sl.owned:  # atomic loads; re-checked below
            with sk.sl.slock:
                if sk.sl.owned:
                    return
                todo, sk.teardown = sk.teardown, None
                # One teardown per connection: between taking TIME_WAIT here and its
                # hashdance, sk is still hashed, and another thread's segment (a RST
                # answering our ACK of a retransmitted FIN) can make the engine ask for
                # a close too.  Linux has no such window (tcp_time_wait runs under the
                # socket lock); the later request is dropped, as RFC 1337 would drop
                # that RST in TIME_WAIT.  ``finished`` is stored under slock, where
                # every taker reads it.
                if todo is not None:
                    if sk.finished:
                        todo = None
                    else:
                        sk.finished = True
            if todo is not None:
                if todo[0] == "time_wait":
                    self._enter_time_wait(sk, todo[1])
                else:
                    self._finish(sk)

    def flush(self, sk: TcpSock) -> None:
        """Transmit the outbox.  One transmitter per socket at a time (trylock, like
        qdisc_run): a thread that finds it busy leaves its segments to the holder, which
        loops until the outbox is empty; the outer loop catches a late append.

        The transmitter also owns the socket's pinned route (``sk.dst``, Linux's
        sk_dst_cache): each segment goes out through it while the route cache has not
        been invalidated since (``DstCache.current``), with no lookup and no refcount
        traffic; a stale entry is dropped and looked up again.  Once the socket is
        ``finished`` the route is released, by whoever transmits last: a transmitter
        re-checks after letting go of ``xmit`` (``_finish`` may have found it busy)."""
        outbox = sk.outbox
        xmit = sk.xmit
        while outbox or (sk.finished and sk.dst is not None):  # atomic: attribute loads
            if not xmit.acquire(False):
                return
            try:
                if outbox:
                    self._transmit_outbox_xmit(sk, outbox)
                if sk.finished:
                    self._drop_route_xmit(sk)
            finally:
                xmit.release()

    def _transmit_outbox_xmit(self, sk: TcpSock, outbox: Any) -> None:
        # one load of the key: a connected socket's addresses no longer change
        laddr, _lport, faddr, _fport = sk.key
        # wire(), inlined (a 4-byte address never equals the 12-byte v4-mapped prefix)
        src = laddr[12:] if laddr[:12] == _MAPPED else laddr
        dst = faddr[12:] if faddr[:12] == _MAPPED else faddr
        offload = sk.tx_csum_offload
        checksum = not offload
        dst_cache = self.host.dst_cache
        output_pinned = self.host.ip.output_pinned
        while True:
            try:
                seg = outbox.popleft()  # atomic: deque.popleft
            except IndexError:
                break
            # _route_xmit's keep-the-pinned-route test, inlined (once per segment)
            route = sk.dst
            if route is None or route.dst != dst or sk.finished \
                    or not dst_cache.current(route):
                route = self._route_xmit(sk, dst)
            if route is None:
                self._transmit(src, dst, seg, sk.bound_dev, offload)
            else:
                # the header and the payload go to IP apart (one join makes the frame);
                # path MTU discovery: never fragmented on the way (see _transmit)
                output_pinned(route, src, dst, tcp.PROTOCOL,
                              seg.build_header(src=src, dst=dst, checksum=checksum),
                              seg.payload, dont_fragment=True)

    def _route_xmit(self, sk: TcpSock, dst: bytes) -> DstEntry | None:
        """__sk_dst_check: the socket's pinned route to ``dst`` if it is still current,
        else a fresh one (pinned: the lookup's reference becomes the socket's); None for
        a finished socket, a local or multicast destination, or no route (those segments
        take the per-packet path).  ``sk.xmit`` held."""
        entry = sk.dst
        if entry is not None:
            if entry.dst == dst and not sk.finished and self.host.dst_cache.current(entry):
                return entry
            sk.dst = None
            entry.release()
        if sk.finished or self.host.ip.is_local(dst) or is_multicast(dst) \
                or dst == LIMITED_BROADCAST:
            return None
        entry = self.host.dst_cache.lookup(dst, sk.bound_dev)
        sk.dst = entry
        return entry

    def _drop_route_xmit(self, sk: TcpSock) -> None:
        """sk_dst_reset: release the pinned route.  ``sk.xmit`` held."""
        entry, sk.dst = sk.dst, None
        if entry is not None:
            entry.release()

    def _tx_offload(self, dst: bytes) -> bool:
        entry = self.host.dst_cache.lookup(dst)
        if entry is None:
            return False
        try:
            return _offloads(self.host, entry, dst, self.host.ip.is_local(dst))
        finally:
            entry.release()

    def _transmit(self, src: bytes, dst: bytes, seg: tcp.Repr, oif: int = 0,
                  offload: bool = False) -> None:
        """One segment to IP.  ``offload``: the connection's link does checksums (a clean
        in-memory link or loopback, as a NIC would): the field is left zero.  The header
        and the payload go to IP apart: the frame is made by one join (``output_gather``),
        not one copy of the payload per layer."""
        def build_header(source: bytes, dest: bytes) -> bytes:
            return seg.build_header(src=source, dst=dest, checksum=not offload)

        # Path MTU discovery (RFC 1191/8201): never fragmented on the way; a narrower
        # link answers with an ICMP error and the connection resizes (mtu_reduced_locked).
        self.host.ip.output_gather(src, dst, tcp.PROTOCOL, build_header, seg.payload, oif=oif,
                                   dont_fragment=True)

    def _reply(self, seg: tcp.Repr, info: Delivery) -> None:
        """Send a segment built by the layer itself (RST, TIME_WAIT ACK, cookie SYN,ACK)."""
        self.host.counters.inc("TcpOutSegs")
        if seg.flags & tcp.RST:
            self.host.counters.inc("TcpOutRsts")
        self._transmit(info.dst, info.src, seg)

    def _no_socket(self, seg: tcp.Repr, info: Delivery) -> None:
        self.host.counters.inc("TcpInSegs")
        reply = reset_for(seg)
        if reply is not None:
            self._reply(reply, info)

    # ------------------------------------------------------------------ timers
    def arm_timer_locked(self, sk: TcpSock) -> None:
        """One host timer per connection at the engine's next deadline.  A later deadline
        keeps the armed (earlier) timer, which fires, finds nothing due and re-arms
        (Linux's sk_reset_timer is as lazy); only an earlier one schedules anew."""
        conn = sk.conn
        if sk.finished or conn is None:
            return
        at = conn.timers.next_at()  # conn.next_deadline(), one call less per segment
        if at is None:
            return
        timer = sk.timer
        if timer is not None and not timer.cancelled and timer.at <= at:
            return
        if timer is not None:
            timer.cancel()
        sk.timer = self.host.timers.schedule(at, partial(self._timer_fired, sk))

    def _timer_fired(self, sk: TcpSock, now: int) -> None:
        sk.sl.bh_defer("timer", partial(self.run_timer_locked, sk))
        self.post(sk)

    def run_timer_locked(self, sk: TcpSock) -> None:
        now = self.host.now()
        timer = sk.timer
        if timer is not None and timer.at <= now:
            sk.timer = None
        conn = sk.conn
        if sk.finished or conn is None:
            return
        due = conn.next_deadline()
        if due is not None and due <= now:
            conn.on_timer(now)
            self.after_engine(sk)
        else:
            self.arm_timer_locked(sk)

    def _cancel_timer(self, sk: TcpSock) -> None:
        timer, sk.timer = sk.timer, None
        if timer is not None:
            timer.cancel()

    # ------------------------------------------------------------------ teardown
    def _finish(self, sk: TcpSock) -> None:
        """tcp_done: the connection reached CLOSED; unhash it and release its port.
        ``post`` stored ``finished`` when it took this teardown."""
        self.flush(sk)  # releases the pinned route (or leaves it to the transmitter)
        self._cancel_timer(sk)
        with self._global():
            self.hashinfo.close(sk)
        self._leave_syn_queue(sk)
        sk.wakeup()
        if sk.user_closed:
            self.forget(sk)

    def _leave_syn_queue(self, sk: TcpSock) -> None:
        """An embryonic child died before its handshake completed: nobody will accept
        it, so it is released like an orphan."""
        listener = sk.listener
        if listener is None:
            return
        sk.listener = None
        with listener.rskq_lock:
            if sk in listener.embryos:
                listener.embryos.discard(sk)
                listener.syn_qlen -= 1
        sk.user_closed = True

    def _enter_time_wait(self, sk: TcpSock, snap: dict[str, int]) -> None:
        """tcp_time_wait: a light TcpTimeWait entry replaces sk in ehash and among its
        port's owners in one publication (``BindTables.hashdance``).  ``post`` stored
        ``finished`` when it took this teardown."""
        self.flush(sk)  # releases the pinned route (or leaves it to the transmitter)
        self._cancel_timer(sk)
        hashinfo = self.hashinfo
        now = self.host.now()
        with self._global():
            if hashinfo.ehash.tw_count() >= self.host.tuning.tcp_max_tw_buckets:
                self.host.counters.inc("TcpExtTCPTimeWaitOverflow")
                hashinfo.close(sk)
                tw = None
            else:
                tw = TcpTimeWait(sk, snap, now=now, expires_at=now + snap["timeout"])
                if hashinfo.bind.hashdance(sk, tw, hashinfo.ehash):
                    sk.state = State.CLOSE
                    tw.timer = self.host.timers.schedule(tw.expires_at,
                                                         partial(self._tw_expired, tw))
                else:
                    hashinfo.close(sk)
        self._leave_syn_queue(sk)
        sk.wakeup()
        if sk.user_closed:
            self.forget(sk)

    def _tw_expired(self, tw: TcpTimeWait, now: int) -> None:
        with self._global():
            self.hashinfo.tw_kill(tw)

    def _tw_kill(self, tw: TcpTimeWait) -> bool:
        if tw.timer is not None:
            tw.timer.cancel()
        with self._global():
            return self.hashinfo.tw_kill(tw)

    def _tw_input(self, tw: TcpTimeWait, seg: tcp.Repr, info: Delivery) -> None:
        """tcp_timewait_state_process, in brief: RST kills the entry (RFC 1337 off, as
        Linux's default); a newer SYN starts a new incarnation; a FIN or out-of-window
        segment is ACKed; anything else is dropped."""
        self.host.counters.inc("TcpInSegs")
        flags = seg.flags
        if flags & tcp.RST:
            self._tw_kill(tw)
            return
        if flags & tcp.SYN and not flags & tcp.ACK:
            tsval = seg.timestamp[0] if seg.timestamp is not None and tw.ts_ok else None
            paws_reject = tsval is not None and lt(tsval, tw.ts_recent)
            newer = gt(seg.seq, tw.rcv_nxt) or (tsval is not None and gt(tsval, tw.ts_recent))
            if newer and not paws_reject and self._tw_kill(tw):
                listener = self.hashinfo.listen.lookup(info.dst, seg.dst_port, info.src,
                                                       seg.src_port, dif=info.iface.ifindex)
                if isinstance(listener, TcpSock):
                    iss = (tw.snd_nxt + 65535 + 2) & MASK32
                    self._listen_input(listener, seg, info, iss=iss or 1, counted=True)
                else:
                    self._reply_reset(seg, info)
                return
        if flags & tcp.FIN or seg.seq != tw.rcv_nxt or flags & tcp.SYN:
            timestamp = None
            if tw.ts_ok:
                tsval = (self.host.now() // MS + tw.ts_offset) & MASK32
                timestamp = (tsval, tw.ts_recent)
            self._reply(tcp.Repr(src_port=seg.dst_port, dst_port=seg.src_port, seq=tw.snd_nxt,
                                 ack=tw.rcv_nxt, flags=tcp.ACK, window=tw.window,
                                 timestamp=timestamp), info)

    def _reply_reset(self, seg: tcp.Repr, info: Delivery) -> None:
        reply = reset_for(seg)
        if reply is not None:
            self._reply(reply, info)

    # ------------------------------------------------------------------ listener
    def _acceptq_full(self, listener: TcpSock) -> bool:
        # sk_acceptq_is_full: len > max; lockless read of a deque length (one load).
        return len(listener.acceptq) > listener.max_ack_backlog

    def _listen_input(self, lsk: TcpSock, seg: tcp.Repr, info: Delivery, *, iss: int = 0,
                      counted: bool = False) -> None:
        """tcp_v4_rcv for a LISTEN socket: no socket lock on the listener (Linux >= 4.4)."""
        counters = self.host.counters
        if not counted:
            counters.inc("TcpInSegs")
        action = listen_action(seg)
        if action is ListenAction.DROP:
            return
        if action is ListenAction.RESET:
            if not (seg.flags & tcp.ACK and self._cookie_ack(lsk, seg, info)):
                self._reply_reset(seg, info)
            return
        tuning = self.host.tuning
        with lsk.rskq_lock:
            qlen, max_backlog, closed = lsk.syn_qlen, lsk.max_ack_backlog, lsk.listen_closed
        if closed:
            return
        want_cookie = False
        if (tuning.tcp_syncookies == 2 or qlen >= max(max_backlog, 1)
                or qlen >= tuning.tcp_max_syn_backlog):
            if not tuning.tcp_syncookies:
                counters.inc("TcpExtTCPReqQFullDrop")
                counters.inc("TcpExtListenDrops")
                return
            want_cookie = True
            if tuning.tcp_syncookies != 2:
                counters.inc("TcpExtTCPReqQFullDoCookies")
        if self._acceptq_full(lsk):
            counters.inc("TcpExtListenOverflows")
            counters.inc("TcpExtListenDrops")
            return
        max_syn = tuning.tcp_max_syn_backlog
        if not want_cookie and not tuning.tcp_syncookies and max_syn - qlen < max_syn >> 2:
            counters.inc("TcpExtListenDrops")
            return
        if want_cookie:
            self._send_cookie(lsk, seg, info)
            return
        with self._global():
            child = self._new_child(lsk, seg, info, iss)
        if child is not None:
            self.post(child)  # transmit outside every lock (an inline link re-enters)

    def _child_options(self, lsk: TcpSock, info: Delivery) -> tuple[Any, int]:
        ts_offset = self._ts_offset(info.dst, info.src)
        mtu = info.iface.mtu
        return mtu - (40 if len(info.dst) == 4 else 60), ts_offset

    def _send_cookie(self, lsk: TcpSock, seg: tcp.Repr, info: Delivery) -> None:
        mss, ts_offset = self._child_options(lsk, info)
        now = self.host.now()
        engine_counters = Counters()
        reply = syncookies.syn_ack_for(
            seg, secret=self.secret, saddr=info.src, daddr=info.dst, now=now,
            options=lsk.conn_options(mss), ts_offset=ts_offset, counters=engine_counters)
        lsk.last_overflow_at = now  # one attribute store; read by _cookie_ack
        for name, n in engine_counters.take().items():
            self.host.counters.inc(name, n)
        self._reply(reply, info)

    def _cookie_ack(self, lsk: TcpSock, seg: tcp.Repr, info: Delivery) -> bool:
        """cookie_v4_check: an ACK to a listener that recently sent cookies may complete
        a stateless handshake.  True when it was taken (or dropped for a full queue)."""
        if not self.host.tuning.tcp_syncookies:
            return False
        now = self.host.now()
        since = lsk.last_overflow_at  # atomic: one attribute load
        if since is None or now - since > COOKIE_WINDOW:
            return False
        mss, ts_offset = self._child_options(lsk, info)
        engine_counters = Counters()
        if self._acceptq_full(lsk):
            self.host.counters.inc("TcpExtListenOverflows")
            self.host.counters.inc("TcpExtListenDrops")
            return True
        conn = syncookies.connection_from_ack(
            seg, secret=self.secret, saddr=info.src, daddr=info.dst, now=now,
            options=lsk.conn_options(mss), ts_offset=ts_offset, counters=engine_counters)
        for name, n in engine_counters.take().items():
            self.host.counters.inc(name, n)
        if conn is None:
            return False
        with self._global():
            child = self._adopt_child(lsk, conn, info, seg.src_port)
        if child is not None:
            self.post(child)
        return True

    def _new_child(self, lsk: TcpSock, seg: tcp.Repr, info: Delivery,
                   iss: int) -> TcpSock | None:
        """A SYN that fits the SYN queue: a child socket in SYN_RECV answering SYN,ACK."""
        mss, ts_offset = self._child_options(lsk, info)
        now = self.host.now()
        if not iss:
            iss = initial_sequence(self.secret, info.dst, seg.dst_port, info.src,
                                   seg.src_port, now)
        child = TcpSock(self, lsk.family)
        child.inherit_from(lsk)
        conn = Connection.accept_syn(seg, iss=iss, now=now, options=child.conn_options(mss),
                                     ts_offset=ts_offset, counters=Counters())
        return self._adopt_child(lsk, conn, info, seg.src_port, child)

    def _adopt_child(self, lsk: TcpSock, conn: Connection, info: Delivery, fport: int,
                     child: TcpSock | None = None) -> TcpSock | None:
        """Give the child its identity and port, count it in the SYN queue, publish it in
        ehash, then let it run (a cookie child is ESTABLISHED already and goes straight
        on to the accept queue).  The caller transmits (``post``) after its locks."""
        if child is None:
            child = TcpSock(self, lsk.family)
            child.inherit_from(lsk)
        child.set_key(_family_form(lsk.family, info.dst), lsk.lport,
                      _family_form(lsk.family, info.src), fport)
        child.conn = conn
        child.state = _TABLE_STATE[conn.state]
        child.listener = lsk
        child.tx_csum_offload = self._tx_offload(info.src)
        with lsk.rskq_lock:
            if lsk.listen_closed:
                return None
            lsk.embryos.add(child)  # before ehash: the final ACK may race us
            lsk.syn_qlen += 1
        with self._sockets_lock:
            self.sockets.add(child)
        yield_point("tcp.child.before_hash")
        if not self._inherit_port(child, lsk) or not self.hashinfo.ehash.insert(child):
            self.hashinfo.bind.unbind(child)
            child.user_closed = True
            self._leave_syn_queue(child)
            child.finished = True
            self.forget(child)
            return None
        with child.sl.slock:
            self.after_engine(child)
        return child

    def _inherit_port(self, child: TcpSock, lsk: TcpSock) -> bool:
        """__inet_inherit_port: the child joins the listener's bind bucket."""
        bind = self.hashinfo.bind
        tb = lsk.tb
        if tb is None:
            return False
        port = lsk.lport
        addr = v6_key(child.family, child.laddr)
        with bind.bhash_lock(port):
            if lsk.tb is not tb or getattr(tb, "dead", False):
                return False
            with bind.bhash2_lock(addr, port):
                tb2 = bind.find_or_create_tb2_locked(tb, addr)  # type: ignore[arg-type]
                bind.add_owner_locked(child, tb, tb2)  # type: ignore[arg-type]
        return True

    def _publish_child(self, child: TcpSock) -> None:
        """The handshake completed (child's socket lock held): now, and only now, the
        child is visible to accept() (seed 004)."""
        lsk = child.listener
        child.listener = None
        if lsk is None:
            return
        yield_point("tcp.child.before_publish")  # complete, not yet acceptable
        with lsk.rskq_lock:
            if child in lsk.embryos:
                lsk.embryos.discard(child)
                lsk.syn_qlen -= 1
            closed = lsk.listen_closed
            if not closed:
                lsk.acceptq.append(child)
        if closed:
            child.user_closed = True
            conn = child.conn
            if conn is not None:
                conn.abort(self.host.now())
                self.after_engine(child)
            return
        lsk.wakeup()

    def accept_dequeue(self, lsk: TcpSock) -> TcpSock | None:
        """inet_csk_accept: take a complete child.  Modern: only the listener's
        rskq_lock.  Legacy (seed 004 before): under the global tcbinfo lock as well."""
        with self._global(), lsk.rskq_lock:
            child = lsk.acceptq.popleft() if lsk.acceptq else None
        if child is not None and lsk.poll is not None:
            lsk.update_poll()
        return child

    def close_listener(self, lsk: TcpSock, *, forget: bool) -> None:
        """Stop listening: unhash, abort queued and embryonic children (RST)."""
        with lsk.rskq_lock:
            lsk.listen_closed = True
            children = list(lsk.acceptq) + list(lsk.embryos)
            lsk.acceptq.clear()
            lsk.embryos.clear()
            lsk.syn_qlen = 0
        since = lsk._lock()
        try:
            with self._global():
                self.hashinfo.close(lsk)
            lsk.finished = True
        finally:
            lsk._unlock(since)
        for child in children:
            child.listener = None
            self._abort_orphan(child)
        lsk.wakeup()
        if forget:
            self.forget(lsk)

    def _abort_orphan(self, sk: TcpSock) -> None:
        since = sk._lock()
        try:
            sk.user_closed = True
            conn = sk.conn
            if conn is not None and conn.state is not CState.CLOSED:
                conn.abort(self.host.now())
                self.after_engine(sk)
        finally:
            sk._unlock(since)
        if sk.finished or sk.conn is None or sk.conn.state is CState.CLOSED:
            if not sk.finished:
                self._finish(sk)
            self.forget(sk)

    # ------------------------------------------------------------------ ICMP
    def icmp_error(self, family: int, kind: int, code: int, reporter: bytes,
                   flow: icmpv4.QuotedFlow | icmpv6.QuotedFlow) -> None:
        """tcp_v4_err: a hard error aborts a connection still in SYN_SENT; otherwise it
        is remembered as the soft error SO_ERROR reports."""
        if flow.src_port is None or flow.dst_port is None:
            return
        found = self._lookup_established(flow.src, flow.src_port, flow.dst, flow.dst_port, 0)
        if found is None:
            return
        try:
            if not isinstance(found, TcpSock):
                return
            if (family == 4 and kind == icmpv4.DEST_UNREACHABLE and code == icmpv4.FRAG_NEEDED) \
                    or (family == 6 and kind == icmpv6.PACKET_TOO_BIG):
                # The IP layer has updated the path MTU; the connection resizes its
                # segments now, or at release_sock when the user owns the socket
                # (Linux TCP_MTU_REDUCED_DEFERRED with tp->mtu_info).
                mtu = self.host.pmtu.get(flow.dst, self.host.now())
                if mtu is not None:
                    found.mtu_info = (mtu, _quoted_seq(flow))  # one store; read locked
                    found.sl.bh_defer("mtu_reduced", partial(self.mtu_reduced_locked, found))
                    self.post(found)
            else:
                err = _icmp_errno(family, kind, code)
                found.soft_err = err  # one store; a hard error also aborts SYN_SENT below
                found.sl.bh_defer("icmp", partial(self._icmp_locked, found, err))
                self.post(found)
        finally:
            put_entry(found)

    def mtu_reduced_locked(self, sk: TcpSock) -> None:
        """tcp_v4_mtu_reduced, under the socket lock: an error quoting a sequence number
        we never sent or that is already acknowledged is ignored (RFC 5927 §4.1,
        ``TcpExtOutOfWindowIcmps``); otherwise the connection lowers its MSS to the path
        and resends its flight."""
        info, sk.mtu_info = sk.mtu_info, None
        conn = sk.conn
        if info is None or conn is None:
            return
        mtu, seq = info
        t = conn.tcb
        if seq is not None and not (le(t.snd_una, seq) and le(seq, t.snd_nxt)):
            self.host.counters.inc("TcpExtOutOfWindowIcmps")
            return
        headers = 40 if len(wire(sk.faddr)) == 4 else 60  # IP + bare TCP header
        if conn.mtu_reduced(mtu - headers, self.host.now()):
            self.after_engine(sk)

    def _icmp_locked(self, sk: TcpSock, err: int) -> None:
        conn = sk.conn
        if conn is not None and conn.state is CState.SYN_SENT and err in _HARD_ERRORS:
            conn.abort(self.host.now())
            self.after_engine(sk)


_HARD_ERRORS = frozenset({errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH,
                          errno.ENOPROTOOPT, errno.EACCES})


def _offloads(host: Host, entry: Any, dst: bytes, local: bool) -> bool:
    """May segments to ``dst`` leave their checksum to the link?  Only to loopback or
    to an on-link peer over a link that offloads: a router would forward a zero
    checksum onto links that verify it."""
    if local:
        return bool(host.loopback.checksum_offload)
    return bool(entry.iface.checksum_offload and entry.next_hop == dst)


def _family_form(family: int, addr: bytes) -> bytes:
    """An address as a socket of ``family`` stores it (IPv4 in IPv6: v4-mapped)."""
    if family == AF_INET6 and len(addr) == 4:
        return _MAPPED + addr
    return addr


def _tw_snapshot(sk: TcpSock, conn: Connection) -> dict[str, int]:
    """What the TIME_WAIT entry keeps, read under the socket lock."""
    t = conn.tcb
    window = min(0xFFFF, conn.options.rcvbuf >> t.rcv_wscale)
    return {"snd_nxt": t.snd_nxt, "rcv_nxt": t.rcv_nxt, "ts_ok": int(t.ts_ok),
            "ts_recent": t.ts_recent if t.ts_ok else 0,
            "ts_recent_stamp": (t.ts_recent_stamp or 1) if t.ts_ok else 0,
            "ts_offset": t.ts_offset, "window": window,
            "timeout": conn.options.time_wait_timeout}


def _quoted_seq(flow: icmpv4.QuotedFlow | icmpv6.QuotedFlow) -> int | None:
    """The sequence number of the segment an ICMP error quotes (bytes 4..8 of its TCP
    header), when the quote holds it."""
    head = flow.transport_head
    return int.from_bytes(head[4:8], "big") if len(head) >= 8 else None


def _icmp_errno(family: int, kind: int, code: int) -> int:
    from rcunet.host.udp import _icmp_errno as convert

    return convert(family, kind, code)
