"""The engine's chunked byte queues behave exactly like one bytearray used as a FIFO."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rcunet.core.tcp.buffers import SEND_CHUNK, RecvQueue, SendQueue

_sizes = st.integers(min_value=0, max_value=3 * SEND_CHUNK // 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "drop", "slice"]), _sizes, _sizes),
                max_size=40))
def test_send_queue_matches_a_bytearray(ops: list[tuple[str, int, int]]) -> None:
    queue, model = SendQueue(), bytearray()
    counter = 0
    for op, a, b in ops:
        if op == "append":
            data = bytes((counter + i) & 0xFF for i in range(a % 70_000))
            counter += 7
            queue.append(memoryview(data))
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
