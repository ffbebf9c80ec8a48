"""Named lock classes with optional statistics (lock_stat) and order checking (lockdep).

Every lock belongs to a ``LockClass`` (lockdep's notion: one class per *kind* of lock, all
instances share statistics and ordering rules)::

    EHASH_LOCK = LockClass("&ehash->lock")
    locks = [EHASH_LOCK.new() for _ in range(n)]
    with locks[i]:
        ...

Two modes, switched for every live instance at once by ``lockstat.enable()`` /
``lockdep.enable()`` (and back when both are off):

* **fast** (default): ``acquire``/``release`` test one module global and call the
  underlying ``threading.Lock``; nothing else runs per acquisition.  ``with lock:`` costs
  no Python frame in either build: compiled, ``__enter__``/``__exit__`` are C methods;
  interpreted, they are swapped for C-level attribute getters that hand the ``with``
  statement the raw lock's own ``__enter__``/``__exit__`` (``_install_with_path``).
* **instrumented**: acquire first tries a non-blocking acquire; if that fails the
  acquisition is a *contention* and the blocking wait is timed.  Statistics record
  acquisitions, contentions, wait and hold times and call sites (lockstat on); lockdep
  records the per-thread held stack and the class order graph (lockdep on);
  ``assert_held()`` checks the owner (lockdep on).

A mode switch while a lock is held is tolerated: the release of a lock taken in the other
mode skips the bookkeeping it has no start for.
"""

from __future__ import annotations

import itertools
import sys
import threading
import weakref
from operator import attrgetter
from time import perf_counter_ns
from types import CodeType, FrameType, FunctionType
from typing import Any

from mypy_extensions import mypyc_attr

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.sync import lockdep as _lockdep
from rcunet.sync.hooks import yield_point

_get_ident = threading.get_ident

# Global mode.  atomic: module-global loads (every acquire/release loads _instrumented)
# pair with the stores in _set_mode(), made under _mode_lock.
_stats_on = False
_checks_on = False
_instrumented = False  # _stats_on or _checks_on

#: Yield point (instrumented mode only) after a failed trylock, before the blocking wait.
CONTENDED = "lock.contended"
#: Yield point (instrumented mode only) before every acquisition attempt: scheduling
#: jitter (rcunet.sync.jitter) perturbs each critical-section entry through it.
ACQUIRE = "lock.acquire"

Site = tuple[CodeType, int]  # (code object, line number) of an acquisition


def format_site(site: Site | None) -> str:
    """``Class.method:line`` — one token, so ``awk '{print $NF}'`` works."""
    if site is None:
        return "?"
    code, line = site
    return f"{code.co_qualname}:{line}"


def site_address(site: Site | None) -> int:
    """A stable pseudo instruction pointer for a call site (lock_stat's ``[<addr>]``)."""
    if site is None:
        return 0
    code, line = site
    return (id(code) + line) & 0xFFFF_FFFF_FFFF_FFFF


class _HoldStats:
    """One thread's acquisitions of one class.  owner: that thread only writes it."""

    __slots__ = ("acquisitions", "acq_bounces", "hold_total", "hold_max", "hold_min")

    def __init__(self) -> None:
        self.acquisitions = 0
        self.acq_bounces = 0
        self.hold_total = 0
        self.hold_max = 0
        self.hold_min = 0


class _WaitStats:
    """Contention of one class (or one call site).  guarded-by: LockClass._stats_lock."""

    __slots__ = ("contentions", "con_bounces", "wait_total", "wait_max", "wait_min")

    def __init__(self) -> None:
        self.contentions = 0
        self.con_bounces = 0
        self.wait_total = 0
        self.wait_max = 0
        self.wait_min = 0

    def add(self, waited: int) -> None:
        if self.contentions == 0 or waited < self.wait_min:
            self.wait_min = waited
        if waited > self.wait_max:
            self.wait_max = waited
        self.wait_total += waited
        self.contentions += 1


