"""Timers for a Host: deadline-ordered callbacks, fired by a timer thread in threaded
mode or by ``Host.poll(now)`` in deterministic mode (same code path: ``run_due``).

A binary heap with lazy cancellation rather than a hashed wheel: the threaded mode
sleeps until the exact next deadline (no 1 ms tick burning a core under the GIL), and
the deterministic mode needs ``next_deadline()`` to advance a virtual clock exactly.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable


class Timer:
    """A handle: ``cancel()`` it, or read ``at``.  Cancelled timers stay in the heap
    until their deadline pops (lazy deletion), but drop their callback at once: a
    callback usually holds its socket, which would otherwise live (and be traced by the
    garbage collector) until a long-cancelled retransmission deadline."""

    __slots__ = ("at", "callback", "cancelled")

    def __init__(self, at: int, callback: Callable[[int], None]) -> None:
        self.at = at  # immutable
        # atomic: one attribute store each; cancel() stores cancelled, then callback=None,
        # and run_due loads callback once (None: cancelled after it popped).
        self.callback: Callable[[int], None] | None = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self.callback = None


class Timers:
    """Concurrency: the heap is guarded by ``_cond``'s lock; callbacks run with no
    lock held, in the thread that calls ``run_due`` (worker or test driver)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[int, int, Timer]] = []  # guarded-by: _cond
        self._seq = itertools.count()  # tie-break: FIFO among equal deadlines

    def schedule(self, at: int, callback: Callable[[int], None]) -> Timer:
        timer = Timer(at, callback)
        with self._cond:
            heapq.heappush(self._heap, (at, next(self._seq), timer))
            if self._heap[0][2] is timer:
                self._cond.notify()
        return timer

    def next_deadline(self) -> int | None:
        with self._cond:
            self._drop_cancelled_locked()
            return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        with self._cond:
            return sum(1 for _, _, timer in self._heap if not timer.cancelled)

    def _drop_cancelled_locked(self) -> None:
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)

    def pop_due(self, now: int) -> list[Timer]:
        due: list[Timer] = []
        with self._cond:
            heap = self._heap
            while heap and heap[0][0] <= now:
                timer = heapq.heappop(heap)[2]
                if not timer.cancelled:
                    due.append(timer)
        return due

    def run_due(self, now: int) -> int:
        """Fire every timer due at ``now`` (outside the heap lock); return how many."""
        fired = 0
        for timer in self.pop_due(now):
            callback = timer.callback  # atomic: one load (cancel() may clear it meanwhile)
            if callback is not None:
                callback(now)
                fired += 1
        return fired

    def wait(self, now: int, max_wait_ns: int) -> None:
        """Block the timer thread until the next deadline, a new earlier timer, or
        ``max_wait_ns`` (so a stop request is noticed)."""
        with self._cond:
            self._drop_cancelled_locked()
            wait_ns = max_wait_ns
            if self._heap:
                wait_ns = max(0, min(wait_ns, self._heap[0][0] - now))
            if wait_ns > 0:
                self._cond.wait(wait_ns / 1e9)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
