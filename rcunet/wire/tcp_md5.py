"""The TCP MD5 signature option (RFC 2385): kind 19, a 16-byte MD5 digest.

The digest covers, in this order (RFC 2385 §2.0; Linux tcp_v4_md5_hash_skb,
tcp_v6_md5_hash_skb):

1. the pseudo-header: IPv4 source, destination, a zero byte, the protocol (6) and the
   segment length (16 bits); IPv6 source, destination, the segment length (32 bits),
   three zero bytes and the next header (RFC 2460 §8.1);
2. the 20-byte TCP header without options, its checksum taken as zero (the data offset
   still counts the options);
3. the payload;
4. the key.

Linux writes the option as one aligned word block, NOP NOP 19 18 and the digest
(tcp_options_write: before every other option), so a keyed segment has 20 bytes less
for the rest: ``OPTION_SPACE``.

``signature`` finds the option in a parsed segment's unknown options as Linux's
tcp_do_parse_auth_options does, ``digest_raw`` hashes a segment as received (its bytes),
``sign`` fills in the option of a segment about to be sent.
"""

from __future__ import annotations

import hashlib
import struct

from rcunet.wire import checksum, tcp
from rcunet.wire._common import Buffer
from rcunet.wire.errors import WireError

#: The option kind (TCPOPT_MD5SIG) and the digest's length (TCPOLEN_MD5SIG - 2).
MD5SIG = 19
DIGEST_LEN = 16
#: Option bytes a keyed segment spends on it, aligned (TCPOLEN_MD5SIG_ALIGNED).
OPTION_SPACE = 20
#: The longest key (TCP_MD5SIG_MAXKEYLEN).
MAX_KEY_LEN = 80
#: A placeholder digest: the option's room, filled in by ``sign``.
PLACEHOLDER = (MD5SIG, bytes(DIGEST_LEN))

_PROTOCOL = 6
_HEADER = struct.Struct("!HHIIBBHHH")
_REPLY_OPTIONS = struct.Struct("!IIII")
_NOP_NOP_TS = 0x0101080A
_NOP_NOP_MD5 = 0x01011312
_PSEUDO4 = struct.Struct("!4s4sBBH")
_PSEUDO6 = struct.Struct("!16s16sI3xB")


def signature(unknown: tuple[tuple[int, bytes], ...]) -> bytes | None:
    """The digest a segment carries, or None.  ``WireError("bad-option")`` for what
    tcp_do_parse_auth_options refuses (the segment is then dropped): an MD5 option whose
    length is not 18, or two of them."""
    found: bytes | None = None
    for kind, data in unknown:
        if kind != MD5SIG:
            continue
        if len(data) != DIGEST_LEN:
            raise WireError("bad-option", f"TCP MD5 option of length {len(data) + 2}")
        if found is not None:
            raise WireError("bad-option", "two TCP MD5 options")
        found = bytes(data)
    return found


def pseudo_header(src: bytes, dst: bytes, length: int) -> bytes:
    """The pseudo-header the digest starts with (IPv4 or IPv6 by the address length)."""
    if len(src) == 4:
        return _PSEUDO4.pack(src, dst, 0, _PROTOCOL, length)
    return _PSEUDO6.pack(src, dst, length, _PROTOCOL)


def digest_raw(segment: Buffer, src: bytes, dst: bytes, key: bytes) -> bytes:
    """The RFC 2385 digest of ``segment`` (a whole TCP segment's bytes, as sent or
    received) between ``src`` and ``dst`` with ``key``."""
    header_len = (segment[12] >> 4) * 4
    if len(segment) < 20 or header_len < 20 or header_len > len(segment):
        raise WireError("bad-data-offset", "TCP segment too short to sign")
    view = memoryview(segment)
    h = hashlib.md5(pseudo_header(src, dst, len(segment)), usedforsecurity=False)
    h.update(view[:16])
    h.update(b"\0\0")  # the checksum, taken as zero
    h.update(view[18:20])
    h.update(view[header_len:])
    h.update(key)
    return h.digest()


