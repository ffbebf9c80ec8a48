"""Subclasses of ``socket.socket`` defined while patched make rcunet sockets and keep
their own methods (libraries define them: logging sockets, tests' mocks)."""

from __future__ import annotations

import errno
import socket
from typing import Any

import pytest
from compat_support import ServerThread, sha

import rcunet
from rcunet.api.socket import Socket


def _hashing_server(host: Any, port: int) -> ServerThread:
    """Reads one connection to EOF, answers the SHA-256 of what it read."""

    def run(ready: ServerThread) -> None:
        with socket.create_server(("0.0.0.0", port)) as listener:
            ready.set()
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(20)
                got = bytearray()
                while data := conn.recv(65536):
                    got += data
                conn.sendall(sha(bytes(got)).encode())

    return ServerThread(host, run)


def test_subclass_keeps_its_methods_and_talks_rcunet(net: Any, payload: bytes) -> None:
    _net, a, b = net
    server = _hashing_server(b, 7020)
    with rcunet.patched(a):

        class Counting(socket.socket):
            """Counts the bytes it sends, through super()."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self.sent = 0

            def sendall(self, data: Any, flags: int = 0) -> None:
                self.sent += len(data)
                super().sendall(data, flags)

            def label(self) -> str:
                return f"counting {self.getsockname()[0]}"

        sock = Counting(socket.AF_INET, socket.SOCK_STREAM)
        assert isinstance(sock, Socket) and isinstance(sock, socket.socket)
        sock.settimeout(20)
        sock.connect(("b", 7020))
        assert sock.label() == "counting 10.0.0.1"
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        reader = sock.makefile("rb")
        answer = reader.read().decode()
        reader.close()
        twin = sock.dup()
        assert type(twin) is Counting and twin.sent == 0  # CPython's dup: the same class
        twin.close()
        sock.close()
        assert sock.sent == len(payload)
        plain = socket.socket()
        assert not isinstance(plain, Counting)  # only its own instances
        plain.close()
    server.join()
    assert answer == sha(payload)


def test_subclass_replacing_socket_socket(net: Any, monkeypatch: Any) -> None:
    """The stdlib builds on ``socket.socket``: a subclass put there is what
    ``create_connection`` makes (CPython's own tests mock timeouts this way)."""
    _net, a, _b = net
    with rcunet.patched(a):

        class TimingOut(socket.socket):
            def connect(self, address: Any) -> None:
                raise TimeoutError("timed out (by the subclass)")

        monkeypatch.setattr(socket, "socket", TimingOut)
        with pytest.raises(TimeoutError, match="by the subclass"):
            socket.create_connection(("b", 7))


def test_subclass_of_other_families_is_refused_clearly(net: Any) -> None:
    _net, a, _b = net
    with rcunet.patched(a):

        class Unix(socket.socket):
            pass

        with pytest.raises(OSError) as info:
            Unix(socket.AF_UNIX, socket.SOCK_STREAM)
        assert info.value.errno == errno.EAFNOSUPPORT
        assert "makes only AF_INET and AF_INET6" in str(info.value)
        udp = Unix(socket.AF_INET6, socket.SOCK_DGRAM)
        assert udp.family == socket.AF_INET6 and udp.type == socket.SOCK_DGRAM
        udp.close()
