"""TCP codec: Linux byte fixtures, scapy cross-checks both ways, properties, fuzzing."""

from __future__ import annotations

import random
import socket
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP
from scapy.layers.inet import TCP as ScapyTCP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw

from rcunet.wire import WireError, tcp, tcp_options

LO4 = bytes((127, 0, 0, 1))
LO6 = bytes(15) + b"\x01"


def poisoned(n: int) -> bytearray:
    return bytearray(b"\xa5" * n)


# Segments captured with an AF_PACKET socket on lo of Linux 6.18 (a connect/send/close to a
# local listener, then a connect to a closed port).  Loopback leaves the checksum field as
# the pseudo-header partial sum (CHECKSUM_PARTIAL), so it was recomputed with scapy 2.6;
# the RST, which Linux checksums in software, is byte for byte as captured.  The SACK
# segment is Linux's layout (NOP NOP TS, NOP NOP SACK) built with scapy for the same flow.
FIXTURES: dict[str, tuple[bytes, bytes, str, dict[str, Any]]] = {
    "linux-syn": (LO4, LO4,
        "c840b79987912ec000000000a002ffd7dae800000204ffd70402080a041e3acc000000000103030a",
        dict(src_port=51264, dst_port=47001, seq=0x87912EC0, ack=0, flags=tcp.SYN,
             window=65495, mss=65495, sack_permitted=True, timestamp=(0x041E3ACC, 0),
             window_scale=10, checksum=0xDAE8)),
    "linux-syn-ack": (LO4, LO4,
        "b799c8408205f49e87912ec1a012ffcb70a600000204ffd70402080af7d7fbc0041e3acc0103030a",
        dict(src_port=47001, dst_port=51264, seq=0x8205F49E, ack=0x87912EC1,
             flags=tcp.SYN | tcp.ACK, window=65483, mss=65495, sack_permitted=True,
             timestamp=(0xF7D7FBC0, 0x041E3ACC), window_scale=10, checksum=0x70A6)),
    "linux-data-ts": (LO4, LO4,
        "c840b79987912ec18205f49f80180040eeb800000101080a041e3acdf7d7fbc0"
        "68656c6c6f2c207263756e65740a",
        dict(src_port=51264, dst_port=47001, seq=0x87912EC1, ack=0x8205F49F,
             flags=tcp.PSH | tcp.ACK, window=64, timestamp=(0x041E3ACD, 0xF7D7FBC0),
             payload=b"hello, rcunet\n", checksum=0xEEB8)),
    "linux-fin": (LO4, LO4,
        "c840b79987912ecf8205f4a280110040991100000101080a041e3acdf7d7fbc1",
        dict(src_port=51264, dst_port=47001, seq=0x87912ECF, ack=0x8205F4A2,
             flags=tcp.FIN | tcp.ACK, window=64, timestamp=(0x041E3ACD, 0xF7D7FBC1),
             checksum=0x9911)),
    "linux-rst": (LO4, LO4,
        "b79aec0c000000005f1a9b845014000013880000",
        dict(src_port=47002, dst_port=60428, seq=0, ack=0x5F1A9B84,
             flags=tcp.RST | tcp.ACK, window=0, checksum=0x1388)),
    "linux-syn-ipv6": (LO6, LO6,
        "a26eb7a394beb66000000000a002ffc4db4200000204ffc40402080add00f0b0000000000103030a",
        dict(src_port=41582, dst_port=47011, seq=0x94BEB660, ack=0, flags=tcp.SYN,
             window=65476, mss=65476, sack_permitted=True, timestamp=(0xDD00F0B0, 0),
             window_scale=10, checksum=0xDB42)),
    "sack-blocks": (LO4, LO4,
        "b799c8408205f4a287912ec1d0100040690e00000101080af7d7fbc1041e3acd"
        "0101051287912ed187912ee187912ef187912f01",
        dict(src_port=47001, dst_port=51264, seq=0x8205F4A2, ack=0x87912EC1, flags=tcp.ACK,
             window=64, timestamp=(0xF7D7FBC1, 0x041E3ACD),
             sack_blocks=((0x87912ED1, 0x87912EE1), (0x87912EF1, 0x87912F01)),
             checksum=0x690E)),
}

