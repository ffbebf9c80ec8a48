"""ICMPv6 (RFC 4443), Neighbor Discovery (RFC 4861) and MLDv2 reports (RFC 3810 §5.2).

One flat ``Repr``; which fields mean something depends on ``type`` (``FIELDS_BY_TYPE``):

* echo request/reply: ``ident``, ``seq``, ``data``;
* destination unreachable, time exceeded: ``quoted``; packet too big: ``mtu``, ``quoted``;
  parameter problem: ``pointer``, ``quoted`` (``parse_quoted`` reads the flow out of it);
* router solicitation: ``options``; router advertisement: ``cur_hop_limit``, ``flags``
  (M/O...), ``router_lifetime``, ``reachable_time``, ``retrans_timer``, ``options``;
  neighbor solicitation: ``target``, ``options``; neighbor advertisement: ``flags``
  (R/S/O), ``target``, ``options``;
* MLDv2 report: ``records``;
* any other type: ``data`` is the message after the checksum, kept verbatim.

``build`` refuses fields the type has no room for, so nothing is dropped silently.  The
checksum covers the IPv6 pseudo-header (RFC 8200 §8.1): ``parse`` checks it when given the
addresses, ``build`` writes it when given them (zero otherwise, or with ``checksum=False``).
"""

from __future__ import annotations

import builtins
import struct
from typing import NamedTuple, overload

from rcunet.wire import checksum as _ck
from rcunet.wire import ipv6
from rcunet.wire._common import Buffer as Buffer  # re-exported: callers annotate with it
from rcunet.wire._common import IcmpView, WritableBuffer, truncated, write_into
from rcunet.wire.errors import WireError

PROTOCOL = 58
HEADER_LEN = 4  # type, code, checksum; the rest depends on the type

DEST_UNREACHABLE = 1
PACKET_TOO_BIG = 2
TIME_EXCEEDED = 3
PARAMETER_PROBLEM = 4
ECHO_REQUEST = 128
ECHO_REPLY = 129
ROUTER_SOLICIT = 133
ROUTER_ADVERT = 134
NEIGHBOR_SOLICIT = 135
NEIGHBOR_ADVERT = 136
MLDV2_REPORT = 143
ERROR_TYPES = (DEST_UNREACHABLE, PACKET_TOO_BIG, TIME_EXCEEDED, PARAMETER_PROBLEM)

# Destination-unreachable codes (RFC 4443 §3.1).
NO_ROUTE = 0
ADMIN_PROHIBITED = 1
BEYOND_SCOPE = 2
ADDRESS_UNREACHABLE = 3
PORT_UNREACHABLE = 4
# Time-exceeded codes.
HOP_LIMIT_EXCEEDED = 0
REASSEMBLY_TIME_EXCEEDED = 1
# Parameter-problem codes.
ERRONEOUS_HEADER = 0
UNRECOGNIZED_NEXT_HEADER = 1
UNRECOGNIZED_OPTION = 2

# Router-advertisement flags (RFC 4861 §4.2, RFC 4191 preference, RFC 5175).
RA_MANAGED = 0x80
RA_OTHER = 0x40
RA_HOME_AGENT = 0x20
RA_PREFERENCE_SHIFT = 3  # 2 bits: 01 high, 00 medium, 11 low (RFC 4191 §2.2)
RA_PROXY = 0x04
# Neighbor-advertisement flags (RFC 4861 §4.4).
NA_ROUTER = 0x80
NA_SOLICITED = 0x40
NA_OVERRIDE = 0x20
# Prefix-information flags (RFC 4861 §4.6.2).
PREFIX_ON_LINK = 0x80
PREFIX_AUTONOMOUS = 0x40

# NDP option types (RFC 4861 §4.6).
OPT_SOURCE_LL_ADDR = 1
OPT_TARGET_LL_ADDR = 2
OPT_PREFIX_INFO = 3
OPT_REDIRECTED_HEADER = 4
OPT_MTU = 5

# MLDv2 multicast address record types (RFC 3810 §5.2.12).
MODE_IS_INCLUDE = 1
MODE_IS_EXCLUDE = 2
CHANGE_TO_INCLUDE = 3
CHANGE_TO_EXCLUDE = 4
ALLOW_NEW_SOURCES = 5
BLOCK_OLD_SOURCES = 6

#: Quoted protocols whose first four transport bytes are the source and destination ports.
PORT_PROTOCOLS = frozenset({ipv6.PROTO_TCP, ipv6.PROTO_UDP, 33, 132, 136})
QUOTED_TRANSPORT_LEN = 8

