"""IPv6 (RFC 8200) with its extension-header chain.

``Repr.parse`` walks the chain after the fixed header and stops at the first header it
does not decode (the upper layer: TCP, UDP, ICMPv6, or AH/ESP/No Next Header, whose bytes
become the payload) or right after a Fragment header: what follows a Fragment header is
fragment data, decoded again once the fragments are reassembled (``parse_extensions`` on
the reassembled payload, as Linux does).

Chain rules enforced on parse and on build (RFC 8200 §4.1): Hop-by-Hop only right after
the fixed header; Routing and Fragment at most once; Destination Options at most twice (so
at most 5 headers; ``MAX_EXTENSIONS`` bounds the walk besides). A header running past the
payload is ``WireError("truncated")``. Option TLVs (Hop-by-Hop, Destination Options) are
kept in order, padding included, as ``(type, data)`` pairs (Pad1 is ``(0, b"")``), so a
packet re-encodes byte for byte; build pads an options header to a multiple of 8 only when
its options do not already fill it. Jumbograms (RFC 2675): payload length 0 needs a Jumbo
Payload option in Hop-by-Hop; build writes that option's value.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, overload

from rcunet.wire._common import Buffer as Buffer  # re-exported: callers annotate with it
from rcunet.wire._common import (
    View,
    WritableBuffer,
    truncated,
    write_into,
)
from rcunet.wire.errors import WireError

HEADER_LEN = 40
MAX_EXTENSIONS = 8
MAX_PAYLOAD_LEN = 0xFFFF

PROTO_HOPOPTS = 0
PROTO_TCP = 6
PROTO_UDP = 17
PROTO_ROUTING = 43
PROTO_FRAGMENT = 44
PROTO_ESP = 50
PROTO_AH = 51
PROTO_ICMPV6 = 58
PROTO_NONE = 59
PROTO_DSTOPTS = 60

OPT_PAD1 = 0
OPT_PADN = 1
OPT_JUMBO = 0xC2
OPT_ROUTER_ALERT = 5
MAX_PADDING = 7

_FIXED = struct.Struct("!IHBB16s16s")
_FRAGMENT = struct.Struct("!BxHI")
_U32 = struct.Struct("!I")

Option = tuple[int, bytes]


class HopByHop(NamedTuple):
    """Hop-by-Hop Options header (RFC 8200 §4.3)."""

    next_header: int
    options: tuple[Option, ...] = ()


class DestinationOptions(NamedTuple):
    """Destination Options header (RFC 8200 §4.6)."""

    next_header: int
    options: tuple[Option, ...] = ()


class Routing(NamedTuple):
    """Routing header (RFC 8200 §4.4): ``data`` is everything after the four fixed bytes
    (type-specific; its length is 4 more than a multiple of 8)."""

    next_header: int
    routing_type: int
    segments_left: int
    data: bytes = b"\0\0\0\0"


class Fragment(NamedTuple):
    """Fragment header (RFC 8200 §4.5); ``offset`` in bytes (a multiple of 8)."""

    next_header: int
    offset: int = 0
    more: bool = False
    ident: int = 0


Extension = HopByHop | Routing | Fragment | DestinationOptions

_EXT_PROTOCOL: dict[type, int] = {
    HopByHop: PROTO_HOPOPTS,
    Routing: PROTO_ROUTING,
    Fragment: PROTO_FRAGMENT,
    DestinationOptions: PROTO_DSTOPTS,
}
EXTENSION_PROTOCOLS = frozenset(_EXT_PROTOCOL.values())
_MAX_COUNT = {PROTO_HOPOPTS: 1, PROTO_ROUTING: 1, PROTO_FRAGMENT: 1, PROTO_DSTOPTS: 2}


def protocol_of(ext: Extension) -> int:
    """The Next Header value that announces ``ext``."""
    return _EXT_PROTOCOL[type(ext)]


# --- option TLVs ---------------------------------------------------------------------


def parse_options(buf: Buffer, start: int, end: int) -> tuple[Option, ...]:
    """Decode the TLVs in ``buf[start:end]``; a TLV running past ``end`` is an error."""
    options: list[Option] = []
    i = start
    while i < end:
        kind = buf[i]
        if kind == OPT_PAD1:
            options.append((OPT_PAD1, b""))
            i += 1
            continue
        if i + 2 > end:
            raise WireError("bad-option", f"IPv6 option {kind} has no length byte")
        nxt = i + 2 + buf[i + 1]
        if nxt > end:
            raise WireError("bad-option", f"IPv6 option {kind} of {buf[i + 1]} bytes overruns")
        options.append((kind, bytes(buf[i + 2 : nxt])))
        i = nxt
    result = tuple(options)
    check_padding(result)
    return result


def check_padding(options: tuple[Option, ...]) -> None:
    """Padding as Linux's ``ip6_parse_tlv()`` accepts it: PadN bytes are zero (RFC 8200
    §4.2) and no more than ``MAX_PADDING`` padding bytes run in a row (a covert channel
    otherwise)."""
    run = 0
    for kind, data in options:
        if kind == OPT_PAD1:
            run += 1
        elif kind == OPT_PADN:
            if any(data):
                raise WireError("bad-padding", "PadN carries non-zero bytes")
            run += 2 + len(data)
        else:
            run = 0
            continue
        if run > MAX_PADDING:
            raise WireError("bad-padding", f"{run} bytes of padding in a row")


def _options_len(options: tuple[Option, ...]) -> int:
    return sum(1 if kind == OPT_PAD1 else 2 + len(data) for kind, data in options)


def _emit_options(out: bytearray, options: tuple[Option, ...], jumbo_len: int | None) -> None:
    """Append the TLVs, then Pad1/PadN up to the next multiple of 8 of the header.

    ``jumbo_len`` is None outside the leading Hop-by-Hop header, where a 0xC2 option is
    no Jumbo Payload (RFC 2675 §2) but an unknown option, carried as it came."""
    pad = -(2 + _options_len(options)) % 8
    if pad:
        options += ((OPT_PAD1, b""),) if pad == 1 else ((OPT_PADN, bytes(pad - 2)),)
    check_padding(options)
    for kind, data in options:
        if kind == OPT_PAD1:
            if data:
                raise WireError("bad-option", "Pad1 carries no data")
            out.append(OPT_PAD1)
            continue
        if kind == OPT_JUMBO and jumbo_len is not None:
            if len(data) != 4:
                raise WireError("bad-jumbo", f"Jumbo Payload option of {len(data)} bytes")
            data = _U32.pack(jumbo_len)
        if not 0 <= kind <= 0xFF or len(data) > 0xFF:
            raise WireError("bad-option", f"IPv6 option {kind} of {len(data)} bytes")
        out.append(kind)
        out.append(len(data))
        out += data


def _jumbo_option(options: tuple[Option, ...]) -> bytes | None:
    for kind, data in options:
        if kind == OPT_JUMBO:
            return data
    return None


# --- the chain -------------------------------------------------------------------------


def parse_extensions(
    next_header: int, buf: Buffer, start: int, end: int, *, first: bool = True
) -> tuple[tuple[Extension, ...], int, int]:
    """Walk the extension headers in ``buf[start:end]`` announced by ``next_header``.

    Returns ``(extensions, upper_next_header, upper_offset)``.  ``first`` says the chain
    starts right after the fixed header (where Hop-by-Hop is allowed); pass ``False`` for
    the headers that follow a Fragment header in a reassembled payload.
    """
    extensions: list[Extension] = []
    counts = dict.fromkeys(_MAX_COUNT, 0)
    nh = next_header
    i = start
    while nh in _MAX_COUNT:
        # The repeat limits below already stop a chain at 5 headers; this bound keeps the
        # walk finite even if they are ever relaxed.
        if len(extensions) >= MAX_EXTENSIONS:
            raise WireError("bad-chain", f"more than {MAX_EXTENSIONS} extension headers")
        counts[nh] += 1
        if counts[nh] > _MAX_COUNT[nh]:
            raise WireError("bad-chain", f"extension header {nh} repeated")
        if nh == PROTO_HOPOPTS and (extensions or not first):
            raise WireError("bad-chain", "Hop-by-Hop header not first")
        if i + 8 > end:
            raise WireError("truncated", f"extension header {nh} at {i} runs past {end}")
        if nh == PROTO_FRAGMENT:
            nxt, off_flags, ident = _FRAGMENT.unpack_from(buf, i)
            extensions.append(Fragment(nxt, off_flags & 0xFFF8, bool(off_flags & 1), ident))
            return tuple(extensions), nxt, i + 8
        nxt = buf[i]
        hend = i + (buf[i + 1] + 1) * 8
        if hend > end:
            raise WireError("truncated", f"extension header {nh} at {i} runs past {end}")
        ext: Extension
        if nh == PROTO_ROUTING:
            ext = Routing(nxt, buf[i + 2], buf[i + 3], bytes(buf[i + 4 : hend]))
        elif nh == PROTO_HOPOPTS:
            ext = HopByHop(nxt, parse_options(buf, i + 2, hend))
        else:
            ext = DestinationOptions(nxt, parse_options(buf, i + 2, hend))
        extensions.append(ext)
        nh = nxt
        i = hend
    return tuple(extensions), nh, i


def check_chain(extensions: tuple[object, ...]) -> None:
    """The chain rules of parse, applied to a chain about to be emitted.  Its items are
    whatever the caller put in the Repr (typed ``object``: the compiled build would
    otherwise reject a wrong one with TypeError before this names it)."""
    if len(extensions) > MAX_EXTENSIONS:
        raise WireError("bad-chain", f"more than {MAX_EXTENSIONS} extension headers")
    counts = dict.fromkeys(_MAX_COUNT, 0)
    for index, ext in enumerate(extensions):
        proto = _EXT_PROTOCOL.get(type(ext))
        if proto is None:
            raise WireError("bad-chain", f"not an extension header: {ext!r}")
        counts[proto] += 1
        if counts[proto] > _MAX_COUNT[proto]:
            raise WireError("bad-chain", f"extension header {proto} repeated")
        if proto == PROTO_HOPOPTS and index:
            raise WireError("bad-chain", "Hop-by-Hop header not first")
        if proto == PROTO_FRAGMENT and index != len(extensions) - 1:
            raise WireError("bad-chain", "headers after a Fragment header are fragment data")


def chain_len(extensions: tuple[Extension, ...]) -> int:
    total = 0
    for ext in extensions:
        if isinstance(ext, Fragment):
            total += 8
        elif isinstance(ext, Routing):
            total += 4 + len(ext.data)
        else:
            total += -(-(2 + _options_len(ext.options)) // 8) * 8
    return total


def emit_extensions(
    extensions: tuple[Extension, ...], upper: int, jumbo_len: int = 0
) -> bytearray:
    """Encode the chain; each header's Next Header names the one after it (``upper`` for
    the last), whatever the ``next_header`` fields of the values say."""
    try:
        return _emit_extensions(extensions, upper, jumbo_len)
    except (struct.error, ValueError, TypeError) as err:
        if isinstance(err, WireError):
            raise
        raise WireError("bad-field", f"extension header value: {err}") from None


def _emit_extensions(
    extensions: tuple[Extension, ...], upper: int, jumbo_len: int
) -> bytearray:
    out = bytearray()
    for index, ext in enumerate(extensions):
        nxt = protocol_of(extensions[index + 1]) if index + 1 < len(extensions) else upper
        if isinstance(ext, Fragment):
            if ext.offset & 7 or not 0 <= ext.offset <= 0xFFF8:
                raise WireError("bad-fragment", f"fragment offset {ext.offset}")
            out += _FRAGMENT.pack(nxt, ext.offset | bool(ext.more), ext.ident)
            continue
        start = len(out)
        if isinstance(ext, Routing):
            size = 4 + len(ext.data)
            if size % 8 or size > 2048:
                raise WireError("bad-routing", f"routing header of {size} bytes")
            out += bytes((nxt, size // 8 - 1, ext.routing_type, ext.segments_left))
            out += ext.data
            continue
        out += bytes((nxt, 0))
        leading_hbh = index == 0 and isinstance(ext, HopByHop)
        _emit_options(out, ext.options, jumbo_len if leading_hbh else None)
        units = (len(out) - start) // 8 - 1
        if units > 0xFF:
            raise WireError("too-long", f"options header of {len(out) - start} bytes")
        out[start + 1] = units
    return out


# --- the packet -------------------------------------------------------------------------


class Packet(View):
    """Zero-copy view of an IPv6 packet's fixed header."""

    __slots__ = ()
    what = "IPv6 header"
    min_len = HEADER_LEN

    @property
    def payload_length(self) -> int:
        return int.from_bytes(self.buf[4:6], "big")

    @property
    def next_header(self) -> int:
        return self.buf[6]

    @property
    def hop_limit(self) -> int:
        return self.buf[7]

    @property
    def src(self) -> bytes:
        return bytes(self.buf[8:24])

    @property
    def dst(self) -> bytes:
        return bytes(self.buf[24:40])

    def set_payload_length(self, value: int) -> None:
        self.buf[4:6] = value.to_bytes(2, "big")

    def set_next_header(self, value: int) -> None:
        self.buf[6] = value

    def set_hop_limit(self, value: int) -> None:
        self.buf[7] = value

    def set_src(self, value: bytes) -> None:
        self.buf[8:24] = value

    def set_dst(self, value: bytes) -> None:
        self.buf[24:40] = value

    def check_len(self) -> None:
        super().check_len()
        if self.version != 6:
            raise WireError("bad-version", f"IP version {self.version} in an IPv6 header")
        _check_payload_len(self.payload_length, len(self.buf))

    @property
    def version(self) -> int:
        return self.buf[0] >> 4

    @property
    def traffic_class(self) -> int:
        return (int.from_bytes(self.buf[0:2], "big") >> 4) & 0xFF

    @property
    def flow_label(self) -> int:
        return int.from_bytes(self.buf[0:4], "big") & 0xFFFFF

    def _set_first_word(self, word: int) -> None:
        self.buf[0:4] = word.to_bytes(4, "big")

    def set_version(self, value: int) -> None:
        word = int.from_bytes(self.buf[0:4], "big")
        self._set_first_word((value & 0xF) << 28 | word & 0x0FFFFFFF)

    def set_traffic_class(self, value: int) -> None:
        word = int.from_bytes(self.buf[0:4], "big")
        self._set_first_word(word & 0xF00FFFFF | (value & 0xFF) << 20)

    def set_flow_label(self, value: int) -> None:
        word = int.from_bytes(self.buf[0:4], "big")
        self._set_first_word(word & 0xFFF00000 | value & 0xFFFFF)

    def payload(self) -> memoryview:
        """Everything after the fixed header up to the payload length (the chain
        included)."""
        return self.buf[HEADER_LEN : HEADER_LEN + self.payload_length]

    def payload_mut(self) -> memoryview:
        return self.payload()


