"""Races fixed for free-threaded CPython, each forced with a Schedule (no sleeps, no luck):
the test fails on the code before its fix."""

from __future__ import annotations

import threading

from rcunet.sync.deferred import FREE_AFTER_LOOKUP, DeferredFreeList
from rcunet.sync.hooks import Schedule


def test_free_racing_unregister_loses_no_object():
    defer = DeferredFreeList(defer_max=16)
    recycled: list[object] = []
    defer.register("worker", recycled.append)  # this thread is the owner
    obj = object()
    with Schedule(timeout=5.0) as sched:
        sched.pause_at(FREE_AFTER_LOOKUP, thread="freer")
        freer = threading.Thread(target=defer.free, args=(obj, "worker"), name="freer")
        freer.start()
        sched.wait_paused(FREE_AFTER_LOOKUP)  # it found the owner's queue...
        assert defer.unregister("worker") == 0  # ...which the owner drains and leaves
        sched.release(FREE_AFTER_LOOKUP)
        freer.join(5)
    assert not freer.is_alive()
    assert recycled == [obj]  # the freer saw the owner retired and recycled it itself
    assert defer.deferred.value() == defer.drained.value() == 1
    assert defer.queued("worker") == 0
