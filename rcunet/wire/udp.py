"""UDP (RFC 768)."""

from __future__ import annotations

import struct
from typing import NamedTuple, overload

from rcunet.wire import checksum as _ck
from rcunet.wire._common import Buffer as Buffer  # re-exported: callers annotate with it
from rcunet.wire._common import View, WritableBuffer, truncated, write_into
from rcunet.wire.errors import WireError

HEADER_LEN = 8
PROTOCOL = 17
_HEADER = struct.Struct("!HHHH")


class Packet(View):
    """Zero-copy view of a UDP datagram."""

    __slots__ = ()
    what = "UDP"
    min_len = HEADER_LEN

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

    def check_len(self) -> None:
        super().check_len()
        _check_length(self.length, len(self.buf))

    def payload(self) -> memoryview:
        return self.buf[HEADER_LEN : self.length]

    def payload_mut(self) -> memoryview:
        return self.payload()

    def verify_checksum(self, src: bytes, dst: bytes) -> bool:
        """True when the checksum is right (or absent, which IPv4 allows)."""
        if self.checksum == 0 and len(src) == 4:
            return True
        return _ck.segment_checksum_ok(self.buf[: self.length], src, dst, PROTOCOL)


def _check_length(length: int, present: int) -> None:
    if length < HEADER_LEN:
        raise WireError("bad-length", f"UDP length {length} < {HEADER_LEN}")
    if length > present:
        raise truncated("UDP datagram", length, present)


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
            raise truncated("UDP header", HEADER_LEN, len(view))
        src_port, dst_port, length, csum = _HEADER.unpack_from(view)
        if length < HEADER_LEN or length > len(view):
            _check_length(length, len(view))
        checksum_ok: bool | None = None
        if src is not None and dst is not None:
            if csum == 0:
                # RFC 768: zero means "no checksum" over IPv4; RFC 8200 §8.1 forbids it in IPv6.
                checksum_ok = len(src) == 4
            else:
                checksum_ok = _ck.segment_checksum_ok(view[:length], src, dst, PROTOCOL)
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
        """Emit the datagram.  The checksum needs ``src``/``dst``; with
        ``checksum=False`` (offload) or no addresses the field is written as zero."""
        src_port, dst_port, payload, _, _ = self
        length = HEADER_LEN + len(payload)
        if length > 0xFFFF:
            raise WireError("too-long", f"UDP datagram of {length} bytes")
        csum = 0
        if checksum and src is not None and dst is not None:
            # The header's words summed from the field values (the length counts twice:
            # header and pseudo-header), then the payload as one integer (see ``checksum``).
            total = src_port + dst_port + length + _ck.pseudo_header_words(
                src, dst, PROTOCOL, length)
            if length > HEADER_LEN:
                value = int.from_bytes(payload, "big")
                total += value << 8 if length & 1 else value
            # RFC 768: a computed zero is sent as all ones.
            csum = _ck.finish(_ck.fold(total)) or 0xFFFF
        try:
            header = _HEADER.pack(src_port, dst_port, length, csum)
        except struct.error as exc:  # a port out of 0..65535
            raise WireError("bad-field", f"UDP port out of range: {exc}") from None
        if buf is None:
            return header + payload
        return write_into(buf, offset, header + payload)
