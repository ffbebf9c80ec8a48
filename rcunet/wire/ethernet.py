"""Ethernet II frames (IEEE 802.3 clause 3.2.6), with at most one 802.1Q VLAN tag.

802.3 length-typed frames (type field < 0x0600) and stacked tags (Q-in-Q) are rejected
as ``WireError("unsupported")``: the stack speaks Ethernet II only.  The frame check
sequence is not part of the bytes handled here (NICs and TAP devices strip it).
"""

from __future__ import annotations

import struct
from typing import NamedTuple, overload

from rcunet.wire._common import Buffer as Buffer  # re-exported: callers annotate with it
from rcunet.wire._common import View, WritableBuffer, new_tuple, truncated, write_into
from rcunet.wire.errors import WireError

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_ARP = 0x0806
ETHERTYPE_VLAN = 0x8100
ETHERTYPE_IPV6 = 0x86DD
#: 802.1ad service tag (the outer tag of Q-in-Q); not supported.
ETHERTYPE_QINQ = 0x88A8
#: Smallest value that is an EtherType rather than an 802.3 length.
ETHERTYPE_MIN = 0x0600

HEADER_LEN = 14
VLAN_TAG_LEN = 4
VLAN_HEADER_LEN = HEADER_LEN + VLAN_TAG_LEN
ADDR_LEN = 6
BROADCAST = b"\xff" * ADDR_LEN

_HEADER = struct.Struct("!6s6sH")
_VLAN_HEADER = struct.Struct("!6s6sHHH")
_U16 = struct.Struct("!H")
_TAG_TYPES = (ETHERTYPE_VLAN, ETHERTYPE_QINQ)


def _tci(vlan: int, pcp: int, dei: bool) -> int:
    """The 802.1Q Tag Control Information word: PCP(3) DEI(1) VID(12)."""
    if not 0 <= vlan <= 0xFFF or not 0 <= pcp <= 7:
        raise WireError("bad-field", f"VLAN id {vlan} / priority {pcp} out of range")
    return pcp << 13 | dei << 12 | vlan


def _check_ethertype(ethertype: int) -> None:
    if ethertype < ETHERTYPE_MIN:
        raise WireError("unsupported", f"802.3 length field {ethertype:#06x} (not Ethernet II)")
    if ethertype in _TAG_TYPES:
        raise WireError("unsupported", f"stacked VLAN tag {ethertype:#06x}")


class Packet(View):
    """Zero-copy view of an Ethernet II frame (optionally 802.1Q tagged)."""

    __slots__ = ()
    what = "Ethernet header"
    min_len = HEADER_LEN

    @property
    def dst(self) -> bytes:
        return bytes(self.buf[0:6])

    @property
    def src(self) -> bytes:
        return bytes(self.buf[6:12])

    def set_dst(self, value: bytes) -> None:
        self.buf[0:6] = value

    def set_src(self, value: bytes) -> None:
        self.buf[6:12] = value

    def check_len(self) -> None:
        """Raise ``WireError`` unless the whole header (tag included) is present and
        the type field is one this codec supports."""
        super().check_len()
        if self.is_tagged and len(self.buf) < VLAN_HEADER_LEN:
            raise truncated("802.1Q header", VLAN_HEADER_LEN, len(self.buf))
        _check_ethertype(self.ethertype)

    @property
    def is_tagged(self) -> bool:
        return int.from_bytes(self.buf[12:14], "big") == ETHERTYPE_VLAN

    @property
    def header_len(self) -> int:
        return VLAN_HEADER_LEN if self.is_tagged else HEADER_LEN

    @property
    def ethertype(self) -> int:
        """The type of the payload (after the VLAN tag, if any)."""
        at = 16 if self.is_tagged else 12
        return int.from_bytes(self.buf[at : at + 2], "big")

    @property
    def vlan(self) -> int | None:
        return int.from_bytes(self.buf[14:16], "big") & 0xFFF if self.is_tagged else None

    @property
    def vlan_pcp(self) -> int:
        return self.buf[14] >> 5 if self.is_tagged else 0

    @property
    def vlan_dei(self) -> bool:
        return bool(self.buf[14] & 0x10) if self.is_tagged else False

    def set_ethertype(self, value: int) -> None:
        at = 16 if self.is_tagged else 12
        _U16.pack_into(self.buf, at, value)

    def payload(self) -> memoryview:
        return self.buf[self.header_len :]

    def payload_mut(self) -> memoryview:
        return self.payload()


