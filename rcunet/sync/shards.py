"""Per-thread counter shards: the kernel's per-CPU statistics, in Python.

Many threads bump the same statistics on hot paths; a shared ``x += 1`` loses updates
without the GIL and a lock per increment serialises the path being measured.  Each thread
owns a list of ints (one slot per field) and readers sum the registered lists.
"""

from __future__ import annotations

import abc
import itertools
import threading
import weakref
from collections import deque
from typing import ClassVar, Generic, TypeVar

from mypy_extensions import mypyc_attr

S = TypeVar("S")


@mypyc_attr(allow_interpreted_subclasses=True)
class ShardRegistry(abc.ABC, Generic[S]):
    """One shard per live thread, summed by readers: the registry every sharded statistic
    shares (``ShardedStats`` here, ``rcunet.host.counters.Counters``).  A subclass says
    what a shard is (``_empty_shard``) and how an ended thread's shard is added to its
    retired sums (``_retire_locked``); it reads with ``snapshot`` under ``_lock``.

    Concurrency: each thread writes only its own shard (owner: that thread); ``_shards``
    (live shards by serial) and the retired sums are guarded-by ``_lock``, which a thread
    takes once, to register.  When a thread ends, its threading.local storage is
    released and the owner token's finalizer queues the shard's serial on ``_dead``
    (deque.append: atomic, no lock, since a finalizer may run inside a garbage collection
    on a thread holding ``_lock``); the next snapshot or registration folds it into the
    retired sums (popleft under ``_lock``).  So a thread per connection does not leave a
    shard per connection behind, as the kernel keeps one per CPU.  A dead shard is never
    written again: the fold is exact, and a snapshot counts each shard once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shards: dict[int, S] = {}  # guarded-by: _lock
        self._dead: deque[int] = deque()
        self._serials = itertools.count()  # next() is atomic
        self._local = threading.local()

    @abc.abstractmethod
    def _empty_shard(self) -> S:
        """A new thread's zeroed shard."""

    @abc.abstractmethod
    def _retire_locked(self, shard: S) -> None:
        """Add an ended thread's shard to the retired sums (``_lock`` held)."""

    def shard(self) -> S:
        """The calling thread's own shard (owner: this thread only; never hand it to
        another thread).  A hot path that bumps several counters fetches it once."""
        try:
            return self._local.shard  # type: ignore[no-any-return]
        except AttributeError:
            return self._new_shard()

    def _new_shard(self) -> S:
        shard = self._empty_shard()
        owner = _ShardOwner()
        serial = next(self._serials)
        with self._lock:
            self._fold_dead_locked()
            self._shards[serial] = shard
        weakref.finalize(owner, self._dead.append, serial)
        self._local.owner = owner  # released with the thread's locals: retires the shard
        self._local.shard = shard
        return shard

    def _fold_dead_locked(self) -> None:
        dead = self._dead
        while dead:
            shard = self._shards.pop(dead.popleft(), None)
            if shard is not None:
                self._retire_locked(shard)

    def live_shards(self) -> int:
        """Shards of threads still running (for tests and diagnostics)."""
        with self._lock:
            self._fold_dead_locked()
            return len(self._shards)


@mypyc_attr(allow_interpreted_subclasses=True)
class ShardedStats(ShardRegistry[list[int]]):
    """Subclasses name their counters in ``FIELDS``; hot paths do
    ``shard = stats.shard(); shard[INDEX] += 1``.  A shard is a list of ints, one slot per
    field; ``snapshot`` copies the live shards (``list(shard)``) under ``_lock``."""

    # A class attribute (ClassVar), so a subclass's own FIELDS is the one read, compiled too.
    FIELDS: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        super().__init__()
        self._retired = [0] * len(self.FIELDS)  # guarded-by: _lock

    def _empty_shard(self) -> list[int]:
        return [0] * len(self.FIELDS)

    def _retire_locked(self, shard: list[int]) -> None:
        self._retired = [a + b for a, b in zip(self._retired, shard, strict=True)]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            self._fold_dead_locked()
            shards = [list(s) for s in self._shards.values()]
            shards.append(list(self._retired))
        return {name: sum(s[i] for s in shards) for i, name in enumerate(self.FIELDS)}


# Not a native class when compiled: weakref.finalize needs a weak reference to it.
@mypyc_attr(native_class=False)
class _ShardOwner:
    """Kept in a thread's locals; its finalizer retires the thread's shard."""

    __slots__ = ("__weakref__",)
