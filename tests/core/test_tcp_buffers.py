"""The engine's chunked byte queues behave exactly like one bytearray used as a FIFO."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rcunet.core.tcp.buffers import SEND_CHUNK, ZEROCOPY_MIN, RecvQueue, SendQueue

_sizes = st.integers(min_value=0, max_value=3 * SEND_CHUNK // 2)


def _as(kind: int, data: bytes) -> bytes | bytearray | memoryview:
    """``data`` as a writer may pass it: bytes, a (partial) view of bytes, or mutable."""
    if kind == 0:
        return data
    if kind == 1:
        return memoryview(data).toreadonly()
    if kind == 2:
        return memoryview(b"@" + data + b"@")[1:-1]  # a view of part of a bytes object
    return bytearray(data)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "drop", "slice"]), _sizes, _sizes,
                          st.integers(min_value=0, max_value=3)),
                max_size=40))
def test_send_queue_matches_a_bytearray(ops: list[tuple[str, int, int, int]]) -> None:
    """Whatever mix of referenced (immutable) and copied (mutable, small) appends: the
    queue reads back as the bytes written, and a mutable buffer reused after append
    changes nothing queued."""
    queue, model = SendQueue(), bytearray()
    counter = 0
    for op, a, b, kind in ops:
        if op == "append":
            size = a % 70_000 if kind != 3 or a % 2 else a % (ZEROCOPY_MIN + 1)
            data = bytes((counter + i) & 0xFF for i in range(size))
            counter += 7
            given_data = _as(kind, data)
            queue.append(given_data)
            if isinstance(given_data, bytearray):
                given_data[:] = b"\xee" * len(given_data)  # the writer reuses its buffer
            model += data
        elif op == "drop":
            n = a % (len(model) + 1)
            queue.drop(n)
            del model[:n]
        else:
            off = a % (len(model) + 1)
            n = b % (len(model) - off + 1)
            assert queue.slice(off, n) == bytes(model[off : off + n])
        assert len(queue) == len(model) and bool(queue) == bool(model)
    assert queue.slice(0, len(model)) == bytes(model)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=70_000)),
                max_size=40))
def test_recv_queue_matches_a_bytearray(ops: list[tuple[bool, int]]) -> None:
    queue, model = RecvQueue(), bytearray()
    counter = 0
    for is_append, n in ops:
        if is_append:
            data = bytes((counter + i) & 0xFF for i in range(n))
            counter += 3
            queue.append(memoryview(data))
            model += data
        else:
            assert queue.read(n) == bytes(model[:n])
            del model[:n]
        assert len(queue) == len(model) and bool(queue) == bool(model)
    assert queue.read(len(model) + 1) == bytes(model)
    assert queue.read(10) == b""


def test_recv_queue_keeps_the_payload_and_reads_copies() -> None:
    """A segment's payload is a view of a receive buffer the host recycles only once its
    bytes were read (``TcpSock.rx_skbs``): the queue keeps the view (no copy on the way
    in), and every read - whole chunk, part of one, across chunks, peek - returns bytes
    of its own that stay valid after the buffer is recycled."""
    frame = bytearray(b"abcdefghij")
    view = memoryview(frame)
    queue = RecvQueue()
    queue.append(view[0:3])
    queue.append(view[3:6])
    queue.append(view[6:10])
    outs = [queue.peek(4), queue.read(3), queue.read(1), queue.read(4), queue.read(10)]
    frame[:] = b"X" * 10
    assert outs == [b"abcd", b"abc", b"d", b"efgh", b"ij"]
    assert all(type(out) is bytes for out in outs)


def test_send_queue_chunk_can_grow_after_a_slice() -> None:
    queue = SendQueue()
    queue.append(b"a" * 100)
    assert queue.slice(10, 20) == b"a" * 20
    queue.append(b"b" * 100)  # no memoryview export left on the tail chunk
    assert queue.slice(90, 20) == b"a" * 10 + b"b" * 10


def test_send_queue_keeps_bytes_by_reference() -> None:
    """A large ``bytes`` write is queued uncopied: a segment that is exactly that write
    is the writer's object itself; a segment across writes is one new copy."""
    first, second = bytes(range(256)) * 64, b"z" * 16384
    queue = SendQueue()
    queue.append(memoryview(first).toreadonly())
    queue.append(second)
    queue.append(b"small")  # copied: a short write joins a copy block
    assert queue.slice(0, len(first)) is first
    assert queue.slice(len(first), len(second)) is second
    assert queue.slice(100, len(first)) == first[100:] + second[:100]
    queue.drop(len(first) + 10)
    assert queue.slice(len(second) - 20, 15) == b"z" * 10 + b"small"
    assert len(queue) == len(second) - 10 + 5


def test_send_queue_copies_a_small_part_of_a_large_bytes_object() -> None:
    """A few KB of a writer's large ``bytes`` (a partial send) are copied: the queue
    never keeps alive much more than the bytes it holds."""
    import sys

    big = bytes(range(256)) * 4096  # 1 MB
    queue = SendQueue()
    before = sys.getrefcount(big)
    queue.append(memoryview(big)[: 3 * ZEROCOPY_MIN])
    assert sys.getrefcount(big) == before
    half = memoryview(big)[: len(big) // 2]
    queue.append(half)  # half of it: kept by reference
    del half
    assert sys.getrefcount(big) == before + 1
    assert queue.slice(0, 3 * ZEROCOPY_MIN + 10) == big[: 3 * ZEROCOPY_MIN] + big[:10]


def test_send_queue_outlives_the_callers_view() -> None:
    """A part of a ``bytes`` object queued by reference stays readable after the caller
    releases the view it passed (``with memoryview(data)[k:] as view: send(view)``)."""
    data = bytes(range(256)) * 16
    queue = SendQueue()
    with memoryview(data)[1000:] as view:
        queue.append(view)
    assert queue.slice(0, len(data) - 1000) == data[1000:]
    queue.drop(500)
    assert queue.slice(0, 100) == data[1500:1600]
