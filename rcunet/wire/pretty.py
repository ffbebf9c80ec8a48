"""tcpdump-style one-line summaries of frames (the format of ``tcpdump -nn -tt -S``).

``summarize(frame, linktype)`` decodes every layer it knows with the project's own
codecs and returns text such as::

    IP 10.0.0.1.34567 > 10.0.0.2.80: Flags [S], seq 123, win 64240,
        options [mss 1460,sackOK,TS val 1 ecr 0,nop,wscale 7], length 0

(one line, wrapped here).  Sequence numbers are absolute (tcpdump's ``-S``), so a
summary depends on its frame only.
TCP options are printed in wire order, as tcpdump does, from the raw option bytes that
``tcp.Repr.parse`` has already validated.  A layer that does not decode ends the line
with ``[layer: reason: detail]`` naming the ``WireError``; nothing else is raised.

With ``verify_checksums`` a bad checksum is marked the way ``tcpdump -v`` marks it
(``cksum 0x1234 (incorrect -> 0xabcd)`` for TCP, ``bad cksum`` for the IPv4 header...).
An 802.1Q tag is shown as ``tcpdump -e`` shows it (``vlan 10, p 0, ethertype IPv4
(0x0800), ``) before the network layer.
"""

from __future__ import annotations

import ipaddress

from rcunet.wire import arp, ethernet, icmpv4, icmpv6, ipv4, ipv6, tcp, udp
from rcunet.wire import checksum as _ck
from rcunet.wire.errors import WireError

Buffer = bytes | bytearray | memoryview

# pcap LINKTYPE_* values (https://www.tcpdump.org/linktypes.html).
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229

_ETHERTYPE_NAMES = {
    ethernet.ETHERTYPE_IPV4: "IPv4",
    ethernet.ETHERTYPE_ARP: "ARP",
    ethernet.ETHERTYPE_IPV6: "IPv6",
}


def format_timestamp(timestamp_ns: int | None) -> str:
    """``seconds.microseconds`` like ``tcpdump -tt``; ``-`` when the capture has none."""
    if timestamp_ns is None:
        return "-"
    seconds, rest = divmod(timestamp_ns, 1_000_000_000)
    return f"{seconds}.{rest // 1000:06d}"


def line(
    timestamp_ns: int | None,
    frame: Buffer,
    linktype: int = LINKTYPE_ETHERNET,
    *,
    verify_checksums: bool = False,
) -> str:
    """Timestamp and summary: one line of ``tcpdump -nn -tt -S`` output."""
    text = summarize(frame, linktype, verify_checksums=verify_checksums)
    return f"{format_timestamp(timestamp_ns)} {text}"


def summarize(
    frame: Buffer, linktype: int = LINKTYPE_ETHERNET, *, verify_checksums: bool = False
) -> str:
    """The summary of one frame of the given pcap link type (no timestamp)."""
    view = memoryview(frame)
    if linktype == LINKTYPE_ETHERNET:
        return _ethernet(view, verify_checksums)
    if linktype == LINKTYPE_RAW:
        return _raw_ip(view, verify_checksums)
    if linktype == LINKTYPE_IPV4:
        return _ipv4(view, verify_checksums)
    if linktype == LINKTYPE_IPV6:
        return _ipv6(view, verify_checksums)
    return f"unsupported link type {linktype}, length {len(view)}"


def _error(layer: str, exc: WireError) -> str:
    return f"[{layer}: {exc}]"


def _ip4_text(addr: bytes) -> str:
    return f"{addr[0]}.{addr[1]}.{addr[2]}.{addr[3]}"


def _ip6_text(addr: bytes) -> str:
    return ipaddress.IPv6Address(bytes(addr)).compressed


def _mac_text(addr: bytes) -> str:
    return ":".join(f"{b:02x}" for b in addr)


def _should_be(data: Buffer, field_at: int, initial: int) -> int:
    """The checksum ``data`` ought to carry in its field at ``field_at``."""
    copy = bytearray(data)
    copy[field_at : field_at + 2] = b"\x00\x00"
    return _ck.internet_checksum(copy, initial)


