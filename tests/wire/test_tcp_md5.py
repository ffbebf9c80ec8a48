"""The RFC 2385 option codec and digest: where Linux writes the option, what the digest
covers (pseudo-header, header without options and checksum, payload, key), and the
option shapes tcp_do_parse_auth_options refuses."""

from __future__ import annotations

import hashlib

import pytest

from rcunet.wire import tcp, tcp_md5
from rcunet.wire.errors import WireError

SRC4, DST4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
DIGEST = bytes(range(16))


def test_option_goes_first_as_nop_nop_kind_length() -> None:
    """tcp_options_write: the MD5 block before MSS, SACK-permitted and window scale (a
    keyed SYN: 32 bytes, no timestamps)."""
    seg = tcp.Repr(1, 2, 3, 0, tcp.SYN, 100, mss=1460, window_scale=7, sack_permitted=True,
                   unknown_options=((tcp_md5.MD5SIG, DIGEST),))
    options = seg.options_bytes()
    assert options == (bytes([1, 1, 19, 18]) + DIGEST + bytes([2, 4, 0x05, 0xB4])
                       + bytes([1, 1, 4, 2]) + bytes([1, 3, 3, 7]))
    parsed = tcp.Repr.parse(seg.build())
    assert parsed.unknown_options == ((tcp_md5.MD5SIG, DIGEST),)
    assert parsed.options_bytes() == options  # Linux's layout re-encodes byte for byte


def test_digest_covers_what_rfc2385_lists() -> None:
    """Pseudo-header (src, dst, 0, 6, length), the 20-byte header with a zero checksum,
    the payload, the key: spelled out byte by byte here."""
    seg = tcp.Repr(40000, 179, 1000, 2000, tcp.ACK | tcp.PSH, 512, payload=b"hello",
                   timestamp=(7, 9))
    signed = tcp_md5.sign(seg, SRC4, DST4, b"key")
    wire = signed.build(src=SRC4, dst=DST4)
    header_len = (wire[12] >> 4) * 4
    assert header_len == 20 + 20 + 12
    expected = hashlib.md5(
        SRC4 + DST4 + bytes([0, 6]) + len(wire).to_bytes(2, "big")
        + wire[:16] + b"\0\0" + wire[18:20] + b"hello" + b"key").digest()
    assert tcp_md5.signature(tcp.Repr.parse(wire).unknown_options) == expected
    assert tcp_md5.digest_raw(wire, SRC4, DST4, b"key") == expected
    assert tcp.Repr.parse(wire, SRC4, DST4).checksum_ok  # the checksum covers the digest


def test_ipv6_pseudo_header() -> None:
    src, dst = bytes(15) + b"\1", bytes(15) + b"\2"
    assert tcp_md5.pseudo_header(src, dst, 40) == src + dst + (40).to_bytes(4, "big") + \
        bytes([0, 0, 0, 6])


@pytest.mark.parametrize("unknown", [
    ((19, bytes(15)),),  # an MD5 option of length 17
    ((19, DIGEST), (19, DIGEST)),  # twice
])
def test_options_linux_refuses(unknown: tuple[tuple[int, bytes], ...]) -> None:
    with pytest.raises(WireError):
        tcp_md5.signature(unknown)


def test_no_option_no_signature() -> None:
    assert tcp_md5.signature(()) is None
    assert tcp_md5.signature(((30, b"\0\0"),)) is None


def test_signing_gives_sack_blocks_up_for_the_option() -> None:
    """A segment sized without the signature (a key set on a live connection): its SACK
    blocks are cut to what fits beside it, never past 40 bytes of options."""
    blocks = ((100, 200), (300, 400), (500, 600))
    seg = tcp.Repr(1, 2, 3, 4, tcp.ACK, 100, timestamp=(1, 2), sack_blocks=blocks)
    assert len(seg.options_bytes()) == 40
    signed = tcp_md5.sign(seg, SRC4, DST4, b"k")
    assert signed.sack_blocks == ()  # 12 TS + 20 MD5 leave 8: no block fits
    assert len(signed.options_bytes()) == 32


def test_reply_layout_puts_timestamps_first() -> None:
    """tcp_v4_send_ack: NOP NOP TS, then NOP NOP MD5; the digest and the checksum cover
    the header as laid out, and parse reads it back."""
    seg = tcp.Repr(80, 40000, 7, 9, tcp.ACK, 1024, timestamp=(1000, 300))
    header = tcp_md5.reply_header(seg, SRC4, DST4, b"key")
    assert header[20:24] == bytes([1, 1, 8, 10]) and header[32:36] == bytes([1, 1, 19, 18])
    parsed = tcp.Repr.parse(header, SRC4, DST4)
    assert parsed.checksum_ok and parsed.timestamp == (1000, 300)
    assert tcp_md5.signature(parsed.unknown_options) == tcp_md5.digest_raw(header, SRC4, DST4,
                                                                           b"key")
    with pytest.raises(WireError):
        tcp_md5.reply_header(seg._replace(timestamp=None), SRC4, DST4, b"key")
