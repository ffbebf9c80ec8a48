"""Child functions for tests/host/test_busypoll.py (importable by name)."""

from __future__ import annotations

import socket
from typing import Any


def serve_on_request(child: Any, address: str, port: int) -> int:
    """Accept one connection; send each message the parent sends (bytes) on it, until
    the parent sends None; then close.  Returns how many bytes it sent."""
    server = child.host.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind((address, port))
    server.listen(1)
    child.report(("listening", port))
    conn, _peer = server.accept()
    sent = 0
    while True:
        message = child.recv(timeout=60)
        if message is None:
            break
        conn.sendall(message)
        sent += len(message)
        child.report(("sent", sent))
    conn.close()
    server.close()
    return sent
