"""Multi-thread stress runs (4 threads, bounded to a fraction of a second each); the
invariants are checked at the end, never timings.

Covered: refcounts hammered with get/put end back at their base with no warnings (rcuref
and inc-not-zero); repeated last-put vs get races end with exactly one release and no
revival (§8.2 #28 without forcing); readers in RCU sections never see an object whose
deferred free has run (grace periods are real); the deferred-free list loses no buffer
while consumers free and owners drain concurrently; lock statistics stay consistent
(acquisitions == increments done under the lock) under contention.

Every test runs once per scheduling-jitter seed (``rcunet.sync.jitter``: random yields,
spins and naps at every yield point, plus ``stress.op`` between the workers' operations);
``RCUNET_JITTER_SEEDS`` sets how many seeds, ``RCUNET_STRESS_SECONDS`` the seconds per run.
"""

from __future__ import annotations

import threading
import time
import warnings

import pytest

from rcunet.sync import lockstat
from rcunet.sync.deferred import BufferPool, DeferredFreeList
from rcunet.sync.hooks import yield_point
from rcunet.sync.jitter import Jitter, stress_seconds, stress_seeds
from rcunet.sync.lock import LockClass
from rcunet.sync.rcu import Rcu
from rcunet.sync.refcount import DEAD, IncNotZeroRef, RcuRef

pytestmark = pytest.mark.stress

THREADS = 4
RUN_S = stress_seconds(0.1)
JOIN_S = 10.0


@pytest.fixture(autouse=True, params=stress_seeds(), ids=lambda seed: f"jitter{seed}")
def jitter(request):
    with Jitter(request.param) as installed:
        yield installed
    assert installed.arrivals() > 0, "no yield point reached: the jitter had no effect"


def run_threads(target, n=THREADS, args=()):
    errors = []

    def wrapped(i):
        try:
            target(i, *args)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,), name=f"stress-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    assert not any(t.is_alive() for t in threads), "stress thread hung"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("make", [RcuRef, IncNotZeroRef])
def test_get_put_hammering_returns_to_base(make):
    ref = make()
    deadline = time.monotonic() + RUN_S
    gets = [0] * THREADS

    def worker(i):
        while gets[i] == 0 or time.monotonic() < deadline:  # a late start still works
            for _ in range(100):
                assert ref.get()
                gets[i] += 1
                yield_point("stress.op")
                assert not ref.put()  # the base reference is never dropped here

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_threads(worker)
    assert sum(gets) > 0
    assert ref.read() == 1 and not ref.is_dead()
    assert ref.put() is True


def _race_last_put_against_get() -> tuple[RcuRef, dict[str, bool]]:
    ref = RcuRef()
    start = threading.Barrier(2)
    outcome: dict[str, bool] = {}

    def last_put():
        start.wait()
        yield_point("stress.op")
        outcome["put"] = ref.put()

    def racer():
        start.wait()
        yield_point("stress.op")
        got = ref.get()
        outcome["got"] = got
        outcome["racer_put"] = ref.put() if got else False

    a = threading.Thread(target=last_put)
    b = threading.Thread(target=racer)
    a.start()
    b.start()
    a.join(JOIN_S)
    b.join(JOIN_S)
    return ref, outcome


def test_last_put_racing_gets_frees_exactly_once_and_never_revives():
    trials = 0
    deadline = time.monotonic() + RUN_S
    while trials == 0 or time.monotonic() < deadline:
        ref, outcome = _race_last_put_against_get()
        releases = [outcome["put"], outcome["racer_put"]].count(True)
        assert releases == 1, outcome
        assert ref.raw == DEAD and not ref.get()
        assert ref.imbalanced_puts == 0
        trials += 1
    assert trials > 0


def test_rcu_readers_never_see_a_freed_object():
    rcu = Rcu("stress")

    class Obj:
        __slots__ = ("freed",)

        def __init__(self):
            self.freed = False

    published = [Obj()]
    violations = []
    stop = threading.Event()

    def reader(i):
        while not stop.is_set():
            with rcu.read():
                obj = published[0]  # atomic: list slot load
                for _ in range(20):
                    if obj.freed:
                        violations.append(i)

    def free(obj):
        obj.freed = True

    def writer():
        deadline = time.monotonic() + RUN_S
        while time.monotonic() < deadline:
            old = published[0]
            published[0] = Obj()  # atomic: list slot store (unpublish old)
            rcu.call_rcu(lambda old=old: free(old))
            rcu.poll()
            if rcu.pending() > 50:
                assert rcu.synchronize(timeout=JOIN_S)
        stop.set()

    w = threading.Thread(target=writer)
    w.start()
    run_threads(reader, n=3)
    w.join(JOIN_S)
    assert rcu.barrier(timeout=JOIN_S)
    assert violations == []
    assert rcu.grace_periods > 0


def test_deferred_free_loses_no_buffer():
    defer = DeferredFreeList(defer_max=16)
    pools = {}
    owners_done = []  # atomic: list.append; both owners must finish before consumers stop
    registered = threading.Barrier(2 + 2)
    handoff = []  # atomic: list.append / list.pop by consumers
    allocated = [0, 0]

    def owner(i):
        pool = pools[i] = BufferPool(i, buffer_size=16, capacity=10_000)
        pool.bind_owner_thread()
        defer.register(i, pool.recycle)
        registered.wait()
        deadline = time.monotonic() + RUN_S
        while time.monotonic() < deadline:
            for _ in range(20):
                handoff.append(pool.alloc())
                allocated[i] += 1
                yield_point("stress.op")
            defer.drain()
        owners_done.append(i)

    def consumer(_i):
        registered.wait()
        while len(owners_done) < 2 or handoff:
            try:
                buf = handoff.pop()
            except IndexError:
                time.sleep(0)
                continue
            yield_point("stress.op")
            defer.free(buf, buf.owner)

    def role(i):
        (owner if i < 2 else consumer)(i)

    run_threads(role)
    for i in (0, 1):
        defer.unregister(i)  # recycles whatever is still queued
    for i in (0, 1):
        pool = pools[i]
        assert pool.created.value() == pool.free_count() + pool.dropped.value()
        assert pool.allocated.value() == allocated[i]
    assert defer.deferred.value() == defer.drained.value()


def test_lock_stats_stay_consistent_under_contention():
    cls = LockClass("stress_counter_lock")
    locks = [cls.new(), cls.new()]
    counter = [0, 0]
    per_thread = 2000

    def worker(i):
        for k in range(per_thread):
            j = k & 1
            with locks[j]:
                counter[j] += 1

    with lockstat.collecting():
        lockstat.reset([cls])
        run_threads(worker)
        s = lockstat.class_stats(cls)
    assert sum(counter) == THREADS * per_thread
    assert s.acquisitions == THREADS * per_thread
    assert s.contentions <= s.acquisitions
    assert sum(p.count for p in s.contention_points) == s.contentions
    assert s.wait_total >= s.wait_max >= s.wait_min >= 0
