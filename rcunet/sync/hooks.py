"""Named scheduling hooks: force interleavings in concurrent code deterministically.

Concurrent code marks the places where another thread's interference matters with
``yield_point("ehash.lookup.after_pin")``.  With no hook installed that costs one global
load and one branch.  Tests install hooks to run code at a point (``installed``) or to park a
thread there until the test lets it go (``Schedule``), so a race is reproduced by
construction, not by sleeps and luck.

A hook installed under ``ANY_POINT`` runs at every yield point that has no hook of its own
(``rcunet.sync.jitter`` uses it to perturb the scheduling everywhere at once).

Every wait in this module is bounded: a test whose schedule cannot make progress fails with
``ScheduleTimeout`` within seconds instead of hanging the suite.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager

from mypy_extensions import mypyc_attr

Hook = Callable[[], object]

#: point name -> hook.  ``None`` when nothing is installed (the fast path).
#: atomic: one global load (yield_point) paired with the single global store in _publish.
_hooks: dict[str, Hook] | None = None
_install_lock = threading.Lock()  # serialises installers; yield_point never takes it

#: The point name whose hook runs wherever no point-specific hook is installed.
ANY_POINT = "*"


def yield_point(name: str) -> None:
    """Run the hook installed for ``name``, if any (no-op otherwise)."""
    table = _hooks  # atomic: one global load; pairs with the store in _publish()
    if table is None:
        return
    hook = table.get(name)  # atomic: dict get on an immutable-after-publish dict
    if hook is None:
        hook = table.get(ANY_POINT)  # atomic: as above
    if hook is not None:
        hook()


def _publish(table: dict[str, Hook] | None) -> None:
    global _hooks
    _hooks = table or None  # atomic: one global store (copy-on-write table)


@contextmanager
def installed(table: Mapping[str, Hook]) -> Iterator[None]:
    """Install hooks for the duration of a ``with`` block (nesting merges, exit restores)."""
    with _install_lock:
        previous = _hooks
        merged = dict(previous or {})
        merged.update(table)
        _publish(merged)
    try:
        yield
    finally:
        with _install_lock:
            current = dict(_hooks or {})
            for name in table:
                if previous is not None and name in previous:
                    current[name] = previous[name]
                else:
                    current.pop(name, None)
            _publish(current)


def active_points() -> frozenset[str]:
    """Names of the points that currently have a hook (for diagnostics)."""
    table = _hooks
    return frozenset(table) if table else frozenset()


@mypyc_attr(native_class=False)  # mypyc compiles no subclass of this builtin
class ScheduleTimeout(AssertionError):
    """A schedule step did not happen in time (a deadlock or a missed yield point)."""


class _Pause:
    __slots__ = ("point", "thread", "remaining", "arrived", "released", "passed")

    def __init__(self, point: str, thread: str | None, count: int) -> None:
        self.point = point
        self.thread = thread  # only threads with this name pause (None: any thread)
        self.remaining = count  # how many more arrivals will pause
        self.arrived = 0  # arrivals that paused
        self.released = 0  # of those, how many may continue
        self.passed = 0  # every arrival, paused or not


class Schedule:
    """Pause named threads at named yield points until the test releases them.

    Usage::

        with Schedule(timeout=5.0) as sched:
            sched.pause_at("rcuref.put.after_dec", thread="putter")
            t = threading.Thread(target=..., name="putter"); t.start()
            sched.wait_paused("rcuref.put.after_dec")   # putter is parked there now
            ...                                         # interfere from the test thread
            sched.release("rcuref.put.after_dec")
            t.join(timeout=5)

    Concurrency:
      All state lives under one Condition.  A paused thread waits at most ``timeout``
      seconds; if the test never releases it, it continues and the schedule raises
      ``ScheduleTimeout`` at ``__exit__``.  Leaving the block releases every paused thread
      and uninstalls the hooks, so a failing test never leaves threads parked.
    """

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self._cond = threading.Condition(threading.Lock())
        self._pauses: dict[str, _Pause] = {}
        self._errors: list[str] = []
        self._closed = False
        self._uninstallers: list[AbstractContextManager[None]] = []

    # -- setup -------------------------------------------------------------------------
    def __enter__(self) -> Schedule:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self._errors and exc[0] is None:
            raise ScheduleTimeout("; ".join(self._errors))

    def pause_at(self, point: str, *, thread: str | None = None, count: int = 1) -> None:
        """Park the next ``count`` arrivals at ``point`` (of thread ``thread`` if named)."""
        if count < 1:
            raise ValueError("count must be >= 1")
        with self._cond:
            pause = self._pauses.get(point)
            if pause is None:
                self._pauses[point] = _Pause(point, thread, count)
                new_point = True
            else:
                pause.thread = thread
                pause.remaining += count
                new_point = False
        if new_point:
            self._install(point)

    def _install(self, point: str) -> None:
        def hook() -> None:
            self._arrive(point)

        cm = installed({point: hook})
        cm.__enter__()
        self._uninstallers.append(cm)

    # -- the paused side ---------------------------------------------------------------
    def _arrive(self, point: str) -> None:
        name = threading.current_thread().name
        with self._cond:
            pause = self._pauses[point]
            pause.passed += 1
            if self._closed or pause.remaining == 0:
                return
            if pause.thread is not None and pause.thread != name:
                return
            pause.remaining -= 1
            ticket = pause.arrived
            pause.arrived += 1
            self._cond.notify_all()
            ok = self._cond.wait_for(
                lambda: self._closed or pause.released > ticket, timeout=self.timeout
            )
            if not ok:
                self._errors.append(
                    f"thread {name!r} paused at {point!r} was not released within "
                    f"{self.timeout}s"
                )

    # -- the test side -----------------------------------------------------------------
    def wait_paused(self, point: str | None = None, *, count: int = 1) -> None:
        """Block until ``count`` threads in total have paused at ``point``.

        ``point`` may be omitted when exactly one pause point is set up.
        """
        pause = self._pause_for(point)
        with self._cond:
            ok = self._cond.wait_for(lambda: pause.arrived >= count, timeout=self.timeout)
        if not ok:
            raise ScheduleTimeout(
                f"no thread reached {pause.point!r} within {self.timeout}s "
                f"({pause.arrived} of {count} arrived)"
            )

    def release(self, point: str | None = None) -> int:
        """Let every thread paused at ``point`` continue; returns how many were released."""
        pause = self._pause_for(point)
        with self._cond:
            n = pause.arrived - pause.released
            pause.released = pause.arrived
            self._cond.notify_all()
        return n

    def passed(self, point: str) -> int:
        """How many times any thread reached ``point`` while this schedule was active."""
        with self._cond:
            pause = self._pauses.get(point)
            return pause.passed if pause else 0

    def paused(self, point: str | None = None) -> int:
        """How many threads are parked at ``point`` right now."""
        pause = self._pause_for(point)
        with self._cond:
            return pause.arrived - pause.released

    def close(self) -> None:
        """Release everyone and uninstall the hooks (idempotent)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        while self._uninstallers:
            cm = self._uninstallers.pop()
            cm.__exit__(None, None, None)

    def _pause_for(self, point: str | None) -> _Pause:
        with self._cond:
            if point is None:
                if len(self._pauses) != 1:
                    raise ValueError("name the point: this schedule has several")
                return next(iter(self._pauses.values()))
            try:
                return self._pauses[point]
            except KeyError:
                raise ValueError(f"no pause set up at {point!r}") from None


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    """Poll ``predicate`` until true; ``ScheduleTimeout`` after ``timeout`` seconds.

    For conditions that no yield point marks (e.g. "the other thread is now blocked in
    acquire()").  Polls with short sleeps; never used to *create* an interleaving.
    """
    deadline_at = time.monotonic_ns() + int(timeout * 1e9)
    delay = 1e-5
    while not predicate():
        if time.monotonic_ns() >= deadline_at:
            raise ScheduleTimeout(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)