_class_keys = itertools.count(1)  # atomic: itertools.count.__next__ (thread-safe in 3.13t)
_classes_lock = threading.Lock()
_classes: list[weakref.ref[LockClass]] = []  # guarded-by: _classes_lock


# Not a native class when compiled: the registry above keeps weak references to lock
# classes, and mypyc gives those only to classes with a __dict__.  Nothing on the fast
# path reads a LockClass.
@mypyc_attr(native_class=False)
class LockClass:
    """A kind of lock: the unit of lock statistics and of lock-order rules.

    ``nests_with_self``: holding two instances of this class at once is legal (otherwise
    lockdep reports "possible recursive locking").  ``kind`` is the perf lock type printed
    in contention reports (``mutex``, ``spinlock``, ``rwlock:W``...).

    Concurrency:
      hold stats  per thread (``_records[thread id]``), written only by that thread while it
                  holds an instance; ``reset()`` publishes a fresh dict with one store.
      wait stats  under ``_stats_lock`` (taken only after a contended acquisition).
      readers     ``snapshot()`` reads the counters without locks (attribute loads are
                  atomic; a snapshot taken during activity is approximate, as lock_stat is).
    """

    __slots__ = (
        "name",
        "kind",
        "nests_with_self",
        "key",
        "display_name",
        "_records",
        "_stats_lock",
        "_wait",
        "_points",
        "_contending",
        "__weakref__",
    )

    def __init__(self, name: str, *, nests_with_self: bool = False, kind: str = "mutex") -> None:
        if not name or any(ch.isspace() for ch in name):
            raise ValueError(f"lock class name must be one non-empty token, got {name!r}")
        self.name = name
        self.kind = kind
        self.nests_with_self = nests_with_self
        self.key = next(_class_keys)
        self._records: dict[int, _HoldStats] = {}  # rcu: reset() replaces it with one store
        self._stats_lock = threading.Lock()
        self._wait = _WaitStats()  # guarded-by: _stats_lock
        self._points: dict[Site, _WaitStats] = {}  # guarded-by: _stats_lock (waiter sites)
        self._contending: dict[Site, int] = {}  # guarded-by: _stats_lock (holder sites)
        self.display_name = name + _register_class(self)

    def __repr__(self) -> str:
        return f"LockClass({self.display_name!r})"

    def new(self) -> Lock:
        """A new lock of this class."""
        return Lock(self)

    # -- statistics (called from Lock's instrumented path) -----------------------------
    def _hold_record(self, ident: int) -> _HoldStats:
        records = self._records  # atomic: attribute load; pairs with the store in reset
        rec = records.get(ident)  # atomic: dict get
        if rec is None:
            rec = records.setdefault(ident, _HoldStats())  # atomic: dict.setdefault
        return rec

    def _record_contention(
        self, waited: int, waiter: Site, holder: Site | None, bounce: bool
    ) -> None:
        with self._stats_lock:
            self._wait.add(waited)
            if bounce:
                self._wait.con_bounces += 1
            point = self._points.get(waiter)
            if point is None:
                point = self._points[waiter] = _WaitStats()
            point.add(waited)
            if holder is not None:
                self._contending[holder] = self._contending.get(holder, 0) + 1

    def _reset_stats(self) -> None:
        with self._stats_lock:
            self._records = {}
            self._wait = _WaitStats()
            self._points = {}
            self._contending = {}

    def _stats(
        self,
    ) -> tuple[list[_HoldStats], _WaitStats, dict[Site, _WaitStats], dict[Site, int]]:
        with self._stats_lock:
            wait = _copy_wait(self._wait)
            points = {site: _copy_wait(w) for site, w in self._points.items()}
            contending = dict(self._contending)
            records = list(self._records.copy().values())  # atomic: dict.copy
        return records, wait, points, contending


def _copy_wait(w: _WaitStats) -> _WaitStats:
    c = _WaitStats()
    c.contentions = w.contentions
    c.con_bounces = w.con_bounces
    c.wait_total = w.wait_total
    c.wait_max = w.wait_max
    c.wait_min = w.wait_min
    return c


