"""Descriptor numbers in drop-in mode behave as Linux's: ``socket.socket(fileno=N)`` is a
second object on number N, ``dup``/``fromfd``/``os.dup`` make new numbers, ``detach``
forgets a number without closing it, ``os.close(N)`` closes it, and the connection closes
with its last descriptor."""

from __future__ import annotations

import errno
import http.client
import os
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from compat_support import ServerThread, sha

import rcunet
from rcunet.api.socket import Socket
from rcunet.services.http import pattern_sha256

TAKEOVER = """\
import socket, threading
listener = socket.create_server(("127.0.0.1", 8123))
got = []

def serve():
    conn, _ = listener.accept()
    while True:
        data = conn.recv(100)
        got.append(data)
        if not data:
            break
    conn.close()

server = threading.Thread(target=serve)
server.start()
cl = socket.create_connection(("127.0.0.1", 8123))
s = socket.socket(fileno=cl.fileno()); s.sendall(b"x\\n"); s.detach()
cl.close()
server.join()
listener.close()
print(got)
"""


def _collecting_server(host: Any) -> ServerThread:
    """Accepts one connection on port 7010 and collects what it reads until EOF."""

    def run(ready: ServerThread) -> None:
        with socket.create_server(("0.0.0.0", 7010)) as listener:
            ready.set([])
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(20)
                while data := conn.recv(65536):
                    ready.value.append(data)

    return ServerThread(host, run)


