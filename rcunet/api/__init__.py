"""The user-facing socket API, compatible with Python's ``socket`` module."""

from typing import Any

from rcunet.api.socket import Socket
from rcunet.host.host import register_socket_factory

register_socket_factory(Socket)  # Host.socket() makes these (the host never imports us)


def host_socket(sock: Socket) -> Any:
    """The Host-level socket under ``sock`` (``TcpSock`` or ``UdpSock``: its table entry,
    engine, lock statistics), for labs and tests that look at the stack's own state."""
    return sock._sk
