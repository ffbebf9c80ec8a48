"""ICMPv4 codec and the quoted-packet helper: fixtures, malformed input, scapy
cross-checks, properties."""

from __future__ import annotations

import random

import pytest
from conftest import build_poisoned, check_prefixes
from hypothesis import given
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPerror
from scapy.packet import Raw

from rcunet.wire import WireError, icmpv4, ipv4
from rcunet.wire import checksum as ck

CASES = 200

PING_DATA = bytes.fromhex("6a3c5f6500000000") + bytes(range(0x10, 0x38))  # Linux ping's 56 bytes

ECHO_REQUEST = (
    bytes.fromhex(
        "08"  # echo request
        "00"  # code
        "5360"  # checksum
        "1c2a"  # identifier
        "0001"  # sequence number
    )
    + PING_DATA
)
ECHO_REPLY = bytes.fromhex("00005b601c2a0001") + PING_DATA

# The UDP datagram 192.168.0.1:54321 -> 192.168.0.2:53 carrying "hello", as quoted whole.
QUOTED_UDP = bytes.fromhex(
    "45000021123440004011a744c0a80001c0a80002"  # IPv4 header, total length 33
    "d4310035000d6647"  # UDP header: ports 54321 -> 53, length 13, checksum
    "68656c6c6f"  # "hello"
)
PORT_UNREACHABLE = (
    bytes.fromhex(
        "03"  # destination unreachable
        "03"  # port unreachable
        "7e6f"  # checksum
        "00000000"  # unused
    )
    + QUOTED_UDP
)

# A 1500-byte TCP segment 5.6.7.8:50000 -> 192.168.0.1:443 that met a 1400-byte link:
# the router quotes the IPv4 header and the first 8 bytes of TCP (ports and sequence).
QUOTED_TCP = bytes.fromhex(
    "450005dcbeef40004006a97505060708c0a80001"  # IPv4 header, total length 1500, DF
    "c35001bb0badf00d"  # TCP ports 50000 -> 443, sequence number 0x0badf00d
)
FRAG_NEEDED = (
    bytes.fromhex(
        "03"  # destination unreachable
        "04"  # fragmentation needed and DF set
        "36bd"  # checksum
        "0000"  # unused
        "0578"  # next-hop MTU 1400 (RFC 1191)
    )
    + QUOTED_TCP
)

# A traceroute probe (UDP to port 33434, TTL 1) expired in transit; the quoted UDP
# checksum is as sent (an 8-byte quote does not allow checking it).
QUOTED_PROBE = bytes.fromhex("4500003c9a5c00000111529e05060708c0a80001" "829b829a00288f2d")
TIME_EXCEEDED = bytes.fromhex("0b006074" "00000000") + QUOTED_PROBE
PARAMETER_PROBLEM = bytes.fromhex("0c004b74" "14000000") + QUOTED_PROBE  # pointer 20


def test_echo_request_fields() -> None:
    message = icmpv4.Repr.parse(ECHO_REQUEST, verify=True)
    assert (message.type, message.code) == (icmpv4.ECHO_REQUEST, 0)
    assert (message.ident, message.seq) == (0x1C2A, 1)
    assert bytes(message.data) == PING_DATA
    assert (message.checksum, message.checksum_ok) == (0x5360, True)
    assert (message.quoted, message.next_mtu, message.pointer) == (b"", 0, 0)
    assert not message.is_error
    assert message == icmpv4.Repr.echo_request(0x1C2A, 1, PING_DATA)._replace(
        checksum=0x5360, checksum_ok=True
    )
    assert build_poisoned(message, 4) == ECHO_REQUEST
    assert message.build() == ECHO_REQUEST


def test_echo_reply_fields() -> None:
    message = icmpv4.Repr.parse(ECHO_REPLY, verify=True)
    assert (message.type, message.code, message.ident, message.seq) == (0, 0, 0x1C2A, 1)
    assert bytes(message.data) == PING_DATA
    assert build_poisoned(icmpv4.Repr.echo_reply(0x1C2A, 1, PING_DATA)) == ECHO_REPLY


