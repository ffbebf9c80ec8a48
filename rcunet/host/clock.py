"""Clocks: the real monotonic clock for threaded runs and a virtual clock for
deterministic tests.  Both return int nanoseconds (the project's one time unit)."""

from __future__ import annotations

import threading
import time

from mypy_extensions import mypyc_attr


# Not a native class when compiled: ``now`` is the C function itself, as a class attribute.
@mypyc_attr(native_class=False)
class MonotonicClock:
    """``time.monotonic_ns``; sleeping is real."""

    virtual = False
    #: The C function itself (a staticmethod, so ``clock.now()`` is one C call, not a
    #: Python method around it): links and the IP layer read it once per packet.
    now = staticmethod(time.monotonic_ns)


@mypyc_attr(allow_interpreted_subclasses=True)  # the simulator's clock (rcunet.sim.clock)
class VirtualClock:
    """A clock that only moves when a test advances it.

    Concurrency: ``_now`` is one attribute store/load (atomic); ``advance`` is meant to
    be called from the single driving thread of a deterministic test.
    """

    virtual = True

    def __init__(self, start: int = 1_000_000_000) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> int:
        return self._now  # atomic: one attribute load, pairs with the store in set()

    def set(self, now: int) -> None:
        with self._lock:
            if now < self._now:
                raise ValueError("a virtual clock never goes backwards")
            self._now = now

    def advance(self, delta: int) -> int:
        with self._lock:
            self._now += delta
            return self._now
