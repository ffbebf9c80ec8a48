"""recv(MSG_PEEK) on TCP sockets: the bytes recv() would return, left queued (Linux
tcp_recvmsg with peek_seq), with MSG_WAITALL and MSG_DONTWAIT as Linux combines them."""

from __future__ import annotations

import socket
import threading

import pytest
from tcp_helpers import connected_pair, recv_exactly, send_all

from rcunet.host.network import Network


def test_peek_leaves_the_bytes_for_the_next_recv() -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    send_all(net, cli, b"hello, world")
    assert net.run_until(lambda: child._sk.conn.readable == 12, 5)
    assert child.recv(5, socket.MSG_PEEK) == b"hello"
    assert child.recv(100, socket.MSG_PEEK) == b"hello, world"  # again, and all of it
    buf = bytearray(5)
    assert child.recv_into(buf, 5, socket.MSG_PEEK) == 5 and buf == b"hello"
    assert child.recv(7) == b"hello, "  # the queue was untouched
    assert child.recv(100, socket.MSG_PEEK) == b"world"
    assert recv_exactly(net, child, 5) == b"world"
    with pytest.raises(BlockingIOError):
        child.recv(10, socket.MSG_PEEK)  # empty: the socket is non-blocking
    cli.shutdown(socket.SHUT_WR)
    assert net.run_until(lambda: child._sk.conn.state.fin_received, 5)
    assert child.recv(10, socket.MSG_PEEK) == b""  # EOF peeks as EOF
    for s in (cli, child, srv):
        s.close()


def test_peek_spans_segments_without_consuming_them() -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    data = bytes(range(256)) * 40  # several segments
    send_all(net, cli, data)
    assert net.run_until(lambda: child._sk.conn.readable == len(data), 5)
    window = child._sk.conn._window_field()
    assert child.recv(len(data), socket.MSG_PEEK) == data
    assert child._sk.conn._window_field() == window  # nothing read: the window stays
    assert recv_exactly(net, child, len(data)) == data
    for s in (cli, child, srv):
        s.close()


def test_peek_waitall_waits_for_the_whole_request() -> None:
    net, a, b = Network.two_hosts(threaded=True)
    with net.start():
        srv = b.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.bind(("10.0.0.2", 9000))
        srv.listen()
        cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)
        cli.connect(("10.0.0.2", 9000))
        child, _ = srv.accept()
        child.settimeout(5)
        cli.sendall(b"abc")
        later = threading.Timer(0.1, cli.sendall, (b"defgh",))
        later.start()
        assert child.recv(8, socket.MSG_PEEK | socket.MSG_WAITALL) == b"abcdefgh"
        later.join()
        assert child.recv(8, socket.MSG_WAITALL) == b"abcdefgh"
        for s in (cli, child, srv):
            s.close()
