"""Bind tables (reference §2.1-2.4): ``bhash`` by local port and ``bhash2`` by (local
port, local address), Linux's bind-conflict rules, ``bind(0)`` and the TIME_WAIT
hand-over.

* A ``BindBucket`` (tb) exists per port in use; a ``Bind2Bucket`` (tb2) per (port,
  address).  Owners (sockets and TIME_WAIT entries) hang off tb2; a tb2 is destroyed when
  its owner list empties and a tb when its last tb2 goes (reference §8.2 item 11).
* IPv4 addresses are kept in a tb2 v4-mapped, as Linux does since 6.8, so 1.2.3.4 and
  ::ffff:1.2.3.4 share a tb2; 0.0.0.0, ::ffff:0.0.0.0 and :: hash to one bhash2 bucket,
  the one ``addr_any_conflict`` checks.
* ``fastreuse``/``fastreuseport`` follow ``inet_csk_update_fastreuse``; ``-1`` marks a tb
  created by connect() autobind, which connect() may share and bind() users never give
  to connect() (``fastreuse >= 0 or fastreuseport >= 0`` -> connect skips the port).
* bhash chains are immutable tuples published by one store and a destroyed tb is simply
  unlinked (Python keeps it alive for any reader still holding it): connect()'s pre-check
  walks a chain snapshot with no lock, the ``hlist_add_head_rcu``/``kfree_rcu`` of the
  2025 series (reference §3.5).
* There is one namespace per Host and no l3mdev, so buckets match on port (tb) and
  port+address (tb2) only.
"""

from __future__ import annotations

import errno
import random
from dataclasses import dataclass
from typing import TypeVar

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.sync import lockdep
from rcunet.sync.lock import LockClass
from rcunet.sync.lockarray import LockArray
from rcunet.tables.ehash import EstablishedTable
from rcunet.tables.entry import (
    AF_INET,
    AF_INET6,
    SockEntry,
    State,
    TableEntry,
    check_address,
    check_port,
    fast_saddr_match,
    rcv_saddr_equal,
)
from rcunet.tables.secret import HashSecret
from rcunet.tuning import Tuning
from rcunet.wire.addr import ANY4, ANY6, V4_MAPPED_ANY, V4_MAPPED_PREFIX, is_any, is_v4mapped

BHASH_LOCK = LockClass("bhash_lock")
BHASH2_LOCK = LockClass("bhash2_lock")
lockdep.declare_order("bhash_lock", "bhash2_lock", "ehash_lock")

DEFAULT_BHASH_SIZE = 1 << 12

_T = TypeVar("_T")

FASTREUSEPORT_ANY = 1
FASTREUSEPORT_STRICT = 2



def v6_key(family: int, addr: bytes) -> bytes:
    """A tb2's address: IPv6 as is, IPv4 v4-mapped (``tb2->v6_rcv_saddr``)."""
    return addr if family == AF_INET6 else V4_MAPPED_PREFIX + addr


class BindBucket:
    """``inet_bind_bucket``: one per port in use.

    Concurrency: every field guarded-by the bhash lock of ``port``; ``bhash2`` is also
    read under that lock only.  connect()'s pre-check reads ``fastreuse``/
    ``fastreuseport`` without the lock (attribute loads; a stale value is re-checked
    under the lock).
    """

    __slots__ = lockfree_read_slots("port", "fastreuse", "fastreuseport", "fastuid",
                                    "fast_family", "fast_addr", "fast_v6only", "bhash2", "dead")

    def __init__(self, port: int) -> None:
        self.port = port  # immutable
        self.fastreuse = 0
        self.fastreuseport = 0
        self.fastuid = 0
        self.fast_family = AF_INET
        self.fast_addr = ANY4
        self.fast_v6only = False
        self.bhash2: tuple[Bind2Bucket, ...] = ()  # guarded-by: bhash lock
        self.dead = False

    def __repr__(self) -> str:
        return (f"<BindBucket port={self.port} fastreuse={self.fastreuse} "
                f"fastreuseport={self.fastreuseport} tb2={len(self.bhash2)}>")