# ----------------------------------------------------------------------------- link


def _ethernet(view: memoryview, verify: bool) -> str:
    try:
        eth = ethernet.Repr.parse(view)
    except WireError as exc:
        return _error("ethernet", exc)
    prefix = ""
    if eth.vlan is not None:
        name = _ETHERTYPE_NAMES.get(eth.ethertype, "Unknown")
        prefix = f"vlan {eth.vlan}, p {eth.vlan_pcp}, ethertype {name} ({eth.ethertype:#06x}), "
    payload = memoryview(eth.payload)
    if eth.ethertype == ethernet.ETHERTYPE_IPV4:
        return prefix + _ipv4(payload, verify)
    if eth.ethertype == ethernet.ETHERTYPE_IPV6:
        return prefix + _ipv6(payload, verify)
    if eth.ethertype == ethernet.ETHERTYPE_ARP:
        return prefix + _arp(payload)
    return prefix + f"ethertype Unknown ({eth.ethertype:#06x}), length {len(view)}"


def _raw_ip(view: memoryview, verify: bool) -> str:
    if not view:
        return "[ip: truncated: empty packet]"
    version = view[0] >> 4
    if version == 4:
        return _ipv4(view, verify)
    if version == 6:
        return _ipv6(view, verify)
    return f"[ip: bad-version: IP version {version}]"


def _arp(view: memoryview) -> str:
    try:
        message = arp.Repr.parse(view)
    except WireError as exc:
        return "ARP, " + _error("arp", exc)
    if message.operation == arp.REQUEST:
        text = f"Request who-has {_ip4_text(message.target_ip)}"
        if any(message.target_mac):
            text += f" ({_mac_text(message.target_mac)})"
        text += f" tell {_ip4_text(message.sender_ip)}"
    else:
        text = f"Reply {_ip4_text(message.sender_ip)} is-at {_mac_text(message.sender_mac)}"
    return f"ARP, {text}, length {len(view)}"


# ----------------------------------------------------------------------------- IP


def _ipv4(view: memoryview, verify: bool) -> str:
    try:
        packet = ipv4.Repr.parse(view)
    except WireError as exc:
        return _error("ip", exc)
    head = "IP "
    if verify and not packet.checksum_ok:
        header = view[: packet.header_len()]
        should = _should_be(header, 10, 0)
        head = f"IP (bad cksum {packet.checksum:x} (->{should:x})!) "
    src, dst = _ip4_text(packet.src), _ip4_text(packet.dst)
    if packet.frag_offset:
        # Later fragments carry no transport header (tcpdump prints the protocol only).
        return f"{head}{src} > {dst}: ip-proto-{packet.protocol}"
    # A first fragment's transport checksum covers bytes it does not hold.
    check = verify and not packet.more_fragments
    if packet.more_fragments and packet.protocol == udp.PROTOCOL and 8 <= len(packet.payload) \
            < int.from_bytes(packet.payload[4:6], "big"):
        return head + _udp_first_fragment(src, dst, memoryview(packet.payload))
    has_ports, text = _transport(packet.protocol, packet.src, packet.dst, src, dst,
                                 memoryview(packet.payload), check, 4)
    if not has_ports:
        text = f"{src} > {dst}: {text}"
    return f"{head}{text}"


def _ipv6(view: memoryview, verify: bool) -> str:
    try:
        packet = ipv6.Repr.parse(view)
    except WireError as exc:
        return _error("ip6", exc)
    src, dst = _ip6_text(packet.src), _ip6_text(packet.dst)
    payload = memoryview(packet.payload)
    chain = "".join(_extension_text(ext, len(payload)) for ext in packet.extensions)
    fragment = packet.fragment
    if fragment is not None and fragment.offset:
        # Later fragments carry no transport header.
        return f"IP6 {src} > {dst}: {chain.rstrip()}"
    check = verify and fragment is None
    # Like tcpdump: a TCP/UDP line opens with its own address.port pairs, except after
    # extension headers, where the addresses were printed already and only ports follow.
    src_text, dst_text = ("", "") if chain else (src, dst)
    has_ports, text = _transport(packet.next_header, packet.src, packet.dst, src_text,
                                 dst_text, payload, check, 6)
    if chain or not has_ports:
        return f"IP6 {src} > {dst}: {chain}{text}"
    return f"IP6 {text}"


