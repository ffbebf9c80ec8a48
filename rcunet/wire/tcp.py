"""TCP segments (RFC 9293) with their options (``tcp_options``).

``Repr.parse`` is the receive fast path: one ``struct`` unpack reads the fixed header and,
for the two layouts that make up nearly all traffic (a data segment's NOP NOP timestamps,
and the SYN/SYN-ACK layout Linux sends), the options with it; anything else goes through
``tcp_options.parse_options``.  ``build`` mirrors it with one ``pack``.

The checksum covers the IPv4 or IPv6 pseudo-header (RFC 9293 §3.1, RFC 8200 §8.1), chosen
by the length of the addresses given.  Sums use the identity ``2**16 == 1 (mod 0xFFFF)``
(see ``checksum``): header, payload and pseudo-header are each summed as one big integer.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, overload

from rcunet.wire import checksum as _ck
from rcunet.wire import tcp_options as _opt
from rcunet.wire._common import Buffer as Buffer  # re-exported: callers annotate with it
from rcunet.wire._common import View, WritableBuffer, new_tuple, truncated, write_into
from rcunet.wire.errors import WireError

PROTOCOL = 6
HEADER_LEN = 20
MAX_HEADER_LEN = 60

FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10
URG = 0x20
ECE = 0x40
CWR = 0x80
#: RFC 3540's NS bit, now AE (accurate ECN): the low bit of byte 12.
AE = 0x100
FLAGS_MASK = 0x1FF
#: RFC 9768's ACE field: AE, CWR and ECE read as one 3-bit number (AE the high bit).
ACE = AE | CWR | ECE
_ACE_SHIFT = 6


def ace(flags: int) -> int:
    """The ACE field of ``flags`` (0-7): Linux tcp_accecn_ace, (AE << 2) | (CWR << 1) | ECE."""
    return (flags & ACE) >> _ACE_SHIFT


def with_ace(flags: int, value: int) -> int:
    """``flags`` with its AE, CWR and ECE bits set to the 3-bit ACE ``value``."""
    if not 0 <= value <= 7:
        raise WireError("bad-field", f"ACE value {value} beyond 3 bits")
    return (flags & ~ACE) | value << _ACE_SHIFT


_FIXED = struct.Struct("!HHIIBBHHH")
# Fixed header followed by the NOP NOP TS word and TSval, TSecr (data offset 8).
_FIXED_TS = struct.Struct("!HHIIBBHHHIII")
# Linux's SYN/SYN-ACK with every option: MSS, SACKPERM+TS, TSval, TSecr, NOP WS (offset 10).
_FIXED_SYN = struct.Struct("!HHIIBBHHHIIIII")

_WORD_TS = _opt.WORD_NOP_NOP_TS
_WORD_SACKPERM_TS = _opt.WORD_SACKPERM_TS
_MSS_HIGH = _opt.MSS << 24 | 4 << 16
_WS_HIGH = _opt.WORD_NOP_WS << 8
_NO_OPTIONS: _opt.Options = (None, None, False, (), None, ())
# Module-level aliases: one global load on the fast paths, not a global and an attribute.
_new = new_tuple
_pseudo_words = _ck.pseudo_header_words


class Packet(View):
    """Zero-copy view of a TCP segment (the whole IP payload)."""

    __slots__ = ()
    what = "TCP header"
    min_len = HEADER_LEN

    @property
    def src_port(self) -> int:
        return int.from_bytes(self.buf[0:2], "big")

    @property
    def dst_port(self) -> int:
        return int.from_bytes(self.buf[2:4], "big")

    @property
    def seq(self) -> int:
        return int.from_bytes(self.buf[4:8], "big")

    @property
    def ack(self) -> int:
        return int.from_bytes(self.buf[8:12], "big")

    @property
    def window(self) -> int:
        return int.from_bytes(self.buf[14:16], "big")

    @property
    def checksum(self) -> int:
        return int.from_bytes(self.buf[16:18], "big")

    @property
    def urgent(self) -> int:
        return int.from_bytes(self.buf[18:20], "big")

    def set_src_port(self, value: int) -> None:
        self.buf[0:2] = value.to_bytes(2, "big")

    def set_dst_port(self, value: int) -> None:
        self.buf[2:4] = value.to_bytes(2, "big")

    def set_seq(self, value: int) -> None:
        self.buf[4:8] = value.to_bytes(4, "big")

    def set_ack(self, value: int) -> None:
        self.buf[8:12] = value.to_bytes(4, "big")

    def set_window(self, value: int) -> None:
        self.buf[14:16] = value.to_bytes(2, "big")

    def set_checksum(self, value: int) -> None:
        self.buf[16:18] = value.to_bytes(2, "big")

    def set_urgent(self, value: int) -> None:
        self.buf[18:20] = value.to_bytes(2, "big")

    def check_len(self) -> None:
        super().check_len()
        header_len = self.header_len
        if header_len < HEADER_LEN:
            raise WireError("bad-data-offset", f"TCP data offset {header_len // 4} < 5")
        if header_len > len(self.buf):
            raise truncated(f"TCP header with data offset {header_len // 4}", header_len,
                            len(self.buf))

    @property
    def header_len(self) -> int:
        return (self.buf[12] >> 4) * 4

    @property
    def flags(self) -> int:
        return (self.buf[12] & 1) << 8 | self.buf[13]

    def set_header_len(self, value: int) -> None:
        self.buf[12] = (value // 4) << 4 | (self.buf[12] & 0x0F)

    def set_flags(self, value: int) -> None:
        self.buf[12] = (self.buf[12] & 0xFE) | (value >> 8 & 1)
        self.buf[13] = value & 0xFF

    def options(self) -> memoryview:
        return self.buf[HEADER_LEN : self.header_len]

    def payload(self) -> memoryview:
        return self.buf[self.header_len :]

    def payload_mut(self) -> memoryview:
        return self.payload()

    def verify_checksum(self, src: bytes, dst: bytes) -> bool:
        return _ck.segment_checksum_ok(self.buf, src, dst, PROTOCOL)


class Repr(NamedTuple):
    """A TCP segment.  ``window`` is the raw 16-bit field (unscaled); ``timestamp`` is
    (TSval, TSecr); ``unknown_options`` are (kind, data) pairs kept verbatim.
    ``checksum``/``checksum_ok`` come from parse."""

    src_port: int
    dst_port: int
    seq: int
    ack: int
    flags: int
    window: int
    payload: Buffer = b""
    urgent: int = 0
    mss: int | None = None
    window_scale: int | None = None
    sack_permitted: bool = False
    sack_blocks: tuple[tuple[int, int], ...] = ()
    timestamp: tuple[int, int] | None = None
    unknown_options: tuple[tuple[int, bytes], ...] = ()
    checksum: int = 0
    checksum_ok: bool | None = None
    #: The IP ECN field (``rcunet.wire.ecn``) the segment travels with: not part of the
    #: TCP header, but the engine reads and sets it as Linux's TCP reads and sets the
    #: skb's (INET_ECN_*); parse leaves it 0, the host's input fills it in.
    ecn: int = 0

    @classmethod
    def parse(
        cls,
        buf: Buffer,
        src: bytes | None = None,
        dst: bytes | None = None,
        *,
        verify: bool = False,
    ) -> Repr:
        """Parse a segment (the whole IP payload).  With the IP ``src``/``dst`` the
        checksum is checked (``checksum_ok``; ``verify=True`` raises on a bad one)."""
        n = len(buf)
        if n < HEADER_LEN:
            raise truncated("TCP header", HEADER_LEN, n)
        off = buf[12]
        header_len = (off >> 2) & 0x3C
        if header_len == 32 and n >= 32:
            (sp, dp, seq, ack, off, fl, win, csum, urg, word, tsval, tsecr) = (
                _FIXED_TS.unpack_from(buf)
            )
            if word == _WORD_TS:
                if src is None:  # the common receive fast path: one unpack, one tuple
                    return _new(cls, (sp, dp, seq, ack, (off & 1) << 8 | fl, win,
                                      memoryview(buf)[32:], urg, None, None, False, (),
                                      (tsval, tsecr), (), csum, None, 0))
                options: _opt.Options = (None, None, False, (), (tsval, tsecr), ())
            else:
                options = _opt.parse_options(buf, HEADER_LEN, 32)
        elif header_len == 40 and n >= 40:
            (sp, dp, seq, ack, off, fl, win, csum, urg, w0, w1, tsval, tsecr, w4) = (
                _FIXED_SYN.unpack_from(buf)
            )
            if w0 >> 16 == 0x0204 and w1 == _WORD_SACKPERM_TS and w4 >> 8 == 0x010303:
                options = (w0 & 0xFFFF, w4 & 0xFF, True, (), (tsval, tsecr), ())
            else:
                options = _opt.parse_options(buf, HEADER_LEN, 40)
        else:
            sp, dp, seq, ack, off, fl, win, csum, urg = _FIXED.unpack_from(buf)
            if header_len == HEADER_LEN:
                options = _NO_OPTIONS
            elif header_len < HEADER_LEN:
                raise WireError("bad-data-offset", f"TCP data offset {header_len // 4} < 5")
            elif header_len > n:
                raise truncated(f"TCP header with data offset {header_len // 4}", header_len, n)
            else:
                options = _opt.parse_options(buf, HEADER_LEN, header_len)
        checksum_ok: bool | None = None
        if src is not None and dst is not None:
            total = int.from_bytes(buf, "big") << (8 * (n & 1))
            checksum_ok = (total + _pseudo_words(src, dst, PROTOCOL, n)) % 0xFFFF == 0
            if verify and not checksum_ok:
                raise WireError("bad-checksum", f"TCP checksum {csum:#06x}")
        mss, ws, sack_ok, sacks, ts, unknown = options
        return _new(cls, (sp, dp, seq, ack, (off & 1) << 8 | fl, win,
                          memoryview(buf)[header_len:], urg, mss, ws, sack_ok, sacks, ts,
                          unknown, csum, checksum_ok, 0))

    def options_bytes(self) -> bytes:
        """The encoded options (Linux's order, padded to a multiple of 4)."""
        return _opt.build_options(
            self.mss,
            self.window_scale,
            self.sack_permitted,
            self.sack_blocks,
            self.timestamp,
            self.unknown_options,
        )

    def buffer_len(self) -> int:
        return HEADER_LEN + len(self.options_bytes()) + len(self.payload)

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
        """Emit the segment.  The checksum needs ``src``/``dst`` (4 or 16 bytes each);
        with ``checksum=False`` (offload) or no addresses the field is written as zero."""
        header = self.build_header(src=src, dst=dst, checksum=checksum)
        if buf is None:
            return header + self.payload
        return write_into(buf, offset, header + self.payload)

    def build_header(
        self,
        *,
        src: bytes | None = None,
        dst: bytes | None = None,
        checksum: bool = True,
    ) -> bytes:
        """The header with its options alone, for a caller that gathers header and
        payload into one buffer itself (``build`` is this plus the payload).  The
        checksum, as in ``build``, covers the payload."""
        (sp, dp, seq, ack, flags, win, payload, urg, mss, ws, sack_ok, sacks, ts, unknown,
         _, _, _) = self
        if flags & ~FLAGS_MASK:
            raise WireError("bad-flags", f"TCP flags {flags:#x} beyond 9 bits")
        ae = flags >> 8
        options = b""
        extra: tuple[int, ...] = ()
        # The header's word sum is computed from the field values: a 32-bit field x sums
        # to x's residue like its two 16-bit words do, since 2**16 == 1 (mod 0xFFFF).
        if not (sacks or unknown) and mss is None and ws is None and not sack_ok:
            if ts is None:
                layout, off, extra_sum = _FIXED, 0x50 | ae, 0
            else:
                layout, off = _FIXED_TS, 0x80 | ae
                extra = (_WORD_TS, ts[0], ts[1])
                extra_sum = _WORD_TS + ts[0] + ts[1]
        elif mss is not None and ws is not None and sack_ok and ts is not None and not (
            sacks or unknown
        ):
            layout, off = _FIXED_SYN, 0xA0 | ae
            if mss >> 16 or ws >> 8:  # would spill into the kind/length bytes
                raise WireError("bad-field", f"TCP MSS {mss} / window scale {ws} out of range")
            extra = (_MSS_HIGH | mss, _WORD_SACKPERM_TS, ts[0], ts[1], _WS_HIGH | ws)
            extra_sum = _MSS_HIGH + mss + _WORD_SACKPERM_TS + ts[0] + ts[1] + _WS_HIGH + ws
        else:
            options = _opt.build_options(mss, ws, sack_ok, sacks, ts, unknown)
            layout, off = _FIXED, (HEADER_LEN + len(options)) << 2 | ae
            extra_sum = int.from_bytes(options, "big")
        header_len = (off >> 4) << 2
        length = header_len + len(payload)
        csum = 0
        if checksum and src is not None and dst is not None:
            total = (sp + dp + seq + ack + (off << 8 | flags & 0xFF) + win + urg + extra_sum
                     + _pseudo_words(src, dst, PROTOCOL, length))
            if len(payload):
                value = int.from_bytes(payload, "big")
                total += value << 8 if len(payload) & 1 else value
            csum = ~(total % 0xFFFF or 0xFFFF) & 0xFFFF
        try:
            header = layout.pack(sp, dp, seq, ack, off, flags & 0xFF, win, csum, urg, *extra)
        except struct.error as err:
            raise WireError("bad-field", f"TCP field out of range: {err}") from None
        return header + options if options else header
