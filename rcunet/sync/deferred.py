"""Deferred freeing to the allocating worker (skb_attempt_defer_free, reference §5.3).

A receive worker allocates buffers from its own ``BufferPool``; a user thread consumes them
in ``recv()``.  Legacy: the consumer frees each buffer where it is (``free_now``), inside its
socket lock section, touching the allocator's pool from a foreign thread.  Modern: the
consumer hands the buffer to ``DeferredFreeList.free(buf, owner)``, which queues it on the
*owner's* list (one ``deque.append``); the owner recycles its queue in ``drain()`` at the
end of its batch, or when a "kick" (``kick_at`` queued objects) asks it to.  An object
consumed on its owning worker is freed immediately; ``defer_max=0`` turns deferral off.

Counters are per-thread cells summed on read (the kernel's per-CPU counters): no shared
read-modify-write on the fast path.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.sync.hooks import yield_point

#: Yield point in free() between finding the owner's queue and appending to it.
FREE_AFTER_LOOKUP = "deferred.free.after_lookup"

_get_ident = threading.get_ident


class PerThreadCounter:
    """A counter each thread adds to in its own cell; ``value()`` sums the cells.

    Concurrency: ``_cells`` maps thread id -> one-element list.  A thread only writes its
    own cell (``cell[0] += n`` has a single writer, so no update is lost); cells are created
    with ``dict.setdefault`` (atomic) and summed over a ``dict.copy()`` (atomic).
    """

    __slots__ = lockfree_read_slots("_cells")  # every thread reads _cells

    def __init__(self) -> None:
        self._cells: dict[int, list[int]] = {}

    def add(self, n: int = 1) -> None:
        ident = _get_ident()
        cells = self._cells
        try:
            # atomic: dict subscript.  Not dict.get: get_ident() makes a new int each
            # call (rcunet.core.freethreaded, point 2).
            cell = cells[ident]
        except KeyError:
            cell = cells.setdefault(ident, [0])  # atomic: dict.setdefault
        cell[0] += n  # owner: only this thread writes this cell

    def value(self) -> int:
        return sum(cell[0] for cell in self._cells.copy().values())  # atomic: dict.copy


class Buffer:
    """A pooled buffer tagged with the pool (worker) that allocated it."""

    # handed between threads (allocated by a worker, freed by a consumer)
    __slots__ = lockfree_read_slots("data", "view", "length", "owner", "generation")

    def __init__(self, size: int, owner: Hashable) -> None:
        self.data = bytearray(size)  # fixed size: never resized (``view`` exports it)
        #: A view of ``data`` to write into: ``view[:n] = payload`` is one copy, where
        #: ``data[:n] = payload`` first copies a payload that is not a bytearray into a
        #: temporary bytearray (CPython's bytearray slice assignment).
        self.view = memoryview(self.data)
        self.length = 0
        self.owner = owner  # immutable: the allocating worker
        self.generation = 0  # bumped on every recycle (tests detect use-after-recycle)


class BufferPool:
    """Per-worker pool of fixed-size buffers.

    Concurrency:
      ``alloc`` is called by the owning worker; ``recycle`` may be called from any thread
      (the legacy path frees from the consumer).  The free list is a deque: ``append`` and
      ``pop`` are atomic, so the pool needs no lock.  Counters are per-thread cells.
    """

    def __init__(self, owner: Hashable, buffer_size: int = 2048, capacity: int = 1024) -> None:
        if buffer_size <= 0 or capacity <= 0:
            raise ValueError("buffer_size and capacity must be positive")
        self.owner = owner  # immutable
        self.buffer_size = buffer_size  # immutable
        self.capacity = capacity  # immutable
        self._free: deque[Buffer] = deque()
        self.allocated = PerThreadCounter()  # buffers handed out
        self.created = PerThreadCounter()  # buffers built because the free list was empty
        self.recycled = PerThreadCounter()  # buffers returned to the free list
        self.recycled_foreign = PerThreadCounter()  # ...by a thread other than the owner's
        self.dropped = PerThreadCounter()  # returned while the pool was full (left to GC)
        self._owner_thread: int | None = None

    def bind_owner_thread(self, ident: int | None = None) -> None:
        """Record which thread is this pool's worker (default: the caller)."""
        self._owner_thread = _get_ident() if ident is None else ident

    def alloc(self) -> Buffer:
        self.allocated.add()
        free = self._free
        try:
            # atomic: deque length, then deque.pop (an empty pool raises no IndexError)
            buf = free.pop() if free else None
        except IndexError:  # another thread took the last one
            buf = None
        if buf is None:
            self.created.add()
            return Buffer(self.buffer_size, self.owner)
        buf.length = 0
        return buf

    def recycle(self, buf: Buffer) -> None:
        if buf.owner != self.owner:
            raise ValueError(f"buffer of {buf.owner!r} recycled into the pool of {self.owner!r}")
        buf.generation += 1
        if self._owner_thread is not None and _get_ident() != self._owner_thread:
            self.recycled_foreign.add()
        if len(self._free) >= self.capacity:  # a soft cap: racing recyclers may overshoot
            self.dropped.add()
            return
        self._free.append(buf)  # atomic: deque.append
        self.recycled.add()

    def free_count(self) -> int:
        return len(self._free)


@dataclass  # no slots: freeing threads read it (rcunet.core.freethreaded); one per worker
class _OwnerQueue:
    owner: Hashable
    recycle: Callable[[object], object]
    thread: int  # the owning worker's thread id
    kick: Callable[[Hashable], object] | None
    queue: deque[object]
    kick_pending: bool = False
    #: Set by unregister() before its final drain (one attribute store); free() loads it
    #: after its append, so an object queued as the owner left is recycled by one of them.
    retired: bool = False


