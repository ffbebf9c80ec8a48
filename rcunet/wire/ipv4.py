"""IPv4 (RFC 791) headers.

``parse`` always checks the header checksum (``checksum_ok``); ``verify=True`` turns a
bad one into ``WireError("bad-checksum")``.  Options are kept as raw bytes after checking
that every option fits in the header.  The payload is cut to the total length, so link
padding never reaches the transport layer.  Fragments are not reassembled here.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, overload

from rcunet.wire._common import Buffer as Buffer  # re-exported: callers annotate with it
from rcunet.wire._common import (
    View,
    WritableBuffer,
    new_tuple,
    truncated,
    write_into,
)
from rcunet.wire.errors import WireError

PROTO_ICMP = 1
PROTO_TCP = 6
PROTO_UDP = 17

VERSION = 4
HEADER_LEN = 20
MAX_HEADER_LEN = 60
MAX_OPTIONS_LEN = MAX_HEADER_LEN - HEADER_LEN
MAX_TOTAL_LEN = 0xFFFF
ADDR_LEN = 4

#: Flag bits in the flags/fragment-offset word.
FLAG_DF = 0x4000
FLAG_MF = 0x2000
FRAG_OFFSET_MASK = 0x1FFF

OPT_END = 0
OPT_NOP = 1

#: version/IHL byte of a header without options.
_VIHL_PLAIN = VERSION << 4 | HEADER_LEN >> 2
_HEADER = struct.Struct("!BBHHHBBH4s4s")
_U16 = struct.Struct("!H")
_CHECKSUM_AT = 10
#: What receive paths read of a plain header, in one unpack (``parse_plain``): version and
#: IHL, total length, flags and fragment offset, TTL, protocol, source, destination.
_PLAIN = struct.Struct("!BxHxxHBBxx4s4s")
_MF_OFFSET = FLAG_MF | FRAG_OFFSET_MASK


def header_len_of(vihl: int, available: int) -> int:
    """Header length from the version/IHL byte, checked against ``available`` bytes."""
    if vihl >> 4 != VERSION:
        raise WireError("bad-version", f"IP version {vihl >> 4} in an IPv4 header")
    header_len = (vihl & 0x0F) * 4
    if header_len < HEADER_LEN:
        raise WireError("bad-ihl", f"IHL {vihl & 0x0F} < 5")
    if header_len > available:
        raise truncated(f"IPv4 header with IHL {vihl & 0x0F}", header_len, available)
    return header_len


def parse_plain(buf: Buffer) -> tuple[int, int, int, bytes, bytes] | None:
    """The common packet's header, read with one unpack for receive paths that run once
    per packet: a 20-byte header (version 4, no options), not a fragment, its total
    length within ``buf``.  Returns ``(total_len, ttl, protocol, src, dst)``, the
    values ``Repr.parse`` gives for such a header (it checks nothing more of it), or
    None for any other packet: parse that one with ``Repr.parse``.  The header checksum
    is the caller's (``header_checksum_ok``): links that offload it skip it."""
    if len(buf) < HEADER_LEN:
        return None
    vihl, total_len, frag, ttl, protocol, src, dst = _PLAIN.unpack_from(buf)
    if vihl != _VIHL_PLAIN or not HEADER_LEN <= total_len <= len(buf) or frag & _MF_OFFSET:
        return None
    return total_len, ttl, protocol, src, dst


def check_options(options: Buffer) -> None:
    """Raise ``WireError("bad-option")`` unless every option fits in ``options``.

    End-of-list stops the walk (what follows is padding); no-op is one byte; every other
    option has a length byte covering itself and the type byte, so it is at least 2.
    """
    end = len(options)
    at = 0
    while at < end:
        kind = options[at]
        if kind == OPT_END:
            return
        if kind == OPT_NOP:
            at += 1
            continue
        if at + 1 >= end:
            raise WireError("bad-option", f"option {kind} at {at} has no length byte")
        length = options[at + 1]
        if length < 2:
            raise WireError("bad-option", f"option {kind} at {at} has length {length}")
        if at + length > end:
            raise WireError("bad-option", f"option {kind} at {at} overruns the header by "
                            f"{at + length - end} bytes")
        at += length


