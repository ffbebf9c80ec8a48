"""Packet captures: a classic-pcap writer and a pcap/pcapng reader.

Formats: classic pcap (``pcap-savefile(5)``, draft-ietf-opsawg-pcap) with microsecond
or nanosecond timestamps in either byte order, and pcapng (draft-ietf-opsawg-pcapng):
Section Header, Interface Description (``if_tsresol``, ``if_tsoffset``), Enhanced,
Simple and obsolete Packet blocks; every other block type is skipped.

A corrupt or truncated file raises ``PcapError`` naming the byte offset of the
problem; nothing else escapes the reader except the ``OSError`` of the file itself.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable, Iterator
from typing import BinaryIO, NamedTuple

from rcunet.sync.lock import LockClass

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101  # raw IPv4 or IPv6, told apart by the version nibble

MAGIC_MICRO = 0xA1B2C3D4
MAGIC_NANO = 0xA1B23C4D
VERSION = (2, 4)
# Wireshark's WTAP_MAX_PACKET_SIZE_STANDARD: larger snaplens earn a warning there.
MAX_SNAPLEN = 262144
DEFAULT_SNAPLEN = MAX_SNAPLEN

# Sanity bound on one record or block: anything larger is a corrupt length field,
# refused before we try to allocate it (Wireshark's own pcapng limit is 16 MiB).
_MAX_CHUNK = 64 * 1024 * 1024

_CLASSIC_MAGICS: dict[bytes, tuple[str, int]] = {
    b"\xa1\xb2\xc3\xd4": (">", 1_000),
    b"\xd4\xc3\xb2\xa1": ("<", 1_000),
    b"\xa1\xb2\x3c\x4d": (">", 1),
    b"\x4d\x3c\xb2\xa1": ("<", 1),
}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_BYTE_ORDER_MAGIC = 0x1A2B3C4D

_BLOCK_IDB = 1
_BLOCK_PB = 2  # obsolete Packet Block
_BLOCK_SPB = 3
_BLOCK_EPB = 6
_OPT_ENDOFOPT = 0
_OPT_IF_TSRESOL = 9
_OPT_IF_TSOFFSET = 14

Source = str | os.PathLike[str] | bytes | bytearray | memoryview | BinaryIO

#: Serialises the records of one capture file (innermost: nothing is taken under it).
PCAP_WRITER_LOCK = LockClass("&pcap_writer->lock")


class PcapError(ValueError):
    """A capture file that is truncated, corrupt or not a capture at all.

    ``offset`` is the byte offset in the file where the problem was found.
    """

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class Record(NamedTuple):
    """One captured frame.  ``timestamp_ns`` is ``None`` for pcapng Simple Packet
    Blocks, which carry no time; ``orig_len`` is the length on the wire."""

    timestamp_ns: int | None
    frame: bytes
    linktype: int
    orig_len: int
    interface: int = 0


# ---------------------------------------------------------------------------- writer


class PcapWriter:
    """Appends ``(timestamp_ns, frame)`` records to a classic pcap file.

    ``target`` is a path (created/truncated, closed by ``close()``) or a binary file
    object (left open).  Frames longer than ``snaplen`` are cut, keeping their
    original length in the record header, as libpcap does.

    Concurrency:
      writers  any thread may call ``write``; ``_lock`` (``PCAP_WRITER_LOCK``) makes
               each record's header and data one ``write`` call in record order, so
               records never interleave, and guards ``_closed``.  Packing happens
               before the lock is taken.
      readers  none: the file is only written.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | BinaryIO,
        *,
        linktype: int = LINKTYPE_ETHERNET,
        snaplen: int = DEFAULT_SNAPLEN,
        nanosecond: bool = False,
    ) -> None:
        if not 1 <= snaplen <= MAX_SNAPLEN:
            raise ValueError(f"snaplen must be in 1..{MAX_SNAPLEN}, got {snaplen}")
        if not 0 <= linktype <= 0xFFFF:
            raise ValueError(f"linktype must be a 16-bit value, got {linktype}")
        self.linktype = linktype  # immutable
        self.snaplen = snaplen  # immutable
        self.nanosecond = nanosecond  # immutable
        self._frac_div = 1 if nanosecond else 1_000  # immutable: ns per fraction unit
        self._lock = PCAP_WRITER_LOCK.new()
        self._owns_file = isinstance(target, (str, os.PathLike))
        self._file: BinaryIO = (
            open(target, "wb") if isinstance(target, (str, os.PathLike)) else target
        )
        self._closed = False  # guarded-by: _lock
        magic = MAGIC_NANO if nanosecond else MAGIC_MICRO
        header = struct.pack("<IHHiIII", magic, *VERSION, 0, 0, snaplen, linktype)
        self._file.write(header)

    def write(self, timestamp_ns: int, frame: bytes | bytearray | memoryview) -> None:
        """Append one frame captured at ``timestamp_ns`` (ns since the Unix epoch)."""
        seconds, rest = divmod(timestamp_ns, 1_000_000_000)
        if timestamp_ns < 0 or seconds > 0xFFFFFFFF:
            raise ValueError(f"timestamp {timestamp_ns} ns does not fit a pcap record")
        orig_len = len(frame)
        data = bytes(frame[: self.snaplen])
        header = _RECORD_LE.pack(seconds, rest // self._frac_div, len(data), orig_len)
        with self._lock:
            if self._closed:
                raise ValueError("write to a closed PcapWriter")
            self._file.write(header + data)

    def flush(self) -> None:
        with self._lock:
            if not self._closed:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._file.flush()
            if self._owns_file:
                self._file.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_RECORD_LE = struct.Struct("<IIII")


# ---------------------------------------------------------------------------- reader


def read_records(source: Source) -> Iterator[Record]:
    """Yield the records of a pcap or pcapng capture, in file order.

    ``source`` is a path, the file's bytes, or a binary file object.  Raises
    ``PcapError`` at the first malformed byte (records before it are yielded first).
    """
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as file:
            yield from _read_stream(_Stream(file))
    elif isinstance(source, (bytes, bytearray, memoryview)):
        yield from _read_stream(_Stream(io.BytesIO(bytes(source))))
    else:
        yield from _read_stream(_Stream(source))


def read_all(source: Source) -> list[Record]:
    """All records of a capture as a list (see ``read_records``)."""
    return list(read_records(source))


class _Stream:
    """A file being read, with the offset every error reports."""

    __slots__ = ("file", "offset")

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.offset = 0

    def read_exact(self, size: int, what: str) -> bytes:
        data = self.file.read(size)
        if len(data) != size:
            raise PcapError(
                self.offset, f"truncated {what}: needed {size} bytes, {len(data)} present"
            )
        self.offset += size
        return data

    def read_or_eof(self, size: int, what: str) -> bytes | None:
        """Like ``read_exact``, but a clean end of file (no byte at all) gives ``None``."""
        data = self.file.read(size)
        if not data:
            return None
        if len(data) != size:
            raise PcapError(
                self.offset, f"truncated {what}: needed {size} bytes, {len(data)} present"
            )
        self.offset += size
        return data


def _read_stream(stream: _Stream) -> Iterator[Record]:
    magic = stream.file.read(4)
    if len(magic) < 4:
        raise PcapError(0, f"file of {len(magic)} bytes is not a pcap or pcapng capture")
    stream.offset = 4
    if magic in _CLASSIC_MAGICS:
        yield from _read_classic(stream, magic)
    elif magic == _PCAPNG_SHB:
        yield from _read_pcapng(stream)
    else:
        raise PcapError(0, f"unknown magic {magic.hex()}: not a pcap or pcapng capture")


# Classic pcap ---------------------------------------------------------------------


def _read_classic(stream: _Stream, magic: bytes) -> Iterator[Record]:
    endian, ns_per_unit = _CLASSIC_MAGICS[magic]
    stream.offset = 4
    rest = stream.read_exact(20, "pcap file header")
    major, minor, _zone, _sigfigs, _snaplen, network = struct.unpack(endian + "HHiIII", rest)
    if major != 2:
        raise PcapError(4, f"unsupported pcap version {major}.{minor}")
    linktype = network & 0xFFFF  # upper bits carry FCS information
    record_header = struct.Struct(endian + "IIII")
    while True:
        start = stream.offset
        header = stream.read_or_eof(16, "pcap record header")
        if header is None:
            return
        seconds, fraction, incl_len, orig_len = record_header.unpack(header)
        if incl_len > _MAX_CHUNK:
            raise PcapError(start, f"record length {incl_len} is implausible (corrupt file?)")
        frame = stream.read_exact(incl_len, "pcap record data")
        timestamp_ns = seconds * 1_000_000_000 + fraction * ns_per_unit
        yield Record(timestamp_ns, frame, linktype, orig_len)


# pcapng ---------------------------------------------------------------------------


class _Interface(NamedTuple):
    linktype: int
    snaplen: int
    to_ns: Callable[[int], int]


def _read_pcapng(stream: _Stream) -> Iterator[Record]:
    """Read blocks; the stream is just past the first Section Header Block's type."""
    endian = _finish_section_header(stream, 0, stream.read_exact(4, "pcapng block length"))
    interfaces: list[_Interface] = []
    while True:
        start = stream.offset
        head = stream.read_or_eof(8, "pcapng block header")
        if head is None:
            return
        if head[:4] == _PCAPNG_SHB:
            # A new section: its own byte order and interface list.
            endian = _finish_section_header(stream, start, head[4:])
            interfaces = []
            continue
        block_type, total_len = struct.unpack(endian + "II", head)
        body = _read_block_body(stream, start, total_len, endian, 8)
        if block_type == _BLOCK_IDB:
            interfaces.append(_parse_idb(body, start, endian))
        elif block_type == _BLOCK_EPB:
            yield _parse_epb(body, start, endian, interfaces)
        elif block_type == _BLOCK_SPB:
            yield _parse_spb(body, start, endian, interfaces)
        elif block_type == _BLOCK_PB:
            yield _parse_pb(body, start, endian, interfaces)
        # Any other block (name resolution, statistics, custom...) is skipped.


def _finish_section_header(stream: _Stream, start: int, length_bytes: bytes) -> str:
    """Read the rest of a Section Header Block starting at ``start`` whose type and
    raw length field were consumed; return the section's byte order."""
    bom = stream.read_exact(4, "pcapng byte-order magic")
    if struct.unpack("<I", bom)[0] == _BYTE_ORDER_MAGIC:
        endian = "<"
    elif struct.unpack(">I", bom)[0] == _BYTE_ORDER_MAGIC:
        endian = ">"
    else:
        raise PcapError(start + 8, f"bad pcapng byte-order magic {bom.hex()}")
    (total_len,) = struct.unpack(endian + "I", length_bytes)
    body = _read_block_body(stream, start, total_len, endian, 12, minimum=28)
    major, minor = struct.unpack_from(endian + "HH", body)
    if major != 1:
        raise PcapError(start + 12, f"unsupported pcapng version {major}.{minor}")
    return endian


def _read_block_body(
    stream: _Stream, start: int, total_len: int, endian: str, consumed: int, minimum: int = 12
) -> bytes:
    """Read the rest of a block of ``total_len`` bytes of which ``consumed`` (type,
    length and, for an SHB, the byte-order magic) were read; check the trailing
    length and return the body between the header and the trailer (the body of an
    SHB starts after its byte-order magic)."""
    if total_len < minimum or total_len % 4 or total_len > _MAX_CHUNK:
        raise PcapError(start + 4, f"bad pcapng block length {total_len}")
    rest = stream.read_exact(total_len - consumed, "pcapng block")
    (trailer,) = struct.unpack(endian + "I", rest[-4:])
    if trailer != total_len:
        raise PcapError(
            start + total_len - 4,
            f"pcapng block trailing length {trailer} != leading length {total_len}",
        )
    return rest[:-4]


def _parse_idb(body: bytes, start: int, endian: str) -> _Interface:
    if len(body) < 8:
        raise PcapError(start, "interface description block too short")
    linktype, _reserved, snaplen = struct.unpack_from(endian + "HHI", body)
    resolution = 6  # default if_tsresol: microseconds
    offset_s = 0
    for code, value in _options(body, 8, start + 8, endian):
        if code == _OPT_IF_TSRESOL:
            if len(value) != 1:
                raise PcapError(start, f"if_tsresol option of {len(value)} bytes")
            resolution = value[0]
        elif code == _OPT_IF_TSOFFSET:
            if len(value) != 8:
                raise PcapError(start, f"if_tsoffset option of {len(value)} bytes")
            (offset_s,) = struct.unpack(endian + "q", value)
    return _Interface(linktype, snaplen, _timestamp_converter(resolution, offset_s))


def _timestamp_converter(resolution: int, offset_s: int) -> Callable[[int], int]:
    """Units of ``if_tsresol`` -> ns since the epoch (MSB set: 2^-n s, else 10^-n s)."""
    base_ns = offset_s * 1_000_000_000
    if resolution & 0x80:
        shift = resolution & 0x7F
        return lambda units: base_ns + ((units * 1_000_000_000) >> shift)
    if resolution <= 9:
        factor = 10 ** (9 - resolution)
        return lambda units: base_ns + units * factor
    divisor = 10 ** (resolution - 9)
    return lambda units: base_ns + units // divisor


def _options(
    body: bytes, offset: int, body_offset: int, endian: str
) -> Iterator[tuple[int, bytes]]:
    """Walk a pcapng option list starting at ``body[offset:]``; the body starts at
    file offset ``body_offset``."""
    header = struct.Struct(endian + "HH")
    while offset + 4 <= len(body):
        code, length = header.unpack_from(body, offset)
        if code == _OPT_ENDOFOPT:
            return
        end = offset + 4 + length
        if end > len(body):
            raise PcapError(
                body_offset + offset,
                f"pcapng option {code} of {length} bytes overruns its block",
            )
        yield code, body[offset + 4 : end]
        offset = end + (-length % 4)


def _interface(interfaces: list[_Interface], index: int, start: int) -> _Interface:
    if index >= len(interfaces):
        defined = len(interfaces)
        raise PcapError(start + 8, f"packet refers to interface {index}, {defined} defined")
    return interfaces[index]


def _parse_epb(body: bytes, start: int, endian: str, interfaces: list[_Interface]) -> Record:
    if len(body) < 20:
        raise PcapError(start, "enhanced packet block too short")
    index, ts_high, ts_low, cap_len, orig_len = struct.unpack_from(endian + "IIIII", body)
    iface = _interface(interfaces, index, start)
    if 20 + cap_len > len(body):
        raise PcapError(start + 20, f"captured length {cap_len} overruns its block")
    frame = body[20 : 20 + cap_len]
    return Record(iface.to_ns((ts_high << 32) | ts_low), frame, iface.linktype, orig_len, index)


def _parse_pb(body: bytes, start: int, endian: str, interfaces: list[_Interface]) -> Record:
    if len(body) < 20:
        raise PcapError(start, "packet block too short")
    index, _drops, ts_high, ts_low, cap_len, orig_len = struct.unpack_from(endian + "HHIIII", body)
    iface = _interface(interfaces, index, start)
    if 20 + cap_len > len(body):
        raise PcapError(start + 20, f"captured length {cap_len} overruns its block")
    frame = body[20 : 20 + cap_len]
    return Record(iface.to_ns((ts_high << 32) | ts_low), frame, iface.linktype, orig_len, index)


def _parse_spb(body: bytes, start: int, endian: str, interfaces: list[_Interface]) -> Record:
    if len(body) < 4:
        raise PcapError(start, "simple packet block too short")
    iface = _interface(interfaces, 0, start)
    (orig_len,) = struct.unpack_from(endian + "I", body)
    cap_len = min(orig_len, len(body) - 4)
    if iface.snaplen:
        cap_len = min(cap_len, iface.snaplen)
    return Record(None, body[4 : 4 + cap_len], iface.linktype, orig_len, 0)