DEFAULTS = tcp.Repr._field_defaults


def _segment(name: str) -> tuple[bytes, bytes, bytes, dict[str, Any]]:
    src, dst, hexed, fields = FIXTURES[name]
    return src, dst, bytes.fromhex(hexed), fields


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_decodes_field_by_field(name: str) -> None:
    src, dst, seg, fields = _segment(name)
    r = tcp.Repr.parse(seg, src, dst, verify=True)
    for field in tcp.Repr._fields:
        if field == "checksum_ok":
            continue
        expected = fields.get(field, DEFAULTS.get(field))
        assert getattr(r, field) == expected, field
    assert r.checksum_ok is True
    assert isinstance(r.payload, memoryview)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_reencodes_into_poisoned_buffer_at_offset(name: str) -> None:
    src, dst, seg, _ = _segment(name)
    r = tcp.Repr.parse(seg, src, dst)
    assert r.buffer_len() == len(seg)
    assert r.build(src=src, dst=dst) == seg
    buf = poisoned(len(seg) + 13)
    assert r.build(buf, 7, src=src, dst=dst) == len(seg)
    assert buf[7 : 7 + len(seg)] == seg
    assert buf[:7] == b"\xa5" * 7 and buf[7 + len(seg) :] == b"\xa5" * 6


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_truncated_prefixes(name: str) -> None:
    src, dst, seg, _ = _segment(name)
    header_len = (seg[12] >> 4) * 4
    for k in range(len(seg)):
        if k < header_len:
            with pytest.raises(WireError) as err:
                tcp.Repr.parse(seg[:k], src, dst)
            assert err.value.reason == "truncated"
        else:
            r = tcp.Repr.parse(seg[:k], src, dst)
            assert r.payload == seg[header_len:k]


@pytest.mark.parametrize("name", FIXTURES)
def test_packet_view_matches_repr(name: str) -> None:
    src, dst, seg, _ = _segment(name)
    r = tcp.Repr.parse(seg)
    p = tcp.Packet.checked(seg)
    assert (p.src_port, p.dst_port, p.seq, p.ack, p.flags, p.window, p.checksum, p.urgent) == (
        r.src_port, r.dst_port, r.seq, r.ack, r.flags, r.window, r.checksum, r.urgent)
    assert p.payload() == r.payload
    assert p.options() == r.options_bytes()
    assert p.verify_checksum(src, dst)


def test_packet_setters_write_fields_and_checksum_refill() -> None:
    src, dst, seg, _ = _segment("linux-data-ts")
    buf = bytearray(seg)
    p = tcp.Packet.checked(buf)
    p.set_src_port(1)
    p.set_dst_port(2)
    p.set_seq(0xFFFFFFFF)
    p.set_ack(5)
    p.set_flags(tcp.AE | tcp.URG | tcp.ACK)
    p.set_window(7)
    p.set_urgent(9)
    p.payload_mut()[0:5] = b"HELLO"
    assert not p.verify_checksum(src, dst)
    r = tcp.Repr.parse(buf)
    assert (r.src_port, r.dst_port, r.seq, r.ack, r.flags, r.window, r.urgent) == (
        1, 2, 0xFFFFFFFF, 5, tcp.AE | tcp.URG | tcp.ACK, 7, 9)
    assert bytes(r.payload) == b"HELLO, rcunet\n"
    rebuilt = tcp.Repr.parse(buf).build(src=src, dst=dst)
    p.set_checksum(int.from_bytes(rebuilt[16:18], "big"))
    assert p.verify_checksum(src, dst)
    assert p.header_len == 32
    p.set_header_len(20)
    assert tcp.Repr.parse(buf).timestamp is None


def test_packet_checked_rejects_bad_lengths() -> None:
    with pytest.raises(WireError, match="truncated"):
        tcp.Packet.checked(bytes(19))
    with pytest.raises(WireError, match="bad-data-offset"):
        tcp.Packet.checked(bytes(20))
    seg = bytearray(20)
    seg[12] = 0x60
    with pytest.raises(WireError, match="truncated"):
        tcp.Packet.checked(seg)