_TYPE_CODE_CSUM = struct.Struct("!BBH")
_HH = struct.Struct("!HH")
_U32 = struct.Struct("!I")
_RA = struct.Struct("!BBHII")
_PREFIX = struct.Struct("!BBBBII4x16s")
_MTU_OPT = struct.Struct("!BBxxI")
_RECORD = struct.Struct("!BBH16s")


# --- NDP options ------------------------------------------------------------------------


class SourceLinkAddr(NamedTuple):
    """Source link-layer address option; ``addr`` is the option body (6 bytes for
    Ethernet; longer bodies keep their padding)."""

    addr: bytes


class TargetLinkAddr(NamedTuple):
    """Target link-layer address option."""

    addr: bytes


class PrefixInfo(NamedTuple):
    """Prefix information option (RFC 4861 §4.6.2); lifetimes in seconds, 0xFFFFFFFF is
    infinity."""

    prefix_len: int
    flags: int
    valid_lifetime: int
    preferred_lifetime: int
    prefix: bytes

    @property
    def on_link(self) -> bool:
        return bool(self.flags & PREFIX_ON_LINK)

    @property
    def autonomous(self) -> bool:
        return bool(self.flags & PREFIX_AUTONOMOUS)


class MtuOption(NamedTuple):
    """MTU option (RFC 4861 §4.6.4)."""

    mtu: int


class UnknownOption(NamedTuple):
    """Any other option, body kept verbatim (``len(data) + 2`` is a multiple of 8)."""

    type: int
    data: bytes


NdpOption = SourceLinkAddr | TargetLinkAddr | PrefixInfo | MtuOption | UnknownOption


def parse_ndp_options(buf: Buffer, start: int, end: int) -> tuple[NdpOption, ...]:
    """Decode the options in ``buf[start:end]``.  A zero length or an option running
    past the message is ``WireError("bad-option")`` (RFC 4861 §4.6: discard)."""
    options: list[NdpOption] = []
    i = start
    while i < end:
        if i + 2 > end:
            raise WireError("bad-option", f"NDP option at {i} cut short")
        kind, units = buf[i], buf[i + 1]
        if units == 0:
            raise WireError("bad-option", f"NDP option {kind} with length 0")
        nxt = i + units * 8
        if nxt > end:
            raise WireError("bad-option", f"NDP option {kind} of {units * 8} bytes overruns")
        option: NdpOption
        if kind == OPT_SOURCE_LL_ADDR:
            option = SourceLinkAddr(bytes(buf[i + 2 : nxt]))
        elif kind == OPT_TARGET_LL_ADDR:
            option = TargetLinkAddr(bytes(buf[i + 2 : nxt]))
        elif kind == OPT_PREFIX_INFO:
            if units != 4:
                raise WireError("bad-option", f"prefix information of {units * 8} bytes")
            _, _, prefix_len, flags, valid, preferred, prefix = _PREFIX.unpack_from(buf, i)
            if prefix_len > 128:
                raise WireError("bad-option", f"prefix length {prefix_len}")
            option = PrefixInfo(prefix_len, flags, valid, preferred, prefix)
        elif kind == OPT_MTU:
            if units != 1:
                raise WireError("bad-option", f"MTU option of {units * 8} bytes")
            option = MtuOption(_MTU_OPT.unpack_from(buf, i)[2])
        else:
            option = UnknownOption(kind, bytes(buf[i + 2 : nxt]))
        options.append(option)
        i = nxt
    return tuple(options)


