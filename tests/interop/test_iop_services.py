"""The built-in services on an in-memory network (no root needed): HTTP/1.1 persistence
rules, 100-continue, error statuses, echo/discard, start/stop semantics."""

from __future__ import annotations

import errno
import hashlib
import socket
from collections.abc import Iterator

import pytest

from rcunet.host.host import Host
from rcunet.host.network import Network
from rcunet.services import parse_specs, start_services
from rcunet.services.http import pattern_sha256

NEEDS_ROOT = False


@pytest.fixture
def hosts() -> Iterator[tuple[Host, Host]]:
    net, client, server = Network.two_hosts(threaded=True)
    net.start()
    try:
        yield client, server
    finally:
        net.close()


def _conn(client: Host, port: int, version: int = 4):  # type: ignore[no-untyped-def]
    family = socket.AF_INET if version == 4 else socket.AF_INET6
    sock = client.socket(family, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(("10.0.0.2" if version == 4 else "fd00::2", port))
    return sock


class Reader:
    """Reads HTTP responses (head + Content-Length body) off one connection."""

    def __init__(self, sock) -> None:  # type: ignore[no-untyped-def]
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def response(self, head_only: bool = False) -> tuple[str, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), f"EOF inside a response head: {self.buffer!r}"
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = 0 if head_only else int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            assert self._fill(), "EOF inside a response body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return lines[0], headers, body

    def at_eof(self) -> bool:
        return not self.buffer and not self._fill()


def test_parse_specs() -> None:
    assert parse_specs("echo:7, http:80,udp-echo:7") == [("echo", 7), ("http", 80),
                                                         ("udp-echo", 7)]
    for bad, message in [("gopher:70", "unknown service"), ("echo", "NAME:PORT"),
                         ("echo:0", "NAME:PORT"), ("echo:7,discard:7", "taken")]:
        with pytest.raises(ValueError, match=message):
            parse_specs(bad)


@pytest.mark.parametrize("version", [4, 6])
def test_http11_keeps_the_connection_and_pipelines(hosts, version: int) -> None:  # type: ignore[no-untyped-def]
    client, server = hosts
    with start_services(server, "http:80"), _conn(client, 80, version) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /bytes/70000 HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reader = Reader(sock)
        status, headers, body = reader.response()
        assert status == "HTTP/1.1 200 OK" and body == b"rcunet http responder\n"
        assert "connection" not in headers  # persistent by default in 1.1
        status, _, body = reader.response()
        assert hashlib.sha256(body).hexdigest() == pattern_sha256(70000)
        status, headers, _ = reader.response()
        assert status.startswith("HTTP/1.1 404") and headers["connection"] == "close"
        assert reader.at_eof()  # the server closed after "Connection: close"


def test_http10_closes_unless_keep_alive(hosts) -> None:  # type: ignore[no-untyped-def]
    client, server = hosts
    with start_services(server, "http:80"):
        with _conn(client, 80) as sock:
            sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
            reader = Reader(sock)
            _, headers, _ = reader.response()
            assert headers["connection"] == "close" and reader.at_eof()
        with _conn(client, 80) as sock:
            reader = Reader(sock)
            for _ in range(2):
                sock.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                _, headers, _ = reader.response()
                assert headers["connection"] == "keep-alive"


def test_upload_with_100_continue_returns_the_digest(hosts) -> None:  # type: ignore[no-untyped-def]
    client, server = hosts
    body = bytes(range(256)) * 4000
    with start_services(server, "http:80"), _conn(client, 80) as sock:
        sock.sendall(b"POST /sha256 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        reader = Reader(sock)
        status, _, _ = reader.response(head_only=True)
        assert status == "HTTP/1.1 100 Continue"
        sock.sendall(body)
        status, _, answer = reader.response()
        assert status == "HTTP/1.1 200 OK"
        assert answer.decode().split() == [hashlib.sha256(body).hexdigest(), str(len(body))]


@pytest.mark.parametrize("request_bytes, status", [
    (b"garbage\r\n\r\n", "400"),
    (b"POST /sha256 HTTP/1.1\r\nHost: x\r\n\r\n", "411"),
    (b"POST /sha256 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "501"),
    (b"GET / HTTP/1.1\r\nbad header line\r\n\r\n", "400"),
])
def test_bad_requests_get_an_error_and_a_close(hosts, request_bytes: bytes, status: str) -> None:  # type: ignore[no-untyped-def]
    client, server = hosts
    with start_services(server, "http:80"), _conn(client, 80) as sock:
        sock.sendall(request_bytes)
        reader = Reader(sock)
        line, headers, _ = reader.response()
        assert line.split()[1] == status and headers["connection"] == "close"
        assert reader.at_eof()


def test_head_and_method_not_allowed(hosts) -> None:  # type: ignore[no-untyped-def]
    client, server = hosts
    with start_services(server, "http:80"), _conn(client, 80) as sock:
        reader = Reader(sock)
        sock.sendall(b"HEAD /bytes/5000 HTTP/1.1\r\n\r\n")
        _, headers, _ = reader.response(head_only=True)
        assert headers["content-length"] == "5000"
        sock.sendall(b"DELETE / HTTP/1.1\r\n\r\n")
        line, _, _ = reader.response()
        assert line.startswith("HTTP/1.1 405")


def test_echo_discard_and_udp_services(hosts) -> None:  # type: ignore[no-untyped-def]
    client, server = hosts
    with start_services(server, "echo:7,discard:9,udp-echo:7,udp-discard:9") as services:
        with _conn(client, 7, 6) as sock:
            sock.sendall(b"x" * 30_000)  # within the buffers: no reader needed
            sock.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := sock.recv(65536):
                got += chunk
            assert got == b"x" * 30_000
        with _conn(client, 9) as sock:
            sock.sendall(b"y" * 10_000)
        udp = client.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.settimeout(5)
        udp.sendto(b"ping", ("10.0.0.2", 7))
        assert udp.recvfrom(100)[0] == b"ping"
        udp.sendto(b"void", ("10.0.0.2", 9))
        udp.close()
        by_name = {s.name: s for s in services.services}
        assert by_name["udp-echo"].served == 1
    assert by_name["echo"].served == 1 and by_name["discard"].served == 1


def test_start_rolls_back_when_a_port_is_taken(hosts) -> None:  # type: ignore[no-untyped-def]
    _client, server = hosts
    squatter = server.socket(socket.AF_INET, socket.SOCK_DGRAM)
    squatter.bind(("0.0.0.0", 7))
    try:
        with pytest.raises(OSError) as info:
            start_services(server, "echo:7,udp-echo:7")
        assert info.value.errno == errno.EADDRINUSE
        # the TCP echo started first was stopped: its port is free again
        listener = server.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("0.0.0.0", 7))
        listener.close()
    finally:
        squatter.close()


def test_stop_ends_idle_connections_with_a_fin(hosts) -> None:  # type: ignore[no-untyped-def]
    client, server = hosts
    services = start_services(server, "echo:7")
    with _conn(client, 7) as sock:
        sock.sendall(b"hi")
        assert sock.recv(10) == b"hi"
        services.stop()
        assert sock.recv(10) == b""  # the blocked server thread was woken and closed
