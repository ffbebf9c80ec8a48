"""The connection's byte queues: bytes the application wrote and the peer has not
acknowledged (``SendQueue``), and in-order bytes the application has not read
(``RecvQueue``).

Both are queues of chunks, not one ``bytearray``: a bytearray used as a FIFO copies its
whole contents whenever an append finds no room after bytes were deleted from its front
(CPython moves the data to a new block), which with an autotuned receive buffer of
megabytes costs more than the transfer itself.  Consuming from the front drops whole
chunks.  A sent byte is copied at most once on the way in (not at all when the writer's
buffer is immutable ``bytes``: ``SendQueue`` keeps a reference) and once on the way out; a
received byte only on the way out: ``RecvQueue`` keeps the segment's payload as given (a view of
the receive buffer the host filled), and the host keeps that buffer until the bytes were
read (``rcunet.host.tcp.sock.TcpSock.rx_skbs``).

Concurrency: none; owned by one ``Connection`` (its socket lock).
"""

from __future__ import annotations

from collections import deque

from rcunet.core.freethreaded import lockfree_read_slots

Buffer = bytes | bytearray | memoryview

#: The send queue's copy-chunk size: blocks written in place, so an append never
#: reallocates (a growing bytearray is copied whole each time realloc moves it).
SEND_CHUNK = 256 * 1024
#: An append of at least this many bytes of immutable ``bytes`` is queued by reference
#: (no copy: nothing can change those bytes while they wait for their ACK); shorter
#: ones are copied, so a segment of small writes is not a join of many pieces.
ZEROCOPY_MIN = 2048


class SendQueue:
    """Unacknowledged and unsent bytes, addressed by offset from the first unacknowledged
    byte (offset 0).  ``append`` at the tail, ``drop`` from the head when ACKed,
    ``slice`` for a segment (new data or a retransmission).

    The queue is a deque of chunks of two kinds: the caller's own immutable ``bytes``
    (or a read-only view of one), kept by reference when an append brings at least
    ``ZEROCOPY_MIN`` of them and at least half of that object (Linux copies the user's
    bytes into an skb; Python cannot change a ``bytes`` object, so keeping it is as
    safe); and ``bytearray`` copy blocks of ``SEND_CHUNK`` capacity for everything else
    (mutable buffers the caller may reuse once send returns, small writes).  Only the last chunk
    can be the open copy block (``_tail``), holding ``_fill`` bytes; every other chunk's
    bytes are all queued (a copy block is cut to its fill when a reference closes it).
    The first chunk's bytes start at ``_head``.  ``slice`` finds its chunk from a cursor
    (``_at_index``, ``_at_start``: a chunk and its absolute start), since segments are
    mostly cut in order."""

    # slots with the GIL only: driven by whichever thread holds the socket lock (see
    # Connection's __slots__)
    __slots__ = lockfree_read_slots("_chunks", "_head", "_base", "_len", "_tail", "_fill",
                                    "_spare", "_at_index", "_at_start")

    def __init__(self) -> None:
        self._chunks: deque[Buffer] = deque()
        self._head = 0  # bytes of _chunks[0] already dropped
        self._base = 0  # absolute offset of _chunks[0]'s first byte (bytes dropped before it)
        self._len = 0
        self._tail: bytearray | None = None  # the open copy block: _chunks[-1] when set
        self._fill = 0  # bytes of _tail written
        # One acknowledged block kept for the next copy: a fresh block of this size is
        # mapped, zeroed and faulted in page by page.
        self._spare: bytearray | None = None
        self._at_index = 0  # the slice cursor: a chunk index...
        self._at_start = 0  # ...and that chunk's absolute offset

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def append(self, data: Buffer) -> None:
        """Queue ``data`` at the tail: by reference if it is immutable ``bytes`` of at
        least ``ZEROCOPY_MIN`` (and not a small part of a larger object), else copied."""
        n = len(data)
        if not n:
            return
        tail = self._tail
        if n < ZEROCOPY_MIN or not _referable(data, n):
            fill = self._fill
            if tail is not None and fill + n <= SEND_CHUNK:  # common: one copy into the tail
                _write(tail, fill, data)
                self._fill = fill + n
                self._len += n
                return
            self._copy_in(data, n)
            return
        if tail is not None:  # closed by the reference: cut to its bytes
            del tail[self._fill :]
            self._tail = None
        if isinstance(data, memoryview):
            whole = data.obj
            if isinstance(whole, bytes) and data.nbytes == len(whole):
                data = whole  # the whole bytes object: a segment of it can be it, uncopied
            else:
                # a view of our own: the caller may release theirs once send() returns,
                # and the queue reads these bytes until they are acknowledged
                data = data[:]
        self._chunks.append(data)
        self._len += n

    def _copy_in(self, data: Buffer, n: int) -> None:
        view = data if isinstance(data, memoryview) else memoryview(data)
        chunks = self._chunks
        tail = self._tail
        fill = self._fill
        pos = 0
        while pos < n:
            if tail is None or fill == SEND_CHUNK:
                tail, self._spare = self._spare, None
                if tail is None:
                    # The first chunk of an empty queue starts empty and grows as it is
                    # written (the slice assignment at its end extends it): a short-lived
                    # connection's few bytes cost no zeroed 256 KB block.  A block behind
                    # others is made full-sized at once: a bulk writer filling many would
                    # otherwise pay a realloc (and often a copy) every few appends.
                    tail = bytearray(SEND_CHUNK) if chunks else bytearray()
                chunks.append(tail)
                fill = 0
            k = min(SEND_CHUNK - fill, n - pos)
            _write(tail, fill, view[pos : pos + k])
            fill += k
            pos += k
        self._tail = tail
        self._fill = fill
        self._len += n

    def _size(self, chunk: Buffer) -> int:
        """The queued bytes of ``chunk`` from its start (the open block: its fill)."""
        return self._fill if chunk is self._tail else len(chunk)

    def drop(self, n: int) -> None:
        """The first ``n`` bytes were acknowledged."""
        if n >= self._len:
            self.clear()
            return
        self._len -= n
        head = self._head + n
        chunks = self._chunks
        base = self._base
        dropped = 0
        while True:
            size = self._size(chunks[0])
            if head < size:
                break
            chunk = chunks.popleft()  # not the open block: bytes remain behind this one
            if type(chunk) is bytearray and len(chunk) == SEND_CHUNK:
                self._spare = chunk
            head -= size
            base += size
            dropped += 1
        self._head = head
        self._base = base
        index = self._at_index - dropped
        if index < 0:
            self._at_index, self._at_start = 0, base
        else:
            self._at_index = index

    def slice(self, offset: int, n: int) -> bytes:
        """``n`` bytes from ``offset`` (both within the queue), copied at most once (not
        at all when they are one whole queued ``bytes`` object)."""
        if n <= 0:
            return b""
        chunks = self._chunks
        pos = self._base + self._head + offset  # absolute
        index, start = self._at_index, self._at_start
        if pos < start:
            index, start = 0, self._base
        chunk = chunks[index]
        size = self._size(chunk)
        while pos >= start + size:
            start += size
            index += 1
            chunk = chunks[index]
            size = self._size(chunk)
        self._at_index, self._at_start = index, start
        pos -= start
        if pos + n <= size:
            if pos == 0 and n == size and type(chunk) is bytes:
                return chunk
            with memoryview(chunk) as view:
                return bytes(view[pos : pos + n])
        pieces: list[memoryview] = []
        while n:
            take = min(size - pos, n)
            pieces.append(memoryview(chunk)[pos : pos + take])
            n -= take
            if n:
                index += 1
                chunk = chunks[index]
                size = self._size(chunk)
                pos = 0
        try:
            return b"".join(pieces)
        finally:
            for piece in pieces:
                piece.release()

    def clear(self) -> None:
        self._chunks.clear()
        self._head = 0
        self._base = 0
        self._len = 0
        self._tail = None
        self._fill = 0
        self._at_index = 0
        self._at_start = 0


