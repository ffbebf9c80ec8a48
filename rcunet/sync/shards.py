"""Per-thread counter shards: the kernel's per-CPU statistics, in Python.

Many threads bump the same statistics on hot paths; a shared ``x += 1`` loses updates
without the GIL and a lock per increment serialises the path being measured.  Each thread
owns a list of ints (one slot per field) and readers sum the registered lists.
"""

from __future__ import annotations

import threading


class ShardedStats:
    """Subclasses name their counters in ``FIELDS``; hot paths do
    ``shard = stats.shard(); shard[INDEX] += 1``.

    Concurrency: each thread writes only its own shard (owner: that thread);
    ``snapshot`` copies the registered shards (``list(shard)``) under ``_lock``, which
    a thread takes once, to register.
    """

    FIELDS: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shards: list[list[int]] = []  # guarded-by: _lock (append only)
        self._local = threading.local()

    def shard(self) -> list[int]:
        try:
            return self._local.shard  # type: ignore[no-any-return]
        except AttributeError:
            shard = [0] * len(self.FIELDS)
            with self._lock:
                self._shards.append(shard)
            self._local.shard = shard
            return shard

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            shards = [list(s) for s in self._shards]
        return {name: sum(s[i] for s in shards) for i, name in enumerate(self.FIELDS)}
