"""The ECN field of IP (RFC 3168 §5): the two low bits of IPv4's TOS byte and of IPv6's
traffic class.  ECT(1) is also the L4S identifier (RFC 9331)."""

from __future__ import annotations

from rcunet.wire.errors import WireError

NOT_ECT = 0b00
ECT_1 = 0b01
ECT_0 = 0b10
CE = 0b11
MASK = 0b11

NAMES = {NOT_ECT: "Not-ECT", ECT_1: "ECT(1)", ECT_0: "ECT(0)", CE: "CE"}


def of(tos: int) -> int:
    """The ECN codepoint of a TOS / traffic class byte."""
    return tos & MASK


def with_ecn(tos: int, codepoint: int) -> int:
    """``tos`` with its ECN field set to ``codepoint`` (the DSCP kept)."""
    if not 0 <= codepoint <= MASK or not 0 <= tos <= 0xFF:
        raise WireError("bad-field", f"ECN {codepoint} / TOS {tos} out of range")
    return (tos & ~MASK & 0xFF) | codepoint


def is_ect(codepoint: int) -> bool:
    """ECT(0), ECT(1) or already CE: a packet a router may mark instead of dropping
    (RFC 3168 §5: only an ECN-capable transport's packets are marked)."""
    return codepoint & MASK != NOT_ECT


def of_packet(packet: bytes | memoryview) -> int:
    """The ECN codepoint of an IPv4 or IPv6 packet, read from its first two bytes (the
    TOS byte; the traffic class straddles bytes 0 and 1 of IPv6, its ECN bits in
    byte 1's high nibble)."""
    if len(packet) < 2:
        return NOT_ECT
    if packet[0] >> 4 == 6:
        return (packet[1] >> 4) & MASK
    return packet[1] & MASK
