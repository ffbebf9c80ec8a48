"""Sharded counters: no update is lost, whether bumped with inc() or through the thread's
own shard (the receive path fetches it once per packet)."""

from __future__ import annotations

import threading

from rcunet.host.counters import Counters


def test_shard_is_the_dict_inc_writes() -> None:
    counters = Counters()
    counters.inc("IpInReceives")
    shard = counters.shard()
    assert shard == {"IpInReceives": 1}
    shard["IpInDelivers"] = shard.get("IpInDelivers", 0) + 1
    counters.inc("IpInDelivers", 2)
    assert counters.snapshot() == {"IpInReceives": 1, "IpInDelivers": 3}


def test_concurrent_writers_lose_nothing() -> None:
    counters = Counters()
    threads, per_thread = 4, 5000
    start = threading.Barrier(threads)

    def writer() -> None:
        start.wait()
        for _ in range(per_thread):
            counters.inc("UdpInDatagrams")
            shard = counters.shard()
            shard["IpInReceives"] = shard.get("IpInReceives", 0) + 1
            assert counters.shard() is shard  # one shard per thread, kept

    workers = [threading.Thread(target=writer) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert counters.snapshot() == {"UdpInDatagrams": threads * per_thread,
                                   "IpInReceives": threads * per_thread}
    assert counters.get("IpInReceives") == threads * per_thread
