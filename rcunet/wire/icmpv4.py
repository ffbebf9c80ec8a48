"""ICMP for IPv4 (RFC 792, RFC 1191 for the next-hop MTU): echo, and the errors the
stack sends and acts on (destination unreachable, time exceeded, parameter problem).

The checksum covers the whole ICMP message; ``parse`` always checks it
(``checksum_ok``), ``verify=True`` rejects a bad one.  Errors keep the quoted offending
packet as bytes (``quoted``, as much as the sender included); ``parse_quoted`` pulls
the flow out of it.  Other message types are ``WireError("unsupported")``.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, overload

from rcunet.wire import checksum as _ck
from rcunet.wire import ipv4
from rcunet.wire._common import Buffer as Buffer  # re-exported: callers annotate with it
from rcunet.wire._common import (
    IcmpView,
    WritableBuffer,
    truncated,
    write_into,
)
from rcunet.wire.errors import WireError

HEADER_LEN = 8

# Message types.
ECHO_REPLY = 0
DEST_UNREACHABLE = 3
ECHO_REQUEST = 8
TIME_EXCEEDED = 11
PARAMETER_PROBLEM = 12
ECHO_TYPES = (ECHO_REPLY, ECHO_REQUEST)
ERROR_TYPES = (DEST_UNREACHABLE, TIME_EXCEEDED, PARAMETER_PROBLEM)

# Destination-unreachable codes (RFC 792, RFC 1122 §3.2.2.1, RFC 1812 §5.2.7.1).
NET_UNREACHABLE = 0
HOST_UNREACHABLE = 1
PROTOCOL_UNREACHABLE = 2
PORT_UNREACHABLE = 3
FRAG_NEEDED = 4
SOURCE_ROUTE_FAILED = 5
NET_UNKNOWN = 6
HOST_UNKNOWN = 7
HOST_ISOLATED = 8
NET_PROHIBITED = 9
HOST_PROHIBITED = 10
NET_TOS_UNREACHABLE = 11
HOST_TOS_UNREACHABLE = 12
ADMIN_PROHIBITED = 13
HOST_PRECEDENCE_VIOLATION = 14
PRECEDENCE_CUTOFF = 15

# Time-exceeded codes.
TTL_EXCEEDED = 0
REASSEMBLY_TIME_EXCEEDED = 1

#: Quoted protocols whose first four transport bytes are the source and destination ports.
PORT_PROTOCOLS = frozenset({
    ipv4.PROTO_TCP,
    ipv4.PROTO_UDP,
    33,  # DCCP
    132,  # SCTP
    136,  # UDP-Lite
})
#: How much of the quoted transport header RFC 792 promises: enough for ports and TCP seq.
QUOTED_TRANSPORT_LEN = 8

_HEADER = struct.Struct("!BBHHH")
_QUOTED_IP = struct.Struct("!BBHHHBBH4s4s")


class Packet(IcmpView):
    """Zero-copy view of an ICMPv4 message."""

    __slots__ = ()
    what = "ICMP"
    min_len = HEADER_LEN

    @property
    def next_mtu(self) -> int:
        """Next-hop MTU of a fragmentation-needed error (RFC 1191)."""
        return int.from_bytes(self.buf[6:8], "big")

    @property
    def pointer(self) -> int:
        """Offending octet of a parameter-problem error."""
        return self.buf[4]

    def set_next_mtu(self, value: int) -> None:
        self.buf[6:8] = value.to_bytes(2, "big")

    def set_pointer(self, value: int) -> None:
        self.buf[4] = value

    def verify_checksum(self) -> bool:
        return _ck.is_valid(self.buf)

    def fill_checksum(self) -> None:
        self._fill_checksum(2, len(self.buf))

    def payload(self) -> memoryview:
        """Echo data, or the quoted packet of an error."""
        return self.buf[HEADER_LEN:]

    def payload_mut(self) -> memoryview:
        return self.payload()


class QuotedFlow(NamedTuple):
    """The flow an ICMP error is about, read from the packet it quotes.

    Ports are ``None`` when the quote is too short to hold them, the quoted packet is a
    non-first fragment, or its protocol has no ports.  ``transport_head`` is the quoted
    transport bytes present, at most 8 (TCP's sequence number is in bytes 4..8).
    """

    src: bytes
    dst: bytes
    protocol: int
    src_port: int | None
    dst_port: int | None
    transport_head: bytes = b""


def parse_quoted(quoted: Buffer) -> QuotedFlow:
    """Read the IPv4 header and first transport bytes quoted by an ICMP error.

    The quote is usually cut short (the header plus 8 bytes), so the quoted total
    length may exceed what is present; a header that is not IPv4, has IHL < 5, is
    itself cut, has bad options or a total length shorter than its header is
    ``WireError``.  The quoted header checksum is not checked (it is the sender's copy).
    """
    view = memoryview(quoted)
    present = len(view)
    if present < ipv4.HEADER_LEN:
        raise truncated("quoted IPv4 header", ipv4.HEADER_LEN, present)
    vihl, _, total_len, _, frag, _, protocol, _, src, dst = _QUOTED_IP.unpack_from(view)
    header_len = ipv4.header_len_of(vihl, present)
    ipv4.check_options(view[ipv4.HEADER_LEN : header_len])
    if total_len < header_len:
        raise WireError("bad-length", f"quoted IPv4 total length {total_len} < {header_len}")
    end = min(total_len, present, header_len + QUOTED_TRANSPORT_LEN)
    head = bytes(view[header_len:end])
    first_fragment = frag & ipv4.FRAG_OFFSET_MASK == 0
    if protocol in PORT_PROTOCOLS and first_fragment and len(head) >= 4:
        return QuotedFlow(src, dst, protocol, head[0] << 8 | head[1], head[2] << 8 | head[3], head)
    return QuotedFlow(src, dst, protocol, None, None, head)


class Repr(NamedTuple):
    """An ICMPv4 message.  Which fields mean something depends on ``type``:

    * echo request/reply: ``ident``, ``seq``, ``data``;
    * destination unreachable: ``quoted`` and, for fragmentation needed, ``next_mtu``;
    * time exceeded: ``quoted``;
    * parameter problem: ``pointer``, ``quoted``.

    The others stay at their defaults (``build`` refuses values it would drop).  Use
    the named constructors (``Repr.echo_request(...)``, ``Repr.frag_needed(...)``...).
    """

    type: int
    code: int
    ident: int = 0
    seq: int = 0
    data: Buffer = b""
    next_mtu: int = 0
    quoted: Buffer = b""
    pointer: int = 0
    checksum: int = 0
    checksum_ok: bool | None = None

    @classmethod
    def echo_request(cls, ident: int, seq: int, data: Buffer = b"") -> Repr:
        return cls(ECHO_REQUEST, 0, ident, seq, data)

    @classmethod
    def echo_reply(cls, ident: int, seq: int, data: Buffer = b"") -> Repr:
        return cls(ECHO_REPLY, 0, ident, seq, data)

    @classmethod
    def dest_unreachable(cls, code: int, quoted: Buffer, next_mtu: int = 0) -> Repr:
        return cls(DEST_UNREACHABLE, code, next_mtu=next_mtu, quoted=quoted)

    @classmethod
    def frag_needed(cls, next_mtu: int, quoted: Buffer) -> Repr:
        return cls(DEST_UNREACHABLE, FRAG_NEEDED, next_mtu=next_mtu, quoted=quoted)

    @classmethod
    def time_exceeded(cls, code: int, quoted: Buffer) -> Repr:
        return cls(TIME_EXCEEDED, code, quoted=quoted)

    @classmethod
    def parameter_problem(cls, pointer: int, quoted: Buffer, code: int = 0) -> Repr:
        return cls(PARAMETER_PROBLEM, code, pointer=pointer, quoted=quoted)

    @classmethod
    def parse(cls, buf: Buffer, *, verify: bool = False) -> Repr:
        """Parse a whole ICMP message (the IPv4 payload)."""
        view = memoryview(buf)
        if len(view) < HEADER_LEN:
            raise truncated("ICMP", HEADER_LEN, len(view))
        icmp_type, code, csum, high, low = _HEADER.unpack_from(view)
        if icmp_type not in ECHO_TYPES and icmp_type not in ERROR_TYPES:
            raise WireError("unsupported", f"ICMP type {icmp_type}")
        checksum_ok = _ck.is_valid(view)
        if verify and not checksum_ok:
            raise WireError("bad-checksum", f"ICMP checksum {csum:#06x}")
        body = view[HEADER_LEN:]
        if icmp_type in ECHO_TYPES:
            return cls(icmp_type, code, high, low, body, 0, b"", 0, csum, checksum_ok)
        if icmp_type == DEST_UNREACHABLE:
            return cls(icmp_type, code, 0, 0, b"", low, body, 0, csum, checksum_ok)
        if icmp_type == TIME_EXCEEDED:
            return cls(icmp_type, code, 0, 0, b"", 0, body, 0, csum, checksum_ok)
        return cls(icmp_type, code, 0, 0, b"", 0, body, high >> 8, csum, checksum_ok)

    @property
    def is_error(self) -> bool:
        return self.type in ERROR_TYPES

    def quoted_flow(self) -> QuotedFlow:
        """The flow this error is about (see ``parse_quoted``)."""
        if not self.is_error:
            raise WireError("bad-field", f"ICMP type {self.type} quotes no packet")
        return parse_quoted(self.quoted)

    def buffer_len(self) -> int:
        return HEADER_LEN + len(self.data) + len(self.quoted)

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
        """Emit the message with its checksum (zero with ``checksum=False``)."""
        icmp_type, code, high, low, body = self._header_words()
        if not 0 <= code <= 255:
            raise WireError("bad-field", f"ICMP code {code}")
        csum = 0
        if checksum:
            csum = _ck.internet_checksum(body, (icmp_type << 8 | code) + high + low)
        header = _HEADER.pack(icmp_type, code, csum, high, low)
        if buf is None:
            return b"".join((header, body))
        return write_into(buf, offset, b"".join((header, body)))

    def _header_words(self) -> tuple[int, int, int, int, Buffer]:
        """(type, code, high word, low word, body) for build, refusing fields that the
        message type has no room for (they would be lost silently)."""
        icmp_type, code, ident, seq, data, next_mtu, quoted, pointer, _, _ = self
        if icmp_type in ECHO_TYPES:
            if next_mtu or quoted or pointer:
                raise WireError("bad-field", "echo messages carry no next_mtu/quoted/pointer")
            if not (0 <= ident <= 0xFFFF and 0 <= seq <= 0xFFFF):
                raise WireError("bad-field", f"echo ident {ident} / seq {seq} out of range")
            return icmp_type, code, ident, seq, data
        if icmp_type not in ERROR_TYPES:
            raise WireError("unsupported", f"ICMP type {icmp_type}")
        if ident or seq or data:
            raise WireError("bad-field", "ICMP errors carry no ident/seq/data")
        if icmp_type == DEST_UNREACHABLE:
            if not 0 <= next_mtu <= 0xFFFF or pointer:
                raise WireError("bad-field", f"unreachable with next_mtu {next_mtu}, "
                                f"pointer {pointer}")
            return icmp_type, code, 0, next_mtu, quoted
        if next_mtu:
            raise WireError("bad-field", f"ICMP type {icmp_type} carries no next_mtu")
        if icmp_type == TIME_EXCEEDED:
            if pointer:
                raise WireError("bad-field", "time exceeded carries no pointer")
            return icmp_type, code, 0, 0, quoted
        if not 0 <= pointer <= 255:
            raise WireError("bad-field", f"parameter-problem pointer {pointer}")
        return icmp_type, code, pointer << 8, 0, quoted
