"""SNMP/nstat-style counters (``IpInReceives``, ``UdpNoPorts``, ``TcpExtTWRecycled``...).

Many receive workers and user threads bump the same counters.  ``x += 1`` on a shared
dict loses updates without the GIL, and a lock per increment would serialise the very
paths we keep lock-free.  So each thread owns a private shard (a plain dict written
only by that thread, like the kernel's per-CPU SNMP counters) and readers sum the shards.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import Counter, deque
from collections.abc import Iterable


class Counters:
    """Per-thread sharded counters.

    Concurrency:
      writers   any thread; each writes only its own shard (owner: that thread).
      readers   ``snapshot()`` copies every shard with ``dict.copy()``, which is atomic
                with respect to the owner's single-key stores (the dict's own lock on
                free-threaded builds; one bytecode under the GIL).
      _shards   live shards by serial, added (once per thread) and folded under ``_lock``.
      _retired  the sums of the shards of threads that have ended, under ``_lock``.
      _dead     serials of ended threads' shards: deque.append (atomic, takes no lock)
                from the finalizer, popleft under ``_lock`` when folding.

    When a thread ends its threading.local storage is released, which finalizes the
    shard's owner token; the finalizer only queues the shard's serial (it may run inside
    a garbage collection on a thread that holds ``_lock``, so it must not take it), and
    the next snapshot or new shard folds the shard into ``_retired``.  So a server with
    a thread per connection keeps one dict per *live* thread, as the kernel keeps one
    per CPU, not one per thread that ever counted.  A dead shard is never written
    again, so folding it is exact, and a snapshot counts each shard once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shards: dict[int, dict[str, int]] = {}  # guarded-by: _lock
        self._retired: dict[str, int] = {}  # guarded-by: _lock
        self._dead: deque[int] = deque()
        self._serials = itertools.count()  # next() is atomic
        self._local = threading.local()

    def shard(self) -> dict[str, int]:
        """The calling thread's own shard.  A hot path that bumps several counters per
        packet fetches it once and writes ``shard[name] = shard.get(name, 0) + n`` (owner:
        this thread only; never hand it to another thread)."""
        try:
            return self._local.shard  # type: ignore[no-any-return]
        except AttributeError:
            return self._new_shard()

    def _new_shard(self) -> dict[str, int]:
        shard: dict[str, int] = {}
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
        dead, retired = self._dead, self._retired
        while dead:
            shard = self._shards.pop(dead.popleft(), None)
            for name, value in (shard or {}).items():
                retired[name] = retired.get(name, 0) + value

    def live_shards(self) -> int:
        """Shards of threads still running (for tests and diagnostics)."""
        with self._lock:
            self._fold_dead_locked()
            return len(self._shards)

    def inc(self, name: str, amount: int = 1) -> None:
        try:  # shard(), inlined: this runs several times per packet
            shard = self._local.shard
        except AttributeError:
            shard = self._new_shard()
        shard[name] = shard.get(name, 0) + amount  # owner: this thread only

    def get(self, name: str) -> int:
        return self.snapshot().get(name, 0)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            self._fold_dead_locked()
            shards = list(self._shards.values())
            total: Counter[str] = Counter(self._retired)
        for shard in shards:
            total.update(shard.copy())
        return dict(total)

    def nonzero(self, prefixes: Iterable[str] = ()) -> dict[str, int]:
        prefixes = tuple(prefixes)
        return {
            name: value
            for name, value in sorted(self.snapshot().items())
            if value and (not prefixes or name.startswith(prefixes))
        }


class _ShardOwner:
    """A token kept in a thread's locals; its finalizer retires the thread's shard."""

    __slots__ = ("__weakref__",)


def format_nstat(values: dict[str, int]) -> str:
    """The layout of ``nstat -a``: ``#kernel`` then name, value, rate columns."""
    lines = ["#kernel"]
    for name, value in sorted(values.items()):
        lines.append(f"{name:<32}{value:>19}{0.0:>18.1f}")
    return "\n".join(lines)
