"""``TcpLayer``, the Host's TCP: the tables (``TcpHashInfo``), the sockets, the secrets,
connect(), and the legacy global lock; the rest of its work is done by the typed parts it
holds, one per sibling module (see ``rcunet.host.tcp``)."""

from __future__ import annotations

import contextlib
import errno
import random
import threading
from typing import TYPE_CHECKING, Any, Final

from rcunet.core.tcp import Connection, Counters
from rcunet.core.tcp.isn import initial_sequence, timestamp_offset
from rcunet.host.sockerr import oserror, wire
from rcunet.host.tcp import connopts
from rcunet.host.tcp.buffers import RxBuffers
from rcunet.host.tcp.common import TCBINFO_LOCK, family_form, offloads
from rcunet.host.tcp.demux import Demux
from rcunet.host.tcp.fastopen import FastOpen
from rcunet.host.tcp.icmp import IcmpErrors
from rcunet.host.tcp.life import (
    FINISHED,
    FORGOTTEN,
    LISTEN_CLOSED,
    UNHASHED,
    USER_CLOSED,
    advance,
)
from rcunet.host.tcp.listener import Listeners
from rcunet.host.tcp.sock import TcpSock
from rcunet.host.tcp.teardown import Teardown
from rcunet.host.tcp.timewait import TcpTimeWait, TimeWaits
from rcunet.host.tcp.transmit import Transmit
from rcunet.sync.deferred import DeferredFreeList, PerThreadCounter
from rcunet.tables import TcpHashInfo
from rcunet.tables.ehash import destroy_entry
from rcunet.tables.entry import AF_INET, AF_INET6, State
from rcunet.wire import tcp
from rcunet.wire.addr import is_v4mapped

if TYPE_CHECKING:
    from rcunet.host.host import Host

#: Address pairs whose timestamp offset ``_ts_offset`` remembers.
TS_OFFSET_CACHE = 4096
#: States of a closed socket that still has queued data or its FIN to deliver (Linux
#: keeps sending them after close() returns, and after the program exits).
DELIVERING = frozenset({State.FIN_WAIT1, State.CLOSING, State.LAST_ACK})