def _extension_text(extension: ipv6.Extension, payload_len: int) -> str:
    if isinstance(extension, ipv6.Fragment):
        return f"frag ({extension.offset}|{payload_len}) "
    if isinstance(extension, ipv6.HopByHop):
        return "HBH "
    if isinstance(extension, ipv6.DestinationOptions):
        return "DSTOPT "
    return f"srcrt (type={extension.routing_type}, segleft={extension.segments_left}) "


# ------------------------------------------------------------------------ transport


def _transport(
    protocol: int,
    src: bytes,
    dst: bytes,
    src_text: str,
    dst_text: str,
    payload: memoryview,
    verify: bool,
    version: int,
) -> tuple[bool, str]:
    """The summary of the transport an IP packet carries, and whether it starts with its
    own ``address.port > address.port:`` (TCP and UDP do)."""
    if protocol == tcp.PROTOCOL:
        return True, _tcp(src_text, dst_text, src, dst, payload, verify)
    if protocol == udp.PROTOCOL:
        return True, _udp(src_text, dst_text, src, dst, payload, verify)
    if protocol == ipv4.PROTO_ICMP and version == 4:
        return False, _icmpv4(payload, verify)
    if protocol == ipv6.PROTO_ICMPV6 and version == 6:
        return False, _icmpv6(payload, src, dst, verify)
    return False, f"ip-proto-{protocol} {len(payload)}"


def _udp_first_fragment(src_text: str, dst_text: str, view: memoryview) -> str:
    """tcpdump's line for a UDP datagram cut by fragmentation: the header is present but
    its length exceeds the bytes of this fragment."""
    sport = int.from_bytes(view[0:2], "big")
    dport = int.from_bytes(view[2:4], "big")
    length = int.from_bytes(view[4:6], "big")
    return (f"{src_text}.{sport} > {dst_text}.{dport}: UDP, bad length "
            f"{length - 8} > {len(view) - 8}")


def _endpoint(address_text: str, port: int) -> str:
    """``address.port``, or the bare port when the address was printed already."""
    return f"{address_text}.{port}" if address_text else str(port)


_TCP_FLAG_CHARS = (
    (tcp.FIN, "F"), (tcp.SYN, "S"), (tcp.RST, "R"), (tcp.PSH, "P"), (tcp.ACK, "."),
    (tcp.URG, "U"), (tcp.ECE, "E"), (tcp.CWR, "W"), (tcp.AE, "e"),
)


def _tcp_flags(flags: int) -> str:
    return "".join(char for bit, char in _TCP_FLAG_CHARS if flags & bit) or "none"


def _tcp(src_text: str, dst_text: str, src: bytes, dst: bytes, view: memoryview,
         verify: bool) -> str:
    try:
        if verify:
            segment = tcp.Repr.parse(view, src, dst)
        else:
            segment = tcp.Repr.parse(view)
    except WireError as exc:
        return f"{src_text} > {dst_text}: " + _error("tcp", exc)
    flags = segment.flags
    parts = [f"{_endpoint(src_text, segment.src_port)} > "
             f"{_endpoint(dst_text, segment.dst_port)}: "
             f"Flags [{_tcp_flags(flags)}]"]
    if segment.checksum_ok is False:
        pseudo = _ck.pseudo_header_sum(src, dst, tcp.PROTOCOL, len(view))
        should = _should_be(view, 16, pseudo)
        parts.append(f"cksum {segment.checksum:#06x} (incorrect -> {should:#06x})")
    length = len(segment.payload)
    if length or flags & (tcp.SYN | tcp.FIN | tcp.RST):
        end = f":{(segment.seq + length) & 0xFFFFFFFF}" if length else ""
        parts.append(f"seq {segment.seq}{end}")
    if flags & tcp.ACK:
        parts.append(f"ack {segment.ack}")
    parts.append(f"win {segment.window}")
    if flags & tcp.URG:
        parts.append(f"urg {segment.urgent}")
    header_len = (view[12] >> 4) * 4
    if header_len > tcp.HEADER_LEN:
        parts.append(f"options [{_tcp_options(view[tcp.HEADER_LEN : header_len])}]")
    parts.append(f"length {length}")
    return ", ".join(parts)


