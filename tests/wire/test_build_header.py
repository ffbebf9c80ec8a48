"""``build_header``: the header a caller gathers in front of the payload itself is exactly
the front of what ``build`` emits (the IP output path joins link, IP and transport headers
and the payload once, and the wire bytes must not change)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rcunet.wire import ethernet, ipv4, ipv6, tcp
from rcunet.wire.errors import WireError

SRC, DST = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
SRC6, DST6 = bytes(15) + b"\x01", bytes(15) + b"\x02"

SEGMENTS = [
    tcp.Repr(1234, 80, 1, 2, tcp.ACK, 512, payload=b"odd length payload!"),
    tcp.Repr(1234, 80, 1, 2, tcp.ACK | tcp.PSH, 512, payload=bytes(range(256)) * 40,
             timestamp=(7, 9)),
    tcp.Repr(1234, 80, 1, 0, tcp.SYN, 65535, mss=1460, window_scale=7, sack_permitted=True,
             timestamp=(1, 0)),
    tcp.Repr(1234, 80, 1, 2, tcp.ACK, 9, payload=memoryview(b"view"), timestamp=(3, 4),
             sack_blocks=((10, 20), (30, 40))),
]


@pytest.mark.parametrize("seg", SEGMENTS)
@pytest.mark.parametrize(("src", "dst"), [(SRC, DST), (SRC6, DST6), (None, None)])
@pytest.mark.parametrize("checksum", [True, False])
def test_tcp_header_then_payload_is_the_segment(seg, src, dst, checksum):
    header = seg.build_header(src=src, dst=dst, checksum=checksum)
    assert header + bytes(seg.payload) == seg.build(src=src, dst=dst, checksum=checksum)
    if src is not None and checksum:  # the header's checksum covers the payload
        parsed = tcp.Repr.parse(header + bytes(seg.payload), src, dst)
        assert parsed.checksum_ok


def test_tcp_build_header_rejects_what_build_rejects():
    bad = tcp.Repr(1, 2, 3, 4, 0x400, 5)  # flags beyond 9 bits
    for emit in (bad.build, bad.build_header):
        with pytest.raises(WireError, match="bad-flags"):
            emit()


@pytest.mark.parametrize("options", [b"", b"\x01\x01\x01\x00"])
def test_ipv4_header_for_a_gathered_payload(options):
    payload = bytes(range(200))
    packet = ipv4.Repr(SRC, DST, 6, payload, 64, 77, True, options=options)
    whole = packet.build()
    assert packet.build_header() + payload == whole
    # the payload given apart, by length: the same header
    bare = ipv4.Repr(SRC, DST, 6, b"", 64, 77, True, options=options)
    header = bare.build_header(len(payload))
    assert header + payload == whole
    assert ipv4.Repr.parse(header + payload).checksum_ok


def test_ipv4_header_length_still_checked():
    with pytest.raises(WireError, match="70020 bytes"):
        ipv4.Repr(SRC, DST, 6).build_header(70000)


@pytest.mark.parametrize("vlan", [None, 42])
def test_ethernet_header_then_payload_is_the_frame(vlan):
    frame = ethernet.Repr(b"\x02" * 6, b"\x04" * 6, ethernet.ETHERTYPE_IPV4, b"payload",
                          vlan=vlan)
    assert frame.build_header() + b"payload" == frame.build()
    assert ethernet.Repr(frame.dst, frame.src, frame.ethertype, vlan=vlan).build_header() \
        == frame.build_header()


@pytest.mark.parametrize("extensions", [(), (ipv6.HopByHop(6, ((5, b"\0\0"),)),)])
def test_ipv6_header_for_a_gathered_payload(extensions):
    payload = bytes(range(100))
    packet = ipv6.Repr(SRC6, DST6, 6, payload, 64, extensions=extensions)
    whole = packet.build()
    assert packet.build_header() + payload == whole
    bare = ipv6.Repr(SRC6, DST6, 6, b"", 64, extensions=extensions)
    assert bare.build_header(len(payload)) + payload == whole
    assert bytes(ipv6.Repr.parse(whole).payload) == payload


def test_ipv6_header_length_still_checked():
    with pytest.raises(WireError, match="bad-length"):
        ipv6.Repr(SRC6, DST6, 6, b"").build_header(0)
    with pytest.raises(WireError, match="too-long"):
        ipv6.Repr(SRC6, DST6, 6, b"").build_header(70000)


# -- the Repr-free header builders of the per-packet output path -------------------------
def _outcome(build):
    try:
        return build()
    except WireError as exc:
        return ("WireError", exc.reason)


@given(src=st.binary(min_size=3, max_size=5), dst=st.binary(min_size=4, max_size=4),
       protocol=st.integers(0, 256), ttl=st.integers(0, 256), ident=st.integers(0, 0x10000),
       dont_fragment=st.booleans(), payload_len=st.integers(0, 0x10000),
       checksum=st.booleans())
def test_ipv4_plain_header_is_the_repr_header(src, dst, protocol, ttl, ident, dont_fragment,
                                              payload_len, checksum):
    by_repr = _outcome(lambda: ipv4.Repr(src, dst, protocol, b"", ttl, ident, dont_fragment)
                       .build_header(payload_len, checksum=checksum))
    plain = _outcome(lambda: ipv4.build_plain_header(src, dst, protocol, ttl, ident,
                                                     dont_fragment, payload_len,
                                                     checksum=checksum))
    assert plain == by_repr


def test_ipv4_plain_header_parses_back():
    header = ipv4.build_plain_header(SRC, DST, 6, 64, 0xBEEF, True, 5)
    packet = ipv4.Repr.parse(header + b"hello")
    assert (packet.src, packet.dst, packet.protocol, packet.ttl, packet.ident) == \
        (SRC, DST, 6, 64, 0xBEEF)
    assert packet.dont_fragment and not packet.more_fragments and packet.checksum_ok
    assert bytes(packet.payload) == b"hello"


@given(dst=st.binary(min_size=5, max_size=7), src=st.binary(min_size=6, max_size=6),
       ethertype=st.one_of(st.sampled_from([0x0800, 0x86DD, 0x0806, 0x8100, 0x88A8, 0x05DC,
                                            0x0600, 0xFFFF, 0x10000, -1]),
                           st.integers(-5, 0x10005)))
def test_ethernet_untagged_header_is_the_repr_header(dst, src, ethertype):
    by_repr = _outcome(lambda: ethernet.Repr(dst, src, ethertype).build_header())
    untagged = _outcome(lambda: ethernet.build_untagged_header(dst, src, ethertype))
    assert untagged == by_repr


def test_repr_field_order_is_what_the_engine_builds_positionally() -> None:
    """rcunet.core.tcp.Connection._make builds tcp.Repr with tuple.__new__ (positional):
    that order must stay the field order."""
    from rcunet.wire import tcp

    assert tcp.Repr._fields == (
        "src_port", "dst_port", "seq", "ack", "flags", "window", "payload", "urgent", "mss",
        "window_scale", "sack_permitted", "sack_blocks", "timestamp", "unknown_options",
        "checksum", "checksum_ok", "ecn")
    assert tcp.Repr._field_defaults == {
        "payload": b"", "urgent": 0, "mss": None, "window_scale": None,
        "sack_permitted": False, "sack_blocks": (), "timestamp": None,
        "unknown_options": (), "checksum": 0, "checksum_ok": None, "ecn": 0}
