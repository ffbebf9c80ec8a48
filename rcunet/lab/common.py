"""What every lab experiment shares: alternating legacy/modern rounds, lock statistics
for the classes that matter, and the report block."""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from rcunet.sync import lockstat
from rcunet.sync.lock import LockClass
from rcunet.tuning import Tuning

MODES = ("legacy", "modern")


def tuning_for(mode: str, **overrides: Any) -> Tuning:
    return Tuning.preset(mode, **overrides)


def interpreter() -> str:
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    return f"{platform.python_implementation()} {platform.python_version()} " \
           f"({'GIL' if gil else 'free-threaded, GIL off'})"


def alternate(measure: Callable[[str], float], rounds: int) -> dict[str, float]:
    """Run ``measure(mode)`` for legacy and modern alternately, ``rounds`` times each,
    and keep each mode's best rate (the least disturbed by the rest of the machine)."""
    best = {mode: 0.0 for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            best[mode] = max(best[mode], measure(mode))
    return best


def with_lockstat(run: Callable[[], Any],
                  classes: Iterable[LockClass]) -> tuple[Any, dict[str, Any]]:
    """Run once with lock statistics on; return its result and the classes' stats."""
    classes = list(classes)
    was_on = lockstat.enabled()
    lockstat.enable()
    lockstat.reset(classes)
    try:
        result = run()
        snap = lockstat.snapshot(classes)
    finally:
        if not was_on:
            lockstat.disable()
    return result, snap


def ratio(modern: float, legacy: float) -> float:
    return modern / legacy if legacy else float("inf")


def stopwatch() -> Callable[[], float]:
    start = time.perf_counter()
    return lambda: time.perf_counter() - start