def _emit_padded(kind: int, body: bytes) -> bytes:
    size = -(-(len(body) + 2) // 8) * 8
    if size > 255 * 8:
        raise WireError("too-long", f"NDP option of {size} bytes")
    return bytes((kind, size // 8)) + body + bytes(size - 2 - len(body))


def emit_ndp_options(options: tuple[NdpOption, ...]) -> bytes:
    out = bytearray()
    for option in options:
        if isinstance(option, SourceLinkAddr):
            out += _emit_padded(OPT_SOURCE_LL_ADDR, option.addr)
        elif isinstance(option, TargetLinkAddr):
            out += _emit_padded(OPT_TARGET_LL_ADDR, option.addr)
        elif isinstance(option, PrefixInfo):
            out += _PREFIX.pack(OPT_PREFIX_INFO, 4, *option)
        elif isinstance(option, MtuOption):
            out += _MTU_OPT.pack(OPT_MTU, 1, option.mtu)
        elif isinstance(option, UnknownOption):
            if (len(option.data) + 2) % 8:
                raise WireError("bad-option", f"option {option.type} body of {len(option.data)}")
            out += _emit_padded(option.type, option.data)
        else:
            raise WireError("bad-option", f"not an NDP option: {option!r}")
    return bytes(out)


# --- MLDv2 ------------------------------------------------------------------------------


class McastRecord(NamedTuple):
    """One multicast address record of an MLDv2 report."""

    record_type: int
    address: bytes
    sources: tuple[bytes, ...] = ()
    aux_data: bytes = b""


def _parse_records(buf: Buffer, start: int, end: int, count: int) -> tuple[McastRecord, ...]:
    records = []
    i = start
    for _ in range(count):
        if i + 20 > end:
            raise WireError("truncated", f"MLDv2 record at {i} cut short")
        record_type, aux_words, n_sources, address = _RECORD.unpack_from(buf, i)
        sources_end = i + 20 + 16 * n_sources
        nxt = sources_end + 4 * aux_words
        if nxt > end:
            raise WireError("truncated", f"MLDv2 record at {i} of {nxt - i} bytes cut short")
        sources = tuple(bytes(buf[j : j + 16]) for j in range(i + 20, sources_end, 16))
        records.append(McastRecord(record_type, address, sources, bytes(buf[sources_end:nxt])))
        i = nxt
    return tuple(records)


def _emit_records(records: tuple[McastRecord, ...]) -> bytes:
    out = bytearray(_HH.pack(0, len(records)))
    for record_type, address, sources, aux_data in records:
        if len(aux_data) % 4 or any(len(s) != 16 for s in sources):
            raise WireError("bad-field", "MLDv2 aux data in 4-byte words, sources 16 bytes")
        out += _RECORD.pack(record_type, len(aux_data) // 4, len(sources), address)
        for source in sources:
            out += source
        out += aux_data
    return bytes(out)


# --- quoted packets ---------------------------------------------------------------------


class QuotedFlow(NamedTuple):
    """The flow an ICMPv6 error is about (same shape as ``icmpv4.QuotedFlow``).

    ``protocol`` is the upper layer after the quoted extension chain; ports are ``None``
    when the quote is too short, the quoted packet is a non-first fragment, or the
    protocol has no ports.  ``transport_head`` is at most 8 quoted transport bytes.
    """

    src: bytes
    dst: bytes
    protocol: int
    src_port: int | None
    dst_port: int | None
    transport_head: bytes = b""
    extensions: tuple[ipv6.Extension, ...] = ()


_QUOTED_IP = struct.Struct("!IHBx16s16s")


def parse_quoted(quoted: Buffer) -> QuotedFlow:
    """Read the IPv6 header, extension chain and first transport bytes of a quote.

    The quote is usually cut short, so the quoted payload length may exceed what is
    present.  A quote shorter than the IPv6 header, not IPv6, or whose extension chain
    is malformed or cut is ``WireError``.
    """
    present = len(quoted)
    if present < ipv6.HEADER_LEN:
        raise truncated("quoted IPv6 header", ipv6.HEADER_LEN, present)
    word, plen, nh, src, dst = _QUOTED_IP.unpack_from(quoted)
    if word >> 28 != 6:
        raise WireError("bad-version", f"quoted IP version {word >> 28}")
    end = min(present, ipv6.HEADER_LEN + plen) if plen else present
    extensions, protocol, start = ipv6.parse_extensions(nh, quoted, ipv6.HEADER_LEN, end)
    head = bytes(quoted[start : min(end, start + QUOTED_TRANSPORT_LEN)])
    fragment = extensions[-1] if extensions and isinstance(extensions[-1], ipv6.Fragment) else None
    if protocol in PORT_PROTOCOLS and len(head) >= 4 and (fragment is None or not fragment.offset):
        return QuotedFlow(src, dst, protocol, head[0] << 8 | head[1], head[2] << 8 | head[3],
                          head, extensions)
    return QuotedFlow(src, dst, protocol, None, None, head, extensions)


# --- the message ------------------------------------------------------------------------

#: The Repr fields each type uses (others must stay at their defaults).
FIELDS_BY_TYPE: dict[int, tuple[str, ...]] = {
    ECHO_REQUEST: ("ident", "seq", "data"),
    ECHO_REPLY: ("ident", "seq", "data"),
    DEST_UNREACHABLE: ("quoted",),
    PACKET_TOO_BIG: ("mtu", "quoted"),
    TIME_EXCEEDED: ("quoted",),
    PARAMETER_PROBLEM: ("pointer", "quoted"),
    ROUTER_SOLICIT: ("options",),
    ROUTER_ADVERT: ("cur_hop_limit", "flags", "router_lifetime", "reachable_time",
                    "retrans_timer", "options"),
    NEIGHBOR_SOLICIT: ("target", "options"),
    NEIGHBOR_ADVERT: ("flags", "target", "options"),
    MLDV2_REPORT: ("records",),
}
_OTHER_FIELDS = ("data",)
#: Minimum message length per type (RFC 4443, RFC 4861, RFC 3810).
_MIN_LEN = {DEST_UNREACHABLE: 8, PACKET_TOO_BIG: 8, TIME_EXCEEDED: 8, PARAMETER_PROBLEM: 8,
            ECHO_REQUEST: 8, ECHO_REPLY: 8, ROUTER_SOLICIT: 8, ROUTER_ADVERT: 16,
            NEIGHBOR_SOLICIT: 24, NEIGHBOR_ADVERT: 24, MLDV2_REPORT: 8}


class Packet(IcmpView):
    """Zero-copy view of an ICMPv6 message's common header."""

    __slots__ = ()
    what = "ICMPv6 message"
    min_len = HEADER_LEN

    @property
    def mtu(self) -> int:
        """MTU of a packet-too-big error."""
        return int.from_bytes(self.buf[4:8], "big")

    @property
    def pointer(self) -> int:
        """Offending octet of a parameter-problem error."""
        return int.from_bytes(self.buf[4:8], "big")

    def set_mtu(self, value: int) -> None:
        self.buf[4:8] = value.to_bytes(4, "big")

    def set_pointer(self, value: int) -> None:
        self.buf[4:8] = value.to_bytes(4, "big")

    def check_len(self) -> None:
        """Raise ``WireError`` unless the message is as long as its type needs."""
        super().check_len()
        _check_min_len(self.buf[0], len(self.buf))

    def payload(self) -> memoryview:
        """The message body after type, code and checksum."""
        return self.buf[HEADER_LEN:]

    def payload_mut(self) -> memoryview:
        return self.payload()

    def verify_checksum(self, src: bytes, dst: bytes) -> bool:
        return _ck.segment_checksum_ok(self.buf, src, dst, PROTOCOL)

    def fill_checksum(self, src: bytes, dst: bytes) -> None:
        pseudo = _ck.pseudo_header_words(src, dst, PROTOCOL, len(self.buf))
        self._fill_checksum(2, len(self.buf), pseudo)


def _check_min_len(kind: int, present: int) -> None:
    need = _MIN_LEN.get(kind, HEADER_LEN)
    if present < need:
        raise truncated(f"ICMPv6 type {kind}", need, present)


class Repr(NamedTuple):
    """An ICMPv6 message (see the module docstring for which fields each type uses)."""

    type: int
    code: int
    ident: int = 0
    seq: int = 0
    data: Buffer = b""
    mtu: int = 0
    quoted: Buffer = b""
    pointer: int = 0
    cur_hop_limit: int = 0
    flags: int = 0
    router_lifetime: int = 0
    reachable_time: int = 0
    retrans_timer: int = 0
    target: bytes = b""
    options: tuple[NdpOption, ...] = ()
    records: tuple[McastRecord, ...] = ()
    checksum: int = 0
    checksum_ok: bool | None = None

    # --- named constructors ---

    @classmethod
    def echo_request(cls, ident: int, seq: int, data: Buffer = b"") -> Repr:
        return cls(ECHO_REQUEST, 0, ident, seq, data)

    @classmethod
    def echo_reply(cls, ident: int, seq: int, data: Buffer = b"") -> Repr:
        return cls(ECHO_REPLY, 0, ident, seq, data)

    @classmethod
    def dest_unreachable(cls, code: int, quoted: Buffer) -> Repr:
        return cls(DEST_UNREACHABLE, code, quoted=quoted)

    @classmethod
    def packet_too_big(cls, mtu: int, quoted: Buffer) -> Repr:
        return cls(PACKET_TOO_BIG, 0, mtu=mtu, quoted=quoted)

    @classmethod
    def time_exceeded(cls, code: int, quoted: Buffer) -> Repr:
        return cls(TIME_EXCEEDED, code, quoted=quoted)

    @classmethod
    def parameter_problem(cls, code: int, pointer: int, quoted: Buffer) -> Repr:
        return cls(PARAMETER_PROBLEM, code, pointer=pointer, quoted=quoted)

    @classmethod
    def router_solicit(cls, options: tuple[NdpOption, ...] = ()) -> Repr:
        return cls(ROUTER_SOLICIT, 0, options=options)

    @classmethod
    def router_advert(
        cls,
        cur_hop_limit: int,
        flags: int,
        router_lifetime: int,
        reachable_time: int = 0,
        retrans_timer: int = 0,
        options: tuple[NdpOption, ...] = (),
    ) -> Repr:
        return cls(ROUTER_ADVERT, 0, cur_hop_limit=cur_hop_limit, flags=flags,
                   router_lifetime=router_lifetime, reachable_time=reachable_time,
                   retrans_timer=retrans_timer, options=options)

    @classmethod
    def neighbor_solicit(cls, target: bytes, options: tuple[NdpOption, ...] = ()) -> Repr:
        return cls(NEIGHBOR_SOLICIT, 0, target=target, options=options)

    @classmethod
    def neighbor_advert(
        cls,
        target: bytes,
        *,
        router: bool = False,
        solicited: bool = False,
        override: bool = False,
        options: tuple[NdpOption, ...] = (),
    ) -> Repr:
        flags = NA_ROUTER * router | NA_SOLICITED * solicited | NA_OVERRIDE * override
        return cls(NEIGHBOR_ADVERT, 0, flags=flags, target=target, options=options)

    @classmethod
    def mldv2_report(cls, records: tuple[McastRecord, ...]) -> Repr:
        return cls(MLDV2_REPORT, 0, records=records)

    # --- accessors ---

    @property
    def is_error(self) -> bool:
        return self.type in ERROR_TYPES

    @property
    def router(self) -> bool:
        """NA R flag."""
        return self.type == NEIGHBOR_ADVERT and bool(self.flags & NA_ROUTER)

    @property
    def solicited(self) -> bool:
        """NA S flag."""
        return self.type == NEIGHBOR_ADVERT and bool(self.flags & NA_SOLICITED)

    @property
    def override(self) -> bool:
        """NA O flag."""
        return self.type == NEIGHBOR_ADVERT and bool(self.flags & NA_OVERRIDE)

    def quoted_flow(self) -> QuotedFlow:
        """The flow this error is about (see ``parse_quoted``)."""
        if not self.is_error:
            raise WireError("bad-field", f"ICMPv6 type {self.type} quotes no packet")
        return parse_quoted(self.quoted)

    def option(self, kind: builtins.type[NdpOption]) -> NdpOption | None:
        """The first option of class ``kind`` (e.g. ``SourceLinkAddr``), or None."""
        for option in self.options:
            if isinstance(option, kind):
                return option
        return None

    # --- codec ---

    @classmethod
    def parse(
        cls,
        buf: Buffer,
        src: bytes | None = None,
        dst: bytes | None = None,
        *,
        verify: bool = False,
    ) -> Repr:
        """Parse a whole message (the upper-layer payload of its IPv6 packet); with the
        IPv6 ``src``/``dst`` the checksum is checked."""
        view = memoryview(buf)
        n = len(view)
        if n < HEADER_LEN:
            raise truncated("ICMPv6", HEADER_LEN, n)
        kind, code, csum = _TYPE_CODE_CSUM.unpack_from(view)
        _check_min_len(kind, n)
        checksum_ok: bool | None = None
        if src is not None and dst is not None:
            _check_addresses(src, dst)
            checksum_ok = _ck.segment_checksum_ok(view, src, dst, PROTOCOL)
            if verify and not checksum_ok:
                raise WireError("bad-checksum", f"ICMPv6 checksum {csum:#06x}")
        tail = (csum, checksum_ok)
        if kind in (ECHO_REQUEST, ECHO_REPLY):
            ident, seq = _HH.unpack_from(view, 4)
            return cls(kind, code, ident, seq, view[8:], checksum=csum, checksum_ok=checksum_ok)
        if kind in ERROR_TYPES:
            word = _U32.unpack_from(view, 4)[0]
            mtu = word if kind == PACKET_TOO_BIG else 0
            pointer = word if kind == PARAMETER_PROBLEM else 0
            return cls(kind, code, mtu=mtu, quoted=view[8:], pointer=pointer,
                       checksum=csum, checksum_ok=checksum_ok)
        if kind == ROUTER_SOLICIT:
            return cls(kind, code, options=parse_ndp_options(view, 8, n),
                       checksum=csum, checksum_ok=checksum_ok)
        if kind == ROUTER_ADVERT:
            hop_limit, flags, lifetime, reachable, retrans = _RA.unpack_from(view, 4)
            return cls(kind, code, 0, 0, b"", 0, b"", 0, hop_limit, flags, lifetime, reachable,
                       retrans, b"", parse_ndp_options(view, 16, n), (), *tail)
        if kind in (NEIGHBOR_SOLICIT, NEIGHBOR_ADVERT):
            flags = view[4] if kind == NEIGHBOR_ADVERT else 0
            return cls(kind, code, flags=flags, target=bytes(view[8:24]),
                       options=parse_ndp_options(view, 24, n), checksum=csum,
                       checksum_ok=checksum_ok)
        if kind == MLDV2_REPORT:
            count = _HH.unpack_from(view, 4)[1]
            return cls(kind, code, records=_parse_records(view, 8, n, count),
                       checksum=csum, checksum_ok=checksum_ok)
        return cls(kind, code, data=view[4:], checksum=csum, checksum_ok=checksum_ok)

    def _body(self) -> bytes:
        """Everything after type, code and checksum; refuses fields the type drops."""
        kind = self.type
        used = FIELDS_BY_TYPE.get(kind, _OTHER_FIELDS)
        defaults = Repr._field_defaults
        for name in _PER_TYPE_FIELDS:
            if name not in used and getattr(self, name) != defaults[name]:
                raise WireError("bad-field", f"ICMPv6 type {kind} carries no {name}")
        try:
            if kind in (ECHO_REQUEST, ECHO_REPLY):
                return _HH.pack(self.ident, self.seq) + self.data
            if kind in ERROR_TYPES:
                word = self.mtu if kind == PACKET_TOO_BIG else self.pointer
                return _U32.pack(word) + self.quoted
            if kind == ROUTER_SOLICIT:
                return bytes(4) + emit_ndp_options(self.options)
            if kind == ROUTER_ADVERT:
                return _RA.pack(self.cur_hop_limit, self.flags, self.router_lifetime,
                                self.reachable_time, self.retrans_timer) + emit_ndp_options(
                    self.options)
            if kind in (NEIGHBOR_SOLICIT, NEIGHBOR_ADVERT):
                if len(self.target) != 16:
                    raise WireError("bad-field", "NDP target is a 16-byte address")
                flags = bytes((self.flags, 0, 0, 0))
                return flags + self.target + emit_ndp_options(self.options)
            if kind == MLDV2_REPORT:
                return _emit_records(self.records)
            return bytes(self.data)
        except (struct.error, ValueError, TypeError) as err:
            if isinstance(err, WireError):
                raise
            raise WireError("bad-field", str(err)) from None

    def buffer_len(self) -> int:
        return HEADER_LEN + len(self._body())

    @overload
    def build(
        self,
        buf: None = None,
        offset: int = 0,
        *,
        src: bytes | None = None,
        dst: bytes | None = None,
        checksum: bool = True,
    ) -> bytes: ...

    @overload
    def build(
        self,
        buf: WritableBuffer,
        offset: int = 0,
        *,
        src: bytes | None = None,
        dst: bytes | None = None,
        checksum: bool = True,
    ) -> int: ...

    def build(
        self,
        buf: WritableBuffer | None = None,
        offset: int = 0,
        *,
        src: bytes | None = None,
        dst: bytes | None = None,
        checksum: bool = True,
    ) -> bytes | int:
        """Emit the message; the checksum needs the IPv6 ``src``/``dst``."""
        if not (0 <= self.type <= 255 and 0 <= self.code <= 255):
            raise WireError("bad-field", f"ICMPv6 type {self.type} code {self.code}")
        body = self._body()
        length = HEADER_LEN + len(body)
        csum = 0
        if checksum and src is not None and dst is not None:
            _check_addresses(src, dst)
            pseudo = _ck.pseudo_header_words(src, dst, PROTOCOL, length)
            csum = _ck.internet_checksum(body, pseudo + (self.type << 8 | self.code))
        header = _TYPE_CODE_CSUM.pack(self.type, self.code, csum)
        if buf is None:
            return header + body
        return write_into(buf, offset, header + body)


_PER_TYPE_FIELDS = tuple(f for f in Repr._fields if f not in ("type", "code", "checksum",
                                                              "checksum_ok"))


def _check_addresses(src: bytes, dst: bytes) -> None:
    if len(src) != 16 or len(dst) != 16:
        raise WireError("bad-address", "the ICMPv6 pseudo-header needs 16-byte addresses")
