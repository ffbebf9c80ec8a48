"""getsockopt(SO_MEMINFO): Linux's sk_get_meminfo array.  Received segments are charged
their truesize until read; the buffer sizes are SO_RCVBUF's and SO_SNDBUF's doubled
values; the array is cut to the caller's buffer length."""

from __future__ import annotations

import socket
import struct

from tcp_helpers import connected_pair

from rcunet.core.tcp.sndbuf import TX_SKB_TRUESIZE
from rcunet.core.tcp.window import rx_truesize
from rcunet.host.network import Network
from rcunet.host.tcp.meminfo import NAMES, SO_MEMINFO

RMEM, RCVBUF, SNDBUF, WMEM_QUEUED = 0, 1, 3, 5


def _meminfo(sock: object) -> tuple[int, ...]:
    raw = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 4 * len(NAMES))  # type: ignore[attr-defined]
    return struct.unpack(f"{len(NAMES)}I", raw)


def _pair() -> tuple[Network, object, object]:
    net = Network()
    a, b = net.host("a"), net.host("b")
    net.link(a, b, ["10.0.0.1/24"], ["10.0.0.2/24"])
    _, cli, child = connected_pair(net, a, b)
    return net, cli, child


def test_received_segment_is_charged_its_truesize_until_read() -> None:
    net, cli, child = _pair()
    assert _meminfo(child)[RMEM] == 0
    cli.send(bytes(1000))
    assert net.run_until(lambda: _meminfo(child)[RMEM] > 0, 5)
    assert _meminfo(child)[RMEM] == rx_truesize(1000)
    assert child.recv(4096) == bytes(1000)
    assert _meminfo(child)[RMEM] == 0


def test_buffers_are_the_doubled_socket_options() -> None:
    net = Network()
    host = net.host("a")
    sock = host.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 30000)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 20000)
    mem = _meminfo(sock)
    assert mem[RCVBUF] == 60000 and mem[SNDBUF] == 40000
    assert mem[RMEM] == 0 and mem[WMEM_QUEUED] == 0


def test_unacknowledged_bytes_are_queued_send_memory() -> None:
    net, cli, child = _pair()
    cli.send(bytes(3000))
    # nothing acknowledged yet: the bytes and the one skb that holds them (its truesize)
    assert _meminfo(cli)[WMEM_QUEUED] == 3000 + TX_SKB_TRUESIZE
    assert net.run_until(lambda: _meminfo(cli)[WMEM_QUEUED] == 0, 5)


def test_a_short_buffer_gets_the_first_values() -> None:
    net = Network()
    sock = net.host("a").socket(socket.AF_INET, socket.SOCK_STREAM)
    raw = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 8)
    assert len(raw) == 8 and struct.unpack("2I", raw)[1] == _meminfo(sock)[RCVBUF]


def test_buffers_set_on_a_live_connection_take_effect() -> None:
    """sock_setsockopt changes sk_rcvbuf / sk_sndbuf of a connected socket at once;
    getsockopt and SO_MEMINFO read the doubled values."""
    _net, cli, _child = _pair()
    cli.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 12345)
    cli.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 23456)
    assert cli.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 24690
    assert cli.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 46912
    mem = _meminfo(cli)
    assert mem[RCVBUF] == 24690 and mem[SNDBUF] == 46912
