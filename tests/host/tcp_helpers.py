"""Helpers for deterministic TCP tests: non-blocking rcunet sockets driven by
``Network.run_until`` (a virtual clock; blocking calls cannot be used there)."""

from __future__ import annotations

import socket
from typing import Any

from rcunet.host.network import Network
from rcunet.tables.entry import TimeWaitEntry

A4, B4 = "10.0.0.1", "10.0.0.2"
A6, B6 = "fd00::1", "fd00::2"


def listener(host: Any, family: int, address: str, port: int, backlog: int = 16) -> Any:
    srv = host.socket(family, socket.SOCK_STREAM)
    srv.settimeout(0)
    srv.bind((address, port))
    srv.listen(backlog)
    return srv


def start_connect(host: Any, family: int, address: str, port: int) -> Any:
    cli = host.socket(family, socket.SOCK_STREAM)
    cli.settimeout(0)
    try:
        cli.connect((address, port))
    except BlockingIOError:
        pass
    return cli


def accept(net: Network, srv: Any, timeout: float = 5.0) -> Any:
    box: list[Any] = []

    def ready() -> bool:
        try:
            box.append(srv.accept()[0])
        except BlockingIOError:
            return False
        return True

    assert net.run_until(ready, timeout), "no connection was accepted"
    child = box[0]
    child.settimeout(0)
    return child


def connected_pair(net: Network, a: Any, b: Any, family: int = socket.AF_INET,
                   port: int = 8080) -> tuple[Any, Any, Any]:
    addr = B4 if family == socket.AF_INET else B6
    srv = listener(b, family, addr, port)
    cli = start_connect(a, family, addr, port)
    child = accept(net, srv)
    assert net.run_until(lambda: cli.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                         and _established(cli), 5)
    return srv, cli, child


def _established(sock: Any) -> bool:
    conn = sock._sk.conn
    return conn is not None and conn.state.synchronized


def recv_exactly(net: Network, sock: Any, n: int, timeout: float = 30.0) -> bytes:
    got = bytearray()

    def ready() -> bool:
        while len(got) < n:
            try:
                chunk = sock.recv(min(65536, n - len(got)))
            except BlockingIOError:
                return False
            if not chunk:
                return True
            got.extend(chunk)
        return True

    assert net.run_until(ready, timeout), f"received {len(got)} of {n} bytes"
    return bytes(got)


def send_all(net: Network, sock: Any, data: bytes, timeout: float = 30.0) -> None:
    view = memoryview(data)
    sent = 0

    def ready() -> bool:
        nonlocal sent
        while sent < len(view):
            try:
                sent += sock.send(view[sent:sent + 262144])
            except BlockingIOError:
                return False
        return True

    assert net.run_until(ready, timeout), f"sent {sent} of {len(data)} bytes"


def wait_eof(net: Network, sock: Any, timeout: float = 10.0) -> None:
    def ready() -> bool:
        try:
            return sock.recv(65536) == b""
        except BlockingIOError:
            return False

    assert net.run_until(ready, timeout)


def time_wait_entries(host: Any) -> list[TimeWaitEntry]:
    return [e for e in host.tcp.hashinfo.ehash.entries() if isinstance(e, TimeWaitEntry)]


def assert_no_leaks(*hosts: Any) -> None:
    """Every socket released, every table empty, every port free."""
    for host in hosts:
        tcp = host.tcp
        assert not tcp.sockets, f"{host.name}: sockets left {tcp.sockets}"
        assert len(tcp.hashinfo.ehash) == 0, list(tcp.hashinfo.ehash.entries())
        assert tcp.hashinfo.bind.ports_in_use() == set()
        assert tcp.hashinfo.listen.listeners() == []


def transfer(net: Network, src: Any, dst: Any, data: bytes, timeout: float = 60.0) -> bytes:
    """Send ``data`` from ``src`` while ``dst`` reads it; return what ``dst`` got."""
    view = memoryview(data)
    sent = 0
    got = bytearray()

    def ready() -> bool:
        nonlocal sent
        while sent < len(view):
            try:
                sent += src.send(view[sent:sent + 262144])
            except BlockingIOError:
                break
        while len(got) < len(data):
            try:
                chunk = dst.recv(262144)
            except BlockingIOError:
                break
            if not chunk:
                break
            got.extend(chunk)
        return len(got) >= len(data)

    assert net.run_until(ready, timeout), f"sent {sent}, received {len(got)} of {len(data)}"
    return bytes(got)


def spend_quickacks(sock: Any) -> None:
    """Leave the connection's quick-ack mode as 16 ACKed segments would (Linux
    tcp_dec_quickack_mode): a new connection ACKs its first segments one by one
    (tcp_incr_quickack), and tests that need a delayed ACK start past that."""
    conn = sock._sk.conn
    conn.delack.leave_quickack_mode(conn.options, conn._now)