def _register_class(cls: LockClass) -> str:
    """Register for reports; returns the lockdep ``#N`` suffix for a repeated name."""
    with _classes_lock:
        alive = [ref for ref in _classes if ref() is not None]
        same = sum(1 for ref in alive if (c := ref()) is not None and c.name == cls.name)
        alive.append(weakref.ref(cls))
        _classes[:] = alive
    return f"#{same + 1}" if same else ""


def all_classes() -> list[LockClass]:
    """Every live lock class, in creation order."""
    with _classes_lock:
        refs = list(_classes)
    return [c for ref in refs if (c := ref()) is not None]


class Lock:
    """One lock of a ``LockClass``; a drop-in for ``threading.Lock``.

    ``acquire(blocking=True, timeout=-1) -> bool``, ``release()``, ``with lock:``,
    ``locked()``, ``assert_held()``.  Works as the lock of a ``threading.Condition``.

    Concurrency:
      ``_lock`` is the real lock.  Every method loads the module's mode once (fast: the
      raw lock's own operation; instrumented: the bookkeeping around it).  The
      bookkeeping fields (``_owner``, ``_acquired_at``, ``_site``...) are written only by
      the holder.
    """

    # Every thread that takes the lock reads _lock and the holder's fields: ordinary
    # attributes on free-threaded builds (rcunet.core.freethreaded explains why).
    __slots__ = lockfree_read_slots(
        "_lock",
        "lock_class",
        "_owner",
        "_acquired_at",
        "_acq_thread",
        "_last_thread",
        "_site",
        "_held_in",
    )

    def __init__(self, lock_class: LockClass) -> None:
        self._lock = threading.Lock()
        self.lock_class = lock_class
        self._owner: int | None = None
        self._acquired_at: int | None = None
        self._acq_thread = 0
        self._last_thread = 0
        self._site: Site | None = None
        self._held_in: list[_lockdep._Held] | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if _instrumented:  # atomic: module-global load (see _set_mode)
            return self._acquire_instrumented(blocking, timeout)
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        if _instrumented:  # atomic: module-global load (see _set_mode)
            self._release_instrumented()
        else:
            self._lock.release()

    def __enter__(self) -> bool:
        if _instrumented:  # atomic: module-global load (see _set_mode)
            return self._acquire_instrumented(True, -1)
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        if _instrumented:  # atomic: module-global load (see _set_mode)
            self._release_instrumented()
        else:
            self._lock.release()

    def __repr__(self) -> str:
        state = "locked" if self._lock.locked() else "unlocked"
        return f"<Lock {self.lock_class.display_name} {state}>"

    def locked(self) -> bool:
        return self._lock.locked()

    def assert_held(self) -> None:
        """AssertionError unless the calling thread holds this lock (with lockdep on)."""
        if _checks_on and self._owner != _get_ident():
            raise AssertionError(
                f"{self.lock_class.display_name} is not held by "
                f"{threading.current_thread().name}"
            )

    # -- instrumented path ---------------------------------------------------------------
    def _acquire_instrumented(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        stats = _stats_on
        checks = _checks_on
        frame = _acquiring_frame()
        if checks and blocking:
            _lockdep.check_acquire(self, frame)  # OSError(EDEADLK) on a certain self-deadlock
        yield_point(ACQUIRE)
        raw = self._lock
        if not raw.acquire(False):
            if not blocking:
                return False  # a failed trylock is not a contention
            yield_point(CONTENDED)
            if stats:
                t0 = perf_counter_ns()
                ok = raw.acquire(True, timeout)
                waited = perf_counter_ns() - t0
                holder = self._site  # racy read of the holder's site: one attribute load
                ident = _get_ident()
                self.lock_class._record_contention(
                    waited, (frame.f_code, frame.f_lineno), holder, self._last_thread != ident
                )
            else:
                ok = raw.acquire(True, timeout)
            if not ok:
                return False
        # held from here on: the fields below are written only by the holder
        if stats:
            self._site = (frame.f_code, frame.f_lineno)
            self._acq_thread = _get_ident()
            self._acquired_at = perf_counter_ns()
        if checks:
            self._owner = _get_ident()
            _lockdep.push(self, frame)
        return True

    def _release_instrumented(self) -> None:
        started = self._acquired_at
        if started is not None:
            held = perf_counter_ns() - started
            self._acquired_at = None
            ident = _get_ident()
            rec = self.lock_class._hold_record(ident)
            if rec.acquisitions == 0 or held < rec.hold_min:
                rec.hold_min = held
            if held > rec.hold_max:
                rec.hold_max = held
            rec.hold_total += held
            rec.acquisitions += 1
            if self._acq_thread != self._last_thread:
                rec.acq_bounces += 1
                self._last_thread = self._acq_thread
        if self._owner is not None:
            self._owner = None
            _lockdep.pop(self)
        self._lock.release()  # RuntimeError on an unlocked lock, as threading.Lock


#: This module's source file: its frames are the lock's own, never the acquiring site.
_OWN_FILE = __file__


def _acquiring_frame() -> FrameType:
    """The frame of the code that acquires (the site lock statistics and lockdep record):
    the first frame outside this module.  Interpreted, Lock's methods have frames to
    skip; compiled, they have none (sys._getframe starts at the nearest interpreted frame,
    and a compiled caller is reported as the interpreted code that called it)."""
    frame = sys._getframe(0)
    while frame.f_code.co_filename == _OWN_FILE and frame.f_back is not None:
        frame = frame.f_back
    return frame


_mode_lock = threading.Lock()


@mypyc_attr(native_class=False)  # mypyc compiles no subclass of this builtin
class _RawLockMethod(property):
    """``Lock.__enter__``/``__exit__`` of the interpreted build in fast mode: reading it
    from a lock is one C-level getter (``operator.attrgetter``) returning the raw lock's
    own method, which the ``with`` statement then calls - no Python frame.  Called through
    the class (``type(lock).__enter__(lock)``, as mypyc-compiled callers do), it forwards
    the same way."""

    def __call__(self, lock: Lock, *args: object) -> Any:
        return self.__get__(lock, Lock)(*args)


# The interpreted class's own methods, restored whenever a mode needs bookkeeping.
_WITH_METHODS = {name: vars(Lock)[name] for name in ("__enter__", "__exit__")}
_RAW_WITH_METHODS = {name: _RawLockMethod(attrgetter(f"_lock.{name}"))
                     for name in ("__enter__", "__exit__")}
#: Lock is an ordinary Python class (the source runs, not the compiled module): its
#: methods can be swapped per mode.  A compiled Lock's methods are C already.
_SWAPPABLE = isinstance(_WITH_METHODS["__enter__"], FunctionType)


def _install_with_path(instrumented: bool) -> None:
    """The ``with lock:`` path of every lock: the methods above (they test the mode) when
    instrumented, the raw lock's when fast.  Called under _mode_lock; the type attribute
    store is atomic, and a with statement already past its lookup finishes with the
    methods it found (a release across a mode switch is tolerated: module docstring)."""
    if not _SWAPPABLE:
        return
    for name, method in (_WITH_METHODS if instrumented else _RAW_WITH_METHODS).items():
        setattr(Lock, name, method)


def _set_mode(*, stats: bool | None = None, checks: bool | None = None) -> None:
    """Switch statistics and/or checks for every lock at once (the next acquisition of
    each sees the new mode)."""
    global _stats_on, _checks_on, _instrumented
    with _mode_lock:
        if stats is not None:
            _stats_on = stats
        if checks is not None:
            _checks_on = checks
        _instrumented = _stats_on or _checks_on  # atomic: one module-global store
        _install_with_path(_instrumented)


def stats_enabled() -> bool:
    return _stats_on


def checks_enabled() -> bool:
    return _checks_on


def _set_checks(on: bool) -> None:
    _set_mode(checks=on)


_lockdep.install_switch(_set_checks, checks_enabled)
_set_mode()  # installs the fast with-path of the mode in force
