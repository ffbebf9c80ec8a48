"""Reference counts for RCU-managed objects: ``RcuRef`` (rcuref_t) and ``IncNotZeroRef``.

``RcuRef`` reproduces lib/rcuref.c (reference §4) exactly: the word stores references - 1
in 32 bits, ``get`` is one *unconditional* add followed by a sign check, ``put`` one
unconditional subtract; only a result outside the valid zone takes a slow path, and the
final put marks the object DEAD with a single compare-and-swap.  Zones make an
unconditional add on a dead or saturated object harmless; a dead object is never revived.

``IncNotZeroRef`` is the legacy ``atomic_inc_not_zero`` / ``atomic_dec_return`` pair that
dst entries used before (seed 002): ``get`` is a compare-and-swap retry loop failing at 0.

The atomic primitive:
  Each refcount word is an ``AtomicInt`` (rcunet.sync.atomic): cereggii's 64-bit atomic
  integer, so ``get`` is one real fetch-and-add (``increment_and_get``, a ``lock xadd``)
  and the legacy loop's CAS one real ``lock cmpxchg`` (``compare_and_set``), with the GIL
  or without it.  rcuref's word is 32 bits: the 64-bit word holds it in its low 32 bits
  (adds and subtracts agree modulo 2**32, and every store is a 32-bit value), so each
  value read or returned is masked with ``MASK`` before the zone tests, and the
  dead-marking CAS compares the exact 64-bit value its own decrement returned, as
  rcuref_put's ``atomic_try_cmpxchg_release(&ref->refcnt, &cnt, RCUREF_DEAD)`` does.
  Where cereggii is not installed the same four operations are lock-emulated
  (``LockedInt``): the semantics and the retry counts stay exact.
  The slow paths' statistics (``slow_paths`` and the warnings' counts) are written under
  a small lock of their own, ``_stats``: they are rare.
"""

from __future__ import annotations

import threading
import warnings

from mypy_extensions import mypyc_attr

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.sync import hooks as _hooks
from rcunet.sync.atomic import AtomicInt
from rcunet.sync.hooks import yield_point
from rcunet.sync.rcu import Rcu
from rcunet.sync.rcu import rcu as default_rcu

MASK = 0xFFFF_FFFF
ONEREF = 0x0000_0000  # one reference
MAXREF = 0x7FFF_FFFF  # top of the valid zone (INT_MAX)
SATURATED = 0xA000_0000  # centre of the saturation zone 0x80000000-0xBFFFFFFF
RELEASED = 0xC000_0000  # start of the dead zone
DEAD = 0xE000_0000  # centre of the dead zone
NOREF = 0xFFFF_FFFF  # the value after the last reference was dropped (-1)

#: Yield point between put's decrement and its NOREF -> DEAD compare-and-swap (§8.2 #28).
PUT_AFTER_DEC = "rcuref.put.after_dec"
#: Yield point between inc_not_zero's read and its compare-and-swap.
INC_NOT_ZERO_BEFORE_CAS = "refcount.inc_not_zero.before_cas"

@mypyc_attr(native_class=False)  # mypyc compiles no subclass of this builtin
class RefcountWarning(RuntimeWarning):
    """The kernel's WARN_ONCE cases: imbalanced put, saturation, underflow."""


