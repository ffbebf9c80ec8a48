"""Busy polling on an inter-process link: a thread about to sleep on a socket runs the
link's receive path itself until its socket is woken (Linux's ``SO_BUSY_POLL`` with
``SO_PREFER_BUSY_POLL``: the application polls the device queue, and the interrupt
stays masked while it keeps doing so).

Why: on an ``inline_rx`` link (rcunet/link/ipc.py) the link's receive thread runs the
receive path and opens the sleeper's gate, so every frame that ends a wait costs two
wake-ups (the receive thread's, then the sleeper's) and a GIL hand-over between them.
A busy-polling sleeper is woken once, by the frame itself, and runs the receive path
in its own thread; the receive thread stays parked while application threads keep
polling (``BUSY_POLL_DEFER`` after the last one let go, it takes the link back).

One thread polls at a time (``IpcEndpoint.claim``); the others sleep on their gates as
usual and are woken by the poller's delivery like by the receive thread's.  A wait polls
for at most ``POLL_BUDGET``, then hands the link back to the receive thread and sleeps
on its gate, so a thread that waits long (a control connection) does not hold the link.  A wake-up
from elsewhere (a timer, another thread's close) reaches the poller through a
``_KickGate`` on its socket's wait list, which ends the poller's wait on the link.

Off by default, as ``net.core.busy_poll`` is 0 on Linux: ``Network.link(...,
busy_poll=True)`` on an ``inline_rx`` link turns it on for the Hosts at its ends
(``RCUNET_IPC_BUSY_POLL=1`` for ``rcunet bench --target procs``).  What it buys and
costs: one thread's request/response wakes half as often; a stream's receiver leaves
the link unattended while it copies (frames wait up to ``BUSY_POLL_DEFER``), and with
several threads the link goes back and forth between the poller and the receive
thread (``scripts/bench-procs --targets procs,procs-busypoll,kernel`` measures it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rcunet.host.wakeups import deferred as deferred_wakeups

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.link.ipc import IpcEndpoint

#: Longest single wait on the link before the poller re-checks its socket (a kick ends
#: it sooner; this only bounds a kick that raced the wait's start).
POLL_SLICE_MS = 10.0
#: How long one wait polls before it hands the link back and sleeps on its gate
#: (Linux's ``busy_read``, there 50 µs of spinning; here the poll sleeps in the kernel,
#: so the budget can be longer): a thread that waits long (a control connection, an
#: idle reader) must not keep the link from the threads that wait briefly and often.
POLL_BUDGET = 0.02


class _KickGate:
    """What a busy poller puts on its socket's wait list instead of a lock: opening it
    ends the poller's wait on the link.  Opened by the poller itself (its own delivery
    woke the socket) it does nothing: the poller checks its socket after each batch.
    Immutable."""

    def __init__(self, endpoint: IpcEndpoint) -> None:
        self.endpoint = endpoint
        self.owner = threading.get_ident()

    def release(self) -> None:
        if threading.get_ident() != self.owner:
            self.endpoint.kick()


class BusyPoller:
    """A Host's busy polling on one link end (``Host.busy_poller``)."""

    def __init__(self, endpoint: IpcEndpoint) -> None:
        self.endpoint = endpoint  # immutable
        self._lock = threading.Lock()
        #: Threads of this Host asleep on their gates (not polling); read unlocked by a
        #: poller letting go (one attribute load of an int, atomic; stale by one sleeper
        #: at worst: the hand-back then waits BUSY_POLL_DEFER or comes needlessly early).
        self.sleepers = 0  # guarded-by: _lock (writes)

    @contextmanager
    def asleep(self) -> Iterator[None]:
        """Around a sleep on a gate: while any thread sleeps, a poller that lets go hands
        the link straight back to the receive thread (frames for the sleepers must not
        wait ``BUSY_POLL_DEFER`` while the poller does its own work)."""
        with self._lock:
            self.sleepers += 1
        try:
            yield
        finally:
            with self._lock:
                self.sleepers -= 1

    def wait(self, sk: Any, seen: int, deadline: float | None) -> bool | None:
        """``TcpSock._wait`` by polling the link: True once ``sk.wake_seq`` moved past
        ``seen``, False at ``deadline``, None when the link is not ours to poll (another
        thread polls it, or it is down): the caller sleeps on its gate then."""
        endpoint = self.endpoint
        if not endpoint.claim():
            return None
        gate = _KickGate(endpoint)
        hand_back = False
        try:
            with sk.wq:
                if sk.wake_seq != seen:
                    return True
                if sk.wq_gates is None:
                    sk.wq_gates = []
                sk.wq_gates.append(gate)
            budget_end = time.monotonic() + POLL_BUDGET
            while True:
                # atomic: one attribute load; wake_seq is stored under wq by wakeup(),
                # which opens our gate after the store (a kick ends the poll below)
                if sk.wake_seq != seen:
                    return True
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return False
                if now >= budget_end:
                    hand_back = True
                    return None  # sleep on the gate; the receive thread takes over
                end = budget_end if deadline is None else min(budget_end, deadline)
                if not endpoint.poll_once(min(POLL_SLICE_MS, (end - now) * 1000)):
                    return None if sk.wake_seq == seen else True
        finally:
            with sk.wq:
                if sk.wq_gates and gate in sk.wq_gates:
                    sk.wq_gates.remove(gate)
            endpoint.unclaim(hand_back or self.sleepers > 0)  # atomic: see sleepers


def attach_waits(host: Host, endpoint: IpcEndpoint, *, busy_poll: bool,
                 inline_rx: bool) -> None:
    """How ``host``'s threads wait on what ``endpoint`` (its end of an inter-process link)
    brings, set before the Host's threads start: the end's receive batches open the
    sleepers' gates when they end (host/wakeups.py); with ``busy_poll`` (``inline_rx``
    only) sleepers poll the link themselves; and a link whose receive thread spins
    makes the Host's waits spin as long first (``Host.wait_spin``, rcunet/sync/spin.py)."""
    endpoint.around_batch = deferred_wakeups
    if busy_poll and inline_rx:
        host.busy_poller = BusyPoller(endpoint)
    host.wait_spin = max(host.wait_spin, endpoint.rx_spin)
