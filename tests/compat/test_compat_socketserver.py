"""socketserver's TCP and UDP servers with stream and datagram handlers, unmodified."""

from __future__ import annotations

import socket
import socketserver
import threading
from typing import Any

from compat_support import ServerThread, sha

import rcunet


class _LineEcho(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        for line in self.rfile:
            self.wfile.write(line)


class _DatagramUpper(socketserver.DatagramRequestHandler):
    def handle(self) -> None:
        self.wfile.write(self.rfile.read().upper())


def _serve(host: Any, server_class: Any, handler: Any) -> ServerThread:
    def run(ready: ServerThread) -> None:
        with server_class(("0.0.0.0", 7007), handler) as server:
            ready.set(server)
            server.serve_forever(poll_interval=0.05)

    return ServerThread(host, run)


def test_tcp_stream_handler_lines(net: Any, payload: bytes) -> None:
    _net, a, b = net
    lines = payload.hex().encode()
    lines = b"\n".join(lines[i:i + 1000] for i in range(0, len(lines), 1000)) + b"\n"
    server = _serve(b, socketserver.ThreadingTCPServer, _LineEcho)
    try:
        with rcunet.patched(a), socket.create_connection(("b", 7007), timeout=20) as conn:
            reader = conn.makefile("rb")
            got: list[bytes] = []
            drain = threading.Thread(target=lambda: got.append(reader.read()))
            drain.start()  # the echo comes back while we send: read it meanwhile
            conn.sendall(lines)
            conn.shutdown(socket.SHUT_WR)
            drain.join(20)
            reader.close()
            echoed = got[0]
    finally:
        server.value.shutdown()
        server.join()
    assert sha(echoed) == sha(lines)


def test_udp_datagram_handler(net: Any) -> None:
    _net, a, b = net
    server = _serve(b, socketserver.UDPServer, _DatagramUpper)
    try:
        with rcunet.patched(a), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(10)
            answers = []
            for word in (b"alpha", b"beta", b"gamma"):
                sock.sendto(word, ("b", 7007))
                data, source = sock.recvfrom(100)
                answers.append(data)
            assert source == ("10.0.0.2", 7007)
    finally:
        server.value.shutdown()
        server.join()
    assert answers == [b"ALPHA", b"BETA", b"GAMMA"]
