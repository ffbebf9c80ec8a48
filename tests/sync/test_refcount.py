"""rcuref (RcuRef) and the legacy inc-not-zero refcount (IncNotZeroRef).

§8.2 behaviours covered (reference kernel-design.md):
  #26 init(1) stores 0, read() is 1; N gets give N+1; puts return False until the last,
      which returns True and leaves exactly DEAD.
  #27 a get on a dead object fails and leaves exactly DEAD; an imbalanced (double) put on a
      dead object returns False, leaves DEAD and is reported.
  #28 racing last put vs get, forced at the point between put's decrement and its
      NOREF -> DEAD CAS: the get wins, the CAS fails, put returns False, the object stays
      alive with one reference; exactly one True overall; a dead object is never revived.
  #29 saturation: the get crossing MAXREF succeeds and sets SATURATED; puts never return
      True from the saturation zone (leak instead of free).
  #30 the 2025 fix: the slow path uses the decrement's own value, so interleaved final puts
      report no false "imbalanced put".
  #31 a put that may drop the last reference runs inside an RCU read section: a grace
      period (and so a deferred free) cannot complete between decrement and CAS.
IncNotZeroRef: get fails at 0, put True at 0, underflow reported, and a CAS retry forced at
the read->CAS window is counted (rcuref has no such window and never retries).

Every test runs on both atomic words (rcunet.sync.atomic): cereggii's, and the lock
emulation used where cereggii is not installed.
"""

from __future__ import annotations

import threading

import pytest

from rcunet.sync import refcount
from rcunet.sync.atomic import LockedInt
from rcunet.sync.hooks import Schedule
from rcunet.sync.rcu import Rcu
from rcunet.sync.refcount import (
    DEAD,
    INC_NOT_ZERO_BEFORE_CAS,
    MAXREF,
    PUT_AFTER_DEC,
    SATURATED,
    IncNotZeroRef,
    RcuRef,
    RefcountWarning,
)

JOIN_S = 5.0


@pytest.fixture(autouse=True, params=["cereggii", "locked"])
def atomic_word(request, monkeypatch):
    if request.param == "cereggii":
        from cereggii import AtomicInt64

        monkeypatch.setattr(refcount, "AtomicInt", AtomicInt64)
    else:
        monkeypatch.setattr(refcount, "AtomicInt", LockedInt)
    return request.param


def run_named(name, fn, results):
    t = threading.Thread(target=lambda: results.append(fn()), name=name)
    t.start()
    return t


def test_zone_constants_are_the_kernels():
    assert (refcount.ONEREF, refcount.MAXREF, refcount.SATURATED) == (0, 0x7FFFFFFF, 0xA0000000)
    dead_zone = (refcount.RELEASED, refcount.DEAD, refcount.NOREF)
    assert dead_zone == (0xC0000000, 0xE0000000, 0xFFFFFFFF)


def test_26_counting_and_last_put():
    ref = RcuRef()
    assert ref.raw == 0 and ref.read() == 1
    for n in range(1, 6):
        assert ref.get()
        assert ref.read() == n + 1
    results = [ref.put() for _ in range(6)]
    assert results == [False] * 5 + [True]
    assert ref.raw == DEAD and ref.read() == 0 and ref.is_dead()
    assert ref.slow_paths == 1 and ref.cas_retries == 0


def test_27_get_on_dead_fails_and_stays_dead():
    ref = RcuRef()
    assert ref.put()
    for _ in range(3):
        assert ref.get() is False
        assert ref.raw == DEAD
    assert ref.read() == 0


def test_27_double_put_is_detected_and_stays_dead():
    ref = RcuRef()
    assert ref.put() is True
    with pytest.warns(RefcountWarning, match="imbalanced put"):
        assert ref.put() is False
    assert ref.raw == DEAD and ref.imbalanced_puts == 1


def test_28_get_racing_the_last_put_wins_and_put_does_not_free():
    ref = RcuRef()
    results = []
    with Schedule() as sched:
        sched.pause_at(PUT_AFTER_DEC, thread="putter")
        t = run_named("putter", ref.put, results)
        sched.wait_paused()
        assert ref.raw == refcount.NOREF  # decremented, not yet marked dead
        assert ref.get() is True  # revives: NOREF + 1 == ONEREF
        sched.release()
        t.join(JOIN_S)
    assert results == [False]  # its CAS failed: it must not free
    assert not ref.is_dead() and ref.read() == 1
    assert ref.put() is True  # exactly one True in total
    assert ref.raw == DEAD


def test_28_get_after_the_dead_marking_cannot_revive():
    ref = RcuRef()
    assert ref.put()
    for _ in range(1000):
        assert not ref.get()
    assert ref.raw == DEAD and ref.read() == 0


