"""UDP ancillary data as Linux delivers and accepts it.  Every expected byte string and
errno below is what Linux 6.x answers to the same calls on its own loopback sockets."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

import pytest

import rcunet

IP_TOS, IP_TTL, IP_PKTINFO, IP_RECVTTL, IP_RECVTOS = 1, 2, 8, 12, 13
IPV6_RECVPKTINFO, IPV6_PKTINFO, IPV6_RECVHOPLIMIT, IPV6_HOPLIMIT = 49, 50, 51, 52
IPV6_RECVTCLASS, IPV6_TCLASS = 66, 67
SO_TIMESTAMP, SO_TIMESTAMPNS = 29, 35
SOL_IP, SOL_IPV6 = 0, 41


@pytest.fixture
def two_address_net(net: Any) -> tuple[Any, Any]:
    """a (10.0.0.1, fd00::1) -- b, which has two addresses of each family (conftest's
    ``net``, real or simulated, with 10.0.0.3/32 and fd00::3/128 added on b)."""
    _network, a, b = net
    for extra in ("10.0.0.3/32", "fd00::3/128"):
        b.add_address("eth0", extra)
    return a, b


def _pktinfo_server(b: Any, family: int, use_pktinfo: bool, ready: threading.Event,
                    count: int) -> threading.Thread:
    """A server on the wildcard address answering each datagram, from the address it
    was reached on when ``use_pktinfo``."""

    def serve() -> None:
        with rcunet.patched(b, this_thread=True):
            sock = socket.socket(family, socket.SOCK_DGRAM)
            if family == socket.AF_INET:
                sock.setsockopt(SOL_IP, IP_PKTINFO, 1)
                sock.bind(("0.0.0.0", 5353))
            else:
                sock.setsockopt(SOL_IPV6, IPV6_RECVPKTINFO, 1)
                sock.bind(("::", 5353))
            sock.settimeout(20)
            ready.set()
            for _ in range(count):
                data, ancdata, _flags, peer = sock.recvmsg(512, 256)
                reply: list[tuple[int, int, bytes]] = []
                for level, kind, info in ancdata:
                    if (level, kind) == (SOL_IP, IP_PKTINFO) and use_pktinfo:
                        _ifindex, _spec_dst, addr = struct.unpack("@i4s4s", info)
                        reply = [(SOL_IP, IP_PKTINFO, struct.pack("@i4s4s", 0, addr,
                                                                  b"\0" * 4))]
                    if (level, kind) == (SOL_IPV6, IPV6_PKTINFO) and use_pktinfo:
                        addr6, _ifindex = struct.unpack("@16si", info)
                        reply = [(SOL_IPV6, IPV6_PKTINFO, struct.pack("@16si", addr6, 0))]
                sock.sendmsg([b"re:" + data], reply, 0, peer)
            sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _ask_each(a: Any, family: int, addresses: list[str]) -> list[tuple[bytes, str]]:
    with rcunet.patched(a, this_thread=True):
        client = socket.socket(family, socket.SOCK_DGRAM)
        client.settimeout(20)
        answers = []
        for address in addresses:
            client.sendto(address.encode(), (address, 5353))
            data, peer = client.recvfrom(512)
            answers.append((data, peer[0]))
        client.close()
    return answers


@pytest.mark.parametrize(("family", "addresses"), [
    (socket.AF_INET, ["10.0.0.2", "10.0.0.3"]),
    (socket.AF_INET6, ["fd00::2", "fd00::3"]),
])
def test_wildcard_server_answers_from_the_address_reached(
        two_address_net: tuple[Any, Any], family: int, addresses: list[str]) -> None:
    a, b = two_address_net
    ready = threading.Event()
    server = _pktinfo_server(b, family, True, ready, len(addresses))
    assert ready.wait(10)
    assert _ask_each(a, family, addresses) == [
        (b"re:" + address.encode(), address) for address in addresses]
    server.join(20)


def test_without_pktinfo_the_route_picks_the_source(two_address_net: tuple[Any, Any]) -> None:
    """The control case: the reply to 10.0.0.3 leaves from the first address."""
    a, b = two_address_net
    ready = threading.Event()
    server = _pktinfo_server(b, socket.AF_INET, False, ready, 1)
    assert ready.wait(10)
    assert _ask_each(a, socket.AF_INET, ["10.0.0.3"]) == [(b"re:10.0.0.3", "10.0.0.2")]
    server.join(20)


def _loopback_pair(host: Any, family: int) -> tuple[Any, Any, Any]:
    receiver = host.socket(family, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1" if family == socket.AF_INET else "::", 0))
    receiver.settimeout(10)
    sender = host.socket(family, socket.SOCK_DGRAM)
    target = ("127.0.0.1" if family == socket.AF_INET else "::1", receiver.getsockname()[1])
    return receiver, sender, target


def test_ipv4_control_messages_byte_for_byte(net: Any) -> None:
    _net, a, _b = net
    receiver, sender, target = _loopback_pair(a, socket.AF_INET)
    for option in (IP_PKTINFO, IP_RECVTTL, IP_RECVTOS):
        receiver.setsockopt(SOL_IP, option, 1)
    receiver.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    assert (receiver.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMP),
            receiver.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS),
            receiver.getsockopt(SOL_IP, IP_PKTINFO)) == (0, 1, 1)
    sender.setsockopt(SOL_IP, IP_TOS, 0x28)
    assert sender.getsockopt(SOL_IP, IP_TOS) == 0x28
    before = time.time_ns()
    sender.sendto(b"a", target)
    data, ancdata, flags, _peer = receiver.recvmsg(100, 1024)
    after = time.time_ns()
    assert (data, flags) == (b"a", 0)
    (level, kind, stamp), *rest = ancdata
    seconds, nanos = struct.unpack("@qq", stamp)
    assert (level, kind) == (socket.SOL_SOCKET, SO_TIMESTAMPNS)
    assert before <= seconds * 1_000_000_000 + nanos <= after
    assert [(lv, k, d.hex()) for lv, k, d in rest] == [
        (0, IP_PKTINFO, "010000007f0000017f000001"), (0, IP_TTL, "40000000"),
        (0, IP_TOS, "28")]
    receiver.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)  # a timeval now
    sender.sendmsg([b"c"], [(SOL_IP, IP_TTL, struct.pack("i", 7)), (SOL_IP, IP_TOS, b"\x10")],
                   0, target)
    _data, ancdata, _flags, _peer = receiver.recvmsg(100, 1024)
    assert [(lv, k, len(d) if k == SO_TIMESTAMP else d.hex()) for lv, k, d in ancdata] == [
        (1, SO_TIMESTAMP, 16), (0, IP_PKTINFO, "010000007f0000017f000001"),
        (0, IP_TTL, "07000000"), (0, IP_TOS, "10")]
    for sock in (receiver, sender):
        sock.close()


def test_short_control_buffer_sets_msg_ctrunc(net: Any) -> None:
    """put_cmsg: a message whose header fits comes cut, one whose header does not is
    left out; both set MSG_CTRUNC."""
    _net, a, _b = net
    receiver, sender, target = _loopback_pair(a, socket.AF_INET)
    receiver.setsockopt(SOL_IP, IP_PKTINFO, 1)
    receiver.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    seen = {}
    for room in (0, 16, 20, 31, 32, 40, 64):
        sender.sendto(b"b", target)
        _data, ancdata, flags, _peer = receiver.recvmsg(100, room)
        seen[room] = ([(k, len(d)) for _lv, k, d in ancdata], flags)
    ctrunc = socket.MSG_CTRUNC
    assert seen == {0: ([], ctrunc), 16: ([(35, 0)], ctrunc), 20: ([(35, 4)], ctrunc),
                    31: ([(35, 15)], ctrunc), 32: ([(35, 16)], ctrunc),
                    40: ([(35, 16)], ctrunc), 64: ([(35, 16), (8, 12)], 0)}
    for sock in (receiver, sender):
        sock.close()


def test_ipv6_control_messages_byte_for_byte(net: Any) -> None:
    _net, a, _b = net
    receiver, sender, target = _loopback_pair(a, socket.AF_INET6)
    for option in (IPV6_RECVPKTINFO, IPV6_RECVHOPLIMIT, IPV6_RECVTCLASS):
        receiver.setsockopt(SOL_IPV6, option, 1)
    receiver.setsockopt(SOL_IP, IP_PKTINFO, 1)
    sender.setsockopt(SOL_IPV6, IPV6_TCLASS, 0x28)
    assert (sender.getsockopt(SOL_IPV6, IPV6_TCLASS),
            receiver.getsockopt(SOL_IPV6, IPV6_RECVPKTINFO)) == (0x28, 1)
    loop6 = "0" * 30 + "01"
    sender.sendto(b"v6", target)
    assert _hex(receiver.recvmsg(100, 1024)) == [
        (41, IPV6_PKTINFO, loop6 + "01000000"), (41, IPV6_HOPLIMIT, "40000000"),
        (41, IPV6_TCLASS, "28000000")]
    v4 = a.socket(socket.AF_INET, socket.SOCK_DGRAM)
    v4.sendto(b"v4", ("127.0.0.1", target[1]))  # an IPv4 packet on the IPv6 socket
    assert _hex(receiver.recvmsg(100, 1024)) == [
        (41, IPV6_PKTINFO, "00000000000000000000ffff7f00000101000000"),
        (0, IP_PKTINFO, "010000007f0000017f000001")]
    sender.sendmsg([b"v6b"], [(SOL_IPV6, IPV6_HOPLIMIT, struct.pack("i", 9)),
                              (SOL_IPV6, IPV6_TCLASS, struct.pack("i", 4))], 0, target)
    assert _hex(receiver.recvmsg(100, 1024)) == [
        (41, IPV6_PKTINFO, loop6 + "01000000"), (41, IPV6_HOPLIMIT, "09000000"),
        (41, IPV6_TCLASS, "04000000")]
    for sock in (receiver, sender, v4):
        sock.close()


def _hex(answer: tuple[bytes, list[Any], int, Any]) -> list[tuple[int, int, str]]:
    return [(level, kind, data.hex()) for level, kind, data in answer[1]]


_V4_CASES = [
    ("a level Linux does not know", [(999, 1, b"1234")], None),
    ("an unknown IP type", [(SOL_IP, 99, b"1234")], 22),
    ("IP_TTL 0", [(SOL_IP, IP_TTL, struct.pack("i", 0))], 22),
    ("IP_TTL of one byte", [(SOL_IP, IP_TTL, b"\x07")], 22),
    ("IP_TOS of two bytes", [(SOL_IP, IP_TOS, b"\x07\0")], 22),
    ("a short IP_PKTINFO", [(SOL_IP, IP_PKTINFO, b"\0" * 8)], 22),
    ("SCM_RIGHTS", [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", 0))], None),
    ("SO_TIMESTAMP", [(socket.SOL_SOCKET, SO_TIMESTAMP, b"\0" * 16)], 22),
    ("IPv6's level", [(SOL_IPV6, IPV6_HOPLIMIT, struct.pack("i", 5))], None),
    ("a source not ours", [(SOL_IP, IP_PKTINFO, struct.pack(
        "i4s4s", 0, socket.inet_aton("10.9.9.9"), b"\0" * 4))], 101),
    ("an interface that does not exist", [(SOL_IP, IP_PKTINFO, struct.pack(
        "i4s4s", 999, b"\0" * 4, b"\0" * 4))], 19),
]
_V6_CASES = [
    ("IP's level", [(SOL_IP, IP_TTL, struct.pack("i", 5))], None),
    ("a level Linux does not know", [(999, 1, b"1234")], None),
    ("an unknown IPv6 type", [(SOL_IPV6, 99, b"1234")], 22),
    ("IPV6_HOPLIMIT of one byte", [(SOL_IPV6, IPV6_HOPLIMIT, b"\x05")], 22),
    ("IPV6_HOPLIMIT 256", [(SOL_IPV6, IPV6_HOPLIMIT, struct.pack("i", 256))], 22),
    ("IPV6_HOPLIMIT -1", [(SOL_IPV6, IPV6_HOPLIMIT, struct.pack("i", -1))], None),
    ("a source not ours", [(SOL_IPV6, IPV6_PKTINFO, socket.inet_pton(
        socket.AF_INET6, "fd00::9") + struct.pack("i", 0))], 22),
    ("a short IPV6_PKTINFO", [(SOL_IPV6, IPV6_PKTINFO, b"\0" * 16)], 22),
    ("a long IPV6_PKTINFO", [(SOL_IPV6, IPV6_PKTINFO, b"\0" * 24)], None),
    ("an interface that does not exist", [(SOL_IPV6, IPV6_PKTINFO,
                                           b"\0" * 16 + struct.pack("i", 999))], 19),
]


@pytest.mark.parametrize(("family", "cases"), [(socket.AF_INET, _V4_CASES),
                                               (socket.AF_INET6, _V6_CASES)])
def test_control_messages_linux_refuses(net: Any, family: int, cases: list[Any]) -> None:
    _net, a, _b = net
    receiver, sender, target = _loopback_pair(a, family)
    answers = {}
    for name, ancdata, _errno in cases:
        try:
            sender.sendmsg([b"e"], ancdata, 0, target)
            answers[name] = None
            assert receiver.recv(10) == b"e"
        except OSError as exc:
            answers[name] = exc.errno
    assert answers == {name: expected for name, _ancdata, expected in cases}
    for sock in (receiver, sender):
        sock.close()


def test_tcp_takes_only_what_sock_cmsg_send_takes(net: Any) -> None:
    _net, a, b = net
    listener = b.socket()
    listener.bind(("", 7030))
    listener.listen(1)
    client = a.socket()
    client.settimeout(10)
    client.connect(("10.0.0.2", 7030))
    server, _ = listener.accept()
    assert client.sendmsg([b"ok"], [(SOL_IP, IP_TTL, struct.pack("i", 5))]) == 2
    with pytest.raises(OSError) as info:
        client.sendmsg([b"no"], [(socket.SOL_SOCKET, SO_TIMESTAMP, b"\0" * 16)])
    assert info.value.errno == 22
    server.settimeout(10)
    assert server.recv(10) == b"ok"
    for sock in (client, server, listener):
        sock.close()