# --- checksums -------------------------------------------------------------------------


def test_bad_checksum_is_reported_and_rejected_on_verify() -> None:
    src, dst, seg, _ = _segment("linux-data-ts")
    bad = bytearray(seg)
    bad[-1] ^= 0x01
    r = tcp.Repr.parse(bad, src, dst)
    assert r.checksum_ok is False
    with pytest.raises(WireError) as err:
        tcp.Repr.parse(bad, src, dst, verify=True)
    assert err.value.reason == "bad-checksum"
    assert tcp.Repr.parse(bad).checksum_ok is None
    # the right bytes under the wrong pseudo-header are wrong too
    assert tcp.Repr.parse(seg, LO4, bytes((127, 0, 0, 2))).checksum_ok is False


def test_checksum_offload_and_missing_addresses_leave_zero() -> None:
    src, dst, seg, _ = _segment("linux-syn")
    r = tcp.Repr.parse(seg)
    for out in (r.build(src=src, dst=dst, checksum=False), r.build()):
        assert out[16:18] == b"\0\0" and out[:16] == seg[:16] and out[18:] == seg[18:]


def test_pseudo_header_needs_matching_address_lengths() -> None:
    src, _, seg, _ = _segment("linux-syn")
    with pytest.raises(WireError, match="bad-address"):
        tcp.Repr.parse(seg, src, LO6)
    with pytest.raises(WireError, match="bad-address"):
        tcp.Repr.parse(seg).build(src=b"\0" * 5, dst=b"\0" * 5)


def test_odd_payload_checksum_matches_scapy() -> None:
    r = tcp.Repr(1, 2, 3, 4, tcp.ACK, 5, payload=b"odd")
    for src, dst, ip in ((LO4, LO4, IP(src="127.0.0.1", dst="127.0.0.1")),
                         (LO6, LO6, IPv6(src="::1", dst="::1"))):
        ours = r.build(src=src, dst=dst)
        theirs = ip / ScapyTCP(sport=1, dport=2, seq=3, ack=4, flags="A", window=5) / b"odd"
        assert ours == bytes(theirs[ScapyTCP])
        assert tcp.Repr.parse(ours, src, dst).checksum_ok


# --- malformed headers and options ---------------------------------------------------


def _with_options(options: bytes, payload: bytes = b"") -> bytes:
    assert len(options) % 4 == 0
    off = (20 + len(options)) // 4
    return bytes(12) + bytes((off << 4, tcp.ACK)) + bytes(6) + options + payload


@pytest.mark.parametrize("offset_words", [0, 1, 4])
def test_data_offset_below_five_rejected(offset_words: int) -> None:
    seg = bytearray(40)
    seg[12] = offset_words << 4
    with pytest.raises(WireError) as err:
        tcp.Repr.parse(seg)
    assert err.value.reason == "bad-data-offset"


@pytest.mark.parametrize("offset_words", [6, 8, 10, 15])
def test_data_offset_beyond_segment_rejected(offset_words: int) -> None:
    seg = bytearray(offset_words * 4 - 1)
    seg[12] = offset_words << 4
    with pytest.raises(WireError) as err:
        tcp.Repr.parse(seg)
    assert err.value.reason == "truncated"


@pytest.mark.parametrize(
    "options",
    [
        b"\x02\x00\x00\x00",  # length 0
        b"\x02\x01\x00\x00",  # length 1
        b"\x99\x01\x00\x00",  # unknown kind, length 1
        b"\x01\x01\x01\x08",  # TS kind with no length byte
        b"\x08\x0a\x00\x00",  # TS overruns
        b"\x01\x01\x05\x12\x00\x00\x00\x01\x00\x00\x00\x02",  # SACK claims 2 blocks
        b"\x03\x05\x00\x00",  # window scale overruns
    ],
)
def test_bad_option_lengths_rejected(options: bytes) -> None:
    with pytest.raises(WireError) as err:
        tcp.Repr.parse(_with_options(options))
    assert err.value.reason == "bad-option"


