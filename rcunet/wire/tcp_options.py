"""TCP options (RFC 9293 §3.2, RFC 7323 timestamps/window scale, RFC 2018 SACK).

``parse_options`` decodes the option bytes of one segment into the values ``tcp.Repr``
carries; ``build_options`` emits them in the order Linux's ``tcp_options_write()`` uses,
so a segment Linux sent re-encodes byte for byte:

    MSS | SACK-permitted+timestamps packed in one word (or NOP NOP TS, or NOP NOP
    SACK-permitted) | NOP window-scale | NOP NOP SACK blocks | unknown options | EOL pad

An MD5 signature option (kind 19, RFC 2385) of the right length goes first, as NOP NOP
19 18 and its digest, wherever it is among the unknown options (tcp_options_write).  (The
replies Linux builds outside a socket, tcp_v4_send_ack, put it after the timestamps
instead: ``tcp_md5.reply_header`` writes those; parse reads either.)

A Fast Open option (kind 34, RFC 7413) whose length leaves two bytes of its last word is
followed by NOP NOP, as tcp_options_write pads it (an 8-byte cookie: 10 + 2).

The AccECN option (RFC 9768 §3.2.3, kinds 172 and 174) travels as an unknown option; when
it is the first of them and has Linux's sizes (0 to 3 fields of 3 bytes), ``build_options``
writes it where tcp_options_write does, after the timestamps, its odd bytes taking the
place of the NOPs in front of SACK-permitted, window scale or the SACK blocks.
``AccEcnOption.parse`` reads its counters.

Known kinds with a length other than their fixed one are kept as unknown options (Linux
ignores them the same way), so nothing is lost and parse never guesses.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from rcunet.wire._common import Buffer as Buffer  # re-exported: callers annotate with it
from rcunet.wire.errors import WireError

EOL = 0
NOP = 1
MSS = 2
WINDOW_SCALE = 3
SACK_PERMITTED = 4
SACK = 5
TIMESTAMP = 8
#: RFC 2385 TCP MD5 signature (rcunet.wire.tcp_md5): 16 bytes of digest.
MD5SIG = 19
MD5_DIGEST_LEN = 16
FAST_OPEN = 34
#: RFC 9768 AccECN option, field order ECT(0) CE ECT(1) (kind 172) or ECT(1) CE ECT(0) (174).
ACCECN0 = 172
ACCECN1 = 174
ACCECN_FIELD_LEN = 3
ACCECN_MAX_FIELDS = 3

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


class AccEcnOption(NamedTuple):
    """An AccECN option's byte counters as sent (24-bit each, offsets included), in wire
    order.  ``kind`` says the order: ACCECN0 is EE0B ECEB EE1B, ACCECN1 is EE1B ECEB
    EE0B (RFC 9768 §3.2.3, Linux tcp_accecn_optfield_to_ecnfield)."""

    kind: int
    fields: tuple[int, ...] = ()

    @classmethod
    def parse(cls, kind: int, data: Buffer) -> AccEcnOption:
        """Read an option's data as Linux does (tcp_accecn_process_option): up to three
        whole 3-byte fields, a shorter tail ignored."""
        if kind not in (ACCECN0, ACCECN1):
            raise WireError("bad-option", f"TCP option {kind} is not AccECN")
        count = min(len(data) // ACCECN_FIELD_LEN, ACCECN_MAX_FIELDS)
        return cls(kind, tuple(int.from_bytes(data[i * 3 : i * 3 + 3], "big")
                               for i in range(count)))

    def data(self) -> bytes:
        """The option's data bytes (the fields, 3 bytes each)."""
        if self.kind not in (ACCECN0, ACCECN1) or len(self.fields) > ACCECN_MAX_FIELDS:
            raise WireError("bad-option", f"AccECN kind {self.kind} with {len(self.fields)} "
                            "fields")
        out = bytearray()
        for value in self.fields:
            if not 0 <= value <= 0xFFFFFF:
                raise WireError("bad-field", f"AccECN counter {value} beyond 24 bits")
            out += value.to_bytes(3, "big")
        return bytes(out)

    def as_unknown(self) -> tuple[int, bytes]:
        """The (kind, data) pair ``tcp.Repr.unknown_options`` carries."""
        return self.kind, self.data()

    def _field(self, position: int) -> int | None:
        return self.fields[position] if len(self.fields) > position else None

    @property
    def e0b(self) -> int | None:
        """The ECT(0) byte counter (EE0B), None when the option is too short to hold it."""
        return self._field(0 if self.kind == ACCECN0 else 2)

    @property
    def ceb(self) -> int | None:
        """The CE byte counter (ECEB)."""
        return self._field(1)

    @property
    def e1b(self) -> int | None:
        """The ECT(1) byte counter (EE1B)."""
        return self._field(2 if self.kind == ACCECN0 else 0)