def test_29_saturation_leaks_instead_of_freeing():
    ref = RcuRef(initial=MAXREF + 1)
    assert ref.raw == MAXREF
    with pytest.warns(RefcountWarning, match="saturated"):
        assert ref.get() is True
    assert ref.raw == SATURATED and ref.saturations == 1
    with pytest.warns(RefcountWarning):
        assert ref.get() is True  # still in the zone: re-centred, still succeeds
    assert ref.raw == SATURATED
    assert not any(ref.put() for _ in range(1000))
    assert ref.raw == SATURATED and not ref.is_dead()


def test_30_interleaved_final_puts_report_no_false_imbalance():
    ref = RcuRef()
    results = []
    with Schedule() as sched:
        sched.pause_at(PUT_AFTER_DEC, thread="A")
        a = run_named("A", ref.put, results)
        sched.wait_paused()  # A took the count to NOREF
        assert ref.get() is True  # B revives ...
        assert ref.put() is True  # ... and drops the last reference: B frees
        assert ref.raw == DEAD
        sched.release()
        a.join(JOIN_S)
    assert results == [False]  # A's CAS saw DEAD: no free, and no warning
    assert ref.imbalanced_puts == 0
    assert ref.raw == DEAD


def test_31_no_grace_period_between_decrement_and_cas():
    domain = Rcu("t_rcuref_guard")
    ref = RcuRef(rcu=domain)
    freed = []
    results = []
    with Schedule() as sched:
        sched.pause_at(PUT_AFTER_DEC, thread="putter")
        t = run_named("putter", ref.put, results)
        sched.wait_paused()
        domain.call_rcu(lambda: freed.append("deferred free"))
        assert domain.synchronize(timeout=0.05) is False
        assert domain.barrier(timeout=0.05) is False
        assert freed == []
        sched.release()
        t.join(JOIN_S)
    assert results == [True]
    assert domain.barrier(timeout=JOIN_S) and freed == ["deferred free"]


def test_put_rcusafe_has_the_same_semantics():
    ref = RcuRef(initial=2)
    assert ref.put_rcusafe() is False
    assert ref.put_rcusafe() is True
    assert ref.raw == DEAD


def test_bad_initial_counts_are_rejected():
    for bad in (0, -1, MAXREF + 2):
        with pytest.raises(ValueError):
            RcuRef(initial=bad)
    with pytest.raises(ValueError):
        IncNotZeroRef(initial=0)


def test_init_recycles_a_dead_object():
    ref = RcuRef()
    assert ref.put()
    ref.init(1)
    assert ref.read() == 1 and ref.get()


def test_inc_not_zero_semantics():
    ref = IncNotZeroRef()
    assert ref.read() == 1
    assert ref.get() and ref.read() == 2
    assert ref.put() is False
    assert ref.put() is True
    assert ref.is_dead() and ref.get() is False
    with pytest.warns(RefcountWarning, match="underflow"):
        assert ref.put() is False
    assert ref.underflows == 1 and ref.get() is False


def test_inc_not_zero_retries_when_the_count_changes_under_it():
    ref = IncNotZeroRef()
    results = []
    with Schedule() as sched:
        sched.pause_at(INC_NOT_ZERO_BEFORE_CAS, thread="getter")
        t = run_named("getter", ref.get, results)
        sched.wait_paused()  # it has read 1 and is about to CAS 1 -> 2
        assert ref.get()  # the count changes under it (main passes the point unpaused)
        sched.release()
        t.join(JOIN_S)
    assert results == [True]
    assert ref.cas_retries == 1 and ref.slow_paths == 1
    assert ref.read() == 3


def test_inc_not_zero_fails_when_the_count_drops_to_zero_under_it():
    ref = IncNotZeroRef()
    results = []
    with Schedule() as sched:
        sched.pause_at(INC_NOT_ZERO_BEFORE_CAS, thread="getter")
        t = run_named("getter", ref.get, results)
        sched.wait_paused()
        assert ref.put() is True  # last reference gone
        sched.release()
        t.join(JOIN_S)
    assert results == [False]  # retried, saw zero, failed
    assert ref.cas_retries == 1


def test_rcuref_get_has_no_retry_window():
    ref = RcuRef()
    with Schedule() as sched:
        sched.pause_at(INC_NOT_ZERO_BEFORE_CAS)
        sched.pause_at(PUT_AFTER_DEC)
        for _ in range(100):
            assert ref.get()
            assert not ref.put()
        assert sched.passed(INC_NOT_ZERO_BEFORE_CAS) == 0
        assert sched.passed(PUT_AFTER_DEC) == 0  # fast path: no slow path, no hook
    assert ref.read() == 1 and ref.cas_retries == 0 and ref.slow_paths == 0
