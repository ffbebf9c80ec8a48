"""ARP (RFC 826) for Ethernet hardware and IPv4 protocol addresses only.

Any other hardware/protocol pairing, address length or operation is rejected as
``WireError("unsupported")``.  Bytes after the 28-byte message (Ethernet padding) are
ignored.
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

HARDWARE_ETHERNET = 1
PROTOCOL_IPV4 = 0x0800
REQUEST = 1
REPLY = 2
OPERATIONS = (REQUEST, REPLY)

HEADER_LEN = 28
_MESSAGE = struct.Struct("!HHBBH6s4s6s4s")
#: The fixed prefix every Ethernet/IPv4 ARP message starts with, as one integer:
#: htype(16) ptype(16) hlen(8) plen(8).
_ETHERNET_IPV4 = HARDWARE_ETHERNET << 32 | PROTOCOL_IPV4 << 16 | 6 << 8 | 4


class Packet(View):
    """Zero-copy view of an Ethernet/IPv4 ARP message."""

    __slots__ = ()
    what = "ARP"
    min_len = HEADER_LEN

    @property
    def hardware_type(self) -> int:
        return int.from_bytes(self.buf[0:2], "big")

    @property
    def protocol_type(self) -> int:
        return int.from_bytes(self.buf[2:4], "big")

    @property
    def hardware_len(self) -> int:
        return self.buf[4]

    @property
    def protocol_len(self) -> int:
        return self.buf[5]

    @property
    def operation(self) -> int:
        return int.from_bytes(self.buf[6:8], "big")

    @property
    def sender_mac(self) -> bytes:
        return bytes(self.buf[8:14])

    @property
    def sender_ip(self) -> bytes:
        return bytes(self.buf[14:18])

    @property
    def target_mac(self) -> bytes:
        return bytes(self.buf[18:24])

    @property
    def target_ip(self) -> bytes:
        return bytes(self.buf[24:28])

    def set_operation(self, value: int) -> None:
        self.buf[6:8] = value.to_bytes(2, "big")

    def set_sender_mac(self, value: bytes) -> None:
        self.buf[8:14] = value

    def set_sender_ip(self, value: bytes) -> None:
        self.buf[14:18] = value

    def set_target_mac(self, value: bytes) -> None:
        self.buf[18:24] = value

    def set_target_ip(self, value: bytes) -> None:
        self.buf[24:28] = value

    def check_len(self) -> None:
        """Raise ``WireError`` unless the message is complete and Ethernet/IPv4."""
        super().check_len()
        _check_kind(int.from_bytes(self.buf[0:6], "big"))


def _check_kind(prefix: int) -> None:
    """``prefix`` is the first 6 bytes (htype, ptype, hlen, plen) as one integer."""
    if prefix != _ETHERNET_IPV4:
        htype, ptype = prefix >> 32, prefix >> 16 & 0xFFFF
        hlen, plen = prefix >> 8 & 0xFF, prefix & 0xFF
        raise WireError(
            "unsupported",
            f"ARP hardware {htype}/{hlen} bytes, protocol {ptype:#06x}/{plen} bytes "
            "(only Ethernet/IPv4)",
        )


class Repr(NamedTuple):
    """An Ethernet/IPv4 ARP request (operation 1) or reply (operation 2)."""

    operation: int
    sender_mac: bytes
    sender_ip: bytes
    target_mac: bytes
    target_ip: bytes

    @classmethod
    def parse(cls, buf: Buffer) -> Repr:
        view = memoryview(buf)
        if len(view) < HEADER_LEN:
            raise truncated("ARP", HEADER_LEN, len(view))
        htype, ptype, hlen, plen, op, sha, spa, tha, tpa = _MESSAGE.unpack_from(view)
        if htype != HARDWARE_ETHERNET or ptype != PROTOCOL_IPV4 or hlen != 6 or plen != 4:
            _check_kind(htype << 32 | ptype << 16 | hlen << 8 | plen)
        if op != REQUEST and op != REPLY:
            raise WireError("unsupported", f"ARP operation {op}")
        return cls(op, sha, spa, tha, tpa)

    @staticmethod
    def buffer_len() -> int:
        return HEADER_LEN

    @overload
    def build(self, buf: None = None, offset: int = 0) -> bytes: ...

    @overload
    def build(self, buf: WritableBuffer, offset: int = 0) -> int: ...

    def build(self, buf: WritableBuffer | None = None, offset: int = 0) -> bytes | int:
        op, sha, spa, tha, tpa = self
        if op not in OPERATIONS:
            raise WireError("unsupported", f"ARP operation {op}")
        if len(sha) != 6 or len(tha) != 6 or len(spa) != 4 or len(tpa) != 4:
            raise WireError("bad-field", "ARP needs 6-byte MACs and 4-byte IPv4 addresses")
        message = _MESSAGE.pack(HARDWARE_ETHERNET, PROTOCOL_IPV4, 6, 4, op, sha, spa, tha, tpa)
        if buf is None:
            return message
        return write_into(buf, offset, message)
