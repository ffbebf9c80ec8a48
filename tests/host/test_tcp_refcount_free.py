"""A closed TCP socket is freed by reference counting the moment its last user lets go,
with the cyclic garbage collector off: no reference cycle (socket lock callbacks, timer
callbacks) keeps it alive.  tcp_crr opens and closes a connection per transaction; when
every socket waited for the collector, collections scanning the Hosts' tables took a
large share of its CPU."""

from __future__ import annotations

import gc
import socket
import struct
from collections.abc import Iterator

import pytest

from rcunet.host.network import Network
from rcunet.host.tcp.sock import TcpSock

A4, B4 = "10.0.0.1", "10.0.0.2"
PORT = 9100
LINGER_ABORT = struct.pack("ii", 1, 0)


@pytest.fixture
def hosts() -> Iterator[tuple[object, object]]:
    net = Network(threaded=True)
    a, b = net.host("a"), net.host("b")
    net.link(a, b, [f"{A4}/24"], [f"{B4}/24"], inline_rx=True)
    net.start()
    try:
        yield a, b
    finally:
        net.close()


def _live_sockets() -> list[TcpSock]:
    """Every TcpSock still allocated.  Not weak references: a compiled (mypyc) TcpSock
    has no ``__weakref__``; the collector still tracks every container object, enabled
    or not."""
    return [obj for obj in gc.get_objects() if isinstance(obj, TcpSock)]


def _transaction(a: object, srv: object, *, abort: bool) -> None:
    """One tcp_crr transaction, both ends closed."""
    cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)  # type: ignore[attr-defined]
    cli.settimeout(5)
    cli.connect((B4, PORT))
    child, _ = srv.accept()  # type: ignore[attr-defined]
    child.settimeout(5)
    cli.sendall(b"request")
    assert child.recv(64) == b"request"
    child.sendall(b"response")
    assert cli.recv(64) == b"response"
    if abort:
        cli.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ABORT)  # RST, as neper
        cli.close()
        child.close()
    else:
        child.close()  # the server closes first: it keeps the TIME_WAIT entry
        assert cli.recv(64) == b""
        cli.close()


@pytest.mark.parametrize("abort", [True, False], ids=["rst", "fin"])
def test_closed_sockets_are_freed_without_the_collector(hosts: tuple[object, object],
                                                        abort: bool) -> None:
    a, b = hosts
    srv = b.socket(socket.AF_INET, socket.SOCK_STREAM)  # type: ignore[attr-defined]
    srv.settimeout(5)
    srv.bind((B4, PORT))
    srv.listen(16)
    _transaction(a, srv, abort=abort)  # warm-up: per-thread caches and pools exist
    gc.collect()
    before = {id(sk): sk for sk in _live_sockets()}  # held: no id is reused meanwhile
    gc.disable()
    try:
        for _ in range(3):
            _transaction(a, srv, abort=abort)
        alive = [sk for sk in _live_sockets() if before.get(id(sk)) is not sk]
    finally:
        gc.enable()
    assert alive == [], f"closed sockets kept alive by a reference cycle: {alive}"
    srv.close()
