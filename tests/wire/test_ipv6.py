"""IPv6 codec and its extension-header chain: fixtures, malformed chains, scapy both ways,
properties and fuzzing."""

from __future__ import annotations

import random
import socket
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    RouterAlert,
)
from scapy.packet import Packet as ScapyPacket
from scapy.packet import Raw

from rcunet.wire import WireError, ipv6
from rcunet.wire.ipv6 import DestinationOptions, Fragment, HopByHop, Routing


def poisoned(n: int) -> bytearray:
    return bytearray(b"\xa5" * n)


def addr(text: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6, text)


# Built with scapy 2.6: Hop-by-Hop (Router Alert + PadN), Destination Options (PadN placed
# *before* a Home Address option for its 8n+6 alignment, RFC 6275 §6.3), a first fragment
# and a UDP datagram.
EXT_CHAIN = bytes.fromhex(
    "6b8abcde" "0040" "00" "11"  # version 6, tc 0xb8, flow 0xabcde, plen 64, HBH, hlim 17
    "20010db8000000000000000000000001" "20010db8000000000000000000000002"
    "3c00" "05020000" "0100"  # HBH -> DO: Router Alert (MLD), PadN(0)
    "2c02" "01020000" "c910" "20010db8000000000000000000000003"  # DO -> Frag: PadN(2), HAO
    "11000001deadbeef"  # Frag -> UDP: offset 0, M=1, ident 0xdeadbeef
    "14e914e900185b0e" "66726167667261676672616766726167"  # UDP 5353 -> 5353, "frag" * 4
)
# A SYN that Linux 6.18 sent over lo (captured with AF_PACKET); no extension headers.
LINUX_SYN = bytes.fromhex(
    "6004750500280640" "00000000000000000000000000000001" "00000000000000000000000000000001"
    "a26eb7a394beb66000000000a002ffc4003000000204ffc40402080add00f0b0000000000103030a"
)
# A Segment Routing header (RFC 8754, routing type 4) in front of a TCP SYN; scapy 2.6.
SRH = bytes.fromhex(
    "60000000003c2b40" "20010db8000000000000000000000001" "20010db8000000000000000000000002"
    "0604040101000000" "20010db800000000000000000000000a" "20010db800000000000000000000000b"
    "00501f9000000000000000005002200014860000"
)

FIXTURES: dict[str, tuple[bytes, dict[str, Any]]] = {
    "hbh-dstopts-fragment": (EXT_CHAIN, dict(
        src=addr("2001:db8::1"), dst=addr("2001:db8::2"), next_header=17,
        payload=EXT_CHAIN[-24:], hop_limit=17, traffic_class=0xB8, flow_label=0xABCDE,
        extensions=(
            HopByHop(60, ((5, b"\0\0"), (1, b""))),
            DestinationOptions(44, ((1, b"\0\0"), (0xC9, addr("2001:db8::3")))),
            Fragment(17, 0, True, 0xDEADBEEF),
        ))),
    "linux-syn": (LINUX_SYN, dict(
        src=addr("::1"), dst=addr("::1"), next_header=6, payload=LINUX_SYN[40:],
        hop_limit=64, traffic_class=0, flow_label=0x47505, extensions=())),
    "segment-routing": (SRH, dict(
        src=addr("2001:db8::1"), dst=addr("2001:db8::2"), next_header=6, payload=SRH[-20:],
        hop_limit=64, extensions=(
            Routing(6, 4, 1, bytes.fromhex("01000000") + addr("2001:db8::a")
                    + addr("2001:db8::b")),
        ))),
}


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_decodes_field_by_field(name: str) -> None:
    packet, fields = FIXTURES[name]
    r = ipv6.Repr.parse(packet)
    for field in ipv6.Repr._fields:
        assert getattr(r, field) == fields.get(field, ipv6.Repr._field_defaults.get(field)), field
    assert isinstance(r.payload, memoryview)
    fragment = [e for e in fields["extensions"] if isinstance(e, Fragment)]
    assert r.fragment == (fragment[0] if fragment else None)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_reencodes_into_poisoned_buffer_at_offset(name: str) -> None:
    packet, _ = FIXTURES[name]
    r = ipv6.Repr.parse(packet)
    assert r.buffer_len() == len(packet)
    assert r.build() == packet
    buf = poisoned(len(packet) + 11)
    assert r.build(buf, 5) == len(packet)
    assert buf[5 : 5 + len(packet)] == packet
    assert buf[:5] == b"\xa5" * 5 and buf[5 + len(packet) :] == b"\xa5" * 6


