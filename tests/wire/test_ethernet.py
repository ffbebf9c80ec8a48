"""Ethernet II / 802.1Q codec: fixtures, malformed input, scapy cross-checks, properties."""

from __future__ import annotations

import random

import pytest
from conftest import build_poisoned, check_prefixes
from hypothesis import given
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from rcunet.wire import WireError, ethernet

CASES = 200

# A broadcast ARP request as captured on a LAN (padded to the 60-byte minimum).
ARP_FRAME = bytes.fromhex(
    "ffffffffffff"  # dst: broadcast
    "525400123456"  # src
    "0806"  # ARP
    "0001080006040001525400123456c0a80101000000000000c0a80102"  # the ARP message
    + "00" * 18  # padding
)

# An 802.1Q-tagged IPv4 frame: priority 5, DEI 0, VLAN 100.
VLAN_FRAME = bytes.fromhex(
    "001b213a4f01"  # dst
    "000c29abcdef"  # src
    "8100"  # 802.1Q TPID
    "a064"  # TCI: PCP 5, DEI 0, VID 0x064
    "0800"  # IPv4
    "4500001c0001000040017ad00a0000010a000002"  # IPv4 header (ICMP)
    "0800f7ff00000000"  # ICMP echo request
)


def test_arp_frame_fields() -> None:
    frame = ethernet.Repr.parse(ARP_FRAME)
    assert frame.dst == b"\xff" * 6 == ethernet.BROADCAST
    assert frame.src == bytes.fromhex("525400123456")
    assert frame.ethertype == ethernet.ETHERTYPE_ARP
    assert frame.vlan is None and frame.vlan_pcp == 0 and frame.vlan_dei is False
    assert bytes(frame.payload) == ARP_FRAME[14:]  # padding stays: ARP knows its length
    assert frame.buffer_len() == len(ARP_FRAME)
    assert build_poisoned(frame, 7) == ARP_FRAME
    assert frame.build() == ARP_FRAME


def test_vlan_frame_fields() -> None:
    frame = ethernet.Repr.parse(VLAN_FRAME)
    assert frame.dst == bytes.fromhex("001b213a4f01")
    assert frame.src == bytes.fromhex("000c29abcdef")
    assert frame.ethertype == ethernet.ETHERTYPE_IPV4
    assert (frame.vlan, frame.vlan_pcp, frame.vlan_dei) == (100, 5, False)
    assert bytes(frame.payload) == VLAN_FRAME[18:]
    assert build_poisoned(frame, 1) == VLAN_FRAME
    assert frame.header_len() == ethernet.VLAN_HEADER_LEN


def test_vlan_dei_and_vid_extremes() -> None:
    frame = ethernet.Repr(b"\x01" * 6, b"\x02" * 6, ethernet.ETHERTYPE_IPV6, b"x", 4095, 7, True)
    data = frame.build()
    assert data[12:18] == bytes.fromhex("8100ffff86dd")
    assert ethernet.Repr.parse(data) == frame


def test_packet_view() -> None:
    packet = ethernet.Packet.checked(bytearray(VLAN_FRAME))
    assert packet.is_tagged and packet.header_len == 18
    assert (packet.vlan, packet.vlan_pcp, packet.vlan_dei) == (100, 5, False)
    assert packet.ethertype == ethernet.ETHERTYPE_IPV4
    assert bytes(packet.payload()) == VLAN_FRAME[18:]
    packet.set_dst(b"\xaa" * 6)
    packet.set_src(b"\xbb" * 6)
    packet.set_ethertype(ethernet.ETHERTYPE_IPV6)
    assert (packet.dst, packet.src) == (b"\xaa" * 6, b"\xbb" * 6)
    assert ethernet.Repr.parse(packet.buf).ethertype == ethernet.ETHERTYPE_IPV6
    untagged = ethernet.Packet.checked(ARP_FRAME)
    assert untagged.vlan is None and untagged.header_len == 14
    assert untagged.ethertype == ethernet.ETHERTYPE_ARP
    with pytest.raises(WireError):
        ethernet.Packet.checked(VLAN_FRAME[:16])
    with pytest.raises(WireError):
        ethernet.Packet.checked(b"\x00" * 13)
    raw_view = ethernet.Packet.unchecked(bytearray(ARP_FRAME))
    raw_view.payload_mut()[7] = 2  # the ARP operation byte: request -> reply, in place
    assert ethernet.Repr.parse(raw_view.buf).payload[7] == 2


@pytest.mark.parametrize("fixture", [ARP_FRAME, VLAN_FRAME], ids=["arp", "vlan"])
def test_truncated_prefixes(fixture: bytes) -> None:
    legal = ethernet.Repr.parse(fixture).header_len()
    check_prefixes(ethernet.Repr.parse, fixture, legal)


def frame_with_type(ethertype: int, tagged_inner: int | None = None) -> bytes:
    header = b"\x01" * 6 + b"\x02" * 6 + ethertype.to_bytes(2, "big")
    if tagged_inner is not None:
        header += b"\x00\x05" + tagged_inner.to_bytes(2, "big")
    return header + b"payload"


@pytest.mark.parametrize(
    "data",
    [
        frame_with_type(0x0000),
        frame_with_type(0x05DC),  # 802.3 length 1500
        frame_with_type(0x05FF),
        frame_with_type(ethernet.ETHERTYPE_VLAN, ethernet.ETHERTYPE_VLAN),  # two tags
        frame_with_type(ethernet.ETHERTYPE_VLAN, ethernet.ETHERTYPE_QINQ),
        frame_with_type(ethernet.ETHERTYPE_QINQ, ethernet.ETHERTYPE_VLAN),  # 802.1ad outer
        frame_with_type(ethernet.ETHERTYPE_VLAN, 0x0040),  # tagged 802.3 length
    ],
)
def test_unsupported_frames(data: bytes) -> None:
    with pytest.raises(WireError) as info:
        ethernet.Repr.parse(data)
    assert info.value.reason == "unsupported"
    with pytest.raises(WireError):
        ethernet.Packet.checked(data)


