"""The IPv4/UDP receive path, frame by frame: what is delivered and what is counted.

The common packet (untagged Ethernet, IPv4 with no options and no fragmentation, UDP on a
checksum-offloaded link) is read without building Reprs; every other packet goes through
the codecs.  These tests pin both routes to the same outcome: exact counters for each
kind of bad input, on interfaces with and without checksum offload, and a fuzz that
checks every mutated frame against a reference built from the codecs alone.
"""

from __future__ import annotations

import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcunet.host.host import Host
from rcunet.host.interface import Interface, multicast_mac
from rcunet.wire import ethernet, ipv4, ipv6, udp
from rcunet.wire.errors import WireError

MAC = b"\x02\x00\x00\x00\x00\x02"
PEER_MAC = b"\x02\x00\x00\x00\x00\x01"
OTHER_MAC = b"\x02\x00\x00\x00\x00\x77"
LOCAL = bytes([10, 0, 0, 2])
PEER = bytes([10, 0, 0, 1])
BCAST = bytes([10, 0, 0, 255])
GROUP = bytes([239, 1, 2, 3])
LOCAL6 = bytes.fromhex("fd000000000000000000000000000002")
PEER6 = bytes.fromhex("fd000000000000000000000000000001")
PORT = 9000
PAYLOAD = b"payload bytes"


class Receiver:
    """Host ``b`` with one interface, a UDP socket on ``PORT`` (IPv4 and IPv6) and a
    membership of ``GROUP``; frames go straight into the receive path."""

    def __init__(self, offload: bool) -> None:
        self.host = Host("b")
        self.iface: Interface = self.host.add_interface(
            "eth0", mac=MAC, addresses=["10.0.0.2/24", "fd00::2/64"], checksum_offload=offload)
        self.offload = offload
        self.sock = self.host.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("", PORT))
        mreqn = socket.inet_aton("239.1.2.3") + bytes(4) + \
            self.iface.ifindex.to_bytes(4, "little")
        self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
        self.sock6 = self.host.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        self.sock6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        self.sock6.bind(("", PORT))

    def receive(self, frame: bytes) -> dict[str, int]:
        """Feed one frame; the counters it changed."""
        before = self.host.counters.snapshot()
        self.host.ip.link_input(self.iface, frame)
        after = self.host.counters.snapshot()
        return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}

    def received(self) -> list[tuple[bytes, tuple[bytes, int]]]:
        out = []
        for sock in (self.sock, self.sock6):
            while (datagram := sock._sk.dequeue()) is not None:
                out.append(datagram[:2])  # payload and source; not the packet's RecvInfo
        return out

    def close(self) -> None:
        self.host.close()


@pytest.fixture(params=[True, False], ids=["offload", "no-offload"])
def rx(request: pytest.FixtureRequest):
    receiver = Receiver(request.param)
    yield receiver
    receiver.close()


def udp_bytes(src: bytes = PEER, dst: bytes = LOCAL, dport: int = PORT,
              payload: bytes = PAYLOAD) -> bytes:
    return udp.Repr(4321, dport, payload).build(src=src, dst=dst)


def ip_bytes(transport: bytes | None = None, *, src: bytes = PEER, dst: bytes = LOCAL,
             protocol: int = ipv4.PROTO_UDP, **fields: object) -> bytes:
    if transport is None:
        transport = udp_bytes(src, dst)
    return ipv4.Repr(src, dst, protocol, transport, **fields).build()  # type: ignore[arg-type]


def frame(packet: bytes, dst_mac: bytes = MAC, ethertype: int = ethernet.ETHERTYPE_IPV4) -> bytes:
    return ethernet.Repr(dst_mac, PEER_MAC, ethertype, packet).build()


DELIVERED = {"IpInReceives": 1, "IpInDelivers": 1, "UdpInDatagrams": 1}


def test_a_good_datagram_is_delivered_and_counted_once(rx: Receiver) -> None:
    assert rx.receive(frame(ip_bytes())) == DELIVERED
    assert rx.received() == [(PAYLOAD, (PEER, 4321))]


def test_link_padding_past_the_ip_length_is_not_payload(rx: Receiver) -> None:
    assert rx.receive(frame(ip_bytes()) + bytes(18)) == DELIVERED
    assert rx.received() == [(PAYLOAD, (PEER, 4321))]


def test_udp_padding_past_the_udp_length_is_not_payload(rx: Receiver) -> None:
    # The IP payload is longer than the UDP length field (padding inside the IP packet).
    assert rx.receive(frame(ip_bytes(udp_bytes() + b"\0\0\0"))) == DELIVERED
    assert rx.received() == [(PAYLOAD, (PEER, 4321))]


