"""Timers for a Host: deadline-ordered callbacks, fired by a timer thread in threaded
mode or by ``Host.poll(now)`` in deterministic mode (same code path: ``run_due``).

A binary heap with lazy cancellation rather than a hashed wheel: the threaded mode
sleeps until the next deadline (no periodic tick burning a core under the GIL), and
the deterministic mode needs ``next_deadline()`` to advance a virtual clock exactly.

The timer thread sleeps to the next deadline rounded up to a jiffy (``JIFFY_NS``, 4 ms:
Linux's HZ=250), so timers due within one jiffy fire in one wake-up, as the kernel's
timer wheel batches them, and ``schedule`` wakes the sleeping thread only for a timer
due in an earlier jiffy than the one it sleeps to.  Without this, every connection's
delayed-ACK or retransmission timer (cancelled, but still in the heap) cost the timer
thread a wake-up and, under the GIL, two thread switches.  Timers fire at most one
jiffy late, as in Linux; the deterministic mode stays exact.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable

from mypy_extensions import mypyc_attr

from rcunet.core.freethreaded import lockfree_read_slots

#: The timer thread's granularity: Linux's jiffy at HZ=250.
JIFFY_NS = 4_000_000


def _jiffy_ceil(at: int) -> int:
    return -(-at // JIFFY_NS) * JIFFY_NS


class Timer:
    """A handle: ``cancel()`` it, or read ``at``.  Cancelled timers stay in the heap
    until their deadline pops (lazy deletion), but drop their callback at once (and a
    fired one drops it when it runs): a
    callback usually holds its socket, which would otherwise live (and be traced by the
    garbage collector) until a long-cancelled retransmission deadline."""

    __slots__ = lockfree_read_slots("at", "callback", "cancelled")

    def __init__(self, at: int, callback: Callable[[int], None]) -> None:
        self.at = at  # immutable
        # atomic: one attribute store each; cancel() stores cancelled, then callback=None,
        # and run_due loads callback once (None: cancelled after it popped).
        self.callback: Callable[[int], None] | None = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self.callback = None


@mypyc_attr(allow_interpreted_subclasses=True)  # tests count the calls in a subclass
class Timers:
    """Concurrency: the heap and ``_sleep_until`` are guarded by ``_lock`` (``_cond``
    waits on it); callbacks run with no lock held, in the thread that calls
    ``run_due`` (worker or test driver)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._heap: list[tuple[int, int, Timer]] = []  # guarded-by: _lock
        self._seq = itertools.count()  # tie-break: FIFO among equal deadlines
        #: When the sleeping timer thread will wake (a jiffy boundary); None while it
        #: runs (it re-reads the heap before sleeping again).  guarded-by: _lock
        self._sleep_until: int | None = None

    def schedule(self, at: int, callback: Callable[[int], None]) -> Timer:
        timer = Timer(at, callback)
        with self._lock:
            heapq.heappush(self._heap, (at, next(self._seq), timer))
            sleep_until = self._sleep_until
            if sleep_until is not None and _jiffy_ceil(at) < sleep_until:
                self._sleep_until = None  # one wake-up is enough
                self._cond.notify()
        return timer

    def next_deadline(self) -> int | None:
        with self._lock:
            self._drop_cancelled_locked()
            return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for _, _, timer in self._heap if not timer.cancelled)

    def _drop_cancelled_locked(self) -> None:
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)

    def pop_due(self, now: int) -> list[Timer]:
        due: list[Timer] = []
        with self._lock:
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
                # Fired: the handle lets go of its callback, as cancel() does.  The
                # owner often keeps the handle (a TIME_WAIT entry's ``timer``) while
                # the callback holds the owner: a cycle only the cyclic collector
                # would free, one per connection, long after the entry went.
                timer.callback = None
                callback(now)
                fired += 1
        return fired

    def wait(self, now: int, max_wait_ns: int) -> None:
        """Block the timer thread until the next deadline, a new earlier timer, or
        ``max_wait_ns`` (so a stop request is noticed)."""
        with self._lock:
            self._drop_cancelled_locked()
            wait_ns = max_wait_ns
            if self._heap:
                wait_ns = max(0, min(wait_ns, _jiffy_ceil(self._heap[0][0]) - now))
            if wait_ns > 0:
                self._sleep_until = now + wait_ns
                self._cond.wait(wait_ns / 1e9)
                self._sleep_until = None

    def wake(self) -> None:
        with self._lock:
            self._cond.notify_all()
