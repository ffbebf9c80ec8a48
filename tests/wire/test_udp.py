"""UDP codec: fixtures, malformed input, scapy cross-checks (IPv4 and IPv6 pseudo-headers),
properties."""

from __future__ import annotations

import ipaddress
import random

import pytest
from conftest import build_poisoned, check_prefixes
from hypothesis import given
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw

from rcunet.wire import WireError, udp
from rcunet.wire import checksum as ck

CASES = 200

SRC4, DST4 = bytes([192, 168, 0, 1]), bytes([192, 168, 0, 2])
# 192.168.0.1:54321 -> 192.168.0.2:53 carrying "hello".
HELLO = bytes.fromhex(
    "d431"  # source port 54321
    "0035"  # destination port 53
    "000d"  # length 13
    "6647"  # checksum (with the IPv4 pseudo-header)
    "68656c6c6f"  # "hello"
)
# The same datagram sent without a checksum (allowed over IPv4 only).
HELLO_NO_CHECKSUM = HELLO[:6] + b"\x00\x00" + HELLO[8:]

SRC6 = ipaddress.IPv6Address("2001:db8::1").packed
DST6 = ipaddress.IPv6Address("2001:db8::2").packed
# A DNS query header for "example." from [2001:db8::1]:5353 to [2001:db8::2]:53.
DNS6 = bytes.fromhex(
    "14e9"  # 5353
    "0035"  # 53
    "0021"  # length 33
    "86ae"  # checksum (with the IPv6 pseudo-header)
    "abcd01000001000000000000"  # DNS header: id 0xabcd, RD, one question
    "076578616d706c650000010001"  # example. IN A
)


def test_hello_fields() -> None:
    datagram = udp.Repr.parse(HELLO, SRC4, DST4, verify=True)
    assert (datagram.src_port, datagram.dst_port) == (54321, 53)
    assert bytes(datagram.payload) == b"hello"
    assert (datagram.checksum, datagram.checksum_ok) == (0x6647, True)
    assert datagram.buffer_len() == 13
    assert build_poisoned(datagram, 6, src=SRC4, dst=DST4) == HELLO
    assert datagram.build(src=SRC4, dst=DST4) == HELLO


def test_dns_over_ipv6_fields() -> None:
    datagram = udp.Repr.parse(DNS6, SRC6, DST6, verify=True)
    assert (datagram.src_port, datagram.dst_port, datagram.checksum) == (5353, 53, 0x86AE)
    assert bytes(datagram.payload) == DNS6[8:]
    assert build_poisoned(datagram, src=SRC6, dst=DST6) == DNS6


def test_without_addresses_the_checksum_is_unknown() -> None:
    datagram = udp.Repr.parse(HELLO)
    assert datagram.checksum_ok is None and datagram.checksum == 0x6647
    assert build_poisoned(datagram) == HELLO_NO_CHECKSUM  # nothing to compute it with
    assert datagram.build(src=SRC4, dst=DST4, checksum=False) == HELLO_NO_CHECKSUM


def test_zero_checksum_means_none_over_ipv4_only() -> None:
    assert udp.Repr.parse(HELLO_NO_CHECKSUM, SRC4, DST4, verify=True).checksum_ok is True
    zero6 = DNS6[:6] + b"\x00\x00" + DNS6[8:]
    assert udp.Repr.parse(zero6, SRC6, DST6).checksum_ok is False  # RFC 8200 §8.1
    with pytest.raises(WireError):
        udp.Repr.parse(zero6, SRC6, DST6, verify=True)


def test_computed_zero_is_sent_as_all_ones() -> None:
    # Pick the payload word that makes the sum come out as 0xFFFF, i.e. checksum 0.
    head = udp.Repr(1, 2, b"\x00\x00").build(src=SRC4, dst=DST4, checksum=False)
    partial = ck.ones_complement_sum(head, ck.pseudo_header_sum(SRC4, DST4, 17, 10))
    word = 0xFFFF - partial
    datagram = udp.Repr(1, 2, word.to_bytes(2, "big"))
    assert ck.internet_checksum(
        datagram.build(src=SRC4, dst=DST4, checksum=False), ck.pseudo_header_sum(SRC4, DST4, 17, 10)
    ) == 0
    data = datagram.build(src=SRC4, dst=DST4)
    assert data[6:8] == b"\xff\xff"
    assert udp.Repr.parse(data, SRC4, DST4, verify=True).checksum_ok


def test_bad_checksum_is_reported_or_rejected() -> None:
    data = bytearray(HELLO)
    data[-1] ^= 0x20
    assert udp.Repr.parse(data, SRC4, DST4).checksum_ok is False
    with pytest.raises(WireError) as info:
        udp.Repr.parse(data, SRC4, DST4, verify=True)
    assert info.value.reason == "bad-checksum"
    assert udp.Repr.parse(HELLO, DST4, SRC4[:3] + b"\x09").checksum_ok is False


def test_padding_after_the_length_is_ignored() -> None:
    datagram = udp.Repr.parse(HELLO + b"\x00" * 9, SRC4, DST4, verify=True)
    assert bytes(datagram.payload) == b"hello"


@pytest.mark.parametrize("fixture", [HELLO, DNS6])
def test_truncated_prefixes(fixture: bytes) -> None:
    check_prefixes(udp.Repr.parse, fixture, None)  # every prefix is shorter than the length


@pytest.mark.parametrize("length, reason", [(0, "bad-length"), (7, "bad-length"),
                                            (14, "truncated"), (0xFFFF, "truncated")])
