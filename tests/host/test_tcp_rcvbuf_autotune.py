"""Receive-buffer autotuning on the Host (Linux tcp_rcv_space_adjust, "DRS"): the window
scale covers tcp_rmem[2] (tcp_select_initial_window), the buffer grows with the rate a
reader consumes unless SO_RCVBUF fixed it (SOCK_RCVBUF_LOCK, inherited by children), and
a bulk receiver acknowledges about every second segment, not every read."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import socket
from typing import Any

from tcp_helpers import B4, accept, connected_pair, listener, start_connect

from rcunet.core.tcp.listen import choose_wscale
from rcunet.host.network import Network
from rcunet.link.impair import ImpairmentConfig
from rcunet.tuning import Tuning

MS = 1_000_000
RMEM = Tuning().tcp_rmem


def _net(tuning: Tuning | None = None, delay: int = 1 * MS) -> tuple[Network, Any, Any]:
    net = Network(tuning=tuning) if tuning is not None else Network()
    a, b = net.host("a"), net.host("b")
    path = ImpairmentConfig(delay=delay)
    net.link(a, b, ["10.0.0.1/24"], ["10.0.0.2/24"], mtu=65536, impair=path,
             impair_ba=dataclasses.replace(path))
    return net, a, b


def _transfer(net: Network, writer: Any, reader: Any, total: int) -> bytes:
    """Write ``total`` bytes while the reader takes what is queued (reads of up to 1 MB)
    as soon as data is there; returns what it read.  Autotuning measures the bytes read
    in a round trip less those left queued (tcp_rcv_space_adjust), so the reader drains
    the queue in each call, as a bulk receiver does."""
    payload = bytes(range(256)) * (total // 256)
    got = bytearray()
    sent = 0

    def pump() -> bool:
        nonlocal sent
        while sent < len(payload):
            try:
                sent += writer.send(payload[sent : sent + 65536])
            except BlockingIOError:
                break
        while True:
            try:
                chunk = reader.recv(1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            got.extend(chunk)
        return len(got) == len(payload)

    assert net.run_until(pump, 60), f"transfer stalled at {len(got)} of {len(payload)}"
    assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
    return bytes(got)


def _pair_with_fixed_rcvbuf(net: Network, a: Any, b: Any, on_listener: bool) -> tuple[Any, Any]:
    """(client, accepted child); SO_RCVBUF 65536 set on the listener or on the client."""
    if on_listener:
        srv = b.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        srv.settimeout(0)
        srv.bind((B4, 8080))
        srv.listen(4)
        cli = start_connect(a, socket.AF_INET, B4, 8080)
    else:
        srv = listener(b, socket.AF_INET, B4, 8080)
        cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)
        cli.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        cli.settimeout(0)
        assert cli.connect_ex((B4, 8080)) == errno.EINPROGRESS  # non-blocking: under way
    child = accept(net, srv)
    assert net.run_until(lambda: cli._sk.conn.state.synchronized, 5)
    return cli, child


def test_window_scale_covers_tcp_rmem_max() -> None:
    net, a, b = _net()
    _srv, cli, child = connected_pair(net, a, b)
    assert cli._sk.conn.tcb.rcv_wscale == choose_wscale(RMEM[2]) == 7  # Linux on loopback
    assert child._sk.conn.tcb.rcv_wscale == 7
    assert cli._sk.conn.tcb.snd_wscale == 7  # what the peer offered
    net2, a2, b2 = _net(Tuning(tcp_rmem=(4096, 131072, 1 << 20)))
    _srv2, cli2, _child2 = connected_pair(net2, a2, b2)
    assert cli2._sk.conn.tcb.rcv_wscale == 5


def test_so_rcvbuf_sets_the_scale_from_the_buffer() -> None:
    net, a, b = _net()
    cli, child = _pair_with_fixed_rcvbuf(net, a, b, on_listener=False)
    # SO_RCVBUF doubled to 131072 fixes the window clamp at tcp_full_space, 65536, and
    # the scale is chosen within the clamp (tcp_select_initial_window)
    assert cli._sk.conn.tcb.rcv_wscale == choose_wscale(65536) == 1
    assert child._sk.conn.tcb.rcv_wscale == 7  # the server set nothing


def test_receive_buffer_grows_under_a_fast_reader() -> None:
    net, a, b = _net()
    _srv, cli, child = connected_pair(net, a, b)
    assert child.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == RMEM[1]
    _transfer(net, cli, child, 16 << 20)
    grown = child._sk.conn.rcvbuf
    assert RMEM[1] < grown <= RMEM[2]
    assert child.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == grown  # as Linux reports
    assert cli._sk.conn.rcvbuf == RMEM[1]  # the writer read nothing: its buffer stays


def test_moderate_rcvbuf_off_keeps_the_buffer() -> None:
    net, a, b = _net(Tuning(tcp_moderate_rcvbuf=False))
    _srv, cli, child = connected_pair(net, a, b)
    _transfer(net, cli, child, 4 << 20)
    assert child._sk.conn.rcvbuf == RMEM[1]
    assert child._sk.conn.tcb.rcv_wscale == 7  # the scale still covers tcp_rmem[2]


def test_so_rcvbuf_stops_autotuning_and_children_inherit_it() -> None:
    net, a, b = _net()
    cli, child = _pair_with_fixed_rcvbuf(net, a, b, on_listener=True)
    _transfer(net, cli, child, 4 << 20)
    assert child._sk.conn.rcvbuf == 131072
    assert child.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 131072
    _transfer(net, child, cli, 4 << 20)
    assert cli._sk.conn.rcvbuf > RMEM[1]  # the client set nothing: it grows


def test_a_bulk_receiver_acks_about_every_second_segment() -> None:
    """Window updates go out only when the window at least doubles (tcp_cleanup_rbuf) and
    the grown buffer keeps the window wide open: no ACK per read."""
    net, a, b = _net()
    _srv, cli, child = connected_pair(net, a, b)
    data_before = a.counters.get("TcpOutSegs")
    acks_before = b.counters.get("TcpOutSegs")
    _transfer(net, cli, child, 16 << 20)
    data_segments = a.counters.get("TcpOutSegs") - data_before
    acks = b.counters.get("TcpOutSegs") - acks_before
    assert data_segments >= (16 << 20) // 65483
    assert acks <= 0.6 * data_segments, (acks, data_segments)