def header_checksum_ok(header: Buffer) -> bool:
    """True when an IPv4 header (checksum included) sums to all ones.

    A header is never all zero bytes (the version nibble is 4), so its one's-complement
    sum is 0xFFFF exactly when the big-endian integer is divisible by 0xFFFF
    (see ``checksum``'s module docstring).
    """
    return int.from_bytes(header, "big") % 0xFFFF == 0


class Packet(View):
    """Zero-copy view of an IPv4 packet."""

    __slots__ = ()
    what = "IPv4 header"
    min_len = HEADER_LEN

    @property
    def total_len(self) -> int:
        return int.from_bytes(self.buf[2:4], "big")

    @property
    def ident(self) -> int:
        return int.from_bytes(self.buf[4:6], "big")

    @property
    def ttl(self) -> int:
        return self.buf[8]

    @property
    def protocol(self) -> int:
        return self.buf[9]

    @property
    def checksum(self) -> int:
        return int.from_bytes(self.buf[10:12], "big")

    @property
    def src(self) -> bytes:
        return bytes(self.buf[12:16])

    @property
    def dst(self) -> bytes:
        return bytes(self.buf[16:20])

    def set_total_len(self, value: int) -> None:
        self.buf[2:4] = value.to_bytes(2, "big")

    def set_ident(self, value: int) -> None:
        self.buf[4:6] = value.to_bytes(2, "big")

    def set_ttl(self, value: int) -> None:
        self.buf[8] = value

    def set_protocol(self, value: int) -> None:
        self.buf[9] = value

    def set_checksum(self, value: int) -> None:
        self.buf[10:12] = value.to_bytes(2, "big")

    def set_src(self, value: bytes) -> None:
        self.buf[12:16] = value

    def set_dst(self, value: bytes) -> None:
        self.buf[16:20] = value

    def check_len(self) -> None:
        """Raise ``WireError`` unless version, IHL, options and total length are sane."""
        super().check_len()
        available = len(self.buf)
        header_len = header_len_of(self.buf[0], available)
        check_options(self.buf[HEADER_LEN:header_len])
        _check_total_len(self.total_len, header_len, available)

    @property
    def version(self) -> int:
        return self.buf[0] >> 4

    @property
    def header_len(self) -> int:
        return (self.buf[0] & 0x0F) * 4

    @property
    def dscp(self) -> int:
        return self.buf[1] >> 2

    @property
    def ecn(self) -> int:
        return self.buf[1] & 0x03

    @property
    def dont_fragment(self) -> bool:
        return bool(self.buf[6] & 0x40)

    @property
    def more_fragments(self) -> bool:
        return bool(self.buf[6] & 0x20)

    @property
    def frag_offset(self) -> int:
        """Fragment offset in bytes."""
        return (int.from_bytes(self.buf[6:8], "big") & FRAG_OFFSET_MASK) << 3

    def options(self) -> memoryview:
        return self.buf[HEADER_LEN : self.header_len]

    def set_dscp_ecn(self, dscp: int, ecn: int) -> None:
        self.buf[1] = dscp << 2 | ecn

    def set_fragment(self, dont_fragment: bool, more_fragments: bool, offset: int) -> None:
        """Set DF, MF and the offset (in bytes, a multiple of 8)."""
        _U16.pack_into(self.buf, 6, _frag_word(dont_fragment, more_fragments, offset))

    def verify_checksum(self) -> bool:
        return header_checksum_ok(self.buf[: self.header_len])

    def fill_checksum(self) -> None:
        """Recompute the header checksum after header fields were set."""
        self._fill_checksum(_CHECKSUM_AT, self.header_len)

    def payload(self) -> memoryview:
        return self.buf[self.header_len : self.total_len]

    def payload_mut(self) -> memoryview:
        return self.payload()