def test_known_kind_with_wrong_length_is_kept_as_unknown() -> None:
    r = tcp.Repr.parse(_with_options(b"\x02\x03\x07\x03\x04\x05\x00\x00"))
    assert r.mss is None and r.window_scale is None
    assert r.unknown_options == ((2, b"\x07"), (3, b"\x05\x00"))
    assert tcp.Repr.parse(r.build()).unknown_options == r.unknown_options


def test_repeated_known_option_is_kept_as_unknown() -> None:
    r = tcp.Repr.parse(_with_options(b"\x02\x04\x05\xb4\x02\x04\x02\x18"))
    assert r.mss == 1460
    assert r.unknown_options == ((2, b"\x02\x18"),)


def test_eol_ends_the_option_list() -> None:
    r = tcp.Repr.parse(_with_options(b"\x04\x02\x00\x02\x04\x05\xb4\x00"))
    assert r.sack_permitted and r.mss is None and r.unknown_options == ()


def test_sack_with_odd_length_is_kept_as_unknown() -> None:
    r = tcp.Repr.parse(_with_options(b"\x05\x06\x00\x00\x00\x01\x01\x01"))
    assert r.sack_blocks == ()
    assert r.unknown_options == ((5, b"\x00\x00\x00\x01"),)


def test_ae_flag_and_reserved_bits() -> None:
    seg = bytearray(_with_options(b""))
    seg[12] |= 0x0F  # AE plus the three reserved bits
    r = tcp.Repr.parse(seg)
    assert r.flags == tcp.AE | tcp.ACK
    assert r.build()[12] == 0x51  # reserved bits are written as zero


@pytest.mark.parametrize(
    "repr_",
    [
        tcp.Repr(1, 2, 3, 4, tcp.SYN, 5, sack_blocks=((1, 2),) * 5),
        tcp.Repr(1, 2, 3, 4, tcp.SYN, 5, unknown_options=((1, b""),)),
        tcp.Repr(1, 2, 3, 4, tcp.SYN, 5, unknown_options=((0, b""),)),
        tcp.Repr(1, 2, 3, 4, tcp.SYN, 5, unknown_options=((99, bytes(39)),)),
        tcp.Repr(1, 2, 3, 4, tcp.SYN, 5, mss=1, timestamp=(1, 2), sack_blocks=((1, 2),) * 3),
        tcp.Repr(1, 2, 3, 4, 0x200, 5),
    ],
)
def test_build_refuses_what_cannot_be_encoded(repr_: tcp.Repr) -> None:
    with pytest.raises(WireError):
        repr_.build()


SYN_OPTIONS: dict[str, Any] = dict(mss=1460, window_scale=7, sack_permitted=True,
                                   timestamp=(1, 0))


@pytest.mark.parametrize(
    "fields",
    [
        dict(src_port=1 << 16), dict(seq=1 << 32), dict(ack=-1), dict(window=1 << 16),
        dict(urgent=-1), dict(mss=1 << 16), dict(window_scale=256), dict(mss=-1),
        dict(mss=1 << 16, timestamp=None), dict(window_scale=-1, timestamp=None),
        dict(timestamp=(1 << 32, 0)), dict(timestamp=(0, -1), mss=None),
        dict(sack_blocks=((1 << 32, 0),)), dict(unknown_options=((256, b""),)),
    ],
)
def test_build_refuses_out_of_range_fields(fields: dict[str, Any]) -> None:
    r = tcp.Repr(1, 2, 3, 4, tcp.SYN, 5, **SYN_OPTIONS)._replace(**fields)
    with pytest.raises(WireError) as err:
        r.build(src=LO4, dst=LO4)
    assert err.value.reason in ("bad-field", "bad-option")
    with pytest.raises(WireError):
        r.build(bytearray(100))


def test_build_refuses_a_short_buffer() -> None:
    r = tcp.Repr(1, 2, 3, 4, tcp.ACK, 5, payload=b"abc")
    with pytest.raises(WireError, match="buffer-too-small"):
        r.build(bytearray(22))
    with pytest.raises(WireError, match="buffer-too-small"):
        r.build(bytearray(30), 8)


