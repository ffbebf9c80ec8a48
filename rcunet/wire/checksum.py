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

from rcunet.wire.errors import WireError

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


def pseudo_header_words(src: bytes, dst: bytes, protocol: int, length: int) -> int:
    """The pseudo-header's 16-bit words summed, not folded, for either family (RFC 9293
    §3.1, RFC 8200 §8.1): the two addresses as one integer (its words sum to the same
    residue mod 0xFFFF), plus ``protocol`` and ``length`` (a 32-bit length is congruent to
    its two words).  Two 4-byte or two 16-byte addresses, else ``WireError("bad-address")``.
    """
    if len(src) != len(dst) or len(src) not in _ADDRESS_LENS:
        raise _bad_address()
    return int.from_bytes(src + dst, "big") + protocol + length


def segment_checksum_ok(segment: Buffer, src: bytes, dst: bytes, protocol: int) -> bool:
    """True when a whole transport segment (checksum field included) and its pseudo-header
    sum to all ones.  The word total is never zero (``protocol`` is in it), so a residue of
    zero is the sum 0xFFFF."""
    size = len(segment)
    total = int.from_bytes(segment, "big") << (8 * (size & 1))
    return (total + pseudo_header_words(src, dst, protocol, size)) % 0xFFFF == 0


_ADDRESS_LENS = (4, 16)


def _bad_address() -> WireError:
    return WireError("bad-address", "pseudo-header needs two 4- or two 16-byte addresses")


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
