"""The route cache's per-thread lookup cache: a hit is the shared entry, pinned like any
other; an invalidation empties every thread's cache; senders racing invalidations never
use a freed entry and nothing leaks."""

from __future__ import annotations

import threading

from rcunet.host.routecache import UseAfterFree
from rcunet.lab.seed002 import make_host

DST = bytes([10, 9, 1, 1])


def test_a_threads_hit_is_the_shared_entry_and_invalidate_drops_it():
    host = make_host("modern")
    try:
        cache = host.dst_cache
        first = cache.lookup(DST)
        assert first is not None
        before = first.ref.read()
        again = cache.lookup(DST)  # this thread's own cache
        assert again is first and first.ref.read() == before + 1  # pinned like any hit
        again.release()
        first.release()
        cache.invalidate()
        assert first.freed  # the cache's reference was the last one
        fresh = cache.lookup(DST)
        assert fresh is not None and fresh is not first and not fresh.freed
        fresh.release()
    finally:
        host.close()


def test_cached_shows_the_shared_entry_without_pinning_it():
    host = make_host("modern")
    try:
        cache = host.dst_cache
        assert cache.cached(DST) is None  # nothing looked up yet
        entry = cache.lookup(DST)
        assert entry is not None
        pins = entry.ref.read()
        assert cache.cached(DST) is entry and entry.ref.read() == pins
        assert cache.cached(DST, oif=99) is None
        entry.release()
        cache.invalidate()
        assert cache.cached(DST) is None
    finally:
        host.close()


def test_senders_racing_invalidations_never_use_a_freed_entry():
    host = make_host("modern")
    errors: list[BaseException] = []
    stop = threading.Event()

    def sender() -> None:
        try:
            for _ in range(3000):
                entry = host.dst_cache.lookup(DST)
                assert entry is not None
                entry.use()  # UseAfterFree if a freed entry came back
                entry.release()
        except (AssertionError, UseAfterFree) as exc:
            errors.append(exc)

    def invalidator() -> None:
        while not stop.is_set():
            host.dst_cache.invalidate()

    try:
        senders = [threading.Thread(target=sender) for _ in range(2)]
        churn = threading.Thread(target=invalidator)
        churn.start()
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join(30)
        stop.set()
        churn.join(5)
        assert errors == []
        host.dst_cache.invalidate()
        assert host.dst_cache.live_entries() == 0
    finally:
        host.close()