def _check_payload_len(payload_len: int, present: int) -> None:
    if HEADER_LEN + payload_len > present:
        raise truncated(f"IPv6 payload length {payload_len}", HEADER_LEN + payload_len, present)


class Repr(NamedTuple):
    """An IPv6 packet: ``next_header`` and ``payload`` are the upper layer's, after the
    extension chain in ``extensions``."""

    src: bytes
    dst: bytes
    next_header: int
    payload: Buffer
    hop_limit: int = 64
    traffic_class: int = 0
    flow_label: int = 0
    extensions: tuple[Extension, ...] = ()

    @property
    def fragment(self) -> Fragment | None:
        """The Fragment header, if the packet is a fragment."""
        for ext in self.extensions:
            if isinstance(ext, Fragment):
                return ext
        return None

    @classmethod
    def parse(cls, buf: Buffer) -> Repr:
        """Parse a packet; bytes past the payload length (link padding) are dropped."""
        n = len(buf)
        if n < HEADER_LEN:
            raise truncated("IPv6 header", HEADER_LEN, n)
        word, plen, nh, hop_limit, src, dst = _FIXED.unpack_from(buf)
        if word >> 28 != 6:
            raise WireError("bad-version", f"IP version {word >> 28} in an IPv6 header")
        if plen:
            end = HEADER_LEN + plen
            if end > n:
                _check_payload_len(plen, n)
        else:
            end = HEADER_LEN + _jumbo_len(buf, nh, n)
        if nh in _MAX_COUNT:
            extensions, nh, start = parse_extensions(nh, buf, HEADER_LEN, end)
            _check_jumbo(extensions, not plen)
        else:
            extensions, start = (), HEADER_LEN
        return cls(src, dst, nh, memoryview(buf)[start:end], hop_limit,
                   (word >> 20) & 0xFF, word & 0xFFFFF, extensions)

    def buffer_len(self) -> int:
        return HEADER_LEN + chain_len(self.extensions) + len(self.payload)

    @overload
    def build(self, buf: None = None, offset: int = 0) -> bytes: ...

    @overload
    def build(self, buf: WritableBuffer, offset: int = 0) -> int: ...

    def build(self, buf: WritableBuffer | None = None, offset: int = 0) -> bytes | int:
        """Emit the packet with its extension chain."""
        header = self.build_header()
        if buf is None:
            return b"".join((header, self.payload))
        return write_into(buf, offset, b"".join((header, self.payload)))

    def build_header(self, payload_len: int | None = None) -> bytes:
        """The fixed header and the extension chain alone, for a packet whose payload is
        ``payload_len`` bytes (default: ``len(self.payload)``) that the caller gathers
        behind it itself (``build`` is this plus the payload)."""
        src, dst, next_header, payload, hop_limit, traffic_class, flow_label, extensions = self
        n = len(payload) if payload_len is None else payload_len
        if len(src) != 16 or len(dst) != 16:
            raise WireError("bad-address", "IPv6 addresses are 16 bytes")
        if not (0 <= traffic_class <= 0xFF and 0 <= flow_label <= 0xFFFFF
                and 0 <= hop_limit <= 0xFF and 0 <= next_header <= 0xFF):
            raise WireError("bad-field", f"IPv6 tc {traffic_class} flow {flow_label} "
                            f"hop limit {hop_limit} next header {next_header}")
        chain: bytes | bytearray
        if extensions:
            chain, plen_field = self._emit_chain(n)
            first = protocol_of(extensions[0])
        else:
            chain, plen_field, first = b"", n, next_header
            if plen_field > MAX_PAYLOAD_LEN:
                raise WireError("too-long", f"IPv6 payload of {plen_field} bytes")
            if plen_field == 0:
                raise WireError("bad-length", "an empty IPv6 payload reads as a jumbogram")
        header = _FIXED.pack(6 << 28 | traffic_class << 20 | flow_label, plen_field, first,
                             hop_limit, src, dst)
        return header + chain if chain else header

    def _emit_chain(self, upper_len: int) -> tuple[bytearray, int]:
        """The encoded chain and the payload length field (0 for a jumbogram), for
        ``upper_len`` bytes of upper-layer payload."""
        extensions = self.extensions
        check_chain(extensions)
        payload_len = chain_len(extensions) + upper_len
        first = extensions[0]
        if isinstance(first, HopByHop) and _jumbo_option(first.options) is not None:
            if payload_len <= MAX_PAYLOAD_LEN or self.fragment is not None:
                raise WireError("bad-jumbo", f"jumbogram of {payload_len} bytes")
            return emit_extensions(extensions, self.next_header, payload_len), 0
        if payload_len > MAX_PAYLOAD_LEN:
            raise WireError("too-long", f"IPv6 payload of {payload_len} bytes")
        return emit_extensions(extensions, self.next_header), payload_len


