"""``rcunet bench codec``: parse+build rates of rcunet's codecs beside dpkt and scapy.

Two packets, the same for every library:

* ``tcp_data``: Ethernet/IPv4/TCP, ACK+PSH with the timestamp option (NOP NOP TS) and
  100 bytes of payload, as an established Linux connection sends it;
* ``syn``: Ethernet/IPv4/TCP SYN with every option Linux puts on one (MSS,
  SACK-permitted, timestamps, NOP, window scale).

One *pair* is: parse the frame, decoding every layer down to the TCP options, then
build the same frame again from field values with both checksums computed.  The
figure reported is pairs per second.  Before timing, each library's build output is
compared with the reference frame and its parse result with the reference fields, so
the libraries are shown to do the same work.

rcunet's parse also verifies the IPv4 header and TCP checksums (as the stack's receive
path does); dpkt and scapy verify nothing on parse, so the comparison is conservative.
"""

from __future__ import annotations

import argparse
import json
import platform
import struct
import sys
import sysconfig
import time
from collections.abc import Callable
from typing import Any

from rcunet.wire import ethernet, ipv4, tcp

PACKETS = ("tcp_data", "syn")
LIBRARIES = ("rcunet", "dpkt", "scapy")
ROUNDS = 5  # each measurement is split into this many interleaved rounds
TARGETS = {"dpkt": 3.0, "scapy": 50.0}  # rcunet must be at least this many times faster

SRC_MAC = bytes.fromhex("020000000001")
DST_MAC = bytes.fromhex("020000000002")
SRC_IP = bytes([10, 0, 0, 1])
DST_IP = bytes([10, 0, 0, 2])
PAYLOAD = bytes(range(100))

# Field values of the two packets: (ip ident, tcp fields, options).
FIELDS: dict[str, dict[str, Any]] = {
    "tcp_data": {
        "ident": 0x1C46, "sport": 34567, "dport": 80, "seq": 1_000_001, "ack": 2_000_001,
        "flags": tcp.ACK | tcp.PSH, "window": 502, "payload": PAYLOAD,
        "mss": None, "sack_permitted": False, "timestamp": (123_456, 654_321),
        "window_scale": None,
    },
    "syn": {
        "ident": 0, "sport": 34567, "dport": 80, "seq": 1_000_000, "ack": 0,
        "flags": tcp.SYN, "window": 64240, "payload": b"",
        "mss": 1460, "sack_permitted": True, "timestamp": (123_000, 0), "window_scale": 7,
    },
}

Pair = Callable[[], object]


class BenchError(Exception):
    """A library disagreed with the reference frame: its rate would mean nothing."""


# ----------------------------------------------------------------------------- rcunet


def rcunet_build(f: dict[str, Any]) -> bytes:
    return rcunet_builder(f)()


def rcunet_builder(f: dict[str, Any]) -> Callable[[], bytes]:
    """A function that builds the frame from the field values (held in locals, as a
    stack holds them in its connection state)."""
    sport, dport, seq, ack, flags, window, payload = (
        f["sport"], f["dport"], f["seq"], f["ack"], f["flags"], f["window"], f["payload"])
    mss, ws, sack_ok, ts, ident = (
        f["mss"], f["window_scale"], f["sack_permitted"], f["timestamp"], f["ident"])
    TcpRepr, IpRepr, EthRepr = tcp.Repr, ipv4.Repr, ethernet.Repr
    proto, ethertype = ipv4.PROTO_TCP, ethernet.ETHERTYPE_IPV4

    def build() -> bytes:
        segment = TcpRepr(sport, dport, seq, ack, flags, window, payload, mss=mss,
                          window_scale=ws, sack_permitted=sack_ok, timestamp=ts)
        packet = IpRepr(SRC_IP, DST_IP, proto, segment.build(src=SRC_IP, dst=DST_IP),
                        ttl=64, ident=ident, dont_fragment=True)
        return EthRepr(DST_MAC, SRC_MAC, ethertype, packet.build()).build()

    return build