def test_options_follow_linux_order() -> None:
    r = tcp.Repr(1, 2, 3, 4, tcp.SYN, 5, mss=1460, window_scale=7, sack_permitted=True)
    assert r.options_bytes() == bytes.fromhex("020405b4 01010402 01030307")
    r = tcp.Repr(1, 2, 3, 4, tcp.SYN, 5, mss=1460, timestamp=(1, 2))
    assert r.options_bytes() == bytes.fromhex("020405b4 0101080a 00000001 00000002")
    r = tcp.Repr(1, 2, 3, 4, tcp.ACK, 5, sack_blocks=((1, 2),), unknown_options=((30, b"x"),))
    assert r.options_bytes() == bytes.fromhex("0101050a 00000001 00000002 1e037800")


# --- cross-checks against scapy ---------------------------------------------------------

UNKNOWN_KINDS = [6, 7, 9, 10, 11, 12, 13, 16, 17, 18, 20, 21, 22, 23, 24, 26, 27, 30, 200]
CROSS_CASES = 200


def _random_addresses(rng: random.Random) -> tuple[bytes, bytes, Any]:
    if rng.random() < 0.5:
        src, dst = rng.randbytes(4), rng.randbytes(4)
        return src, dst, IP(src=socket.inet_ntop(socket.AF_INET, src),
                            dst=socket.inet_ntop(socket.AF_INET, dst))
    src, dst = rng.randbytes(16), rng.randbytes(16)
    return src, dst, IPv6(src=socket.inet_ntop(socket.AF_INET6, src),
                          dst=socket.inet_ntop(socket.AF_INET6, dst))


