"""TCP options (RFC 9293 §3.2, RFC 7323 timestamps/window scale, RFC 2018 SACK).

``parse_options`` decodes the option bytes of one segment into the values ``tcp.Repr``
carries; ``build_options`` emits them in the order Linux's ``tcp_options_write()`` uses,
so a segment Linux sent re-encodes byte for byte:

    MSS | SACK-permitted+timestamps packed in one word (or NOP NOP TS, or NOP NOP
    SACK-permitted) | NOP window-scale | NOP NOP SACK blocks | unknown options | EOL pad

A Fast Open option (kind 34, RFC 7413) whose length leaves two bytes of its last word is
followed by NOP NOP, as tcp_options_write pads it (an 8-byte cookie: 10 + 2).

Known kinds with a length other than their fixed one are kept as unknown options (Linux
ignores them the same way), so nothing is lost and parse never guesses.
"""

from __future__ import annotations

import struct

from rcunet.wire._common import Buffer as Buffer  # re-exported: callers annotate with it
from rcunet.wire.errors import WireError

EOL = 0
NOP = 1
MSS = 2
WINDOW_SCALE = 3
SACK_PERMITTED = 4
SACK = 5
TIMESTAMP = 8
FAST_OPEN = 34

MAX_OPTIONS_LEN = 40
MAX_SACK_BLOCKS = 4

#: 4-byte words as Linux writes them (include/net/tcp.h TCPOPT_*/TCPOLEN_*).
WORD_NOP_NOP_TS = 0x0101080A
WORD_SACKPERM_TS = 0x0402080A
WORD_NOP_NOP_SACKPERM = 0x01010402
WORD_NOP_WS = 0x010303  # followed by the shift count byte

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_TS = struct.Struct("!II")
_SACK_BLOCK = struct.Struct("!II")

#: (mss, window_scale, sack_permitted, sack_blocks, timestamp, unknown_options)
Options = tuple[
    int | None,
    int | None,
    bool,
    tuple[tuple[int, int], ...],
    tuple[int, int] | None,
    tuple[tuple[int, bytes], ...],
]


def parse_options(buf: Buffer, start: int, end: int) -> Options:
    """Decode ``buf[start:end]``.  Raises ``WireError("bad-option")`` when an option's
    length is 0 or 1 or runs past ``end``.  A repeated known option is kept as unknown."""
    mss: int | None = None
    window_scale: int | None = None
    sack_permitted = False
    sack_blocks: tuple[tuple[int, int], ...] = ()
    timestamp: tuple[int, int] | None = None
    unknown: list[tuple[int, bytes]] = []
    seen = 0  # bit per known kind already decoded
    i = start
    while i < end:
        kind = buf[i]
        if kind == EOL:
            break
        if kind == NOP:
            i += 1
            continue
        if i + 1 >= end:
            raise WireError("bad-option", f"TCP option {kind} at {i - start} has no length")
        length = buf[i + 1]
        if length < 2:
            raise WireError("bad-option", f"TCP option {kind} with length {length}")
        nxt = i + length
        if nxt > end:
            raise WireError("bad-option", f"TCP option {kind} of length {length} overruns")
        bit = 1 << kind if kind < 16 else 0
        known = not seen & bit
        if kind == MSS and length == 4 and known:
            mss = _U16.unpack_from(buf, i + 2)[0]
        elif kind == WINDOW_SCALE and length == 3 and known:
            window_scale = buf[i + 2]
        elif kind == SACK_PERMITTED and length == 2 and known:
            sack_permitted = True
        elif kind == TIMESTAMP and length == 10 and known:
            timestamp = _TS.unpack_from(buf, i + 2)
        elif kind == SACK and known and length >= 10 and (length - 2) % 8 == 0:
            sack_blocks = tuple(
                _SACK_BLOCK.unpack_from(buf, j) for j in range(i + 2, nxt, 8)
            )
        else:
            unknown.append((kind, bytes(buf[i + 2 : nxt])))
            bit = 0
        seen |= bit
        i = nxt
    return mss, window_scale, sack_permitted, sack_blocks, timestamp, tuple(unknown)


def build_options(
    mss: int | None,
    window_scale: int | None,
    sack_permitted: bool,
    sack_blocks: tuple[tuple[int, int], ...],
    timestamp: tuple[int, int] | None,
    unknown: tuple[tuple[int, bytes], ...],
) -> bytes:
    """Emit options in Linux's order, padded with EOL to a multiple of 4 bytes."""
    if mss is not None and not 0 <= mss <= 0xFFFF:
        raise WireError("bad-field", f"TCP MSS {mss}")
    if window_scale is not None and not 0 <= window_scale <= 0xFF:
        raise WireError("bad-field", f"TCP window scale {window_scale}")
    out = bytearray()
    try:
        if mss is not None:
            out += _U32.pack(MSS << 24 | 4 << 16 | mss)
        if timestamp is not None:
            out += _U32.pack(WORD_SACKPERM_TS if sack_permitted else WORD_NOP_NOP_TS)
            out += _TS.pack(*timestamp)
        elif sack_permitted:
            out += _U32.pack(WORD_NOP_NOP_SACKPERM)
        if window_scale is not None:
            out += _U32.pack(WORD_NOP_WS << 8 | window_scale)
        if sack_blocks:
            if len(sack_blocks) > MAX_SACK_BLOCKS:
                raise WireError("too-long", f"{len(sack_blocks)} SACK blocks (max 4)")
            out += bytes((NOP, NOP, SACK, 2 + 8 * len(sack_blocks)))
            for left, right in sack_blocks:
                out += _SACK_BLOCK.pack(left, right)
        for kind, data in unknown:
            if kind in (EOL, NOP) or len(data) > MAX_OPTIONS_LEN - 2:
                raise WireError("bad-option", f"cannot emit option kind {kind} of {len(data)} "
                                "bytes")
            out += bytes((kind, len(data) + 2))
            out += data
            if kind == FAST_OPEN and (len(data) + 2) & 3 == 2:
                out += bytes((NOP, NOP))
    except WireError:
        raise
    except (struct.error, ValueError, TypeError) as err:
        raise WireError("bad-field", f"TCP option value: {err}") from None
    if len(out) & 3:
        out += bytes(4 - (len(out) & 3))
    if len(out) > MAX_OPTIONS_LEN:
        raise WireError("too-long", f"TCP options need {len(out)} bytes (max 40)")
    return bytes(out)