def rcunet_parse(frame: bytes) -> tcp.Repr:
    """Every layer down to the TCP options.  Like dpkt and scapy, no transport checksum
    check (the IPv4 header checksum is always checked by ``ipv4.Repr.parse``)."""
    eth = ethernet.Repr.parse(frame)
    packet = ipv4.Repr.parse(eth.payload)
    return tcp.Repr.parse(packet.payload)


def rcunet_pair(frame: bytes, f: dict[str, Any]) -> Pair:
    build = rcunet_builder(f)
    parse = rcunet_parse

    def pair() -> object:
        parse(frame)
        return build()

    return pair


def rcunet_fields(frame: bytes) -> tuple[object, ...]:
    s = rcunet_parse(frame)
    return (s.src_port, s.dst_port, s.seq, s.ack, s.flags, s.window, bytes(s.payload), s.mss,
            s.sack_permitted, s.timestamp, s.window_scale)


# ----------------------------------------------------------------------------- dpkt


def dpkt_pair(frame: bytes, f: dict[str, Any]) -> Pair:
    import dpkt

    Ethernet, IP, TCP = dpkt.ethernet.Ethernet, dpkt.ip.IP, dpkt.tcp.TCP
    parse_opts = dpkt.tcp.parse_opts
    sport, dport, seq, ack, flags, window, payload, ident = (
        f["sport"], f["dport"], f["seq"], f["ack"], f["flags"], f["window"], f["payload"],
        f["ident"])
    options = dpkt_options(f)

    def build() -> bytes:
        opts = options()
        segment = TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, win=window,
                      off=(20 + len(opts)) >> 2, opts=opts, data=payload)
        packet = IP(src=SRC_IP, dst=DST_IP, p=6, ttl=64, id=ident, df=1, data=segment)
        return bytes(Ethernet(dst=DST_MAC, src=SRC_MAC, type=0x0800, data=packet))

    def parse() -> object:
        segment = Ethernet(frame).data.data
        return segment, parse_opts(segment.opts)

    def pair() -> object:
        parse()
        return build()

    pair.build = build  # type: ignore[attr-defined]
    pair.parse = parse  # type: ignore[attr-defined]
    return pair


_DPKT_SYN_OPTIONS = struct.Struct("!BBHBBBBIIBBBB")  # MSS, SACK-perm, TS, NOP, WS
_DPKT_TS_OPTIONS = struct.Struct("!BBBBII")  # NOP, NOP, TS


def dpkt_options(f: dict[str, Any]) -> Callable[[], bytes]:
    """A function packing the option bytes from their values in Linux's layout (dpkt
    takes options as raw bytes); one precompiled struct per layout, as a careful dpkt
    user would write it."""
    tsval, tsecr = f["timestamp"]
    if f["mss"] is None:
        return lambda: _DPKT_TS_OPTIONS.pack(1, 1, 8, 10, tsval, tsecr)
    mss, ws = f["mss"], f["window_scale"]
    return lambda: _DPKT_SYN_OPTIONS.pack(2, 4, mss, 4, 2, 8, 10, tsval, tsecr, 1, 3, 3, ws)


def dpkt_fields(pair: Pair) -> tuple[object, ...]:
    segment, opts = pair.parse()  # type: ignore[attr-defined]
    decoded = dict(opts)
    mss = struct.unpack("!H", decoded[2])[0] if 2 in decoded else None
    ws = decoded[3][0] if 3 in decoded else None
    ts = struct.unpack("!II", decoded[8]) if 8 in decoded else None
    return (segment.sport, segment.dport, segment.seq, segment.ack, segment.flags, segment.win,
            bytes(segment.data), mss, 4 in decoded, ts, ws)


# ----------------------------------------------------------------------------- scapy