def _write(block: bytearray, at: int, data: Buffer) -> None:
    """Copy ``data`` into ``block`` at ``at`` (its end: the block grows), once.
    ``block[at:at + n] = data`` would copy twice: CPython's bytearray slice assignment
    first copies a source that is not a bytearray into a temporary one."""
    if at == len(block):
        block += data
    else:
        with memoryview(block) as view:
            view[at : at + len(data)] = data


def _referable(data: Buffer, n: int) -> bool:
    """``data`` (``n`` bytes) is a ``bytes`` object or a contiguous byte view of one that
    is at most twice as long: the queue never keeps alive more than twice what it
    holds (a few bytes of a writer's huge object are copied, not the object kept)."""
    if type(data) is bytes:
        return True
    if not isinstance(data, memoryview):
        return False
    whole = data.obj
    return (type(whole) is bytes and len(whole) <= 2 * n and data.itemsize == 1
            and data.c_contiguous)


class RecvQueue:
    """In-order received bytes the application has not read: ``append`` one segment's
    payload (kept as given, not copied: the caller leaves those bytes unchanged until
    they are read or the queue is cleared), ``read`` from the head (always a copy).

    ``rmem`` is the memory the queue holds as Linux charges it (sk_rmem_alloc): each
    chunk's truesize, given with it, until the chunk is read whole (a partly read skb
    stays charged)."""

    __slots__ = lockfree_read_slots("_chunks", "_sizes", "_head", "_len", "rmem")  # as SendQueue's

    def __init__(self) -> None:
        self._chunks: deque[Buffer] = deque()
        self._sizes: deque[int] = deque()  # each chunk's truesize
        self._head = 0  # bytes of _chunks[0] already read
        self._len = 0
        self.rmem = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def append(self, data: Buffer, truesize: int = 0) -> None:
        """Queue ``data``, charging ``truesize`` (at least its length) for it."""
        n = len(data)
        if n:
            self._chunks.append(data)
            size = max(truesize, n)
            self._sizes.append(size)
            self.rmem += size
            self._len += n

    def _pop(self) -> Buffer:
        """Drop the head chunk (read whole) and its charge."""
        self.rmem -= self._sizes.popleft()
        return self._chunks.popleft()

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
                out = bytes(self._pop())  # bytes(bytes) is the same object: no copy
                self._head = 0
            else:
                with memoryview(first) as view:
                    out = bytes(view[head : head + n])
                if n == avail:
                    self._pop()
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
                self._pop()
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
        self._sizes.clear()
        self._head = 0
        self._len = 0
        self.rmem = 0
