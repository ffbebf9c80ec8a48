"""IP reassembly: order, duplicates, overlap rules per family, timeouts with the ICMP event,
oversize and inconsistent fragments, bounded memory under floods, and a property test
that fragment soup never reassembles to wrong data."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rcunet.core.ip.reassembly import (
    POINTER_PAYLOAD_LENGTH,
    Ipv4Reassembler,
    Ipv6Reassembler,
    ParameterProblem,
    TimeExceeded,
)
from rcunet.wire import ipv4, ipv6

S = 1_000_000_000
SRC4, DST4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
SRC6 = bytes.fromhex("fe800000000000000000000000000001")
DST6 = bytes.fromhex("fe800000000000000000000000000002")


def data_of(n: int, salt: int = 0) -> bytes:
    return bytes((i * 13 + salt) % 256 for i in range(n))


def f4(offset: int, data: bytes, more: bool = True, ident: int = 1, src: bytes = SRC4) -> ipv4.Repr:
    return ipv4.Repr(src, DST4, ipv4.PROTO_UDP, data, ident=ident, frag_offset=offset,
                     more_fragments=more)


def f6(offset: int, data: bytes, more: bool = True, ident: int = 1, nh: int = ipv6.PROTO_UDP,
       src: bytes = SRC6) -> ipv6.Repr:
    return ipv6.Repr(src, DST6, nh, data, extensions=(ipv6.Fragment(nh, offset, more, ident),))


def pieces(whole: bytes, size: int = 16) -> list[tuple[int, bytes, bool]]:
    out = []
    for start in range(0, len(whole), size):
        chunk = whole[start : start + size]
        out.append((start, chunk, start + size < len(whole)))
    return out


# -- both families -------------------------------------------------------------------------


def test_ipv4_in_order_out_of_order_and_counters() -> None:
    whole = data_of(100)
    for order in (lambda x: x, lambda x: list(reversed(x)), lambda x: x[1::2] + x[0::2]):
        reasm = Ipv4Reassembler()
        results = [reasm.add(f4(o, d, m), 0) for o, d, m in order(pieces(whole))]
        assert results[:-1] == [None] * (len(results) - 1)
        done = results[-1]
        assert bytes(done.payload) == whole
        assert not done.more_fragments and done.frag_offset == 0
        assert done.build()  # a valid packet
        assert reasm.counters["ReasmReqds"] == 7 and reasm.counters["ReasmOKs"] == 1
        assert reasm.mem == 0 and len(reasm) == 0


def test_not_a_fragment_passes_through_uncounted() -> None:
    reasm = Ipv4Reassembler()
    whole = ipv4.Repr(SRC4, DST4, 17, b"abc")
    assert reasm.add(whole, 0) is whole
    assert reasm.counters["ReasmReqds"] == 0
    plain6 = ipv6.Repr(SRC6, DST6, 17, b"abc")
    assert Ipv6Reassembler().add(plain6, 0) is plain6


def test_ipv6_atomic_fragment_is_delivered_at_once() -> None:
    reasm = Ipv6Reassembler()
    out = reasm.add(f6(0, b"hello", more=False), 0)
    assert out.fragment is None and bytes(out.payload) == b"hello" and out.next_header == 17
    assert reasm.counters["ReasmOKs"] == 1 and len(reasm) == 0


def test_keys_separate_datagrams() -> None:
    reasm = Ipv4Reassembler()
    a, b = data_of(32, 1), data_of(32, 2)
    assert reasm.add(f4(0, a[:16], ident=1), 0) is None
    assert reasm.add(f4(0, b[:16], ident=2), 0) is None
    assert reasm.add(f4(0, b[:16], ident=1, src=bytes([10, 0, 0, 9])), 0) is None
    assert len(reasm) == 3
    assert bytes(reasm.add(f4(16, b[16:], False, ident=2), 0).payload) == b
    assert bytes(reasm.add(f4(16, a[16:], False, ident=1), 0).payload) == a
    # IPv6 queues of the same ident on different interfaces (scope) stay apart
    r6 = Ipv6Reassembler()
    assert r6.add(f6(0, a[:16]), 0, scope=1) is None
    assert r6.add(f6(16, b[16:], False), 0, scope=2) is None
    assert bytes(r6.add(f6(16, a[16:], False), 0, scope=1).payload) == a


def test_ipv6_next_header_of_later_fragments_ignored() -> None:
    reasm = Ipv6Reassembler()
    whole = data_of(32)
    assert reasm.add(f6(16, whole[16:], False, nh=58), 0) is None
    done = reasm.add(f6(0, whole[:16], nh=17), 0)
    assert done.next_header == 17 and bytes(done.payload) == whole


def test_exact_duplicates_are_ignored_both_families() -> None:
    whole = data_of(48)
    r4, r6 = Ipv4Reassembler(), Ipv6Reassembler()
    for reasm, frag in ((r4, f4), (r6, f6)):
        assert reasm.add(frag(0, whole[:16]), 0) is None
        assert reasm.add(frag(0, whole[:16]), 0) is None
        assert reasm.add(frag(16, whole[16:32]), 0) is None
        assert reasm.add(frag(16, whole[16:32]), 0) is None
        done = reasm.add(frag(32, whole[32:], False), 0)
        assert bytes(done.payload) == whole
        assert reasm.counters["ReasmDuplicates"] == 2
        assert reasm.counters["ReasmOverlaps"] == 0


def test_ipv4_contained_fragment_with_same_bytes_is_a_duplicate() -> None:
    whole = data_of(48)
    reasm = Ipv4Reassembler()
    reasm.add(f4(0, whole[:32]), 0)
    assert reasm.add(f4(8, whole[8:24]), 0) is None  # inside, same bytes (Linux: IPFRAG_DUP)
    assert reasm.counters["ReasmDuplicates"] == 1
    assert bytes(reasm.add(f4(32, whole[32:], False), 0).payload) == whole


def test_ipv4_contained_across_two_pieces_is_a_duplicate() -> None:
    whole = data_of(48)
    reasm = Ipv4Reassembler()
    reasm.add(f4(0, whole[:16]), 0)
    reasm.add(f4(16, whole[16:32]), 0)
    assert reasm.add(f4(8, whole[8:24]), 0) is None
    assert reasm.counters["ReasmDuplicates"] == 1 and len(reasm) == 1


def test_ipv4_contained_fragment_with_different_bytes_discards() -> None:
    whole = data_of(48)
    reasm = Ipv4Reassembler()
    reasm.add(f4(0, whole[:32]), 0)
    assert reasm.add(f4(8, b"X" * 16), 0) is None
    assert reasm.counters["ReasmOverlaps"] == 1 and reasm.counters["ReasmFails"] == 1
    assert len(reasm) == 0 and reasm.mem == 0
    # the rest of the datagram alone can never complete (the first piece is gone)
    assert reasm.add(f4(32, whole[32:], False), 0) is None


def test_partial_overlap_discards_whole_datagram_both_families() -> None:
    whole = data_of(48)
    for reasm, frag in ((Ipv4Reassembler(), f4), (Ipv6Reassembler(), f6)):
        reasm.add(frag(0, whole[:24]), 0)
        assert reasm.add(frag(16, whole[16:40]), 0) is None  # same bytes, still an overlap
        assert reasm.counters["ReasmOverlaps"] == 1
        assert len(reasm) == 0 and reasm.mem == 0


def test_ipv6_contained_fragment_is_an_overlap_rfc5722() -> None:
    whole = data_of(48)
    reasm = Ipv6Reassembler()
    reasm.add(f6(0, whole[:32]), 0)
    assert reasm.add(f6(8, whole[8:24]), 0) is None
    assert reasm.counters["ReasmOverlaps"] == 1 and len(reasm) == 0


def test_exact_range_with_different_bytes_is_an_overlap() -> None:
    whole = data_of(48)
    for reasm, frag in ((Ipv4Reassembler(), f4), (Ipv6Reassembler(), f6)):
        reasm.add(frag(0, whole[:16]), 0)
        reasm.add(frag(0, b"Y" * 16), 0)
        assert reasm.counters["ReasmOverlaps"] == 1 and len(reasm) == 0


def test_inconsistent_fragments_discard() -> None:
    whole = data_of(64)
    cases = [
        # two different last fragments
        [f4(32, whole[32:48], False), f4(48, whole[48:], False)],
        # data beyond the declared end
        [f4(32, whole[32:48], False), f4(48, whole[48:])],
        # a last fragment ending before data already held
        [f4(48, whole[48:]), f4(16, whole[16:32], False)],
        # empty fragment
        [f4(0, whole[:16]), f4(16, b"")],
        # non-last fragment not a multiple of 8 long
        [f4(0, whole[:16]), f4(16, whole[16:21])],
    ]
    for case in cases:
        reasm = Ipv4Reassembler()
        for frag in case:
            assert reasm.add(frag, 0) is None
        assert reasm.counters["ReasmFails"] == 1, case
        assert len(reasm) == 0 and reasm.mem == 0


def test_ipv4_oversize_datagram_dropped() -> None:
    reasm = Ipv4Reassembler()
    assert reasm.add(f4(0, b"a" * 1480), 0) is None
    assert reasm.add(f4(65512, b"b" * 16, False), 0) is None  # ends at 65528 > 65515
    assert reasm.counters["ReasmFails"] == 1 and len(reasm) == 0
    # an options header pushes an otherwise fine datagram over 65535
    reasm = Ipv4Reassembler()
    first = f4(0, b"a" * 65480)._replace(options=bytes([130, 11]) + bytes(9) + b"\x00" * 29)
    reasm.add(first, 0)
    assert reasm.add(f4(65480, b"z" * 16, False), 0) is None  # 60 + 65496 > 65535
    assert reasm.counters["ReasmFails"] == 1 and reasm.counters["ReasmOKs"] == 0


def test_ipv6_parameter_problems() -> None:
    reasm = Ipv6Reassembler()
    bad_len = f6(0, b"x" * 13)
    assert reasm.add(bad_len, 0) == ParameterProblem(bad_len, POINTER_PAYLOAD_LENGTH)
    too_far = f6(65528, b"x" * 16, False)
    assert reasm.add(too_far, 0) == ParameterProblem(too_far, 42)  # 40 + 2: offset field
    assert len(reasm) == 0


def test_ipv6_reassembled_fragmentable_extension_headers_are_decoded() -> None:
    dst_opts = ipv6.DestinationOptions(17, ((0x1E, b"\x01\x02\x03\x04"),))
    upper = data_of(40)
    raw = bytes(ipv6.emit_extensions((dst_opts,), 17)) + upper
    reasm = Ipv6Reassembler()
    reasm.add(f6(0, raw[:24], nh=ipv6.PROTO_DSTOPTS), 0)
    done = reasm.add(f6(24, raw[24:], False, nh=ipv6.PROTO_DSTOPTS), 0)
    assert done.next_header == 17 and bytes(done.payload) == upper
    assert done.extensions == (dst_opts,)


def test_ipv6_bad_chain_after_reassembly_fails_cleanly() -> None:
    reasm = Ipv6Reassembler()
    # claims Destination Options with a length running past the data
    raw = bytes([17, 200]) + bytes(14)
    reasm.add(f6(0, raw, nh=ipv6.PROTO_DSTOPTS), 0)
    assert reasm.add(f6(16, b"z" * 8, False), 0) is None
    assert reasm.counters["ReasmFails"] == 1 and reasm.counters["ReasmOKs"] == 0


# -- timeouts ------------------------------------------------------------------------------


def test_timeout_with_first_fragment_gives_time_exceeded_event() -> None:
    reasm = Ipv4Reassembler(timeout=30 * S)
    first = f4(0, data_of(16))
    reasm.add(first, 5 * S)
    reasm.add(f4(32, data_of(8), False, ident=2), 6 * S)  # no first fragment
    reasm.add(f4(16, data_of(8)), 20 * S)  # later fragments do not extend the timer
    assert reasm.next_deadline() == 35 * S
    assert reasm.expire(35 * S - 1) == []
    events = reasm.expire(35 * S)
    assert events == [TimeExceeded(first._replace(payload=bytes(first.payload)))]
    assert bytes(events[0].first.payload) == data_of(16)  # enough to quote
    assert reasm.next_deadline() == 36 * S
    assert reasm.expire(100 * S) == []  # ident 2 had no first fragment: silent
    assert reasm.counters["ReasmTimeout"] == 2 and reasm.counters["ReasmFails"] == 2
    assert reasm.mem == 0 and reasm.next_deadline() is None


def test_ipv6_timeout_event_too() -> None:
    reasm = Ipv6Reassembler(timeout=60 * S)
    reasm.add(f6(0, data_of(16)), 0)
    (event,) = reasm.expire(60 * S)
    assert event.first.fragment.offset == 0


def test_fragment_arriving_after_deadline_starts_afresh_and_keeps_event() -> None:
    reasm = Ipv4Reassembler(timeout=10 * S)
    whole = data_of(32)
    reasm.add(f4(0, whole[:16]), 0)
    # the caller did not call expire() in time; the stale queue must not complete
    assert reasm.add(f4(16, whole[16:], False), 11 * S) is None
    assert reasm.next_deadline() == 0  # a pending event waits
    events = reasm.expire(11 * S)
    assert len(events) == 1 and reasm.counters["ReasmTimeout"] == 1
    assert len(reasm) == 1  # the new queue with the late fragment


# -- memory --------------------------------------------------------------------------------


def test_flood_of_never_completing_fragments_stays_within_budget() -> None:
    budget = 64 * 1024
    reasm = Ipv4Reassembler(high_thresh=budget)
    peak = 0
    for i in range(5000):
        src = bytes([10, 1, (i >> 8) & 255, i & 255])
        assert reasm.add(f4(8 * (i % 50), data_of(64, i), ident=i, src=src), i) is None
        peak = max(peak, reasm.mem)
    assert peak <= budget
    assert reasm.counters["ReasmEvictions"] > 4000
    assert reasm.counters["ReasmFails"] == reasm.counters["ReasmEvictions"]
    # honest traffic still gets through
    whole = data_of(3000)
    out = [reasm.add(f4(o, d, m, ident=77777 & 0xFFFF), 10**6) for o, d, m in pieces(whole, 1000)]
    assert bytes(out[-1].payload) == whole
    assert reasm.mem <= budget


def test_datagram_bigger_than_budget_is_dropped() -> None:
    reasm = Ipv6Reassembler(high_thresh=2000)
    whole = data_of(4000)
    results = [reasm.add(f6(o, d, m), 0) for o, d, m in pieces(whole, 1000)]
    assert all(r is None for r in results)
    assert reasm.mem <= 2000 and reasm.counters["ReasmOKs"] == 0
    assert reasm.counters["ReasmFails"] >= 1


def test_many_tiny_fragments_in_one_queue_are_bounded() -> None:
    reasm = Ipv6Reassembler(high_thresh=32 * 1024)
    for i in range(2000):
        reasm.add(f6(16 * i, b"12345678"), 0)  # holes everywhere: never completes
        assert reasm.mem <= 32 * 1024


# -- property: fragment soup ---------------------------------------------------------------


@st.composite
def soup(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, bytes, bool]], bool]:
    """An original payload cut into fragments, shuffled, with exact duplicates anywhere
    and rogue fragments (random bytes, misaligned with the cuts) before any original."""
    size = draw(st.integers(9, 600))  # at least two fragments: a single one is no fragment
    whole = bytes(draw(st.binary(min_size=size, max_size=size)))
    cuts = sorted(set(draw(st.lists(st.integers(1, (size - 1) // 8), min_size=1, max_size=8))))
    bounds = [0, *[8 * c for c in cuts if 8 * c < size], size]
    frags = [(a, whole[a:b], b < size) for a, b in zip(bounds, bounds[1:], strict=False)]
    shuffled = draw(st.permutations(frags))
    dup_count = draw(st.integers(0, 4))
    for _ in range(dup_count):
        dup = draw(st.sampled_from(frags))
        shuffled.insert(draw(st.integers(0, len(shuffled))), dup)
    rogues = draw(
        st.lists(
            st.tuples(st.integers(0, 100).map(lambda x: 8 * x), st.binary(min_size=1, max_size=64),
                      st.just(True)),
            max_size=3,
        )
    )
    # A rogue that lines up exactly with original fragment boundaries can fill a hole
    # with other bytes, and a rogue last fragment can end the datagram early: no
    # reassembler can tell (that is IP).  Every other rogue conflicts with some
    # original, and must never leak into a result.
    edges = set(bounds)
    rogues = [r for r in rogues if r[0] not in edges or r[0] + len(r[1]) not in edges]
    complete = not rogues
    return whole, rogues + shuffled, complete


@settings(max_examples=200, deadline=None)
@given(soup(), st.booleans())
def test_fragment_soup_reassembles_to_original_or_nothing(
    case: tuple[bytes, list[tuple[int, bytes, bool]], bool], v6: bool
) -> None:
    whole, frags, must_complete = case
    reasm: Ipv4Reassembler | Ipv6Reassembler = Ipv6Reassembler() if v6 else Ipv4Reassembler()
    make = f6 if v6 else f4
    done = []
    for offset, data, more in frags:
        result = reasm.add(make(offset, data, more), 0)
        if isinstance(result, ParameterProblem):
            continue
        if result is not None:
            done.append(bytes(result.payload))
    for payload in done:
        assert payload == whole
    if must_complete:
        # at least once; a duplicate set arriving after completion may complete again,
        # as it would on a real network
        assert done
    reasm.expire(10**15)
    assert reasm.mem == 0 and len(reasm) == 0
