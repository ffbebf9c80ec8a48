"""The two-level socket lock of Linux (reference §5.1): a small lock (``slock``), an
"owned by user" flag, waiters, and a backlog.

* A user thread calls ``lock_sock()``: it takes ``slock``, waits while another user owns
  the socket, sets ``owned`` and drops ``slock`` — a mutex that is *not* held while the
  user works.
* A receive worker calls ``bh_deliver(item, size)``: under ``slock`` it processes the item
  at once (``process_bh``) if nobody owns the socket, otherwise appends it to the backlog
  (bounded by ``backlog_limit``: Linux's ``2*rcvbuf + sndbuf/2 + 64 KB``) — the worker
  never sleeps.
* ``release_sock()`` drains the backlog: it detaches the whole list, drops ``slock``,
  processes every item, retakes ``slock`` and repeats until empty; only then zeroes
  ``backlog_len`` (so a flooding producer cannot keep the owner looping forever), runs
  the deferred work (``release_cb``: timers that fired while owned, as bits of an int
  like Linux's TCP_*_DEFERRED flags), clears ``owned`` and wakes one waiter.

A socket that never meets a second user thread never needs the condition variable: it is
made on the first contended ``lock_sock`` (under ``slock``), as most sockets never contend.
``detach()`` drops the protocol callbacks when the socket is destroyed: they are bound
methods of the socket that owns this lock, and the cycle would otherwise leave every
closed socket to the cyclic garbage collector.

Concurrency:
  slock      guards owned, backlog, backlog_len, deferred, waiters, and the creation of
             _wait.
  owned      written under slock; ``owned_by_me()`` reads it with no lock (one attribute
             load; only meaningful for the owner itself).
  Lock order: ehash/bhash bucket locks > slock (a worker may look a socket up, then take
  its slock; nothing takes a table lock while holding slock).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from rcunet.sync.lock import LockClass

SLOCK = LockClass("sk_lock.slock")

BACKLOG_EXTRA = 64 * 1024


class SocketLock:
    def __init__(
        self,
        process: Callable[[Any], None],
        *,
        backlog_limit: Callable[[], int] = lambda: 2 * 212992 + 212992 // 2 + BACKLOG_EXTRA,
        release_cb: Callable[[int], None] | None = None,
        on_backlog_drop: Callable[[Any], None] | None = None,
        process_bh: Callable[[Any], bool] | None = None,
    ) -> None:
        self.slock = SLOCK.new()
        self._wait: threading.Condition | None = None  # guarded-by: slock (made on demand)
        self.waiters = 0  # guarded-by: slock (user threads sleeping in lock_sock)
        self._process = process  # immutable: the protocol's do_rcv (the owner's backlog)
        # immutable: do_rcv in softirq context; True asks bh_deliver's caller to wake the
        # socket's waiters once slock is released
        self._process_bh = process_bh if process_bh is not None else _processed(process)
        self._backlog_limit = backlog_limit  # immutable
        self._release_cb = release_cb  # immutable
        self._on_backlog_drop = on_backlog_drop  # immutable
        self.owned = False  # guarded-by: slock
        self.owner: int | None = None  # guarded-by: slock (thread ident of the owner)
        self.backlog: deque[tuple[Any, int]] = deque()  # guarded-by: slock
        self.backlog_len = 0  # guarded-by: slock
        self.backlog_max_seen = 0  # guarded-by: slock (for the seed-001 lab)
        self.backlog_drops = 0  # guarded-by: slock
        self.deferred = 0  # guarded-by: slock (bits: the work release_cb runs)

    # -- user context ----------
    def lock_sock(self) -> None:
        me = threading.get_ident()
        with self.slock:
            if self.owner == me:
                raise RuntimeError("lock_sock: this thread already owns the socket")
            if self.owned:
                self._wait_owned_locked()
            self.owned = True
            self.owner = me

    def _wait_owned_locked(self) -> None:
        """Sleep until the owner releases the socket (``slock`` held)."""
        wait = self._wait
        if wait is None:
            # (ignore: typeshed wants a threading lock; ours has the same acquire/release)
            wait = self._wait = threading.Condition(self.slock)  # type: ignore[arg-type]
        self.waiters += 1
        try:
            while self.owned:
                wait.wait()
        finally:
            self.waiters -= 1

    def release_sock(self) -> None:
        slock = self.slock
        slock.acquire()
        try:
            while self.backlog:
                batch = self.backlog
                self.backlog = deque()
                slock.release()
                try:
                    for item, _size in batch:
                        self._process(item)
                finally:
                    slock.acquire()
            self.backlog_len = 0
            if self.deferred and self._release_cb is not None:
                work = self.deferred
                self.deferred = 0
                self._release_cb(work)
            self.owned = False
            self.owner = None
            if self.waiters:
                self._wait.notify()  # type: ignore[union-attr]  # made by the first waiter
        finally:
            slock.release()

    def detach(self) -> None:
        """The owning socket is destroyed: forget its callbacks (breaking the reference
        cycle socket -> lock -> bound method -> socket).  A late segment or deferred
        work item is dropped, as nothing can reach a destroyed socket any more."""
        with self.slock:
            self._process = _drop
            self._process_bh = _drop_bh
            self._release_cb = None
            self._on_backlog_drop = None
            self._backlog_limit = _no_backlog

    def owned_by_me(self) -> bool:
        # atomic: one attribute load; pairs with the store in lock_sock/release_sock.
        return self.owner == threading.get_ident()

    def __enter__(self) -> SocketLock:
        self.lock_sock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_sock()

    # -- worker (softirq) context ----------
    def bh_deliver(self, item: Any, size: int) -> bool:
        """tcp_v4_rcv's ``bh_lock_sock`` / ``sock_owned_by_user`` / ``tcp_add_backlog``:
        process ``item`` now (``process_bh``) when nobody owns the socket, or queue it
        for the owner; a full backlog drops it (``on_backlog_drop``, TCPBacklogDrop).
        Returns what ``process_bh`` returned (True: the caller wakes the socket's waiters
        now that slock is released), False when the item was queued or dropped."""
        with self.slock:
            if not self.owned:
                return self._process_bh(item)
            queued = self.add_backlog_locked(item, size)
        if not queued and self._on_backlog_drop is not None:
            self._on_backlog_drop(item)
        return False

    def add_backlog_locked(self, item: Any, size: int) -> bool:
        """sk_add_backlog (``slock`` held, the socket owned): queue ``item`` for the
        owner; False when the backlog is full (the caller drops and counts it)."""
        if self.backlog_len + size > self._backlog_limit():
            self.backlog_drops += 1
            return False
        self.backlog.append((item, size))
        self.backlog_len += size
        if self.backlog_len > self.backlog_max_seen:
            self.backlog_max_seen = self.backlog_len
        return True

    def bh_defer(self, work: int, run_now: Callable[[], None]) -> None:
        """Run ``run_now`` under ``slock`` if nobody owns the socket, else set the bit
        ``work`` for ``release_cb`` (Linux's TCP_*_DEFERRED flags)."""
        with self.slock:
            if self.owned:
                self.deferred |= work
            else:
                run_now()


def _drop(item: Any) -> None:
    """The process callback of a detached lock."""


def _drop_bh(item: Any) -> bool:
    """The softirq process callback of a detached lock."""
    return False


def _processed(process: Callable[[Any], None]) -> Callable[[Any], bool]:
    """A ``process_bh`` for a protocol whose processing wakes its own waiters."""
    def process_bh(item: Any) -> bool:
        process(item)
        return False

    return process_bh


def _no_backlog() -> int:
    return 0
