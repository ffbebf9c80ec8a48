"""IPv4 codec: fixtures, malformed input, scapy cross-checks, properties."""

from __future__ import annotations

import random

import pytest
from conftest import build_poisoned, check_prefixes
from hypothesis import given
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.inet import (
    IP,
    IPOption_LSRR,
    IPOption_NOP,
    IPOption_Router_Alert,
    IPOption_RR,
    IPOption_SSRR,
)
from scapy.packet import Raw

from rcunet.wire import WireError, ipv4

CASES = 200

# An IGMPv2 membership report for 224.0.0.251 carrying the Router Alert option (RFC 2113).
IGMP_WITH_OPTIONS = bytes.fromhex(
    "46"  # version 4, IHL 6
    "c0"  # DSCP 48 (CS6), ECN 0
    "0020"  # total length 32
    "0000"  # ident
    "4000"  # DF
    "01"  # TTL 1
    "02"  # IGMP
    "4110"  # header checksum
    "c0a80164"  # 192.168.1.100
    "e00000fb"  # 224.0.0.251
    "94040000"  # Router Alert: copied, type 20, length 4, value 0
    "16000904e00000fb"  # IGMPv2 report
)

# A middle fragment of a large UDP datagram: offset 185 * 8 = 1480, MF set, DSCP EF (46)
# and ECT(1).
FRAGMENT_PAYLOAD = bytes(i & 0xFF for i in range(1480))
FRAGMENT = (
    bytes.fromhex(
        "45"  # version 4, IHL 5
        "b9"  # DSCP 46, ECN 1
        "05dc"  # total length 1500
        "1c46"  # ident
        "20b9"  # MF, fragment offset 185 (8-byte units)
        "40"  # TTL 64
        "11"  # UDP
        "b540"  # header checksum
        "c0a80001"  # 192.168.0.1
        "c0a800c7"  # 192.168.0.199
    )
    + FRAGMENT_PAYLOAD
)

# A 28-byte ICMP echo request as it arrives in a 60-byte Ethernet frame: 18 bytes of padding.
ECHO = bytes.fromhex(
    "4500001c"  # version 4, IHL 5, DSCP 0, total length 28
    "abcd0000"  # ident, no flags
    "4001bb11"  # TTL 64, ICMP, header checksum
    "0a000001"  # 10.0.0.1
    "0a000002"  # 10.0.0.2
    "0800e5ca12340001"  # ICMP echo request, ident 0x1234, seq 1
)
ETHERNET_PADDING = b"\x00" * 18


def test_header_with_options_fields() -> None:
    packet = ipv4.Repr.parse(IGMP_WITH_OPTIONS)
    assert packet.src == bytes([192, 168, 1, 100])
    assert packet.dst == bytes([224, 0, 0, 251])
    assert packet.protocol == 2
    assert (packet.ttl, packet.ident, packet.dscp, packet.ecn) == (1, 0, 48, 0)
    assert packet.dont_fragment and not packet.more_fragments and packet.frag_offset == 0
    assert not packet.is_fragment
    assert packet.options == bytes.fromhex("94040000")
    assert bytes(packet.payload) == bytes.fromhex("16000904e00000fb")
    assert (packet.checksum, packet.checksum_ok) == (0x4110, True)
    assert packet.header_len() == 24 and packet.buffer_len() == 32
    assert build_poisoned(packet, 9) == IGMP_WITH_OPTIONS
    assert packet.build() == IGMP_WITH_OPTIONS


def test_fragment_fields() -> None:
    packet = ipv4.Repr.parse(FRAGMENT, verify=True)
    assert (packet.src, packet.dst) == (bytes([192, 168, 0, 1]), bytes([192, 168, 0, 199]))
    assert packet.protocol == ipv4.PROTO_UDP
    assert (packet.ttl, packet.ident) == (64, 0x1C46)
    assert (packet.dscp, packet.ecn) == (46, 1)
    assert not packet.dont_fragment and packet.more_fragments
    assert packet.frag_offset == 1480 and packet.is_fragment
    assert packet.options == b""
    assert bytes(packet.payload) == FRAGMENT_PAYLOAD
    assert (packet.checksum, packet.checksum_ok) == (0xB540, True)
    assert build_poisoned(packet) == FRAGMENT


def test_padding_is_dropped() -> None:
    packet = ipv4.Repr.parse(ECHO + ETHERNET_PADDING)
    assert packet.protocol == ipv4.PROTO_ICMP and packet.ident == 0xABCD
    assert bytes(packet.payload) == bytes.fromhex("0800e5ca12340001")
    assert packet.checksum_ok
    assert build_poisoned(packet) == ECHO


