"""RFC 862 echo and RFC 863 discard, over TCP and UDP."""

from __future__ import annotations

import socket
from typing import Any

from rcunet.services.base import Service

BUFFER = 65536


class TcpEcho(Service):
    """Every byte received is sent back; the connection ends when the client closes."""

    name = "echo"

    def serve_connection(self, conn: Any, peer: Any) -> None:
        while True:
            data = conn.recv(BUFFER)
            if not data:
                return
            conn.sendall(data)


class TcpDiscard(Service):
    """Every byte received is thrown away."""

    name = "discard"

    def serve_connection(self, conn: Any, peer: Any) -> None:
        while conn.recv(BUFFER):
            pass


class UdpEcho(Service):
    """Each datagram goes back to its sender unchanged."""

    name = "udp-echo"
    kind = socket.SOCK_DGRAM

    def serve_datagrams(self, sock: Any) -> None:
        while not self._stopping.is_set():
            data, peer = sock.recvfrom(BUFFER)
            if self._stopping.is_set():
                return
            sock.sendto(data, peer)
            self._count()


class UdpDiscard(Service):
    """Each datagram is counted and dropped."""

    name = "udp-discard"
    kind = socket.SOCK_DGRAM

    def serve_datagrams(self, sock: Any) -> None:
        while not self._stopping.is_set():
            sock.recvfrom(BUFFER)
            self._count()