def accecn_option(unknown: tuple[tuple[int, bytes], ...]) -> AccEcnOption | None:
    """The AccECN option among a segment's unknown options: the last one, as Linux's
    tcp_parse_options keeps the offset of the last it meets."""
    found: AccEcnOption | None = None
    for kind, data in unknown:
        if kind in (ACCECN0, ACCECN1):
            found = AccEcnOption.parse(kind, data)
    return found


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
        if unknown and any(kind == MD5SIG for kind, _ in unknown):
            unknown = _write_md5(out, unknown)
        if mss is not None:
            out += _U32.pack(MSS << 24 | 4 << 16 | mss)
        if timestamp is not None:
            out += _U32.pack(WORD_SACKPERM_TS if sack_permitted else WORD_NOP_NOP_TS)
            out += _TS.pack(*timestamp)
        # tcp_options_write: the AccECN option's odd bytes wait in the two "leftover"
        # bytes, which replace the NOP NOP of the next word that starts with them.
        # ``left`` bytes (0-2) of it wait in ``high``/``low`` for the next word.
        high = low = NOP
        left = 0
        if unknown and _linux_accecn(unknown[0]):
            left, high, low = _write_accecn(out, *unknown[0])
            unknown = unknown[1:]
        if timestamp is None and sack_permitted:
            out += bytes((high, low, SACK_PERMITTED, 2))
            left, high, low = 0, NOP, NOP
        if window_scale is not None:
            first = NOP
            if left == 1:  # one byte left over fits the window scale word's NOP
                first, left, high = high, 0, NOP
            out += bytes((first, WINDOW_SCALE, 3, window_scale))
        if sack_blocks:
            if len(sack_blocks) > MAX_SACK_BLOCKS:
                raise WireError("too-long", f"{len(sack_blocks)} SACK blocks (max 4)")
            out += bytes((high, low, SACK, 2 + 8 * len(sack_blocks)))
            for left_edge, right_edge in sack_blocks:
                out += _SACK_BLOCK.pack(left_edge, right_edge)
        elif left:
            out += bytes((high, low, NOP, NOP))
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


def _write_md5(out: bytearray, unknown: tuple[tuple[int, bytes], ...]
               ) -> tuple[tuple[int, bytes], ...]:
    """Write the first MD5 signature option (RFC 2385) as tcp_options_write does, before
    every other option: NOP NOP 19 18 and the 16-byte digest.  The other options."""
    for i, (kind, data) in enumerate(unknown):
        if kind == MD5SIG and len(data) == MD5_DIGEST_LEN:
            out += bytes((NOP, NOP, MD5SIG, 2 + MD5_DIGEST_LEN))
            out += data
            return unknown[:i] + unknown[i + 1:]
    return unknown


def _linux_accecn(option: tuple[int, bytes]) -> bool:
    """An AccECN option of a size Linux sends (2, 5, 8 or 11 bytes)."""
    kind, data = option
    return kind in (ACCECN0, ACCECN1) and len(data) in (0, 3, 6, 9)


def _write_accecn(out: bytearray, kind: int, data: bytes) -> tuple[int, int, int]:
    """Append the AccECN option as tcp_options_write lays it out; return how many of its
    bytes are left over for the next word (0-2) and the two bytes of that word's head."""
    length = 2 + len(data)
    if len(data) == 0:
        return 2, kind, length
    if len(data) == 3:
        out += bytes((kind, length)) + data[:2]
        return 1, data[2], NOP
    out += bytes((kind, length)) + data
    if len(data) == 9:
        out.append(NOP)
    return 0, NOP, NOP
