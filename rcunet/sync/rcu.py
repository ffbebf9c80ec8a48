"""Epoch-based RCU: read sections that take no lock, grace periods, deferred callbacks.

Readers of immutable snapshots (a tuple chain in a list slot) need nothing from this module:
the snapshot stays alive while referenced.  Use a read section when what the reader looks at
can be *reused* once unpublished — pooled buffers, recycled entries, ports, refcounted
objects whose memory goes back to a pool — and have the writer wait (``synchronize``) or
defer the reuse (``call_rcu``) until every reader that might still see it has left.

Mechanism (QSBR with a global epoch, the §8.1 "epoch manager"):

* ``self._epoch`` counts grace periods started.  A reader entering its outermost section
  stores the epoch it saw into its own slot; leaving stores 0 ("quiescent").
* ``synchronize()`` (serialised by ``_gp_lock``) stores ``epoch + 1`` and then waits until
  no slot holds a non-zero value below the new epoch: every reader that began before the
  store has left.  Readers that began after it are not waited for.
* A callback queued by ``call_rcu`` when the epoch read E runs once a grace period that
  *started after* the queueing has completed, i.e. when the completed epoch >= E + 2 (the
  grace period E + 1 may have started before the caller's unpublish store).

Atomic operations relied on (CPython with the GIL, and free-threaded 3.13t):
  * reader: ``slot.epoch = self._epoch`` is one attribute load and one attribute store of a
    reference; the writer's scan loads the same attribute.  The order "reader stores its
    epoch, then loads shared data" against "writer unpublishes, stores the new epoch, then
    scans the slots" must be sequentially consistent (the Dekker pattern); CPython's
    attribute stores on free-threaded builds are sequentially consistent atomics on the
    object's slot, and with the GIL every bytecode is.
  * the registry of slots is a tuple replaced by one store (copy-on-write under
    ``_registry_lock``), loaded by the writer with one attribute load.  It holds weak
    references to each thread's ``_Registration`` (kept in the thread's locals beside its
    section), so an ended thread's section leaves the registry; ``ReadSection`` itself
    stays a native class when compiled (mypyc classes take no weak references).
  * the callback queue is a ``collections.deque``: ``append`` / ``popleft`` are atomic.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mypy_extensions import mypyc_attr

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.sync.hooks import yield_point

#: Yield point in synchronize() after the new epoch is published, before the wait.
SYNC_AFTER_EPOCH = "rcu.synchronize.after_epoch"

_GP_POLL_FIRST_S = 2e-6
_GP_POLL_MAX_S = 1e-3


@mypyc_attr(native_class=False)  # mypyc compiles no subclass of this builtin
class RcuError(RuntimeError):
    """RCU API misuse (unbalanced unlock, synchronize inside a read section)."""


class ReadSection:
    """One thread's read side in one domain: the only code that enters and leaves a read
    section.  ``Rcu.section()`` returns the calling thread's; a hot path keeps it in a
    local for the section's length::

        section = rcu.section()
        section.enter()
        try:
            ...  # may look at what a writer unpublishes and reuses after a grace period
        finally:
            section.exit()

    It is also ``with``-able (``with rcu.read():`` is ``with rcu.section():``).  Sections
    nest; only the outermost stores the epoch.  owner: that thread (``epoch`` is also
    loaded by writers in ``synchronize``)."""

    # epoch is loaded by synchronize() in other threads (rcunet.core.freethreaded: why no slots)
    __slots__ = lockfree_read_slots("epoch", "nesting", "thread_name", "_rcu")

    def __init__(self, rcu: Rcu, thread_name: str) -> None:
        self.epoch = 0  # atomic: attribute store by owner, loaded by synchronize()
        self.nesting = 0  # owner only
        self.thread_name = thread_name
        self._rcu = rcu  # immutable

    def enter(self) -> None:
        """rcu_read_lock."""
        nesting = self.nesting
        if nesting == 0:
            # atomic: one load of the domain's epoch, one store to this slot; the store
            # comes before the caller loads shared data (pairs with _readers_left's load).
            self.epoch = self._rcu._epoch
        self.nesting = nesting + 1

    def exit(self) -> None:
        """rcu_read_unlock; RcuError without a matching ``enter``."""
        nesting = self.nesting
        if nesting == 0:
            raise RcuError(f"{self._rcu.name}: read_unlock without read_lock")
        self.nesting = nesting - 1
        if nesting == 1:
            self.epoch = 0  # atomic: attribute store; pairs with the load in _readers_left

    def __enter__(self) -> None:
        self.enter()

    def __exit__(self, *exc: object) -> None:
        self.exit()


# Not a native class when compiled: the registry keeps weak references to it.
@mypyc_attr(native_class=False)
class _Registration:
    """A thread's entry in a domain's registry, weakly referenced from it and kept alive
    by the thread's locals: when the thread ends, its section leaves the registry."""

    __slots__ = ("section", "__weakref__")

    def __init__(self, section: ReadSection) -> None:
        self.section = section  # immutable


