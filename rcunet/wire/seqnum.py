"""TCP sequence-number arithmetic modulo 2**32 (RFC 9293 §3.4, RFC 1982).

The functions work on plain ``int`` values in ``0 .. 2**32-1``, like Linux's ``before()``/
``after()``.  The constants are ``Final`` so the compiled build folds them into each call.

Comparison is defined by the signed 32-bit distance ``sub(a, b)``: ``a`` is before ``b``
when the distance is negative.  This only means something when the two numbers are less
than 2**31 apart.  At exactly 2**31 the order is ambiguous (RFC 1982 §3.2 leaves it
undefined): here, as in Linux (``(s32)(seq1 - seq2) < 0``), both ``lt(a, b)`` and
``lt(b, a)`` are then true.  TCP keeps windows far below 2**31 (RFC 7323 caps the scaled
window at 2**30) so a correct peer never produces that case, but a corrupt or hostile
segment can, and callers must not assume antisymmetry there.
"""

from __future__ import annotations

from typing import Final

MODULUS: Final = 1 << 32
MASK: Final = MODULUS - 1
HALF: Final = 1 << 31


def add(a: int, n: int) -> int:
    """``a + n`` modulo 2**32 (``n`` may be negative)."""
    return (a + n) & MASK


def sub(a: int, b: int) -> int:
    """The signed distance from ``b`` to ``a``: ``d`` in ``-2**31 .. 2**31-1`` with
    ``add(b, d) == a``."""
    d = (a - b) & MASK
    return d - MODULUS if d & HALF else d


def lt(a: int, b: int) -> bool:
    """``a`` is before ``b`` (Linux ``before(a, b)``)."""
    return (a - b) & MASK >= HALF


def le(a: int, b: int) -> bool:
    """``a`` is before or equal to ``b``."""
    return a == b or (a - b) & MASK >= HALF


def gt(a: int, b: int) -> bool:
    """``a`` is after ``b`` (Linux ``after(a, b)``)."""
    return (b - a) & MASK >= HALF


def ge(a: int, b: int) -> bool:
    """``a`` is after or equal to ``b``."""
    return a == b or (b - a) & MASK >= HALF


def between(seq: int, low: int, high: int) -> bool:
    """``low <= seq <= high`` going forward from ``low`` (Linux ``between()``)."""
    return (high - low) & MASK >= (seq - low) & MASK

