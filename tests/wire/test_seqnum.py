"""Sequence-number arithmetic across the 2**32 wrap (RFC 9293 §3.4, RFC 1982)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rcunet.wire import seqnum

seqs = st.integers(0, seqnum.MASK)
# Distances strictly inside the unambiguous range.
near = st.integers(-(2**31) + 1, 2**31 - 1)


def test_examples_across_the_wrap() -> None:
    top = 0xFFFFFFF0
    assert seqnum.add(top, 0x20) == 0x10
    assert seqnum.add(0x10, -0x20) == top
    assert seqnum.sub(0x10, top) == 0x20
    assert seqnum.sub(top, 0x10) == -0x20
    assert seqnum.lt(top, 0x10) and not seqnum.lt(0x10, top)
    assert seqnum.gt(0x10, top) and not seqnum.gt(top, 0x10)
    assert seqnum.le(5, 5) and seqnum.ge(5, 5) and not seqnum.lt(5, 5) and not seqnum.gt(5, 5)
    assert seqnum.between(0x05, top, 0x10)
    assert not seqnum.between(top - 1, top, 0x10)


def test_half_range_is_ambiguous_like_linux() -> None:
    # (s32)(a - b) < 0 is true both ways when a and b are exactly 2**31 apart.
    a, b = 0, 2**31
    assert seqnum.lt(a, b) and seqnum.lt(b, a)
    assert seqnum.sub(a, b) == seqnum.sub(b, a) == -(2**31)


@given(seqs, st.integers(-(2**40), 2**40))
def test_add_then_sub_is_identity(a: int, n: int) -> None:
    b = seqnum.add(a, n)
    assert 0 <= b <= seqnum.MASK
    assert seqnum.add(b, -n) == a
    assert seqnum.sub(b, a) == (n + 2**31) % 2**32 - 2**31


@given(seqs, seqs)
def test_sub_is_the_signed_distance(a: int, b: int) -> None:
    d = seqnum.sub(a, b)
    assert -(2**31) <= d < 2**31
    assert seqnum.add(b, d) == a


@given(seqs, near)
def test_lt_is_antisymmetric_within_half_range(a: int, d: int) -> None:
    b = seqnum.add(a, d)
    outcomes = (seqnum.lt(a, b), seqnum.lt(b, a), a == b)
    assert outcomes.count(True) == 1
    assert seqnum.lt(a, b) == (d > 0) == seqnum.gt(b, a)
    assert seqnum.le(a, b) == (d >= 0) == seqnum.ge(b, a)


@given(seqs, near, seqs)
def test_order_is_preserved_by_a_common_shift(a: int, d: int, shift: int) -> None:
    b = seqnum.add(a, d)
    a2, b2 = seqnum.add(a, shift), seqnum.add(b, shift)
    assert seqnum.lt(a, b) == seqnum.lt(a2, b2)
    assert seqnum.le(a, b) == seqnum.le(a2, b2)
    assert seqnum.sub(b, a) == seqnum.sub(b2, a2)


@given(seqs, st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_between_matches_offsets_from_low(low: int, width: int, offset: int) -> None:
    high = seqnum.add(low, width)
    assert seqnum.between(seqnum.add(low, offset), low, high) == (offset <= width)


@pytest.mark.parametrize("a,b", [(0, 1), (0xFFFFFFFF, 0), (0x7FFFFFFF, 0x80000000)])
def test_neighbours_are_ordered(a: int, b: int) -> None:
    assert seqnum.lt(a, b) and seqnum.gt(b, a) and seqnum.sub(b, a) == 1