def _jumbo_len(buf: Buffer, nh: int, n: int) -> int:
    """The payload length of a jumbogram (payload length field 0, RFC 2675 §3)."""
    if nh != PROTO_HOPOPTS:
        raise WireError("bad-length", "IPv6 payload length 0 without a Jumbo Payload option")
    if HEADER_LEN + 8 > n:
        raise WireError("truncated", "Hop-by-Hop header runs past the packet")
    hend = HEADER_LEN + (buf[HEADER_LEN + 1] + 1) * 8
    if hend > n:
        raise WireError("truncated", "Hop-by-Hop header runs past the packet")
    data = _jumbo_option(parse_options(buf, HEADER_LEN + 2, hend))
    if data is None:
        raise WireError("bad-length", "IPv6 payload length 0 without a Jumbo Payload option")
    if len(data) != 4:
        raise WireError("bad-jumbo", f"Jumbo Payload option of {len(data)} bytes")
    jumbo: int = _U32.unpack(data)[0]
    if jumbo <= MAX_PAYLOAD_LEN:
        raise WireError("bad-jumbo", f"jumbo payload length {jumbo} <= 65535")
    if HEADER_LEN + jumbo > n:
        raise truncated(f"jumbo payload length {jumbo}", HEADER_LEN + jumbo, n)
    return jumbo


def _check_jumbo(extensions: tuple[Extension, ...], jumbogram: bool) -> None:
    """RFC 2675 §3: the option goes with payload length 0, and never with a Fragment."""
    if jumbogram:
        if any(isinstance(ext, Fragment) for ext in extensions):
            raise WireError("bad-jumbo", "jumbogram with a Fragment header")
    elif (
        extensions
        and isinstance(extensions[0], HopByHop)
        and _jumbo_option(extensions[0].options) is not None
    ):
        raise WireError("bad-jumbo", "Jumbo Payload option with a non-zero payload length")
