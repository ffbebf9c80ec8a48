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
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


def spin_until(ready: Callable[[], _T], seconds: float) -> _T:
    """After a check that found nothing: yield the CPU, then call ``ready``, until it
    returns something true or ``seconds`` have passed; its last result."""
    end = time.monotonic() + seconds
    while True:
        os.sched_yield()
        result = ready()
        if result or time.monotonic() >= end:
            return result