def test_port_unreachable_fields() -> None:
    message = icmpv4.Repr.parse(PORT_UNREACHABLE, verify=True)
    assert (message.type, message.code) == (icmpv4.DEST_UNREACHABLE, icmpv4.PORT_UNREACHABLE)
    assert (message.checksum, message.checksum_ok) == (0x7E6F, True)
    assert bytes(message.quoted) == QUOTED_UDP
    assert message.next_mtu == 0 and message.is_error
    assert (message.ident, message.seq, message.data) == (0, 0, b"")
    flow = message.quoted_flow()
    assert flow.src == bytes([192, 168, 0, 1]) and flow.dst == bytes([192, 168, 0, 2])
    assert (flow.protocol, flow.src_port, flow.dst_port) == (ipv4.PROTO_UDP, 54321, 53)
    assert flow.transport_head == QUOTED_UDP[20:28]
    assert build_poisoned(message, 2) == PORT_UNREACHABLE
    built = icmpv4.Repr.dest_unreachable(icmpv4.PORT_UNREACHABLE, QUOTED_UDP)
    assert built.build() == PORT_UNREACHABLE


def test_frag_needed_fields() -> None:
    message = icmpv4.Repr.parse(FRAG_NEEDED, verify=True)
    assert (message.type, message.code, message.next_mtu) == (3, icmpv4.FRAG_NEEDED, 1400)
    assert bytes(message.quoted) == QUOTED_TCP
    flow = message.quoted_flow()
    assert (flow.src, flow.dst) == (bytes([5, 6, 7, 8]), bytes([192, 168, 0, 1]))
    assert (flow.protocol, flow.src_port, flow.dst_port) == (ipv4.PROTO_TCP, 50000, 443)
    assert int.from_bytes(flow.transport_head[4:8], "big") == 0x0BADF00D  # the TCP sequence
    assert build_poisoned(icmpv4.Repr.frag_needed(1400, QUOTED_TCP)) == FRAG_NEEDED


def test_time_exceeded_and_parameter_problem_fields() -> None:
    expired = icmpv4.Repr.parse(TIME_EXCEEDED, verify=True)
    assert (expired.type, expired.code, expired.checksum) == (11, icmpv4.TTL_EXCEEDED, 0x6074)
    assert bytes(expired.quoted) == QUOTED_PROBE
    assert expired.quoted_flow()[:5] == (bytes([5, 6, 7, 8]), bytes([192, 168, 0, 1]), 17,
                                         33435, 33434)
    assert build_poisoned(expired) == TIME_EXCEEDED
    assert icmpv4.Repr.time_exceeded(0, QUOTED_PROBE).build() == TIME_EXCEEDED
    problem = icmpv4.Repr.parse(PARAMETER_PROBLEM, verify=True)
    assert (problem.type, problem.code, problem.pointer) == (12, 0, 20)
    assert bytes(problem.quoted) == QUOTED_PROBE
    assert build_poisoned(problem) == PARAMETER_PROBLEM
    assert icmpv4.Repr.parameter_problem(20, QUOTED_PROBE).build() == PARAMETER_PROBLEM


FIXTURES = [ECHO_REQUEST, ECHO_REPLY, PORT_UNREACHABLE, FRAG_NEEDED, TIME_EXCEEDED,
            PARAMETER_PROBLEM]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_truncated_prefixes(fixture: bytes) -> None:
    # ICMP has no length field: every prefix of 8 bytes or more parses, with a checksum
    # that (almost always) no longer matches, which verify=True rejects.
    check_prefixes(icmpv4.Repr.parse, fixture, icmpv4.HEADER_LEN)
    for cut in range(icmpv4.HEADER_LEN, len(fixture)):
        message = icmpv4.Repr.parse(fixture[:cut])
        assert message.type == fixture[0] and message.checksum_ok is ck.is_valid(fixture[:cut])
        if not message.checksum_ok:
            with pytest.raises(WireError):
                icmpv4.Repr.parse(fixture[:cut], verify=True)


def test_bad_checksum_is_reported_or_rejected() -> None:
    data = bytearray(PORT_UNREACHABLE)
    data[-1] ^= 0xFF
    assert icmpv4.Repr.parse(data).checksum_ok is False
    with pytest.raises(WireError) as info:
        icmpv4.Repr.parse(data, verify=True)
    assert info.value.reason == "bad-checksum"


@pytest.mark.parametrize("icmp_type", [4, 5, 9, 10, 13, 14, 17, 18, 255])
def test_unsupported_types(icmp_type: int) -> None:
    with pytest.raises(WireError) as info:
        icmpv4.Repr.parse(bytes([icmp_type]) + ECHO_REQUEST[1:])
    assert info.value.reason == "unsupported"
    with pytest.raises(WireError):
        icmpv4.Repr(icmp_type, 0).build()


@pytest.mark.parametrize("code", range(16))
def test_every_unreachable_code(code: int) -> None:
    message = icmpv4.Repr.dest_unreachable(code, QUOTED_UDP)
    parsed = icmpv4.Repr.parse(message.build(), verify=True)
    assert (parsed.type, parsed.code, bytes(parsed.quoted)) == (3, code, QUOTED_UDP)


