"""Per-thread counter shards: the kernel's per-CPU statistics, in Python.

Many threads bump the same statistics on hot paths; a shared ``x += 1`` loses updates
without the GIL and a lock per increment serialises the path being measured.  Each thread
owns a list of ints (one slot per field) and readers sum the registered lists.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import deque


class ShardedStats:
    """Subclasses name their counters in ``FIELDS``; hot paths do
    ``shard = stats.shard(); shard[INDEX] += 1``.

    Concurrency: each thread writes only its own shard (owner: that thread);
    ``snapshot`` copies the live shards (``list(shard)``) and the retired sums under
    ``_lock``, which a thread takes once, to register.  When a thread ends, its
    threading.local storage is released and the owner token's finalizer queues the
    shard's serial on ``_dead`` (deque.append: atomic, no lock, since a finalizer may run
    inside a garbage collection on a thread holding ``_lock``); the next snapshot or
    registration folds it into ``_retired``.  So a thread per connection does not leave a
    shard per connection behind.  A dead shard is never written again: the fold is exact.
    """

    FIELDS: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shards: dict[int, list[int]] = {}  # guarded-by: _lock
        self._retired = [0] * len(self.FIELDS)  # guarded-by: _lock
        self._dead: deque[int] = deque()
        self._serials = itertools.count()  # next() is atomic
        self._local = threading.local()

    def shard(self) -> list[int]:
        try:
            return self._local.shard  # type: ignore[no-any-return]
        except AttributeError:
            shard = [0] * len(self.FIELDS)
            owner = _ShardOwner()
            serial = next(self._serials)
            with self._lock:
                self._fold_dead_locked()
                self._shards[serial] = shard
            weakref.finalize(owner, self._dead.append, serial)
            self._local.owner = owner
            self._local.shard = shard
            return shard

    def _fold_dead_locked(self) -> None:
        while self._dead:
            shard = self._shards.pop(self._dead.popleft(), None)
            if shard is not None:
                self._retired = [a + b for a, b in zip(self._retired, shard, strict=True)]

    def live_shards(self) -> int:
        with self._lock:
            self._fold_dead_locked()
            return len(self._shards)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            self._fold_dead_locked()
            shards = [list(s) for s in self._shards.values()]
            shards.append(list(self._retired))
        return {name: sum(s[i] for s in shards) for i, name in enumerate(self.FIELDS)}


class _ShardOwner:
    """Kept in a thread's locals; its finalizer retires the thread's shard."""

    __slots__ = ("__weakref__",)
