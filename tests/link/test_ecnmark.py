"""CE marking of frames (rcunet.link.ecnmark): IPv4 with its header checksum updated
incrementally, IPv6's traffic class, Ethernet with and without 802.1Q; checked against
scapy and a full checksum recompute."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6

from rcunet.link.ecnmark import Mark, codepoint, ip_offset, mark_ce
from rcunet.wire import ecn, ipv4, ipv6

A4, B4 = bytes((10, 0, 0, 1)), bytes((10, 0, 0, 2))
A6, B6 = bytes(15) + b"\x01", bytes(15) + b"\x02"
ETH = bytes.fromhex("020000000002" "020000000001")


def v4(ecn_field: int, dscp: int = 0, ident: int = 7, ttl: int = 64) -> bytes:
    return ipv4.Repr(A4, B4, 17, b"payload!", ttl=ttl, ident=ident, dscp=dscp,
                     ecn=ecn_field).build()


def v6(ecn_field: int, dscp: int = 0) -> bytes:
    return ipv6.Repr(A6, B6, 17, b"payload!", traffic_class=dscp << 2 | ecn_field,
                     flow_label=0x12345).build()


@pytest.mark.parametrize("ect", [ecn.ECT_0, ecn.ECT_1])
def test_ipv4_ect_becomes_ce_with_a_valid_checksum(ect: int) -> None:
    raw = v4(ect, dscp=46)
    result, out = mark_ce(raw, ethernet=False)
    assert result is Mark.MARKED
    parsed = ipv4.Repr.parse(out, verify=True)
    assert (parsed.ecn, parsed.dscp, bytes(parsed.payload)) == (ecn.CE, 46, b"payload!")
    scapy = IP(out)
    assert scapy.tos == 46 << 2 | ecn.CE
    del scapy.chksum
    assert IP(bytes(scapy)).chksum == int.from_bytes(out[10:12], "big")


@pytest.mark.parametrize("ect", [ecn.ECT_0, ecn.ECT_1])
def test_ipv6_traffic_class_gets_ce_and_keeps_dscp_and_flow_label(ect: int) -> None:
    _, out = mark_ce(ETH + b"\x86\xdd" + v6(ect, dscp=10), ethernet=True)
    scapy = IPv6(out[14:])
    assert (scapy.tc, scapy.fl) == (10 << 2 | ecn.CE, 0x12345)
    assert codepoint(out, ethernet=True) == ecn.CE


def test_vlan_tagged_frame() -> None:
    frame = ETH + b"\x81\x00\x00\x05" + b"\x08\x00" + v4(ecn.ECT_0)
    assert ip_offset(frame, ethernet=True) == 18
    result, out = mark_ce(frame, ethernet=True)
    assert result is Mark.MARKED and ipv4.Repr.parse(out[18:], verify=True).ecn == ecn.CE


def test_what_cannot_be_marked_is_left_alone() -> None:
    for raw, ethernet, expected in [
        (v4(ecn.NOT_ECT), False, Mark.NOT_ECT),
        (v6(ecn.NOT_ECT), False, Mark.NOT_ECT),
        (v4(ecn.CE), False, Mark.ALREADY_CE),
        (ETH + b"\x08\x06" + bytes(28), True, Mark.NOT_IP),  # ARP
        (b"\x45\x00", False, Mark.NOT_IP),                  # truncated
        (ETH + b"\x08\x00", True, Mark.NOT_IP),
        (b"", True, Mark.NOT_IP),
    ]:
        result, out = mark_ce(raw, ethernet)
        assert (result, out) == (expected, raw)


@settings(max_examples=300, deadline=None)
@given(dscp=st.integers(0, 63), ect=st.sampled_from([ecn.ECT_0, ecn.ECT_1]),
       ident=st.integers(0, 0xFFFF), ttl=st.integers(0, 255))
def test_incremental_checksum_equals_a_full_recompute(dscp: int, ect: int, ident: int,
                                                      ttl: int) -> None:
    _, out = mark_ce(v4(ect, dscp, ident, ttl), ethernet=False)
    assert out == v4(ecn.CE, dscp, ident, ttl)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.booleans())
def test_arbitrary_bytes_never_raise(frame: bytes, ethernet: bool) -> None:
    result, out = mark_ce(frame, ethernet)
    assert len(out) == len(frame)
    if result is not Mark.MARKED:
        assert out == frame