def _random_option_fields(rng: random.Random) -> dict[str, Any]:
    """Option values that fit in 40 bytes together."""
    fields: dict[str, Any] = {}
    budget = 40
    for name, size in (("mss", 4), ("window_scale", 4), ("sack_permitted", 4),
                       ("timestamp", 12), ("sack_blocks", 0), ("unknown_options", 0)):
        if rng.random() < 0.5:
            continue
        if name == "mss":
            fields[name] = rng.randrange(1 << 16)
        elif name == "window_scale":
            fields[name] = rng.randrange(256)
        elif name == "sack_permitted":
            fields[name] = True
        elif name == "timestamp":
            fields[name] = (rng.randrange(1 << 32), rng.randrange(1 << 32))
        elif name == "sack_blocks":
            n = min(4, (budget - 4) // 8)
            if n < 1:
                continue
            count = rng.randint(1, n)
            fields[name] = tuple((rng.randrange(1 << 32), rng.randrange(1 << 32))
                                 for _ in range(count))
            size = 4 + 8 * count
        else:
            data = rng.randbytes(rng.randrange(0, max(1, budget - 5)))
            if len(data) + 2 > budget - 3:
                continue
            fields[name] = ((rng.choice(UNKNOWN_KINDS), data),)
            size = len(data) + 2
        budget -= size
    return fields


def _scapy_options(fields: dict[str, Any], rng: random.Random) -> list[Any]:
    """The same options in a random order with NOPs in between, the way scapy takes them."""
    options: list[Any] = []
    if "mss" in fields:
        options.append(("MSS", fields["mss"]))
    if "window_scale" in fields:
        options.append(("WScale", fields["window_scale"]))
    if fields.get("sack_permitted"):
        options.append(("SAckOK", b""))
    if "timestamp" in fields:
        options.append(("Timestamp", fields["timestamp"]))
    if "sack_blocks" in fields:
        options.append(("SAck", tuple(x for block in fields["sack_blocks"] for x in block)))
    for kind, data in fields.get("unknown_options", ()):
        options.append((kind, data))
    rng.shuffle(options)
    size = sum(_scapy_option_len(o) for o in options)
    while size < 40 and rng.random() < 0.3:
        options.insert(rng.randrange(len(options) + 1), ("NOP", None))
        size += 1
    return options


def _scapy_option_len(option: Any) -> int:
    name, value = option
    fixed = {"MSS": 4, "WScale": 3, "SAckOK": 2, "Timestamp": 10, "NOP": 1}
    if name in fixed:
        return fixed[name]
    if name == "SAck":
        return 2 + 4 * len(value)
    return 2 + len(value)


def test_scapy_builds_rcunet_parses() -> None:
    rng = random.Random(6)
    kinds_seen: set[str] = set()
    for _ in range(CROSS_CASES):
        src, dst, ip = _random_addresses(rng)
        fields = _random_option_fields(rng)
        payload = rng.randbytes(rng.choice((0, 1, 7, 100, 1400)))
        header = dict(sport=rng.randrange(1 << 16), dport=rng.randrange(1 << 16),
                      seq=rng.randrange(1 << 32), ack=rng.randrange(1 << 32),
                      flags=rng.randrange(1 << 9), window=rng.randrange(1 << 16),
                      urgptr=rng.randrange(1 << 16))
        packet = ip / ScapyTCP(options=_scapy_options(fields, rng), **header) / Raw(payload)
        seg = bytes(packet[ScapyTCP])
        r = tcp.Repr.parse(seg, src, dst, verify=True)
        assert (r.src_port, r.dst_port, r.seq, r.ack, r.flags, r.window, r.urgent) == (
            header["sport"], header["dport"], header["seq"], header["ack"], header["flags"],
            header["window"], header["urgptr"])
        assert r.checksum == packet[ScapyTCP].__class__(seg).chksum
        assert r.payload == payload
        for name in ("mss", "window_scale", "sack_permitted", "timestamp", "sack_blocks",
                     "unknown_options"):
            assert getattr(r, name) == fields.get(name, DEFAULTS[name]), name
        kinds_seen.update(fields)
    assert len(kinds_seen) == 6  # every kind of option was exercised


def _scapy_option_fields(options: list[Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, value in options:
        if name == "MSS":
            fields["mss"] = value
        elif name == "WScale":
            fields["window_scale"] = value
        elif name == "SAckOK":
            fields["sack_permitted"] = True
        elif name == "Timestamp":
            fields["timestamp"] = tuple(value)
        elif name == "SAck":
            fields["sack_blocks"] = tuple(zip(value[::2], value[1::2], strict=True))
        elif name not in ("NOP", "EOL"):
            fields.setdefault("unknown_options", ())
            fields["unknown_options"] += ((name, value),)
    return fields


def test_rcunet_builds_scapy_dissects() -> None:
    rng = random.Random(7)
    layouts = set()
    for _ in range(CROSS_CASES):
        src, dst, ip = _random_addresses(rng)
        fields = _random_option_fields(rng)
        r = tcp.Repr(rng.randrange(1 << 16), rng.randrange(1 << 16), rng.randrange(1 << 32),
                     rng.randrange(1 << 32), rng.randrange(1 << 9), rng.randrange(1 << 16),
                     rng.randbytes(rng.choice((0, 1, 7, 100, 1400))), rng.randrange(1 << 16),
                     **fields)
        seg = r.build(src=src, dst=dst)
        theirs = ScapyTCP(seg)
        assert (theirs.sport, theirs.dport, theirs.seq, theirs.ack, int(theirs.flags),
                theirs.window, theirs.urgptr, theirs.dataofs * 4) == (
            r.src_port, r.dst_port, r.seq, r.ack, r.flags, r.window, r.urgent,
            len(seg) - len(r.payload))
        assert bytes(theirs.payload) == r.payload
        assert _scapy_option_fields(theirs.options) == fields
        layouts.add(theirs.dataofs)
        recomputed = ip / ScapyTCP(seg)
        del recomputed[ScapyTCP].chksum
        assert recomputed.__class__(bytes(recomputed))[ScapyTCP].chksum == seg[16] << 8 | seg[17]
    assert len(layouts) >= 8  # header lengths from bare to full options


# --- properties -------------------------------------------------------------------------

u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
unknown_option = st.tuples(st.sampled_from(UNKNOWN_KINDS), st.binary(max_size=10))

reprs = st.builds(
    tcp.Repr,
    src_port=u16,
    dst_port=u16,
    seq=u32,
    ack=u32,
    flags=st.integers(0, tcp.FLAGS_MASK),
    window=u16,
    payload=st.binary(max_size=64),
    urgent=u16,
    mss=st.none() | u16,
    window_scale=st.none() | st.integers(0, 255),
    sack_permitted=st.booleans(),
    sack_blocks=st.lists(st.tuples(u32, u32), max_size=4).map(tuple),
    timestamp=st.none() | st.tuples(u32, u32),
    unknown_options=st.lists(unknown_option, max_size=2).map(tuple),
    checksum=st.just(0),
    checksum_ok=st.none(),
    ecn=st.just(0),  # the IP header's, not the segment's: parse leaves it 0
)


def _encodable(r: tcp.Repr) -> bool:
    try:
        r.options_bytes()
    except WireError:
        return False
    return True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(r=reprs.filter(_encodable), v6=st.booleans())
def test_parse_build_roundtrip(r: tcp.Repr, v6: bool) -> None:
    src, dst = (LO6, bytes(16)) if v6 else (LO4, bytes(4))
    out = r.build(src=src, dst=dst)
    back = tcp.Repr.parse(out, src, dst, verify=True)
    assert back._replace(checksum=0, checksum_ok=None) == r
    buf = poisoned(len(out) + 3)
    assert r.build(buf, 3, src=src, dst=dst) == len(out) == r.buffer_len()
    assert buf[3:] == out


def _parse_only_raises_wire_error(data: bytes) -> None:
    for args in ((), (LO4, LO4), (LO6, LO6)):
        try:
            r = tcp.Repr.parse(data, *args)
        except WireError:
            continue
        assert r.payload == data[(data[12] >> 4) * 4 :]
        try:
            rebuilt = r.build(src=args[0], dst=args[1]) if args else r.build()
        except WireError:
            continue  # e.g. options Linux's layout cannot fit back into 40 bytes
        again = tcp.Repr.parse(rebuilt, *args)
        assert again._replace(checksum=0, checksum_ok=None) == r._replace(
            checksum=0, checksum_ok=None)
        assert again.checksum_ok in (None, True)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=80))
def test_arbitrary_bytes_only_raise_wire_error(data: bytes) -> None:
    _parse_only_raises_wire_error(data)


@settings(max_examples=500, deadline=None)
@given(
    name=st.sampled_from(sorted(FIXTURES)),
    flips=st.lists(st.tuples(st.integers(0, 100), st.integers(1, 255)), max_size=4),
    cut=st.integers(0, 100),
    extra=st.binary(max_size=8),
)
def test_mutated_segments_only_raise_wire_error(
    name: str, flips: list[tuple[int, int]], cut: int, extra: bytes
) -> None:
    seg = bytearray(_segment(name)[2])
    for position, mask in flips:
        seg[position % len(seg)] ^= mask
    _parse_only_raises_wire_error(bytes(seg[: len(seg) - cut % 8]) + extra)


def test_option_parser_is_exposed_for_raw_option_bytes() -> None:
    parsed = tcp_options.parse_options(bytes.fromhex("020405b4010303070402"), 0, 10)
    assert parsed == (1460, 7, True, (), None, ())


def test_fast_open_option_is_padded_with_nops_as_linux() -> None:
    """RFC 7413's option with an 8-byte cookie is 10 bytes: Linux's tcp_options_write
    completes its word with NOP NOP (not EOL), and parse reads it back."""
    from rcunet.wire import tcp_options

    cookie = bytes(range(8))
    raw = tcp_options.build_options(1460, None, False, (), None, ((34, cookie),))
    assert raw == bytes((2, 4, 0x05, 0xB4, 34, 10)) + cookie + bytes((1, 1))
    parsed = tcp_options.parse_options(raw, 0, len(raw))
    assert parsed[5] == ((34, cookie),)
    exp = tcp_options.build_options(None, None, False, (), None,
                                    ((254, b"\xf9\x89" + cookie),))
    assert len(exp) == 12  # 4 + 8: a whole number of words, no padding