_TCP_OPTION_NAMES = {
    0: "eol", 1: "nop", 2: "mss", 3: "wscale", 4: "sackOK", 5: "sack", 8: "TS",
    19: "md5", 28: "uto", 29: "tcp-ao", 30: "mptcp", 34: "tfo",
}


def _tcp_options(raw: memoryview) -> str:
    """tcpdump's rendering of an option list, in wire order."""
    out: list[str] = []
    at = 0
    end = len(raw)
    while at < end:
        kind = raw[at]
        name = _TCP_OPTION_NAMES.get(kind, f"unknown-{kind}")
        if kind == 0:
            out.append(name)
            break
        if kind == 1:
            out.append(name)
            at += 1
            continue
        if at + 1 >= end or raw[at + 1] < 2 or at + raw[at + 1] > end:
            out.append("[bad opt]")
            break
        data = bytes(raw[at + 2 : at + raw[at + 1]])
        out.append(name + _tcp_option_value(kind, data))
        at += 2 + len(data)
    return ",".join(out)


def _tcp_option_value(kind: int, data: bytes) -> str:
    if kind in (2, 3) and len(data) in (1, 2):
        return f" {int.from_bytes(data, 'big')}"
    if kind == 4 and not data:
        return ""
    if kind == 8 and len(data) == 8:
        return f" val {int.from_bytes(data[:4], 'big')} ecr {int.from_bytes(data[4:], 'big')}"
    if kind == 5 and len(data) % 8 == 0:
        edges = [int.from_bytes(data[i : i + 4], "big") for i in range(0, len(data), 4)]
        pairs = zip(edges[::2], edges[1::2], strict=True)
        blocks = "".join(f"{{{left}:{right}}}" for left, right in pairs)
        return f" {len(data) // 8} {blocks}"
    return f" 0x{data.hex()}" if data else ""


def _udp(src_text: str, dst_text: str, src: bytes, dst: bytes, view: memoryview,
         verify: bool) -> str:
    try:
        if verify:
            datagram = udp.Repr.parse(view, src, dst)
        else:
            datagram = udp.Repr.parse(view)
    except WireError as exc:
        return f"{src_text} > {dst_text}: " + _error("udp", exc)
    note = ""
    if datagram.checksum_ok is False:
        length = udp.HEADER_LEN + len(datagram.payload)
        pseudo = _ck.pseudo_header_sum(src, dst, udp.PROTOCOL, length)
        should = _should_be(view[:length], 6, pseudo) or 0xFFFF
        note = f"[bad udp cksum 0x{datagram.checksum:04x} -> 0x{should:04x}!] "
    ports = f"{_endpoint(src_text, datagram.src_port)} > {_endpoint(dst_text, datagram.dst_port)}"
    return f"{ports}: {note}UDP, length {len(datagram.payload)}"


# ----------------------------------------------------------------------------- ICMP


_UNREACH4 = {
    icmpv4.NET_UNREACHABLE: "net {dst} unreachable",
    icmpv4.HOST_UNREACHABLE: "host {dst} unreachable",
    icmpv4.SOURCE_ROUTE_FAILED: "{dst} unreachable - source route failed",
    icmpv4.NET_UNKNOWN: "net {dst} unreachable - unknown",
    icmpv4.HOST_UNKNOWN: "host {dst} unreachable - unknown",
    icmpv4.HOST_ISOLATED: "{dst} unreachable - source host isolated",
    icmpv4.NET_PROHIBITED: "net {dst} unreachable - admin prohibited",
    icmpv4.HOST_PROHIBITED: "host {dst} unreachable - admin prohibited",
    icmpv4.NET_TOS_UNREACHABLE: "net {dst} unreachable - tos prohibited",
    icmpv4.HOST_TOS_UNREACHABLE: "host {dst} unreachable - tos prohibited",
    icmpv4.ADMIN_PROHIBITED: "host {dst} unreachable - admin prohibited filter",
    icmpv4.HOST_PRECEDENCE_VIOLATION: "host {dst} unreachable - host precedence violation",
    icmpv4.PRECEDENCE_CUTOFF: "host {dst} unreachable - precedence cutoff",
}
_OTHER_ICMP4 = {
    4: "source quench", 5: "redirect", 9: "router advertisement", 10: "router solicitation",
    13: "time stamp query", 14: "time stamp reply", 17: "address mask request",
    18: "address mask reply",
}
_PORT_PROTOCOL_NAMES = {tcp.PROTOCOL: "tcp", udp.PROTOCOL: "udp"}