class RcuRef:
    """rcuref_t: a scalable reference count for RCU-managed objects.

    ``get()`` -> True unless the object is dead (False) — a saturated count succeeds and
    leaks.  ``put()`` -> True exactly once: for the put that drops the last reference and
    wins the NOREF -> DEAD CAS; the caller may then free the object (after a grace period,
    e.g. ``rcu.call_rcu``).  ``read()`` is references held (0 once released).

    Concurrency:
      ``_cnt`` is the refcount word, an ``AtomicInt``: adds are fetch-and-add, the
      dead-marking is one compare-and-swap, re-centring stores are atomic stores, reads
      atomic loads; never a retry.  ``put()`` runs inside a read-side section of
      its RCU domain (rcuref_put disables preemption): a grace period cannot complete
      between its decrement and the dead-marking CAS, so the object cannot be freed and
      reused under it (§4.4).  ``put_rcusafe()`` is for callers already in a section.
      ``slow_paths`` / ``imbalanced_puts`` / ``saturations`` are written under ``_stats``.
    """

    # Pinned by every thread that finds the object: ordinary attributes on free-threaded
    # builds (rcunet.core.freethreaded explains why).
    __slots__ = lockfree_read_slots("_cnt", "_stats", "_rcu", "slow_paths", "imbalanced_puts",
                                    "saturations")

    def __init__(self, initial: int = 1, *, rcu: Rcu | None = None) -> None:
        if not 1 <= initial <= MAXREF + 1:
            raise ValueError(f"initial reference count must be 1..{MAXREF + 1}, got {initial}")
        self._cnt = AtomicInt(initial - 1)  # rcuref_init(ref, n) stores n - 1
        self._stats = threading.Lock()
        self._rcu = default_rcu if rcu is None else rcu
        self.slow_paths = 0
        self.imbalanced_puts = 0
        self.saturations = 0

    def __repr__(self) -> str:
        return f"<RcuRef word=0x{self.raw:08x} refs={self.read()}>"

    @property
    def cas_retries(self) -> int:
        """Always 0: rcuref never retries (kept for the benchmark's common interface)."""
        return 0

    @property
    def raw(self) -> int:
        """The stored 32-bit word (for tests and debugging)."""
        return self._cnt.get() & MASK  # atomic load

    def read(self) -> int:
        """rcuref_read: references held, 0 when released or dead."""
        cnt = self._cnt.get() & MASK  # atomic load
        return 0 if cnt >= RELEASED else cnt + 1

    def is_dead(self) -> bool:
        return self._cnt.get() & MASK >= RELEASED  # atomic load

    def get(self) -> bool:
        """rcuref_get: one unconditional add; False only for a dead object."""
        # atomic_add_negative_relaxed(1): one fetch-and-add, never a retry
        if self._cnt.increment_and_get(1) & MASK <= MAXREF:  # non-negative as a 32-bit int
            return True
        return self._get_slowpath()

    def _get_slowpath(self) -> bool:
        cnt = self._cnt.get() & MASK  # lib/rcuref.c re-reads here (only put's was fixed)
        if cnt >= RELEASED:  # dead: undo by re-centring, fail
            self._store_slow(DEAD)
            return False
        if cnt > MAXREF:  # saturated: warn, re-centre, succeed (and leak)
            self._cnt.set(SATURATED)  # atomic_set
            with self._stats:
                self.slow_paths += 1
                self.saturations += 1
            warnings.warn(RefcountWarning("rcuref saturated - leaking memory"), stacklevel=3)
            return True
        with self._stats:
            self.slow_paths += 1
        return True

    def put(self) -> bool:
        """rcuref_put: True when this call dropped the last reference and marked it DEAD."""
        # The guard (rcuref_put's preempt_disable): a read section in the ref's domain.
        section = self._rcu.section()
        section.enter()
        try:
            return self.put_rcusafe()
        finally:
            section.exit()

    def put_rcusafe(self) -> bool:
        """rcuref_put_rcusafe: the caller is in a read section (or otherwise blocks grace
        periods)."""
        word = self._cnt.increment_and_get(-1)  # atomic_add_negative_release(-1)
        if word & MASK <= MAXREF:
            return False
        return self._put_slowpath(word)

    def _put_slowpath(self, word: int) -> bool:
        """``word``: what this put's own decrement returned (the 64-bit value, whose low
        32 bits are rcuref's word)."""
        # Reasons about the value its own decrement produced, never a re-read (2025 fix).
        yield_point(PUT_AFTER_DEC)
        cnt = word & MASK
        if cnt == NOREF:  # we dropped the last reference: try cmpxchg(NOREF -> DEAD)
            with self._stats:
                self.slow_paths += 1
            # atomic_try_cmpxchg_release against the value the decrement returned
            if self._cnt.compare_and_set(word, DEAD):
                return True
            # A concurrent get revived it, or a racing get+put already marked it dead:
            # both valid, no retry, and this caller must not free the object.
            return False
        if cnt >= RELEASED:
            self._cnt.set(DEAD)  # atomic_set
            with self._stats:
                self.slow_paths += 1
                self.imbalanced_puts += 1
            warnings.warn(RefcountWarning("rcuref - imbalanced put()"), stacklevel=3)
            return False
        # put on a saturated count: restore the mean saturation value, never free
        self._store_slow(SATURATED)
        return False

    def _store_slow(self, value: int) -> None:
        self._cnt.set(value)  # atomic_set
        with self._stats:
            self.slow_paths += 1

    def init(self, initial: int = 1) -> None:
        """rcuref_init for a recycled object (only once no other thread can see it)."""
        if not 1 <= initial <= MAXREF + 1:
            raise ValueError(f"initial reference count must be 1..{MAXREF + 1}, got {initial}")
        self._cnt.set(initial - 1)


class IncNotZeroRef:
    """The legacy count: ``refcount_inc_not_zero`` as a compare-and-swap retry loop.

    ``get()`` reads the count, fails at 0, else CASes count -> count+1 and retries from the
    read if another thread changed the count in between.  ``put()`` is
    ``atomic_dec_return``: True when it reached 0 (a put below 0 warns "underflow").

    Concurrency:
      ``_value`` is an ``AtomicInt``: each attempt is an atomic load and one
      compare-and-swap, each put a fetch-and-sub.  ``cas_retries`` (failed CAS attempts),
      ``slow_paths`` (gets that needed more than one attempt) and ``underflows`` are
      written under ``_stats``, taken only on those paths.
    """

    __slots__ = lockfree_read_slots("_value", "_stats", "cas_retries", "slow_paths",
                                    "underflows")  # shared like RcuRef

    def __init__(self, initial: int = 1) -> None:
        if initial < 1:
            raise ValueError(f"initial reference count must be >= 1, got {initial}")
        self._value = AtomicInt(initial)
        self._stats = threading.Lock()
        self.cas_retries = 0
        self.slow_paths = 0
        self.underflows = 0

    def __repr__(self) -> str:
        return f"<IncNotZeroRef refs={self._value.get()}>"

    def read(self) -> int:
        return max(self._value.get(), 0)  # atomic load

    def is_dead(self) -> bool:
        return self._value.get() <= 0  # atomic load

    def get(self) -> bool:
        value = self._value
        retried = False
        while True:
            old = value.get()  # atomic load (the cmpxchg loop's initial read)
            if old <= 0:
                return False
            if _hooks._hooks is not None:  # the yield point, minus a call when unhooked
                yield_point(INC_NOT_ZERO_BEFORE_CAS)
            if value.compare_and_set(old, old + 1):  # cmpxchg(&value, old, old + 1)
                if retried:
                    with self._stats:
                        self.slow_paths += 1
                return True
            with self._stats:
                self.cas_retries += 1
            retried = True

    def put(self) -> bool:
        value = self._value.increment_and_get(-1)  # atomic_dec_return
        if value < 0:
            with self._stats:
                self.underflows += 1
            warnings.warn(RefcountWarning("refcount underflow"), stacklevel=2)
            return False
        return value == 0

    def put_rcusafe(self) -> bool:
        return self.put()