class DeferredFreeList:
    """Per-owner deferred-free queues (``softnet_data.defer_list`` per allocating worker).

    ``register(owner, recycle, kick=None)`` — called by the owning worker (its thread id is
    recorded): ``recycle(obj)`` frees one object back to it; ``kick(owner)`` is called when
    its queue reaches ``kick_at`` (the IPI that raises its softirq).
    ``free(obj, owner)`` — from any thread, outside any lock section: queues ``obj`` on the
    owner's list (or frees it at once when the caller is the owner, the owner is unknown,
    or deferral is off).  ``drain()`` — the owner recycles everything queued to it.
    ``free_now(obj, owner)`` — the legacy path: recycle right here, right now.

    Concurrency:
      ``_owners`` is published copy-on-write under ``_register_lock`` (readers: one dict
      get).  Each queue is a deque: producers ``append``, the owner ``popleft``s (both
      atomic).  ``kick_pending`` is a hint: a race may send two kicks, never lose one
      while objects are queued, because ``drain`` clears it before it empties the queue.
      ``unregister`` racing ``free``: the freer may have loaded the old ``_owners``; it
      appends, then loads ``retired`` (stored by unregister before its drain), so either
      unregister's drain sees the object or the freer drains the retired queue itself.
    """

    def __init__(self, defer_max: int = 128, kick_at: int | None = None) -> None:
        if defer_max < 0:
            raise ValueError("defer_max must be >= 0")
        self.defer_max = defer_max  # skb_defer_max; 0 disables deferral
        self.kick_at = kick_at if kick_at is not None else max(1, defer_max // 2)
        self._register_lock = threading.Lock()
        self._owners: dict[Hashable, _OwnerQueue] = {}  # rcu: replaced under _register_lock
        self.deferred = PerThreadCounter()  # objects queued to another worker
        self.freed_local = PerThreadCounter()  # freed at once (owner, unknown, or off)
        self.drained = PerThreadCounter()  # objects recycled by drain()
        self.kicks = PerThreadCounter()

    def register(
        self,
        owner: Hashable,
        recycle: Callable[[object], object],
        kick: Callable[[Hashable], object] | None = None,
        *,
        thread: int | None = None,
    ) -> None:
        ident = _get_ident() if thread is None else thread
        entry = _OwnerQueue(owner, recycle, ident, kick, deque())
        with self._register_lock:
            if owner in self._owners:
                raise ValueError(f"owner {owner!r} is already registered")
            owners = dict(self._owners)
            owners[owner] = entry
            self._owners = owners  # atomic: one attribute store (copy-on-write)

    def unregister(self, owner: Hashable) -> int:
        """Forget ``owner`` after recycling what is queued for it; returns that count."""
        with self._register_lock:
            owners = dict(self._owners)
            entry = owners.pop(owner, None)
            self._owners = owners
        if entry is None:
            return 0
        entry.retired = True  # atomic: one attribute store, before the final drain
        return self._drain_entry(entry)

    def free(self, obj: object, owner: Hashable) -> bool:
        """Free ``obj`` allocated by ``owner``; True if it was deferred to the owner."""
        entry = _lookup(self._owners, owner)  # atomic: attribute load + dict subscript
        if entry is None or self.defer_max == 0 or entry.thread == _get_ident():
            self.freed_local.add()
            (entry.recycle if entry is not None else _drop)(obj)
            return False
        yield_point(FREE_AFTER_LOOKUP)
        entry.queue.append(obj)  # atomic: deque.append
        self.deferred.add()
        if entry.retired:  # atomic: attribute load; the owner left while we queued
            self._drain_entry(entry)
            return True
        if len(entry.queue) >= self.kick_at and not entry.kick_pending:
            entry.kick_pending = True
            self.kicks.add()
            if entry.kick is not None:
                entry.kick(owner)
        return True

    def free_now(self, obj: object, owner: Hashable) -> None:
        """Legacy: recycle immediately in the calling thread."""
        entry = _lookup(self._owners, owner)
        self.freed_local.add()
        (entry.recycle if entry is not None else _drop)(obj)

    def drain(self, owner: Hashable | None = None) -> int:
        """Recycle everything queued for ``owner`` (default: the caller's own queue)."""
        entry = self._entry_for(owner)
        if entry is None:
            return 0
        return self._drain_entry(entry)

    def _drain_entry(self, entry: _OwnerQueue) -> int:
        entry.kick_pending = False  # before emptying: a later append re-kicks
        queue = entry.queue
        if not queue:  # atomic: deque length; an append after this is a later drain's
            return 0  # (the owner drains before every allocation: mostly nothing queued)
        n = 0
        while queue:  # atomic: deque length (appends only add; ends without an exception)
            try:
                obj = queue.popleft()  # atomic: deque.popleft
            except IndexError:
                break  # another drainer took the last one
            entry.recycle(obj)
            n += 1
        if n:
            self.drained.add(n)
        return n

    def queued(self, owner: Hashable | None = None) -> int:
        entry = self._entry_for(owner)
        return len(entry.queue) if entry is not None else 0

    def _entry_for(self, owner: Hashable | None) -> _OwnerQueue | None:
        owners = self._owners
        if owner is not None:
            return _lookup(owners, owner)
        ident = _get_ident()
        for entry in owners.values():
            if entry.thread == ident:
                return entry
        return None


def _lookup(owners: dict[Hashable, _OwnerQueue], owner: Hashable) -> _OwnerQueue | None:
    """``owners.get(owner)`` spelled as a subscript (rcunet.core.freethreaded, point 2)."""
    try:
        return owners[owner]  # atomic: dict subscript
    except KeyError:
        return None


def _drop(obj: object) -> None:
    """Free an object nobody pools: leave it to the garbage collector."""
