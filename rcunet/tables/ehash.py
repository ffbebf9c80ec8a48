"""The TCP established hash (reference §1): every non-listening TCP identity - full
sockets, TIME_WAIT entries and request sockets - by exact 4-tuple.

How the Linux mechanisms map to Python:

* ``hlist_nulls`` chain  ->  an immutable tuple per bucket.  Writers build a new tuple
  under the bucket's stripe lock and store it with one list-slot assignment; readers load
  the slot once and scan that snapshot with no lock.
* nulls end-of-chain check  ->  not needed: a snapshot tuple belongs to one slot, so a
  reader can never follow a ``next`` pointer of a recycled entry into another chain (the
  diversion the nulls marker detects, reference §1.4).  What remains of the problem is the
  *recycled entry*: an entry object may be re-keyed after it left the table
  (``TableEntry.recycle``, the SLAB_TYPESAFE_BY_RCU reuse), so the reader pins with
  ``ref.get()``, re-checks the key, and on a mismatch drops the pin and restarts from a
  fresh snapshot - exactly ``__inet_lookup_established``'s "goto begin".
* ``refcount_inc_not_zero`` failing on a dying socket  ->  ``ref.get()`` returning False;
  the lookup then returns None without restarting, as Linux does (§1.5 step 3.3).
* atomic replace (``hlist_nulls_replace_init_rcu``, the 2025 Luo fix)  ->  the new entry
  takes the old one's position in a new tuple published by one store; a concurrent lookup
  sees the old tuple (old entry) or the new one (new entry), never neither.  A TIME_WAIT
  entry's refcount is set at construction, before it can be published.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator

from rcunet.sync.hooks import yield_point
from rcunet.sync.lock import LockClass
from rcunet.sync.lockarray import LockArray
from rcunet.tables.entry import State, TableEntry, TimeWaitEntry
from rcunet.tables.secret import HashSecret

EHASH_LOCK = LockClass("ehash_lock")

#: ``tcp_init``'s default in this project: 16K buckets per Host (Linux: 1 per 128 KB RAM).
DEFAULT_EHASH_SIZE = 1 << 14


def round_up_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def ehash_lock_count(buckets: int, ncpus: int, nodes: int = 1, *, cache_line: int = 64,
                     lock_size: int = 4, page_size: int = 4096) -> int:
    """``inet_ehash_locks_alloc`` since March 2025 (reference §1.2): two cache lines of
    locks per possible CPU, at least one page of locks per NUMA node, rounded up to a
    power of two, never more than the number of buckets."""
    per_cpu = max(2 * cache_line // lock_size, 1) * ncpus
    wanted = max(per_cpu, nodes * page_size // lock_size)
    return min(round_up_pow2(wanted), buckets)


#: Called under the ehash lock with a TIME_WAIT entry holding the connecting 4-tuple;
#: returns True to take it over (``twsk_unique``).
TwUnique = Callable[[TimeWaitEntry], bool]


class EstablishedTable:
    """Exact 4-tuple -> entry.  Wildcards never live here.

    Concurrency:
      readers   packet input and connect()'s pre-check; no lock.  Load one bucket slot
                (a single list-slot load is atomic; it pairs with the one store in
                ``_publish_locked``) and scan that immutable tuple.
      writers   connect/accept/close/TIME_WAIT; hold ``ehash_lock(hash)`` (a stripe that
                covers every bucket ``b`` with ``b & locks_mask`` equal) and publish a new
                tuple with one store.  A replacement takes the old entry's place in the
                same publication.
      found     an entry may be dying or recycled: ``lookup`` pins with ``ref.get()`` and
                re-checks the key after pinning.
      locks     ``_locks`` is a LockArray: a stripe's lock is made on first use (one
                list-slot load; rcunet.sync.lockarray pairs it).
      counters  ``_tw_counts[i]`` guarded-by ``_locks[i]``; ``tw_count()`` sums the slots
                without a lock (a racy total, like Linux's tw_count atomic read).
    Lock order: bhash_lock > bhash2_lock > ehash_lock; never two ehash locks at once.
    """

    def __init__(self, secret: HashSecret, *, size: int = DEFAULT_EHASH_SIZE,
                 ncpus: int | None = None, nodes: int = 1) -> None:
        if size < 1 or size & (size - 1):
            raise ValueError(f"ehash size must be a power of two, got {size}")
        self.secret = secret  # immutable
        self._mask = size - 1  # immutable
        self._buckets: list[tuple[TableEntry, ...]] = [()] * size  # rcu: writers hold lock
        nlocks = ehash_lock_count(size, ncpus or os.cpu_count() or 1, nodes)
        self._locks = LockArray(EHASH_LOCK, nlocks)  # each made on first use
        self._locks_mask = nlocks - 1  # immutable
        self._tw_counts = [0] * nlocks  # guarded-by: _locks[i]

    # --- hash, bucket and lock helpers -----------------------------------------------
    @property
    def size(self) -> int:
        return self._mask + 1

    @property
    def lock_count(self) -> int:
        return len(self._locks)

    def hashfn(self, laddr: bytes, lport: int, faddr: bytes, fport: int) -> int:
        return self.secret.ehashfn(laddr, lport, faddr, fport)

    def hash_port0(self, laddr: bytes, faddr: bytes, fport: int) -> int:
        return self.secret.ehash_port0(laddr, faddr, fport)

    def bucket_index(self, h: int) -> int:
        return h & self._mask

    def ehash_lock(self, h: int):  # type: ignore[no-untyped-def]
        i = h & self._locks_mask
        return self._locks[i] or self._locks.create(i)  # LockArray: atomic slot load

    def chain_rcu(self, h: int) -> tuple[TableEntry, ...]:
        """The bucket's current snapshot (one list-slot load; no lock, no reference)."""
        return self._buckets[h & self._mask]

    def _publish_locked(self, h: int, chain: tuple[TableEntry, ...]) -> None:
        self._buckets[h & self._mask] = chain  # atomic: one list-slot store

    # --- lookup ----------------------------------------------------------------------
    def lookup(self, laddr: bytes, lport: int, faddr: bytes, fport: int,
               dif: int = 0) -> TableEntry | None:
        """``__inet_lookup_established``: the entry for the 4-tuple, pinned (the caller
        owes ``put_entry``), or None.  Takes no lock."""
        h = self.secret.ehashfn(laddr, lport, faddr, fport)
        key = (laddr, lport, faddr, fport)
        buckets, idx = self._buckets, h & self._mask
        while True:
            chain = buckets[idx]  # atomic: list-slot load, pairs with _publish_locked
            yield_point("ehash.lookup.after_snapshot")
            for e in chain:
                if e.sk_hash != h or e.key != key or (e.bound_dev and e.bound_dev != dif):
                    continue
                yield_point("ehash.lookup.after_match")
                ref = e.ref  # the incarnation we pin; a recycle installs a new RcuRef
                if not ref.get():
                    return None  # dying: Linux gives up here rather than restarting
                yield_point("ehash.lookup.after_pin")
                if e.key == key and e.sk_hash == h and (not e.bound_dev or e.bound_dev == dif):
                    return e
                # Recycled between the match and the pin: drop the pin, start again.
                if ref.put():
                    destroy_entry(e)
                break
            else:
                return None

    def check_established_rcu(self, key: tuple[bytes, int, bytes, int], h: int,
                              dev: int) -> bool:
        """connect()'s lockless pre-check (reference §3.3, rcu_lookup=true): True when a
        non-TIME_WAIT entry owns the 4-tuple ("busy, skip this port").  A TIME_WAIT match
        or no match means "decide under the lock".  Filter only: no pin, no restart."""
        # atomic: list-slot load, pairs with _publish_locked
        return chain_established_rcu(self._buckets[h & self._mask], key, h, dev)

    def buckets_rcu(self) -> tuple[list[tuple[TableEntry, ...]], int]:
        """(bucket list, mask) for a caller that checks many hashes in a row (connect()'s
        candidate loop): it loads ``buckets[h & mask]`` itself - one list-slot load,
        pairing with ``_publish_locked`` - and scans it with ``chain_established_rcu``.
        Both values are immutable; reading them once per connect() instead of once per
        candidate keeps the loop off this table's shared attributes."""
        return self._buckets, self._mask

    # --- writers ---------------------------------------------------------------------
    def insert(self, sk: TableEntry, *, check_dup: bool = True, h: int | None = None) -> bool:
        """``inet_ehash_insert``: publish ``sk`` at its chain head.  With ``check_dup``
        a second identical 4-tuple is refused (returns False; the caller destroys the
        loser, as ``inet_ehash_nolisten`` does).  ``h``: the 4-tuple hash if the caller
        already has it (connect() does)."""
        if h is None:
            h = self.secret.ehashfn(sk.laddr, sk.lport, sk.faddr, sk.fport)
        with self.ehash_lock(h):
            chain = self._buckets[h & self._mask]
            if any(e is sk for e in chain):
                raise OSError(errno.EISCONN, f"{sk!r} is already hashed")
            if check_dup and _match_locked(chain, sk.key, h, sk.bound_dev) is not None:
                return False
            sk.sk_hash = h  # identity final before publication
            yield_point("ehash.insert.before_publish")
            self._publish_locked(h, (sk,) + chain)
            if isinstance(sk, TimeWaitEntry):
                self._tw_counts[h & self._locks_mask] += 1
        return True

    def replace(self, old: TableEntry, new: TableEntry) -> bool:
        """Put ``new`` where ``old`` is, in one publication (request -> full socket,
        established -> TIME_WAIT).  False when ``old`` is no longer hashed."""
        if new.key != old.key:
            raise OSError(errno.EINVAL,
                          f"replace needs the same 4-tuple: {old.key!r} vs {new.key!r}")
        h = self.secret.ehashfn(new.laddr, new.lport, new.faddr, new.fport)
        with self.ehash_lock(h):
            return self._replace_locked(h, old, new)

    def _replace_locked(self, h: int, old: TableEntry, new: TableEntry) -> bool:
        chain = self._buckets[h & self._mask]
        i = _index_of(chain, old)
        if i < 0:
            return False
        new.sk_hash = h
        yield_point("ehash.replace.before_publish")
        self._publish_locked(h, chain[:i] + (new,) + chain[i + 1:])
        stripe = h & self._locks_mask
        self._tw_counts[stripe] += isinstance(new, TimeWaitEntry) - isinstance(old, TimeWaitEntry)
        return True

    def remove(self, sk: TableEntry) -> bool:
        """``inet_unhash``: idempotent; re-checks "still hashed" under the lock."""
        h = sk.sk_hash
        with self.ehash_lock(h):
            chain = self._buckets[h & self._mask]
            i = _index_of(chain, sk)
            if i < 0:
                return False
            self._publish_locked(h, chain[:i] + chain[i + 1:])
            if isinstance(sk, TimeWaitEntry):
                self._tw_counts[h & self._locks_mask] -= 1
        return True

    def connect_insert_locked(
        self, sk: TableEntry, key: tuple[bytes, int, bytes, int], h: int,
        tw_unique: TwUnique | None,
    ) -> tuple[bool, TimeWaitEntry | None, TableEntry | None]:
        """The locked half of ``__inet_check_established``; caller holds
        ``ehash_lock(h)``.  Returns (ok, tw, owner):

        * a non-TW owner of ``key``, or a TIME_WAIT owner ``tw_unique`` refuses ->
          (False, None, owner);
        * otherwise sk gets its final identity (``key``, ``sk_hash``) and is published,
          taking the accepted tw's place in the same store -> (True, tw or None, None).
        """
        chain = self._buckets[h & self._mask]
        tw: TimeWaitEntry | None = None
        for e in chain:
            if e.sk_hash == h and e.key == key and (not e.bound_dev or e.bound_dev == sk.bound_dev):
                if (e.state == State.TIME_WAIT and tw_unique is not None
                        and isinstance(e, TimeWaitEntry) and tw_unique(e)):
                    tw = e
                    break
                return False, None, e
        sk.set_key(*key)  # identity before publication ("funny identity" comment)
        sk.sk_hash = h
        yield_point("ehash.connect.before_publish")
        if tw is not None:
            i = _index_of(chain, tw)
            self._publish_locked(h, chain[:i] + (sk,) + chain[i + 1:])
            self._tw_counts[h & self._locks_mask] -= 1
        else:
            self._publish_locked(h, (sk,) + chain)
        return True, tw, None

    # --- inspection ------------------------------------------------------------------
    def tw_count(self) -> int:
        return sum(self._tw_counts)  # each slot load atomic; the total may be stale

    def contains(self, sk: TableEntry) -> bool:
        h = sk.sk_hash
        return any(e is sk for e in self._buckets[h & self._mask])

    def entries(self) -> Iterator[TableEntry]:
        """Every hashed entry (bucket by bucket snapshots; for invariants and tests)."""
        for chain in list(self._buckets):
            yield from chain

    def __len__(self) -> int:
        return sum(len(chain) for chain in list(self._buckets))


#: ``State.TIME_WAIT`` as a plain int: a small int is immortal, so comparing with it
#: touches no shared reference count (free-threaded builds), unlike the enum member.
_TIME_WAIT = int(State.TIME_WAIT)


def chain_established_rcu(chain: tuple[TableEntry, ...], key: tuple[bytes, int, bytes, int],
                          h: int, dev: int) -> bool:
    """``check_established_rcu`` on a chain snapshot the caller loaded."""
    for e in chain:
        if e.sk_hash == h and e.key == key and (not e.bound_dev or e.bound_dev == dev):
            return e.state != _TIME_WAIT
    return False


def _index_of(chain: tuple[TableEntry, ...], entry: TableEntry) -> int:
    """Position of ``entry`` (by identity, not equality) in ``chain``, or -1."""
    for i, e in enumerate(chain):
        if e is entry:
            return i
    return -1


def _match_locked(chain: tuple[TableEntry, ...], key: tuple[bytes, int, bytes, int], h: int,
                  dev: int) -> TableEntry | None:
    for e in chain:
        if e.sk_hash == h and e.key == key and (not e.bound_dev or e.bound_dev == dev):
            return e
    return None


def destroy_entry(e: TableEntry) -> None:
    """The last reference went away: run the entry's destructor if it has one
    (``sock_gen_put`` picking the destructor by type)."""
    destructor = getattr(e, "destroy", None)
    if destructor is not None:
        destructor()


def put_entry(e: TableEntry) -> None:
    """Drop a reference taken by ``lookup``."""
    if e.ref.put():
        destroy_entry(e)

