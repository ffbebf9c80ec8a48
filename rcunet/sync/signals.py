"""Sleeping in the main thread without missing a signal (Ctrl-C).

CPython runs a Python signal handler in the main thread, when that thread next enters
interpreted code or is woken from a blocking call by the signal (EINTR).  Compiled code
never enters the interpreter: a SIGINT that lands while the main thread runs compiled
code (a socket call on its way to sleep) only marks the handler as due, and the thread
then sleeps in ``lock.acquire`` with nothing left to wake it.  The program hangs in its
``recv()`` instead of raising KeyboardInterrupt.

So a compiled wait in the main thread (``main_ident``) sleeps through
``acquire_in_main_thread``, which is interpreted on purpose (this module is never
compiled: setup.py does not list it).  Entering it runs every handler already due, and
its exception (KeyboardInterrupt) propagates from the call.  It sleeps in slices of
``MAIN_SLICE``, re-entering the interpreter between them, so that a signal landing in
the last instructions before the sleep waits one slice at most.

A blocking read in C has the same gap, even from interpreted code: a signal that lands
just before the read begins, or whose C handler runs in another thread, causes no EINTR.
A forked child's call to its parent (rcunet/api/fork.py) waits for the reply through
``wait_readable_in_main_thread``, in the same slices.

Other threads run no handlers and keep sleeping in compiled code: entering the
interpreter also hands the GIL to any thread that asked for it, which would cost a
thread about to sleep a switch there and back (tcp_crr with both Hosts on one CPU ran
at 40% of its rate when every wait came through here).
"""

from __future__ import annotations

import os
import select
import threading
import time
from typing import Protocol

#: The longest the main thread sleeps before it runs the handlers of signals that came
#: just before its sleep began (a Ctrl-C then takes this long at most).
MAIN_SLICE = 0.1


class Gate(Protocol):
    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...


def _main_thread_ident() -> int | None:
    return threading.main_thread().ident


#: The thread that runs signal handlers (a forked child's is the thread that forked).
#: Read without a lock: one module-attribute load, which pairs with the store below.
main_ident = _main_thread_ident()


def _after_fork_in_child() -> None:
    global main_ident
    main_ident = _main_thread_ident()  # after threading's own hook, registered earlier


os.register_at_fork(after_in_child=_after_fork_in_child)


def acquire_in_main_thread(gate: Gate, deadline: float | None) -> bool:
    """``gate.acquire()`` in the main thread until ``deadline`` (``time.monotonic``;
    None: no limit); True once acquired.  Raises what a due signal handler raises
    (KeyboardInterrupt)."""
    while True:  # each pass enters the interpreter's loop again: due handlers run
        if deadline is None:
            slice_ = MAIN_SLICE
        else:
            slice_ = min(MAIN_SLICE, deadline - time.monotonic())
            if slice_ <= 0:
                return False
        if gate.acquire(timeout=slice_):
            return True


def wait_readable_in_main_thread(fd: int) -> None:
    """Until ``fd`` has something to read (or its peer closed), for a blocking read in
    the main thread.  A blocking read in C is just as deaf: a signal whose C handler ran
    in another thread, or just before the read began, causes no EINTR, and its Python
    handler would wait for the read to end.  So the wait polls in slices of
    ``MAIN_SLICE``, re-entering the interpreter between them.  Raises what a due signal
    handler raises."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    ready: list[tuple[int, int]] = []
    while not ready:  # each pass enters the interpreter's loop again: due handlers run
        ready = poller.poll(MAIN_SLICE * 1000)