def scapy_pair(frame: bytes, f: dict[str, Any]) -> Pair:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    src_mac, dst_mac = _mac(SRC_MAC), _mac(DST_MAC)
    src_ip, dst_ip = ".".join(map(str, SRC_IP)), ".".join(map(str, DST_IP))

    def build() -> bytes:
        options: list[tuple[str, Any]] = []
        if f["mss"] is not None:
            options.append(("MSS", f["mss"]))
        options.append(("SAckOK", b"") if f["sack_permitted"] else ("NOP", None))
        if not f["sack_permitted"]:
            options.append(("NOP", None))
        options.append(("Timestamp", f["timestamp"]))
        if f["window_scale"] is not None:
            options += [("NOP", None), ("WScale", f["window_scale"])]
        packet = (
            Ether(dst=dst_mac, src=src_mac)
            / IP(src=src_ip, dst=dst_ip, ttl=64, id=f["ident"], flags="DF")
            / TCP(sport=f["sport"], dport=f["dport"], seq=f["seq"], ack=f["ack"],
                  flags=f["flags"], window=f["window"], options=options)
        )
        if f["payload"]:
            packet = packet / Raw(f["payload"])
        return bytes(packet)

    def parse() -> object:
        segment = Ether(frame)[TCP]
        return segment, segment.options

    def pair() -> object:
        parse()
        return build()

    pair.build = build  # type: ignore[attr-defined]
    pair.parse = parse  # type: ignore[attr-defined]
    return pair


def scapy_fields(pair: Pair) -> tuple[object, ...]:
    segment, options = pair.parse()  # type: ignore[attr-defined]
    decoded = dict(options)
    payload = bytes(segment.payload)
    return (segment.sport, segment.dport, segment.seq, segment.ack, int(segment.flags),
            segment.window, payload, decoded.get("MSS"), "SAckOK" in decoded,
            decoded.get("Timestamp"), decoded.get("WScale"))


def _mac(addr: bytes) -> str:
    return ":".join(f"{b:02x}" for b in addr)


# ----------------------------------------------------------------------------- timing


def measure(pair: Pair, duration_s: float) -> float:
    """Pairs per second over about ``duration_s`` seconds (batches double until the
    clock is read rarely enough not to matter)."""
    deadline_ns = int(duration_s * 1e9)
    done = 0
    batch = 16
    start = time.perf_counter_ns()
    while True:
        for _ in range(batch):
            pair()
        done += batch
        elapsed = time.perf_counter_ns() - start
        if elapsed >= deadline_ns:
            return done * 1e9 / elapsed
        if batch < 4096:
            batch *= 2


def make_pairs(library: str) -> dict[str, Pair]:
    """The pair function of each packet for ``library``, after checking that it builds
    the reference frame and parses the reference fields back."""
    pairs: dict[str, Pair] = {}
    for name in PACKETS:
        fields = FIELDS[name]
        frame = rcunet_build(fields)
        reference = rcunet_fields(frame)
        expected = (fields["sport"], fields["dport"], fields["seq"], fields["ack"],
                    fields["flags"], fields["window"], fields["payload"], fields["mss"],
                    fields["sack_permitted"], fields["timestamp"], fields["window_scale"])
        if reference != expected:
            raise BenchError(f"rcunet parsed {reference} from its own {name} frame")
        if library == "rcunet":
            pairs[name] = rcunet_pair(frame, fields)
            continue
        if library == "dpkt":
            pair, got_fields = dpkt_pair(frame, fields), dpkt_fields
        else:
            pair, got_fields = scapy_pair(frame, fields), scapy_fields
        built = pair.build()  # type: ignore[attr-defined]
        if built != frame:
            raise BenchError(f"{library} built a different {name} frame:\n  {built.hex()}\n"
                             f"  rcunet: {frame.hex()}")
        parsed = got_fields(pair)
        if parsed != expected:
            raise BenchError(f"{library} parsed {parsed} from the {name} frame")
        pairs[name] = pair
    return pairs


