"""Send-buffer autotuning on the Host (Linux tcp_sndbuf_expand): a connection's buffer
grows at ESTABLISHED unless SO_SNDBUF fixed it (SOCK_SNDBUF_LOCK), and a child inherits
its listener's setting."""

from __future__ import annotations

import socket

from tcp_helpers import B4, accept, connected_pair, listener

from rcunet.host.network import Network

DEFAULT_SNDBUF = 16384  # tcp_wmem[1] (tcp_init_sock)


def _grown(mss_clamp: int) -> int:
    """tcp_sndbuf_expand for IW segments: 2 * 10 * per_mss, per_mss the segment with
    MAX_TCP_HEADER and skb_shared_info rounded up to a power of two, plus struct sk_buff."""
    return 2 * 10 * ((1 << (mss_clamp + 640 - 1).bit_length()) + 256)


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
    assert conn.options.sndbuf == _grown(65536 - 40) == 2626560  # two windows of IW skbs
    assert child._sk.conn.options.sndbuf == 2626560
    cli.send(bytes(512 * 1024))  # far beyond the fixed default, in one call
    assert conn.unacked == 512 * 1024


def test_a_new_socket_has_tcp_wmem_default() -> None:
    net, a, _b = _net(1500)
    sock = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == DEFAULT_SNDBUF


def test_standard_mtu_grows_to_linux_87040() -> None:
    net, a, b = _net(1500)
    _srv, cli, _child = connected_pair(net, a, b)
    assert cli.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 87040 == _grown(1460)


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
