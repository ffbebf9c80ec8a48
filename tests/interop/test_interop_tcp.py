"""TCP between the kernel and rcunet over TAP: curl, ab and wrk against rcunet's HTTP
responder; rcunet's client against kernel servers (python http.server, nginx, socat);
bulk transfers checked by hash; connect() until EADDRNOTAVAIL and recovery through
TIME_WAIT reuse."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest
from iop_support import Peer, need_tool, used

from rcunet.services import start_services
from rcunet.services.http import pattern_sha256

FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}
BULK = 50 * 1024 * 1024
BULK_TIMEOUT = 240  # seconds, per direction


def _url(peer: Peer, version: int, path: str, port: int = 80, kernel: bool = False) -> str:
    host = (peer.kernel if kernel else peer.rcunet)[version]
    return f"http://{f'[{host}]' if version == 6 else host}:{port}{path}"


# ------------------------------------------------------------------ kernel clients -> rcunet
@pytest.mark.parametrize("version", [4, 6])
def test_curl_gets_pages_from_rcunet_http(peer: Peer, version: int) -> None:
    with start_services(peer.host, "http:80"):
        result = peer.run(["curl", "-sS", "-g", "-m", "20", _url(peer, version, "/")])
        assert result.stdout == b"rcunet http responder\n"
        # two requests on one connection: curl reports reusing it
        result = peer.run(["curl", "-sS", "-g", "-v", "-m", "20", "-o", "/dev/null", "-o",
                           "/dev/null", _url(peer, version, "/bytes/100000"),
                           _url(peer, version, "/")])
        assert b"Re-using existing connection" in result.stderr or \
            b"Reusing existing" in result.stderr, result.stderr.decode()[-800:]
    used("curl")


def test_curl_sees_404_and_head(peer: Peer) -> None:
    with start_services(peer.host, "http:80"):
        code = peer.run(["curl", "-s", "-m", "20", "-o", "/dev/null", "-w", "%{http_code}",
                         _url(peer, 4, "/nope")]).stdout
        assert code == b"404"
        head = peer.run(["curl", "-sS", "-m", "20", "-I", _url(peer, 4, "/bytes/1234")]).stdout
        assert b"Content-Length: 1234" in head
    used("curl")


@pytest.mark.parametrize("version, keep_alive", [(4, False), (4, True), (6, True)])
def test_ab_against_rcunet_http(peer: Peer, version: int, keep_alive: bool) -> None:
    with start_services(peer.host, "http:80"):
        argv = ["ab", "-q", "-n", "300", "-c", "4", "-s", "20"]
        if keep_alive:
            argv.append("-k")
        result = peer.run([*argv, _url(peer, version, "/")], timeout=120)
        out = result.stdout.decode()
        assert re.search(r"Complete requests:\s+300\b", out), out
        assert re.search(r"Failed requests:\s+0\b", out), out
        assert re.search(r"Non-2xx responses", out) is None, out
        if keep_alive:
            assert re.search(r"Keep-Alive requests:\s+300\b", out), out
    used("ab")


def test_wrk_keep_alive_against_rcunet_http(peer: Peer) -> None:
    with start_services(peer.host, "http:80"):
        result = peer.run(["wrk", "-t", "1", "-c", "4", "-d", "2s", "--timeout", "5s",
                           _url(peer, 4, "/")], timeout=60)
        out = result.stdout.decode()
        match = re.search(r"(\d+) requests in", out)
        assert match and int(match.group(1)) > 0, out
        assert "Socket errors" not in out and "Non-2xx" not in out, out
    used("wrk")


@pytest.mark.parametrize("version", [4, 6])
def test_nc_talks_to_rcunet_tcp_echo(peer: Peer, version: int) -> None:
    with start_services(peer.host, "echo:7"):
        message = b"".join(b"line %d\n" % i for i in range(2000))
        result = peer.run(["nc", f"-{version}", "-N", "-w", "10", peer.rcunet[version], "7"],
                          input=message, timeout=30)
        assert result.stdout == message
    used("nc")


# ------------------------------------------------------------------ rcunet client -> kernel
def _connect(peer: Peer, version: int, port: int, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    """rcunet connects to a kernel server, retrying while the server starts."""
    deadline = time.monotonic() + timeout
    while True:
        sock = peer.host.socket(FAMILY[version], socket.SOCK_STREAM)
        sock.settimeout(5)
        try:
            sock.connect((peer.kernel[version], port))
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _http_get(sock, host: str, path: str) -> tuple[bytes, bytes]:  # type: ignore[no-untyped-def]
    sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
    data = bytearray()
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize("version", [4, 6])
def test_rcunet_fetches_from_python_http_server(peer: Peer, version: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    content = os.urandom(300_000)
    (tmp_path / "blob.bin").write_bytes(content)
    peer.ns.spawn([sys.executable, "-m", "http.server", "--bind", peer.kernel[version],
                   "--directory", str(tmp_path), "8000"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with _connect(peer, version, 8000) as sock:
        head, body = _http_get(sock, peer.kernel[version], "/blob.bin")
    assert head.startswith(b"HTTP/1.0 200"), head
    assert body == content
    used("python http.server")


_NGINX_CONF = """
user root root;  # the test directory is private to root
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
daemon off;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen {v4}:8080;
        listen [{v6}]:8080;
        root {dir}/www;
    }}
}}
"""


@pytest.mark.parametrize("version", [4, 6])
def test_rcunet_fetches_from_nginx(peer: Peer, version: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    need_tool("nginx")
    (tmp_path / "www").mkdir()
    content = os.urandom(200_000)
    (tmp_path / "www" / "index.bin").write_bytes(content)
    conf = tmp_path / "nginx.conf"
    conf.write_text(_NGINX_CONF.format(dir=tmp_path, v4=peer.kernel[4], v6=peer.kernel[6]))
    peer.ns.spawn(["nginx", "-c", str(conf), "-e", str(tmp_path / "error.log")],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with _connect(peer, version, 8080) as sock:
        head, body = _http_get(sock, peer.kernel[version], "/index.bin")
    assert b" 200 OK" in head.split(b"\r\n")[0], head
    assert b"Server: nginx" in head
    assert body == content
    used("nginx")


@pytest.mark.parametrize("version", [4, 6])
def test_rcunet_talks_to_kernel_socat_tcp_echo(peer: Peer, version: int) -> None:
    need_tool("socat")
    host = f"[{peer.kernel[version]}]" if version == 6 else peer.kernel[version]
    # -b 4096: socat's PIPE echo writes into a pipe only it reads; with its default 8 KiB
    # blocks a write into a pipe with 4 KiB free (select's "writable") blocks socat
    # for good once a large echo backs up.  Blocks of PIPE_BUF never block.
    peer.ns.spawn(["socat", "-b", "4096", f"TCP{version}-LISTEN:9007,bind={host},reuseaddr,fork",
                   "PIPE"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    payload = os.urandom(500_000)
    got = bytearray()
    with _connect(peer, version, 9007) as sock:
        # read while sending: an echo peer stops reading once its replies fill our
        # window, so a sender that reads only afterwards can deadlock (on Linux too)
        def reader() -> None:
            while chunk := sock.recv(65536):
                got.extend(chunk)

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        sock.settimeout(30)
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        thread.join(30)
    assert bytes(got) == payload
    used("socat")


# ------------------------------------------------------------------ bulk, both directions
def test_bulk_download_from_rcunet_checked_by_hash(peer: Peer) -> None:
    with start_services(peer.host, "http:80"):
        started = time.monotonic()
        result = peer.run(["sh", "-c", f"curl -sS -m {BULK_TIMEOUT} "
                           f"{_url(peer, 4, f'/bytes/{BULK}')} | sha256sum"],
                          timeout=BULK_TIMEOUT + 10)
        elapsed = time.monotonic() - started
    assert result.stdout.split()[0].decode() == pattern_sha256(BULK)
    print(f"bulk download {BULK >> 20} MiB in {elapsed:.1f} s "
          f"({BULK / elapsed / 1e6:.1f} MB/s)")
    used("curl")


def test_bulk_upload_to_rcunet_checked_by_hash(peer: Peer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    blob = tmp_path / "upload.bin"
    digest = hashlib.sha256()
    with open(blob, "wb") as out:
        for _ in range(BULK // (1 << 20)):
            piece = os.urandom(1 << 20)
            digest.update(piece)
            out.write(piece)
    with start_services(peer.host, "http:80"):
        started = time.monotonic()
        result = peer.run(["curl", "-sS", "-m", str(BULK_TIMEOUT), "--data-binary",
                           f"@{blob}", "-H", "Content-Type: application/octet-stream",
                           _url(peer, 4, "/sha256")], timeout=BULK_TIMEOUT + 10)
        elapsed = time.monotonic() - started
    assert result.stdout.decode().split() == [digest.hexdigest(), str(BULK)]
    print(f"bulk upload {BULK >> 20} MiB in {elapsed:.1f} s ({BULK / elapsed / 1e6:.1f} MB/s)")
    used("curl")


# ------------------------------------------------------------------ connect() under pressure
N_PORTS = 8


def test_connect_until_eaddrnotavail_then_time_wait_reuse(peer: Peer) -> None:
    """A narrow ephemeral range against one kernel listener: every connection we close
    first leaves a TIME_WAIT entry holding its port.  Without tcp_tw_reuse connect()
    runs out (EADDRNOTAVAIL); with it, a TIME_WAIT port older than tcp_tw_reuse_delay is
    taken over (TcpExtTWRecycled) and connect() succeeds again."""
    need_tool("socat")
    k = peer.kernel[4]
    peer.ns.spawn(["socat", f"TCP4-LISTEN:9100,bind={k},reuseaddr,fork", "PIPE"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _connect(peer, 4, 9100).close()  # the listener is up (this TIME_WAIT is on a port
    # outside the narrow range set below)
    low = 41000
    tuning = peer.host.tuning
    peer.host.set_tuning(dataclasses.replace(tuning, ip_local_port_range=(low, low + N_PORTS - 1),
                                             tcp_tw_reuse=0))
    opened = 0
    failure = None
    for _ in range(N_PORTS + 2):
        sock = peer.host.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(5)
        try:
            sock.connect((k, 9100))
        except OSError as exc:
            failure = exc
            sock.close()
            break
        assert low <= sock.getsockname()[1] < low + N_PORTS
        sock.sendall(b"x")
        assert sock.recv(1) == b"x"
        sock.close()  # active close: our side keeps TIME_WAIT
        opened += 1
    assert failure is not None and failure.errno == errno.EADDRNOTAVAIL, failure
    assert opened == N_PORTS

    recycled_before = peer.counters().get("TcpExtTWRecycled", 0)
    peer.host.set_tuning(dataclasses.replace(peer.host.tuning, tcp_tw_reuse=1))
    time.sleep(tuning.tcp_tw_reuse_delay / 1000 + 0.2)  # Linux: reuse only after 1 s
    with _connect(peer, 4, 9100, timeout=5) as sock:
        assert low <= sock.getsockname()[1] < low + N_PORTS
        sock.sendall(b"again")
        assert sock.recv(16) == b"again"
    assert peer.counters().get("TcpExtTWRecycled", 0) > recycled_before
    used("socat")
