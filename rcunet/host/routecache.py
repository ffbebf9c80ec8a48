"""The route cache (Linux's dst entries), pinned with rcuref — seed 002.

A send looks up the cached ``DstEntry`` for its destination with no lock (one dict
load), pins it with ``ref.get()`` and re-checks that it is still current (the routing
table's generation); it uses the entry and drops the pin with ``release()``.  Route
changes invalidate the cache by publishing an empty dict and dropping the cache's own
reference on every old entry; the last sender to let go frees it.  A dead entry cannot
be revived: ``get()`` fails and the sender takes the slow path.

A connected TCP socket keeps its entry pinned from one transmit to the next (Linux's
``sk_dst_cache``): it checks per segment that the entry is still ``current`` (no
invalidation since it was made: ``dst_check``) and takes no reference per segment.

``Tuning.dst_rcuref`` picks the refcount: ``RcuRef`` (get is one unconditional add, no
retry; modern) or ``IncNotZeroRef`` (compare-and-swap retry loop; legacy, before
"net: Use rcuref for dst" in Linux 6.5).  ``DstEntry.freed`` plus ``use()`` let the
seed-002 lab prove that no send ever uses a freed entry.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.route import Route
from rcunet.sync.lock import LockClass
from rcunet.sync.refcount import IncNotZeroRef, RcuRef

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.host.interface import Interface

DST_CACHE_LOCK = LockClass("dst_cache.lock")


@mypyc_attr(native_class=False)  # mypyc compiles no subclass of this builtin
class UseAfterFree(RuntimeError):
    """A send used a dst entry after its last reference was dropped."""


class DstEntry:
    """One cached route decision: where ``dst`` goes and from which source address.

    Concurrency: every field but ``freed`` is immutable after construction.  ``freed``
    is one attribute store by the thread whose ``put()`` returned True; ``use()`` reads
    it (atomic: one attribute load) while holding a reference, so it can only see True
    if the refcount was broken.
    """

    __slots__ = lockfree_read_slots("dst", "route", "iface", "src", "next_hop", "mtu",
                                    "generation", "ref", "freed", "cache", "epoch")

    def __init__(self, dst: bytes, route: Route, iface: Interface, src: bytes, mtu: int,
                 generation: int, rcuref: bool, cache: DstCache | None = None,
                 epoch: int = 0) -> None:
        self.dst = dst
        self.route = route
        self.iface = iface
        self.src = src
        self.next_hop = route.next_hop(dst)
        self.mtu = mtu
        self.generation = generation
        # initial 2: one reference for the cache, one for the caller that created it
        self.ref: RcuRef | IncNotZeroRef = RcuRef(2) if rcuref else IncNotZeroRef(2)
        self.freed = False
        self.cache = cache  # immutable: told when the entry is freed
        self.epoch = epoch  # immutable: the cache's invalidation count when made

    def hold(self) -> bool:
        return self.ref.get()

    def release(self) -> None:
        if self.ref.put():
            self.freed = True
            if self.cache is not None:
                self.cache.entry_freed()

    def use(self) -> DstEntry:
        if self.freed:
            raise UseAfterFree(f"dst entry for {self.dst.hex()} used after free")
        return self


@mypyc_attr(allow_interpreted_subclasses=True)  # tests count lookups with a subclass
class DstCache:
    """Destination -> DstEntry.

    Concurrency:
      _entries  rcu: a dict replaced wholesale by ``invalidate`` (one store) and filled
                under ``_lock``; readers do one subscript (atomic; not ``.get``: the key is a
                fresh tuple, ``rcunet.core.freethreaded`` point 2) on the snapshot they
                loaded, then pin the entry and re-check its generation.
      per thread  each sending thread first looks in its own dict (``_tls``; owner: that
                thread), as Linux keeps a per-CPU output dst in the nexthop
                (``nhc_pcpu_rth_output``).  It is dropped when ``_epoch`` (bumped under
                ``_lock`` by ``invalidate``; loaded with one attribute load) moves, and
                holds no reference: a dead entry fails ``hold()`` and the lookup goes on
                to the shared dict.  Why it exists: on free-threaded 3.13 even a
                subscript into a shared dict whose stored key is equal but not identical
                to the probe (a new ``(dst, oif)`` tuple per send) takes the dict's lock
                (``rcunet.core.freethreaded``), so every sender queued on that one lock.
    """

    def __init__(self, host: Host) -> None:
        self._host = host
        self._lock = DST_CACHE_LOCK.new()
        self._entries: dict[tuple[bytes, int], DstEntry] = {}
        self._epoch = 0  # bumped under _lock by invalidate()
        self._tls = threading.local()
        self.slow_lookups = 0  # guarded-by: _lock (entries created)
        self._freed_lock = threading.Lock()
        self.freed = 0  # guarded-by: _freed_lock

    def entry_freed(self) -> None:
        with self._freed_lock:
            self.freed += 1

    def live_entries(self) -> int:
        """Entries created and not yet freed (cached ones plus any still pinned)."""
        with self._lock:
            created = self.slow_lookups
        with self._freed_lock:
            return created - self.freed

    def cached(self, dst: bytes, oif: int = 0) -> DstEntry | None:
        """The shared cache's entry for ``(dst, oif)``, not pinned (statistics only: it
        may be dead by the time the caller reads it); None when none is cached."""
        entries = self._entries  # atomic: one attribute load (pairs with invalidate)
        try:
            return entries[(dst, oif)]  # atomic: dict subscript (a fresh key tuple)
        except KeyError:
            return None

    def lookup(self, dst: bytes, oif: int = 0) -> DstEntry | None:
        """A pinned entry for ``dst`` (the caller must ``release()`` it), or None when
        there is no route."""
        generation = self._host.routes.generation
        key = (dst, oif)
        local = self._thread_cache()
        entry = local[key] if key in local else None  # owner: this thread's dict
        if entry is not None and entry.generation == generation and entry.hold():
            if entry.generation == self._host.routes.generation:
                return entry
            entry.release()
        # The shared dict: also when this thread's entry died (another thread replaced
        # it), so one lookup that raced another's does not make every later one slow.
        entries = self._entries  # atomic: one attribute load (pairs with invalidate)
        try:
            entry = entries[key]  # atomic: dict subscript (not .get: a fresh key tuple)
        except KeyError:
            entry = None
        if entry is not None and entry.generation == generation and entry.hold():
            if entry.generation == self._host.routes.generation:
                local[key] = entry
                return entry
            entry.release()
        entry = self._lookup_slow(dst, oif)
        if entry is not None:
            local[key] = entry
        return entry

    def current(self, entry: DstEntry) -> bool:
        """dst_check: no invalidation (route, address or PMTU change) since ``entry`` was
        made, so a holder may keep using it.  Atomic: two attribute loads each side; an
        invalidation racing this check is seen by the holder's next check."""
        return entry.epoch == self._epoch and entry.generation == self._host.routes.generation

    def _thread_cache(self) -> dict[tuple[bytes, int], DstEntry]:
        """This thread's dict, emptied when the cache was invalidated since it was filled."""
        tls = self._tls
        epoch = self._epoch  # atomic: attribute load; pairs with the store in invalidate
        cache: dict[tuple[bytes, int], DstEntry] | None = getattr(tls, "cache", None)
        if cache is None or tls.epoch != epoch:
            cache = tls.cache = {}
            tls.epoch = epoch
        return cache

    def _lookup_slow(self, dst: bytes, oif: int) -> DstEntry | None:
        host = self._host
        # read first: an invalidation from here on makes the new entry stale at once
        epoch = self._epoch  # atomic: attribute load; pairs with the store in invalidate
        route, generation = host.routes.lookup_with_generation(dst, oif or None)
        if route is None:
            return None
        iface = host.interfaces.get(route.ifindex)
        if iface is None:
            return None
        src = route.prefsrc or host.ip.select_source(iface, dst)
        if src is None:
            return None
        link_mtu = route.mtu or iface.mtu
        mtu = host.pmtu.path_mtu(dst, link_mtu, host.now())
        entry = DstEntry(dst, route, iface, src, mtu, generation, host.tuning.dst_rcuref, self,
                         epoch)
        key = (dst, oif)
        with self._lock:
            entries = self._entries
            old = entries[key] if key in entries else None
            if old is not None and old.generation == generation and old.hold():
                winner = old  # another thread filled it first: keep that one
            else:
                winner = None
                self.slow_lookups += 1
                entries[key] = entry  # atomic: dict set; readers see old or new
        if winner is not None:
            return winner  # ours was never published: nobody else can see it
        if old is not None:
            old.release()  # the cache's reference to the entry it replaced
        return entry

    def invalidate(self) -> None:
        """Routes or PMTU changed: drop every cached decision (senders holding one
        finish with it; the last release frees it)."""
        with self._lock:
            old = self._entries
            self._entries = {}  # atomic: one attribute store publishes the empty cache
            self._epoch += 1  # every thread's own cache is stale from now on
        for entry in old.values():
            entry.release()

    def __len__(self) -> int:
        return len(self._entries)
