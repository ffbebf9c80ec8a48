"""Forwarding decisions: TTL/hop limit, DF and packet-too-big, IPv6 scope, fragmentation
on the way out."""

from __future__ import annotations

from rcunet.core.ip.forward import (
    BeyondScope,
    HopLimitExceeded,
    PacketTooBig,
    forward_ipv4,
    forward_ipv6,
)
from rcunet.core.ip.fragment import FragmentationNeeded
from rcunet.wire import ipv4, ipv6

SRC4, DST4 = bytes([192, 0, 2, 1]), bytes([198, 51, 100, 1])
SRC6 = bytes.fromhex("20010db8000000000000000000000001")
DST6 = bytes.fromhex("20010db8000100000000000000000001")
LL6 = bytes.fromhex("fe800000000000000000000000000001")


def test_ipv4_ttl_decremented_and_checksum_valid() -> None:
    packet = ipv4.Repr.parse(ipv4.Repr(SRC4, DST4, 17, b"x" * 100, ttl=64).build())
    (onward,) = forward_ipv4(packet, 1500)
    assert onward.ttl == 63
    assert ipv4.Repr.parse(onward.build()).checksum_ok


def test_ipv4_ttl_exhausted() -> None:
    for ttl in (0, 1):
        packet = ipv4.Repr(SRC4, DST4, 17, b"x", ttl=ttl)
        assert forward_ipv4(packet, 1500) == HopLimitExceeded(packet)


def test_ipv4_df_too_big_and_fragmenting_without_df() -> None:
    big = ipv4.Repr(SRC4, DST4, 17, b"y" * 3000, ttl=10, dont_fragment=True)
    assert forward_ipv4(big, 1500) == FragmentationNeeded(big, 1500)
    frags = forward_ipv4(big._replace(dont_fragment=False), 1500)
    assert isinstance(frags, list) and len(frags) == 3
    assert {f.ttl for f in frags} == {9}
    assert b"".join(bytes(f.payload) for f in frags) == b"y" * 3000


def test_ipv6_hop_limit_too_big_and_scope() -> None:
    packet = ipv6.Repr(SRC6, DST6, 17, b"z" * 100, hop_limit=2)
    assert forward_ipv6(packet, 1500) == packet._replace(hop_limit=1)
    assert forward_ipv6(packet._replace(hop_limit=1), 1500) == HopLimitExceeded(
        packet._replace(hop_limit=1)
    )
    big = packet._replace(payload=b"z" * 1500)
    assert forward_ipv6(big, 1500) == PacketTooBig(big, 1500)
    assert forward_ipv6(packet._replace(src=LL6), 1500) == BeyondScope(
        packet._replace(src=LL6), answer=True
    )
    assert forward_ipv6(packet._replace(dst=LL6), 1500).answer is False
