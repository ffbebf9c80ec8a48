"""The Internet checksum (RFC 1071) at C speed, and its incremental update (RFC 1624).

No Python loop runs over the bytes: the buffer becomes one big integer with
``int.from_bytes`` and is reduced modulo 0xFFFF.  Because 2**16 == 1 (mod 0xFFFF),
``sum(w_i * 2**(16*k_i)) == sum(w_i) (mod 0xFFFF)``, which is exactly the
one's-complement sum of the 16-bit words up to the representation of zero:
one's-complement arithmetic has two zeros (0x0000 and 0xFFFF), and a non-empty sum
of words that are not all zero is never +0, so a residue of 0 maps to 0xFFFF.
CPython's bignum division runs in C, so the cost is one pass over the data.
"""

from __future__ import annotations

import struct

Buffer = bytes | bytearray | memoryview

_PSEUDO_V4 = struct.Struct("!4s4sBBH")
_PSEUDO_V6 = struct.Struct("!16s16sIxxxB")


def ones_complement_sum(data: Buffer, initial: int = 0) -> int:
    """One's-complement 16-bit sum of ``data`` (odd length padded with a zero byte),
    added to ``initial``; the result is folded into 0..0xFFFF and not inverted."""
    value = int.from_bytes(data, "big")
    if len(data) & 1:
        value <<= 8
    value += initial
    if value == 0:
        return 0
    return value % 0xFFFF or 0xFFFF


def fold(value: int) -> int:
    """Fold a non-negative integer sum of 16-bit words to one's-complement 16 bits."""
    if value == 0:
        return 0
    return value % 0xFFFF or 0xFFFF


def finish(partial_sum: int) -> int:
    """Turn a folded one's-complement sum into the checksum field value."""
    return ~partial_sum & 0xFFFF


def internet_checksum(data: Buffer, initial: int = 0) -> int:
    """The checksum field value for ``data`` (with its checksum field zeroed) plus
    an ``initial`` partial sum such as a pseudo-header's."""
    return ~ones_complement_sum(data, initial) & 0xFFFF


def is_valid(data: Buffer, initial: int = 0) -> bool:
    """True when ``data`` (checksum field included) sums to all ones with ``initial``."""
    return ones_complement_sum(data, initial) == 0xFFFF


def pseudo_header_sum_v4(src: bytes, dst: bytes, protocol: int, length: int) -> int:
    """Partial sum of the IPv4 pseudo-header (RFC 793 §3.1, RFC 768)."""
    return ones_complement_sum(_PSEUDO_V4.pack(src, dst, 0, protocol, length))


def pseudo_header_sum_v6(src: bytes, dst: bytes, next_header: int, length: int) -> int:
    """Partial sum of the IPv6 pseudo-header (RFC 8200 §8.1)."""
    return ones_complement_sum(_PSEUDO_V6.pack(src, dst, length, next_header))


def pseudo_header_sum(src: bytes, dst: bytes, protocol: int, length: int) -> int:
    """Pseudo-header partial sum for either family, chosen by address length."""
    if len(src) == 4:
        return pseudo_header_sum_v4(src, dst, protocol, length)
    return pseudo_header_sum_v6(src, dst, protocol, length)


def update16(checksum: int, old_word: int, new_word: int) -> int:
    """RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') for one changed 16-bit word."""
    total = (~checksum & 0xFFFF) + (~old_word & 0xFFFF) + new_word
    return ~fold(total) & 0xFFFF


def update_bytes(checksum: int, old: Buffer, new: Buffer) -> int:
    """RFC 1624 update for a field of even length at an even offset (an address,
    a port pair...): ``old`` replaced by ``new`` of the same length."""
    if len(old) != len(new) or len(old) & 1:
        raise ValueError("fields must have the same, even length")
    old_sum = ones_complement_sum(old)
    total = (~checksum & 0xFFFF) + (~old_sum & 0xFFFF) + ones_complement_sum(new)
    return ~fold(total) & 0xFFFF