def test_payload_is_a_zero_copy_view() -> None:
    data = bytearray(ECHO)
    packet = ipv4.Repr.parse(data)
    data[20] = 0x00  # the ICMP type byte, through the original buffer
    assert packet.payload[0] == 0x00


def test_bad_checksum_is_reported_or_rejected() -> None:
    data = bytearray(ECHO)
    data[11] ^= 0x40
    packet = ipv4.Repr.parse(data)
    assert packet.checksum_ok is False and packet.checksum == 0xBB51
    with pytest.raises(WireError) as info:
        ipv4.Repr.parse(data, verify=True)
    assert info.value.reason == "bad-checksum"
    # A wrong checksum with options present takes the general path.
    with_options = bytearray(IGMP_WITH_OPTIONS)
    with_options[22] = 0x01
    assert ipv4.Repr.parse(with_options).checksum_ok is False


@pytest.mark.parametrize(
    "fixture, legal",
    [
        (IGMP_WITH_OPTIONS, None),  # every prefix is shorter than the total length
        (FRAGMENT[:60], None),
        (ECHO + ETHERNET_PADDING, len(ECHO)),
    ],
    ids=["options", "fragment", "padded"],
)
def test_truncated_prefixes(fixture: bytes, legal: int | None) -> None:
    check_prefixes(ipv4.Repr.parse, fixture, legal)


def test_truncated_fragment_prefixes_all_fail() -> None:
    for cut in range(0, len(FRAGMENT), 37):
        with pytest.raises(WireError):
            ipv4.Repr.parse(FRAGMENT[:cut])


@pytest.mark.parametrize("ihl", [0, 1, 2, 3, 4])
def test_ihl_below_five(ihl: int) -> None:
    data = bytes([0x40 | ihl]) + ECHO[1:]
    with pytest.raises(WireError) as info:
        ipv4.Repr.parse(data)
    assert info.value.reason == "bad-ihl"
    with pytest.raises(WireError):
        ipv4.Packet.checked(data)


@pytest.mark.parametrize("version", [0, 5, 6, 15])
def test_wrong_version(version: int) -> None:
    with pytest.raises(WireError) as info:
        ipv4.Repr.parse(bytes([version << 4 | 5]) + ECHO[1:])
    assert info.value.reason == "bad-version"


def test_ihl_beyond_the_buffer() -> None:
    data = bytes([0x4F]) + ECHO[1:]  # claims 60 header bytes, 28 present
    with pytest.raises(WireError) as info:
        ipv4.Repr.parse(data)
    assert info.value.reason == "truncated"


def with_total_length(data: bytes, total: int) -> bytes:
    return data[:2] + total.to_bytes(2, "big") + data[4:]


@pytest.mark.parametrize("total, reason", [(29, "truncated"), (0xFFFF, "truncated"),
                                           (19, "bad-length"), (0, "bad-length")])
def test_total_length_lies(total: int, reason: str) -> None:
    with pytest.raises(WireError) as info:
        ipv4.Repr.parse(with_total_length(ECHO, total))
    assert info.value.reason == reason


def test_total_length_shorter_than_options() -> None:
    with pytest.raises(WireError) as info:
        ipv4.Repr.parse(with_total_length(IGMP_WITH_OPTIONS, 22))  # header alone is 24
    assert info.value.reason == "bad-length"


