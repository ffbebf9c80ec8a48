"""Deferred freeing to the allocating worker (reference §5.3).

§8.2 behaviours covered:
  #37 a buffer consumed on worker B but allocated by worker A is not freed on B: it is
      queued on A's list and recycled into A's pool when A drains; one consumed on its
      allocating worker is freed immediately; a kick fires when A's queue reaches the
      threshold (default defer_max/2); with defer_max = 0 nothing is deferred.
Also: the recycling happens on the owner's thread with no lock held even when the
consumer called free() inside its socket-lock section (the legacy free_now recycles right
there, under the lock, from the foreign thread); a buffer cannot go back to a foreign pool.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from rcunet.sync import lockdep
from rcunet.sync.deferred import BufferPool, DeferredFreeList, PerThreadCounter
from rcunet.sync.lock import LockClass

JOIN_S = 5.0
SK_LOCK = LockClass("t_sk_lock")


@pytest.fixture
def owner():
    """Factory of Owner workers, shut down after the test."""
    made = []

    def make(defer):
        made.append(Owner(defer))
        return made[-1]

    yield make
    for o in made:
        o.close()


class Owner:
    """Worker A: one long-lived thread with a pool registered with the deferred-free list."""

    def __init__(self, defer: DeferredFreeList, name: str = "A") -> None:
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.pool = BufferPool(name, buffer_size=64, capacity=16)
        self.recycled_on = []  # (thread name, held lock classes) per recycled buffer
        self.kicked = []

        def recycle(buf):
            self.recycled_on.append((threading.current_thread().name, lockdep.held_classes()))
            self.pool.recycle(buf)

        def register():
            self.pool.bind_owner_thread()
            defer.register(name, recycle, kick=self.kicked.append)

        self.run(register)
        self.name = name

    def run(self, fn):
        return self.worker.submit(fn).result(timeout=JOIN_S)

    def close(self):
        self.worker.shutdown(wait=True)


def test_37_foreign_free_is_queued_to_the_owner_and_drained_there(owner):
    defer = DeferredFreeList(defer_max=64)
    a = owner(defer)
    buf = a.pool.alloc()
    sk_lock = SK_LOCK.new()  # kept: a lock nobody refers to is not tracked while held
    with sk_lock:  # the consumer's socket lock section
        assert defer.free(buf, "A") is True
    assert defer.queued("A") == 1
    assert a.pool.free_count() == 0 and a.recycled_on == []  # not freed on B
    assert a.run(defer.drain) == 1
    assert a.recycled_on == [("A_0", [])]  # on A, outside every lock
    assert a.pool.free_count() == 1
    assert a.pool.recycled_foreign.value() == 0
    assert defer.deferred.value() == 1 and defer.drained.value() == 1


def test_37_free_on_the_allocating_worker_is_immediate(owner):
    defer = DeferredFreeList()
    a = owner(defer)

    def consume_on_a():
        return defer.free(a.pool.alloc(), "A")

    assert a.run(consume_on_a) is False
    assert a.pool.free_count() == 1 and defer.queued("A") == 0
    assert defer.freed_local.value() == 1


def test_37_kick_fires_at_half_of_defer_max(owner):
    defer = DeferredFreeList(defer_max=8)
    a = owner(defer)
    bufs = [a.pool.alloc() for _ in range(6)]
    for i, buf in enumerate(bufs[:4]):
        defer.free(buf, "A")
        assert a.kicked == ([] if i < 3 else ["A"])
    defer.free(bufs[4], "A")
    assert a.kicked == ["A"] and defer.kicks.value() == 1  # one kick until A drains
    a.run(defer.drain)
    for buf in [bufs[5], *[a.pool.alloc() for _ in range(3)]]:
        defer.free(buf, "A")
    assert a.kicked == ["A", "A"]


def test_37_defer_max_zero_disables_deferral(owner):
    defer = DeferredFreeList(defer_max=0)
    a = owner(defer)
    assert defer.free(a.pool.alloc(), "A") is False
    assert a.pool.free_count() == 1 and defer.deferred.value() == 0


def test_legacy_free_now_recycles_under_the_callers_lock_from_the_foreign_thread(owner):
    defer = DeferredFreeList()
    a = owner(defer)
    buf = a.pool.alloc()
    sk_lock = SK_LOCK.new()
    with sk_lock:
        defer.free_now(buf, "A")
    assert a.recycled_on == [("MainThread", ["t_sk_lock"])]
    assert a.pool.recycled_foreign.value() == 1


def test_unknown_owner_is_freed_locally():
    defer = DeferredFreeList()
    assert defer.free(object(), "nobody") is False
    assert defer.freed_local.value() == 1


def test_pool_reuses_buffers_and_rejects_foreign_ones():
    pool = BufferPool("A", buffer_size=32, capacity=1)
    first = pool.alloc()
    gen = first.generation
    pool.recycle(first)
    assert first.generation == gen + 1
    assert pool.alloc() is first
    other = BufferPool("B").alloc()
    with pytest.raises(ValueError):
        pool.recycle(other)
    pool.recycle(first)
    pool.recycle(BufferPool("A").alloc())  # over capacity: dropped, counted
    assert pool.dropped.value() == 1 and pool.free_count() == 1


def test_register_twice_and_unregister(owner):
    defer = DeferredFreeList()
    a = owner(defer)
    with pytest.raises(ValueError):
        defer.register("A", lambda obj: None)
    defer.free(a.pool.alloc(), "A")
    assert defer.unregister("A") == 1  # what was queued is recycled, not lost
    assert a.pool.free_count() == 1
    assert defer.unregister("A") == 0


def test_per_thread_counter_sums_all_threads():
    c = PerThreadCounter()
    threads = [threading.Thread(target=lambda: [c.add() for _ in range(1000)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    c.add(5)
    assert c.value() == 4005
