"""Microbenchmark: what a ``Lock`` costs around a dict lookup, per mode.

Variants, timed in interleaved rounds (best of ``rounds``), in ns per lookup:
  bare     ``threading.Lock``
  off      ``LockClass(...).new()`` with statistics and checks off (the fast mode)
  stats    the same lock with lock statistics on
  lockdep  the same lock with lock-order checking on
Each in two spellings: ``with lock: d.get(k)`` and ``lock.acquire(); d.get(k);
lock.release()``.  Used by ``rcunet bench tables --lock-overhead``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from rcunet.sync import lock as _lock_mod
from rcunet.sync.lock import LockClass

_KEYS = 1024


def _time_with(lock: Any, table: dict[int, int], iterations: int) -> int:
    get = table.get
    t0 = perf_counter_ns()
    for i in range(iterations):
        with lock:
            get(i & 1023)
    return perf_counter_ns() - t0


def _time_acquire(lock: Any, table: dict[int, int], iterations: int) -> int:
    get = table.get
    t0 = perf_counter_ns()
    for i in range(iterations):
        lock.acquire()
        get(i & 1023)
        lock.release()
    return perf_counter_ns() - t0


_MODES: dict[str, tuple[bool, bool] | None] = {
    "bare": None,
    "off": (False, False),
    "stats": (True, False),
    "lockdep": (False, True),
}
_FORMS: dict[str, Callable[[Any, dict[int, int], int], int]] = {
    "with": _time_with,
    "acquire": _time_acquire,
}


def lookup_overhead(iterations: int = 100_000, rounds: int = 5) -> dict[str, Any]:
    """ns per locked lookup for every mode and spelling, plus overhead of ``off`` vs bare."""
    table = {i: i for i in range(_KEYS)}
    bare = threading.Lock()
    ours = LockClass("lockbench_lookup").new()
    was = (_lock_mod.stats_enabled(), _lock_mod.checks_enabled())
    best: dict[str, dict[str, float]] = {m: {f: float("inf") for f in _FORMS} for m in _MODES}
    try:
        for _ in range(rounds):
            for mode, switches in _MODES.items():
                if switches is not None:
                    _lock_mod._set_mode(stats=switches[0], checks=switches[1])
                lock = bare if switches is None else ours
                for form, timer in _FORMS.items():
                    ns = timer(lock, table, iterations) / iterations
                    best[mode][form] = min(best[mode][form], ns)
    finally:
        _lock_mod._set_mode(stats=was[0], checks=was[1])
    overhead = {f: best["off"][f] / best["bare"][f] - 1.0 for f in _FORMS}
    return {"ns_per_lookup": best, "off_overhead": overhead, "iterations": iterations}


def format_overhead(result: dict[str, Any]) -> str:
    rows = ["# ns per dict lookup under the lock (best of rounds)",
            f"{'mode':<10}{'with':>10}{'acquire':>10}"]
    for mode, forms in result["ns_per_lookup"].items():
        rows.append(f"{mode:<10}{forms['with']:>10.1f}{forms['acquire']:>10.1f}")
    ov = result["off_overhead"]
    rows.append(
        f"# fast mode vs bare threading.Lock: with {ov['with']:+.1%}, "
        f"acquire/release {ov['acquire']:+.1%}"
    )
    return "\n".join(rows)
