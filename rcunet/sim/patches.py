"""What a simulation changes in the standard library while it runs, and puts back after.

* Clocks: ``time.time``/``monotonic``/``perf_counter`` (and ``_ns``), ``sleep``,
  ``localtime``/``gmtime``/``ctime``/``strftime`` without an argument, and
  ``datetime.datetime.now``/``utcnow``/``today``, ``datetime.date.today``: all show the
  simulation's virtual clock (asyncio's loop time is ``time.monotonic``).
* Threads: starting one registers it with the scheduler; ``Thread.join`` waits there;
  every lock (``threading``'s, ``queue``'s, rcunet's socket waits) is a ``SimLock``.
* Readiness: ``select.select``/``poll``/``epoll`` and the ``selectors`` classes bound to
  them at import.
* Refused, naming the call: ``os.fork``/``forkpty``/``system``/``posix_spawn``/``exec*``
  and ``subprocess`` (a child process would run on the real clock, outside the network).
"""

from __future__ import annotations

import _thread
import datetime
import os
import queue
import random
import select
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rcunet.sim import primitives, scheduler
from rcunet.sim.clock import SimClock
from rcunet.sim.scheduler import DONE, Refused, Scheduler, Stop

real_time = {name: getattr(time, name) for name in (
    "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
    "sleep", "localtime", "gmtime", "ctime", "strftime")}
_real_join = threading.Thread.join
real_start_new_thread = _thread.start_new_thread
_real_start_joinable = getattr(threading, "_start_joinable_thread", None)
_real_urandom = os.urandom
_real_datetime = datetime.datetime
_real_date = datetime.date

#: The calls refused in a simulation: module, attribute names.
_REFUSED_OS = ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp", "execv", "execve",
               "execl", "execle", "execlp", "execlpe", "execvp", "execvpe", "popen")


def _clock() -> SimClock | None:
    sched = scheduler.active  # atomic: one module attribute load
    return None if sched is None else sched.clock


# -- clocks ------------------------------------------------------------------------------
def time_ns() -> int:
    clock = _clock()
    if clock is None:
        return int(real_time["time_ns"]())
    if clock.skews:  # a Host's clock set apart (Simulation.skew): the caller's Host's
        from rcunet.api.patch import current_host

        return int(clock.wall_ns(clock.skews.get(current_host(), 0)))
    return int(clock.wall_ns())


def time_() -> float:
    return time_ns() / 1e9


def monotonic_ns() -> int:
    clock = _clock()
    return clock.now() if clock is not None else int(real_time["monotonic_ns"]())


def monotonic() -> float:
    return monotonic_ns() / 1e9


def sleep(secs: float) -> None:
    here = scheduler.current()
    if here is None:
        real_time["sleep"](secs)
        return
    seconds = float(secs)
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    sched, _record = here
    if seconds == 0:
        sched.yield_now()
        return
    sched.block(None, primitives.deadline_after(sched, seconds))


def localtime(secs: float | None = None) -> time.struct_time:
    moment: time.struct_time = real_time["localtime"](time_() if secs is None else secs)
    return moment


def gmtime(secs: float | None = None) -> time.struct_time:
    moment: time.struct_time = real_time["gmtime"](time_() if secs is None else secs)
    return moment


def ctime(secs: float | None = None) -> str:
    return str(real_time["ctime"](time_() if secs is None else secs))


def strftime(format: str, t: Any = None) -> str:  # noqa: A002 (time.strftime's name)
    return str(real_time["strftime"](format, localtime() if t is None else t))


class _DateMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _real_date)


class _DatetimeMeta(_DateMeta):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _real_datetime)


class SimDate(_real_date, metaclass=_DateMeta):
    """``datetime.date`` whose ``today()`` is the simulation's."""

    @classmethod
    def today(cls) -> Any:
        return cls.fromtimestamp(time_())


