"""TCP_MD5SIG (RFC 2385) against the Linux kernel over TAP: the kernel and rcunet hold
the same key and carry data both ways, which only works when rcunet's signatures are
the ones the kernel computes (and the other way round); with different keys each side
drops the other's segments and counts them as TcpExtTCPMD5Failure."""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import subprocess
import sys

import pytest
from iop_support import Peer, used

TCP_MD5SIG = 14
FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}
PORT = 1790
SIZE = 300_000

#: The kernel's side, in the namespace: a program that sets TCP_MD5SIG as bgpd does.
_KERNEL_SIDE = r"""
import hashlib, socket, struct, sys
role, version, local, peer, port, key = sys.argv[1:7]
family = socket.AF_INET if version == "4" else socket.AF_INET6
if family == socket.AF_INET:
    sockaddr = struct.pack("=HH4s", family, 0, socket.inet_pton(family, peer))
else:
    sockaddr = struct.pack("=HHI16s", family, 0, 0, socket.inet_pton(family, peer))
md5sig = struct.pack("=128sBBHi80s", sockaddr, 0, 0, len(key), 0, key.encode())
s = socket.socket(family, socket.SOCK_STREAM)
s.setsockopt(socket.IPPROTO_TCP, 14, md5sig)
if role == "server":
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((local, int(port)))
    s.listen(1)
    print("ready", flush=True)
    conn, _ = s.accept()
else:
    s.settimeout(float(sys.argv[7]))
    s.connect((peer, int(port)))
    conn = s
    conn.sendall(bytes(range(256)) * 1000)
    conn.shutdown(socket.SHUT_WR)
conn.settimeout(30)
digest, data = hashlib.sha256(), conn.recv(65536)
while data:
    digest.update(data)
    data = conn.recv(65536)
if role == "server":
    conn.sendall(digest.hexdigest().encode())
print(digest.hexdigest(), flush=True)
"""


def _md5sig(family: int, peer: str, key: bytes) -> bytes:
    if family == socket.AF_INET:
        sockaddr = struct.pack("=HH4s", family, 0, socket.inet_pton(family, peer))
    else:
        sockaddr = struct.pack("=HHI16s", family, 0, 0, socket.inet_pton(family, peer))
    return struct.pack("=128sBBHi80s", sockaddr, 0, 0, len(key), 0, key)


def _kernel_server(peer: Peer, version: int, key: str) -> subprocess.Popen[bytes]:
    proc = peer.ns.spawn([sys.executable, "-c", _KERNEL_SIDE, "server", str(version),
                          peer.kernel[version], peer.rcunet[version], str(PORT), key],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n", proc.stderr.read() if proc.stderr else b""
    return proc


def _kernel_md5_counters(peer: Peer) -> dict[str, int]:
    """The namespace's TcpExt MD5 counters (/proc/net/netstat, as nstat reads it)."""
    lines = peer.run(["cat", "/proc/net/netstat"]).stdout.decode().splitlines()
    names, values = next((a.split()[1:], b.split()[1:])
                         for a, b in zip(lines, lines[1:], strict=False)
                         if a.startswith("TcpExt:") and b.startswith("TcpExt:"))
    return {f"TcpExt{n}": int(v) for n, v in zip(names, values, strict=True) if "MD5" in n}


@pytest.mark.parametrize("version", [4, 6])
def test_rcunet_client_and_kernel_server_share_a_key(peer: Peer, version: int) -> None:
    proc = _kernel_server(peer, version, "bgp-secret")
    payload = os.urandom(SIZE)
    sock = peer.host.socket(FAMILY[version], socket.SOCK_STREAM)
    sock.settimeout(20)
    sock.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG,
                    _md5sig(FAMILY[version], peer.kernel[version], b"bgp-secret"))
    sock.connect((peer.kernel[version], PORT))
    sock.sendall(payload)
    sock.shutdown(socket.SHUT_WR)
    reply = b""
    while chunk := sock.recv(4096):
        reply += chunk
    sock.close()
    assert reply.decode() == hashlib.sha256(payload).hexdigest()
    proc.wait(timeout=20)
    assert _kernel_md5_counters(peer).get("TcpExtTCPMD5Failure", 0) == 0
    assert not {k: v for k, v in peer.counters().items() if "MD5" in k}
    used("python socket TCP_MD5SIG")


@pytest.mark.parametrize("version", [4, 6])
def test_kernel_client_and_rcunet_server_share_a_key(peer: Peer, version: int) -> None:
    srv = peer.host.socket(FAMILY[version], socket.SOCK_STREAM)
    srv.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG,
                   _md5sig(FAMILY[version], peer.kernel[version], b"bgp-secret"))
    srv.bind((peer.rcunet[version], PORT))
    srv.listen(1)
    proc = peer.ns.spawn([sys.executable, "-c", _KERNEL_SIDE, "client", str(version),
                          peer.kernel[version], peer.rcunet[version], str(PORT), "bgp-secret",
                          "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    srv.settimeout(20)
    child, _ = srv.accept()
    child.settimeout(20)
    digest, data = hashlib.sha256(), child.recv(65536)
    while data:
        digest.update(data)
        data = child.recv(65536)
    child.close()
    srv.close()
    out, err = proc.communicate(timeout=20)
    assert digest.hexdigest() == hashlib.sha256(bytes(range(256)) * 1000).hexdigest(), err
    assert proc.returncode == 0, err
    used("python socket TCP_MD5SIG")


def test_different_keys_are_dropped_and_counted_by_both(peer: Peer) -> None:
    """rcunet signs with another key than the kernel's: the kernel drops the SYN
    (TcpExtTCPMD5Failure) and connect times out; the kernel connecting to rcunet with
    another key is dropped and counted by rcunet the same way."""
    proc = _kernel_server(peer, 4, "right")
    sock = peer.host.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(3)
    sock.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG,
                    _md5sig(socket.AF_INET, peer.kernel[4], b"wrong"))
    with pytest.raises(TimeoutError):
        sock.connect((peer.kernel[4], PORT))
    sock.close()
    assert _kernel_md5_counters(peer)["TcpExtTCPMD5Failure"] >= 1
    proc.kill()

    srv = peer.host.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG,
                   _md5sig(socket.AF_INET, peer.kernel[4], b"right"))
    srv.bind((peer.rcunet[4], PORT + 1))
    srv.listen(1)
    result = peer.run([sys.executable, "-c", _KERNEL_SIDE, "client", "4", peer.kernel[4],
                       peer.rcunet[4], str(PORT + 1), "wrong", "3"], check=False)
    assert result.returncode != 0 and b"timed out" in result.stderr, result.stderr
    assert peer.counters().get("TcpExtTCPMD5Failure", 0) >= 1
    srv.close()
    used("python socket TCP_MD5SIG")
