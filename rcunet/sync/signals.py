"""Sleeping in compiled code without missing a signal (Ctrl-C).

CPython runs a Python signal handler in the main thread, when that thread next enters
interpreted code or is woken from a blocking call by the signal (EINTR).  Compiled code
never enters the interpreter: a SIGINT that lands while the main thread runs compiled
code (a socket call on its way to sleep) only marks the handler as due, and the thread
then sleeps in ``lock.acquire`` with nothing left to wake it.  The program hangs in its
``recv()`` instead of raising KeyboardInterrupt.

So a compiled wait sleeps through ``acquire``, which is interpreted on purpose (this
module is never compiled: setup.py does not list it).  Entering it runs every handler
already due, and its exception (KeyboardInterrupt) propagates from the call.  The main
thread then sleeps in slices of ``MAIN_SLICE``, re-entering the interpreter between
them, so that a signal landing in the last instructions before the sleep waits one
slice at most.  The other threads run no handlers, and they sleep in one piece.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

#: The longest the main thread sleeps before it runs the handlers of signals that came
#: just before its sleep began (a Ctrl-C then takes this long at most).
MAIN_SLICE = 0.1


class Gate(Protocol):
    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...


def _main_ident() -> int | None:
    return threading.main_thread().ident


#: The thread that runs signal handlers (a forked child's is the thread that forked).
_main = _main_ident()


def _after_fork_in_child() -> None:
    global _main
    _main = _main_ident()  # after threading's own after-fork hook: registered earlier


os.register_at_fork(after_in_child=_after_fork_in_child)


def acquire(gate: Gate, deadline: float | None) -> bool:
    """``gate.acquire()`` until ``deadline`` (``time.monotonic``; None: no limit); True
    once acquired.  Raises what a due signal handler raises (KeyboardInterrupt)."""
    if threading.get_ident() != _main:
        if deadline is None:
            return gate.acquire()
        remaining = deadline - time.monotonic()
        return remaining > 0 and gate.acquire(timeout=remaining)
    while True:  # each pass enters the interpreter's loop again: due handlers run
        if deadline is None:
            slice_ = MAIN_SLICE
        else:
            slice_ = min(MAIN_SLICE, deadline - time.monotonic())
            if slice_ <= 0:
                return False
        if gate.acquire(timeout=slice_):
            return True
