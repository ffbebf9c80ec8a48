"""The Internet checksum (RFC 1071) against a word-by-word reference, RFC 1624 updates,
and the pseudo-headers."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from rcunet.wire import checksum as ck


def reference_sum(data: bytes, initial: int = 0) -> int:
    """RFC 1071 §4.1, literally: add 16-bit words, fold the carries back in."""
    if len(data) % 2:
        data += b"\x00"
    total = initial
    for i in range(0, len(data), 2):
        total += data[i] << 8 | data[i + 1]
        total = (total & 0xFFFF) + (total >> 16)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def reference_checksum(data: bytes, initial: int = 0) -> int:
    return ~reference_sum(data, initial) & 0xFFFF


def with_checksum_at(data: bytes, at: int) -> bytes:
    """``data`` with a correct checksum stored at even offset ``at`` (field zeroed first)."""
    zeroed = data[:at] + b"\x00\x00" + data[at + 2 :]
    return zeroed[:at] + struct.pack("!H", reference_checksum(zeroed)) + zeroed[at + 2 :]


def test_rfc1071_numeric_example() -> None:
    # RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2 (with end-around carry).
    data = bytes.fromhex("0001f203f4f5f6f7")
    assert ck.ones_complement_sum(data) == 0xDDF2
    assert ck.internet_checksum(data) == ~0xDDF2 & 0xFFFF


def test_known_ipv4_header_checksum() -> None:
    header = bytes.fromhex("45000073000040004011" "0000" "c0a80001c0a800c7")
    assert ck.internet_checksum(header) == 0xB861
    assert ck.is_valid(header[:10] + b"\xb8\x61" + header[12:])


@given(st.binary(max_size=300), st.integers(0, 0xFFFF))
def test_matches_reference(data: bytes, initial: int) -> None:
    assert ck.ones_complement_sum(data, initial) == reference_sum(data, initial)
    assert ck.internet_checksum(data, initial) == reference_checksum(data, initial)


@pytest.mark.parametrize("length", [0, 1, 2, 3, 5, 7, 9, 63, 65, 1499, 1501])
def test_odd_and_even_lengths(length: int) -> None:
    rng = random.Random(length)
    data = bytes(rng.randrange(256) for _ in range(length))
    assert ck.ones_complement_sum(data) == reference_sum(data)
    # An odd trailing byte is the high half of a word padded with zero.
    if length % 2:
        assert ck.ones_complement_sum(data) == reference_sum(data[:-1] + data[-1:] + b"\x00")


def test_all_ones_words_and_zeros() -> None:
    # One's complement has two zeros; a non-empty sum of non-zero words is never +0.
    assert ck.ones_complement_sum(b"\xff\xff") == 0xFFFF
    assert ck.ones_complement_sum(b"\xff\xff" * 1000) == 0xFFFF
    assert ck.ones_complement_sum(b"\x00" * 10) == 0
    assert ck.ones_complement_sum(b"") == 0
    assert ck.internet_checksum(b"\x00\x00") == 0xFFFF
    assert ck.ones_complement_sum(b"\x80\x00\x80\x00") == 0x0001
    assert ck.fold(0) == 0 and ck.fold(0xFFFF) == 0xFFFF and ck.fold(0x1_0000) == 0x0001


@given(st.binary(min_size=2, max_size=200).map(lambda b: b if len(b) % 2 == 0 else b + b"\x01"))
def test_is_valid_after_filling(data: bytes) -> None:
    filled = with_checksum_at(data, 0)
    assert ck.is_valid(filled)
    corrupted = filled[:1] + bytes([filled[1] ^ 0x01]) + filled[2:]
    assert not ck.is_valid(corrupted)


def test_rfc1624_section4_example() -> None:
    # RFC 1624 §4: header checksum 0xDD2F, a field changes from 0x5555 to 0x3285.  The
    # RFC 1141 formula (eqn. 2) yields 0xFFFF (-0); the correct eqn. 3 yields 0x0000.
    assert ck.update16(0xDD2F, 0x5555, 0x3285) == 0x0000
    eqn2 = ck.fold(0xDD2F + 0x5555 + (~0x3285 & 0xFFFF))
    assert eqn2 == 0xFFFF  # what the RFC shows the old method getting wrong
    # The from-scratch checksum agrees with eqn. 3: C = ~HC = 0x22D0; C' = C - m + m'.
    assert ck.finish(ck.fold(0x22D0 + (~0x5555 & 0xFFFF) + 0x3285)) == 0x0000


def test_update_with_unchanged_field_keeps_zero_checksum() -> None:
    # RFC 1624 erratum 4782's case: m == m' and HC == 0 must stay 0, not become 0xFFFF.
    assert ck.update16(0x0000, 0x5555, 0x5555) == 0x0000


@given(
    st.binary(min_size=20, max_size=20),
    st.sampled_from([0, 2, 4, 6, 8, 12, 14, 16, 18]),  # every word but the checksum's
    st.integers(0, 0xFFFF),
)
def test_update16_equals_recompute(header: bytes, at: int, new_word: int) -> None:
    assume(any(header))
    original = with_checksum_at(header, 10)
    old_word = struct.unpack_from("!H", original, at)[0]
    changed = bytearray(original)
    struct.pack_into("!H", changed, at, new_word)
    assume(any(changed[:10] + changed[12:]))
    expected = reference_checksum(bytes(changed[:10] + b"\x00\x00" + changed[12:]))
    hc = struct.unpack_from("!H", original, 10)[0]
    assert ck.update16(hc, old_word, new_word) == expected


@given(st.binary(min_size=40, max_size=40), st.binary(min_size=4, max_size=4))
def test_update_bytes_equals_recompute(packet: bytes, new_addr: bytes) -> None:
    # Rewrite an address at offset 12 (an IPv4 source, as NAT does).
    assume(any(packet))
    original = with_checksum_at(packet, 10)
    changed = original[:12] + new_addr + original[16:]
    assume(any(changed[:10] + changed[12:]))
    hc = struct.unpack_from("!H", original, 10)[0]
    expected = reference_checksum(changed[:10] + b"\x00\x00" + changed[12:])
    assert ck.update_bytes(hc, original[12:16], new_addr) == expected


def test_update_bytes_rejects_mismatched_fields() -> None:
    with pytest.raises(ValueError):
        ck.update_bytes(0, b"\x00\x01", b"\x00")
    with pytest.raises(ValueError):
        ck.update_bytes(0, b"\x00", b"\x01")


def test_pseudo_header_v4() -> None:
    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    expected = reference_sum(src + dst + bytes([0, 17]) + struct.pack("!H", 30))
    assert ck.pseudo_header_sum_v4(src, dst, 17, 30) == expected
    assert ck.pseudo_header_sum(src, dst, 17, 30) == expected


def test_pseudo_header_v6() -> None:
    src = bytes.fromhex("fe800000000000000000000000000001")
    dst = bytes.fromhex("ff020000000000000000000000000001")
    expected = reference_sum(src + dst + struct.pack("!I", 70000) + bytes([0, 0, 0, 58]))
    assert ck.pseudo_header_sum_v6(src, dst, 58, 70000) == expected
    assert ck.pseudo_header_sum(src, dst, 58, 70000) == expected


def test_known_udp_checksum_with_pseudo_header() -> None:
    # A UDP datagram 192.168.0.1:1024 -> 192.168.0.199:53 carrying "hi": the pseudo-header
    # partial sum plus the datagram must give the reference over the concatenation.
    src, dst = bytes([192, 168, 0, 1]), bytes([192, 168, 0, 199])
    datagram = bytes.fromhex("04000035000a0000") + b"hi"
    pseudo = ck.pseudo_header_sum(src, dst, 17, len(datagram))
    value = ck.internet_checksum(datagram, pseudo)
    assert value == reference_checksum(
        src + dst + bytes([0, 17, 0, len(datagram)]) + datagram
    )
    filled = datagram[:6] + struct.pack("!H", value) + datagram[8:]
    assert ck.is_valid(filled, pseudo)
