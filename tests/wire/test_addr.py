"""rcunet.wire.addr: the shared address constants and predicates.

Covered: every constant equals what Python's own ``ipaddress`` packs for the name it
stands for; the predicates agree with ``ipaddress`` over IPv4, IPv6 and v4-mapped
addresses drawn by hypothesis; v4mapped/unmapped are inverse on IPv4 and leave other
IPv6 addresses alone.
"""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from rcunet.wire import addr

v4 = st.binary(min_size=4, max_size=4)
v6 = st.binary(min_size=16, max_size=16)
mapped = v4.map(lambda a: bytes(10) + b"\xff\xff" + a)
any_addr = st.one_of(v4, v6, mapped, st.sampled_from([bytes(4), bytes(16)]))


def packed(text: str) -> bytes:
    return ipaddress.ip_address(text).packed


def test_constants_are_the_addresses_they_name():
    assert addr.ANY4 == packed("0.0.0.0")
    assert addr.ANY6 == packed("::")
    assert addr.LOOPBACK4 == packed("127.0.0.1")
    assert addr.LOOPBACK6 == packed("::1")
    assert addr.LIMITED_BROADCAST == packed("255.255.255.255")
    assert addr.V4_MAPPED_PREFIX == packed("::ffff:0:0")[:12]
    assert addr.V4_MAPPED_ANY == packed("::ffff:0.0.0.0")
    assert addr.ALL_NODES == packed("ff02::1")
    assert addr.MLDV2_ROUTERS == packed("ff02::16")


@given(any_addr)
def test_predicates_agree_with_ipaddress(raw: bytes):
    ip = ipaddress.ip_address(raw)
    mapped4 = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    assert addr.is_v4mapped(raw) == (mapped4 is not None)
    assert addr.is_multicast(raw) == ip.is_multicast
    if len(raw) == 4:
        assert addr.is_multicast4(raw) == ip.is_multicast
    assert addr.is_any(raw) == ip.is_unspecified
    loopback = (mapped4 or ip).is_loopback
    assert addr.is_loopback(raw) == loopback
    assert addr.is_link_local6(raw) == (len(raw) == 16 and ip.is_link_local)


@given(v4)
def test_v4mapped_and_unmapped_are_inverse(raw: bytes):
    as6 = addr.v4mapped(raw)
    assert ipaddress.IPv6Address(as6).ipv4_mapped == ipaddress.IPv4Address(raw)
    assert addr.unmapped(as6) == raw
    assert addr.unmapped(raw) == raw


@given(v6.filter(lambda a: a[:12] != bytes(10) + b"\xff\xff"))
def test_other_ipv6_addresses_pass_through(raw: bytes):
    assert addr.v4mapped(raw) == raw
    assert addr.unmapped(raw) == raw