def _check_total_len(total_len: int, header_len: int, available: int) -> None:
    if total_len < header_len:
        raise WireError("bad-length", f"IPv4 total length {total_len} < header length {header_len}")
    if total_len > available:
        raise truncated(f"IPv4 total length {total_len}", total_len, available)


def _frag_word(dont_fragment: bool, more_fragments: bool, offset: int) -> int:
    if offset & 7 or not 0 <= offset <= FRAG_OFFSET_MASK << 3:
        raise WireError("bad-field", f"fragment offset {offset} is not a multiple of 8 in 0..65528")
    return (FLAG_DF if dont_fragment else 0) | (FLAG_MF if more_fragments else 0) | offset >> 3


class Repr(NamedTuple):
    """An IPv4 packet.  ``frag_offset`` is in bytes (a multiple of 8); ``options`` are the
    raw option bytes (a multiple of 4 long, at most 40); ``checksum``/``checksum_ok``
    come from parse (the reserved flag bit is ignored, as Linux does)."""

    src: bytes
    dst: bytes
    protocol: int
    payload: Buffer = b""
    ttl: int = 64
    ident: int = 0
    dont_fragment: bool = False
    more_fragments: bool = False
    frag_offset: int = 0
    dscp: int = 0
    ecn: int = 0
    options: bytes = b""
    checksum: int = 0
    checksum_ok: bool | None = None

    @classmethod
    def parse(cls, buf: Buffer, *, verify: bool = False) -> Repr:
        """Parse a packet.  Bytes past the total length (link padding) are dropped."""
        view = memoryview(buf)
        available = len(view)
        if available < HEADER_LEN:
            raise truncated("IPv4 header", HEADER_LEN, available)
        vihl, tos, total_len, ident, frag, ttl, protocol, csum, src, dst = _HEADER.unpack_from(view)
        if vihl == _VIHL_PLAIN:
            header_len = HEADER_LEN
            options = b""
        else:
            header_len = header_len_of(vihl, available)
            options = bytes(view[HEADER_LEN:header_len])
            check_options(options)
        checksum_ok = header_checksum_ok(view[:header_len])
        if total_len > available or total_len < header_len:
            _check_total_len(total_len, header_len, available)
        if verify and not checksum_ok:
            raise WireError("bad-checksum", f"IPv4 header checksum {csum:#06x}")
        return new_tuple(
            cls,
            (
                src,
                dst,
                protocol,
                view[header_len:total_len],
                ttl,
                ident,
                frag & 0x4000 != 0,  # FLAG_DF
                frag & 0x2000 != 0,  # FLAG_MF
                (frag & 0x1FFF) << 3,  # FRAG_OFFSET_MASK, in bytes
                tos >> 2,
                tos & 0x03,
                options,
                csum,
                checksum_ok,
            ),
        )

    @property
    def is_fragment(self) -> bool:
        """True for any fragment of a larger datagram (first, middle or last)."""
        return self.more_fragments or self.frag_offset != 0

    def header_len(self) -> int:
        return HEADER_LEN + len(self.options)

    def buffer_len(self) -> int:
        return HEADER_LEN + len(self.options) + len(self.payload)

    @overload
    def build(self, buf: None = None, offset: int = 0, *, checksum: bool = True) -> bytes: ...

    @overload
    def build(
        self, buf: WritableBuffer, offset: int = 0, *, checksum: bool = True
    ) -> int: ...

    def build(
        self,
        buf: WritableBuffer | None = None,
        offset: int = 0,
        *,
        checksum: bool = True,
    ) -> bytes | int:
        """Emit the packet with its header checksum (zero with ``checksum=False``)."""
        header = self.build_header(checksum=checksum)
        if buf is None:
            return b"".join((header, self.payload))
        return write_into(buf, offset, b"".join((header, self.payload)))

    def build_header(self, payload_len: int | None = None, *, checksum: bool = True) -> bytes:
        """The header with its options alone, for a packet whose payload is
        ``payload_len`` bytes (default: ``len(self.payload)``) that the caller gathers
        behind it itself (``build`` is this plus the payload)."""
        (src, dst, protocol, payload, ttl, ident, df, mf, frag_offset, dscp, ecn, options,
         _, _) = self
        header_len = HEADER_LEN
        if options:
            _check_build_options(options)
            header_len += len(options)
        total_len = header_len + (len(payload) if payload_len is None else payload_len)
        if total_len > MAX_TOTAL_LEN:
            raise WireError("too-long", f"IPv4 packet of {total_len} bytes")
        if len(src) != ADDR_LEN or len(dst) != ADDR_LEN:
            raise WireError("bad-field", "IPv4 addresses must be 4 bytes")
        if dscp >> 6 or ecn >> 2:  # also catches negative values
            raise WireError("bad-field", f"DSCP {dscp} / ECN {ecn} out of range")
        if frag_offset:
            frag = _frag_word(df, mf, frag_offset)
        else:
            frag = (0x4000 if df else 0) | (0x2000 if mf else 0)  # FLAG_DF, FLAG_MF
        vihl = 0x40 | header_len >> 2  # version 4
        tos = dscp << 2 | ecn
        csum = 0
        if checksum:
            # The header's 16-bit words summed modulo 0xFFFF (the addresses and options as
            # one integer are congruent to the sum of their words); the total is never 0
            # (vihl), so a residue of 0 is the one's-complement sum 0xFFFF, checksum 0.
            residue = (
                (vihl << 8 | tos) + total_len + ident + frag + (ttl << 8 | protocol)
                + int.from_bytes(src + dst + options if options else src + dst, "big")
            ) % 0xFFFF
            csum = 0xFFFF - residue if residue else 0
        try:
            header = _HEADER.pack(vihl, tos, total_len, ident, frag, ttl, protocol, csum, src, dst)
        except struct.error as exc:  # ttl, protocol or ident out of range
            raise WireError("bad-field", f"IPv4 field out of range: {exc}") from None
        return header + options if options else header


