"""The TCP listener table, ``lhash2`` (reference §2.5), with SO_REUSEPORT groups (§6.4).

Listeners are found by (local address, port): first the bucket of the exact destination
address, then the wildcard bucket.  Within a bucket the highest ``compute_score`` wins
(exact address required, +1 bound device, +1 PF_INET, +1 matching incoming CPU); the first
socket that raises the high score and belongs to a reuseport group hands the choice to
the group, which picks a member by the flow's 4-tuple hash (``reciprocal_scale``).

A lookup takes no lock and no reference: listeners are freed after an RCU grace period
(``SOCK_RCU_FREE``), which in Python is simply "the object stays alive while referenced".
"""

from __future__ import annotations

import errno

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.sync.lock import LockClass
from rcunet.sync.lockarray import LockArray
from rcunet.tables.entry import AF_INET, AF_INET6, State, TableEntry, rcv_saddr_equal
from rcunet.tables.secret import HashSecret
from rcunet.wire.addr import ANY4, ANY6

LHASH2_LOCK = LockClass("lhash2_lock")
DEFAULT_LHASH2_SIZE = 1 << 10
#: Listener chains end in index + this in Linux (nulls markers); kept for reference.
LISTENING_NULLS_BASE = 1 << 29


def reciprocal_scale(val: int, ep_ro: int) -> int:
    """Linux's multiply-high replacement for ``val % ep_ro`` (val is 32 bits)."""
    return ((val & 0xFFFFFFFF) * ep_ro) >> 32


class ReuseportGroup:
    """``struct sock_reuseport``.

    Concurrency: ``socks`` is an immutable tuple replaced by one store under the lhash2
    lock of the group's bucket, so a reader that loads it sees only filled slots (the
    "publish the member, then the count" rule of reference §6.4 in one step).
    """

    __slots__ = lockfree_read_slots("socks")

    def __init__(self) -> None:
        self.socks: tuple[TableEntry, ...] = ()  # rcu: writers hold the bucket lock

    def select_by_hash(self, flow_hash: int) -> TableEntry | None:
        """``reuseport_select_sock_by_hash``: start at reciprocal_scale(hash, n), walk
        cyclically, skip connected members."""
        socks = self.socks  # atomic: one attribute load
        n = len(socks)
        if n == 0:
            return None
        i = j = reciprocal_scale(flow_hash, n)
        while True:
            sk = socks[i]
            if sk.state != State.ESTABLISHED:
                return sk
            i = i + 1 if i + 1 < n else 0
            if i == j:
                return None


def compute_score(sk: TableEntry, family: int, hnum: int, daddr: bytes, dif: int,
                  cpu: int) -> int:
    """``compute_score`` of inet_hashtables.c / inet6_hashtables.c."""
    if sk.lport != hnum or sk.state != State.LISTEN:
        return -1
    if family == AF_INET:
        if sk.family == AF_INET6 and sk.v6only:
            return -1
        if sk.rcv_saddr4 != daddr:
            return -1
    elif sk.family != AF_INET6 or sk.laddr != daddr:
        return -1
    if sk.bound_dev and sk.bound_dev != dif:
        return -1
    score = 2 if sk.bound_dev else 1
    if family == AF_INET and sk.family == AF_INET:
        score += 1
    if cpu >= 0 and sk.incoming_cpu == cpu:
        score += 1
    return score


