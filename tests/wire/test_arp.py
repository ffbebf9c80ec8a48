"""ARP codec: fixtures, malformed input, scapy cross-checks, properties."""

from __future__ import annotations

import random

import pytest
from conftest import build_poisoned, check_prefixes
from hypothesis import given
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.l2 import ARP

from rcunet.wire import WireError, arp

CASES = 200

# "Who has 192.168.1.2? Tell 192.168.1.1", followed by Ethernet padding.
REQUEST = bytes.fromhex(
    "0001"  # hardware: Ethernet
    "0800"  # protocol: IPv4
    "06"  # hardware address length
    "04"  # protocol address length
    "0001"  # request
    "525400123456"  # sender MAC
    "c0a80101"  # sender IP 192.168.1.1
    "000000000000"  # target MAC (unknown)
    "c0a80102"  # target IP 192.168.1.2
)
PADDING = b"\x00" * 18

# "192.168.1.2 is at 52:54:00:ab:cd:ef"
REPLY = bytes.fromhex(
    "0001" "0800" "06" "04"  # Ethernet/IPv4
    "0002"  # reply
    "525400abcdef" "c0a80102"  # sender: the answer
    "525400123456" "c0a80101"  # target: the asker
)


def test_request_fields() -> None:
    message = arp.Repr.parse(REQUEST + PADDING)
    assert message.operation == arp.REQUEST
    assert message.sender_mac == bytes.fromhex("525400123456")
    assert message.sender_ip == bytes([192, 168, 1, 1])
    assert message.target_mac == bytes(6)
    assert message.target_ip == bytes([192, 168, 1, 2])
    assert build_poisoned(message, 5) == REQUEST
    assert message.build() == REQUEST
    assert message.buffer_len() == 28


def test_reply_fields() -> None:
    message = arp.Repr.parse(REPLY)
    assert message == arp.Repr(
        arp.REPLY,
        bytes.fromhex("525400abcdef"),
        bytes([192, 168, 1, 2]),
        bytes.fromhex("525400123456"),
        bytes([192, 168, 1, 1]),
    )
    assert build_poisoned(message) == REPLY


def test_packet_view() -> None:
    packet = arp.Packet.checked(bytearray(REQUEST))
    assert (packet.hardware_type, packet.protocol_type) == (1, 0x0800)
    assert (packet.hardware_len, packet.protocol_len, packet.operation) == (6, 4, 1)
    assert packet.sender_ip == bytes([192, 168, 1, 1])
    # Turn the request into its reply in place, as a responder does.
    packet.set_operation(arp.REPLY)
    packet.set_target_mac(packet.sender_mac)
    packet.set_target_ip(packet.sender_ip)
    packet.set_sender_mac(bytes.fromhex("525400abcdef"))
    packet.set_sender_ip(bytes([192, 168, 1, 2]))
    assert bytes(packet.buf) == REPLY
    assert (packet.target_mac, packet.target_ip) == (REPLY[18:24], REPLY[24:28])
    with pytest.raises(WireError):
        arp.Packet.checked(REQUEST[:27])
    with pytest.raises(WireError):
        arp.Packet.checked(bytes([0, 6]) + REQUEST[2:])
    assert arp.Packet.unchecked(REQUEST[:8]).operation == arp.REQUEST


@pytest.mark.parametrize("fixture", [REQUEST + PADDING, REPLY], ids=["request", "reply"])
def test_truncated_prefixes(fixture: bytes) -> None:
    check_prefixes(arp.Repr.parse, fixture, 28)


@pytest.mark.parametrize(
    "at, value",
    [
        (1, 6),  # hardware type 6 (IEEE 802)
        (2, 0x86),  # protocol 0x8600
        (4, 8),  # hardware length 8
        (5, 16),  # protocol length 16
        (7, 3),  # RARP request
        (7, 0),
    ],
)
def test_unsupported_messages(at: int, value: int) -> None:
    data = bytearray(REQUEST)
    data[at] = value
    with pytest.raises(WireError) as info:
        arp.Repr.parse(data)
    assert info.value.reason == "unsupported"


def test_build_rejects_bad_fields() -> None:
    good = arp.Repr.parse(REQUEST)
    for bad in (
        good._replace(operation=3),
        good._replace(sender_mac=b"\x00" * 5),
        good._replace(target_ip=b"\x00" * 16),
    ):
        with pytest.raises(WireError):
            bad.build()
    with pytest.raises(WireError):
        good.build(bytearray(30), 3)


def test_scapy_builds_rcunet_parses() -> None:
    for case in range(CASES):
        rng = random.Random(case)
        op = rng.choice(arp.OPERATIONS)
        sha, tha = rng.randbytes(6), rng.randbytes(6)
        spa, tpa = rng.randbytes(4), rng.randbytes(4)
        packet = ARP(
            op=op,
            hwsrc=sha.hex(":"),
            psrc=".".join(map(str, spa)),
            hwdst=tha.hex(":"),
            pdst=".".join(map(str, tpa)),
        )
        message = arp.Repr.parse(raw(packet) + rng.randbytes(rng.randrange(20)))
        assert message == arp.Repr(op, sha, spa, tha, tpa), case


def test_rcunet_builds_scapy_parses() -> None:
    for case in range(CASES):
        rng = random.Random(10_000 + case)
        message = arp.Repr(
            rng.choice(arp.OPERATIONS),
            rng.randbytes(6),
            rng.randbytes(4),
            rng.randbytes(6),
            rng.randbytes(4),
        )
        packet = ARP(build_poisoned(message, case % 4))
        assert (packet.hwtype, packet.ptype, packet.hwlen, packet.plen) == (1, 0x0800, 6, 4)
        assert packet.op == message.operation, case
        assert packet.hwsrc == message.sender_mac.hex(":"), case
        assert packet.hwdst == message.target_mac.hex(":"), case
        assert packet.psrc == ".".join(map(str, message.sender_ip)), case
        assert packet.pdst == ".".join(map(str, message.target_ip)), case


reprs = st.builds(
    arp.Repr,
    st.sampled_from(arp.OPERATIONS),
    st.binary(min_size=6, max_size=6),
    st.binary(min_size=4, max_size=4),
    st.binary(min_size=6, max_size=6),
    st.binary(min_size=4, max_size=4),
)


@given(reprs)
def test_parse_build_roundtrip(message: arp.Repr) -> None:
    assert arp.Repr.parse(message.build()) == message


@given(st.binary(max_size=40) | st.binary(max_size=40).map(lambda b: REQUEST[:8] + b))
def test_arbitrary_bytes_only_raise_wire_error(data: bytes) -> None:
    try:
        message = arp.Repr.parse(data)
    except WireError:
        return
    assert message.build() == data[:28]