def test_smallest_ethertype_is_accepted() -> None:
    assert ethernet.Repr.parse(frame_with_type(0x0600)).ethertype == 0x0600


@pytest.mark.parametrize(
    "frame",
    [
        ethernet.Repr(b"\x01" * 5, b"\x02" * 6, 0x0800),
        ethernet.Repr(b"\x01" * 6, b"\x02" * 7, 0x0800),
        ethernet.Repr(b"\x01" * 6, b"\x02" * 6, 0x0100),
        ethernet.Repr(b"\x01" * 6, b"\x02" * 6, 0x10000),
        ethernet.Repr(b"\x01" * 6, b"\x02" * 6, ethernet.ETHERTYPE_VLAN),
        ethernet.Repr(b"\x01" * 6, b"\x02" * 6, 0x0800, b"", 4096),
        ethernet.Repr(b"\x01" * 6, b"\x02" * 6, 0x0800, b"", -1),
        ethernet.Repr(b"\x01" * 6, b"\x02" * 6, 0x0800, b"", 1, 8),
        ethernet.Repr(b"\x01" * 6, b"\x02" * 6, 0x0800, b"", None, 3),  # would be lost
        ethernet.Repr(b"\x01" * 6, b"\x02" * 6, 0x0800, b"", None, 0, True),
    ],
)
def test_build_rejects_bad_fields(frame: ethernet.Repr) -> None:
    with pytest.raises(WireError):
        frame.build()


def test_build_into_small_buffer() -> None:
    frame = ethernet.Repr(b"\x01" * 6, b"\x02" * 6, 0x0800, b"abc")
    with pytest.raises(WireError) as info:
        frame.build(bytearray(16), 0)
    assert info.value.reason == "buffer-too-small"
    assert frame.build(bytearray(18), 1) == 17


def random_mac(rng: random.Random) -> bytes:
    return rng.randbytes(6)


def random_ethertype(rng: random.Random) -> int:
    choice = rng.choice([0x0800, 0x0806, 0x86DD, 0x88CC, None])
    return choice if choice is not None else rng.choice(
        [t for t in range(0x0600, 0x10000, 97) if t not in (0x8100, 0x88A8)]
    )


def test_scapy_builds_rcunet_parses() -> None:
    for case in range(CASES):
        rng = random.Random(case)
        dst, src, ethertype = random_mac(rng), random_mac(rng), random_ethertype(rng)
        payload = rng.randbytes(rng.randrange(0, 80))
        tagged = rng.random() < 0.5
        if tagged:
            vlan, pcp, dei = rng.randrange(4096), rng.randrange(8), rng.randrange(2)
            packet = (
                Ether(dst=dst, src=src)
                / Dot1Q(prio=pcp, dei=dei, vlan=vlan, type=ethertype)
                / Raw(payload)
            )
        else:
            packet = Ether(dst=dst, src=src, type=ethertype) / Raw(payload)
        frame = ethernet.Repr.parse(raw(packet))
        assert (frame.dst, frame.src, frame.ethertype) == (dst, src, ethertype), case
        assert bytes(frame.payload) == payload, case
        if tagged:
            assert (frame.vlan, frame.vlan_pcp, frame.vlan_dei) == (vlan, pcp, bool(dei)), case
        else:
            assert frame.vlan is None, case


def test_rcunet_builds_scapy_parses() -> None:
    for case in range(CASES):
        rng = random.Random(10_000 + case)
        tagged = rng.random() < 0.5
        frame = ethernet.Repr(
            random_mac(rng),
            random_mac(rng),
            random_ethertype(rng),
            rng.randbytes(rng.randrange(0, 80)),
            rng.randrange(4096) if tagged else None,
            rng.randrange(8) if tagged else 0,
            rng.random() < 0.5 if tagged else False,
        )
        packet = Ether(build_poisoned(frame, case % 5))
        assert bytes.fromhex(packet.dst.replace(":", "")) == frame.dst, case
        assert bytes.fromhex(packet.src.replace(":", "")) == frame.src, case
        if tagged:
            assert packet.type == ethernet.ETHERTYPE_VLAN, case
            tag = packet[Dot1Q]
            assert (tag.vlan, tag.prio, tag.dei) == (frame.vlan, frame.vlan_pcp, frame.vlan_dei)
            assert tag.type == frame.ethertype, case
            inner = tag.payload
        else:
            assert packet.type == frame.ethertype, case
            inner = packet.payload
        assert raw(inner) == frame.payload, case


reprs = st.builds(
    ethernet.Repr,
    st.binary(min_size=6, max_size=6),
    st.binary(min_size=6, max_size=6),
    st.integers(0x0600, 0xFFFF).filter(lambda t: t not in (0x8100, 0x88A8)),
    st.binary(max_size=64),
    st.none() | st.integers(0, 4095),
    st.integers(0, 7),
    st.booleans(),
).map(lambda r: r if r.vlan is not None else r._replace(vlan_pcp=0, vlan_dei=False))


@given(reprs)
def test_parse_build_roundtrip(frame: ethernet.Repr) -> None:
    assert ethernet.Repr.parse(frame.build()) == frame


@given(st.binary(max_size=64))
def test_arbitrary_bytes_only_raise_wire_error(data: bytes) -> None:
    try:
        frame = ethernet.Repr.parse(data)
    except WireError:
        return
    assert frame.build() == data
