"""The blocking primitives a simulated program waits in, rebuilt on the scheduler.

* ``SimLock`` replaces ``_thread.allocate_lock`` (and so ``threading.Lock``), and with it
  everything ``threading`` and ``queue`` build on locks: RLock (``threading._PyRLock``),
  Condition, Event, Semaphore, Barrier, ``queue.Queue``, ``queue.SimpleQueue``
  (``queue._PySimpleQueue``), Thread.start's handshake, and rcunet's own socket waits
  (a TCP sleeper's gate is a lock another thread releases).  An uncontended acquire is
  the real lock's; a contended one is a blocking point with a virtual deadline.
* ``select``, ``poll`` and ``epoll`` look at real fds (rcunet's readiness fds, AF_UNIX
  pipes) without waiting, and when nothing is ready they wait in the scheduler, which
  looks again after every step of the network.

A thread the simulation does not run (one started before it, or the watchdog) gets the
real behaviour from every primitive here.
"""

from __future__ import annotations

import math
import select as _select
from typing import Any

from rcunet.sim import scheduler
from rcunet.sim.scheduler import real_allocate_lock

_real_select = _select.select
_real_poll = _select.poll
_real_epoll = getattr(_select, "epoll", None)


def deadline_after(sched: scheduler.Scheduler, timeout: float | None) -> int | None:
    """The virtual deadline ``timeout`` seconds from now (None: no deadline)."""
    if timeout is None or timeout < 0:
        return None
    # Rounded up, as the kernel rounds a timeout up to its clock's tick: a caller that
    # waits again for "deadline - now" seconds (a float a hair above zero) must see
    # the clock move, or it would wait at one instant for ever.
    return sched.clock.now() + math.ceil(timeout * 1e9)


class SimLock:
    """``threading.Lock`` under the scheduler (no owner: any thread may release it, as
    a TCP sleeper's gate is released by the thread that wakes it)."""

    __slots__ = ("_lock", "__weakref__")

    def __init__(self) -> None:
        self._lock = real_allocate_lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        lock = self._lock
        if lock.acquire(False):
            return True
        if not blocking:
            return False
        here = scheduler.current()
        if here is None:
            return lock.acquire(True, timeout)  # a thread outside the simulation
        sched, _record = here
        deadline = deadline_after(sched, None if timeout == -1 else timeout)

        def free() -> bool:
            return not lock.locked()

        while True:
            if not sched.block(free, deadline):
                return False
            if lock.acquire(False):
                return True

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def release(self) -> None:
        # The waiters are found by the scheduler's next look (they wait on ``free``):
        # a release is just the real one.
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def _at_fork_reinit(self) -> None:
        self._lock = real_allocate_lock()

    def __repr__(self) -> str:
        return f"<rcunet.sim lock {'locked' if self._lock.locked() else 'unlocked'}>"


def _wait_for(probe: Any, timeout: float | None) -> Any:
    """``probe()`` at once; if it finds nothing and ``timeout`` is not zero, wait in the
    scheduler (looking again after every network step) until it finds something or the
    virtual timeout passes.  Outside the simulation: None (the caller waits for real)."""
    here = scheduler.current()
    if here is None:
        return None
    sched, _record = here
    found = probe()
    if found or timeout == 0:
        if timeout == 0:
            sched.yield_now()  # a poll is a scheduling point, as sleep(0) is
        return found
    seen: list[Any] = []

    def ready() -> bool:
        result = probe()
        if result:
            seen.append(result)
            return True
        return False

    sched.block(ready, deadline_after(sched, timeout))
    if seen:
        return seen[-1]
    return probe()


def select(rlist: Any, wlist: Any, xlist: Any, timeout: float | None = None) -> Any:
    """``select.select`` on the virtual clock."""
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must be non-negative")

    def probe() -> Any:
        result = _real_select(rlist, wlist, xlist, 0)
        return result if any(result) else None

    if scheduler.current() is None:
        return _real_select(rlist, wlist, xlist, timeout)
    return _wait_for(probe, timeout) or ([], [], [])


class SimPoll:
    """``select.poll()`` on the virtual clock (timeouts in milliseconds)."""

    def __init__(self) -> None:
        self._poll = _real_poll()

    def register(self, fd: Any, eventmask: int = _select.POLLIN | _select.POLLPRI
                 | _select.POLLOUT) -> None:
        self._poll.register(fd, eventmask)

    def modify(self, fd: Any, eventmask: int) -> None:
        self._poll.modify(fd, eventmask)

    def unregister(self, fd: Any) -> None:
        self._poll.unregister(fd)

    def poll(self, timeout: float | None = None) -> list[tuple[int, int]]:
        if scheduler.current() is None:
            return self._poll.poll(timeout)
        seconds = None if timeout is None or timeout < 0 else timeout / 1000
        return _wait_for(lambda: self._poll.poll(0), seconds) or []


class SimEpoll:
    """``select.epoll()`` on the virtual clock (level-triggered events are looked at
    again after every step; an edge seen while waiting is kept for the result)."""

    def __init__(self, sizehint: int = -1, flags: int = 0) -> None:
        assert _real_epoll is not None
        self._epoll = _real_epoll(sizehint, flags)

    def __enter__(self) -> SimEpoll:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return bool(self._epoll.closed)

    def close(self) -> None:
        self._epoll.close()

    def fileno(self) -> int:
        return int(self._epoll.fileno())

    def register(self, fd: Any, eventmask: int = _select.EPOLLIN | _select.EPOLLPRI
                 | _select.EPOLLOUT) -> None:
        self._epoll.register(fd, eventmask)

    def modify(self, fd: Any, eventmask: int) -> None:
        self._epoll.modify(fd, eventmask)

    def unregister(self, fd: Any) -> None:
        self._epoll.unregister(fd)

    def poll(self, timeout: float | None = None, maxevents: int = -1
             ) -> list[tuple[int, int]]:
        events: list[tuple[int, int]]
        if scheduler.current() is None:
            events = self._epoll.poll(timeout, maxevents)
            return events
        seconds = None if timeout is None or timeout < 0 else timeout
        events = _wait_for(lambda: self._epoll.poll(0, maxevents), seconds) or []
        return events