def _icmpv4(view: memoryview, verify: bool) -> str:
    try:
        message = icmpv4.Repr.parse(view)
    except WireError as exc:
        if exc.reason == "unsupported" and len(view) >= icmpv4.HEADER_LEN:
            name = _OTHER_ICMP4.get(view[0], f"type-#{view[0]}")
            return f"ICMP {name}, length {len(view)}"
        return "ICMP " + _error("icmp", exc)
    text = f"ICMP {_icmpv4_text(message)}, length {len(view)}"
    if verify and not message.checksum_ok:
        should = _should_be(view, 2, 0)
        text += f" (wrong icmp cksum {message.checksum:x} (->{should:x})!)"
    return text


def _icmpv4_text(message: icmpv4.Repr) -> str:
    if message.type == icmpv4.ECHO_REQUEST:
        return f"echo request, id {message.ident}, seq {message.seq}"
    if message.type == icmpv4.ECHO_REPLY:
        return f"echo reply, id {message.ident}, seq {message.seq}"
    if message.type == icmpv4.TIME_EXCEEDED:
        if message.code == icmpv4.REASSEMBLY_TIME_EXCEEDED:
            return "ip reassembly time exceeded"
        return "time exceeded in-transit"
    if message.type == icmpv4.PARAMETER_PROBLEM:
        return f"parameter problem - octet {message.pointer}"
    try:
        flow = message.quoted_flow()
    except WireError as exc:
        return f"unreachable (code {message.code}) " + _error("quoted ip", exc)
    dst = _ip4_text(flow.dst)
    if message.code == icmpv4.PROTOCOL_UNREACHABLE:
        return f"{dst} protocol {flow.protocol} unreachable"
    if message.code == icmpv4.PORT_UNREACHABLE:
        name = _PORT_PROTOCOL_NAMES.get(flow.protocol)
        port = "?" if flow.dst_port is None else str(flow.dst_port)
        if name is None:
            return f"{dst} protocol {flow.protocol} port {port} unreachable"
        return f"{dst} {name} port {port} unreachable"
    if message.code == icmpv4.FRAG_NEEDED:
        mtu = f" (mtu {message.next_mtu})" if message.next_mtu else ""
        return f"{dst} unreachable - need to frag{mtu}"
    template = _UNREACH4.get(message.code, "{dst} unreachable - code " + str(message.code))
    return template.format(dst=dst)


_ICMP6_REDIRECT = 137
_ICMP6_NAMES = {
    icmpv6.DEST_UNREACHABLE: "destination unreachable",
    icmpv6.PACKET_TOO_BIG: "packet too big",
    icmpv6.TIME_EXCEEDED: "time exceeded in-transit",
    icmpv6.PARAMETER_PROBLEM: "parameter problem",
    icmpv6.ECHO_REQUEST: "echo request",
    icmpv6.ECHO_REPLY: "echo reply",
    130: "multicast listener query",
    131: "multicast listener report",
    132: "multicast listener done",
    icmpv6.ROUTER_SOLICIT: "router solicitation",
    icmpv6.ROUTER_ADVERT: "router advertisement",
    icmpv6.NEIGHBOR_SOLICIT: "neighbor solicitation",
    icmpv6.NEIGHBOR_ADVERT: "neighbor advertisement",
    _ICMP6_REDIRECT: "redirect",
    icmpv6.MLDV2_REPORT: "multicast listener report v2",
}
_UNREACH6 = {
    icmpv6.NO_ROUTE: "unreachable route",
    icmpv6.ADMIN_PROHIBITED: "unreachable prohibited",
    icmpv6.BEYOND_SCOPE: "beyond scope",
    icmpv6.ADDRESS_UNREACHABLE: "unreachable address",
    icmpv6.PORT_UNREACHABLE: "unreachable port",
}
_PARAM_PROBLEMS6 = {
    icmpv6.ERRONEOUS_HEADER: "erroneous",
    icmpv6.UNRECOGNIZED_NEXT_HEADER: "next header",
    icmpv6.UNRECOGNIZED_OPTION: "option",
}