@pytest.mark.parametrize("name", FIXTURES)
def test_every_truncated_prefix_raises(name: str) -> None:
    packet, _ = FIXTURES[name]
    for k in range(len(packet)):
        with pytest.raises(WireError) as err:
            ipv6.Repr.parse(packet[:k])
        assert err.value.reason == "truncated"


def test_link_padding_is_dropped() -> None:
    r = ipv6.Repr.parse(EXT_CHAIN + b"\0" * 6)
    assert r.payload == EXT_CHAIN[-24:]


def test_packet_view_getters_and_setters() -> None:
    buf = bytearray(EXT_CHAIN)
    p = ipv6.Packet.checked(buf)
    assert (p.version, p.traffic_class, p.flow_label, p.payload_length, p.next_header,
            p.hop_limit, p.src, p.dst) == (6, 0xB8, 0xABCDE, 64, 0, 17, addr("2001:db8::1"),
                                           addr("2001:db8::2"))
    assert p.payload() == EXT_CHAIN[40:]
    p.set_traffic_class(0x01)
    p.set_flow_label(0xFFFFF)
    p.set_hop_limit(1)
    p.set_src(addr("::2"))
    p.set_dst(addr("::3"))
    r = ipv6.Repr.parse(buf)
    assert (r.traffic_class, r.flow_label, r.hop_limit, r.src, r.dst) == (
        1, 0xFFFFF, 1, addr("::2"), addr("::3"))
    p.set_payload_length(20)
    p.set_next_header(59)
    assert ipv6.Repr.parse(buf).payload == EXT_CHAIN[40:60]
    p.set_version(4)
    with pytest.raises(WireError, match="bad-version"):
        ipv6.Packet.checked(buf)
    with pytest.raises(WireError, match="truncated"):
        ipv6.Packet.checked(EXT_CHAIN[:39])
    with pytest.raises(WireError, match="truncated"):
        ipv6.Packet.checked(EXT_CHAIN[:-1])


# --- malformed packets ------------------------------------------------------------------


def _packet(next_header: int, body: bytes, plen: int | None = None) -> bytes:
    plen = len(body) if plen is None else plen
    return bytes.fromhex("60000000") + plen.to_bytes(2, "big") + bytes((next_header, 64)) \
        + addr("::1") + addr("::2") + body


