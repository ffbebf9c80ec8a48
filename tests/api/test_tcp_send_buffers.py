"""TCP send/sendall take any bytes-like object without copying it first (a read-only
view; the engine copies once into its send queue), with Python's semantics: the caller may
reuse its buffer as soon as the call returns, and the count is in bytes."""

from __future__ import annotations

import array
import hashlib
import threading
from typing import Any

import pytest


def _recv_exactly(sock: Any, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        assert chunk, "EOF before all bytes arrived"
        got += chunk
    return bytes(got)


def test_buffer_reused_after_send_returns(pair: Any) -> None:
    cli, child = pair
    buf = bytearray(b"first message")
    assert cli.send(buf) == len(buf)
    buf[:] = b"X" * len(buf)  # the call returned: the bytes were taken
    view = memoryview(bytearray(b"0123456789"))[2:7]
    cli.sendall(view)
    view[:] = b"-----"
    assert _recv_exactly(child, 13 + 5) == b"first message23456"


def test_blocking_sendall_of_a_large_bytearray(pair: Any) -> None:
    cli, child = pair
    data = bytearray(hashlib.sha256(b"seed").digest() * 200_000)  # 6.4 MB: more than fits
    expected = hashlib.sha256(data).hexdigest()
    received: list[str] = []
    reader = threading.Thread(
        target=lambda: received.append(hashlib.sha256(_recv_exactly(child, len(data)))
                                       .hexdigest()))
    reader.start()
    cli.sendall(data)
    data[:] = bytes(len(data))  # reused at once: nothing of it may still be read later
    reader.join(30)
    assert received == [expected]


def test_wide_items_count_as_bytes(pair: Any) -> None:
    cli, child = pair
    items = array.array("i", range(10))
    assert cli.send(items) == items.itemsize * 10
    assert _recv_exactly(child, items.itemsize * 10) == items.tobytes()


def test_send_rejects_what_is_not_bytes_like(pair: Any) -> None:
    cli, _child = pair
    for bad in ("text", 42, None):
        with pytest.raises(TypeError):
            cli.send(bad)
        with pytest.raises(TypeError):
            cli.sendall(bad)