def test_length_lies(length: int, reason: str) -> None:
    data = HELLO[:4] + length.to_bytes(2, "big") + HELLO[6:]
    with pytest.raises(WireError) as info:
        udp.Repr.parse(data)
    assert info.value.reason == reason
    with pytest.raises(WireError):
        udp.Packet.checked(data)


@pytest.mark.parametrize(
    "datagram, reason",
    [
        (udp.Repr(65536, 1), "bad-field"),
        (udp.Repr(1, -1), "bad-field"),
        (udp.Repr(1, 2, bytes(0xFFFF - 7)), "too-long"),
    ],
)
def test_build_rejects_bad_fields(datagram: udp.Repr, reason: str) -> None:
    with pytest.raises(WireError) as info:
        datagram.build()
    assert info.value.reason == reason


def test_build_into_small_buffer() -> None:
    with pytest.raises(WireError) as info:
        udp.Repr(1, 2, b"abc").build(bytearray(12), 2)
    assert info.value.reason == "buffer-too-small"
    with pytest.raises(WireError) as info:
        udp.Repr(1, 2, b"abc").build(bytearray(12), -1)
    assert info.value.reason == "buffer-too-small"


def test_packet_view() -> None:
    packet = udp.Packet.checked(bytearray(HELLO + b"\x00\x00"))
    assert (packet.src_port, packet.dst_port, packet.length, packet.checksum) == (
        54321, 53, 13, 0x6647)
    assert bytes(packet.payload()) == b"hello"
    assert packet.verify_checksum(SRC4, DST4)
    packet.payload_mut()[0:5] = b"HELLO"
    assert not packet.verify_checksum(SRC4, DST4)
    packet.set_checksum(0)
    assert packet.verify_checksum(SRC4, DST4)  # "no checksum" over IPv4
    assert not packet.verify_checksum(SRC6, DST6)
    packet.set_src_port(1)
    packet.set_dst_port(2)
    packet.set_length(8)
    assert (packet.src_port, packet.dst_port, bytes(packet.payload())) == (1, 2, b"")
    with pytest.raises(WireError):
        udp.Packet.checked(HELLO[:7])
    assert udp.Packet.unchecked(HELLO[:2]).src_port == 54321


def random_addresses(rng: random.Random) -> tuple[bytes, bytes, bool]:
    v6 = rng.random() < 0.4
    size = 16 if v6 else 4
    return rng.randbytes(size), rng.randbytes(size), v6


def scapy_network(src: bytes, dst: bytes, v6: bool) -> IP | IPv6:
    """A scapy IPv4/IPv6 header announcing UDP."""
    if v6:
        return IPv6(src=str(ipaddress.IPv6Address(src)), dst=str(ipaddress.IPv6Address(dst)),
                    nh=17)
    return IP(src=str(ipaddress.IPv4Address(src)), dst=str(ipaddress.IPv4Address(dst)), proto=17)


def test_scapy_builds_rcunet_parses() -> None:
    for case in range(CASES):
        rng = random.Random(case)
        src, dst, v6 = random_addresses(rng)
        sport, dport = rng.randrange(65536), rng.randrange(65536)
        payload = rng.randbytes(rng.randrange(0, 100))
        packet = scapy_network(src, dst, v6) / UDP(sport=sport, dport=dport) / Raw(payload)
        data = raw(packet[UDP])
        datagram = udp.Repr.parse(data, src, dst, verify=True)
        assert (datagram.src_port, datagram.dst_port) == (sport, dport), case
        assert bytes(datagram.payload) == payload, case
        assert datagram.checksum == UDP(data).chksum and datagram.checksum_ok, case


def test_rcunet_builds_scapy_parses() -> None:
    for case in range(CASES):
        rng = random.Random(10_000 + case)
        src, dst, v6 = random_addresses(rng)
        datagram = udp.Repr(
            rng.randrange(65536), rng.randrange(65536), rng.randbytes(rng.randrange(0, 100))
        )
        data = build_poisoned(datagram, case % 5, src=src, dst=dst)
        # Dissect inside its network header so scapy checks with the right pseudo-header.
        network = scapy_network(src, dst, v6)
        dissected = network.__class__(raw(network / Raw(data)))[UDP]
        assert (dissected.sport, dissected.dport) == (datagram.src_port, datagram.dst_port)
        assert dissected.len == len(data), case
        assert dissected.payload.original == datagram.payload, case
        recomputed = network.__class__(raw(network / Raw(data)))
        del recomputed[UDP].chksum
        assert network.__class__(raw(recomputed))[UDP].chksum == dissected.chksum, case


reprs = st.builds(
    udp.Repr,
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFFFF),
    st.binary(max_size=64),
    checksum=st.just(0),
    checksum_ok=st.none(),
)
addresses = st.sampled_from([4, 16]).flatmap(
    lambda n: st.tuples(st.binary(min_size=n, max_size=n), st.binary(min_size=n, max_size=n))
)


@given(reprs, addresses)
def test_parse_build_roundtrip(datagram: udp.Repr, pair: tuple[bytes, bytes]) -> None:
    src, dst = pair
    parsed = udp.Repr.parse(datagram.build(src=src, dst=dst), src, dst, verify=True)
    assert parsed._replace(checksum=0, checksum_ok=None) == datagram


@given(st.binary(max_size=40), st.none() | addresses)
def test_arbitrary_bytes_only_raise_wire_error(
    data: bytes, pair: tuple[bytes, bytes] | None
) -> None:
    src, dst = pair if pair is not None else (None, None)
    try:
        udp.Repr.parse(data, src, dst)
    except WireError:
        pass
