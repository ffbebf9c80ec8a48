"""SNMP/nstat-style counters (``IpInReceives``, ``UdpNoPorts``, ``TcpExtTWRecycled``...).

Many receive workers and user threads bump the same counters.  ``x += 1`` on a shared
dict loses updates without the GIL, and a lock per increment would serialise the very
paths we keep lock-free.  So each thread owns a private shard (a plain dict written
only by that thread, like the kernel's per-CPU SNMP counters) and readers sum the shards.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import Iterable


class Counters:
    """Per-thread sharded counters.

    Concurrency:
      writers   any thread; each writes only its own shard (owner: that thread).
      readers   ``snapshot()`` copies every shard with ``dict.copy()``, which is atomic
                with respect to the owner's single-key stores (the dict's own lock on
                free-threaded builds; one bytecode under the GIL).
      _shards   live shards, added (once per thread) and retired under ``_lock``.
      _retired  the sums of the shards of threads that have ended, under ``_lock``.

    A thread's shard is folded into ``_retired`` when the thread ends (its
    threading.local storage is released, which finalizes the shard's owner token), so
    a server that runs a thread per connection keeps one dict per *live* thread, as the
    kernel keeps one per CPU, not one per thread that ever counted.  A snapshot takes
    the shard list and ``_retired`` under one lock hold, so a shard retiring meanwhile
    is counted once: a dead shard is never written again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shards: dict[int, dict[str, int]] = {}  # guarded-by: _lock
        self._retired: dict[str, int] = {}  # guarded-by: _lock
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
        with self._lock:
            self._shards[id(owner)] = shard
        weakref.finalize(owner, self._retire, id(owner))
        self._local.owner = owner  # released with the thread's locals: retires the shard
        self._local.shard = shard
        return shard

    def _retire(self, key: int) -> None:
        with self._lock:
            shard = self._shards.pop(key, None)
            if shard:
                retired = self._retired
                for name, value in shard.items():
                    retired[name] = retired.get(name, 0) + value

    def live_shards(self) -> int:
        """Shards of threads still running (for tests and diagnostics)."""
        with self._lock:
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
