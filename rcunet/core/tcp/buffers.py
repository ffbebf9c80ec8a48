"""The connection's byte queues: bytes the application wrote and the peer has not
acknowledged (``SendQueue``), and in-order bytes the application has not read
(``RecvQueue``).

Both are queues of chunks, not one ``bytearray``: a bytearray used as a FIFO copies its
whole contents whenever an append finds no room after bytes were deleted from its front
(CPython moves the data to a new block), which with an autotuned receive buffer of
megabytes costs more than the transfer itself.  Consuming from the front drops whole
chunks.  A sent byte is copied once on the way in and once on the way out; a received
byte only on the way out: ``RecvQueue`` keeps the segment's payload as given (a view of
the receive buffer the host filled), and the host keeps that buffer until the bytes were
read (``rcunet.host.tcp_sock.TcpSock.rx_skbs``).

Concurrency: none; owned by one ``Connection`` (its socket lock).
"""

from __future__ import annotations

from collections import deque

Buffer = bytes | bytearray | memoryview

#: The send queue's chunk size: fixed-size blocks written in place, so an append never
#: reallocates (a growing bytearray is copied whole each time realloc moves it).
SEND_CHUNK = 256 * 1024


class SendQueue:
    """Unacknowledged and unsent bytes, addressed by offset from the first unacknowledged
    byte (offset 0).  ``append`` at the tail, ``drop`` from the head when ACKed,
    ``slice`` for a segment (new data or a retransmission).

    Every chunk holds ``SEND_CHUNK`` bytes of capacity; the queue's bytes run from
    ``_head`` in the first chunk to ``_fill`` in the last, so offsets map to chunks by
    division.  The last chunk may be shorter than its capacity (it grows as written:
    ``_fill`` never exceeds its length); the others are full."""

    __slots__ = ("_chunks", "_head", "_fill", "_len", "_spare")

    def __init__(self) -> None:
        self._chunks: deque[bytearray] = deque()
        self._head = 0  # bytes of _chunks[0] already dropped
        self._fill = SEND_CHUNK  # bytes of _chunks[-1] written (full: start a new chunk)
        self._len = 0
        # One acknowledged chunk kept for the next append: a fresh block of this size is
        # mapped, zeroed and faulted in page by page.
        self._spare: bytearray | None = None

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def append(self, data: Buffer) -> None:
        """Copy ``data`` in at the tail."""
        n = len(data)
        if not n:
            return
        chunks = self._chunks
        fill = self._fill
        if fill + n <= SEND_CHUNK:  # the common case: one copy into the tail chunk
            chunks[-1][fill : fill + n] = data
            self._fill = fill + n
            self._len += n
            return
        view = data if isinstance(data, memoryview) else memoryview(data)
        pos = 0
        while pos < n:
            if fill == SEND_CHUNK:
                spare, self._spare = self._spare, None
                if spare is None:
                    # The first chunk of an empty queue starts empty and grows as it is
                    # written (the slice assignment at its end extends it): a short-lived
                    # connection's few bytes cost no zeroed 256 KB block.  A chunk behind
                    # others is made full-sized at once: a bulk writer filling many would
                    # otherwise pay a realloc (and often a copy) every few appends.
                    spare = bytearray(SEND_CHUNK) if chunks else bytearray()
                chunks.append(spare)
                fill = 0
            k = min(SEND_CHUNK - fill, n - pos)
            chunks[-1][fill : fill + k] = view[pos : pos + k]
            fill += k
            pos += k
        self._fill = fill
        self._len += n

    def drop(self, n: int) -> None:
        """The first ``n`` bytes were acknowledged."""
        if n >= self._len:
            self.clear()
            return
        self._len -= n
        head = self._head + n
        chunks = self._chunks
        while head >= SEND_CHUNK:
            self._spare = chunks.popleft()
            head -= SEND_CHUNK
        self._head = head

    def slice(self, offset: int, n: int) -> bytes:
        """``n`` bytes from ``offset`` (both within the queue), copied once."""
        if n <= 0:
            return b""
        index, start = divmod(self._head + offset, SEND_CHUNK)
        chunks = self._chunks
        if start + n <= SEND_CHUNK:
            with memoryview(chunks[index]) as view:
                return bytes(view[start : start + n])
        pieces: list[memoryview] = []
        while n:
            take = min(SEND_CHUNK - start, n)
            pieces.append(memoryview(chunks[index])[start : start + take])
            n -= take
            index += 1
            start = 0
        try:
            return b"".join(pieces)
        finally:
            for piece in pieces:
                piece.release()

    def clear(self) -> None:
        self._chunks.clear()
        self._head = 0
        self._fill = SEND_CHUNK
        self._len = 0


class RecvQueue:
    """In-order received bytes the application has not read: ``append`` one segment's
    payload (kept as given, not copied: the caller leaves those bytes unchanged until
    they are read or the queue is cleared), ``read`` from the head (always a copy)."""

    __slots__ = ("_chunks", "_head", "_len")

    def __init__(self) -> None:
        self._chunks: deque[Buffer] = deque()
        self._head = 0  # bytes of _chunks[0] already read
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def append(self, data: Buffer) -> None:
        n = len(data)
        if n:
            self._chunks.append(data)
            self._len += n

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes from the head, copied once into new ``bytes`` (a whole unread
        chunk that is already ``bytes``: not at all)."""
        n = min(n, self._len)
        if n <= 0:
            return b""
        chunks = self._chunks
        head = self._head
        first = chunks[0]
        avail = len(first) - head
        if n <= avail:
            if head == 0 and n == avail:
                out = bytes(chunks.popleft())  # bytes(bytes) is the same object: no copy
                self._head = 0
            else:
                with memoryview(first) as view:
                    out = bytes(view[head : head + n])
                if n == avail:
                    chunks.popleft()
                    self._head = 0
                else:
                    self._head = head + n
            self._len -= n
            return out
        pieces: list[Buffer] = []
        need = n
        while need:
            chunk = chunks[0]
            avail = len(chunk) - head
            if avail <= need:
                pieces.append(memoryview(chunk)[head:] if head else chunk)
                chunks.popleft()
                need -= avail
                head = 0
            else:
                pieces.append(memoryview(chunk)[head : head + need])
                head += need
                need = 0
        self._head = head
        self._len -= n
        return b"".join(pieces)

    def peek(self, n: int) -> bytes:
        """Up to ``n`` bytes from the head, left in the queue (MSG_PEEK)."""
        n = min(n, self._len)
        pieces: list[Buffer] = []
        head = self._head
        for chunk in self._chunks:
            if n <= 0:
                break
            piece = memoryview(chunk)[head : head + n]
            pieces.append(piece)
            n -= len(piece)
            head = 0
        return b"".join(pieces)

    def clear(self) -> None:
        self._chunks.clear()
        self._head = 0
        self._len = 0