class Repr(NamedTuple):
    """An Ethernet II frame.  ``vlan`` is the 802.1Q VLAN id, ``None`` when untagged;
    ``vlan_pcp``/``vlan_dei`` are the tag's priority and drop-eligible bits."""

    dst: bytes
    src: bytes
    ethertype: int
    payload: Buffer = b""
    vlan: int | None = None
    vlan_pcp: int = 0
    vlan_dei: bool = False

    @classmethod
    def parse(cls, buf: Buffer) -> Repr:
        """Parse a frame; the payload runs to the end of ``buf`` (any link padding
        stays in it: the network layer knows its own length)."""
        view = memoryview(buf)
        if len(view) < HEADER_LEN:
            raise truncated("Ethernet header", HEADER_LEN, len(view))
        dst, src, ethertype = _HEADER.unpack_from(view)
        if ethertype != ETHERTYPE_VLAN:
            if ethertype < ETHERTYPE_MIN or ethertype == ETHERTYPE_QINQ:
                _check_ethertype(ethertype)
            return new_tuple(cls, (dst, src, ethertype, view[HEADER_LEN:], None, 0, False))
        if len(view) < VLAN_HEADER_LEN:
            raise truncated("802.1Q header", VLAN_HEADER_LEN, len(view))
        _, _, _, tci, ethertype = _VLAN_HEADER.unpack_from(view)
        _check_ethertype(ethertype)
        payload = view[VLAN_HEADER_LEN:]
        return cls(dst, src, ethertype, payload, tci & 0xFFF, tci >> 13, bool(tci & 0x1000))

    def header_len(self) -> int:
        return HEADER_LEN if self.vlan is None else VLAN_HEADER_LEN

    def buffer_len(self) -> int:
        return self.header_len() + len(self.payload)

    @overload
    def build(self, buf: None = None, offset: int = 0) -> bytes: ...

    @overload
    def build(self, buf: WritableBuffer, offset: int = 0) -> int: ...

    def build(self, buf: WritableBuffer | None = None, offset: int = 0) -> bytes | int:
        """Emit the frame (no padding to the 60-byte minimum, no FCS)."""
        header = self.build_header()
        if buf is None:
            return b"".join((header, self.payload))
        return write_into(buf, offset, b"".join((header, self.payload)))

    def build_header(self) -> bytes:
        """The header (with its 802.1Q tag) alone, for a caller that gathers the
        payload behind it itself (``build`` is this plus the payload)."""
        dst, src, ethertype, _payload, vlan, vlan_pcp, vlan_dei = self
        if len(dst) != ADDR_LEN or len(src) != ADDR_LEN:
            raise WireError("bad-field", "MAC addresses must be 6 bytes")
        if not ETHERTYPE_MIN <= ethertype <= 0xFFFF or ethertype in _TAG_TYPES:
            _check_ethertype(ethertype)
            raise WireError("bad-field", f"EtherType {ethertype:#x} out of range")
        if vlan is None:
            if vlan_pcp or vlan_dei:
                raise WireError("bad-field", "VLAN priority/DEI on an untagged frame")
            header = _HEADER.pack(dst, src, ethertype)
        else:
            tci = _tci(vlan, vlan_pcp, vlan_dei)
            header = _VLAN_HEADER.pack(dst, src, ETHERTYPE_VLAN, tci, ethertype)
        return header


def build_untagged_header(dst: bytes, src: bytes, ethertype: int) -> bytes:
    """``Repr(dst, src, ethertype).build_header()`` without building the Repr: the
    header of an untagged frame (what the output path sends once per frame).  Same
    checks, same bytes."""
    if len(dst) != ADDR_LEN or len(src) != ADDR_LEN:
        raise WireError("bad-field", "MAC addresses must be 6 bytes")
    if not ETHERTYPE_MIN <= ethertype <= 0xFFFF or ethertype in _TAG_TYPES:
        return Repr(dst, src, ethertype).build_header()  # raises the codec's error
    return _HEADER.pack(dst, src, ethertype)