def _opts_header(next_header: int, tlvs: bytes = b"\x01\x04\0\0\0\0") -> bytes:
    body = bytes((next_header, (len(tlvs) + 2) // 8 - 1)) + tlvs
    assert len(body) % 8 == 0
    return body


FRAG = b"\x3b\x00\x00\x00\x00\x00\x00\x01"


@pytest.mark.parametrize(
    "packet,reason",
    [
        (_packet(59, b"x")[:1].replace(b"\x60", b"\x40") + _packet(59, b"x")[1:], "bad-version"),
        (_packet(59, b"", 0), "bad-length"),
        (_packet(17, b"abcd", 0), "bad-length"),
        (_packet(0, _opts_header(59), 0), "bad-length"),  # Hop-by-Hop without Jumbo
        (_packet(59, b"abcd", 5), "truncated"),
        (_packet(60, _opts_header(0) + _opts_header(59)), "bad-chain"),  # HBH not first
        (_packet(0, _opts_header(0) + _opts_header(59)), "bad-chain"),  # HBH twice
        (_packet(60, _opts_header(60) + _opts_header(60) + _opts_header(59)), "bad-chain"),
        (_packet(43, bytes.fromhex("2b00000000000000") * 2), "bad-chain"),  # routing loop
        (_packet(60, bytes.fromhex("3b01") + bytes(6)), "truncated"),  # header overruns
        (_packet(60, bytes.fromhex("3b00") + bytes(4)), "truncated"),  # shorter than 8
        (_packet(44, FRAG[:7]), "truncated"),
        (_packet(60, _opts_header(59, b"\x01\x05\0\0\0\0")), "bad-option"),  # TLV overruns
        (_packet(60, _opts_header(59, b"\0\0\0\0\0\x1e")), "bad-option"),  # no length byte
        (_packet(60, _opts_header(59, b"\x01\x04\0\0\x01\0")), "bad-padding"),  # PadN data
        (_packet(60, _opts_header(59, b"\x01\x04\0\0\0\0\x01\x06" + bytes(6))),
         "bad-padding"),  # 14 bytes of padding in a row
        (_packet(60, _opts_header(59, b"\0" * 14)), "bad-padding"),
    ],
)
def test_malformed_packets_name_the_reason(packet: bytes, reason: str) -> None:
    with pytest.raises(WireError) as err:
        ipv6.Repr.parse(packet)
    assert err.value.reason == reason


def test_fragment_ends_the_chain() -> None:
    # What follows a Fragment header is fragment data, even if it looks like a header.
    data = _opts_header(59)
    r = ipv6.Repr.parse(_packet(44, b"\x3c\x00\x00\x08\x00\x00\x00\x07" + data))
    assert r.extensions == (Fragment(60, 8, False, 7),)
    assert r.next_header == 60 and r.payload == data
    # Reassembly then walks the rest, where Hop-by-Hop is no longer allowed.
    assert ipv6.parse_extensions(60, data, 0, len(data), first=False) == (
        (DestinationOptions(59, ((1, b"\0\0\0\0"),)),), 59, 8)
    with pytest.raises(WireError, match="bad-chain"):
        ipv6.parse_extensions(0, data, 0, len(data), first=False)


def test_upper_layers_that_are_not_extensions_end_the_chain() -> None:
    for upper in (ipv6.PROTO_AH, ipv6.PROTO_ESP, ipv6.PROTO_NONE, 135, 253):
        r = ipv6.Repr.parse(_packet(60, _opts_header(upper) + b"rest"))
        assert r.next_header == upper and r.payload == b"rest"


def _jumbogram(jumbo: int, plen: int = 0, body_len: int | None = None) -> bytes:
    hbh = _opts_header(59, b"\xc2\x04" + jumbo.to_bytes(4, "big"))
    return _packet(0, hbh + bytes((jumbo if body_len is None else body_len) - 8), plen)


def test_jumbogram_round_trip() -> None:
    packet = _jumbogram(70_000)
    r = ipv6.Repr.parse(packet)
    assert len(r.payload) == 70_000 - 8 and r.extensions == (
        HopByHop(59, ((0xC2, (70_000).to_bytes(4, "big")),)),)
    assert r.build() == packet
    # build writes the option's value from the real length
    grown = r._replace(payload=bytes(80_000), extensions=(HopByHop(59, ((0xC2, bytes(4)),)),))
    assert ipv6.Repr.parse(grown.build()).payload == bytes(80_000)


@pytest.mark.parametrize(
    "packet,reason",
    [
        (_jumbogram(65_535), "bad-jumbo"),
        (_jumbogram(70_000, plen=8, body_len=8), "bad-jumbo"),
        (_jumbogram(70_000, body_len=69_000), "truncated"),
        (_packet(0, _opts_header(59, b"\xc2\x02\0\0\x01\0"), 0), "bad-jumbo"),
        (_packet(0, _opts_header(44, b"\xc2\x04\0\x01\x11\x70") + FRAG + bytes(69_984), 0),
         "bad-jumbo"),
    ],
)
def test_bad_jumbograms(packet: bytes, reason: str) -> None:
    with pytest.raises(WireError) as err:
        ipv6.Repr.parse(packet)
    assert err.value.reason == reason


SRC, DST = addr("2001:db8::1"), addr("2001:db8::2")


@pytest.mark.parametrize(
    "extensions,payload,reason",
    [
        ((DestinationOptions(0), HopByHop(59)), b"x", "bad-chain"),
        ((Fragment(60), DestinationOptions(17)), b"x", "bad-chain"),
        ((Routing(43, 0, 0), Routing(17, 0, 0)), b"x", "bad-chain"),
        ((DestinationOptions(60),) * 3, b"x", "bad-chain"),
        (("not a header",), b"x", "bad-chain"),
        ((), b"", "bad-length"),
        ((), bytes(65_536), "too-long"),
        ((Routing(17, 0, 0, b"abc"),), b"x", "bad-routing"),
        ((Fragment(17, 3),), b"x", "bad-fragment"),
        ((HopByHop(17, ((0, b"x"),)),), b"x", "bad-option"),
        ((HopByHop(17, ((0xC2, bytes(4)),)),), b"x", "bad-jumbo"),
        ((HopByHop(17, ((0, b""),) * 8),), b"x", "bad-padding"),
        ((DestinationOptions(17, ((1, bytes(5)),)),), b"x", "bad-padding"),  # + 7 more
        ((DestinationOptions(17, ((1, b"\0\1"),)),), b"x", "bad-padding"),
        ((Routing(17, 0, 256),), b"x", "bad-field"),
        ((Fragment(17, 0, False, 1 << 32),), b"x", "bad-field"),
        ((HopByHop(17, ((300, b""),)),), b"x", "bad-option"),
    ],
)
def test_build_refuses_bad_chains(extensions: Any, payload: bytes, reason: str) -> None:
    with pytest.raises(WireError) as err:
        ipv6.Repr(SRC, DST, 17, payload, extensions=extensions).build()
    assert err.value.reason == reason


def test_build_refuses_bad_addresses_and_short_buffers() -> None:
    with pytest.raises(WireError, match="bad-address"):
        ipv6.Repr(b"\0" * 4, DST, 17, b"x").build()
    with pytest.raises(WireError, match="buffer-too-small"):
        ipv6.Repr(SRC, DST, 17, b"x").build(bytearray(40))
    for bad in (dict(traffic_class=256), dict(flow_label=1 << 20), dict(hop_limit=-1),
                dict(next_header=256)):
        with pytest.raises(WireError, match="bad-field"):
            ipv6.Repr(SRC, DST, 17, b"x")._replace(**bad).build()


def test_build_pads_options_and_links_next_headers() -> None:
    r = ipv6.Repr(SRC, DST, 58, b"icmp", extensions=(
        HopByHop(0, ((ipv6.OPT_ROUTER_ALERT, b"\0\0"),)), DestinationOptions(0),
        Fragment(0, 16, False, 9)))
    out = r.build()
    assert out[6] == 0 and out[40:48] == bytes.fromhex("3c00050200000100")
    assert out[48:56] == bytes.fromhex("2c00010400000000")
    assert out[56:64] == bytes.fromhex("3a00001000000009")


# --- cross-checks against scapy ---------------------------------------------------------

CROSS_CASES = 200
TLV_TYPES = [0x05, 0x1E, 0x3E, 0x4D, 0x7E, 0x8B, 0xBE, 0xFE]


def _random_tlvs(rng: random.Random) -> list[tuple[int, bytes]]:
    return [(kind, rng.randbytes(2) if kind == 5 else rng.randbytes(rng.randrange(12)))
            for kind in rng.sample(TLV_TYPES, rng.randrange(4))]


def _scapy_tlv(kind: int, data: bytes) -> Any:
    # scapy's generic option class takes any type; Router Alert has its own.
    from scapy.layers.inet6 import HBHOptUnknown
    if kind == 5:
        return RouterAlert(value=int.from_bytes(data, "big"))
    return HBHOptUnknown(otype=kind, optdata=data)


def _random_chain(rng: random.Random) -> list[tuple[str, Any]]:
    chain: list[tuple[str, Any]] = []
    if rng.random() < 0.5:
        chain.append(("hbh", _random_tlvs(rng)))
    if rng.random() < 0.4:
        chain.append(("do", _random_tlvs(rng)))
    if rng.random() < 0.4:
        chain.append(("rt", (rng.randrange(3), [socket.inet_ntop(socket.AF_INET6,
                                                                  rng.randbytes(16))
                                                 for _ in range(rng.randrange(1, 4))])))
    if rng.random() < 0.3:
        chain.append(("do", _random_tlvs(rng)))
    if rng.random() < 0.4:
        chain.append(("frag", (rng.randrange(8192) * 8, rng.random() < 0.5,
                               rng.randrange(1 << 32))))
    return chain


def _tlvs_without_padding(options: tuple[tuple[int, bytes], ...]) -> list[tuple[int, bytes]]:
    return [o for o in options if o[0] not in (ipv6.OPT_PAD1, ipv6.OPT_PADN)]


def test_scapy_builds_rcunet_parses() -> None:
    rng = random.Random(60)
    seen = set()
    for _ in range(CROSS_CASES):
        chain = _random_chain(rng)
        upper = rng.choice((6, 17, 58, 59))
        payload = rng.randbytes(rng.randrange(1, 200))
        src, dst = rng.randbytes(16), rng.randbytes(16)
        tc, fl, hlim = rng.randrange(256), rng.randrange(1 << 20), rng.randrange(256)
        packet: ScapyPacket = IPv6(src=socket.inet_ntop(socket.AF_INET6, src),
                                   dst=socket.inet_ntop(socket.AF_INET6, dst),
                                   tc=tc, fl=fl, hlim=hlim)
        if not chain:
            packet.nh = upper
        for kind, value in chain:
            if kind == "hbh":
                layer: ScapyPacket = IPv6ExtHdrHopByHop(options=[_scapy_tlv(*o) for o in value])
            elif kind == "do":
                layer = IPv6ExtHdrDestOpt(options=[_scapy_tlv(*o) for o in value])
            elif kind == "rt":
                layer = IPv6ExtHdrRouting(type=value[0], segleft=len(value[1]) - 1,
                                          addresses=value[1])
            else:
                layer = IPv6ExtHdrFragment(offset=value[0] // 8, m=value[1], id=value[2])
            packet = packet / layer
        if chain:
            packet.lastlayer().nh = upper
        wire = bytes(packet / Raw(payload))
        r = ipv6.Repr.parse(wire)
        assert (r.src, r.dst, r.next_header, r.traffic_class, r.flow_label, r.hop_limit) == (
            src, dst, upper, tc, fl, hlim)
        assert r.payload == payload
        assert [type(e).__name__ for e in r.extensions] == [
            {"hbh": "HopByHop", "do": "DestinationOptions", "rt": "Routing",
             "frag": "Fragment"}[kind] for kind, _ in chain]
        for ext, (kind, value) in zip(r.extensions, chain, strict=True):
            seen.add(kind)
            if kind in ("hbh", "do"):
                assert isinstance(ext, HopByHop | DestinationOptions)
                assert _tlvs_without_padding(ext.options) == value
            elif kind == "rt":
                assert isinstance(ext, Routing)
                assert (ext.routing_type, ext.segments_left) == (value[0], len(value[1]) - 1)
                assert ext.data == bytes(4) + b"".join(addr(a) for a in value[1])
            else:
                assert ext == Fragment(upper, value[0], value[1], value[2])
    assert seen == {"hbh", "do", "rt", "frag"}


def _random_repr(rng: random.Random) -> ipv6.Repr:
    extensions: list[ipv6.Extension] = []
    for kind, value in _random_chain(rng):
        if kind in ("hbh", "do"):
            options = tuple(value)
            size = 2 + sum(2 + len(d) for _, d in options)
            pad = -size % 8
            options += ((0, b""),) if pad == 1 else ((1, bytes(pad - 2)),) if pad else ()
            cls = HopByHop if kind == "hbh" else DestinationOptions
            extensions.append(cls(0, options))
        elif kind == "rt":
            extensions.append(Routing(0, value[0], rng.randrange(256),
                                      bytes(4) + b"".join(addr(a) for a in value[1])))
        else:
            extensions.append(Fragment(0, *value))
    upper = rng.choice((6, 17, 58, 59))
    # each header's next_header names the one after it, as parse reports them
    linked = [ext._replace(next_header=ipv6.protocol_of(extensions[i + 1])
                           if i + 1 < len(extensions) else upper)
              for i, ext in enumerate(extensions)]
    return ipv6.Repr(rng.randbytes(16), rng.randbytes(16), upper,
                     rng.randbytes(rng.randrange(1, 200)), rng.randrange(256),
                     rng.randrange(256), rng.randrange(1 << 20), tuple(linked))


def _scapy_tlvs(options: list[Any]) -> list[tuple[int, bytes]]:
    out = []
    for option in options:
        wire = bytes(option)
        out.append((wire[0], b"") if wire[0] == 0 else (wire[0], wire[2:]))
    return out


def test_rcunet_builds_scapy_dissects() -> None:
    rng = random.Random(61)
    for _ in range(CROSS_CASES):
        r = _random_repr(rng)
        wire = r.build()
        theirs = IPv6(wire)
        assert (addr(theirs.src), addr(theirs.dst), theirs.tc, theirs.fl, theirs.hlim,
                theirs.plen) == (r.src, r.dst, r.traffic_class, r.flow_label, r.hop_limit,
                                 len(wire) - 40)
        layer = theirs.payload
        for ext in r.extensions:
            if isinstance(ext, HopByHop | DestinationOptions):
                assert isinstance(layer, IPv6ExtHdrHopByHop if isinstance(ext, HopByHop)
                                  else IPv6ExtHdrDestOpt)
                assert _scapy_tlvs(layer.options) == list(ext.options)
            elif isinstance(ext, Routing):
                assert layer.nh == ext.next_header and layer.type == ext.routing_type
                assert layer.segleft == ext.segments_left
                assert bytes(layer)[4 : 8 * (layer.len + 1)] == ext.data
            else:
                assert isinstance(layer, IPv6ExtHdrFragment)
                assert (layer.nh, layer.offset * 8, bool(layer.m), layer.id) == tuple(ext)
            assert layer.nh == ext.next_header
            layer = layer.payload
        assert layer.original == r.payload  # the bytes scapy dissected as the upper layer


# --- properties -------------------------------------------------------------------------

tlv = st.tuples(st.sampled_from([2, 5, 0x1E, 0x3E, 0xC9, 0xFE]), st.binary(max_size=12))


@st.composite
def options_headers(draw: Any, cls: Any) -> Any:
    options = tuple(draw(st.lists(tlv | st.just((0, b"")), max_size=4)))
    while options and options[-1] == (0, b""):  # with the final padding it could exceed 7
        options = options[:-1]
    size = 2 + sum(1 if k == 0 else 2 + len(d) for k, d in options)
    pad = -size % 8
    options += ((0, b""),) if pad == 1 else ((1, bytes(pad - 2)),) if pad else ()
    return cls(0, options)


routing = st.builds(Routing, st.just(0), st.integers(0, 255), st.integers(0, 255),
                    st.integers(0, 4).flatmap(lambda n: st.binary(min_size=4 + 8 * n,
                                                                  max_size=4 + 8 * n)))
fragment = st.builds(Fragment, st.just(0), st.integers(0, 8191).map(lambda x: x * 8),
                     st.booleans(), st.integers(0, 2**32 - 1))


@st.composite
def reprs(draw: Any) -> ipv6.Repr:
    chain: list[Any] = []
    if draw(st.booleans()):
        chain.append(draw(options_headers(HopByHop)))
    if draw(st.booleans()):
        chain.append(draw(options_headers(DestinationOptions)))
    if draw(st.booleans()):
        chain.append(draw(routing))
    if draw(st.booleans()):
        chain.append(draw(options_headers(DestinationOptions)))
    if draw(st.booleans()):
        chain.append(draw(fragment))
    upper = draw(st.sampled_from([6, 17, 58, 59, 51]))
    chain = [ext._replace(next_header=ipv6.protocol_of(chain[i + 1])
                          if i + 1 < len(chain) else upper) for i, ext in enumerate(chain)]
    payload = draw(st.binary(min_size=0 if chain else 1, max_size=64))
    return ipv6.Repr(draw(st.binary(min_size=16, max_size=16)),
                     draw(st.binary(min_size=16, max_size=16)), upper, payload,
                     draw(st.integers(0, 255)), draw(st.integers(0, 255)),
                     draw(st.integers(0, 2**20 - 1)), tuple(chain))


@settings(max_examples=300, deadline=None)
@given(reprs())
def test_parse_build_roundtrip(r: ipv6.Repr) -> None:
    out = r.build()
    assert ipv6.Repr.parse(out) == r
    assert r.buffer_len() == len(out)
    buf = poisoned(len(out) + 2)
    assert r.build(buf, 1) == len(out) and buf[1:-1] == out


def _parse_only_raises_wire_error(data: bytes) -> None:
    try:
        r = ipv6.Repr.parse(data)
    except WireError:
        return
    # whatever parses rebuilds to a packet that parses the same
    assert ipv6.Repr.parse(r.build()) == r


@settings(max_examples=500, deadline=None)
@given(st.binary(min_size=0, max_size=120), st.sampled_from([0, 17, 43, 44, 60, 59]))
def test_arbitrary_bytes_only_raise_wire_error(data: bytes, nh: int) -> None:
    _parse_only_raises_wire_error(data)
    _parse_only_raises_wire_error(_packet(nh, data))
    try:
        ipv6.parse_extensions(nh, data, 0, len(data))
    except WireError:
        pass


@settings(max_examples=500, deadline=None)
@given(
    name=st.sampled_from(sorted(FIXTURES)),
    flips=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 255)), max_size=4),
    cut=st.integers(0, 16),
    extra=st.binary(max_size=8),
)
# a Destination Options header whose option turns into type 0xC2 (16 bytes): no Jumbo
# Payload there (RFC 2675 §2 puts it in Hop-by-Hop only), so it rebuilds as it came
@example(name="hbh-dstopts-fragment", flips=[(54, 11)], cut=0, extra=b"")
def test_mutated_packets_only_raise_wire_error(
    name: str, flips: list[tuple[int, int]], cut: int, extra: bytes
) -> None:
    packet = bytearray(FIXTURES[name][0])
    for position, mask in flips:
        packet[position % len(packet)] ^= mask
    _parse_only_raises_wire_error(bytes(packet[: len(packet) - cut]) + extra)
