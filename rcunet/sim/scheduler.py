"""The scheduler of a simulation: the program's threads are real OS threads, but only one
runs at a time.  Each parks on its own baton (a real lock); a thread that reaches a
blocking point records what it waits for (a readiness test and a virtual deadline) and
hands the baton to the next thread, which the seeded generator picks among the runnable
ones.  Before each pick the network is stepped at the current virtual time; when no
thread can run, the clock jumps to the earliest deadline (a Host timer, a frame held by
a link, a sleep or a timeout).

Threads never run in parallel, so the scheduler's own state needs no lock: it is read
and written only by the thread that holds the baton (the watchdog only reads
``current`` and ``switches``, one attribute load each, to see whether the run moves).
The batons are the real ``_thread`` locks captured at import: the simulated primitives
that replace ``threading``'s are built on this module, never the other way round.
"""

from __future__ import annotations

import _thread
import random
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from rcunet.sim.clock import SimClock

#: The real primitives and clocks, captured before any patch is installed.
real_allocate_lock = _thread.allocate_lock
real_get_ident = _thread.get_ident
real_thread_time = time.thread_time
real_monotonic = time.monotonic

RUNNABLE, BLOCKED, DONE = "runnable", "blocked", "done"

#: Real seconds the driver waits for its baton at a time: the most a Ctrl-C waits for
#: its handler to run (``Scheduler._park``).
DRIVER_SLICE = 0.05

#: The scheduler of the running simulation (one per process at a time), None between
#: runs.  Set and cleared by the patches' install/uninstall; read with one load.
active: Scheduler | None = None


def current() -> tuple[Scheduler, SimThread] | None:
    """The active scheduler and the calling thread's record, when the calling thread is
    one the simulation runs (None otherwise: the primitives then behave as the real)."""
    sched = active  # atomic: one module attribute load
    if sched is None:
        return None
    record = sched.me()
    return None if record is None else (sched, record)


class SimulationError(Exception):
    """Why a simulation stopped before its programs ended (the message says it all)."""


class Deadlock(SimulationError):
    """Every thread waits and nothing is due: no timer, no frame in flight, no timeout."""


class BusyLoop(SimulationError):
    """A thread ran past the CPU-time bound without reaching a blocking point."""


class Refused(SimulationError):
    """The program made a call the simulation cannot simulate (it names the call)."""


class Interrupted(SimulationError):
    """Ctrl-C during the run."""


class Stop(BaseException):
    """Raised inside a simulated thread to unwind it when the run stops (a BaseException,
    so a program's ``except Exception`` does not swallow it)."""


class SimThread:
    """One thread under the scheduler.  Fields are written only by the baton holder."""

    __slots__ = ("name", "serial", "state", "ready", "deadline", "timed_out", "baton",
                 "ident", "daemon", "resumed_cpu", "resumed_at", "thread", "driver",
                 "interrupt", "host")

    def __init__(self, name: str, serial: int, daemon: bool, driver: bool = False) -> None:
        self.name = name
        self.serial = serial  # creation order: the order picks are made in
        self.state = RUNNABLE
        self.ready: Callable[[], bool] | None = None
        self.deadline: int | None = None
        self.timed_out = False
        self.baton = real_allocate_lock()
        self.baton.acquire()  # parked until the scheduler releases it
        self.ident: int | None = None
        self.daemon = daemon
        self.resumed_cpu = 0.0
        self.resumed_at = 0.0
        self.thread: Any = None  # its threading.Thread, when it has one
        self.driver = driver
        self.interrupt: BaseException | None = None  # raised at its next blocking point
        self.host: Any = None  # the Host its sockets are made on (a crash stops it)

    def __repr__(self) -> str:
        return f"<SimThread {self.name} {self.state}>"