class Bind2Bucket:
    """``inet_bind2_bucket``: one per (port, address) in use.

    Concurrency: ``owners`` is a dict used as an ordered set (``tb->owners``, an hlist
    in Linux: O(1) add and delete, where a copied tuple cost O(owners) per change — the
    listener's port of a server that closes first holds every child and TIME_WAIT).
    Writers hold the bhash lock of ``port`` *and* this tb2's bhash2 lock; readers hold
    either lock, so no reader ever iterates while a writer changes it.
    """

    __slots__ = lockfree_read_slots("port", "addr", "tb", "owners")

    def __init__(self, tb: BindBucket, addr: bytes) -> None:
        self.port = tb.port  # immutable
        self.addr = addr  # immutable; v6_key() form
        self.tb = tb  # immutable
        self.owners: dict[TableEntry, None] = {}

    def __repr__(self) -> str:
        return f"<Bind2Bucket port={self.port} addr={self.addr.hex()} owners={len(self.owners)}>"


@dataclass(slots=True)
class BindStats:
    """Per-call counters (caller-owned, so no shared read-modify-write)."""

    owners_examined: int = 0
    bhash_locks: int = 0
    bhash2_locks: int = 0


def without(chain: tuple[_T, ...], item: _T) -> tuple[_T, ...]:
    """``chain`` minus ``item`` (by identity), as a new tuple; ``chain`` itself when
    ``item`` is not in it.  (The writers' half of the tuple-chain RCU: the result is
    published by one store.)"""
    for i, x in enumerate(chain):
        if x is item:
            return chain[:i] + chain[i + 1:]
    return chain


def use_hash2_on_bind(sk: TableEntry) -> bool:
    """``inet_use_hash2_on_bind``: a specific address (not the IPv4-mapped wildcard) is
    checked through bhash2 only; wildcards must see everything on the port."""
    if sk.family == AF_INET6:
        if sk.laddr == ANY6:
            return False
        if not is_v4mapped(sk.laddr):
            return True
        return sk.laddr[12:] != ANY4
    return sk.laddr != ANY4


def match_addr_any(tb2: Bind2Bucket, sk: TableEntry) -> bool:
    """``inet_bind2_bucket_match_addr_any``: is tb2 a wildcard that covers sk?"""
    if sk.family == AF_INET6:
        if tb2.addr == ANY6:
            return True
        return is_v4mapped(sk.laddr) and tb2.addr == V4_MAPPED_ANY
    return tb2.addr == ANY6 or tb2.addr == V4_MAPPED_ANY


def bind_conflict(sk: TableEntry, sk2: TableEntry, relax: bool, reuseport_ok: bool) -> bool:
    """``inet_bind_conflict``: do the reuse flags of two sockets whose addresses overlap
    forbid sharing the port?  (relax: explicit bind; not relax: bind(0) first pass)."""
    if sk is sk2:
        return False
    if sk.bound_dev and sk2.bound_dev and sk.bound_dev != sk2.bound_dev:
        return False
    reuseport_cb_ok = sk.reuseport_cb is None
    if sk.reuseaddr and sk2.reuseaddr and sk2.state != State.LISTEN:
        return not relax or (
            not reuseport_ok and sk.reuseport and sk2.reuseport and reuseport_cb_ok
            and (sk2.state == State.TIME_WAIT or sk.uid == sk2.uid))
    return (not reuseport_ok or not sk.reuseport or not sk2.reuseport
            or not reuseport_cb_ok
            or (sk2.state != State.TIME_WAIT and sk.uid != sk2.uid))


def reuseport_match(tb: BindBucket, sk: TableEntry) -> bool:
    """``sk_reuseport_match``: may sk skip the conflict scan thanks to the tb's cache?"""
    if tb.fastreuseport <= 0 or not sk.reuseport or sk.reuseport_cb is not None:
        return False
    if tb.fastuid != sk.uid:
        return False
    if tb.fastreuseport == FASTREUSEPORT_ANY:
        return True
    return fast_saddr_match(tb.fast_family, tb.fast_addr, tb.fast_v6only, sk)