class SimDatetime(_real_datetime, metaclass=_DatetimeMeta):
    """``datetime.datetime`` whose ``now``/``utcnow``/``today`` are the simulation's."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return cls.fromtimestamp(time_(), tz)

    @classmethod
    def utcnow(cls) -> Any:
        return cls.fromtimestamp(time_(), datetime.UTC).replace(tzinfo=None)

    @classmethod
    def today(cls) -> Any:
        return cls.fromtimestamp(time_())


def simulated(function: Any) -> Any:
    """``function``, or its simulated stand-in when it is one of the real clocks
    (``sim.spawn(host, time.sleep, 10)`` took the real ``sleep`` before the run)."""
    for name, real in real_time.items():
        if function is real:
            return getattr(time, name)
    return function


# -- threads -----------------------------------------------------------------------------
def _lock_factory(*_args: Any) -> primitives.SimLock:
    return primitives.SimLock()


def _rlock_factory(*args: Any, **kwargs: Any) -> Any:
    return threading._PyRLock(*args, **kwargs)  # type: ignore[attr-defined]


def _simulated_body(sched: Scheduler, record: scheduler.SimThread,
                    function: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any], host: Any) -> None:
    from rcunet.api import patch

    try:
        sched.enter(record)
    except Stop:
        sched.finish(record)
        return
    if host is not None:
        patch.install(host, this_thread=True)
    try:
        function(*args, **kwargs)
    except Stop:
        pass
    finally:
        if host is not None:
            patch.uninstall(host, this_thread=True)
        sched.finish(record)


def _register(function: Callable[..., Any]) -> tuple[Scheduler, scheduler.SimThread, Any] | None:
    here = scheduler.current()
    if here is None:
        return None
    from rcunet.api import patch

    sched, _creator = here
    thread = getattr(function, "__self__", None)
    if isinstance(thread, threading.Thread):
        record = sched.new_thread(thread.name, thread.daemon)
        record.thread = thread
        thread._rcunet_sim = record  # type: ignore[attr-defined]  # join() finds it here
    else:
        record = sched.new_thread(getattr(function, "__name__", "thread"), True)
    record.host = patch.current_host()
    return sched, record, record.host


def start_new_thread(function: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any] | None = None) -> int:
    """``_thread.start_new_thread`` (what ``Thread.start`` calls up to 3.12)."""
    registered = _register(function)
    if registered is None:
        return int(real_start_new_thread(function, args, kwargs or {}))
    sched, record, host = registered
    return int(real_start_new_thread(
        _simulated_body, (sched, record, function, tuple(args), kwargs or {}, host)))


def start_joinable_thread(function: Callable[..., Any], handle: Any = None,
                          daemon: bool = True) -> Any:
    """``threading._start_joinable_thread`` (3.13 and later)."""
    assert _real_start_joinable is not None
    registered = _register(function)
    if registered is None:
        return _real_start_joinable(function, handle=handle, daemon=daemon)
    sched, record, host = registered

    def body() -> None:
        _simulated_body(sched, record, function, (), {}, host)

    return _real_start_joinable(body, handle=handle, daemon=daemon)


def join(self: threading.Thread, timeout: float | None = None) -> None:
    """``Thread.join``: a blocking point when the thread is a simulated one."""
    record = self.__dict__.get("_rcunet_sim")
    here = scheduler.current()
    if record is None or here is None:
        _real_join(self, timeout)
        return
    if not self._started.is_set():  # type: ignore[attr-defined]
        raise RuntimeError("cannot join thread before it is started")
    if self is threading.current_thread():
        raise RuntimeError("cannot join current thread")
    sched, _me = here
    if record.state is not DONE and not sched.block(
            lambda: record.state is DONE, primitives.deadline_after(sched, timeout)):
        return
    _real_join(self)  # it has handed the run on: only its OS thread's exit is left


_real_excepthook = threading.excepthook


def _excepthook(args: Any) -> None:
    if args.exc_type is not None and issubclass(args.exc_type, Stop):
        return  # a thread unwound because the run stopped: not the program's error
    _real_excepthook(args)


# -- refusals ----------------------------------------------------------------------------
def refuse(call: str, why: str) -> Refused:
    """Stop the run: ``call`` cannot be simulated.  Returns the error to raise."""
    error = Refused(f"{call}: {why}")
    sched = scheduler.active
    if sched is not None:
        sched.fail(error)
    return error


def _refusing(name: str) -> Callable[..., Any]:
    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise refuse(f"os.{name}()", "a child process would run on the real clock, "
                     "outside the simulated network")

    refused.__name__ = name
    return refused


def _refused_execute_child(self: Any, args: Any, *_rest: Any, **_kw: Any) -> None:
    raise refuse(f"subprocess.Popen({args!r})", "a child process would run on the real "
                 "clock, outside the simulated network")


# -- seeded randomness ------------------------------------------------------------------
class SeededRandom:
    """What ``--seed-random`` gives a program: ``random``'s global generator seeded,
    and ``os.urandom`` drawn from a generator of its own; both carry on across the
    ``run`` calls of one simulation."""

    def __init__(self, seed: int) -> None:
        self.random_state = random.Random(seed).getstate()
        self._bytes = random.Random(f"rcunet-sim-urandom-{seed}")

    def save(self, state: Any) -> None:
        self.random_state = state

    def urandom(self, size: int) -> bytes:
        if size < 0:
            raise ValueError("negative argument not allowed")
        return self._bytes.randbytes(size)


# -- install -----------------------------------------------------------------------------
class Patches:
    """The set of replacements, installed for one run (``install``/``uninstall``)."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any, bool]] = []
        self._restore: list[Callable[[], object]] = []

    def replace(self, owner: Any, name: str, value: Any) -> None:
        """``owner.name = value`` for the run (put back by ``uninstall``)."""
        self._set(owner, name, value)

    def _set(self, owner: Any, name: str, value: Any) -> None:
        had = name in vars(owner) if isinstance(owner, type) else hasattr(owner, name)
        self._saved.append((owner, name, getattr(owner, name, None), had))
        setattr(owner, name, value)

    def install(self, sched: Scheduler, seed_random: SeededRandom | None = None) -> None:
        if scheduler.active is not None:
            raise RuntimeError("a simulation is already running in this process")
        scheduler.active = sched
        if seed_random is not None:
            self._install_seeded_random(seed_random)
        for name, value in (("time", time_), ("time_ns", time_ns), ("monotonic", monotonic),
                            ("monotonic_ns", monotonic_ns), ("perf_counter", monotonic),
                            ("perf_counter_ns", monotonic_ns), ("sleep", sleep),
                            ("localtime", localtime), ("gmtime", gmtime), ("ctime", ctime),
                            ("strftime", strftime)):
            self._set(time, name, value)
        self._rebind_time_aliases()
        self._set(datetime, "datetime", SimDatetime)
        self._set(datetime, "date", SimDate)
        self._set(_thread, "allocate_lock", _lock_factory)
        self._set(_thread, "start_new_thread", start_new_thread)
        self._set(threading, "_allocate_lock", _lock_factory)
        self._set(threading, "Lock", _lock_factory)
        self._set(threading, "RLock", _rlock_factory)
        if hasattr(threading, "_start_new_thread"):
            self._set(threading, "_start_new_thread", start_new_thread)
        if _real_start_joinable is not None:
            self._set(threading, "_start_joinable_thread", start_joinable_thread)
        self._set(threading.Thread, "join", join)
        self._set(threading, "excepthook", _excepthook)
        self._set(queue, "SimpleQueue", queue._PySimpleQueue)  # type: ignore[attr-defined]
        self._set(select, "select", primitives.select)
        self._set(select, "poll", primitives.SimPoll)
        if hasattr(select, "epoll"):
            self._set(select, "epoll", primitives.SimEpoll)
            self._set(selectors.EpollSelector, "_selector_cls", primitives.SimEpoll)
        self._set(selectors.PollSelector, "_selector_cls", primitives.SimPoll)
        self._set(selectors.SelectSelector, "_select", staticmethod(primitives.select))
        for name in _REFUSED_OS:
            if hasattr(os, name):
                self._set(os, name, _refusing(name))
        self._set(subprocess.Popen, "_execute_child", _refused_execute_child)

    def _install_seeded_random(self, seeded: SeededRandom) -> None:
        """``random``'s functions, ``os.urandom`` (so ``uuid.uuid4``, ``secrets``,
        ``random.SystemRandom``) from the seed; ``random``'s state is put back after."""
        saved = random.getstate()
        random.setstate(seeded.random_state)

        def restore() -> None:
            seeded.save(random.getstate())
            random.setstate(saved)

        self._restore.append(restore)
        self._set(os, "urandom", seeded.urandom)
        self._rebind_aliases({id(_real_urandom): (_real_urandom, seeded.urandom)})

    def _rebind_time_aliases(self) -> None:
        """Modules that bound a clock at import (``from time import monotonic as
        _time``: threading, queue, socketserver, ...) get the simulated one too."""
        self._rebind_aliases({id(real): (real, getattr(time, name))
                              for name, real in real_time.items()})

    def _rebind_aliases(self, replacements: dict[int, tuple[Any, Any]]) -> None:
        """Every module-level name bound to one of the real functions (by identity)
        gets its replacement."""
        for name, module in list(sys.modules.items()):
            if module is None or name == "time" or name.startswith("rcunet.sim"):
                continue
            try:
                namespace = vars(module)
            except TypeError:
                continue
            for attr, value in list(namespace.items()):
                pair = replacements.get(id(value))
                if pair is not None and value is pair[0]:
                    self._set(module, attr, pair[1])

    def uninstall(self) -> None:
        while self._restore:
            self._restore.pop()()
        while self._saved:
            owner, name, value, had = self._saved.pop()
            if had:
                setattr(owner, name, value)
            else:
                delattr(owner, name)
        scheduler.active = None

