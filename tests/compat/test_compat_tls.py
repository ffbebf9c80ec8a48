"""TLS over rcunet sockets: ssl.SSLContext.wrap_socket in drop-in mode returns the rcunet
TLS socket (SSLObject over MemoryBIO) with SSLSocket's interface."""

from __future__ import annotations

import selectors
import socket
import ssl
import threading
from typing import Any

import pytest
import trustme
from compat_support import ServerThread, sha

import rcunet
from rcunet.api.tls import TlsSocket


@pytest.fixture(scope="module")
def contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.minimum_version = ssl.TLSVersion.TLSv1_3
    ca.issue_cert("b").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


def _echo_server(host: Any, context: ssl.SSLContext) -> ServerThread:
    def run(ready: ServerThread) -> None:
        with context.wrap_socket(socket.create_server(("", 4433)), server_side=True) as tls:
            ready.set()
            conn, _ = tls.accept()
            while data := conn.recv(65536):
                conn.sendall(data)
            conn.unwrap().close()  # the peer's close_notify came: answer it

    return ServerThread(host, run)


def test_tls13_echo_1mb(net: Any, payload: bytes, contexts: Any) -> None:
    _net, a, b = net
    server_ctx, client_ctx = contexts
    server = _echo_server(b, server_ctx)
    with rcunet.patched(a), socket.create_connection(("b", 4433), timeout=20) as raw:
        raw_fd = raw.fileno()
        with client_ctx.wrap_socket(raw, server_hostname="b") as tls:
            assert isinstance(tls, TlsSocket)
            assert tls.version() == "TLSv1.3"
            assert tls.getpeercert()["subjectAltName"] == (("DNS", "b"),)
            assert tls.fileno() == raw_fd  # the readiness fd survives the wrap
            got = bytearray()
            reader = threading.Thread(target=lambda: [
                got.extend(tls.recv(65536)) for _ in iter(lambda: len(got) < len(payload), False)])
            reader.start()
            tls.sendall(payload)
            reader.join(20)
            tls.unwrap().close()  # close_notify both ways, then the plain socket
    server.join()
    assert sha(bytes(got)) == sha(payload)


def test_tls_nonblocking_handshake_wants_read(net: Any, contexts: Any) -> None:
    _net, a, b = net
    server_ctx, client_ctx = contexts
    server = _echo_server(b, server_ctx)
    with rcunet.patched(a), socket.create_connection(("b", 4433), timeout=20) as raw:
        raw.setblocking(False)
        tls = client_ctx.wrap_socket(raw, server_hostname="b", do_handshake_on_connect=False)
        selector = selectors.DefaultSelector()
        selector.register(tls, selectors.EVENT_READ)
        wanted_read = 0
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                wanted_read += 1
                assert selector.select(10)
        assert wanted_read >= 1
        tls.setblocking(True)
        tls.sendall(b"ping")
        assert tls.recv(4) == b"ping"
        selector.close()
        tls.unwrap().close()
    server.join()


def test_tls_garbage_peer_raises_ssl_error(net: Any, contexts: Any) -> None:
    _net, a, b = net
    _server_ctx, client_ctx = contexts

    def garbage(ready: ServerThread) -> None:
        with socket.create_server(("", 4434)) as listener:
            ready.set()
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.0 400 not TLS\r\n\r\n" * 20)

    server = ServerThread(b, garbage)
    with rcunet.patched(a):
        raw = socket.create_connection(("b", 4434), timeout=20)
        with pytest.raises(ssl.SSLError):
            client_ctx.wrap_socket(raw, server_hostname="b")
        assert raw.fileno() == -1  # closed cleanly by the failed wrap, as CPython does
    server.join()


def test_https_server_and_urllib(net: Any, payload: bytes, contexts: Any) -> None:
    """http.server behind ctx.wrap_socket and urllib.request over HTTPS: makefile() on
    both TLS ends, http.client's deferred close over TLS."""
    import http.server
    import urllib.request

    _net, a, b = net
    server_ctx, client_ctx = contexts

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    def run(ready: ServerThread) -> None:
        server = http.server.ThreadingHTTPServer(("", 4443), Handler)
        server.socket = server_ctx.wrap_socket(server.socket, server_side=True)
        ready.set(server)
        with server:
            server.serve_forever(poll_interval=0.05)

    server = ServerThread(b, run)
    try:
        with rcunet.patched(a):
            with urllib.request.urlopen("https://b:4443/", context=client_ctx,
                                        timeout=20) as response:
                body = response.read()
    finally:
        server.value.shutdown()
        server.join()
    assert sha(body) == sha(payload)