@pytest.mark.parametrize(
    "message",
    [
        icmpv4.Repr.echo_request(0x10000, 1),
        icmpv4.Repr.echo_request(1, -1),
        icmpv4.Repr.echo_request(1, 1)._replace(quoted=b"x"),
        icmpv4.Repr.echo_request(1, 1)._replace(next_mtu=1280),
        icmpv4.Repr.echo_reply(1, 1)._replace(pointer=1),
        icmpv4.Repr.dest_unreachable(3, QUOTED_UDP)._replace(data=b"x"),
        icmpv4.Repr.dest_unreachable(3, QUOTED_UDP)._replace(ident=1),
        icmpv4.Repr.dest_unreachable(3, QUOTED_UDP)._replace(pointer=1),
        icmpv4.Repr.frag_needed(0x10000, QUOTED_TCP),
        icmpv4.Repr.time_exceeded(0, QUOTED_PROBE)._replace(next_mtu=1),
        icmpv4.Repr.time_exceeded(0, QUOTED_PROBE)._replace(pointer=1),
        icmpv4.Repr.parameter_problem(256, QUOTED_PROBE),
        icmpv4.Repr.parameter_problem(0, QUOTED_PROBE, code=256),
    ],
)
def test_build_refuses_fields_it_would_lose(message: icmpv4.Repr) -> None:
    with pytest.raises(WireError):
        message.build()


def test_build_options() -> None:
    message = icmpv4.Repr.echo_request(1, 2, b"abc")  # odd length
    assert icmpv4.Repr.parse(message.build(), verify=True).data == b"abc"
    assert message.build(checksum=False)[2:4] == b"\x00\x00"
    with pytest.raises(WireError) as info:
        message.build(bytearray(12), 2)
    assert info.value.reason == "buffer-too-small"


def test_packet_view() -> None:
    packet = icmpv4.Packet.checked(bytearray(ECHO_REQUEST))
    assert (packet.type, packet.code, packet.checksum) == (8, 0, 0x5360)
    assert (packet.ident, packet.seq) == (0x1C2A, 1)
    assert packet.verify_checksum() and bytes(packet.payload()) == PING_DATA
    # Answer in place, as a ping responder does.
    packet.set_type(icmpv4.ECHO_REPLY)
    packet.fill_checksum()
    assert bytes(packet.buf) == ECHO_REPLY
    packet.set_ident(7)
    packet.set_seq(9)
    packet.set_code(1)
    assert not packet.verify_checksum()
    packet.set_checksum(0)
    assert packet.checksum == 0
    error = icmpv4.Packet.checked(bytearray(FRAG_NEEDED))
    assert error.next_mtu == 1400
    error.set_next_mtu(1280)
    error.fill_checksum()
    assert icmpv4.Repr.parse(error.buf, verify=True).next_mtu == 1280
    problem = icmpv4.Packet(bytearray(PARAMETER_PROBLEM))
    assert problem.pointer == 20
    problem.set_pointer(9)
    assert problem.pointer == 9
    with pytest.raises(WireError):
        icmpv4.Packet.checked(ECHO_REQUEST[:7])
    view = icmpv4.Packet.unchecked(bytearray(ECHO_REQUEST))
    view.payload_mut()[0:4] = b"\x00" * 4
    assert not view.verify_checksum()


# --- the quoted packet -------------------------------------------------------------------


def test_quoted_flow_tolerates_short_quotes() -> None:
    header_only = icmpv4.parse_quoted(QUOTED_TCP[:20])
    assert (header_only.protocol, header_only.src_port, header_only.dst_port) == (6, None, None)
    assert header_only.transport_head == b""
    ports_only = icmpv4.parse_quoted(QUOTED_TCP[:24])
    assert (ports_only.src_port, ports_only.dst_port) == (50000, 443)
    three = icmpv4.parse_quoted(QUOTED_TCP[:23])
    assert three.src_port is None and three.transport_head == QUOTED_TCP[20:23]
    # The quoted total length (33) bounds what is read even when more bytes follow.
    padded = icmpv4.parse_quoted(QUOTED_UDP + b"\xee" * 10)
    assert padded.transport_head == QUOTED_UDP[20:28]
    tiny = bytearray(QUOTED_UDP[:22])
    tiny[2:4] = (22).to_bytes(2, "big")
    assert icmpv4.parse_quoted(tiny).transport_head == QUOTED_UDP[20:22]


