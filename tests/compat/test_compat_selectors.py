"""selectors over 50 rcunet connections, and multicast joined with the 16-byte mreq most
examples pass (``struct.pack("4sl", group, INADDR_ANY)``)."""

from __future__ import annotations

import os
import selectors
import socket
import struct
from typing import Any

from compat_support import ServerThread, sha

import rcunet

CONNECTIONS = 50
PER_CONNECTION = 20000


def _selector_echo(ready: ServerThread) -> None:
    """A single-threaded selectors echo server; ends once all connections closed."""
    selector = selectors.DefaultSelector()
    listener = socket.create_server(("", 7200), backlog=CONNECTIONS)
    listener.setblocking(False)
    selector.register(listener, selectors.EVENT_READ)
    ready.set()
    served = open_now = 0
    while served < CONNECTIONS or open_now:
        for key, _ in selector.select(10):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                conn.setblocking(False)
                selector.register(conn, selectors.EVENT_READ)
                served += 1
                open_now += 1
                continue
            conn = key.fileobj
            data = conn.recv(65536)
            if data:
                conn.setblocking(True)
                conn.sendall(data)
                conn.setblocking(False)
            else:
                selector.unregister(conn)
                conn.close()
                open_now -= 1
    selector.close()
    listener.close()


def test_selectors_50_connections(net: Any) -> None:
    _net, a, b = net
    server = ServerThread(b, _selector_echo)
    payloads = [os.urandom(PER_CONNECTION) for _ in range(CONNECTIONS)]
    with rcunet.patched(a):
        selector = selectors.DefaultSelector()
        echoed: dict[int, bytearray] = {}
        for index, data in enumerate(payloads):
            conn = socket.create_connection(("b", 7200), timeout=20)
            conn.sendall(data)
            conn.setblocking(False)
            echoed[index] = bytearray()
            selector.register(conn, selectors.EVENT_READ, index)
        pending = CONNECTIONS
        while pending:
            events = selector.select(20)
            assert events, "no connection became readable"
            for key, _ in events:
                chunk = key.fileobj.recv(65536)
                echoed[key.data] += chunk
                if len(echoed[key.data]) == PER_CONNECTION:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
                    pending -= 1
        selector.close()
    server.join()
    assert [sha(bytes(echoed[i])) for i in range(CONNECTIONS)] == [sha(p) for p in payloads]


def test_multicast_16_byte_mreq(net: Any) -> None:
    _net, a, b = net
    group = "239.1.2.3"

    def receiver(ready: ServerThread) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", 5007))
        mreq = struct.pack("4sl", socket.inet_aton(group), socket.INADDR_ANY)
        assert len(mreq) == 16
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        sock.settimeout(10)
        ready.set(sock)
        got = [sock.recv(100) for _ in range(3)]
        sock.close()
        if got != [b"one", b"two", b"three"]:
            raise AssertionError(got)

    server = ServerThread(b, receiver)
    with rcunet.patched(a), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 2)
        for word in (b"one", b"two", b"three"):
            sender.sendto(word, (group, 5007))
    server.join()
