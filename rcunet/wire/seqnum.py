"""TCP sequence-number arithmetic modulo 2**32 (RFC 9293 §3.4, RFC 1982).

The functions work on plain ``int`` values in ``0 .. 2**32-1`` (the fast path the TCP
machine uses, like Linux's ``before()``/``after()``); ``SeqNum`` wraps the same laws in an
``int`` subclass whose operators are modular, for code that prefers ``a < b``.

Comparison is defined by the signed 32-bit distance ``sub(a, b)``: ``a`` is before ``b``
when the distance is negative.  This only means something when the two numbers are less
than 2**31 apart.  At exactly 2**31 the order is ambiguous (RFC 1982 §3.2 leaves it
undefined): here, as in Linux (``(s32)(seq1 - seq2) < 0``), both ``lt(a, b)`` and
``lt(b, a)`` are then true.  TCP keeps windows far below 2**31 (RFC 7323 caps the scaled
window at 2**30) so a correct peer never produces that case, but a corrupt or hostile
segment can, and callers must not assume antisymmetry there.
"""

from __future__ import annotations

MODULUS = 1 << 32
MASK = MODULUS - 1
HALF = 1 << 31


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


class SeqNum(int):
    """A sequence number: an ``int`` in ``0 .. 2**32-1`` whose arithmetic and ordering
    are modular.  ``s + n`` and ``s - n`` give a ``SeqNum``; ``s - t`` of two ``SeqNum``
    gives the signed ``int`` distance.  Equality and hashing are the plain ``int`` ones.
    """

    __slots__ = ()

    def __new__(cls, value: int) -> SeqNum:
        return super().__new__(cls, value & MASK)

    def __add__(self, n: int) -> SeqNum:
        return SeqNum(int(self) + int(n))

    __radd__ = __add__

    def __sub__(self, other: int) -> int:
        # int() first: the module functions subtract, which would recurse into here.
        if isinstance(other, SeqNum):
            return sub(int(self), int(other))
        return SeqNum(int(self) - int(other))

    def __lt__(self, other: int) -> bool:
        return lt(int(self), int(other))

    def __le__(self, other: int) -> bool:
        return le(int(self), int(other))

    def __gt__(self, other: int) -> bool:
        return gt(int(self), int(other))

    def __ge__(self, other: int) -> bool:
        return ge(int(self), int(other))

    def __repr__(self) -> str:
        return f"SeqNum({int(self)})"
