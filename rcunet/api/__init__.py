"""The user-facing socket API, compatible with Python's ``socket`` module."""

from typing import Any

from rcunet.api import tls as _tls  # noqa: F401  (see below)
from rcunet.api.socket import Socket
from rcunet.host.host import register_socket_factory

__all__ = ["Socket", "host_socket"]

register_socket_factory(Socket)  # Host.socket() makes these (the host never imports us)

# ``ctx.wrap_socket(rcunet_socket)`` gives rcunet's TLS socket, patched or not (the real
# SSLSocket would take the readiness fd over and speak TLS into it): importing api/tls.py
# installs that hook.  It is imported here, not by api/socket.py, which tls itself needs:
# every import of rcunet.api.socket runs this package first.


def host_socket(sock: Socket) -> Any:
    """The Host-level socket under ``sock`` (``TcpSock`` or ``UdpSock``: its table entry,
    engine, lock statistics), for labs and tests that look at the stack's own state."""
    return sock._sk
