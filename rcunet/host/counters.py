"""SNMP/nstat-style counters (``IpInReceives``, ``UdpNoPorts``, ``TcpExtTWRecycled``...).

Many receive workers and user threads bump the same counters.  ``x += 1`` on a shared
dict loses updates without the GIL, and a lock per increment would serialise the very
paths we keep lock-free.  So each thread owns a private shard (a plain dict written
only by that thread, like the kernel's per-CPU SNMP counters) and readers sum the shards.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from rcunet.sync.shards import ShardRegistry


class Counters(ShardRegistry[dict[str, int]]):
    """Per-thread sharded counters (``ShardRegistry``: one shard per live thread).

    Concurrency:
      writers   any thread; each writes only its own shard, a plain dict (owner: that
                thread): ``shard[name] = shard.get(name, 0) + n``.
      readers   ``snapshot()`` copies every shard with ``dict.copy()``, which is atomic
                with respect to the owner's single-key stores (the dict's own lock on
                free-threaded builds; one bytecode under the GIL).
      _retired  the sums of the shards of threads that have ended, under ``_lock``.
    """

    def __init__(self) -> None:
        super().__init__()
        self._retired: dict[str, int] = {}  # guarded-by: _lock

    def _empty_shard(self) -> dict[str, int]:
        return {}

    def _retire_locked(self, shard: dict[str, int]) -> None:
        retired = self._retired
        for name, value in shard.items():
            retired[name] = retired.get(name, 0) + value

    def inc(self, name: str, amount: int = 1) -> None:
        shard = self.shard()
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


def format_nstat(values: dict[str, int]) -> str:
    """The layout of ``nstat -a``: ``#kernel`` then name, value, rate columns."""
    lines = ["#kernel"]
    for name, value in sorted(values.items()):
        lines.append(f"{name:<32}{value:>19}{0.0:>18.1f}")
    return "\n".join(lines)
