"""UDP between the kernel and rcunet with socat and nc, both directions, IPv4 and IPv6,
and seed 003's multicast setup driven by the kernel: 300 rcunet sockets on one port."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time

import pytest
from iop_support import Peer, need_tool, used

from rcunet.services import start_services

FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}


def _bracket(version: int, address: str) -> str:
    return f"[{address}]" if version == 6 else address


@pytest.mark.parametrize("version", [4, 6])
def test_socat_talks_to_rcunet_udp_echo(peer: Peer, version: int) -> None:
    with start_services(peer.host, "udp-echo:7"):
        message = f"hello rcunet over udp{version}\n".encode()
        target = f"UDP{version}:{_bracket(version, peer.rcunet[version])}:7"
        result = peer.run(["socat", "-t", "1", "-", target], input=message, timeout=20)
        assert result.stdout == message
    used("socat")


@pytest.mark.parametrize("version", [4, 6])
def test_nc_talks_to_rcunet_udp_echo(peer: Peer, version: int) -> None:
    with start_services(peer.host, "udp-echo:7"):
        message = b"nc says hi\n"
        result = peer.run(["nc", f"-{version}", "-u", "-w", "2", peer.rcunet[version], "7"],
                          input=message, timeout=20, check=False)
        assert result.stdout == message, result.stderr
    used("nc")


@pytest.mark.parametrize("version", [4, 6])
def test_rcunet_talks_to_kernel_socat_udp_echo(peer: Peer, version: int) -> None:
    need_tool("socat")
    listen = f"UDP{version}-RECVFROM:9007,fork,bind={_bracket(version, peer.kernel[version])}"
    server = peer.ns.spawn(["socat", listen, "PIPE"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
    sock = peer.host.socket(FAMILY[version], socket.SOCK_DGRAM)
    try:
        sock.settimeout(0.5)
        got = None
        for attempt in range(20):  # socat needs a moment to bind; ARP/ND on the first
            payload = f"datagram {attempt}".encode()
            sock.sendto(payload, (peer.kernel[version], 9007))
            try:
                got, source = sock.recvfrom(2048)
            except TimeoutError:
                continue
            assert got == payload and source[0] == peer.kernel[version]
            break
        assert got is not None, server.stderr.read() if server.poll() is not None else ""
    finally:
        sock.close()
    used("socat")


@pytest.mark.parametrize("version", [4, 6])
def test_rcunet_sends_to_kernel_nc_listener(peer: Peer, version: int) -> None:
    need_tool("nc")
    listener = peer.ns.spawn(["nc", f"-{version}", "-u", "-l", "-W", "1",
                              peer.kernel[version], "9009"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sock = peer.host.socket(FAMILY[version], socket.SOCK_DGRAM)
    try:
        payload = b"one datagram for nc\n"
        deadline = time.monotonic() + 10
        while listener.poll() is None and time.monotonic() < deadline:
            sock.sendto(payload, (peer.kernel[version], 9009))  # until nc has bound
            time.sleep(0.1)
        out, err = listener.communicate(timeout=5)
    finally:
        sock.close()
    assert out == payload, err
    used("nc")


# ---------------------------------------------------------------------------------- seed 003
N_SOCKETS = 300
MCAST_PORT = 5000
ROUNDS = 3

_SENDER = r"""
import socket, struct, sys
version, ifname, port, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
groups = sys.argv[5:]
if version == 4:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
else:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF,
                 struct.pack("@I", socket.if_nametoindex(ifname)))
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 0)
for r in range(rounds):
    for g in groups:
        s.sendto(f"{g} {r}".encode(), (g, port))
"""


def _group(version: int, index: int) -> str:
    if version == 4:
        return f"239.77.{index >> 8}.{index & 0xFF}"
    return f"ff12::77:{index:x}"  # transient, link-local scope


def _join(peer: Peer, sock: object, group: str) -> None:
    if ":" not in group:
        mreq = socket.inet_aton(group) + socket.inet_aton(peer.rcunet[4])
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)  # type: ignore[attr-defined]
    else:
        mreq6 = socket.inet_pton(socket.AF_INET6, group) + struct.pack("@I", peer.iface.ifindex)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, mreq6)  # type: ignore[attr-defined]


def _drain(sockets: list, expected: int, timeout: float) -> list[list[bytes]]:  # type: ignore[type-arg]
    got: list[list[bytes]] = [[] for _ in sockets]
    deadline = time.monotonic() + timeout
    for index, sock in enumerate(sockets):
        sock.setblocking(False)
        while len(got[index]) < expected and time.monotonic() < deadline:
            try:
                got[index].append(sock.recv(2048))
            except BlockingIOError:
                time.sleep(0.01)
    return got


def _kernel_send(peer: Peer, version: int, groups: list[str], rounds: int) -> None:
    peer.run([sys.executable, "-c", _SENDER, str(version), peer.ifname, str(MCAST_PORT),
              str(rounds), *groups], timeout=60)


@pytest.mark.parametrize("version", [4, 6])
def test_kernel_multicast_to_300_sockets_each_in_its_own_group(peer: Peer, version: int) -> None:
    sockets = []
    try:
        for index in range(N_SOCKETS):
            sock = peer.host.socket(FAMILY[version], socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((_group(version, index), MCAST_PORT))
            _join(peer, sock, _group(version, index))
            sockets.append(sock)
        groups = [_group(version, i) for i in range(N_SOCKETS)]
        _kernel_send(peer, version, groups, ROUNDS)
        got = _drain(sockets, ROUNDS, timeout=20)
        for index, messages in enumerate(got):
            # each socket got exactly its own group's datagrams, every round, in order
            assert messages == [f"{groups[index]} {r}".encode() for r in range(ROUNDS)], index
    finally:
        for sock in sockets:
            sock.close()
    used("kernel multicast sender")


def test_kernel_multicast_to_300_sockets_in_one_group(peer: Peer) -> None:
    group = "239.77.255.1"
    sockets = []
    try:
        for _ in range(N_SOCKETS):
            sock = peer.host.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("0.0.0.0", MCAST_PORT + 1))
            _join(peer, sock, group)
            sockets.append(sock)
        need_tool("socat")
        for r in range(ROUNDS):
            peer.run(["socat", "-u", "-",
                      f"UDP4-DATAGRAM:{group}:{MCAST_PORT + 1},ip-multicast-if={peer.kernel[4]}"],
                     input=f"fanout {r}".encode(), timeout=20)
        got = _drain(sockets, ROUNDS, timeout=20)
        for messages in got:
            assert messages == [f"fanout {r}".encode() for r in range(ROUNDS)]
    finally:
        for sock in sockets:
            sock.close()
    used("socat")