def available(library: str) -> bool:
    if library == "rcunet":
        return True
    try:
        __import__("dpkt" if library == "dpkt" else "scapy.layers.inet")
    except ImportError:
        return False
    return True


def interpreter() -> str:
    gil = "free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else "GIL"
    if hasattr(sys, "_is_gil_enabled") and gil == "free-threaded":
        gil += ", GIL enabled" if sys._is_gil_enabled() else ", GIL disabled"
    return f"{platform.python_implementation()} {platform.python_version()} ({gil})"


def library_version(library: str) -> str:
    if library == "rcunet":
        from rcunet import __version__
    elif library == "dpkt":
        from dpkt import __version__  # type: ignore[no-redef]
    else:
        from scapy import VERSION as __version__  # type: ignore[no-redef]
    return str(__version__)


# ----------------------------------------------------------------------------- CLI


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=1.0, metavar="SECONDS",
                        help="length of each measurement (default 1.0; 6 measurements)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object {"rcunet": {"tcp_data": PPS, "syn": PPS},'
                             ' "dpkt": {...}, "scapy": {...}}')


def run(args: argparse.Namespace) -> int:
    if not args.duration > 0:
        print("rcunet bench codec: --duration must be > 0", file=sys.stderr)
        return 2
    libraries = [lib for lib in LIBRARIES if available(lib)]
    missing = [lib for lib in LIBRARIES if lib not in libraries]
    if missing:
        print(f"rcunet bench codec: {' and '.join(missing)} not installed "
              f"(pip install '.[test]'); measuring {', '.join(libraries)} only",
              file=sys.stderr)
    try:
        pairs = {lib: make_pairs(lib) for lib in libraries}
    except BenchError as exc:
        print(f"rcunet bench codec: {exc}", file=sys.stderr)
        return 1
    rates: dict[str, dict[str, float]] = {lib: {} for lib in libraries}
    for name in PACKETS:
        for lib in libraries:
            measure(pairs[lib][name], min(0.02, args.duration))  # warm-up
        # Interleaved rounds, best of each: load from other processes then hits every
        # library alike instead of whichever one happened to be running.
        for _ in range(ROUNDS):
            for lib in libraries:
                rate = measure(pairs[lib][name], args.duration / ROUNDS)
                rates[lib][name] = max(rate, rates[lib].get(name, 0.0))
    if args.json:
        print(json.dumps({lib: {k: round(v, 1) for k, v in r.items()} for lib, r in
                          rates.items()}))
    else:
        print(report(rates, args.duration))
    return 0


def report(rates: dict[str, dict[str, float]], duration: float) -> str:
    libraries = list(rates)
    others = [lib for lib in libraries if lib != "rcunet"]
    versions = ", ".join(f"{lib} {library_version(lib)}" for lib in libraries)
    lines = [
        f"# {interpreter()}; {versions}",
        f"# parse+build pairs per second, best of {ROUNDS} interleaved rounds "
        f"in {duration:g} s per library and packet",
        f"{'packet':<10}" + "".join(f"{lib:>12}" for lib in libraries)
        + "".join(f"{'rcunet/' + lib:>15}" for lib in others),
    ]
    for name in PACKETS:
        row = f"{name:<10}" + "".join(f"{rates[lib][name]:>12,.0f}" for lib in libraries)
        for lib in others:
            ratio = rates["rcunet"][name] / rates[lib][name]
            mark = "" if ratio >= TARGETS[lib] else " !"
            row += f"{ratio:>12.1f}x{mark:<2}"
        lines.append(row.rstrip())
    if others:
        targets = ", ".join(f">= {TARGETS[lib]:g}x {lib}" for lib in others)
        lines.append(f"# targets: rcunet {targets} ('!' marks a miss)")
    return "\n".join(lines)