def digest_parts(header: bytes, payload: Buffer, src: bytes, dst: bytes,
                 key: bytes) -> bytes:
    """``digest_raw`` of a segment held as its header (with options) and payload."""
    h = hashlib.md5(pseudo_header(src, dst, len(header) + len(payload)),
                    usedforsecurity=False)
    h.update(header[:16])
    h.update(b"\0\0")
    h.update(header[18:20])
    h.update(payload)
    h.update(key)
    return h.digest()


def with_digest(unknown: tuple[tuple[int, bytes], ...],
                digest: bytes) -> tuple[tuple[int, bytes], ...]:
    """``unknown`` with its MD5 option's digest replaced by ``digest`` (or the option
    added in front when it has none)."""
    out = tuple((kind, digest if kind == MD5SIG else data) for kind, data in unknown)
    if not any(kind == MD5SIG for kind, _ in unknown):
        out = ((MD5SIG, digest), *out)
    return out




def reply_header(seg: tcp.Repr, src: bytes, dst: bytes, key: bytes) -> bytes:
    """The signed header (checksum included) of a reply Linux builds outside a socket,
    in tcp_v4_send_ack's layout: NOP NOP timestamps, then NOP NOP 19 18 and the digest
    (the TIME-WAIT and request-socket ACKs; ``sign`` is tcp_options_write's, MD5 first).
    ``seg`` carries its timestamps and no other option."""
    if seg.timestamp is None or seg.unknown_options or seg.sack_blocks or seg.mss is not None:
        raise WireError("bad-option", "a reply carries its timestamps and nothing else")
    options = _REPLY_OPTIONS.pack(_NOP_NOP_TS, *seg.timestamp, _NOP_NOP_MD5) \
        + bytes(DIGEST_LEN)
    header = bytearray(_HEADER.pack(seg.src_port, seg.dst_port, seg.seq, seg.ack,
                                    (20 + len(options)) << 2 | seg.flags >> 8,
                                    seg.flags & 0xFF, seg.window, 0, seg.urgent) + options)
    header[-DIGEST_LEN:] = digest_parts(bytes(header), seg.payload, src, dst, key)
    length = len(header) + len(seg.payload)
    field = checksum.internet_checksum(bytes(header) + bytes(seg.payload),
                                       checksum.pseudo_header_sum(src, dst, _PROTOCOL, length))
    header[16:18] = field.to_bytes(2, "big")
    return bytes(header)


def _fit(seg: tcp.Repr) -> tuple[tcp.Repr, int]:
    """``seg`` with as many of its SACK blocks as leave room for the signature (Linux
    tcp_established_options sizes them after OPTION_MD5: a key set on a live
    connection signs segments the engine did not size for it), and its options' length."""
    while True:
        try:
            return seg, len(seg.options_bytes())
        except WireError:
            if not seg.sack_blocks:
                raise
            seg = seg._replace(sack_blocks=seg.sack_blocks[:-1])


def sign(seg: tcp.Repr, src: bytes, dst: bytes, key: bytes) -> tcp.Repr:
    """``seg`` with an MD5 option carrying its digest between ``src`` and ``dst`` (added
    in front of the other options when it has none, as Linux adds OPTION_MD5).  The
    digest needs of the header only its fixed 20 bytes and its length: the options are
    laid out once, to learn that length."""
    placed, options_len = _fit(seg._replace(
        unknown_options=with_digest(seg.unknown_options, bytes(DIGEST_LEN))))
    header_len = 20 + options_len
    try:
        fixed = _HEADER.pack(seg.src_port, seg.dst_port, seg.seq, seg.ack,
                             header_len << 2 | seg.flags >> 8 & 1, seg.flags & 0xFF,
                             seg.window, 0, seg.urgent)
    except struct.error as err:
        raise WireError("bad-field", f"TCP field out of range: {err}") from None
    h = hashlib.md5(pseudo_header(src, dst, header_len + len(seg.payload)),
                    usedforsecurity=False)
    h.update(fixed)  # the checksum field packed as zero
    h.update(seg.payload)
    h.update(key)
    return placed._replace(unknown_options=with_digest(placed.unknown_options, h.digest()))


__all__ = ["DIGEST_LEN", "MAX_KEY_LEN", "MD5SIG", "OPTION_SPACE", "PLACEHOLDER",
           "digest_parts", "digest_raw", "pseudo_header", "reply_header", "sign", "signature",
           "with_digest"]