def test_quoted_flow_without_ports() -> None:
    echo = ipv4.Repr(b"\x01\x02\x03\x04", b"\x05\x06\x07\x08", ipv4.PROTO_ICMP, ECHO_REQUEST)
    flow = icmpv4.parse_quoted(echo.build()[:28])
    assert (flow.protocol, flow.src_port, flow.dst_port) == (1, None, None)
    assert flow.transport_head == ECHO_REQUEST[:8]
    later_fragment = ipv4.Repr(b"\x01\x02\x03\x04", b"\x05\x06\x07\x08", 17, b"\x00" * 16,
                               frag_offset=1480)
    assert icmpv4.parse_quoted(later_fragment.build()).src_port is None


def test_quoted_flow_with_options() -> None:
    quoted = ipv4.Repr(b"\x01\x02\x03\x04", b"\x05\x06\x07\x08", 6, QUOTED_TCP[20:],
                       options=b"\x94\x04\x00\x00").build()
    flow = icmpv4.parse_quoted(quoted)
    assert (flow.src_port, flow.dst_port) == (50000, 443)


@pytest.mark.parametrize(
    "quoted, reason",
    [
        (b"", "truncated"),
        (QUOTED_UDP[:19], "truncated"),
        (bytes([0x65]) + QUOTED_UDP[1:], "bad-version"),  # an IPv6 nibble
        (bytes([0x44]) + QUOTED_UDP[1:], "bad-ihl"),
        (bytes([0x4F]) + QUOTED_UDP[1:], "truncated"),  # header claims 60 bytes
        (QUOTED_UDP[:2] + b"\x00\x10" + QUOTED_UDP[4:], "bad-length"),
        (bytes([0x46]) + QUOTED_UDP[1:20] + b"\x07\x09\x00\x00" + QUOTED_UDP[20:], "bad-option"),
        (b"\xa5" * 40, "bad-version"),
    ],
)
def test_quoted_garbage(quoted: bytes, reason: str) -> None:
    with pytest.raises(WireError) as info:
        icmpv4.parse_quoted(quoted)
    assert info.value.reason == reason
    message = icmpv4.Repr.dest_unreachable(1, quoted)
    parsed = icmpv4.Repr.parse(message.build(), verify=True)  # the message itself is fine
    with pytest.raises(WireError):
        parsed.quoted_flow()


def test_quoted_flow_of_an_echo_is_an_error() -> None:
    with pytest.raises(WireError):
        icmpv4.Repr.echo_request(1, 1).quoted_flow()


# --- scapy cross-checks --------------------------------------------------------------------


def dotted(addr: bytes) -> str:
    return ".".join(map(str, addr))


def random_quote(rng: random.Random) -> bytes:
    """An IPv4 packet built by scapy, cut the way routers cut quotes (or left whole)."""
    src, dst = dotted(rng.randbytes(4)), dotted(rng.randbytes(4))
    sport, dport = rng.randrange(65536), rng.randrange(65536)
    transport = rng.choice([
        UDP(sport=sport, dport=dport) / Raw(rng.randbytes(rng.randrange(40))),
        TCP(sport=sport, dport=dport, seq=rng.randrange(2**32)),
        ICMP(type=8, id=sport, seq=dport),
    ])
    whole = raw(IP(src=src, dst=dst, ttl=rng.randrange(1, 256)) / transport)
    return whole[: rng.choice([28, 28, 24, 20, len(whole), 21 + rng.randrange(len(whole) - 20)])]


def scapy_message(rng: random.Random) -> tuple[ICMP, icmpv4.Repr]:
    """A random scapy ICMP message and the Repr it stands for."""
    kind = rng.choice(["echo", "unreachable", "frag", "expired", "problem"])
    if kind == "echo":
        icmp_type = rng.choice(icmpv4.ECHO_TYPES)
        ident, seq, data = rng.randrange(65536), rng.randrange(65536), rng.randbytes(
            rng.randrange(64))
        packet = ICMP(type=icmp_type, code=0, id=ident, seq=seq) / Raw(data)
        return packet, icmpv4.Repr(icmp_type, 0, ident, seq, data)
    quoted = random_quote(rng)
    if kind == "unreachable":
        code = rng.randrange(16)
        mtu = rng.randrange(576, 9001) if code == icmpv4.FRAG_NEEDED else 0
        packet = ICMP(type=3, code=code, nexthopmtu=mtu) / Raw(quoted)
        return packet, icmpv4.Repr.dest_unreachable(code, quoted, mtu)
    if kind == "frag":
        mtu = rng.randrange(68, 65536)
        packet = ICMP(type=3, code=4, nexthopmtu=mtu) / Raw(quoted)
        return packet, icmpv4.Repr.frag_needed(mtu, quoted)
    if kind == "expired":
        code = rng.randrange(2)
        return ICMP(type=11, code=code) / Raw(quoted), icmpv4.Repr.time_exceeded(code, quoted)
    pointer = rng.randrange(256)
    packet = ICMP(type=12, code=0, ptr=pointer) / Raw(quoted)
    return packet, icmpv4.Repr.parameter_problem(pointer, quoted)