class Scheduler:
    """Runs simulated threads one at a time on ``clock`` (int ns).

    ``step()`` processes everything the network has due now; ``next_deadline()`` is the
    network's earliest deadline (None: nothing pending)."""

    def __init__(self, clock: SimClock, seed: int, step: Callable[[], object],
                 next_deadline: Callable[[], int | None]) -> None:
        self.clock = clock
        self.rng = random.Random(seed)
        self._step = step
        self._next_deadline = next_deadline
        self.threads: list[SimThread] = []
        self.by_ident: dict[int, SimThread] = {}
        self.current: SimThread | None = None
        self.switches = 0  # read by the watchdog: one attribute load
        self.failure: BaseException | None = None
        self.stopping = False
        self.driver: SimThread | None = None
        self._serial = 0

    # -- threads --------------------------------------------------------------------------
    def adopt_driver(self, name: str = "rcunet-sim") -> SimThread:
        """The calling thread becomes the driver (again, for a later ``run``): it runs
        first and waits for the rest.  Its baton stays taken while it runs, as every
        running thread's does (the next park waits for a hand-back)."""
        driver = self.driver
        if driver is None:
            driver = self.driver = self._new(name, daemon=False, driver=True)
        else:
            self.by_ident.pop(driver.ident or 0, None)
        self._bind(driver)
        return driver

    def interrupt(self, record: SimThread, error: BaseException) -> None:
        """Raise ``error`` in ``record`` at its blocking point (as a signal interrupts a
        system call): it becomes runnable, and its wait raises when it next runs."""
        record.interrupt = error
        if record.state is BLOCKED:
            record.state = RUNNABLE

    def new_thread(self, name: str, daemon: bool) -> SimThread:
        """A thread about to be started: runnable, parked until picked."""
        return self._new(name, daemon)

    def _new(self, name: str, daemon: bool, driver: bool = False) -> SimThread:
        self._serial += 1
        record = SimThread(name, self._serial, daemon, driver)
        self.threads.append(record)
        return record

    def _bind(self, record: SimThread) -> None:
        record.ident = real_get_ident()
        self.by_ident[record.ident] = record
        self._resumed(record)

    def enter(self, record: SimThread) -> None:
        """First thing a new OS thread does: wait for its first turn."""
        record.ident = real_get_ident()
        self.by_ident[record.ident] = record  # atomic: one dict store, before it parks
        record.baton.acquire()
        self._resumed(record)
        if self.stopping:
            raise Stop
        self._raise_interrupt(record)

    def me(self) -> SimThread | None:
        """The calling thread's record (None for a thread the simulation does not run)."""
        return self.by_ident.get(real_get_ident())

    def finish(self, record: SimThread) -> None:
        """The thread's last act: mark it done and hand the run on (no parking)."""
        record.state = DONE
        self.by_ident.pop(record.ident or 0, None)
        nxt = self._pick()
        self._hand_to(nxt)

    # -- blocking points ----------------------------------------------------------------
    def block(self, ready: Callable[[], bool] | None, deadline: int | None) -> bool:
        """Park the calling thread until ``ready()`` is true (True) or the virtual clock
        reaches ``deadline`` (False).  ``ready`` None: only the deadline ends the wait."""
        record = self.me()
        if record is None:
            raise RuntimeError("a simulated wait outside the simulation's threads")
        if self.stopping and not record.driver:
            raise Stop
        self._raise_interrupt(record)
        record.state = BLOCKED
        record.ready = ready
        record.deadline = deadline
        record.timed_out = False
        self._switch(record)
        if self.stopping and not record.driver:
            raise Stop
        self._raise_interrupt(record)
        return not record.timed_out

    @staticmethod
    def _raise_interrupt(record: SimThread) -> None:
        error = record.interrupt
        if error is not None:
            record.interrupt = None
            raise error

    def yield_now(self) -> None:
        """A scheduling point that waits for nothing (``sleep(0)``, ``select`` with a
        zero timeout): another runnable thread may run first."""
        record = self.me()
        if record is None:
            return
        if self.stopping and not record.driver:
            raise Stop
        record.state = RUNNABLE
        self._switch(record)
        if self.stopping and not record.driver:
            raise Stop

    def fail(self, error: BaseException) -> None:
        """Stop the run with ``error`` (the first failure is the one reported)."""
        if self.failure is None:
            self.failure = error
        self.stopping = True

    # -- switching ----------------------------------------------------------------------
    def _switch(self, record: SimThread) -> None:
        before = self.clock.now()
        nxt = self._pick()
        if nxt is record:
            if self.clock.now() != before:
                self._resumed(record)  # progress: its CPU-time bound starts again
            else:  # nobody else ran and no time passed: still the same busy stretch
                record.state = RUNNABLE
                record.ready = None
                record.deadline = None
            return
        self._hand_to(nxt)
        self._park(record)

    def _hand_to(self, nxt: SimThread) -> None:
        self.current = nxt
        self.switches += 1
        nxt.baton.release()

    def _park(self, record: SimThread) -> None:
        # Python runs a signal handler (Simulation's Ctrl-C) in the main thread only,
        # between two bytecodes.  A SIGINT that lands while the main thread is on its way
        # into a blocking acquire does not interrupt it (the C-level handler has already
        # run), so the Python handler would wait for the baton, which never comes back
        # to the driver of a run that never ends.  The driver (the main thread when run
        # from it) therefore waits in slices, and a pending handler runs within one.
        wait = DRIVER_SLICE if record.driver else -1
        while True:
            try:
                if record.baton.acquire(timeout=wait):
                    break
            except KeyboardInterrupt:  # Ctrl-C lands in the main thread, parked or not
                self.fail(Interrupted("interrupted (Ctrl-C); the threads were at:\n"
                                      + self.describe_threads()))
        self._resumed(record)

    def _resumed(self, record: SimThread) -> None:
        record.state = RUNNABLE
        record.ready = None
        record.deadline = None
        self.current = record
        record.resumed_cpu = real_thread_time()
        record.resumed_at = real_monotonic()

    def _pick(self) -> SimThread:
        """The next thread to run: stepping the network and moving the clock as needed."""
        while True:
            if self.stopping:
                return self._next_to_unwind()
            self._step()
            now = self.clock.now()
            ready = []
            for record in self.threads:
                state = record.state
                if state is RUNNABLE:
                    ready.append(record)
                elif state is BLOCKED:
                    test = record.ready
                    if test is not None and test():
                        record.timed_out = False
                        ready.append(record)
                    elif record.deadline is not None and record.deadline <= now:
                        record.timed_out = True
                        ready.append(record)
            self.threads = [r for r in self.threads if r.state is not DONE]
            if ready:
                return ready[self.rng.randrange(len(ready))] if len(ready) > 1 else ready[0]
            self._advance(now)

    def _advance(self, now: int) -> None:
        """No thread can run: move the clock to the next deadline, or stop the run."""
        deadlines = [r.deadline for r in self.threads
                     if r.state is BLOCKED and r.deadline is not None]
        network = self._next_deadline()
        if network is not None:
            deadlines.append(network)
        if not deadlines:
            self.fail(Deadlock("deadlock: every thread waits and nothing is due\n"
                               + self.describe_threads()))
            return
        nxt = min(deadlines)
        if nxt > now:
            self.clock.set(nxt)

    def _next_to_unwind(self) -> SimThread:
        """Stopping: every thread but the driver is resumed in creation order (its wait
        raises Stop); the driver last."""
        self.threads = [r for r in self.threads if r.state is not DONE]
        for record in self.threads:
            if not record.driver:
                return record
        return self.threads[0]

    # -- reports ------------------------------------------------------------------------
    def describe_threads(self) -> str:
        """Each live thread's name, state and stack (the Ctrl-C and deadlock report)."""
        frames = sys._current_frames()
        parts = []
        for record in self.threads:
            if record.state is DONE or record.driver:
                continue
            frame = frames.get(record.ident or -1)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
            parts.append(f"thread {record.name!r} ({record.state}):\n{stack}")
        return "".join(parts)

    def live(self) -> list[SimThread]:
        return [r for r in self.threads if r.state is not DONE and not r.driver]
