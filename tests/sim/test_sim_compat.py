"""The programs of tests/compat under simulation, with 5% loss and 50 ms delay: every
payload checked by hash; the same seed twice gives the same pcap, another seed another.

TLS is the exception the fidelity ledger names: OpenSSL draws its randoms (client and
server randoms, key shares, signatures) from its own generator, which no seed reaches,
and the handshake's sizes vary by a byte from run to run: a TLS run is checked by its
payload's hash, not by its pcap."""

from __future__ import annotations

import http.server
import io
import random
import socket
import socketserver
import ssl
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import requests
import trustme
from sim_support import LOSSY, sha, two_hosts

from rcunet.link.pcap import PcapWriter

Scenario = Callable[[Any, Any, Any], Callable[[], bool]]


def _run(scenario: Scenario, seed: int, path: str) -> bytes:
    """Run ``scenario(sim, a, b)`` (which spawns programs and returns the check of
    their results) on a fresh simulation; the pcap's bytes."""
    sim, a, b = two_hosts(seed, LOSSY)
    pcap = PcapWriter(path)
    for link in sim.network.links:
        link.tap = pcap
    check = scenario(sim, a, b)
    assert sim.run()
    sim.close()
    pcap.close()
    assert check()
    with open(path, "rb") as file:
        return file.read()


def _same_seed_same_pcap(scenario: Scenario, tmp_path: Any) -> None:
    first = _run(scenario, 21, str(tmp_path / "a.pcap"))
    assert _run(scenario, 21, str(tmp_path / "b.pcap")) == first
    assert _run(scenario, 22, str(tmp_path / "c.pcap")) != first


def _payload(size: int) -> bytes:
    return random.Random(size).randbytes(size)


# -- http.server with urllib and requests --------------------------------------------------
class _Files(http.server.BaseHTTPRequestHandler):
    body = _payload(1 << 20)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def _http_server() -> None:
    with http.server.ThreadingHTTPServer(("0.0.0.0", 8000), _Files) as server:
        server.serve_forever()


def _http(fetch: Callable[[str], bytes]) -> Scenario:
    def scenario(sim: Any, a: Any, b: Any) -> Callable[[], bool]:
        sim.spawn(b, _http_server, daemon=True)
        client = sim.spawn(a, fetch, "http://10.0.0.2:8000/file")
        return lambda: client.result == sha(_Files.body)

    return scenario


def _urllib_fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=300) as response:
        return sha(response.read())


def _requests_fetch(url: str) -> str:
    return sha(requests.get(url, timeout=300).content)


def test_http_server_with_urllib_1mb(tmp_path: Any) -> None:
    _same_seed_same_pcap(_http(_urllib_fetch), tmp_path)


def test_http_server_with_requests(tmp_path: Any) -> None:
    _same_seed_same_pcap(_http(_requests_fetch), tmp_path)


# -- socketserver ---------------------------------------------------------------------------
class _LineEcho(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        for line in self.rfile:
            self.wfile.write(line)


class _DatagramUpper(socketserver.DatagramRequestHandler):
    def handle(self) -> None:
        self.wfile.write(self.rfile.read().upper())


def _serve(server_class: Any, handler: Any, port: int) -> Callable[[], None]:
    def serve() -> None:
        with server_class(("0.0.0.0", port), handler) as server:
            server.serve_forever(poll_interval=0.5)

    return serve


def _tcp_lines(sim: Any, a: Any, b: Any) -> Callable[[], bool]:
    lines = b"".join(f"line {i} {'x' * (i % 700)}\n".encode() for i in range(2000))

    def client() -> str:
        with socket.create_connection(("10.0.0.2", 7007)) as conn:
            sender = threading.Thread(target=lambda: (conn.sendall(lines),
                                                      conn.shutdown(socket.SHUT_WR)))
            sender.start()
            got = io.BytesIO()
            while data := conn.recv(65536):
                got.write(data)
            sender.join()
        return sha(got.getvalue())

    sim.spawn(b, _serve(socketserver.ThreadingTCPServer, _LineEcho, 7007), daemon=True)
    clients = [sim.spawn(a, client) for _ in range(3)]
    return lambda: all(c.result == sha(lines) for c in clients)


def _udp_upper(sim: Any, a: Any, b: Any) -> Callable[[], bool]:
    def client(index: int) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(1.0)
            answered = 0
            for n in range(20):
                message = f"client {index} message {n}".encode()
                for _attempt in range(10):  # 5% loss each way: ask again after a second
                    sock.sendto(message, ("10.0.0.2", 7008))
                    try:
                        reply, _ = sock.recvfrom(2048)
                    except TimeoutError:
                        continue
                    if reply == message.upper():
                        answered += 1
                        break
        return answered == 20

    sim.spawn(b, _serve(socketserver.ThreadingUDPServer, _DatagramUpper, 7008), daemon=True)
    clients = [sim.spawn(a, client, i) for i in range(4)]
    return lambda: all(c.result for c in clients)


def test_threading_tcp_socketserver(tmp_path: Any) -> None:
    _same_seed_same_pcap(_tcp_lines, tmp_path)


#: Seeds of the socketserver scenario run by ``test_threading_tcp_socketserver_seeds``; one
#: of them (27) once stalled both ends in a zero window for good.  The client took an ACK
#: that moved SND.UNA (riding on data that filled a hole, older than the last window
#: update) without its window, so its window ran 40 bytes past the server's edge; the
#: server, its queue full behind a blocked writer, then dropped every ACK the client sent
#: (beyond its window, Linux tcp_sequence) and never learnt its own data had arrived.
SCANNED_SEEDS = range(1, 33)
#: Simulated seconds each run may take: a run that ends takes about 12.
SCAN_LIMIT = 120.0


def test_threading_tcp_socketserver_seeds() -> None:
    """Every seed of the scan delivers every client's echo whole, in bounded simulated time."""
    stalled = []
    for seed in SCANNED_SEEDS:
        sim, a, b = two_hosts(seed, LOSSY)
        check = _tcp_lines(sim, a, b)
        ended = sim.run(until=SCAN_LIMIT)
        sim.close()
        if not (ended and check()):
            stalled.append(seed)
    assert stalled == []


def test_threading_udp_socketserver(tmp_path: Any) -> None:
    _same_seed_same_pcap(_udp_upper, tmp_path)


# -- TLS ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("b", "10.0.0.2").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


def _tls_echo(contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> Scenario:
    server_ctx, client_ctx = contexts
    payload = _payload(300_000)

    def scenario(sim: Any, a: Any, b: Any) -> Callable[[], bool]:
        def server() -> None:
            with server_ctx.wrap_socket(socket.create_server(("", 4433)),
                                        server_side=True) as tls:
                conn, _ = tls.accept()
                while data := conn.recv(65536):
                    conn.sendall(data)
                conn.close()

        def client() -> str:
            with socket.create_connection(("10.0.0.2", 4433)) as raw, \
                    client_ctx.wrap_socket(raw, server_hostname="10.0.0.2") as tls:
                got = bytearray()
                reader = threading.Thread(target=lambda: [
                    got.extend(tls.recv(65536))
                    for _ in iter(lambda: len(got) < len(payload), False)])
                reader.start()
                tls.sendall(payload)
                reader.join()
            return sha(bytes(got))

        sim.spawn(b, server, daemon=True)
        result = sim.spawn(a, client)
        return lambda: result.result == sha(payload)

    return scenario


def test_tls_echo(contexts: Any, tmp_path: Any) -> None:
    _run(_tls_echo(contexts), 21, str(tmp_path / "a.pcap"))
