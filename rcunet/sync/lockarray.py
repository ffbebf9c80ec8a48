"""Per-bucket locks created on first use.

A hash table with a lock per bucket (bhash, bhash2, lhash2: 4096 buckets each) used to
build every lock with the table: ~10,000 instrumented locks, most never taken, made each
Host cost tens of milliseconds.  ``LockArray`` holds ``None`` until a bucket's lock is first
asked for::

    locks = LockArray(BHASH_LOCK, 4096)
    lock = locks[i] or locks.create(i)

Concurrency:
  ``locks[i]`` is one list-slot load (atomic on free-threaded CPython; ``LockArray`` is a
  ``list``, so the load is ``list.__getitem__`` itself).  It pairs with the one list-slot
  store in ``create``, which runs under ``_create_lock`` and stores a lock that is fully
  constructed (and registered with lock_stat/lockdep) before it is published.  Two threads
  that both see ``None`` serialise on ``_create_lock``; the second finds the first one's
  lock and returns it, so every caller of slot ``i`` gets the same lock, forever.
"""

from __future__ import annotations

import threading

from rcunet.sync.lock import Lock, LockClass


class LockArray(list):  # type: ignore[type-arg]
    """``n`` locks of ``lock_class``, each made by the first ``create(i)``.  Index it
    like a tuple of locks (``None`` for one not made yet); see the module docstring."""

    def __init__(self, lock_class: LockClass, n: int) -> None:
        if n < 0:
            raise ValueError(f"lock count must be >= 0, got {n}")
        super().__init__([None] * n)
        self.lock_class = lock_class  # immutable
        self._create_lock = threading.Lock()

    def create(self, i: int) -> Lock:
        """The lock of slot ``i``, made now if no thread made it yet."""
        with self._create_lock:
            lock = list.__getitem__(self, i)
            if lock is None:
                lock = self.lock_class.new()
                self[i] = lock  # atomic: one list-slot store; publishes a complete lock
        return lock  # type: ignore[no-any-return]

    def get(self, i: int) -> Lock:
        """``self[i] or self.create(i)`` as a method (for callers off the hot path)."""
        return list.__getitem__(self, i) or self.create(i)

    def created(self) -> int:
        """How many of the locks exist (for tests and diagnostics)."""
        return sum(lock is not None for lock in list(self))
