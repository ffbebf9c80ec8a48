"""Spinning before sleeping: yield the CPU and re-check a condition for a bounded time.

Two places spin, and both go through ``spin_until``:

- an inter-process link's receive thread keeps polling the link after its last frame
  (``rx_spin``, rcunet/link/ipc.py: NAPI's "keep polling while packets come");
- a thread about to sleep on a socket of a Host whose link spins re-checks the socket
  first (``Host.wait_spin``, host/tcp/sock.py: spin-then-park, as an adaptive mutex spins
  before it sleeps in the kernel).

``os.sched_yield`` runs without the GIL, so the process's other threads (which share its
CPU when the process is pinned to one) run between checks: a spinning waiter lets the
receive thread deliver, and a spinning receive thread lets the application work.

A spin pays only on a CPU the process has to itself.  Where other tasks want it, each
yield hands them a whole time slice, and a task that never sleeps is never the woken
task that preempts: a frame then waits milliseconds for its spinner.  So, as Linux's
busy polling stops at ``need_resched()``, a spin watches how much of its time went to
other tasks (wall time its process's threads did not run); once that is a time slice
(``STOLEN_LIMIT``) it ends, and no thread of the process spins for ``BACK_OFF``: they
sleep, and a frame wakes them.  An interrupt or a kernel thread's brief run takes less
and does not stop a spin.  ``RCUNET_SPIN_GUARD=0`` (read at import) turns the guard off
(the tests that count spin hits do).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")

#: How often a spin measures the time other tasks took from it (seconds of wall time).
FAIR_WINDOW = 500e-6
#: A spin whose window lost this much wall time to other tasks ends (seconds): another
#: task's time slice (on an idle machine, a kernel thread or the hypervisor rarely takes
#: more than a few hundred µs).
STOLEN_LIMIT = 1e-3
#: Whether spins watch for that at all (``RCUNET_SPIN_GUARD=0``: never).
GUARD = os.environ.get("RCUNET_SPIN_GUARD", "1") != "0"
#: After a spin ended for want of CPU, how long no thread of the process spins: long
#: beside the slice a spin loses to find out, short beside the rare wrong call on an
#: idle machine (a kernel thread or the hypervisor that took a millisecond).
BACK_OFF = 0.02

#: Monotonic time before which no thread spins (``BACK_OFF`` after a spin that lost its
#: CPU).  One float, stored by whichever spinner saw it and loaded by every spin: single
#: module-global stores and loads (atomic); a stale load spins one window more.
_calm_until = 0.0


def spin_until(ready: Callable[[], _T], seconds: float) -> _T:
    """After a check that found nothing: yield the CPU, then call ``ready``, until it
    returns something true or ``seconds`` have passed, or others took the CPU (see the
    module's docstring); its last result."""
    global _calm_until
    now = time.monotonic()
    if now < _calm_until:  # atomic: module-global load
        return ready()
    end = now + seconds
    window_start, window_cpu = now, time.process_time()
    while True:
        os.sched_yield()
        result = ready()
        if result:
            return result
        now = time.monotonic()
        # measured before the time is up: a spin shorter than the window sees another
        # task's slice only as a yield that came back past its end
        if GUARD and now - window_start >= FAIR_WINDOW:
            cpu = time.process_time()
            if (now - window_start) - (cpu - window_cpu) >= STOLEN_LIMIT:
                _calm_until = now + BACK_OFF  # atomic: module-global store
                return result
            window_start, window_cpu = now, cpu
        if now >= end:
            return result


def calm_until() -> float:
    """The monotonic time before which no thread of this process spins (in the past
    unless a spin lost its CPU less than ``BACK_OFF`` ago)."""
    return _calm_until  # atomic: module-global load