def _check_build_options(options: Buffer) -> None:
    if len(options) & 3 or len(options) > MAX_OPTIONS_LEN:
        raise WireError(
            "bad-option", f"{len(options)} option bytes (need a multiple of 4, at most 40)"
        )
    check_options(options)


def build_plain_header(src: bytes, dst: bytes, protocol: int, ttl: int, ident: int,
                       dont_fragment: bool, payload_len: int, *, checksum: bool = True,
                       tos: int = 0) -> bytes:
    """``Repr(src, dst, protocol, b"", ttl, ident, dont_fragment, dscp=tos >> 2,
    ecn=tos & 3).build_header(payload_len)`` without building the Repr: the header of an
    unfragmented packet with no options (what the output path sends once per packet).
    Same checks, same bytes."""
    total_len = HEADER_LEN + payload_len
    if total_len > MAX_TOTAL_LEN:
        raise WireError("too-long", f"IPv4 packet of {total_len} bytes")
    if len(src) != ADDR_LEN or len(dst) != ADDR_LEN:
        raise WireError("bad-field", "IPv4 addresses must be 4 bytes")
    frag = 0x4000 if dont_fragment else 0  # FLAG_DF
    csum = 0
    if checksum:  # as Repr.build_header: the words summed modulo 0xFFFF (vihl is 0x45)
        residue = ((_VIHL_PLAIN << 8 | tos) + total_len + ident + frag + (ttl << 8 | protocol)
                   + int.from_bytes(src + dst, "big")) % 0xFFFF
        csum = 0xFFFF - residue if residue else 0
    try:
        return _HEADER.pack(_VIHL_PLAIN, tos, total_len, ident, frag, ttl, protocol, csum, src,
                            dst)
    except struct.error as exc:  # ttl, protocol or ident out of range
        raise WireError("bad-field", f"IPv4 field out of range: {exc}") from None
