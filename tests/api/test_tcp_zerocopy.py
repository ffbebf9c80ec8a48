"""MSG_ZEROCOPY through the socket API, as a program uses it on Linux: SO_ZEROCOPY, sends
with the flag, then ``recvmsg(MSG_ERRQUEUE)`` for the completions (an ``IP_RECVERR``
control message carrying ``struct sock_extended_err`` with an id range), with the socket
polling readable while notifications wait (POLLERR)."""

from __future__ import annotations

import errno
import select
import socket
import struct
import time
from typing import Any

import pytest

from rcunet.api.socket import (
    MSG_ERRQUEUE,
    MSG_ZEROCOPY,
    SO_EE_CODE_ZEROCOPY_COPIED,
    SO_EE_ORIGIN_ZEROCOPY,
    SO_ZEROCOPY,
)

IP_RECVERR = 11
EE = struct.Struct("=IBBBBII")


def _read_all(sock: Any, n: int) -> None:
    got = 0
    while got < n:
        chunk = sock.recv(n - got)
        assert chunk
        got += len(chunk)


def _notifications(sock: Any, last_id: int) -> list[tuple[int, int]]:
    """Every (lo, hi) range read from the error queue until ``last_id`` is covered,
    waiting for readability (POLLERR) between reads."""
    ranges: list[tuple[int, int]] = []
    deadline = time.monotonic() + 10
    while not ranges or ranges[-1][1] < last_id:
        assert time.monotonic() < deadline, f"no completion for id {last_id}: {ranges}"
        readable, _, _ = select.select([sock], [], [], 1.0)
        if not readable:
            continue
        data, ancdata, flags, address = sock.recvmsg(0, 256, MSG_ERRQUEUE)
        assert (data, address) == (b"", None)
        assert flags & MSG_ERRQUEUE
        [(level, kind, cdata)] = ancdata
        assert (level, kind) == (socket.IPPROTO_IP, IP_RECVERR)
        assert len(cdata) == EE.size + 16  # the extended error, then a sockaddr_in
        ee_errno, origin, _type, code, _pad, lo, hi = EE.unpack_from(cdata)
        assert (ee_errno, origin, code) == (0, SO_EE_ORIGIN_ZEROCOPY,
                                            SO_EE_CODE_ZEROCOPY_COPIED)
        ranges.append((lo, hi))
    return ranges


def test_completions_cover_every_send_in_order(pair: Any) -> None:
    cli, child = pair
    cli.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
    assert cli.getsockopt(socket.SOL_SOCKET, SO_ZEROCOPY) == 1
    payload = bytearray(b"z" * 5000)
    for _ in range(4):
        assert cli.send(payload, MSG_ZEROCOPY) == len(payload)
    cli.send(b"plain")  # no flag: no id
    _read_all(child, 4 * 5000 + 5)
    ranges = _notifications(cli, 3)
    # consecutive, without gaps or repeats, starting at id 0
    expected_lo = 0
    for lo, hi in ranges:
        assert lo == expected_lo and hi >= lo
        expected_lo = hi + 1
    assert expected_lo == 4
    with pytest.raises(BlockingIOError) as info:
        cli.recvmsg(0, 256, MSG_ERRQUEUE)
    assert info.value.errno == errno.EAGAIN


def test_empty_error_queue_is_eagain_even_when_blocking(pair: Any) -> None:
    cli, _child = pair
    cli.settimeout(None)
    with pytest.raises(BlockingIOError):
        cli.recvmsg(0, 256, MSG_ERRQUEUE)


def test_bad_value_is_einval(pair: Any) -> None:
    cli, _child = pair
    with pytest.raises(OSError) as info:
        cli.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 2)
    assert info.value.errno == errno.EINVAL


def test_short_control_buffer_truncates(pair: Any) -> None:
    cli, child = pair
    cli.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
    cli.send(b"q" * 10, MSG_ZEROCOPY)
    _read_all(child, 10)
    deadline = time.monotonic() + 10
    while not select.select([cli], [], [], 1.0)[0]:
        assert time.monotonic() < deadline
    _data, ancdata, flags, _addr = cli.recvmsg(0, 24, MSG_ERRQUEUE)
    assert flags & socket.MSG_CTRUNC
    assert len(ancdata[0][2]) == 8  # 24 bytes of room: the header and 8 bytes of data


def test_sendmsg_of_many_buffers_completes_as_one_send(pair: Any) -> None:
    cli, child = pair
    cli.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
    parts = [bytes([65 + i]) * 3 for i in range(20)]  # 20 buffers: two skbs on Linux
    assert cli.sendmsg(parts, (), MSG_ZEROCOPY) == 60
    got = b""
    while len(got) < 60:
        got += child.recv(60 - len(got))
    assert got == b"".join(parts)
    assert _notifications(cli, 0) == [(0, 0)]  # one id for the call
