"""Send-buffer autotuning on the Host (Linux tcp_sndbuf_expand): a connection's buffer
grows at ESTABLISHED unless SO_SNDBUF fixed it (SOCK_SNDBUF_LOCK), and a child inherits
its listener's setting."""

from __future__ import annotations

import socket

from tcp_helpers import B4, accept, connected_pair, listener

from rcunet.host.network import Network

DEFAULT_SNDBUF = 4 * 16384  # 4 * tcp_wmem[1]


def _net(mtu: int) -> tuple[Network, object, object]:
    net = Network()
    a, b = net.host("a"), net.host("b")
    net.link(a, b, ["10.0.0.1/24"], ["10.0.0.2/24"], mtu=mtu)
    return net, a, b


def _established(net: Network, sock: object) -> None:
    assert net.run_until(lambda: sock._sk.conn is not None  # type: ignore[attr-defined]
                         and sock._sk.conn.state.synchronized, 5)  # type: ignore[attr-defined]


def test_send_buffer_grows_on_a_loopback_sized_link() -> None:
    net, a, b = _net(65536)
    _srv, cli, child = connected_pair(net, a, b)
    conn = cli._sk.conn
    assert conn.options.sndbuf == 2 * 10 * conn.tcb.snd_mss  # two windows of IW segments
    assert child._sk.conn.options.sndbuf == 2 * 10 * child._sk.conn.tcb.snd_mss
    cli.send(bytes(512 * 1024))  # far beyond the fixed default, in one call
    assert conn.unacked == 512 * 1024


def test_standard_mtu_keeps_the_default_buffer() -> None:
    net, a, b = _net(1500)
    _srv, cli, _child = connected_pair(net, a, b)
    assert cli._sk.conn.options.sndbuf == DEFAULT_SNDBUF  # 2 * 10 * 1448 is below it


def test_so_sndbuf_fixes_the_buffer() -> None:
    net, a, b = _net(65536)
    srv = listener(b, socket.AF_INET, B4, 8080)
    cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    cli.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
    cli.settimeout(0)
    try:
        cli.connect((B4, 8080))
    except BlockingIOError:
        pass
    accept(net, srv)
    _established(net, cli)
    assert cli._sk.conn.options.sndbuf == 65536  # SO_SNDBUF doubled, as Linux; not grown
    assert cli.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 65536


def test_children_inherit_the_listeners_fixed_buffer() -> None:
    net, a, b = _net(65536)
    srv = b.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
    srv.settimeout(0)
    srv.bind((B4, 8080))
    srv.listen(4)
    cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    cli.settimeout(0)
    try:
        cli.connect((B4, 8080))
    except BlockingIOError:
        pass
    child = accept(net, srv)
    _established(net, child)
    assert child._sk.conn.options.sndbuf == 65536
    _established(net, cli)
    assert cli._sk.conn.options.sndbuf > 65536  # the client set nothing: grown
