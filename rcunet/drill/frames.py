"""IP packets for the drill: inbound ones built from script lines, outbound ones decoded
with their TCP options in wire order (packetdrill compares options kind by kind, in
order), and both printed as packetdrill prints them (``packet_to_string.c``)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from rcunet.wire import tcp_md5
from rcunet.wire.checksum import internet_checksum, pseudo_header_sum
from rcunet.wire.tcp_options import ACCECN0, ACCECN1, AccEcnOption

PROTO_ICMP, PROTO_TCP, PROTO_UDP, PROTO_ICMPV6 = 1, 6, 17, 58
ECN_NAMES = {0: "noecn", 1: "ect1", 2: "ect0", 3: "ce"}
ECN_BITS = {v: k for k, v in ECN_NAMES.items()}
_FLAG_BITS = {"F": 0x01, "S": 0x02, "R": 0x04, "P": 0x08, ".": 0x10, "U": 0x20,
              "E": 0x40, "W": 0x80, "A": 0x100}
_FLAG_ORDER = "FSRP.UEWA"
# TCP option kinds
OPT_EOL, OPT_NOP, OPT_MSS, OPT_WS, OPT_SACKOK, OPT_SACK, OPT_TS = 0, 1, 2, 3, 4, 5, 8
OPT_MD5, OPT_FO, OPT_EXP = 19, 34, 254
OPT_ACCECN0, OPT_ACCECN1 = ACCECN0, ACCECN1
#: packetdrill's names of the AccECN option's fields in each kind's order.
ACCECN_FIELDS = {ACCECN0: ("e0b", "ceb", "e1b"), ACCECN1: ("e1b", "ceb", "e0b")}
FO_MAGIC = 0xF989


def flag_bits(letters: str) -> int:
    bits = 0
    for letter in letters:
        bits |= _FLAG_BITS[letter]
    return bits


def flag_letters(bits: int) -> str:
    return "".join(letter for letter in _FLAG_ORDER if bits & _FLAG_BITS[letter])


@dataclass(slots=True)
class RawOption:
    """One TCP option as on the wire: kind and its data (after kind and length)."""

    kind: int
    data: bytes = b""

    @property
    def length(self) -> int:
        return 1 if self.kind in (OPT_EOL, OPT_NOP) else 2 + len(self.data)


@dataclass(slots=True)
class Frame:
    """A decoded IP packet (the part of it the drill looks at)."""

    version: int
    src: bytes
    dst: bytes
    protocol: int
    ecn: int = 0
    tos: int = 0
    ttl: int = 64
    flowlabel: int = 0
    sport: int = 0
    dport: int = 0
    seq: int = 0
    ack: int = 0
    flags: int = 0
    win: int = 0
    urg: int = 0
    options: list[RawOption] = field(default_factory=list)
    payload: bytes = b""
    icmp_type: int = 0
    icmp_code: int = 0
    icmp_body: bytes = b""
    time_ns: int = 0  #: virtual time the Host sent it
    segment: bytes = b""  #: the whole TCP segment's bytes (an MD5 digest covers them)

    def option(self, kind: int) -> RawOption | None:
        for opt in self.options:
            if opt.kind == kind:
                return opt
        return None

    @property
    def ts(self) -> tuple[int, int] | None:
        opt = self.option(OPT_TS)
        if opt is None or len(opt.data) != 8:
            return None
        val, ecr = struct.unpack("!II", opt.data)
        return val, ecr


def parse_options(raw: bytes) -> list[RawOption]:
    """Options in wire order; a malformed list stops at the bad byte (what is before it
    is kept, and the frame still compares unequal to any script)."""
    options: list[RawOption] = []
    i = 0
    while i < len(raw):
        kind = raw[i]
        if kind in (OPT_EOL, OPT_NOP):
            options.append(RawOption(kind))
            i += 1
            if kind == OPT_EOL:
                break
            continue
        if i + 1 >= len(raw) or raw[i + 1] < 2 or i + raw[i + 1] > len(raw):
            options.append(RawOption(0xFF, raw[i:]))
            break
        length = raw[i + 1]
        options.append(RawOption(kind, bytes(raw[i + 2:i + length])))
        i += length
    return options


def decode(packet: bytes, time_ns: int = 0) -> Frame | None:
    """An outbound IP packet; None for anything that is not IPv4/IPv6 or is truncated."""
    if len(packet) < 20:
        return None
    version = packet[0] >> 4
    if version == 4:
        ihl = (packet[0] & 0xF) * 4
        total = struct.unpack_from("!H", packet, 2)[0]
        if ihl < 20 or total < ihl or len(packet) < total:
            return None
        tos = packet[1]
        frame = Frame(4, bytes(packet[12:16]), bytes(packet[16:20]), packet[9],
                      ecn=tos & 3, tos=tos, ttl=packet[8], time_ns=time_ns)
        body = bytes(packet[ihl:total])
    elif version == 6:
        if len(packet) < 40:
            return None
        word = struct.unpack_from("!I", packet, 0)[0]
        plen = struct.unpack_from("!H", packet, 4)[0]
        tclass = (word >> 20) & 0xFF
        frame = Frame(6, bytes(packet[8:24]), bytes(packet[24:40]), packet[6],
                      ecn=tclass & 3, tos=tclass, ttl=packet[7], flowlabel=word & 0xFFFFF,
                      time_ns=time_ns)
        body = bytes(packet[40:40 + plen])
    else:
        return None
    if frame.protocol == PROTO_TCP:
        if len(body) < 20:
            return None
        sport, dport, seq, ack, off_flags, win, _ck, urg = struct.unpack_from(
            "!HHIIHHHH", body)
        doff = (off_flags >> 12) * 4
        if doff < 20 or doff > len(body):
            return None
        frame.sport, frame.dport, frame.seq, frame.ack = sport, dport, seq, ack
        frame.flags, frame.win, frame.urg = off_flags & 0x1FF, win, urg
        frame.options = parse_options(body[20:doff])
        frame.payload = body[doff:]
        frame.segment = body
    elif frame.protocol == PROTO_UDP:
        if len(body) < 8:
            return None
        frame.sport, frame.dport = struct.unpack_from("!HH", body)
        frame.payload = body[8:]
    elif frame.protocol in (PROTO_ICMP, PROTO_ICMPV6):
        if len(body) < 8:
            return None
        frame.icmp_type, frame.icmp_code = body[0], body[1]
        frame.icmp_body = body[4:]
    return frame


# -- building ------------------------------------------------------------------------------
def build_options(options: list[RawOption]) -> bytes:
    out = bytearray()
    for opt in options:
        if opt.kind in (OPT_EOL, OPT_NOP):
            out.append(opt.kind)
        else:
            out += bytes((opt.kind, 2 + len(opt.data))) + opt.data
    return bytes(out)


def _l4_checksum(src: bytes, dst: bytes, protocol: int, segment: bytes) -> int:
    return internet_checksum(segment, pseudo_header_sum(src, dst, protocol, len(segment)))


def ip_packet(src: bytes, dst: bytes, protocol: int, l4: bytes, *, ecn: int = 0,
              tos: int | None = None, ttl: int = 64, flowlabel: int = 0) -> bytes:
    tclass = (tos if tos is not None else 0) & 0xFC | ecn
    if len(src) == 4:
        header = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tclass, 20 + len(l4), 0,
                                       0x4000, ttl, protocol, 0, src, dst))
        struct.pack_into("!H", header, 10, internet_checksum(bytes(header)))
        return bytes(header) + l4
    word = 6 << 28 | tclass << 20 | (flowlabel & 0xFFFFF)
    return struct.pack("!IHBB16s16s", word, len(l4), protocol, ttl, src, dst) + l4


def tcp_segment(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int,
                flags: int, win: int, options: bytes, payload: bytes, urg: int = 0) -> bytes:
    if len(options) % 4:
        options += b"\x00" * (4 - len(options) % 4)  # packetdrill pads with EOL too
    doff = (20 + len(options)) // 4
    header = struct.pack("!HHIIHHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                         doff << 12 | (flags & 0x1FF), win, 0, urg)
    segment = bytearray(header + options + payload)
    struct.pack_into("!H", segment, 16, _l4_checksum(src, dst, PROTO_TCP, bytes(segment)))
    return bytes(segment)


def sign_segment(l4: bytes, src: bytes, dst: bytes, key: bytes) -> bytes:
    """``l4`` (a TCP segment built by ``tcp_segment``) with the digest of its MD5 option
    (RFC 2385) computed with ``key``, and its checksum again."""
    doff = (l4[12] >> 4) * 4
    at = 20
    while at < doff:
        kind = l4[at]
        if kind == OPT_EOL:
            break
        if kind == OPT_NOP:
            at += 1
            continue
        length = l4[at + 1] if at + 1 < doff else 0
        if length < 2:
            break
        if kind == OPT_MD5 and length == 18:
            segment = bytearray(l4)
            segment[at + 2:at + 18] = tcp_md5.digest_raw(l4, src, dst, key)
            segment[16:18] = b"\0\0"
            struct.pack_into("!H", segment, 16, _l4_checksum(src, dst, PROTO_TCP,
                                                             bytes(segment)))
            return bytes(segment)
        at += length
    return l4


def udp_datagram(src: bytes, dst: bytes, sport: int, dport: int, payload: bytes) -> bytes:
    segment = bytearray(struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload)
    struct.pack_into("!H", segment, 6, _l4_checksum(src, dst, PROTO_UDP, bytes(segment))
                     or 0xFFFF)
    return bytes(segment)


def icmp_message(src: bytes, dst: bytes, icmp_type: int, code: int, rest: int,
                 quoted: bytes) -> bytes:
    body = bytearray(struct.pack("!BBHI", icmp_type, code, 0, rest) + quoted)
    if len(src) == 4:
        ck = internet_checksum(bytes(body))
    else:
        ck = _l4_checksum(src, dst, PROTO_ICMPV6, bytes(body))
    struct.pack_into("!H", body, 2, ck)
    return bytes(body)


# -- printing ------------------------------------------------------------------------------
def option_text(opt: RawOption) -> str:
    data = opt.data
    if opt.kind == OPT_NOP:
        return "nop"
    if opt.kind == OPT_EOL:
        return "eol"
    if opt.kind == OPT_MSS and len(data) == 2:
        return f"mss {struct.unpack('!H', data)[0]}"
    if opt.kind == OPT_WS and len(data) == 1:
        return f"wscale {data[0]}"
    if opt.kind == OPT_SACKOK and not data:
        return "sackOK"
    if opt.kind == OPT_SACK and len(data) % 8 == 0:
        blocks = [struct.unpack_from("!II", data, i) for i in range(0, len(data), 8)]
        return "sack " + " ".join(f"{a}:{b}" for a, b in blocks)
    if opt.kind == OPT_TS and len(data) == 8:
        val, ecr = struct.unpack("!II", data)
        return f"TS val {val} ecr {ecr}"
    if opt.kind == OPT_MD5 and len(data) == 16:
        return f"md5 {data.hex()}"
    if opt.kind == OPT_FO:
        return f"FO {data.hex()}" if data else "FO"
    if opt.kind == OPT_EXP and len(data) >= 2 and struct.unpack_from("!H", data)[0] == FO_MAGIC:
        return f"FOEXP {data[2:].hex()}" if len(data) > 2 else "FOEXP"
    if opt.kind in ACCECN_FIELDS and len(data) % 3 == 0 and len(data) <= 9:
        fields = AccEcnOption.parse(opt.kind, data).fields
        names = ACCECN_FIELDS[opt.kind]
        return " ".join(["ECN", *(f"{names[i]} {v}" for i, v in enumerate(fields))])
    return f"opt{opt.kind} {data.hex()}"


def accecn_option(fields: tuple[tuple[str, int], ...]) -> RawOption:
    """A script's ``ECN e1b 1 ceb 0 e0b 1``: the field order names the kind (172 when
    e0b comes first, 174 when e1b does, and 174 for a bare ``ECN``, Linux's kind)."""
    names = tuple(name for name, _ in fields)
    for kind, order in ACCECN_FIELDS.items():
        if names == order[: len(names)] and (names or kind == ACCECN1):
            return RawOption(kind, AccEcnOption(kind, tuple(v for _, v in fields)).data())
    raise ValueError(f"AccECN fields {' '.join(names)} are in neither option's order")


