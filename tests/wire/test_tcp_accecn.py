"""AccECN on the wire (RFC 9768): the ACE field in the header flags, the AccECN option
(kinds 172 and 174) laid out as Linux's tcp_options_write does, and IP's ECN field;
cross-checked with scapy, property tests, malformed input raises only WireError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import TCP as ScapyTCP

from rcunet.wire import WireError, ecn, tcp
from rcunet.wire import tcp_options as opt

LO4 = bytes((127, 0, 0, 1))


def _segment(**fields: object) -> tcp.Repr:
    base = dict(src_port=40000, dst_port=80, seq=1000, ack=2000, flags=tcp.ACK, window=512)
    base.update(fields)
    return tcp.Repr(**base)


# ------------------------------------------------------------------------------- ACE
@pytest.mark.parametrize("value", range(8))
def test_ace_is_ae_cwr_ece_as_one_number(value: int) -> None:
    flags = tcp.with_ace(tcp.ACK | tcp.PSH, value)
    assert tcp.ace(flags) == value
    assert flags & (tcp.ACK | tcp.PSH) == tcp.ACK | tcp.PSH
    assert bool(flags & tcp.AE) == bool(value & 4)
    assert bool(flags & tcp.CWR) == bool(value & 2)
    assert bool(flags & tcp.ECE) == bool(value & 1)


@pytest.mark.parametrize("value", range(8))
def test_ace_bits_match_scapy(value: int) -> None:
    raw = _segment(flags=tcp.with_ace(tcp.ACK, value)).build(src=LO4, dst=LO4)
    flags = ScapyTCP(raw).flags
    assert ("N" in flags, "C" in flags, "E" in flags) == (
        bool(value & 4), bool(value & 2), bool(value & 1))
    assert tcp.ace(tcp.Repr.parse(raw).flags) == value


@pytest.mark.parametrize("value", [-1, 8, 0x100])
def test_ace_out_of_range_is_a_wire_error(value: int) -> None:
    with pytest.raises(WireError):
        tcp.with_ace(tcp.ACK, value)


# ------------------------------------------------------------------ AccECN option
E1B, CEB, E0B = 0x0A0B0C, 0x000001, 0x123456

# (description, Repr fields, expected option bytes) in tcp_options_write's layout.
LAYOUTS = [
    ("three fields after the timestamps, NOP-padded",
     dict(timestamp=(7, 9), unknown_options=((174, bytes.fromhex("0a0b0c000001123456")),)),
     "0101080a0000000700000009" "ae0b0a0b0c000001123456" "01"),
    ("two fields, then SACK blocks",
     dict(timestamp=(7, 9), sack_blocks=((3000, 4000),),
          unknown_options=((174, bytes.fromhex("0a0b0c000001")),)),
     "0101080a0000000700000009" "ae080a0b0c000001" "0101050a00000bb800000fa0"),
    ("one field: its last byte takes the window scale word's NOP",
     dict(mss=1460, window_scale=7, unknown_options=((174, bytes.fromhex("0a0b0c")),)),
     "020405b4" "ae050a0b" "0c030307"),
    ("one field: its last byte and a NOP in front of the SACK blocks",
     dict(timestamp=(7, 9), sack_blocks=((3000, 4000),),
          unknown_options=((174, bytes.fromhex("0a0b0c")),)),
     "0101080a0000000700000009" "ae050a0b" "0c01050a00000bb800000fa0"),
    ("no field: kind and length replace SACK-permitted's NOP NOP",
     dict(mss=1460, sack_permitted=True, unknown_options=((174, b""),)),
     "020405b4" "ae020402"),
    ("no field, nothing to share: a word of its own",
     dict(timestamp=(7, 9), window_scale=7, unknown_options=((174, b""),)),
     "0101080a0000000700000009" "01030307" "ae020101"),
    ("kind 172 the same way",
     dict(timestamp=(7, 9), unknown_options=((172, bytes.fromhex("123456000001")),)),
     "0101080a0000000700000009" "ac08123456000001"),
]


@pytest.mark.parametrize("fields,expected", [(f, e) for _, f, e in LAYOUTS],
                         ids=[d for d, _, _ in LAYOUTS])
def test_accecn_option_layout_is_linuxs(fields: dict[str, object], expected: str) -> None:
    segment = _segment(**fields)
    assert segment.options_bytes().hex() == expected
    raw = segment.build(src=LO4, dst=LO4)
    back = tcp.Repr.parse(raw, LO4, LO4, verify=True)
    assert back._replace(checksum=0, checksum_ok=None) == segment
    kinds = [o[0] for o in ScapyTCP(raw).options]
    assert any(k in (172, 174) for k in kinds)  # scapy finds the option where it is


def test_option_counters_by_kind() -> None:
    one = opt.AccEcnOption.parse(174, bytes.fromhex("0a0b0c000001123456"))
    assert (one.e1b, one.ceb, one.e0b) == (E1B, CEB, E0B)
    zero = opt.AccEcnOption.parse(172, bytes.fromhex("123456000001"))
    assert (zero.e0b, zero.ceb, zero.e1b) == (E0B, CEB, None)
    assert opt.AccEcnOption.parse(174, b"").fields == ()


def test_option_reads_whole_fields_only_as_linux() -> None:
    """tcp_accecn_process_option reads while 3 bytes remain, at most three fields."""
    assert opt.AccEcnOption.parse(174, bytes(4)).fields == (0,)
    assert opt.AccEcnOption.parse(174, bytes(range(13))).fields == (
        0x000102, 0x030405, 0x060708)


def test_last_option_wins_as_tcp_parse_options() -> None:
    unknown = ((174, bytes(3)), (99, b"x"), (172, bytes.fromhex("000005")))
    found = opt.accecn_option(unknown)
    assert found is not None and found.kind == 172 and found.e0b == 5
    assert opt.accecn_option(((99, b""),)) is None


@pytest.mark.parametrize("bad", [
    opt.AccEcnOption(174, (1 << 24,)), opt.AccEcnOption(174, (-1,)),
    opt.AccEcnOption(174, (1, 2, 3, 4)), opt.AccEcnOption(99, (1,)),
])
def test_unencodable_option_is_a_wire_error(bad: opt.AccEcnOption) -> None:
    with pytest.raises(WireError):
        bad.data()


def test_parse_of_another_kind_is_a_wire_error() -> None:
    with pytest.raises(WireError):
        opt.AccEcnOption.parse(5, b"")


counters = st.integers(0, 0xFFFFFF)
accecn_options = st.builds(opt.AccEcnOption, st.sampled_from([172, 174]),
                           st.lists(counters, max_size=3).map(tuple))


@settings(max_examples=300, deadline=None)
@given(option=accecn_options, ts=st.none() | st.tuples(counters, counters),
       ws=st.none() | st.integers(0, 14), sack_ok=st.booleans(),
       sacks=st.lists(st.tuples(counters, counters), max_size=2).map(tuple),
       mss=st.none() | st.integers(0, 0xFFFF))
def test_option_roundtrips_beside_every_other(option: opt.AccEcnOption,
                                              ts: tuple[int, int] | None, ws: int | None,
                                              sack_ok: bool,
                                              sacks: tuple[tuple[int, int], ...],
                                              mss: int | None) -> None:
    segment = _segment(mss=mss, timestamp=ts, window_scale=ws, sack_permitted=sack_ok,
                       sack_blocks=sacks, unknown_options=(option.as_unknown(),))
    try:
        raw = segment.build(src=LO4, dst=LO4)
    except WireError:
        return  # more than 40 bytes of options
    back = tcp.Repr.parse(raw, LO4, LO4, verify=True)
    assert back._replace(checksum=0, checksum_ok=None) == segment
    assert opt.accecn_option(back.unknown_options) == option
    assert len(raw) % 4 == 0


@settings(max_examples=300, deadline=None)
@given(kind=st.integers(0, 255), data=st.binary(max_size=40))
def test_arbitrary_option_data_only_raises_wire_error(kind: int, data: bytes) -> None:
    try:
        parsed = opt.AccEcnOption.parse(kind, data)
    except WireError:
        assert kind not in (172, 174)
        return
    assert len(parsed.fields) == min(len(data) // 3, 3)
    assert opt.AccEcnOption.parse(kind, parsed.data()) == parsed


# ------------------------------------------------------------------------- IP ECN
def test_ecn_codepoints_are_rfc3168s() -> None:
    assert (ecn.NOT_ECT, ecn.ECT_1, ecn.ECT_0, ecn.CE) == (0, 1, 2, 3)
    assert ecn.of(0xB8 | ecn.ECT_0) == ecn.ECT_0  # EF DSCP kept apart
    assert ecn.with_ecn(0xB8 | ecn.ECT_1, ecn.CE) == 0xB8 | ecn.CE
    assert [ecn.is_ect(c) for c in range(4)] == [False, True, True, True]
    with pytest.raises(WireError):
        ecn.with_ecn(0, 4)
