"""Pooled receive buffers ("skbs") of the Host's TCP: one pool per receive worker and size
class, and frees handed back to the worker that allocated the buffer (seed 001's
``skb_attempt_defer_free``; ``rcunet.sync.deferred``)."""

from __future__ import annotations

from typing import Any

from rcunet.sync.deferred import Buffer, BufferPool

#: One size class for Ethernet-sized segments, one for loopback's 64 KB ones.
SMALL_SKB, LARGE_SKB = 2048, 65536
#: (buffer size, buffers per pool) of each class.
SKB_CLASSES = ((SMALL_SKB, 512), (LARGE_SKB, 64))


class BuffersMixin:
    """``TcpLayer``'s receive buffers: ``_local`` (threading.local holding each worker's
    pools), ``_pool_ids`` and ``deferred`` (the DeferredFreeList) are the layer's."""

    host: Any
    deferred: Any
    _local: Any
    _pool_ids: Any

    def _pools(self) -> tuple[BufferPool, BufferPool]:
        pools: tuple[BufferPool, BufferPool] | None = getattr(self._local, "pools", None)
        if pools is None:
            serial = next(self._pool_ids)
            made = []
            for size, capacity in SKB_CLASSES:
                pool = BufferPool((self.host.id, serial, size), size, capacity)
                pool.bind_owner_thread()
                self.deferred.register(pool.owner, pool.recycle)  # type: ignore[arg-type]
                made.append(pool)
            pools = (made[0], made[1])
            self._local.pools = pools
        return pools

    def _alloc_skb(self, payload: memoryview) -> tuple[Buffer | None, memoryview]:
        """A pooled buffer holding ``payload``.  First the pool takes back what user
        threads handed to this worker (skb_defer_free_flush, which Linux runs once per
        softirq round; here when the worker needs a buffer of that pool, so segments
        without data pay nothing)."""
        n = len(payload)
        small, large = self._pools()
        pool = small if n <= SMALL_SKB else large
        if n > pool.buffer_size:
            return None, payload
        self.deferred.drain(pool.owner)
        buf = pool.alloc()
        view = buf.view[:n]
        view[:] = payload  # one copy (see Buffer.view)
        buf.length = n
        return buf, view

    def free_buffer_maybe(self, buf: Buffer | None) -> None:
        if buf is not None:
            self.deferred.free(buf, buf.owner)

    def free_buffer(self, buf: Buffer) -> None:
        self.deferred.free(buf, buf.owner)

    def free_buffers_deferred(self, bufs: list[Buffer]) -> None:
        free = self.deferred.free
        for buf in bufs:
            free(buf, buf.owner)

    def free_buffers_now(self, bufs: list[Buffer]) -> None:
        free_now = self.deferred.free_now
        for buf in bufs:
            free_now(buf, buf.owner)
