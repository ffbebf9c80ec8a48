"""lockdep-lite.

Covered (§8.2 #12 machinery): an AB-BA reversal is reported once with both sites; a longer
cycle (A->B, B->C, then C->A) is found; a declared order is enforced before the reverse
order was ever observed, transitively; self-nesting of a class is reported unless the class
allows it; re-acquiring the very same lock raises EDEADLK instead of hanging; consistent
orders, trylocks and released locks produce no false positives; a cross-thread release
leaves no stale held entry.  Reports are cleared at the end of each test that provokes them
on purpose (the suite fails any test that leaves reports behind).
"""

from __future__ import annotations

import errno
import threading

import pytest

from rcunet.sync import lockdep
from rcunet.sync.lock import LockClass


def take(*locks):
    for lk in locks:
        lk.acquire()
    for lk in reversed(locks):
        lk.release()


def test_reversal_is_reported_once_with_both_sites():
    a, b = LockClass("ld_A").new(), LockClass("ld_B").new()
    take(a, b)
    assert lockdep.reports() == []
    take(b, a)
    take(b, a)
    reports = lockdep.reports()
    assert len(reports) == 1
    text = reports[0]
    assert "possible circular locking dependency detected" in text
    assert "(ld_A)" in text and "(ld_B)" in text
    assert "take:" in text  # call sites are named
    lockdep.clear()


def test_reversal_from_another_thread_is_reported():
    a, b = LockClass("ld_T1").new(), LockClass("ld_T2").new()
    take(a, b)
    t = threading.Thread(target=take, args=(b, a))
    t.start()
    t.join(5)
    assert len(lockdep.reports()) == 1
    lockdep.clear()


def test_three_class_cycle_is_found():
    a, b, c = (LockClass(n).new() for n in ("ld_C1", "ld_C2", "ld_C3"))
    take(a, b)
    take(b, c)
    assert lockdep.reports() == []
    take(c, a)
    (text,) = lockdep.reports()
    assert "circular" in text
    assert "ld_C2" in text  # the chain through the middle class is shown
    lockdep.clear()


def test_declared_order_is_enforced_before_any_reverse_was_seen():
    lockdep.declare_order("ld_outer", "ld_mid", "ld_inner")
    outer, mid, inner = (LockClass(n).new() for n in ("ld_outer", "ld_mid", "ld_inner"))
    take(outer, mid, inner)
    assert lockdep.reports() == []
    take(inner, outer)  # transitively against the declaration
    (text,) = lockdep.reports()
    assert "declared order: ld_outer -> ld_mid -> ld_inner" in text
    lockdep.clear()


def test_declare_order_rejects_nonsense():
    with pytest.raises(ValueError):
        lockdep.declare_order("only_one")
    with pytest.raises(ValueError):
        lockdep.declare_order("x", "y", "x")


def test_self_nesting_of_a_class_is_reported():
    cls = LockClass("ld_self")
    take(cls.new(), cls.new())
    (text,) = lockdep.reports()
    assert "possible recursive locking detected" in text
    lockdep.clear()


def test_self_nesting_allowed_when_declared():
    cls = LockClass("ld_nesting_ok", nests_with_self=True)
    take(cls.new(), cls.new())
    assert lockdep.reports() == []


def test_reacquiring_the_same_lock_raises_edeadlk_instead_of_hanging():
    lk = LockClass("ld_same").new()
    with lk:
        with pytest.raises(OSError) as info:
            lk.acquire()
        assert info.value.errno == errno.EDEADLK
        assert lk.acquire(blocking=False) is False  # a trylock is fine
    assert len(lockdep.reports()) == 1
    lockdep.clear()


def test_consistent_order_and_trylocks_give_no_false_positives():
    a, b, c = (LockClass(n).new() for n in ("ld_ok1", "ld_ok2", "ld_ok3"))
    for _ in range(3):
        take(a, b, c)
        take(a, c)
        take(b, c)
    # a trylock against the order cannot deadlock: no report, no dependency
    with c:
        assert a.acquire(blocking=False)
        a.release()
    # sequential use in any order (nothing held) is not nesting
    take(c)
    take(a)
    assert lockdep.reports() == []


def test_held_classes_and_cross_thread_release():
    a = LockClass("ld_x1").new()
    b = LockClass("ld_x2").new()
    a.acquire()
    assert lockdep.held_classes() == ["ld_x1"]
    t = threading.Thread(target=a.release)  # threading.Lock allows it; so do we
    t.start()
    t.join(5)
    assert lockdep.held_classes() == []
    with b:
        with a:
            pass
    assert lockdep.reports() == []