class Rcu:
    """An RCU domain.

    Concurrency:
      readers   a ``ReadSection`` (``section()``; ``read_lock``/``read_unlock``/``read``
                use it) touches only the calling thread's slot (found through a
                ``threading.local``); the first use per thread registers the slot
                under ``_registry_lock`` (once).
      writers   ``synchronize`` holds ``_gp_lock`` while it advances the epoch and waits, so
                grace periods are serialised; ``call_rcu`` appends to a deque and takes no
                lock.  Callbacks run in the thread that calls ``poll``/``barrier``/
                ``synchronize``, outside every internal lock.
      waits     polling with sleeps growing from 2 µs to 1 ms; ``timeout`` bounds them.
    """

    def __init__(self, name: str = "rcu") -> None:
        self.name = name
        self._epoch = 1  # atomic: loaded by readers; stored only under _gp_lock
        self._completed = 0  # last epoch whose grace period ended; stored under _gp_lock
        self._gp_lock = threading.Lock()
        self._registry_lock = threading.Lock()
        self._slots: tuple[weakref.ref[_Registration], ...] = ()  # rcu: copy-on-write
        self._tls = threading.local()
        self._callbacks: deque[tuple[int, Callable[[], object]]] = deque()
        self._run_lock = threading.Lock()  # one thread runs callbacks at a time
        self.grace_periods = 0  # stored under _gp_lock (statistics)

    # -- read side ---------------------------------------------------------------------
    def section(self) -> ReadSection:
        """The calling thread's read section (registered on first use)."""
        section: ReadSection | None = getattr(self._tls, "section", None)
        return self._register_reader() if section is None else section

    def read(self) -> ReadSection:
        """``with rcu.read():`` — a read-side critical section."""
        return self.section()

    def read_lock(self) -> None:
        self.section().enter()

    def read_unlock(self) -> None:
        self.section().exit()

    def in_read_section(self) -> bool:
        section: ReadSection | None = getattr(self._tls, "section", None)
        return section is not None and section.nesting > 0

    def _register_reader(self) -> ReadSection:
        section = ReadSection(self, threading.current_thread().name)
        registration = _Registration(section)
        # the thread-local keeps both alive while the thread lives
        self._tls.registration = registration
        self._tls.section = section
        with self._registry_lock:
            alive = tuple(ref for ref in self._slots if ref() is not None)
            self._slots = alive + (weakref.ref(registration),)  # atomic: one attribute store
        return section

    # -- write side --------------------------------------------------------------------
    def synchronize(self, timeout: float | None = None) -> bool:
        """Wait until every reader that began before this call has left its section.

        Returns False if ``timeout`` (seconds) passed first; the grace period then did not
        complete and no callbacks ran.  Runs the callbacks that became ready.
        """
        if self.in_read_section():
            raise RcuError(f"{self.name}: synchronize() inside a read-side critical section")
        deadline_at = None if timeout is None else time.monotonic_ns() + int(timeout * 1e9)
        if not self._gp_lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            return False
        try:
            new_epoch = self._epoch + 1
            self._epoch = new_epoch  # atomic: store; readers entering from now are not waited for
            yield_point(SYNC_AFTER_EPOCH)
            if not self._wait_for_readers(new_epoch, deadline_at):
                return False
            self._completed = new_epoch
            self.grace_periods += 1
        finally:
            self._gp_lock.release()
        self.poll()
        return True

    def _wait_for_readers(self, new_epoch: int, deadline_at: int | None) -> bool:
        delay = _GP_POLL_FIRST_S
        while True:
            if not self._readers_left(new_epoch):
                return True
            if deadline_at is not None and time.monotonic_ns() >= deadline_at:
                return False
            time.sleep(delay)
            delay = min(delay * 2, _GP_POLL_MAX_S)

    def _readers_left(self, new_epoch: int) -> list[str]:
        """Names of threads still inside a section that began before ``new_epoch``."""
        left = []
        for ref in self._slots:  # atomic: one load of the registry tuple
            registration = ref()
            if registration is None:
                continue
            slot = registration.section
            epoch = slot.epoch  # atomic: attribute load; pairs with ReadSection.enter/exit
            if epoch and epoch < new_epoch:
                left.append(slot.thread_name)
        return left

    def readers_blocking(self) -> list[str]:
        """Threads currently in a read section that a grace period started now would wait
        for (diagnostics)."""
        return self._readers_left(self._epoch + 1)

    # -- deferred callbacks ------------------------------------------------------------
    def call_rcu(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` after a grace period (from ``poll``/``barrier``/``synchronize``)."""
        self._callbacks.append((self._epoch + 2, fn))  # atomic: deque.append

    def pending(self) -> int:
        return len(self._callbacks)

    def poll(self) -> int:
        """Run the callbacks whose grace period has completed; returns how many ran."""
        ready: list[Callable[[], object]] = []
        with self._run_lock:
            completed = self._completed
            while self._callbacks and self._callbacks[0][0] <= completed:
                ready.append(self._callbacks.popleft()[1])
        for fn in ready:
            fn()
        return len(ready)

    def barrier(self, timeout: float | None = None) -> bool:
        """Wait for grace periods until every callback queued before this call has run."""
        deadline_at = None if timeout is None else time.monotonic_ns() + int(timeout * 1e9)
        target = self._epoch + 2
        while self._completed < target:
            remaining = None
            if deadline_at is not None:
                remaining = (deadline_at - time.monotonic_ns()) / 1e9
                if remaining <= 0:
                    return False
            if not self.synchronize(timeout=remaining):
                return False
        self.poll()
        return True

    @contextmanager
    def deferring(self) -> Iterator[None]:
        """Run the block, then ``barrier()`` — handy in tests and teardown."""
        yield
        self.barrier()


#: The default domain.
rcu = Rcu()
