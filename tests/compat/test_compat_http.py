"""http.server, urllib.request, http.client, requests and urllib3, unmodified, over rcunet."""

from __future__ import annotations

import hashlib
import http.client
import http.server
import threading
import time
import urllib.request
from typing import Any

import pytest
import requests
import urllib3
from compat_support import ServerThread, sha

import rcunet


def _handler(payload: bytes, version: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = version

        def do_GET(self) -> None:
            if self.path == "/slow":
                time.sleep(1.5)
            body = payload if self.path != "/small" else b"hello"
            self.send_response(200)
            if version == "HTTP/1.1":
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            answer = hashlib.sha256(body).hexdigest().encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def _http_server(host: Any, payload: bytes, version: str) -> ServerThread:
    def run(ready: ServerThread) -> None:
        server = http.server.ThreadingHTTPServer(("", 8080), _handler(payload, version))
        ready.set(server)
        with server:
            server.serve_forever(poll_interval=0.05)

    return ServerThread(host, run)


def _stop(server: ServerThread) -> None:
    server.value.shutdown()
    server.join()


def test_urllib_http10_1mb(net: Any, payload: bytes) -> None:
    """An HTTP/1.0 response without Content-Length: http.client closes the socket after
    the headers and reads the body to EOF through the file (the deferred close)."""
    _net, a, b = net
    server = _http_server(b, payload, "HTTP/1.0")
    try:
        with rcunet.patched(a):
            with urllib.request.urlopen("http://b:8080/", timeout=20) as response:
                assert response.version == 10
                body = response.read()
    finally:
        _stop(server)
    assert sha(body) == sha(payload)


def test_http_client_keep_alive(net: Any, payload: bytes) -> None:
    _net, a, b = net
    server = _http_server(b, payload, "HTTP/1.1")
    try:
        with rcunet.patched(a):
            conn = http.client.HTTPConnection("b", 8080, timeout=20)
            bodies, ports = [], set()
            for _ in range(3):
                conn.request("GET", "/")
                bodies.append(conn.getresponse().read())
                ports.add(conn.sock.getsockname()[1])
            conn.close()
    finally:
        _stop(server)
    assert [sha(b) for b in bodies] == [sha(payload)] * 3
    assert len(ports) == 1  # one connection served all three


def test_requests_get_stream_post_timeout(net: Any, payload: bytes) -> None:
    _net, a, b = net
    server = _http_server(b, payload, "HTTP/1.1")
    try:
        with rcunet.patched(a), requests.Session() as session:
            got = session.get("http://b:8080/", timeout=20)
            assert got.status_code == 200 and sha(got.content) == sha(payload)
            streamed = session.get("http://b:8080/", stream=True, timeout=20)
            chunks = b"".join(streamed.iter_content(chunk_size=32768))
            assert sha(chunks) == sha(payload)
            posted = session.post("http://b:8080/", data=payload, timeout=20)
            assert posted.text == sha(payload)
            with pytest.raises(requests.exceptions.ReadTimeout):
                session.get("http://b:8080/slow", timeout=0.3)
    finally:
        _stop(server)


def test_urllib3_get_stream_post_timeout(net: Any, payload: bytes) -> None:
    _net, a, b = net
    server = _http_server(b, payload, "HTTP/1.1")
    try:
        with rcunet.patched(a), urllib3.PoolManager() as pool:
            got = pool.request("GET", "http://b:8080/", timeout=20)
            assert sha(got.data) == sha(payload)
            streamed = pool.request("GET", "http://b:8080/", preload_content=False, timeout=20)
            body = b"".join(streamed.stream(65536))
            streamed.release_conn()
            assert sha(body) == sha(payload)
            posted = pool.request("POST", "http://b:8080/", body=payload, timeout=20)
            assert posted.data.decode() == sha(payload)
            with pytest.raises(urllib3.exceptions.ReadTimeoutError):
                pool.request("GET", "http://b:8080/slow", timeout=0.3, retries=False)
    finally:
        _stop(server)


def test_names_resolve_and_unknown_names_fail(net: Any) -> None:
    import socket

    _net, a, _b = net
    with rcunet.patched(a):
        assert socket.gethostbyname("b") == "10.0.0.2"
        assert socket.gethostname() == "a"
        assert socket.gethostbyaddr("10.0.0.2")[0] == "b"
        families = {info[0] for info in socket.getaddrinfo("b", 80)}
        assert families == {socket.AF_INET, socket.AF_INET6}
        with pytest.raises(socket.gaierror) as info:
            socket.getaddrinfo("nosuchhost", 80)
        assert info.value.errno == socket.EAI_NONAME
        with pytest.raises(socket.gaierror):
            socket.create_connection(("nosuchhost", 80), timeout=1)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("localhost", 9), timeout=5)


def test_thread_count_returns(net: Any) -> None:
    """A threaded server started and stopped under the patch leaves no thread behind."""
    _net, _a, b = net
    before = threading.active_count()
    _stop(_http_server(b, b"x", "HTTP/1.1"))
    assert threading.active_count() <= before