def test_scapy_builds_rcunet_parses() -> None:
    for case in range(CASES):
        packet, expected = scapy_message(random.Random(case))
        data = raw(packet)
        message = icmpv4.Repr.parse(data, verify=True)
        assert message._replace(checksum=0, checksum_ok=None) == expected, case
        assert message.checksum == ICMP(data).chksum and message.checksum_ok, case
        if message.is_error and len(message.quoted) >= 28:
            # scapy's own reading of the quote (IPerror, then TCPerror/UDPerror).
            flow, quoted_ip = message.quoted_flow(), ICMP(data)[IPerror]
            assert (dotted(flow.src), dotted(flow.dst)) == (quoted_ip.src, quoted_ip.dst), case
            assert flow.protocol == quoted_ip.proto, case
            if quoted_ip.proto in (6, 17):
                transport = quoted_ip.payload
                if not hasattr(transport, "sport"):  # scapy gives up on some cut TCP headers
                    head = raw(transport)
                    transport = UDP(sport=head[0] << 8 | head[1], dport=head[2] << 8 | head[3])
                assert (flow.src_port, flow.dst_port) == (transport.sport, transport.dport), case
            else:
                assert flow.src_port is None and flow.dst_port is None, case


def test_rcunet_builds_scapy_parses() -> None:
    for case in range(CASES):
        _, message = scapy_message(random.Random(10_000 + case))
        data = build_poisoned(message, case % 6)
        dissected = ICMP(data)
        assert (dissected.type, dissected.code) == (message.type, message.code), case
        if message.is_error:
            assert dissected.payload.original == message.quoted, case
        else:
            assert (dissected.id, dissected.seq) == (message.ident, message.seq), case
            assert dissected.payload.original == message.data, case
        if message.type == icmpv4.DEST_UNREACHABLE:
            assert dissected.nexthopmtu == message.next_mtu, case
        if message.type == icmpv4.PARAMETER_PROBLEM:
            assert dissected.ptr == message.pointer, case
        recomputed = dissected.copy()
        recomputed.chksum = None
        assert ICMP(raw(recomputed)).chksum == dissected.chksum, case
        assert raw(recomputed) == data, case


# --- properties --------------------------------------------------------------------------

quotes = st.binary(max_size=60)
u16 = st.integers(0, 0xFFFF)
reprs = st.one_of(
    st.builds(icmpv4.Repr.echo_request, u16, u16, st.binary(max_size=64)),
    st.builds(icmpv4.Repr.echo_reply, u16, u16, st.binary(max_size=64)),
    st.builds(icmpv4.Repr.dest_unreachable, st.integers(0, 255), quotes, u16),
    st.builds(icmpv4.Repr.time_exceeded, st.integers(0, 255), quotes),
    st.builds(icmpv4.Repr.parameter_problem, st.integers(0, 255), quotes, st.integers(0, 255)),
)


@given(reprs)
def test_parse_build_roundtrip(message: icmpv4.Repr) -> None:
    parsed = icmpv4.Repr.parse(message.build(), verify=True)
    assert parsed._replace(checksum=0, checksum_ok=None) == message


@given(st.binary(max_size=80))
def test_arbitrary_bytes_only_raise_wire_error(data: bytes) -> None:
    try:
        message = icmpv4.Repr.parse(data)
    except WireError:
        return
    if message.is_error:
        try:
            message.quoted_flow()
        except WireError:
            pass


@given(st.binary(max_size=80))
def test_arbitrary_quotes_only_raise_wire_error(data: bytes) -> None:
    try:
        icmpv4.parse_quoted(data)
    except WireError:
        pass


@given(st.integers(0, 15), st.binary(min_size=19, max_size=80))
def test_version4_quotes_only_raise_wire_error(ihl: int, rest: bytes) -> None:
    try:
        flow = icmpv4.parse_quoted(bytes([0x40 | ihl]) + rest)
    except WireError:
        return
    assert len(flow.transport_head) <= 8
