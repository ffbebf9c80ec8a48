"""IP fragmentation: sizes, offsets, flags, option copying, DF, IPv6 unfragmentable part;
cross-checked against scapy's own defragmentation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcunet.core.ip.fragment import (
    FragmentationNeeded,
    copied_options,
    fragment_ipv4,
    fragment_ipv6,
    split_unfragmentable,
)
from rcunet.core.ip.reassembly import Ipv4Reassembler, Ipv6Reassembler
from rcunet.wire import ipv4, ipv6

SRC4, DST4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
SRC6 = bytes.fromhex("20010db8000000000000000000000001")
DST6 = bytes.fromhex("20010db8000000000000000000000002")
# LSRR (131, copied) + Record Route (7, not copied) + NOP NOP: 16 bytes.
LSRR = bytes([131, 7, 4, 10, 0, 0, 9])
RECORD_ROUTE = bytes([7, 7, 4, 0, 0, 0, 0])
OPTIONS = LSRR + RECORD_ROUTE + bytes([1, 1])


def payload_of(n: int) -> bytes:
    return bytes(i * 7 % 251 for i in range(n))


def v4(n: int, **kw: object) -> ipv4.Repr:
    return ipv4.Repr(SRC4, DST4, ipv4.PROTO_UDP, payload_of(n), ident=0x1234, **kw)  # type: ignore[arg-type]


def test_ipv4_fits_unchanged() -> None:
    packet = v4(1480)
    assert fragment_ipv4(packet, 1500) == [packet]


def test_ipv4_fragments_have_right_sizes_offsets_and_flags() -> None:
    packet = v4(4000)
    frags = fragment_ipv4(packet, 1500)
    assert isinstance(frags, list)
    assert [len(f.payload) for f in frags] == [1480, 1480, 1040]
    assert [f.frag_offset for f in frags] == [0, 1480, 2960]
    assert [f.more_fragments for f in frags] == [True, True, False]
    assert {f.ident for f in frags} == {0x1234}
    built = [f.build() for f in frags]
    assert all(len(b) <= 1500 for b in built)
    parsed = [ipv4.Repr.parse(b, verify=True) for b in built]
    assert b"".join(bytes(p.payload) for p in parsed) == packet.payload


def test_ipv4_df_asks_for_frag_needed() -> None:
    packet = v4(2000, dont_fragment=True)
    result = fragment_ipv4(packet, 1400)
    assert result == FragmentationNeeded(packet, 1400)
    assert fragment_ipv4(v4(100, dont_fragment=True), 1400) == [v4(100, dont_fragment=True)]


def test_ipv4_refragmenting_a_fragment_keeps_offset_and_mf() -> None:
    middle = v4(2000, more_fragments=True, frag_offset=8000)
    frags = fragment_ipv4(middle, 1000)
    assert isinstance(frags, list)
    assert frags[0].frag_offset == 8000 and all(f.more_fragments for f in frags)
    last = v4(2000, frag_offset=8000)
    frags = fragment_ipv4(last, 1000)
    assert isinstance(frags, list)
    assert [f.more_fragments for f in frags] == [True, True, False]


def test_ipv4_options_copied_only_when_flagged() -> None:
    assert copied_options(OPTIONS) == LSRR + b"\x00"
    assert copied_options(bytes([1, 1, 1, 0])) == b""
    packet = v4(3000, options=OPTIONS)
    frags = fragment_ipv4(packet, 576)
    assert isinstance(frags, list)
    assert frags[0].options == OPTIONS
    assert all(f.options == LSRR + b"\x00" for f in frags[1:])
    for f in frags:
        raw = f.build()
        assert len(raw) <= 576
        if f.more_fragments:
            assert len(f.payload) % 8 == 0
    # first: 576 - 36 header = 540 -> 536; later: 576 - 28 = 548 -> 544
    assert len(frags[0].payload) == 536 and len(frags[1].payload) == 544


def test_ipv4_minimum_mtu() -> None:
    with pytest.raises(ValueError):
        fragment_ipv4(v4(100), 67)
    frags = fragment_ipv4(v4(100), 68)
    assert isinstance(frags, list) and all(len(f.payload) <= 48 for f in frags)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9000), st.integers(68, 9000), st.booleans())
def test_ipv4_roundtrip_through_reassembly(size: int, mtu: int, reverse: bool) -> None:
    packet = v4(size, options=OPTIONS if size % 2 else b"")
    frags = fragment_ipv4(packet, mtu)
    assert isinstance(frags, list)
    reasm = Ipv4Reassembler()
    results = []
    for frag in reversed(frags) if reverse else frags:
        out = reasm.add(ipv4.Repr.parse(frag.build()), 0)
        if out is not None:
            results.append(out)
    assert len(results) == 1
    assert bytes(results[0].payload) == packet.payload
    assert results[0].options == packet.options
    assert reasm.mem == 0 and len(reasm) == 0


def test_ipv4_scapy_reassembles_our_fragments() -> None:
    scapy = pytest.importorskip("scapy.all")
    packet = v4(5000)
    frags = fragment_ipv4(packet, 1300)
    assert isinstance(frags, list)
    pkts = [scapy.IP(f.build()) for f in frags]
    whole = scapy.defragment(pkts)
    assert len(whole) == 1
    assert bytes(whole[0][scapy.IP].payload) == packet.payload


# -- IPv6 ---------------------------------------------------------------------------------


def v6(n: int, extensions: tuple[ipv6.Extension, ...] = ()) -> ipv6.Repr:
    return ipv6.Repr(SRC6, DST6, ipv6.PROTO_UDP, payload_of(n), extensions=extensions)


HBH = ipv6.HopByHop(0, ((ipv6.OPT_ROUTER_ALERT, b"\x00\x00"), (ipv6.OPT_PADN, b"")))
ROUTING = ipv6.Routing(0, 0, 0, b"\x00" * 4 + SRC6)
DSTOPTS = ipv6.DestinationOptions(0, ((0x1E, b"\x01\x02\x03\x04"),))


def test_split_unfragmentable() -> None:
    assert split_unfragmentable(()) == ((), ())
    assert split_unfragmentable((HBH, DSTOPTS)) == ((HBH,), (DSTOPTS,))
    assert split_unfragmentable((HBH, DSTOPTS, ROUTING, DSTOPTS)) == (
        (HBH, DSTOPTS, ROUTING),
        (DSTOPTS,),
    )


def test_ipv6_fits_unchanged_and_minimum_mtu() -> None:
    packet = v6(1000)
    assert fragment_ipv6(packet, 1280, 1) == [packet]
    with pytest.raises(ValueError):
        fragment_ipv6(v6(3000), 1279, 1)


def test_ipv6_fragments_carry_unfragmentable_part_and_fragment_header() -> None:
    packet = v6(4000, (HBH, DSTOPTS))
    frags = fragment_ipv6(packet, 1280, 0xDEADBEEF)
    assert len(frags) == 4
    offsets = []
    for index, frag in enumerate(frags):
        raw = frag.build()
        assert len(raw) <= 1280
        parsed = ipv6.Repr.parse(raw)
        assert parsed.extensions[0] == HBH._replace(next_header=ipv6.PROTO_FRAGMENT)
        fh = parsed.fragment
        assert fh is not None and fh.ident == 0xDEADBEEF
        assert fh.next_header == ipv6.PROTO_DSTOPTS  # destination options are fragmentable
        assert fh.more == (index < len(frags) - 1)
        if fh.more:
            assert len(parsed.payload) % 8 == 0
        offsets.append(fh.offset)
    assert offsets == sorted(offsets) and offsets[0] == 0


def test_ipv6_fragment_of_fragment_refused() -> None:
    frags = fragment_ipv6(v6(3000), 1280, 7)
    with pytest.raises(ValueError):
        fragment_ipv6(frags[0]._replace(payload=b"x" * 2000), 1280, 8)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 20000),
    st.integers(1280, 9000),
    st.sampled_from([(), (HBH,), (DSTOPTS,), (HBH, DSTOPTS, ROUTING, DSTOPTS)]),
    st.permutations(range(16)),
)
def test_ipv6_roundtrip_through_reassembly(
    size: int, mtu: int, extensions: tuple[ipv6.Extension, ...], order: list[int]
) -> None:
    packet = v6(size, extensions)
    frags = fragment_ipv6(packet, mtu, 99)
    ranked = sorted(range(len(frags)), key=lambda i: order[i % 16] * 1000 + i)
    reasm = Ipv6Reassembler()
    results = [reasm.add(ipv6.Repr.parse(frags[i].build()), 0) for i in ranked]
    done = [r for r in results if r is not None]
    assert len(done) == 1
    assert done[0].build() == packet.build()


def test_ipv6_scapy_reassembles_our_fragments() -> None:
    scapy = pytest.importorskip("scapy.all")
    packet = v6(3000, (HBH,))
    frags = fragment_ipv6(packet, 1280, 5)
    pkts = [scapy.IPv6(f.build()) for f in frags]
    whole = scapy.defragment6(pkts)
    assert bytes(whole[scapy.IPv6].payload)[-3000:] == packet.payload
