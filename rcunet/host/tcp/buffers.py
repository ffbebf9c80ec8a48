"""Pooled receive buffers ("skbs") of the Host's TCP: one pool per receive worker and size
class, and frees handed back to the worker that allocated the buffer (seed 001's
``skb_attempt_defer_free``; ``rcunet.sync.deferred``)."""

from __future__ import annotations

import itertools
import threading

from rcunet.sync.deferred import Buffer, BufferPool, DeferredFreeList

#: One size class for Ethernet-sized segments, one for loopback's 64 KB ones.
SMALL_SKB, LARGE_SKB = 2048, 65536
#: (buffer size, buffers per pool) of each class.
SKB_CLASSES = ((SMALL_SKB, 512), (LARGE_SKB, 64))


class RxBuffers:
    """The receive buffers of one Host's TCP.

    Concurrency: each worker's pools live in a ``threading.local`` (only that thread
    allocates from them); ``deferred`` (internally synchronised) carries frees from any
    thread back to the allocating worker; ``_pool_ids`` is an itertools.count (one
    ``next`` is atomic)."""

    def __init__(self, host_id: int, deferred: DeferredFreeList) -> None:
        self.host_id = host_id
        self.deferred = deferred
        self._local = threading.local()
        self._pool_ids = itertools.count()

    def pools(self) -> tuple[BufferPool, BufferPool]:
        """This worker's (small, large) pools, made on its first segment with data."""
        pools: tuple[BufferPool, BufferPool] | None = getattr(self._local, "pools", None)
        if pools is None:
            serial = next(self._pool_ids)
            made = []
            for size, capacity in SKB_CLASSES:
                pool = BufferPool((self.host_id, serial, size), size, capacity)
                pool.bind_owner_thread()
                # (ignore: the list is generic, recycle(object); this pool's are Buffers)
                self.deferred.register(pool.owner, pool.recycle)  # type: ignore[arg-type]
                made.append(pool)
            pools = (made[0], made[1])
            self._local.pools = pools
        return pools

    def alloc(self, payload: memoryview) -> tuple[Buffer | None, memoryview]:
        """A pooled buffer holding ``payload``.  First the pool takes back what user
        threads handed to this worker (skb_defer_free_flush, which Linux runs once per
        softirq round; here when the worker needs a buffer of that pool, so segments
        without data pay nothing)."""
        n = len(payload)
        small, large = self.pools()
        pool = small if n <= SMALL_SKB else large
        if n > pool.buffer_size:
            return None, payload
        self.deferred.drain(pool.owner)
        buf = pool.alloc()
        view = buf.view[:n]
        view[:] = payload  # one copy (see Buffer.view)
        buf.length = n
        return buf, view

    def free_maybe(self, buf: Buffer | None) -> None:
        if buf is not None:
            self.deferred.free(buf, buf.owner)

    def free(self, buf: Buffer) -> None:
        """Hand ``buf`` back to the worker that allocated it (seed 001's deferred free)."""
        self.deferred.free(buf, buf.owner)

    def free_deferred(self, bufs: list[Buffer]) -> None:
        free = self.deferred.free
        for buf in bufs:
            free(buf, buf.owner)

    def free_now(self, bufs: list[Buffer]) -> None:
        """Seed 001's "before": into the pool at once, from this thread."""
        free_now = self.deferred.free_now
        for buf in bufs:
            free_now(buf, buf.owner)