class NoLock:
    """``global_lock`` when the legacy lock is off: a with-statement that does nothing.
    Stateless, so one instance serves every thread (contextlib.nullcontext would be one
    object and three interpreted calls per use: four uses per tcp_crr transaction)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


NO_LOCK: Final = NoLock()


class TcpLayer:
    """The Host's TCP: the tables, the sockets, connect(), and the parts it holds, each
    with typed references to exactly the others it uses:

      buffers     RxBuffers: pooled receive buffers, deferred frees (seed 001)
      transmit    Transmit: the sockets' outboxes, the layer's own replies
      fastopen    FastOpen: keys, Fast Open queues, the client's cookie cache
      timewaits   TimeWaits: TIME_WAIT entries
      listeners   Listeners: SYN and accept queues, children, SYN cookies
      demux       Demux: the receive path (the IP layer's TCP handler)
      icmp        IcmpErrors: ICMP errors (the IP layer's TCP error handler)
      teardown    Teardown: the one teardown (tcp_done, tcp_time_wait)

    Concurrency:
      hashinfo    internally synchronised tables (lock order bhash > bhash2 > ehash).
      sockets     guarded-by: _sockets_lock (every socket not yet released, for
                  ``close_all`` and leak checks).
      tcbinfo     taken only with ``accept_no_global_lock`` off; outermost lock.
      secret      immutable after __init__; so are the parts.
    """

    def __init__(self, host: Host) -> None:
        self.host = host
        self.hashinfo = TcpHashInfo(host.tuning, rng=random.Random(host.seed ^ 0x7C9),
                                    clock=host.now, counters=host.counters)
        self.secret = random.Random(host.seed ^ 0x15C).getrandbits(512).to_bytes(64, "big")
        self.sockets: set[TcpSock] = set()  # guarded-by: _sockets_lock
        self._sockets_lock = threading.Lock()
        self.deferred = DeferredFreeList()
        self.tcbinfo = TCBINFO_LOCK.new()
        self._ts_offsets: dict[tuple[bytes, bytes], int] = {}  # see ts_offset
        #: The Options of the connections this Host opens (connopts.conn_options).
        self.conn_options_memo = connopts.ConnOptionsMemo()
        self.lock_hold_ns = PerThreadCounter()
        self.lock_holds = PerThreadCounter()
        self.buffers = RxBuffers(host.id, self.deferred)
        self.transmit = Transmit(host)
        self.fastopen = FastOpen(host, self.secret)
        self.timewaits = TimeWaits(host, self.hashinfo, self.global_lock, self.transmit)
        self.listeners = Listeners(self)
        self.timewaits.listeners = self.listeners  # a reopening SYN goes to its listener
        self.demux = Demux(host, self.hashinfo, self.buffers, self.transmit, self.timewaits,
                           self.listeners, self.legacy_input_lock)
        self.icmp = IcmpErrors(host, self.demux)
        self.teardown = Teardown(self)
        host.ip.handlers[tcp.PROTOCOL] = self.demux.input
        host.ip.error_handlers[tcp.PROTOCOL] = self.icmp.error

    def global_lock(self) -> contextlib.AbstractContextManager[Any]:
        """The legacy global connection-table lock, or nothing (seed 004)."""
        if self.host.tuning.accept_no_global_lock:
            return NO_LOCK
        return self.tcbinfo

    def legacy_input_lock(self, sk: TcpSock, seg: tcp.Repr) -> Any:
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

    def ts_offset(self, laddr: bytes, faddr: bytes) -> int:
        """The address pair's TSval offset (a keyed hash: the same for every connection
        between two addresses), remembered for the next connection.  Races are
        harmless: every thread computes the same value; dict subscript and set are
        atomic.  A subscript, not ``.get``: the key is a fresh tuple each time
        (``rcunet.core.freethreaded``, point 2)."""
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

    def new_socket(self, family: int) -> TcpSock:
        if family not in (AF_INET, AF_INET6):
            raise oserror(errno.EAFNOSUPPORT)
        sk = TcpSock(self, family)
        self.track(sk)
        return sk

    def track(self, sk: TcpSock) -> None:
        """``sk`` joins the sockets the layer holds (until ``forget``)."""
        with self._sockets_lock:
            self.sockets.add(sk)

    def forget(self, sk: TcpSock) -> None:
        """Drop the owner's reference of a socket that is out of every table."""
        if not advance(sk, FORGOTTEN):
            return
        with self._sockets_lock:
            self.sockets.discard(sk)
        self.buffers.free_deferred(sk.take_receive_queue())
        if sk.ref.put():
            destroy_entry(sk)

    def release_unconnected(self, sk: TcpSock) -> None:
        with self.global_lock():
            self.hashinfo.close(sk)
        advance(sk, FINISHED)
        advance(sk, UNHASHED)

    def orphans_delivering(self) -> int:
        """Connections their program has closed that still have data or a FIN in flight
        (FIN_WAIT1, CLOSING, LAST_ACK): what a kernel keeps sending after the program
        exits.  Advisory: each ``life`` and ``state`` is one attribute load (atomic),
        paired with advance(USER_CLOSED) and the stores made under the socket's lock."""
        with self._sockets_lock:
            sockets = list(self.sockets)
        return sum(1 for sk in sockets if sk.life & USER_CLOSED and sk.state in DELIVERING)

    def close_all(self) -> None:
        """Host shutdown: abort every connection, close listeners, drop TIME_WAIT."""
        with self._sockets_lock:
            sockets = list(self.sockets)
        for sk in sockets:
            life = sk.life  # atomic: one attribute load, paired with the stores in advance
            if sk.state == State.LISTEN or life & LISTEN_CLOSED:
                advance(sk, USER_CLOSED)
                self.listeners.close(sk, forget=True)
            elif not life & USER_CLOSED:
                sk.abort()
            else:
                # A closed connection that has delivered everything, its FIN included,
                # is not reset: its peer may still be reading up to our FIN.
                self.listeners.abort_orphan(sk, spare_fin_wait2=True)
        for entry in list(self.hashinfo.ehash.entries()):
            if isinstance(entry, TcpTimeWait):
                self.timewaits.kill(entry)

    def connect_locked(self, sk: TcpSock, addr: bytes, port: int,
                       fastopen: bytes | None = None) -> int:
        """tcp_v4_connect / tcp_v6_connect: route, source port, SYN.  Socket lock owned.

        ``fastopen``: a Fast Open connect (MSG_FASTOPEN or TCP_FASTOPEN_CONNECT) with
        these bytes to send (tcp_send_syn_data); returns how many the SYN carries."""
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
            offload = offloads(host, entry, dst, local)
        finally:
            entry.release()
        saddr = family_form(sk.family, src)
        self.hashinfo.connect(sk, addr, port, saddr=saddr)
        now = host.now()
        laddr = wire(sk.laddr)
        # A TIME_WAIT this connect took over (tcp_twsk_unique) left its ISN and its
        # TS.Recent: the new incarnation starts with them, as tcp_v4_connect's socket
        # does (PAWS in SYN-SENT, the SYN's TSecr).
        reused_iss, ts_recent = sk.take_time_wait_reuse()
        iss = reused_iss or initial_sequence(self.secret, laddr, sk.lport, dst, port, now)
        path_mss = mtu - (40 if len(dst) == 4 else 60)
        syn_data, option = b"", None
        if fastopen is not None:
            syn_data, option = self.fastopen.syn(sk, dst, path_mss, fastopen)
        conn = Connection.connect(
            local_port=sk.lport, remote_port=port, iss=iss, now=now,
            options=connopts.conn_options(sk, path_mss, dst),
            ts_offset=self.ts_offset(laddr, dst), counters=Counters(), ts_recent=ts_recent,
            syn_data=syn_data, fastopen_option=option)
        sk.attach(conn, tx_csum_offload=offload)
        sk.engine()  # the SYN
        return len(syn_data)
