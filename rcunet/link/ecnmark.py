"""CE marking of a frame on a link, as an ECN-capable router queue does it (RFC 3168
§5-6.1.1): an ECT(0) or ECT(1) packet gets CE in its IP ECN field instead of being
dropped; a Not-ECT packet cannot be marked (the caller drops it); a CE packet stays CE.

Frames are Ethernet (with up to one 802.1Q tag) or bare IP, as the link says.  IPv4's
header checksum is updated incrementally (RFC 1624 eqn. 3) so the rest of the frame is
kept byte for byte; IPv6 has none, and TCP's checksum does not cover the ECN field.
"""

from __future__ import annotations

import enum

from rcunet.wire import ecn

ETH_HEADER_LEN = 14
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_VLAN = 0x8100


class Mark(enum.Enum):
    """What ``mark_ce`` made of a frame."""

    MARKED = enum.auto()     #: ECT: now CE
    ALREADY_CE = enum.auto()  #: CE already: left as it is
    NOT_ECT = enum.auto()     #: IP but Not-ECT: cannot be marked
    NOT_IP = enum.auto()      #: not an IP packet (ARP, truncated...): cannot be marked


def ip_offset(frame: bytes, ethernet: bool) -> int | None:
    """Where the IP header starts, or None when the frame carries no IPv4/IPv6 packet."""
    offset = 0
    if ethernet:
        if len(frame) < ETH_HEADER_LEN:
            return None
        ethertype = int.from_bytes(frame[12:14], "big")
        offset = ETH_HEADER_LEN
        if ethertype == ETHERTYPE_VLAN:
            if len(frame) < ETH_HEADER_LEN + 4:
                return None
            ethertype = int.from_bytes(frame[16:18], "big")
            offset += 4
        if ethertype not in (ETHERTYPE_IPV4, ETHERTYPE_IPV6):
            return None
    if len(frame) < offset + 2:
        return None
    version = frame[offset] >> 4
    if version == 4 and len(frame) >= offset + 20:
        return offset
    if version == 6 and len(frame) >= offset + 40:
        return offset
    return None


def codepoint(frame: bytes, ethernet: bool) -> int | None:
    """The frame's IP ECN field, None when it is not IP."""
    offset = ip_offset(frame, ethernet)
    if offset is None:
        return None
    if frame[offset] >> 4 == 4:
        return ecn.of(frame[offset + 1])
    return ecn.of((frame[offset] & 0x0F) << 4 | frame[offset + 1] >> 4)


def mark_ce(frame: bytes, ethernet: bool) -> tuple[Mark, bytes]:
    """The frame with CE in its ECN field when it is ECT, and what was done."""
    offset = ip_offset(frame, ethernet)
    if offset is None:
        return Mark.NOT_IP, frame
    current = codepoint(frame, ethernet)
    if current == ecn.CE:
        return Mark.ALREADY_CE, frame
    if current == ecn.NOT_ECT:
        return Mark.NOT_ECT, frame
    out = bytearray(frame)
    if frame[offset] >> 4 == 4:
        old_word = frame[offset] << 8 | frame[offset + 1]
        out[offset + 1] = ecn.with_ecn(frame[offset + 1], ecn.CE)
        new_word = out[offset] << 8 | out[offset + 1]
        checksum = int.from_bytes(frame[offset + 10 : offset + 12], "big")
        out[offset + 10 : offset + 12] = _checksum_update(checksum, old_word,
                                                          new_word).to_bytes(2, "big")
    else:
        # traffic class = low nibble of byte 0, high nibble of byte 1: ECN is 0x30 of byte 1
        out[offset + 1] |= ecn.CE << 4
    return Mark.MARKED, bytes(out)


def _checksum_update(checksum: int, old: int, new: int) -> int:
    """RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), one's complement 16-bit."""
    total = (~checksum & 0xFFFF) + (~old & 0xFFFF) + new
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