def test_a_header_with_options_is_delivered(rx: Receiver) -> None:
    packet = ip_bytes(options=b"\x01\x01\x01\x00")  # NOP NOP NOP EOL
    assert rx.receive(frame(packet)) == DELIVERED
    assert rx.received() == [(PAYLOAD, (PEER, 4321))]


def test_ipv6_datagram_is_delivered(rx: Receiver) -> None:
    transport = udp.Repr(4321, PORT, PAYLOAD).build(src=PEER6, dst=LOCAL6)
    packet = ipv6.Repr(PEER6, LOCAL6, udp.PROTOCOL, transport).build()
    counted = rx.receive(frame(packet, ethertype=ethernet.ETHERTYPE_IPV6))
    assert counted == {"Ip6InReceives": 1, "Ip6InDelivers": 1, "Udp6InDatagrams": 1}
    assert rx.received() == [(PAYLOAD, (PEER6, 4321))]


@pytest.mark.parametrize("total_len, counter", [(200, "IpInTruncatedPkts"),
                                                 (19, "IpInHdrErrors")])
def test_bad_total_length_is_a_counted_drop(rx: Receiver, total_len: int, counter: str) -> None:
    packet = bytearray(ip_bytes())
    packet[2:4] = total_len.to_bytes(2, "big")
    assert rx.receive(frame(bytes(packet))) == {"IpInReceives": 1, counter: 1}
    assert rx.received() == []


def test_header_length_below_five_words_is_a_counted_drop(rx: Receiver) -> None:
    packet = bytearray(ip_bytes())
    packet[0] = 0x44
    assert rx.receive(frame(bytes(packet))) == {"IpInReceives": 1, "IpInHdrErrors": 1}


def test_runt_ip_header_is_a_counted_drop(rx: Receiver) -> None:
    assert rx.receive(frame(ip_bytes()[:12])) == {"IpInReceives": 1, "IpInTruncatedPkts": 1}


def test_bad_header_checksum_is_dropped_unless_the_link_verified_it(rx: Receiver) -> None:
    packet = bytearray(ip_bytes())
    packet[10] ^= 0xFF
    counted = rx.receive(frame(bytes(packet)))
    if rx.offload:
        assert counted == DELIVERED
        assert len(rx.received()) == 1
    else:
        assert counted == {"IpInReceives": 1, "IpInCsumErrors": 1, "IpInHdrErrors": 1}
        assert rx.received() == []


def test_bad_udp_checksum_is_dropped_unless_the_link_verified_it(rx: Receiver) -> None:
    transport = bytearray(udp_bytes())
    transport[-1] ^= 0xFF
    counted = rx.receive(frame(ip_bytes(bytes(transport))))
    if rx.offload:
        assert counted == DELIVERED
    else:
        assert counted == {"IpInReceives": 1, "IpInDelivers": 1, "UdpInCsumErrors": 1,
                           "UdpInErrors": 1}
        assert rx.received() == []


def test_zero_udp_checksum_means_none_over_ipv4(rx: Receiver) -> None:
    transport = bytearray(udp_bytes())
    transport[6:8] = b"\0\0"
    assert rx.receive(frame(ip_bytes(bytes(transport)))) == DELIVERED


@pytest.mark.parametrize("length", [7, 0, len(PAYLOAD) + 9, 0xFFFF])
def test_bad_udp_length_is_a_counted_drop(rx: Receiver, length: int) -> None:
    transport = bytearray(udp_bytes())
    transport[4:6] = length.to_bytes(2, "big")
    transport[6:8] = b"\0\0"  # no checksum, so only the length is wrong
    counted = rx.receive(frame(ip_bytes(bytes(transport))))
    assert counted == {"IpInReceives": 1, "IpInDelivers": 1, "UdpInErrors": 1}
    assert rx.received() == []


def test_runt_udp_header_is_a_counted_drop(rx: Receiver) -> None:
    counted = rx.receive(frame(ip_bytes(b"\x10\xe1\x23")))
    assert counted == {"IpInReceives": 1, "IpInDelivers": 1, "UdpInErrors": 1}


def test_frame_for_another_station_is_not_for_us(rx: Receiver) -> None:
    assert rx.receive(frame(ip_bytes(), dst_mac=OTHER_MAC)) == {"RcunetEthOtherHost": 1}


def test_runt_frame_is_an_ethernet_error(rx: Receiver) -> None:
    assert rx.receive(MAC + PEER_MAC) == {"RcunetEthInErrors": 1}