class ListenTable:
    """(local address, port) -> listeners.

    Concurrency:
      readers   SYN/ACK input; no lock, no reference.  Load one bucket slot (atomic
                list-slot load, pairs with the store in ``add``/``remove``) and scan it.
      writers   listen()/close(); hold the bucket's lhash2 lock, publish a new tuple.
    Lock order: lhash2_lock is a leaf (nothing is taken under it).
    """

    def __init__(self, secret: HashSecret, *, size: int = DEFAULT_LHASH2_SIZE) -> None:
        if size < 1 or size & (size - 1):
            raise ValueError(f"lhash2 size must be a power of two, got {size}")
        self.secret = secret  # immutable
        self._mask = size - 1  # immutable
        self._buckets: list[tuple[TableEntry, ...]] = [()] * size  # rcu: writers hold lock
        self._locks = LockArray(LHASH2_LOCK, size)  # each made on first use

    def lhash2_index(self, addr: bytes, port: int) -> int:
        return self.secret.portaddr_hash(addr, port) & self._mask

    def add(self, sk: TableEntry) -> None:
        """``__inet_hash`` for a listener (state LISTEN, port already bound)."""
        if sk.state != State.LISTEN or sk.lport == 0:
            raise OSError(errno.EINVAL, "only a bound socket in LISTEN state can be hashed")
        i = self.lhash2_index(sk.laddr, sk.lport)
        with self._locks.get(i):
            chain = self._buckets[i]
            if any(e is sk for e in chain):
                raise OSError(errno.EINVAL, "listener already hashed")
            if sk.reuseport:
                group = self._find_group_locked(chain, sk)
                if group is None:
                    group = ReuseportGroup()
                group.socks = group.socks + (sk,)
                sk.reuseport_cb = group
            if sk.reuseport and sk.family == AF_INET6:
                self._buckets[i] = chain + (sk,)  # IPv6 reuseport listeners go at the tail
            else:
                self._buckets[i] = (sk,) + chain  # atomic: one list-slot store

    @staticmethod
    def _find_group_locked(chain: tuple[TableEntry, ...], sk: TableEntry) -> ReuseportGroup | None:
        for sk2 in chain:
            if (sk2.reuseport and isinstance(sk2.reuseport_cb, ReuseportGroup)
                    and sk2.family == sk.family and sk2.v6only == sk.v6only
                    and sk2.bound_dev == sk.bound_dev and sk2.lport == sk.lport
                    and sk2.uid == sk.uid and rcv_saddr_equal(sk, sk2, False)):
                return sk2.reuseport_cb
        return None

    def remove(self, sk: TableEntry) -> bool:
        """``inet_unhash`` of a listener; idempotent."""
        i = self.lhash2_index(sk.laddr, sk.lport)
        with self._locks.get(i):
            chain = self._buckets[i]
            if not any(e is sk for e in chain):
                return False
            self._buckets[i] = tuple(e for e in chain if e is not sk)
            group = sk.reuseport_cb
            if isinstance(group, ReuseportGroup):
                group.socks = tuple(e for e in group.socks if e is not sk)
                sk.reuseport_cb = None
        return True

    def lookup(self, daddr: bytes, dport: int, saddr: bytes, sport: int, *, dif: int = 0,
               cpu: int = -1) -> TableEntry | None:
        """``__inet_lookup_listener``: exact-address bucket, then the wildcard bucket.
        Returns the listener without taking a reference."""
        family = AF_INET if len(daddr) == 4 else AF_INET6
        result = self._lookup_bucket_rcu(family, daddr, dport, daddr, saddr, sport, dif, cpu)
        if result is not None:
            return result
        any_addr = ANY4 if family == AF_INET else ANY6
        return self._lookup_bucket_rcu(family, any_addr, dport, daddr, saddr, sport, dif, cpu)

    def _lookup_bucket_rcu(self, family: int, addr: bytes, hnum: int, daddr: bytes,
                           saddr: bytes, sport: int, dif: int, cpu: int) -> TableEntry | None:
        chain = self._buckets[self.lhash2_index(addr, hnum)]  # atomic: list-slot load
        result: TableEntry | None = None
        hiscore = 0
        for sk in chain:
            score = compute_score(sk, family, hnum, addr, dif, cpu)
            if score > hiscore:
                group = sk.reuseport_cb
                if sk.reuseport and isinstance(group, ReuseportGroup):
                    flow_hash = self.secret.ehashfn(daddr, hnum, saddr, sport)
                    chosen = group.select_by_hash(flow_hash)
                    if chosen is not None:
                        return chosen
                result, hiscore = sk, score
        return result

    def listeners(self) -> list[TableEntry]:
        return [sk for chain in list(self._buckets) for sk in chain]