def test_takeover_under_rcunet_run_ends_with_eof(tmp_path: Path) -> None:
    """The issue's pattern: the server reads b"x\\n", then EOF, and the program ends."""
    (tmp_path / "takeover.py").write_text(TAKEOVER)
    done = subprocess.run([sys.executable, "-m", "rcunet", "run", "--serve", "", "--",
                           "takeover.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[b'x\\n', b'']\n"


def test_takeover_shares_the_number(net: Any) -> None:
    _net, a, b = net
    server = _collecting_server(b)
    with rcunet.patched(a):
        cl = socket.create_connection(("b", 7010), timeout=20)
        s = socket.socket(fileno=cl.fileno())
        assert isinstance(s, Socket) and s.fileno() == cl.fileno()
        s.sendall(b"x\n")
        assert s.detach() == cl.fileno()  # the number, still open
        assert s.fileno() == -1
        cl.sendall(b"y\n")
        cl.close()
    server.join()
    assert b"".join(server.value) == b"x\ny\n"


def test_last_descriptor_closes_the_connection(net: Any) -> None:
    _net, a, b = net
    server = _collecting_server(b)
    with rcunet.patched(a):
        first = socket.create_connection(("b", 7010), timeout=20)
        second = first.dup()
        third = socket.fromfd(first.fileno(), socket.AF_INET, socket.SOCK_STREAM)
        numbers = {first.fileno(), second.fileno(), third.fileno()}
        assert len(numbers) == 3  # three descriptors, three numbers
        first.close()
        second.sendall(b"second\n")
        second.close()
        third.sendall(b"third\n")  # two closed, one open: the connection too
        fourth = os.dup(third.fileno())
        third.close()
        alive = socket.socket(fileno=fourth)
        alive.sendall(b"fourth\n")
        alive.close()  # the last descriptor: FIN
    server.join()
    assert b"".join(server.value) == b"second\nthird\nfourth\n"


def test_os_close_of_a_number_closes_that_descriptor(net: Any) -> None:
    _net, a, b = net
    server = _collecting_server(b)
    with rcunet.patched(a):
        cl = socket.create_connection(("b", 7010), timeout=20)
        cl.sendall(b"before\n")
        os.close(cl.fileno())  # the only descriptor: the connection closes
        server.join()
        with pytest.raises(OSError) as info:
            cl.sendall(b"after\n")
        assert info.value.errno == errno.EBADF
        with pytest.raises(OSError) as info:
            cl.close()  # its number was closed under it: EBADF, as CPython's
        assert info.value.errno == errno.EBADF
    assert b"".join(server.value) == b"before\n"


def test_close_through_a_second_object_breaks_the_first(net: Any) -> None:
    """CPython: ``socket.socket(fileno=s.fileno()).close()`` closes s's number."""
    _net, a, _b = net
    with rcunet.patched(a):
        sock = socket.socket()
        socket.socket(fileno=sock.fileno()).close()
        with pytest.raises(OSError) as info:
            sock.bind(("", 0))
        assert info.value.errno == errno.EBADF
        with pytest.raises(OSError) as info:
            sock.close()
        assert info.value.errno == errno.EBADF
        other = socket.socket()
        socket.close(other.fileno())  # the module's close(fd) too
        with pytest.raises(OSError):
            other.listen(1)


def test_foreign_numbers_get_the_real_module(net: Any) -> None:
    _net, a, _b = net
    left, right = socket.socketpair()
    with rcunet.patched(a):
        real = socket.socket(fileno=os.dup(left.fileno()))
        assert not isinstance(real, Socket) and real.family == socket.AF_UNIX
        real.sendall(b"unix")
        assert right.recv(10) == b"unix"
        real.close()
        pipe_r, pipe_w = os.pipe()
        os.close(pipe_w)  # a foreign number: the real os.close
        assert os.read(pipe_r, 1) == b""
        os.close(pipe_r)
        with pytest.raises(OSError) as info:
            os.close(pipe_r)
        assert info.value.errno == errno.EBADF
    left.close()
    right.close()


def test_detached_number_is_readiness_for_select(net: Any) -> None:
    """The number a program keeps after detach() still polls the socket."""
    _net, a, b = net

    def run(ready: ServerThread) -> None:
        with socket.create_server(("0.0.0.0", 7011)) as listener:
            ready.set()
            conn, _ = listener.accept()
            with conn:
                conn.sendall(b"ping")
                conn.settimeout(20)
                conn.recv(1)

    server = ServerThread(b, run)
    with rcunet.patched(a):
        cl = socket.create_connection(("b", 7011), timeout=20)
        number = cl.detach()
        assert select.select([number], [], [], 20)[0] == [number]
        again = socket.socket(fileno=number)
        assert again.recv(4) == b"ping"
        again.sendall(b"!")
        again.close()
    server.join()


class _ConnectProxy:
    """A CONNECT proxy on port 3128: relays each tunnel's bytes both ways."""

    def __init__(self, host: Any) -> None:
        self.requests: list[bytes] = []
        self.server = ServerThread(host, self._run)

    def _run(self, ready: ServerThread) -> None:
        with socket.create_server(("0.0.0.0", 3128)) as listener:
            ready.set()
            client, _ = listener.accept()
            with client:
                head = client.makefile("rb")
                request = head.readline()
                self.requests.append(request)
                while head.readline() not in (b"\r\n", b""):
                    pass
                target, port = request.split()[1].decode().rsplit(":", 1)
                with socket.create_connection((target, int(port)), timeout=20) as upstream:
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    back = threading.Thread(target=_relay, args=(upstream, client))
                    back.start()
                    _relay(head, upstream)  # what the client sent after its headers
                    back.join(20)

    def join(self) -> None:
        self.server.join()


def _relay(source: Any, sink: socket.socket) -> None:
    read = source.read1 if hasattr(source, "read1") else source.recv
    while data := read(65536):
        sink.sendall(data)
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def test_http_client_connect_tunnel(net: Any) -> None:
    """http.client through set_tunnel: CONNECT to our proxy on b, then GET from b's web
    server (``rcunet.services.http``) over the tunnel."""
    from rcunet.services import start_services

    _net, a, b = net
    services = start_services(b, "http:80")
    proxy = _ConnectProxy(b)
    try:
        with rcunet.patched(a):
            conn = http.client.HTTPConnection("b", 3128, timeout=20)
            conn.set_tunnel("b", 80)
            conn.request("GET", "/bytes/200000", headers={"Connection": "close"})
            response = conn.getresponse()
            body = response.read()
            conn.close()
        proxy.join()
    finally:
        services.stop()
    assert response.status == 200
    assert [r.split()[:2] for r in proxy.requests] == [[b"CONNECT", b"b:80"]]
    assert sha(body) == pattern_sha256(200000)
