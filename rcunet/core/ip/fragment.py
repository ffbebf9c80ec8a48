"""IP fragmentation at the sender (and, for IPv4, at a forwarding router).

``fragment_ipv4`` follows RFC 791 §3.2 and Linux ``ip_do_fragment``: every fragment but
the last carries a multiple of 8 data bytes; the first keeps all options, later ones only
the options whose copy flag is set (RFC 791 §3.1), padded with End-of-List to a multiple
of 4; a packet that is itself a fragment (forwarded) is cut further, keeping its offset
and its MF bit on the last piece.  With DF set the caller gets ``FragmentationNeeded``
back instead, to answer with ICMP destination-unreachable / fragmentation-needed.

``fragment_ipv6`` follows RFC 8200 §4.5: the unfragmentable part (fixed header, plus
Hop-by-Hop and Routing headers and any Destination Options before a Routing header) is
repeated in every fragment, followed by a Fragment header; the fragmentable part (later
extension headers and the upper layer) is cut in multiples of 8.  Only the source
fragments IPv6: a router that cannot forward a packet sends packet-too-big instead.

Both return ``Repr`` values (payloads are zero-copy slices of the original) ready for
``build``.  Counting is the caller's: ``FragOKs`` +1 and ``FragCreates`` +len(result) when
a list comes back with more than one packet, ``FragFails`` +1 on ``FragmentationNeeded``.
"""

from __future__ import annotations

import dataclasses

from rcunet.wire import ipv4, ipv6

#: RFC 791: every IPv4 module can forward a 68-byte datagram without fragmenting.
IPV4_MIN_MTU = 68
#: RFC 8200 §5.
IPV6_MIN_MTU = 1280
#: The copy flag in an IPv4 option type byte.
OPTION_COPIED = 0x80
FRAGMENT_HEADER_LEN = 8


@dataclasses.dataclass(frozen=True, slots=True)
class FragmentationNeeded:
    """The packet needs fragmenting but has DF set: send ICMP fragmentation-needed
    (type 3 code 4) quoting ``packet``, advertising ``mtu`` as the next-hop MTU."""

    packet: ipv4.Repr
    mtu: int


def copied_options(options: bytes) -> bytes:
    """The options a non-first IPv4 fragment carries: those with the copy flag set,
    in order, padded with End-of-List to a multiple of 4 (RFC 791 §3.1).

    ``options`` must be well formed (``ipv4.check_options``); the codec checks this on
    parse and build, so a malformed list raises ``WireError`` there first.
    """
    ipv4.check_options(options)
    kept = bytearray()
    at = 0
    end = len(options)
    while at < end:
        kind = options[at]
        if kind == ipv4.OPT_END:
            break
        if kind == ipv4.OPT_NOP:
            at += 1
            continue
        length = options[at + 1]
        if kind & OPTION_COPIED:
            kept += options[at : at + length]
        at += length
    kept += bytes(-len(kept) % 4)  # End-of-List padding
    return bytes(kept)


def fragment_ipv4(packet: ipv4.Repr, mtu: int) -> list[ipv4.Repr] | FragmentationNeeded:
    """Cut ``packet`` into fragments of at most ``mtu`` bytes each.

    A packet that fits comes back alone and unchanged.  The caller sets ``ident`` before
    calling (it is shared by every fragment).  ``checksum`` fields are zeroed: ``build``
    computes each fragment's own header checksum.
    """
    if mtu < IPV4_MIN_MTU:
        raise ValueError(f"IPv4 MTU {mtu} below the minimum {IPV4_MIN_MTU}")
    if packet.buffer_len() <= mtu:
        return [packet]
    if packet.dont_fragment:
        return FragmentationNeeded(packet, mtu)
    first_header = ipv4.HEADER_LEN + len(packet.options)
    later_options = copied_options(packet.options) if packet.options else b""
    later_header = ipv4.HEADER_LEN + len(later_options)
    first_room = (mtu - first_header) & ~7
    later_room = (mtu - later_header) & ~7
    if first_room <= 0:
        raise ValueError(f"MTU {mtu} leaves no room after a {first_header}-byte header")
    payload = memoryview(packet.payload)
    total = len(payload)
    pieces: list[ipv4.Repr] = []
    start = 0
    while start < total:
        room = first_room if start == 0 else later_room
        end = min(start + room, total)
        last = end == total
        pieces.append(
            packet._replace(
                payload=payload[start:end],
                options=packet.options if start == 0 else later_options,
                frag_offset=packet.frag_offset + start,
                more_fragments=packet.more_fragments if last else True,
                checksum=0,
                checksum_ok=None,
            )
        )
        start = end
    return pieces


def split_unfragmentable(
    extensions: tuple[ipv6.Extension, ...],
) -> tuple[tuple[ipv6.Extension, ...], tuple[ipv6.Extension, ...]]:
    """RFC 8200 §4.5: the headers every fragment repeats, and the fragmentable rest.

    The unfragmentable part runs up to and including the last Hop-by-Hop or Routing
    header (so Destination Options before a Routing header stay with it, as in Linux
    ``ip6_find_1stfragopt``); Destination Options after it belong to the destination and
    travel in the fragmentable part.
    """
    cut = 0
    for index, ext in enumerate(extensions):
        if isinstance(ext, ipv6.HopByHop | ipv6.Routing):
            cut = index + 1
    return extensions[:cut], extensions[cut:]


def fragment_ipv6(packet: ipv6.Repr, mtu: int, ident: int) -> list[ipv6.Repr]:
    """Cut ``packet`` into fragments of at most ``mtu`` bytes each, with Fragment
    Identification ``ident`` (the caller draws it: Linux hashes the addresses with a
    secret).  A packet that fits comes back alone and unchanged."""
    if mtu < IPV6_MIN_MTU:
        raise ValueError(f"IPv6 MTU {mtu} below the minimum {IPV6_MIN_MTU}")
    if packet.buffer_len() <= mtu:
        return [packet]
    if packet.fragment is not None:
        raise ValueError("an IPv6 fragment cannot be fragmented again")
    if not 0 <= ident <= 0xFFFFFFFF:
        raise ValueError(f"fragment identification {ident} out of 32 bits")
    unfragmentable, fragmentable = split_unfragmentable(packet.extensions)
    if fragmentable:
        first_next = ipv6.protocol_of(fragmentable[0])
        head = bytes(ipv6.emit_extensions(fragmentable, packet.next_header))
        data: ipv6.Buffer = head + bytes(packet.payload)
        chain = len(data) - len(packet.payload)
    else:
        first_next = packet.next_header
        data = packet.payload
        chain = 0
    header = ipv6.HEADER_LEN + ipv6.chain_len(unfragmentable) + FRAGMENT_HEADER_LEN
    room = (mtu - header) & ~7
    if room <= 0 or chain > room:
        # RFC 7112: the first fragment must hold the whole header chain.
        raise ValueError(f"MTU {mtu} cannot carry the {header + chain}-byte header chain")
    view = memoryview(data)
    total = len(view)
    pieces: list[ipv6.Repr] = []
    for start in range(0, total, room):
        end = min(start + room, total)
        frag = ipv6.Fragment(first_next, start, end < total, ident)
        pieces.append(
            packet._replace(
                next_header=first_next,
                payload=view[start:end],
                extensions=(*unfragmentable, frag),
            )
        )
    return pieces
