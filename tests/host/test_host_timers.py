"""The Host's timer heap (rcunet.host.timers): what the timer thread relies on.

A cancelled timer lets go of its callback at once (a TCP socket is freed by refcounting,
not kept alive by a long-cancelled retransmission deadline), and the sleeping timer
thread is woken only for a timer due before it would wake anyway (jiffy batching).
"""

from __future__ import annotations

import gc
import threading
import time
import weakref

from rcunet.host.timers import JIFFY_NS, Timers

MS = 1_000_000


class _Owner:
    """Stands for a socket that a timer callback holds."""

    def fired(self, now: int) -> None:
        raise AssertionError("a cancelled timer fired")


def test_cancel_releases_the_callback_while_the_timer_stays_queued() -> None:
    timers = Timers()
    owner = _Owner()
    gone = weakref.ref(owner)
    timer = timers.schedule(10 * MS, owner.fired)
    timer.cancel()
    del owner
    gc.collect()
    assert gone() is None  # freed although the heap still holds the timer
    assert timers.run_due(20 * MS) == 0  # popping it later fires nothing


def test_due_timers_fire_in_deadline_order() -> None:
    timers = Timers()
    fired: list[str] = []
    timers.schedule(3 * MS, lambda now: fired.append("c"))
    timers.schedule(1 * MS, lambda now: fired.append("a"))
    timers.schedule(2 * MS, lambda now: fired.append("b"))
    timers.schedule(9 * MS, lambda now: fired.append("late"))
    assert timers.run_due(5 * MS) == 3
    assert fired == ["a", "b", "c"]


class _CountingTimers(Timers):
    def __init__(self) -> None:
        super().__init__()
        self.notifies = 0
        notify = self._cond.notify

        def counting_notify(n: int = 1) -> None:
            self.notifies += 1
            notify(n)

        self._cond.notify = counting_notify  # type: ignore[method-assign]


def _sleeping_thread(timers: Timers, max_wait_ns: int) -> tuple[threading.Thread, list[int]]:
    woke: list[int] = []

    def run() -> None:
        timers.wait(time.monotonic_ns(), max_wait_ns)
        woke.append(time.monotonic_ns())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while timers._sleep_until is None and time.monotonic() < deadline:  # until it sleeps
        time.sleep(0.001)
    assert timers._sleep_until is not None, "the timer thread never went to sleep"
    return thread, woke


def test_a_timer_due_before_the_thread_wakes_wakes_it() -> None:
    timers = _CountingTimers()
    thread, woke = _sleeping_thread(timers, max_wait_ns=30_000 * MS)  # would sleep 30 s
    timers.schedule(time.monotonic_ns() + 2 * JIFFY_NS, lambda now: None)
    thread.join(10)
    assert woke, "an earlier timer did not wake the sleeping timer thread"
    assert timers.notifies == 1


def test_a_timer_due_after_the_thread_wakes_leaves_it_asleep() -> None:
    timers = _CountingTimers()
    thread, woke = _sleeping_thread(timers, max_wait_ns=200 * MS)
    later = timers._sleep_until + 10 * JIFFY_NS  # type: ignore[operator]
    for i in range(5):
        timers.schedule(later + i * MS, lambda now: None)
    assert timers.notifies == 0  # it wakes on its own before any of them is due
    thread.join(10)
    assert woke
