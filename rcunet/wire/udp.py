"""UDP (RFC 768)."""

from __future__ import annotations

import struct
from typing import NamedTuple, overload

from rcunet.wire import checksum as _ck
from rcunet.wire.errors import WireError

Buffer = bytes | bytearray | memoryview

HEADER_LEN = 8
PROTOCOL = 17
_HEADER = struct.Struct("!HHHH")


class Packet:
    """Zero-copy view of a UDP datagram."""

    __slots__ = ("buf",)

    def __init__(self, buf: Buffer) -> None:
        self.buf = memoryview(buf)

    @classmethod
    def unchecked(cls, buf: Buffer) -> Packet:
        return cls(buf)

    @classmethod
    def checked(cls, buf: Buffer) -> Packet:
        packet = cls(buf)
        packet.check_len()
        return packet

    def check_len(self) -> None:
        if len(self.buf) < HEADER_LEN:
            raise WireError("truncated", f"UDP needs {HEADER_LEN} bytes, got {len(self.buf)}")
        length = self.length
        if length < HEADER_LEN:
            raise WireError("bad-length", f"UDP length {length} < {HEADER_LEN}")
        if length > len(self.buf):
            raise WireError("truncated", f"UDP length {length} > {len(self.buf)} bytes present")

    @property
    def src_port(self) -> int:
        return int.from_bytes(self.buf[0:2], "big")

    @property
    def dst_port(self) -> int:
        return int.from_bytes(self.buf[2:4], "big")

    @property
    def length(self) -> int:
        return int.from_bytes(self.buf[4:6], "big")

    @property
    def checksum(self) -> int:
        return int.from_bytes(self.buf[6:8], "big")

    def set_src_port(self, value: int) -> None:
        self.buf[0:2] = value.to_bytes(2, "big")

    def set_dst_port(self, value: int) -> None:
        self.buf[2:4] = value.to_bytes(2, "big")

    def set_length(self, value: int) -> None:
        self.buf[4:6] = value.to_bytes(2, "big")

    def set_checksum(self, value: int) -> None:
        self.buf[6:8] = value.to_bytes(2, "big")

    def payload(self) -> memoryview:
        return self.buf[HEADER_LEN : self.length]

    def payload_mut(self) -> memoryview:
        return self.buf[HEADER_LEN : self.length]

    def verify_checksum(self, src: bytes, dst: bytes) -> bool:
        """True when the checksum is right (or absent, which IPv4 allows)."""
        if self.checksum == 0 and len(src) == 4:
            return True
        datagram = self.buf[: self.length]
        return _ck.is_valid(datagram, _ck.pseudo_header_sum(src, dst, PROTOCOL, len(datagram)))


class Repr(NamedTuple):
    """A UDP datagram: ports and payload.  ``checksum``/``checksum_ok`` come from parse."""

    src_port: int
    dst_port: int
    payload: Buffer = b""
    checksum: int = 0
    checksum_ok: bool | None = None

    @classmethod
    def parse(
        cls,
        buf: Buffer,
        src: bytes | None = None,
        dst: bytes | None = None,
        *,
        verify: bool = False,
    ) -> Repr:
        """Parse a datagram; with the IP ``src``/``dst`` the checksum is checked.

        Bytes past the UDP length field (link padding) are ignored.
        """
        view = memoryview(buf)
        if len(view) < HEADER_LEN:
            raise WireError("truncated", f"UDP header needs {HEADER_LEN} bytes, got {len(view)}")
        src_port, dst_port, length, csum = _HEADER.unpack_from(view)
        if length < HEADER_LEN:
            raise WireError("bad-length", f"UDP length {length} < {HEADER_LEN}")
        if length > len(view):
            raise WireError("truncated", f"UDP length {length} > {len(view)} bytes present")
        checksum_ok: bool | None = None
        if src is not None and dst is not None:
            if csum == 0:
                # RFC 768: zero means "no checksum" over IPv4; RFC 8200 §8.1 forbids it in IPv6.
                checksum_ok = len(src) == 4
            else:
                pseudo = _ck.pseudo_header_sum(src, dst, PROTOCOL, length)
                checksum_ok = _ck.is_valid(view[:length], pseudo)
            if verify and not checksum_ok:
                raise WireError("bad-checksum", f"UDP checksum {csum:#06x}")
        return cls(src_port, dst_port, view[HEADER_LEN:length], csum, checksum_ok)

    def buffer_len(self) -> int:
        return HEADER_LEN + len(self.payload)

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
        buf: bytearray | memoryview,
        offset: int = 0,
        *,
        src: bytes | None = None,
        dst: bytes | None = None,
        checksum: bool = True,
    ) -> int: ...

    def build(
        self,
        buf: bytearray | memoryview | None = None,
        offset: int = 0,
        *,
        src: bytes | None = None,
        dst: bytes | None = None,
        checksum: bool = True,
    ) -> bytes | int:
        """Emit the datagram.  The checksum needs ``src``/``dst``; with
        ``checksum=False`` (offload) or no addresses the field is written as zero."""
        length = HEADER_LEN + len(self.payload)
        if length > 0xFFFF:
            raise WireError("too-long", f"UDP datagram of {length} bytes")
        out = bytearray(length) if buf is None else buf
        end = offset + length
        if len(out) < end:
            raise WireError("buffer-too-small", f"need {end} bytes, have {len(out)}")
        if offset < 0:
            raise WireError("buffer-too-small", f"negative offset {offset}")
        try:
            _HEADER.pack_into(out, offset, self.src_port, self.dst_port, length, 0)
        except struct.error as exc:  # a port out of 0..65535
            raise WireError("bad-field", f"UDP port out of range: {exc}") from None
        out[offset + HEADER_LEN : end] = self.payload
        if checksum and src is not None and dst is not None:
            pseudo = _ck.pseudo_header_sum(src, dst, PROTOCOL, length)
            value = _ck.internet_checksum(memoryview(out)[offset:end], pseudo)
            # RFC 768: a computed zero is sent as all ones.
            _HEADER_CSUM.pack_into(out, offset + 6, value or 0xFFFF)
        if buf is None:
            return bytes(out)
        return length


_HEADER_CSUM = struct.Struct("!H")
