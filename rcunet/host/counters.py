"""SNMP/nstat-style counters (``IpInReceives``, ``UdpNoPorts``, ``TcpExtTWRecycled``...).

Many receive workers and user threads bump the same counters.  ``x += 1`` on a shared
dict loses updates without the GIL, and a lock per increment would serialise the very
paths we keep lock-free.  So each thread owns a private shard (a plain dict written
only by that thread, like the kernel's per-CPU SNMP counters) and readers sum the shards.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable


class Counters:
    """Per-thread sharded counters.

    Concurrency:
      writers   any thread; each writes only its own shard (owner: that thread).
      readers   ``snapshot()`` copies every shard with ``dict.copy()``, which is atomic
                with respect to the owner's single-key stores (the dict's own lock on
                free-threaded builds; one bytecode under the GIL).
      _shards   list append under ``_lock`` (rare: once per thread).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shards: list[dict[str, int]] = []  # guarded-by: _lock (append only)
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
        with self._lock:
            self._shards.append(shard)
        self._local.shard = shard
        return shard

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
            shards = list(self._shards)
        total: Counter[str] = Counter()
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


def format_nstat(values: dict[str, int]) -> str:
    """The layout of ``nstat -a``: ``#kernel`` then name, value, rate columns."""
    lines = ["#kernel"]
    for name, value in sorted(values.items()):
        lines.append(f"{name:<32}{value:>19}{0.0:>18.1f}")
    return "\n".join(lines)
