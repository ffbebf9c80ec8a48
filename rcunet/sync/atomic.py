"""Atomic integers for the seeds' reference counts: a real ``lock xadd`` / ``lock cmpxchg``.

``AtomicInt`` is cereggii's ``AtomicInt64``, a C object made for free-threaded Python whose
operations are C11 atomics on one 64-bit word: ``increment_and_get`` is one fetch-and-add,
``compare_and_set`` one compare-and-swap, ``get`` / ``set`` an atomic load / store.  It was
chosen over ft-utils' ``AtomicInt64`` (the same operations) because it also ships wheels for
GIL builds, where it beats the lock emulation below, so one code path serves both
(``rcunet lab seed002 --scale 1,2`` shows the rates, modern against legacy).

``LockedInt`` is the same four methods with a private lock held for one load+store: the
stand-in where cereggii cannot be installed (an interpreter it has no wheel for and no C
compiler to build one).  ``ATOMICS`` names the one in use.
"""

from __future__ import annotations

import threading


class LockedInt:
    """cereggii.AtomicInt64's four operations, each one load+store under a private lock."""

    __slots__ = ("_value", "_lock")

    def __init__(self, initial_value: int = 0) -> None:
        self._value = initial_value
        self._lock = threading.Lock()

    def get(self) -> int:
        return self._value  # atomic: one attribute load, pairs with the stores below

    def set(self, desired: int) -> None:
        with self._lock:
            self._value = desired

    def increment_and_get(self, amount: int = 1) -> int:
        with self._lock:
            value = self._value + amount
            self._value = value
        return value

    def compare_and_set(self, expected: int, desired: int) -> bool:
        with self._lock:
            if self._value != expected:
                return False
            self._value = desired
        return True


def _choose() -> tuple[type[LockedInt], str]:
    try:
        from cereggii import AtomicInt64  # type: ignore[import-untyped]
    except ImportError:  # no wheel for this interpreter: the lock emulation
        return LockedInt, "lock-emulated (cereggii not installed)"
    # Typed as LockedInt, whose four methods it has (tests/sync checks both alike).
    return AtomicInt64, "cereggii.AtomicInt64"


AtomicInt, ATOMICS = _choose()
