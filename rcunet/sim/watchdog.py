"""The watchdog: what cannot be simulated ends the run with an error, never a hang.

A simulated thread runs until it reaches a blocking point.  One that burns more than
``cpu_bound`` seconds of real CPU time without reaching one (a busy loop) stops the
run: the error names it and shows its stack, and the thread itself is unwound with
``Stop`` (an asynchronous exception, raised at its next bytecode).  One that holds the
run for ``wall_bound`` real seconds with little CPU is blocked outside the simulation
(a real blocking call: ``input()``, a blocking AF_UNIX socket, a lock made before the
run): the same report, and if it never comes back, the process exits (status 1)
rather than hang.

The watchdog is a real thread outside the simulation.  It only reads the scheduler:
``current`` and ``switches`` (one attribute load each), and the running thread's
``resumed_*`` fields, trusted only when two looks a tick apart agree on all of them.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
import traceback

from rcunet.sim.patches import real_start_new_thread, real_time
from rcunet.sim.scheduler import (
    BusyLoop,
    Refused,
    Scheduler,
    SimThread,
    Stop,
    real_allocate_lock,
    real_monotonic,
)

TICK = 0.05


def stack_of(record: SimThread) -> str:
    frame = sys._current_frames().get(record.ident or -1)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)\n"


def _thread_cpu(ident: int) -> float | None:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, AttributeError):
        return None


def _raise_in(ident: int) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(Stop))


class Watchdog:
    def __init__(self, sched: Scheduler, cpu_bound: float, wall_bound: float,
                 exit_on_hang: bool = True) -> None:
        self.sched = sched
        self.cpu_bound = cpu_bound
        self.wall_bound = wall_bound
        self.exit_on_hang = exit_on_hang
        self._stop = False
        self._done = real_allocate_lock()

    def start(self) -> None:
        self._stop = False
        self._done.acquire()
        real_start_new_thread(self._loop, ())

    def stop(self) -> None:
        self._stop = True  # atomic: one attribute store, read by _loop every tick
        self._done.acquire()  # the loop has seen it: no late interference
        self._done.release()

    def _loop(self) -> None:
        try:
            last: tuple[object, ...] | None = None
            fired_at: float | None = None
            while not self._stop:
                real_time["sleep"](TICK)
                record = self.sched.current  # atomic: attribute load
                if record is None or record.ident is None:
                    continue
                look = (record, self.sched.switches, record.resumed_at, record.resumed_cpu)
                if look != last:
                    last, fired_at = look, None
                    continue
                if fired_at is not None:
                    if real_monotonic() - fired_at > self.wall_bound and self.exit_on_hang:
                        self._hard_exit(record)
                    continue
                fired_at = self._check(record)
        finally:
            self._done.release()

    def _check(self, record: SimThread) -> float | None:
        ident = record.ident
        assert ident is not None
        cpu = _thread_cpu(ident)
        busy = None if cpu is None else cpu - record.resumed_cpu
        held = real_monotonic() - record.resumed_at
        if busy is not None and busy > self.cpu_bound:
            error: Exception = BusyLoop(
                f"thread {record.name!r} ran {busy:.1f} s of CPU time without reaching a "
                f"blocking point (a busy loop cannot be simulated: time only moves when "
                f"every thread waits):\n{stack_of(record)}")
        elif held > self.wall_bound:
            error = Refused(
                f"thread {record.name!r} has been blocked for {held:.0f} s outside the "
                f"simulation (a real blocking call):\n{stack_of(record)}")
        else:
            return None
        self.sched.fail(error)
        _raise_in(ident)
        return real_monotonic()

    def _hard_exit(self, record: SimThread) -> None:
        failure = self.sched.failure
        print(f"rcunet sim: {failure}\nthread {record.name!r} never came back; "
              "exiting", file=sys.stderr, flush=True)
        os._exit(1)