def _icmpv6(view: memoryview, src: bytes, dst: bytes, verify: bool) -> str:
    try:
        if verify:
            message = icmpv6.Repr.parse(view, src, dst)
        else:
            message = icmpv6.Repr.parse(view)
    except WireError as exc:
        return "ICMP6, " + _error("icmp6", exc)
    note = ""
    if message.checksum_ok is False:
        pseudo = _ck.pseudo_header_sum_v6(src, dst, icmpv6.PROTOCOL, len(view))
        should = _should_be(view, 2, pseudo)
        note = f"[bad icmp6 cksum {message.checksum:#06x} -> {should:#06x}!] "
    name = _ICMP6_NAMES.get(message.type, f"unknown icmp6 type ({message.type})")
    return f"{note}ICMP6, {name}{_icmpv6_detail(message)}, length {len(view)}"


def _icmpv6_detail(message: icmpv6.Repr) -> str:
    kind, code = message.type, message.code
    if kind in (icmpv6.ECHO_REQUEST, icmpv6.ECHO_REPLY):
        return f", id {message.ident}, seq {message.seq}"
    if kind == icmpv6.NEIGHBOR_SOLICIT:
        return f", who has {_ip6_text(message.target)}"
    if kind == icmpv6.NEIGHBOR_ADVERT:
        return f", tgt is {_ip6_text(message.target)}"
    if kind == icmpv6.PACKET_TOO_BIG:
        return f", mtu {message.mtu}"
    if kind == icmpv6.MLDV2_REPORT:
        return f", {len(message.records)} group record(s)"
    if kind == _ICMP6_REDIRECT and len(message.data) >= 36:
        # Kept verbatim by the codec: reserved(4), target(16), destination(16), options.
        data = bytes(message.data)
        return f", {_ip6_text(data[4:20])} to {_ip6_text(data[20:36])}"
    if kind == icmpv6.PARAMETER_PROBLEM:
        problem = _PARAM_PROBLEMS6.get(code, f"code {code}")
        return f", {problem} - octet {message.pointer}"
    if kind == icmpv6.TIME_EXCEEDED and code == icmpv6.REASSEMBLY_TIME_EXCEEDED:
        return " (reassembly)"
    if kind not in (icmpv6.DEST_UNREACHABLE, icmpv6.TIME_EXCEEDED):
        return ""
    try:
        flow = icmpv6.parse_quoted(message.quoted)
    except WireError as exc:
        return " " + _error("quoted ip6", exc)
    target = _ip6_text(flow.dst)
    if kind == icmpv6.TIME_EXCEEDED:
        return f" for {target}" if code == icmpv6.HOP_LIMIT_EXCEEDED else f", code {code}"
    text = ", " + _UNREACH6.get(code, f"unknown unreach code ({code})")
    if code == icmpv6.PORT_UNREACHABLE:
        name = _PORT_PROTOCOL_NAMES.get(flow.protocol)
        port = "?" if flow.dst_port is None else str(flow.dst_port)
        if name is None:
            return f"{text}, {target} protocol {flow.protocol} port {port} unreachable"
        return f"{text}, {target} {name} port {port}"
    if code == icmpv6.BEYOND_SCOPE:
        return f"{text} {target}, source address {_ip6_text(flow.src)}"
    if code in _UNREACH6:
        return f"{text} {target}"
    return text
