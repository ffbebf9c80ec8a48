"""Socket tables: the TCP established hash, bind hashes, listener hash and connect-time
port selection (reference §1-§3), plus the entry protocol the UDP tables share.

``TcpHashInfo`` is Linux's ``inet_hashinfo`` for one Host: it owns the per-host secret and
the tables, and implements the life-cycle steps that touch several of them (close,
TIME_WAIT hand-over and expiry) in the one lock order: bhash > bhash2 > ehash.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable

from mypy_extensions import mypyc_attr

from rcunet.tables.bind import DEFAULT_BHASH_SIZE, BindStats, BindTables
from rcunet.tables.ehash import DEFAULT_EHASH_SIZE, EstablishedTable, destroy_entry
from rcunet.tables.entry import (
    AF_INET,
    AF_INET6,
    RequestEntry,
    SockEntry,
    State,
    TableEntry,
    TimeWaitEntry,
)
from rcunet.tables.listen import DEFAULT_LHASH2_SIZE, ListenTable
from rcunet.tables.portsel import ConnectStats, CounterSink, PortSelector
from rcunet.tables.secret import HashSecret
from rcunet.tuning import Tuning

__all__ = [
    "AF_INET", "AF_INET6", "BindStats", "ConnectStats", "RequestEntry", "SockEntry", "State",
    "TableEntry", "TcpHashInfo", "TimeWaitEntry",
]

NS_PER_S = 1_000_000_000


# Not a native class when compiled: seed 000's lab counts each connect's port search by
# shadowing ``connect`` on the instance (rcunet.lab.seed000.ConnectProbe).  A thin facade:
# the tables it holds are native.
@mypyc_attr(native_class=False)
class TcpHashInfo:
    """All TCP tables of one Host.

    Concurrency: the tables are internally synchronised (see each class).  ``tuning``
    is shared with the bind tables and replaced by one store (``set_tuning``).  Every
    method may be called from any thread; callers serialise operations on one socket
    (the socket lock), as Linux does.
    """

    def __init__(self, tuning: Tuning | None = None, *, rng: random.Random | None = None,
                 clock: Callable[[], int] | None = None, counters: CounterSink | None = None,
                 ehash_size: int = DEFAULT_EHASH_SIZE, bhash_size: int = DEFAULT_BHASH_SIZE,
                 lhash2_size: int = DEFAULT_LHASH2_SIZE, ncpus: int | None = None) -> None:
        import time

        self.rng = rng if rng is not None else random.Random()
        self.clock = clock if clock is not None else time.monotonic_ns
        self.secret = HashSecret(self.rng)
        self.ehash = EstablishedTable(self.secret, size=ehash_size,
                                      ncpus=ncpus or os.cpu_count() or 1)
        self.bind = BindTables(self.secret, tuning or Tuning(), self.rng, size=bhash_size)
        self.listen = ListenTable(self.secret, size=lhash2_size)
        self.ports = PortSelector(self.ehash, self.bind, self.rng, self.clock, counters)
        self.counters = counters  # immutable

    @property
    def tuning(self) -> Tuning:
        return self.bind.tuning

    def set_tuning(self, tuning: Tuning) -> None:
        self.bind.tuning = tuning  # atomic: one attribute store

    # --- the socket calls -------------------------------------------------------------
    def bind_socket(self, sk: TableEntry, laddr: bytes, port: int,
                    stats: BindStats | None = None) -> int:
        return self.bind.bind(sk, laddr, port, stats)

    def connect(self, sk: TableEntry, daddr: bytes, dport: int,
                stats: ConnectStats | None = None, *, saddr: bytes | None = None) -> int:
        return self.ports.connect(sk, daddr, dport, stats, saddr=saddr)

    def listen_socket(self, sk: TableEntry) -> None:
        """``inet_csk_listen_start``: state LISTEN, re-validate the port, hash it."""
        old_state = sk.state
        sk.state = State.LISTEN
        try:
            if sk.tb is None:
                self.bind.find_open_port(sk)
            else:
                self.bind.listen_port(sk)
            self.listen.add(sk)
        except OSError:
            sk.state = old_state
            raise

    def lookup(self, daddr: bytes, dport: int, saddr: bytes, sport: int, *, dif: int = 0,
               cpu: int = -1) -> tuple[TableEntry | None, bool]:
        """``__inet_lookup`` for an incoming segment (daddr/dport are local): the
        established hash first, then the listeners.  Returns (entry, refcounted): an
        established-hash entry comes pinned (the caller owes ``put_entry``), a listener
        without a reference (listeners are freed only after every reader is done)."""
        sk = self.ehash.lookup(daddr, dport, saddr, sport, dif)
        if sk is not None:
            return sk, True
        return self.listen.lookup(daddr, dport, saddr, sport, dif=dif, cpu=cpu), False

    def establish_child(self, listener: TableEntry, req: TableEntry,
                        child: TableEntry) -> bool:
        """The end of a passive open: the child takes the request socket's place in the
        established hash in one publication and joins the listener's port.  False (and
        nothing changed) when the request is gone - another thread completed it first;
        the caller destroys the child, as ``inet_ehash_nolisten`` does."""
        if child.key != req.key:
            raise OSError(errno.EINVAL, "the child must carry the request's 4-tuple")
        self.bind.inherit_port(listener, child)
        if self.ehash.replace(req, child):
            return True
        self.bind.unbind(child, clear_port=False)
        return False

    def close(self, sk: TableEntry) -> None:
        """Unhash sk from every table and release its port (idempotent)."""
        if sk.state == State.LISTEN:
            self.listen.remove(sk)
        else:
            self.ehash.remove(sk)
        self.bind.unbind(sk)
        sk.state = State.CLOSE

    def time_wait(self, sk: TableEntry, *, timeout: int = 0, snd_nxt: int = 0,
                  ts_recent: int = 0, ts_recent_stamp: int = 0,
                  entry: TimeWaitEntry | None = None) -> TimeWaitEntry | None:
        """``tcp_time_wait``: replace a closing connection by a TIME_WAIT entry that keeps
        its 4-tuple and port for ``timeout`` ns (or by ``entry``, a protocol's subclass
        carrying what it answers with).  Over ``tcp_max_tw_buckets`` the connection just
        closes (Linux's "TCP: time wait bucket table overflow", TCPTimeWaitOverflow)."""
        if self.ehash.tw_count() >= self.tuning.tcp_max_tw_buckets:
            if self.counters is not None:
                self.counters.inc("TcpExtTCPTimeWaitOverflow")
            self.close(sk)
            return None
        tw = entry
        if tw is None:
            now = self.clock()
            tw = TimeWaitEntry(sk, now=now, expires_at=now + timeout, snd_nxt=snd_nxt,
                               ts_recent=ts_recent, ts_recent_stamp=ts_recent_stamp)
        if not self.bind.hashdance(sk, tw, self.ehash):
            self.close(sk)
            return None
        sk.state = State.CLOSE
        return tw

    def tw_kill(self, tw: TimeWaitEntry) -> bool:
        """TIME_WAIT expiry (``inet_twsk_kill``): unhash, release the port, drop the
        table's reference.  False when connect() already took the tw over."""
        if not self.ehash.remove(tw):
            return False
        self.bind.unbind(tw, clear_port=False)
        if tw.ref.put():
            destroy_entry(tw)
        return True
