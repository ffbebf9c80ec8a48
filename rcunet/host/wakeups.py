"""Wake-ups a receive batch defers to its end.

A link's receive thread runs the receive path for a batch of frames (softirq context).
When a segment makes a socket ready, ``TcpSock.wakeup`` opens the sleeping threads'
gates.  Opened at once, a woken thread runs while the receive thread still holds the
GIL (it goes on to send the ACK, take the next frame), so the woken thread sleeps a
second time, on the GIL, and is woken again when the receive thread blocks: two wake-ups
per event, and the two threads bounce the GIL between them.  Inside ``deferred()`` the
gates are collected and opened when the batch ends, just before the receive thread
goes back to sleep on its link: one wake-up, and the woken thread finds the GIL free.
(Linux runs a NAPI poll's whole budget before the woken task is scheduled on that CPU,
for the same reason.)

Only the thread that entered ``deferred()`` defers (a thread-local list); every other
waker opens gates at once.  A gate is a one-shot lock a waiter sleeps on; it is opened
exactly once, later or sooner, and a waiter that timed out meanwhile has already left
(``TcpSock._wait`` sees its gate gone from the list and returns: the waker owns it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, Final

_local = threading.local()  # .gates: the batch's collected gates, or None outside one


def _batch_gates() -> list[Any] | None:
    """This thread's receive batch's gates; None outside a batch.  Read from the thread's
    own attribute dict: a thread that never entered a batch (an application thread) has
    no ``gates``, and ``getattr`` with a default would raise and catch an AttributeError
    to learn that, at every wake-up it makes."""
    gates: list[Any] | None = _local.__dict__.get("gates")
    return gates


def open_gates(gates: Iterable[Any]) -> None:
    """Open ``gates`` now, or at the end of this thread's receive batch."""
    pending = _batch_gates()
    if pending is None:
        for gate in gates:
            gate.release()
    else:
        pending.extend(gates)


class _Deferred:
    """The context manager ``deferred()`` returns.  A class, not a generator-based
    context manager: a receive thread enters it once per batch, and it is compiled.
    Its state is the thread's (``_local.gates``, ``_local.depth``: the blocks entered
    and not yet left), so one stateless instance serves every thread."""

    def __enter__(self) -> None:
        depth: int = _local.__dict__.get("depth", 0)  # as in _batch_gates
        if depth == 0:
            _local.gates = []
        _local.depth = depth + 1

    def __exit__(self, *exc: object) -> None:
        depth: int = _local.depth - 1
        _local.depth = depth
        if depth:
            return  # an inner block: the outermost opens the gates
        gates: list[Any] = _local.gates
        _local.gates = None
        for gate in gates:
            gate.release()


_DEFERRED: Final = _Deferred()


def deferred() -> _Deferred:
    """Collect the gates opened in this thread until the block ends (nested: the
    outermost block opens them)."""
    return _DEFERRED