def update_fastreuse(tb: BindBucket, sk: TableEntry) -> None:
    """``inet_csk_update_fastreuse``; caller holds the bhash lock of ``tb.port``."""
    reuse = sk.reuseaddr and sk.state != State.LISTEN
    if not tb.bhash2:
        tb.fastreuse = int(reuse)
        if sk.reuseport:
            _set_fast_fields(tb, sk, FASTREUSEPORT_ANY)
        else:
            tb.fastreuseport = 0
        return
    if not reuse:
        tb.fastreuse = 0
    if sk.reuseport:
        if not reuseport_match(tb, sk):
            _set_fast_fields(tb, sk, FASTREUSEPORT_STRICT)
    else:
        tb.fastreuseport = 0


def _set_fast_fields(tb: BindBucket, sk: TableEntry, mode: int) -> None:
    tb.fastreuseport = mode
    tb.fastuid = sk.uid
    tb.fast_family = sk.family
    tb.fast_addr = sk.laddr
    tb.fast_v6only = sk.v6only


class BindTables:
    """bhash + bhash2 of one Host.

    Concurrency:
      bhash     ``_bhash[i]`` rcu: writers hold ``_bhash_locks[i]``; connect()'s
                pre-check loads the slot (atomic list-slot load) and scans the tuple.
      bhash2    ``_bhash2[j]`` rcu: writers hold ``_bhash2_locks[j]`` (and the bhash lock
                of the port, since a tb2 hangs under its tb).
      owners    see Bind2Bucket.
      tuning    ``tuning`` is replaced wholesale by the Host (one attribute store); each
                operation reads it once.
      rng       bind(0)'s start offset; ``random.Random`` methods are safe to call from
                several threads (they run under the object's own lock on free-threaded
                builds).
      locks     ``_bhash_locks``/``_bhash2_locks`` are LockArrays: a bucket's lock is made
                on first use (one list-slot load; rcunet.sync.lockarray pairs it).
    Lock order: bhash_lock > bhash2_lock > ehash_lock; never two bhash2 locks at once,
    never two bhash locks at once.
    """

    def __init__(self, secret: HashSecret, tuning: Tuning, rng: random.Random, *,
                 size: int = DEFAULT_BHASH_SIZE) -> None:
        if size < 1 or size & (size - 1):
            raise ValueError(f"bhash size must be a power of two, got {size}")
        self.secret = secret  # immutable
        self.tuning = tuning  # rcu: replaced by one store
        self.rng = rng  # immutable
        self._mask = size - 1  # immutable
        self._bhash: list[tuple[BindBucket, ...]] = [()] * size  # rcu: writers hold lock
        self._bhash_locks = LockArray(BHASH_LOCK, size)  # each made on first use
        self._bhash2: list[tuple[Bind2Bucket, ...]] = [()] * size  # rcu: writers hold lock
        self._bhash2_locks = LockArray(BHASH2_LOCK, size)  # each made on first use

    # --- hash, bucket and lock helpers -----------------------------------------------
    def bhash_index(self, port: int) -> int:
        return self.secret.bhash_index(port, self._mask)

    def bhash_lock(self, port: int):  # type: ignore[no-untyped-def]
        i = self.secret.bhash_index(port, self._mask)
        return self._bhash_locks[i] or self._bhash_locks.create(i)  # LockArray: atomic

    def bhash2_index(self, addr: bytes, port: int) -> int:
        return self.secret.portaddr_hash(addr, port) & self._mask

    def bhash2_lock(self, addr: bytes, port: int):  # type: ignore[no-untyped-def]
        j = self.bhash2_index(addr, port)
        return self._bhash2_locks[j] or self._bhash2_locks.create(j)  # LockArray: atomic

    def bhash_chain_rcu(self, port: int) -> tuple[BindBucket, ...]:
        """Snapshot of the port's bhash chain: one list-slot load, no lock."""
        return self._bhash[self.bhash_index(port)]

    def bhash_rcu(self) -> tuple[list[tuple[BindBucket, ...]], int, int]:
        """(bhash list, net_mix, mask) for connect()'s candidate loop: the chain of
        ``port`` is ``bhash[bhash_slot(port, net_mix, mask)]`` (one list-slot load, pairing with
        the stores in ``create_tb_locked``/``_destroy_tb_locked``).  All three are
        immutable; the loop reads them once per connect() instead of once per candidate."""
        return self._bhash, self.secret.net_mix, self._mask

    def find_tb_rcu(self, port: int) -> BindBucket | None:
        for tb in self.bhash_chain_rcu(port):
            if tb.port == port:
                return tb
        return None

    def find_tb_locked(self, port: int) -> BindBucket | None:
        """The same lookup as ``find_tb_rcu``: the caller's lock makes the result stable."""
        return self.find_tb_rcu(port)

    def find_tb2_locked(self, port: int, addr: bytes) -> Bind2Bucket | None:
        """Caller holds the bhash2 lock of (addr, port); ``addr`` in v6_key() form."""
        for tb2 in self._bhash2[self.bhash2_index(addr, port)]:
            if tb2.port == port and tb2.addr == addr:
                return tb2
        return None

    def create_tb_locked(self, port: int) -> BindBucket:
        """Link a new tb at the head of its chain; caller holds the bhash lock."""
        tb = BindBucket(port)
        i = self.bhash_index(port)
        self._bhash[i] = (tb,) + self._bhash[i]  # atomic: one list-slot store
        return tb

    def find_or_create_tb2_locked(self, tb: BindBucket, addr: bytes) -> Bind2Bucket:
        """Caller holds the bhash lock of tb.port and the bhash2 lock of (addr, port)."""
        tb2 = self.find_tb2_locked(tb.port, addr)
        if tb2 is None:
            tb2 = Bind2Bucket(tb, addr)
            j = self.bhash2_index(addr, tb.port)
            self._bhash2[j] = (tb2,) + self._bhash2[j]  # atomic: one list-slot store
            tb.bhash2 = tb.bhash2 + (tb2,)
        return tb2

    def add_owner_locked(self, sk: TableEntry, tb: BindBucket, tb2: Bind2Bucket) -> None:
        """``inet_bind_hash``: both locks held.  Sets ``sk.lport`` (sk must not be in the
        established hash yet, or already have this port)."""
        tb2.owners[sk] = None
        sk.tb, sk.tb2 = tb, tb2
        if sk.lport != tb.port:
            sk.set_key(sk.laddr, tb.port, sk.faddr, sk.fport)

    def remove_owner_locked(self, sk: TableEntry, *, keep_tb: bool = False) -> None:
        """Unlink sk from its tb2; destroy an emptied tb2 and (unless ``keep_tb``) an
        emptied tb.  Both locks held."""
        tb, tb2 = sk.tb, sk.tb2
        assert isinstance(tb, BindBucket) and isinstance(tb2, Bind2Bucket)
        del tb2.owners[sk]
        sk.tb = sk.tb2 = None
        if not tb2.owners:
            j = self.bhash2_index(tb2.addr, tb2.port)
            self._bhash2[j] = without(self._bhash2[j], tb2)  # atomic: one list-slot store
            tb.bhash2 = without(tb.bhash2, tb2)
        if not tb.bhash2 and not keep_tb:
            self._destroy_tb_locked(tb)

    def _destroy_tb_locked(self, tb: BindBucket) -> None:
        i = self.bhash_index(tb.port)
        self._bhash[i] = without(self._bhash[i], tb)  # atomic: one list-slot store
        tb.dead = True

    # --- bind() ----------------------------------------------------------------------
    def bind(self, sk: TableEntry, laddr: bytes, port: int,
             stats: BindStats | None = None) -> int:
        """``inet_bind`` + ``inet_csk_get_port``: bind sk to (laddr, port); port 0
        picks one (``find_open_port``).  Returns the port.  EINVAL when sk is already
        bound, EADDRINUSE on a conflict or when no port is free."""
        check_address(sk.family, laddr)
        check_port(port)
        if sk.tb is not None or sk.state != State.CLOSE:
            raise OSError(errno.EINVAL, "socket is already bound")
        explicit_port = port != 0
        old_laddr = sk.laddr
        sk.set_key(laddr, sk.lport, sk.faddr, sk.fport)
        try:
            if port == 0:
                port = self.find_open_port(sk, stats)
            else:
                self._get_port(sk, port, stats)
        except OSError:
            sk.set_key(old_laddr, sk.lport, sk.faddr, sk.fport)  # a failed bind changes nothing
            raise
        if isinstance(sk, SockEntry):  # SOCK_BINDPORT_LOCK / SOCK_BINDADDR_LOCK
            sk.bind_port_locked = explicit_port
            sk.bind_addr_locked = not is_any(sk.laddr)
        return port

    def listen_port(self, sk: TableEntry, stats: BindStats | None = None) -> None:
        """``inet_csk_listen_start``'s re-validation: sk (state LISTEN, already bound)
        must not share its port with another listener or a non-reuse socket."""
        if sk.tb is None:
            raise OSError(errno.EINVAL, "listen() on an unbound socket needs a port first")
        self._get_port(sk, sk.lport, stats)

    def _get_port(self, sk: TableEntry, port: int, stats: BindStats | None) -> None:
        addr = v6_key(sk.family, sk.laddr)
        with self.bhash_lock(port):
            if stats is not None:
                stats.bhash_locks += 1
            if use_hash2_on_bind(sk) and self._addr_any_conflict(sk, port, True, True, stats):
                raise OSError(errno.EADDRINUSE, "address already in use")
            with self.bhash2_lock(addr, port):
                if stats is not None:
                    stats.bhash2_locks += 1
                tb = self.find_tb_locked(port)
                tb2 = self.find_tb2_locked(port, addr) if tb is not None else None
                if tb is not None and tb.bhash2:
                    reuse = sk.reuseaddr and sk.state != State.LISTEN
                    if not ((tb.fastreuse > 0 and reuse) or reuseport_match(tb, sk)):
                        if self._bind_conflict_locked(sk, tb, tb2, True, True, stats):
                            raise OSError(errno.EADDRINUSE, "address already in use")
                if tb is None:
                    tb = self.create_tb_locked(port)
                update_fastreuse(tb, sk)
                if sk.tb is None:
                    self.add_owner_locked(sk, tb, self.find_or_create_tb2_locked(tb, addr))

    def _bind_conflict_locked(self, sk: TableEntry, tb: BindBucket, tb2: Bind2Bucket | None,
                              relax: bool, reuseport_ok: bool,
                              stats: BindStats | None) -> bool:
        """``inet_csk_bind_conflict``: bhash lock held.  A specific address looks at its
        own tb2 only (the wildcard tb2s were checked by ``_addr_any_conflict``); a
        wildcard looks at every owner of the port."""
        if use_hash2_on_bind(sk):
            candidates: tuple[Bind2Bucket, ...] = (tb2,) if tb2 is not None else ()
        else:
            candidates = tb.bhash2
        for b in candidates:
            for sk2 in b.owners:
                if stats is not None:
                    stats.owners_examined += 1
                if bind_conflict(sk, sk2, relax, reuseport_ok) and rcv_saddr_equal(sk, sk2, True):
                    return True
        return False

    def _addr_any_conflict(self, sk: TableEntry, port: int, relax: bool, reuseport_ok: bool,
                           stats: BindStats | None) -> bool:
        """``inet_bhash2_addr_any_conflict``: bhash lock held; takes and releases the
        wildcard bucket's bhash2 lock (never nested with another bhash2 lock)."""
        j = self.bhash2_index(ANY4, port)
        with self._bhash2_locks.get(j):
            if stats is not None:
                stats.bhash2_locks += 1
            for tb2 in self._bhash2[j]:
                if tb2.port != port or not match_addr_any(tb2, sk):
                    continue
                for sk2 in tb2.owners:
                    if stats is not None:
                        stats.owners_examined += 1
                    if (bind_conflict(sk, sk2, relax, reuseport_ok)
                            and rcv_saddr_equal(sk, sk2, True)):
                        return True
        return False

    def local_port_range(self, sk: TableEntry, tuning: Tuning) -> tuple[int, int, bool]:
        """(low, high inclusive, per-socket?) as ``inet_sk_get_local_port_range``: each
        bound of a per-socket IP_LOCAL_PORT_RANGE applies when it lies inside the sysctl
        range; setting the option at all switches connect() to step 1."""
        low, high = tuning.ip_local_port_range
        per_sock = getattr(sk, "local_port_range", None)
        if per_sock is None:
            return low, high, False
        sk_lo, sk_hi = per_sock
        lo, hi = low, high
        if lo <= sk_lo <= hi:
            lo = sk_lo
        if lo <= sk_hi <= hi:
            hi = sk_hi
        return lo, hi, True

    def find_open_port(self, sk: TableEntry, stats: BindStats | None = None) -> int:
        """``inet_csk_find_open_port`` + the success path of ``inet_csk_get_port``:
        odd offsets first (connect() favours ``low``'s parity), the lower half of the range
        first with SO_REUSEADDR, reserved ports skipped, one bhash lock per candidate."""
        tuning = self.tuning
        reserved = tuning.ip_local_reserved_ports or None  # None: skip the set's lock
        addr = v6_key(sk.family, sk.laddr)
        attempt_half = 1 if sk.reuseaddr else 0
        while True:  # other_half_scan
            low, high, _ = self.local_port_range(sk, tuning)
            high += 1
            if high - low < 4:
                attempt_half = 0
            if attempt_half:
                half = low + (((high - low) >> 2) << 1)
                if attempt_half == 1:
                    high = half
                else:
                    low = half
            remaining = high - low
            if remaining > 1:
                remaining &= ~1
            offset = (self.rng.randrange(remaining) if remaining > 0 else 0) | 1
            while True:  # other_parity_scan
                port = low + offset
                for _ in range(0, remaining, 2):
                    if port >= high:
                        port -= remaining
                    if ((reserved is None or port not in reserved)
                            and self._try_bind0_port(sk, port, addr, stats)):
                        return port
                    port += 2
                offset -= 1
                if offset & 1:
                    break
            if attempt_half != 1:
                raise OSError(errno.EADDRINUSE, "no free local port in range")
            attempt_half = 2

    def _try_bind0_port(self, sk: TableEntry, port: int, addr: bytes,
                        stats: BindStats | None) -> bool:
        with self.bhash_lock(port):
            if stats is not None:
                stats.bhash_locks += 1
            if use_hash2_on_bind(sk) and self._addr_any_conflict(sk, port, False, False, stats):
                return False
            with self.bhash2_lock(addr, port):
                if stats is not None:
                    stats.bhash2_locks += 1
                tb = self.find_tb_locked(port)
                if tb is not None:
                    tb2 = self.find_tb2_locked(port, addr)
                    if self._bind_conflict_locked(sk, tb, tb2, False, False, stats):
                        return False
                else:
                    tb = self.create_tb_locked(port)
                update_fastreuse(tb, sk)
                self.add_owner_locked(sk, tb, self.find_or_create_tb2_locked(tb, addr))
                return True

    # --- release, address change, TIME_WAIT ------------------------------------------
    def unbind(self, sk: TableEntry, *, clear_port: bool = True) -> bool:
        """``inet_put_port`` (``inet_twsk_bind_unhash`` with ``clear_port=False``):
        release sk's port (idempotent).  Returns True if it was bound.  sk must already be
        out of the established hash."""
        tb, tb2 = sk.tb, sk.tb2
        if not isinstance(tb, BindBucket) or not isinstance(tb2, Bind2Bucket):
            return False
        # Both locks are looked up before the first is taken (hashing stays outside).
        bhash_lock, bhash2_lock = self.bhash_lock(tb.port), self.bhash2_lock(tb2.addr, tb2.port)
        with bhash_lock, bhash2_lock:
            if sk.tb is not tb:
                return False
            self.remove_owner_locked(sk)
        if clear_port:
            sk.set_key(sk.laddr, 0, sk.faddr, sk.fport)
        return True

    def inherit_port(self, listener: TableEntry, child: TableEntry) -> None:
        """``__inet_inherit_port``: an accepted child shares its listener's tb; its tb2
        is the one for the child's own (specific) address, created if needed."""
        tb = listener.tb
        if not isinstance(tb, BindBucket):
            raise OSError(errno.EINVAL, "the listener holds no port")
        if child.tb is not None:
            raise OSError(errno.EINVAL, "the child is already bound")
        addr = v6_key(child.family, child.laddr)
        with self.bhash_lock(tb.port), self.bhash2_lock(addr, tb.port):
            # re-checked under the lock every owner change holds: a listener closing
            # meanwhile has left tb (which lives on while it has other owners)
            if tb.dead or listener.tb is not tb:
                raise OSError(errno.EINVAL, "the listener's port was released")
            self.add_owner_locked(child, tb, self.find_or_create_tb2_locked(tb, addr))

    def update_saddr(self, sk: TableEntry, laddr: bytes) -> None:
        """``inet_bhash2_update_saddr``: connect() on a socket bound to the wildcard moves
        it from the (ANY, port) tb2 to the (laddr, port) tb2 under the bhash lock, taking
        the two bhash2 locks one after the other.  sk must not be in the established hash."""
        check_address(sk.family, laddr)
        tb, old = sk.tb, sk.tb2
        if not isinstance(tb, BindBucket) or not isinstance(old, Bind2Bucket):
            sk.set_key(laddr, sk.lport, sk.faddr, sk.fport)
            return
        new_addr = v6_key(sk.family, laddr)
        with self.bhash_lock(tb.port):
            with self.bhash2_lock(old.addr, old.port):
                self.remove_owner_locked(sk, keep_tb=True)
            sk.set_key(laddr, sk.lport, sk.faddr, sk.fport)
            with self.bhash2_lock(new_addr, tb.port):
                self.add_owner_locked(sk, tb, self.find_or_create_tb2_locked(tb, new_addr))

    def reset_saddr(self, sk: TableEntry) -> None:
        """``inet_bhash2_reset_saddr``: undo ``update_saddr`` after a failed connect(),
        unless the address came from an explicit bind()."""
        if getattr(sk, "bind_addr_locked", False):
            return
        self.update_saddr(sk, ANY4 if sk.family == AF_INET else ANY6)

    def hashdance(self, sk: TableEntry, tw: TableEntry, ehash: EstablishedTable) -> bool:
        """``inet_twsk_hashdance_schedule``: tw takes sk's place in the established hash
        and among its tb2's owners, under bhash > bhash2 > ehash.  Returns False (nothing
        changed) when sk is not hashed."""
        tb, tb2 = sk.tb, sk.tb2
        if not isinstance(tb, BindBucket) or not isinstance(tb2, Bind2Bucket):
            raise OSError(errno.EINVAL, "TIME_WAIT for a socket that holds no port")
        h = sk.sk_hash
        with self.bhash_lock(tb.port), self.bhash2_lock(tb2.addr, tb2.port):
            with ehash.ehash_lock(h):
                if not ehash._replace_locked(h, sk, tw):
                    return False
            owners = tb2.owners
            owners[tw] = None
            del owners[sk]
            tw.tb, tw.tb2 = tb, tb2
            sk.tb = sk.tb2 = None
        return True

    def owners_of(self, port: int) -> list[TableEntry]:
        """Every owner of ``port`` (snapshot under the port's bhash lock, which every
        owner change holds; for invariants and tests)."""
        with self.bhash_lock(port):
            tb = self.find_tb_rcu(port)
            return [] if tb is None else [o for b in tb.bhash2 for o in b.owners]

    def ports_in_use(self) -> set[int]:
        return {tb.port for chain in list(self._bhash) for tb in chain}

    def all_tb2(self) -> list[Bind2Bucket]:
        return [b for chain in list(self._bhash2) for b in chain]

