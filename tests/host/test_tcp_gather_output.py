"""TCP output through ``IpLayer.output_gather``: the frame is one join of the link, IP and
TCP headers and the payload.  Every frame it puts on the wire must be byte for byte the
frame the layered codecs build (Ethernet(IPv4(TCP(payload)))), including the segments
that waited for ARP in the neighbour queue, on Ethernet and on IP-only links."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from tcp_helpers import connected_pair, recv_exactly, send_all

from rcunet.host.network import Network
from rcunet.wire import ethernet, ipv4, ipv6, tcp


class Capture:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def write(self, timestamp_ns: int, frame: bytes) -> None:
        self.frames.append(bytes(frame))


def _layered(ip_packet: ipv4.Repr | ipv6.Repr) -> bytes:
    """The packet rebuilt the layered way: TCP build, then IP build around it."""
    seg = tcp.Repr.parse(ip_packet.payload)
    with_checksum = seg.checksum != 0  # offloading links leave it zero
    inner = seg.build(src=ip_packet.src, dst=ip_packet.dst, checksum=with_checksum)
    if with_checksum:
        assert tcp.Repr.parse(inner, ip_packet.src, ip_packet.dst).checksum_ok
    return ip_packet._replace(payload=inner).build()


def _is_tcp(frame: bytes) -> bool:
    raw = bytes(ethernet.Repr.parse(frame).payload)
    if raw[0] >> 4 == 4:
        return ipv4.Repr.parse(raw).protocol == tcp.PROTOCOL
    return ipv6.Repr.parse(raw).next_header == tcp.PROTOCOL


def _check_frames(frames: list[bytes], link_kind: str) -> int:
    checked = 0
    for frame in frames:
        if link_kind == "ethernet":
            eth = ethernet.Repr.parse(frame)
            if eth.ethertype not in (ethernet.ETHERTYPE_IPV4, ethernet.ETHERTYPE_IPV6):
                continue
            raw = bytes(eth.payload)
        else:
            eth, raw = None, frame
        packet: Any = ipv4.Repr.parse(raw) if raw[0] >> 4 == 4 else ipv6.Repr.parse(raw)
        protocol = packet.protocol if raw[0] >> 4 == 4 else packet.next_header
        if protocol != tcp.PROTOCOL:
            continue
        rebuilt = _layered(packet)
        if eth is not None:
            rebuilt = eth._replace(payload=rebuilt).build()
        assert rebuilt == frame
        checked += 1
    return checked


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
@pytest.mark.parametrize("kind", ["ethernet", "ip"])
def test_gathered_frames_equal_the_layered_build(family: int, kind: str) -> None:
    net = Network()
    a, b = net.host("a"), net.host("b")
    link = net.link(a, b, ["10.0.0.1/24", "fd00::1/64"], ["10.0.0.2/24", "fd00::2/64"],
                    kind=kind)
    capture = Capture()
    link.tap = capture  # from the first SYN on (it waits for ARP/NDP on Ethernet)
    srv, cli, child = connected_pair(net, a, b, family)
    payload = bytes(range(251)) * 200  # odd sizes: the last segment is short
    send_all(net, cli, payload)
    assert recv_exactly(net, child, len(payload)) == payload
    for s in (cli, child, srv):
        s.close()
    net.run(1.0)
    # handshake, data, ACKs, FINs: all of them compared
    assert _check_frames(capture.frames, kind) >= 10
    if kind == "ethernet":  # the SYN went out after resolution, from the neighbour queue
        first_ip = next(f for f in capture.frames if ethernet.Repr.parse(f).ethertype
                        in (ethernet.ETHERTYPE_IPV4, ethernet.ETHERTYPE_IPV6)
                        and _is_tcp(f))
        assert capture.frames.index(first_ip) > 0
