"""Send-side flags and TCP_INQ through the socket API, as a program uses them on Linux:
TCP_CORK and MSG_MORE hold a partial tail until uncorked or followed by a plain send,
MSG_EOR is accepted, and with TCP_INQ set recvmsg returns a TCP_CM_INQ control message
with the bytes left to read (1 once the peer's FIN ended the stream)."""

from __future__ import annotations

import errno
import socket
import struct
import threading
from typing import Any

import pytest

TCP_CORK, TCP_INQ = 3, 36
MSG_MORE, MSG_EOR = 0x8000, 0x80


def _wait_readable(sock: Any, n: int) -> None:
    """Until ``n`` bytes are queued (MSG_PEEK | MSG_WAITALL waits for them)."""
    assert len(sock.recv(n, socket.MSG_PEEK | socket.MSG_WAITALL)) == n


def test_inq_control_message(pair: tuple[Any, Any]) -> None:
    cli, child = pair
    child.setsockopt(socket.IPPROTO_TCP, TCP_INQ, 1)
    assert child.getsockopt(socket.IPPROTO_TCP, TCP_INQ) == 1
    cli.sendall(b"x" * 3000)
    _wait_readable(child, 3000)
    data, anc, flags, _ = child.recvmsg(1000, socket.CMSG_SPACE(4))
    assert len(data) == 1000 and flags == 0
    assert anc == [(socket.IPPROTO_TCP, TCP_INQ, struct.pack("i", 2000))]
    data, anc, flags, _ = child.recvmsg(2000, 0)  # no room: the message is cut
    assert len(data) == 2000 and anc == [] and flags & socket.MSG_CTRUNC
    cli.shutdown(socket.SHUT_WR)
    assert child.recv(10) == b""
    _, anc, _, _ = child.recvmsg(10, socket.CMSG_SPACE(4))
    assert anc == [(socket.IPPROTO_TCP, TCP_INQ, struct.pack("i", 1))]  # SOCK_DONE


def test_cork_and_msg_more_hold_the_tail(pair: tuple[Any, Any]) -> None:
    cli, child = pair
    cli.setsockopt(socket.IPPROTO_TCP, TCP_CORK, 1)
    assert cli.getsockopt(socket.IPPROTO_TCP, TCP_CORK) == 1
    cli.send(b"a" * 100)
    cli.send(b"b" * 100, MSG_EOR)
    cli.setsockopt(socket.IPPROTO_TCP, TCP_CORK, 0)
    _wait_readable(child, 200)
    assert child.recv(200) == b"a" * 100 + b"b" * 100
    cli.send(b"c" * 50, MSG_MORE)
    cli.send(b"d" * 50)
    _wait_readable(child, 100)
    assert child.recv(100) == b"c" * 50 + b"d" * 50
    with pytest.raises(OSError):
        cli.send(b"e", socket.MSG_OOB)


def test_notsent_lowat_and_user_timeout_options(pair: tuple[Any, Any]) -> None:
    cli, child = pair
    TCP_USER_TIMEOUT, TCP_NOTSENT_LOWAT = 18, 25
    assert cli.getsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT) == 0
    cli.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, 16384)
    assert cli.getsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT) == 16384
    cli.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, 5000)
    assert cli.getsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT) == 5000
    with pytest.raises(OSError) as info:
        cli.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, -1)
    assert info.value.errno == errno.EINVAL
    # A blocking write under the mark still sends everything, in steps, while the peer
    # reads (a peer that does not read would close the window and hold the unsent bytes
    # above the mark).
    received = bytearray()

    def drain() -> None:
        while len(received) < 100_000 and (chunk := child.recv(65536)):
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    cli.sendall(b"z" * 100_000)
    reader.join(10)
    assert bytes(received) == b"z" * 100_000