def frame_text(frame: Frame, seq_base: int = 0, ack_base: int = 0, ts_val_base: int = 0,
               at_usecs: int | None = None) -> str:
    """tcpdump-ish one line, in script space when the bases are given: what packetdrill
    prints as its "actual packet"."""
    when = f"{at_usecs / 1e6:9.6f} " if at_usecs is not None else ""
    ecn = f"[{ECN_NAMES[frame.ecn]}] " if frame.ecn else ""
    if frame.protocol == PROTO_TCP:
        seq = (frame.seq - seq_base) & 0xFFFFFFFF
        n = len(frame.payload)
        text = (f"{when}{ecn}{flag_letters(frame.flags) or '-'} {seq}:{(seq + n) & 0xFFFFFFFF}"
                f"({n}) ")
        if frame.flags & 0x10:
            text += f"ack {(frame.ack - ack_base) & 0xFFFFFFFF} "
        text += f"win {frame.win}"
        if frame.urg:
            text += f" urg {frame.urg}"
        if frame.options:
            shown = []
            for opt in frame.options:
                if opt.kind == OPT_TS and len(opt.data) == 8 and ts_val_base:
                    val, ecr = struct.unpack("!II", opt.data)
                    shown.append(f"TS val {(val - ts_val_base) & 0xFFFFFFFF} ecr {ecr}")
                elif opt.kind == OPT_SACK and len(opt.data) % 8 == 0 and ack_base:
                    blocks = [struct.unpack_from("!II", opt.data, i)
                              for i in range(0, len(opt.data), 8)]
                    shown.append("sack " + " ".join(
                        f"{(a - ack_base) & 0xFFFFFFFF}:{(b - ack_base) & 0xFFFFFFFF}"
                        for a, b in blocks))
                else:
                    shown.append(option_text(opt))
            text += " <" + ",".join(shown) + ">"
        return text
    if frame.protocol == PROTO_UDP:
        return f"{when}{ecn}udp ({len(frame.payload)})"
    if frame.protocol in (PROTO_ICMP, PROTO_ICMPV6):
        name = "icmp" if frame.protocol == PROTO_ICMP else "icmpv6"
        return f"{when}{name} type {frame.icmp_type} code {frame.icmp_code}"
    return f"{when}ip proto {frame.protocol}"