def test_unicast_for_another_address_is_dropped_when_not_forwarding(rx: Receiver) -> None:
    other = bytes([10, 0, 0, 9])
    packet = ip_bytes(udp_bytes(dst=other), dst=other)
    assert rx.receive(frame(packet)) == {"IpInReceives": 1, "IpInAddrErrors": 1}
    # The same packet in a link-layer broadcast frame: Linux drops it too.
    assert rx.receive(frame(packet, dst_mac=ethernet.BROADCAST)) == \
        {"IpInReceives": 1, "IpInAddrErrors": 1}


def test_unknown_protocol_is_counted(rx: Receiver) -> None:
    counted = rx.receive(frame(ip_bytes(b"\0" * 8, protocol=253)))
    assert counted["IpInUnknownProtos"] == 1
    assert "IpInDelivers" not in counted


def test_broadcast_reaches_a_wildcard_socket(rx: Receiver) -> None:
    packet = ip_bytes(udp_bytes(dst=BCAST), dst=BCAST)
    assert rx.receive(frame(packet, dst_mac=ethernet.BROADCAST)) == DELIVERED
    assert rx.received() == [(PAYLOAD, (PEER, 4321))]


def test_multicast_to_a_joined_group_is_delivered(rx: Receiver) -> None:
    packet = ip_bytes(udp_bytes(dst=GROUP), dst=GROUP, ttl=1)
    assert rx.receive(frame(packet, dst_mac=multicast_mac(GROUP))) == DELIVERED
    assert rx.received() == [(PAYLOAD, (PEER, 4321))]


def test_multicast_nobody_listens_to_is_no_ports(rx: Receiver) -> None:
    packet = ip_bytes(udp_bytes(dst=GROUP, dport=PORT + 1), dst=GROUP, ttl=1)
    counted = rx.receive(frame(packet, dst_mac=multicast_mac(GROUP)))
    assert counted == {"IpInReceives": 1, "IpInDelivers": 1, "UdpNoPorts": 1}


def test_multicast_to_a_group_not_joined_is_an_address_error(rx: Receiver) -> None:
    other = bytes([239, 9, 9, 9])
    packet = ip_bytes(udp_bytes(dst=other), dst=other, ttl=1)
    counted = rx.receive(frame(packet, dst_mac=multicast_mac(other)))
    assert counted == {"IpInReceives": 1, "IpInAddrErrors": 1}


# --- fuzz: the receive path agrees with a reference built from the codecs -----------------
def expected_delivery(packet: bytes, offload: bool) -> tuple[bytes, tuple[bytes, int]] | None:
    """What a socket bound to (ANY, PORT) in GROUP must receive from ``packet``."""
    try:
        ip = ipv4.Repr.parse(packet)
    except WireError:
        return None
    if (not offload and not ip.checksum_ok) or ip.is_fragment or ip.protocol != udp.PROTOCOL:
        return None
    if ip.dst not in (LOCAL, BCAST, b"\xff\xff\xff\xff", GROUP):
        return None
    try:
        if offload:
            datagram = udp.Repr.parse(ip.payload)
        else:
            datagram = udp.Repr.parse(ip.payload, ip.src, ip.dst)
    except WireError:
        return None
    if datagram.checksum_ok is False or datagram.dst_port != PORT:
        return None
    return bytes(datagram.payload), (ip.src, datagram.src_port)


mutations = st.lists(st.tuples(st.integers(0, 27), st.integers(0, 255)), max_size=3)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(offload=st.booleans(), edits=mutations, cut=st.integers(0, 40), pad=st.integers(0, 8),
       dst=st.sampled_from([LOCAL, BCAST, GROUP]))
def test_mutated_packets_get_the_codecs_verdict(offload: bool, edits: list[tuple[int, int]],
                                                cut: int, pad: int, dst: bytes) -> None:
    """A fresh receiver per example: a mutated fragment must not meet an earlier one."""
    packet = bytearray(ip_bytes(udp_bytes(dst=dst), dst=dst, ttl=1))
    for index, value in edits:
        packet[index] = value
    data = bytes(packet[:len(packet) - cut]) + bytes(pad)
    expected = expected_delivery(data, offload)
    link_dst = multicast_mac(GROUP) if dst == GROUP else \
        ethernet.BROADCAST if dst == BCAST else MAC
    rx = Receiver(offload)
    try:
        counted = rx.receive(frame(data, dst_mac=link_dst))
        assert "RcunetRxExceptions" not in counted
        # The version nibble picks the input (a 6 there makes it an IPv6 packet).
        assert counted.get("IpInReceives", 0) + counted.get("Ip6InReceives", 0) == 1
        assert rx.received() == ([expected] if expected is not None else [])
    finally:
        rx.close()