def header_with_options(options: bytes) -> bytes:
    assert len(options) % 4 == 0
    packet = ipv4.Repr(b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02", 17, b"abcd")
    plain = bytearray(packet.build())
    header_len = 20 + len(options)
    plain[0] = 0x40 | header_len // 4
    plain[2:4] = (header_len + 4).to_bytes(2, "big")
    return bytes(plain[:20]) + options + b"abcd"


@pytest.mark.parametrize(
    "options",
    [
        bytes([0x07, 0x00, 0x00, 0x00]),  # length 0
        bytes([0x07, 0x01, 0x00, 0x00]),  # length 1: shorter than its own type+length
        bytes([0x01, 0x01, 0x01, 0x44]),  # timestamp with no length byte
        bytes([0x94, 0x08, 0x00, 0x00]),  # router alert claiming 8 bytes of 4
        bytes([0x01, 0x07, 0x28, 0x04] + [0] * 36),  # record route of 40 at offset 1
        bytes([0x01, 0x01, 0x01, 0x01, 0x07, 0x05, 0x04, 0x00]),  # record route of 5 in 4
    ],
)
def test_bad_options(options: bytes) -> None:
    data = header_with_options(options)
    with pytest.raises(WireError) as info:
        ipv4.Repr.parse(data)
    assert info.value.reason == "bad-option"
    with pytest.raises(WireError):
        ipv4.Packet.checked(data)


@pytest.mark.parametrize(
    "options",
    [
        bytes([0x01, 0x01, 0x01, 0x01]),  # four NOPs
        bytes([0x00, 0xFF, 0xFF, 0xFF]),  # end of list: the rest is padding, not parsed
        bytes([0x83, 0x03, 0x04, 0x02, 0x02, 0x00, 0x00, 0x00]),  # 3-byte option, 2-byte, EOL
        bytes([0x07, 0x27, 0x04]) + bytes(36) + b"\x00",  # record route of 39 bytes + EOL
        bytes([0x44, 0x28, 0x05, 0x00]) + bytes(36),  # timestamp filling all 40 bytes
    ],
)
def test_good_options(options: bytes) -> None:
    data = header_with_options(options)
    packet = ipv4.Repr.parse(data)
    assert packet.options == options
    assert bytes(packet.payload) == b"abcd"
    # The header checksum from header_with_options is stale; rebuilding fixes it.
    assert ipv4.Repr.parse(packet.build(), verify=True).options == options


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"options": b"\x01\x01\x01"}, "bad-option"),  # not a multiple of 4
        ({"options": b"\x01" * 44}, "bad-option"),  # more than 40
        ({"options": b"\x07\x00\x00\x00"}, "bad-option"),
        ({"frag_offset": 1}, "bad-field"),
        ({"frag_offset": 65536}, "bad-field"),
        ({"frag_offset": -8}, "bad-field"),
        ({"ttl": 256}, "bad-field"),
        ({"protocol": -1}, "bad-field"),
        ({"ident": 0x10000}, "bad-field"),
        ({"dscp": 64}, "bad-field"),
        ({"ecn": 4}, "bad-field"),
        ({"ecn": -1}, "bad-field"),
        ({"src": b"\x01\x02\x03"}, "bad-field"),
        ({"dst": bytes(16)}, "bad-field"),
        ({"payload": bytes(0xFFFF - 19)}, "too-long"),
    ],
)
def test_build_rejects_bad_fields(change: dict[str, object], reason: str) -> None:
    packet = ipv4.Repr(b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02", 6)._replace(**change)
    with pytest.raises(WireError) as info:
        packet.build()
    assert info.value.reason == reason


def test_build_largest_packet_and_small_buffer() -> None:
    packet = ipv4.Repr(b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02", 6, bytes(0xFFFF - 20))
    assert len(packet.build()) == 0xFFFF
    with pytest.raises(WireError) as info:
        ipv4.Repr.parse(ECHO).build(bytearray(30), 3)
    assert info.value.reason == "buffer-too-small"


def test_build_without_checksum_leaves_zero() -> None:
    data = ipv4.Repr.parse(ECHO).build(checksum=False)
    assert data[10:12] == b"\x00\x00"
    assert ipv4.Repr.parse(data).checksum_ok is False


def test_packet_view() -> None:
    packet = ipv4.Packet.checked(bytearray(FRAGMENT))
    assert (packet.version, packet.header_len, packet.total_len) == (4, 20, 1500)
    assert (packet.dscp, packet.ecn, packet.ident, packet.ttl) == (46, 1, 0x1C46, 64)
    assert (packet.dont_fragment, packet.more_fragments, packet.frag_offset) == (False, True, 1480)
    assert (packet.protocol, packet.checksum) == (17, 0xB540)
    assert (packet.src, packet.dst) == (FRAGMENT[12:16], FRAGMENT[16:20])
    assert bytes(packet.options()) == b"" and bytes(packet.payload()) == FRAGMENT_PAYLOAD
    assert packet.verify_checksum()
    # Forward it: decrement the TTL, rewrite fields, then refresh the checksum.
    packet.set_ttl(packet.ttl - 1)
    assert not packet.verify_checksum()
    packet.set_dscp_ecn(0, 3)
    packet.set_fragment(True, False, 2960)
    packet.set_ident(7)
    packet.set_protocol(6)
    packet.set_src(b"\x01\x02\x03\x04")
    packet.set_dst(b"\x05\x06\x07\x08")
    packet.fill_checksum()
    assert packet.verify_checksum()
    parsed = ipv4.Repr.parse(packet.buf, verify=True)
    assert (parsed.ttl, parsed.ecn, parsed.dont_fragment, parsed.frag_offset) == (63, 3, True, 2960)
    assert (parsed.ident, parsed.protocol, parsed.src) == (7, 6, b"\x01\x02\x03\x04")
    packet.set_total_len(40)
    packet.set_checksum(0)
    assert len(packet.payload()) == 20 and packet.checksum == 0
    with pytest.raises(WireError):
        packet.set_fragment(False, False, 12)
    for short in (FRAGMENT[:19], FRAGMENT[:100]):
        with pytest.raises(WireError):
            ipv4.Packet.checked(short)
    view = ipv4.Packet.unchecked(bytearray(ECHO))
    view.payload_mut()[0] = 0
    assert bytes(view.payload()) == b"\x00" + ECHO[21:]


def scapy_options(rng: random.Random) -> list[object]:
    """A random list of options scapy knows how to build (at most 40 bytes)."""
    options: list[object] = []
    room = 40
    while rng.random() < 0.6:
        kind = rng.randrange(5)
        if kind == 0 and room >= 1:
            options.append(IPOption_NOP())
            room -= 1
        elif kind == 1 and room >= 4:
            options.append(IPOption_Router_Alert(alert=rng.randrange(3)))
            room -= 4
        else:
            hops = rng.randrange(1, 4)
            if room < 3 + 4 * hops:
                break
            routers = [".".join(str(rng.randrange(256)) for _ in range(4)) for _ in range(hops)]
            cls = (IPOption_RR, IPOption_LSRR, IPOption_SSRR)[kind - 2]
            options.append(cls(routers=routers, pointer=4 + 4 * rng.randrange(hops + 1)))
            room -= 3 + 4 * hops
    return options


def address(rng: random.Random) -> bytes:
    return rng.randbytes(4)


def dotted(addr: bytes) -> str:
    return ".".join(map(str, addr))


def test_scapy_builds_rcunet_parses() -> None:
    for case in range(CASES):
        rng = random.Random(case)
        src, dst = address(rng), address(rng)
        protocol, ttl, ident = rng.randrange(256), rng.randrange(256), rng.randrange(65536)
        df, mf = rng.random() < 0.5, rng.random() < 0.3
        frag_units = rng.randrange(0x2000) if rng.random() < 0.3 else 0
        tos = rng.randrange(256)
        payload = rng.randbytes(rng.randrange(0, 120))
        built = IP(
            src=dotted(src),
            dst=dotted(dst),
            proto=protocol,
            ttl=ttl,
            id=ident,
            flags=(2 if df else 0) | (1 if mf else 0),
            frag=frag_units,
            tos=tos,
            options=scapy_options(rng),
        ) / Raw(payload)
        data = raw(built)
        header_len = (data[0] & 0x0F) * 4
        padding = rng.randbytes(rng.randrange(0, 20))
        packet = ipv4.Repr.parse(data + padding, verify=True)
        assert (packet.src, packet.dst, packet.protocol) == (src, dst, protocol), case
        assert (packet.ttl, packet.ident) == (ttl, ident), case
        assert (packet.dont_fragment, packet.more_fragments) == (df, mf), case
        assert packet.frag_offset == frag_units * 8, case
        assert (packet.dscp, packet.ecn) == (tos >> 2, tos & 3), case
        assert packet.options == data[20:header_len], case
        assert bytes(packet.payload) == payload, case
        assert packet.checksum == IP(data).chksum and packet.checksum_ok, case


def random_options(rng: random.Random) -> bytes:
    """Well-formed option bytes (any type codes), a multiple of 4 long; sometimes an
    end-of-list option at an option boundary, the rest zero padding."""
    out = bytearray()
    starts = []
    budget = rng.choice([0, 0, 4, 8, 20, 40])
    while len(out) < budget:
        starts.append(len(out))
        room = budget - len(out)
        if room < 2 or rng.random() < 0.3:
            out.append(ipv4.OPT_NOP)
            continue
        length = rng.randrange(2, min(room, 12) + 1)
        out += bytes([rng.randrange(2, 256), length]) + rng.randbytes(length - 2)
    if starts and rng.random() < 0.2:
        cut = rng.choice(starts)
        out[cut:] = bytes([ipv4.OPT_END]) + bytes(len(out) - cut - 1)
    return bytes(out)


def random_repr(rng: random.Random) -> ipv4.Repr:
    return ipv4.Repr(
        address(rng),
        address(rng),
        rng.randrange(256),
        rng.randbytes(rng.randrange(0, 120)),
        rng.randrange(256),
        rng.randrange(65536),
        rng.random() < 0.5,
        rng.random() < 0.3,
        rng.randrange(0x2000) * 8 if rng.random() < 0.3 else 0,
        rng.randrange(64),
        rng.randrange(4),
        random_options(rng),
    )


def test_rcunet_builds_scapy_parses() -> None:
    for case in range(CASES):
        rng = random.Random(10_000 + case)
        packet = random_repr(rng)
        data = build_poisoned(packet, case % 7)
        dissected = IP(data)
        header_len = 20 + len(packet.options)
        assert (dissected.version, dissected.ihl, dissected.len) == (
            4, header_len // 4, len(data)), case
        assert dissected.src == dotted(packet.src) and dissected.dst == dotted(packet.dst)
        assert dissected.proto == packet.protocol, case
        assert (dissected.ttl, dissected.id) == (packet.ttl, packet.ident), case
        assert dissected.flags.DF == packet.dont_fragment, case
        assert dissected.flags.MF == packet.more_fragments, case
        assert dissected.frag * 8 == packet.frag_offset, case
        assert dissected.tos == packet.dscp << 2 | packet.ecn, case
        assert dissected.payload.original == packet.payload, case
        # scapy recomputes the checksum of the same header and finds ours.
        recomputed = dissected.copy()
        recomputed.chksum = None
        assert IP(raw(recomputed)).chksum == dissected.chksum, case
        assert raw(recomputed)[:header_len] == data[:header_len], case


options_bytes = st.randoms(use_true_random=False).map(random_options)

reprs = st.builds(
    ipv4.Repr,
    st.binary(min_size=4, max_size=4),
    st.binary(min_size=4, max_size=4),
    st.integers(0, 255),
    st.binary(max_size=64),
    st.integers(0, 255),
    st.integers(0, 0xFFFF),
    st.booleans(),
    st.booleans(),
    st.integers(0, 0x1FFF).map(lambda units: units * 8),
    st.integers(0, 63),
    st.integers(0, 3),
    options_bytes,
)


@given(reprs)
def test_parse_build_roundtrip(packet: ipv4.Repr) -> None:
    parsed = ipv4.Repr.parse(packet.build(), verify=True)
    assert parsed._replace(checksum=0, checksum_ok=None) == packet._replace(
        checksum=0, checksum_ok=None
    )
    assert parsed.checksum_ok is True


@given(st.binary(max_size=80))
def test_arbitrary_bytes_only_raise_wire_error(data: bytes) -> None:
    try:
        ipv4.Repr.parse(data)
    except WireError:
        pass


@given(st.integers(0x40, 0x4F), st.binary(min_size=19, max_size=80))
def test_version4_garbage_only_raises_wire_error(vihl: int, rest: bytes) -> None:
    data = bytes([vihl]) + rest
    try:
        packet = ipv4.Repr.parse(data)
    except WireError:
        return
    assert packet.build(checksum=False)[12:] == data[12 : packet.buffer_len()]


def test_parse_plain_agrees_with_parse_on_the_common_packet() -> None:
    from rcunet.wire import ipv4 as codec

    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    raw = codec.Repr(src, dst, 6, b"payload", ttl=33, dont_fragment=True).build() + b"pad"
    full = codec.Repr.parse(raw)
    total_len = len(raw) - 3
    assert codec.parse_plain(raw) == (total_len, full.ttl, full.protocol, full.src, full.dst)
    assert codec.parse_plain(memoryview(raw)) == codec.parse_plain(raw)


def test_parse_plain_leaves_every_other_packet_to_parse() -> None:
    from rcunet.wire import ipv4 as codec

    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    with_options = codec.Repr(src, dst, 17, b"x", options=b"\x01\x01\x01\x00").build()
    fragment = codec.Repr(src, dst, 17, b"x" * 8, more_fragments=True).build()
    later_fragment = codec.Repr(src, dst, 17, b"x" * 8, frag_offset=8).build()
    plain = codec.Repr(src, dst, 17, b"xyz").build()
    for packet in (with_options, fragment, later_fragment, plain[:19], plain[:-1],
                   b"\x65" + plain[1:]):
        assert codec.parse_plain(packet) is None
