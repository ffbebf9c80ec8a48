"""The IP layer's control messages: ICMP and ICMPv6 input (echo, errors to the
transports, path MTU), ICMP errors we send (rate-limited, RFC 1812 / RFC 4443 quotes),
NDP (neighbour solicitation and advertisement) and IGMP/MLD membership reports: ``Icmp``,
a part ``rcunet.host.ip.IpLayer`` holds (``IpLayer.icmp``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from rcunet.core import neigh as nd
from rcunet.host.interface import Interface, multicast_mac, solicited_node
from rcunet.wire import ethernet, icmpv4, icmpv6, igmp, ipv4, ipv6
from rcunet.wire.addr import ALL_NODES, ANY4, ANY6, LIMITED_BROADCAST, MLDV2_ROUTERS, is_multicast
from rcunet.wire.errors import WireError

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.host.ip import Delivery, IpLayer, Packet

ICMP_QUOTE_V4 = 576 - 20 - 8  # RFC 1812 §4.3.2.3: quote as much as fits in 576 bytes
ICMP_QUOTE_V6 = 1280 - 40 - 8  # RFC 4443 §2.4(c)


#: ``Icmp.echo_listeners``' callables: (family, source address, the echo reply).
EchoListener = Callable[[int, bytes, "icmpv4.Repr | icmpv6.Repr"], None]


class IcmpRateLimit:
    """Token bucket on ICMP errors we send (Linux ``icmp_msgs_per_sec``/``burst``), so a
    flood of bad packets cannot turn the Host into an amplifier."""

    def __init__(self, per_sec: int = 1000, burst: int = 50) -> None:
        self._lock = threading.Lock()
        self._rate = per_sec
        self._burst = burst
        self._tokens = float(burst)
        self._last = 0

    def allow(self, now: int) -> bool:
        with self._lock:
            elapsed = (now - self._last) / 1e9
            self._last = now
            self._tokens = min(self._burst, self._tokens + elapsed * self._rate)
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


class Icmp:
    """The IP layer's ICMP, NDP and membership reports.  It sends through ``ip`` (routing,
    neighbour tables, frames) and is called by it (errors to answer, neighbours to
    solicit).

    Concurrency: ``limit`` is internally locked; ``echo_listeners`` is appended to at
    configuration time and copied before each walk; NDP input updates an interface's
    neighbour table under its ``neigh_lock``; everything else is per packet."""

    def __init__(self, host: Host, ip: IpLayer) -> None:
        self.host = host
        self.ip = ip
        # the host's Counters.inc, bound once (as IpLayer binds it)
        self._count: Callable[..., None] = host.counters.inc
        self.limit = IcmpRateLimit()
        self.echo_listeners: list[EchoListener] = []

    # -- ICMP ----------
    def input4(self, info: Delivery, payload: memoryview) -> None:
        self._count("IcmpInMsgs")
        try:
            msg = icmpv4.Repr.parse(payload)
        except WireError:
            self._count("IcmpInErrors")
            return
        if msg.checksum_ok is False and not info.iface.checksum_offload:
            self._count("IcmpInCsumErrors")
            self._count("IcmpInErrors")
            return
        if msg.type == icmpv4.ECHO_REQUEST:
            self._count("IcmpInEchos")
            if info.to_multicast:
                return  # icmp_echo_ignore_broadcasts=1
            reply = icmpv4.Repr.echo_reply(msg.ident, msg.seq, bytes(msg.data)).build()
            self._count("IcmpOutEchoReps")
            self._count("IcmpOutMsgs")
            self.ip.output(info.dst, info.src, ipv4.PROTO_ICMP, lambda s, d: reply)
        elif msg.type == icmpv4.ECHO_REPLY:
            self._count("IcmpInEchoReps")
            for listener in list(self.echo_listeners):
                listener(4, info.src, msg)
        elif msg.type in icmpv4.ERROR_TYPES:
            self._count("IcmpInDestUnreachs" if msg.type == icmpv4.DEST_UNREACHABLE
                        else "IcmpInTimeExcds")
            try:
                flow = icmpv4.parse_quoted(msg.quoted)
            except WireError:
                self._count("IcmpInErrors")
                return
            if msg.type == icmpv4.DEST_UNREACHABLE and msg.code == icmpv4.FRAG_NEEDED:
                self._pmtu_update(flow.dst, msg.next_mtu or 576)
            handler = self.ip.error_handlers.get(flow.protocol)
            if handler is not None:
                handler(4, msg.type, msg.code, info.src, flow)

    def input6(self, info: Delivery, payload: memoryview) -> None:
        self._count("Icmp6InMsgs")
        try:
            msg = icmpv6.Repr.parse(payload, info.src, info.dst)
        except WireError:
            self._count("Icmp6InErrors")
            return
        if msg.checksum_ok is False and not info.iface.checksum_offload:
            self._count("Icmp6InCsumErrors")
            self._count("Icmp6InErrors")
            return
        kind = msg.type
        if kind == icmpv6.NEIGHBOR_SOLICIT:
            self._ns_input(info, msg)
        elif kind == icmpv6.NEIGHBOR_ADVERT:
            self._na_input(info, msg)
        elif kind == icmpv6.ECHO_REQUEST:
            self._count("Icmp6InEchos")
            reply = icmpv6.Repr.echo_reply(msg.ident, msg.seq, bytes(msg.data))
            src = info.dst if not is_multicast(info.dst) else None
            self._count("Icmp6OutEchoReplies")
            self.ip.output(src, info.src, icmpv6.PROTOCOL,
                        lambda s, d: reply.build(src=s, dst=d))
        elif kind == icmpv6.ECHO_REPLY:
            self._count("Icmp6InEchoReplies")
            for listener in list(self.echo_listeners):
                listener(6, info.src, msg)
        elif kind in icmpv6.ERROR_TYPES:
            self._count("Icmp6InDestUnreachs" if kind == icmpv6.DEST_UNREACHABLE
                        else "Icmp6InPktTooBigs" if kind == icmpv6.PACKET_TOO_BIG
                        else "Icmp6InTimeExcds")
            try:
                flow = icmpv6.parse_quoted(msg.quoted)
            except WireError:
                self._count("Icmp6InErrors")
                return
            if kind == icmpv6.PACKET_TOO_BIG:
                self._pmtu_update(flow.dst, msg.mtu)
            handler = self.ip.error_handlers.get(flow.protocol)
            if handler is not None:
                handler(6, kind, msg.code, info.src, flow)
        else:
            self._count("Icmp6InOther")

    def _pmtu_update(self, dst: bytes, mtu: int) -> None:
        if self.host.pmtu.update(dst, mtu, self.host.now()) is not None:
            self.host.dst_cache.invalidate()

    def send_error(self, offending: bytes | memoryview, family: int, kind: int, code: int,
                        *, mtu: int = 0, pointer: int = 0) -> None:
        """Answer ``offending`` (a whole IP packet) with an ICMP error, unless RFC 1122
        §3.2.2 / RFC 4443 §2.4(e) forbid it (errors about errors, multicast, fragments)."""
        offending = bytes(offending)  # Delivery.packet is a view: copy on this rare path
        try:
            if family == 4:
                original = ipv4.Repr.parse(offending)
                if is_multicast(original.dst) or original.dst == LIMITED_BROADCAST \
                        or original.frag_offset or original.src == ANY4:
                    return
                if original.protocol == ipv4.PROTO_ICMP:
                    inner = icmpv4.Repr.parse(original.payload)
                    if inner.type not in icmpv4.ECHO_TYPES:
                        return
            else:
                original6 = ipv6.Repr.parse(offending)
                if original6.src == ANY6 or (
                        is_multicast(original6.dst) and kind != icmpv6.PACKET_TOO_BIG):
                    return
                if original6.next_header == icmpv6.PROTOCOL:
                    inner6 = icmpv6.Repr.parse(original6.payload)
                    if inner6.type in icmpv6.ERROR_TYPES:
                        return
        except WireError:
            return
        if not self.limit.allow(self.host.now()):
            self._count("RcunetIcmpRateLimited")
            return
        if family == 4:
            quoted = offending[:ICMP_QUOTE_V4]
            if kind == icmpv4.DEST_UNREACHABLE:
                message = icmpv4.Repr.dest_unreachable(code, quoted, next_mtu=mtu)
            elif kind == icmpv4.TIME_EXCEEDED:
                message = icmpv4.Repr.time_exceeded(code, quoted)
            else:
                message = icmpv4.Repr.parameter_problem(pointer, quoted, code)
            self._count("IcmpOutMsgs")
            self._count("IcmpOutDestUnreachs" if kind == icmpv4.DEST_UNREACHABLE
                        else "IcmpOutTimeExcds")
            body = message.build()
            self.ip.output(None, original.src, ipv4.PROTO_ICMP, lambda s, d: body)
        else:
            quoted = offending[:ICMP_QUOTE_V6]
            if kind == icmpv6.PACKET_TOO_BIG:
                message6 = icmpv6.Repr.packet_too_big(mtu, quoted)
            elif kind == icmpv6.PARAMETER_PROBLEM:
                message6 = icmpv6.Repr.parameter_problem(code, pointer, quoted)
            elif kind == icmpv6.TIME_EXCEEDED:
                message6 = icmpv6.Repr.time_exceeded(code, quoted)
            else:
                message6 = icmpv6.Repr.dest_unreachable(code, quoted)
            self._count("Icmp6OutMsgs")
            self._count("Icmp6OutDestUnreachs" if kind == icmpv6.DEST_UNREACHABLE
                        else "Icmp6OutErrors")
            self.ip.output(None, original6.src, icmpv6.PROTOCOL,
                        lambda s, d: message6.build(src=s, dst=d))

    def host_unreachable(self, packet: Packet) -> None:
        if isinstance(packet, tuple):  # gathered pieces that waited for resolution
            packet = b"".join(packet)
        if packet and packet[0] >> 4 == 4:
            self.send_error(packet, 4, icmpv4.DEST_UNREACHABLE, icmpv4.HOST_UNREACHABLE)
        else:
            self.send_error(packet, 6, icmpv6.DEST_UNREACHABLE, icmpv6.ADDRESS_UNREACHABLE)

    def ping(self, dst: bytes, ident: int, seq: int, data: bytes = b"") -> int:
        """Send one echo request (ICMP or ICMPv6 by address family)."""
        if len(dst) == 4:
            body = icmpv4.Repr.echo_request(ident, seq, data).build()
            self._count("IcmpOutEchos")
            return self.ip.output(None, dst, ipv4.PROTO_ICMP, lambda s, d: body)
        request = icmpv6.Repr.echo_request(ident, seq, data)
        self._count("Icmp6OutEchos")
        return self.ip.output(None, dst, icmpv6.PROTOCOL,
                           lambda s, d: request.build(src=s, dst=d))

    # -- NDP ----------
    def _ns_input(self, info: Delivery, msg: icmpv6.Repr) -> None:
        iface = info.iface
        if info.ttl != 255 or not iface.has_address(msg.target):
            self._count("Icmp6InNeighborSolicits")
            return  # RFC 4861 §7.1.1: hop limit 255; not one of our addresses
        self._count("Icmp6InNeighborSolicits")
        lladdr = next((o.addr for o in msg.options if isinstance(o, icmpv6.SourceLinkAddr)), None)
        actions: list[nd.Action] = []
        if lladdr is not None and info.src != ANY6:
            with iface.neigh_lock:
                actions = iface.neigh6.solicitation_received(info.src, lladdr, self.host.now())
                self.ip.arm_neigh_locked(iface, 6)
        if iface.mac is None:
            return
        dst = ALL_NODES if info.src == ANY6 else info.src
        advert = icmpv6.Repr.neighbor_advert(
            msg.target, solicited=dst != ALL_NODES, override=True,
            options=(icmpv6.TargetLinkAddr(iface.mac),))
        self._count("Icmp6OutNeighborAdvertisements")
        self._send_ndp(iface, msg.target, dst, advert, lladdr)
        self.ip.run_neigh_actions(iface, 6, actions)

    def _na_input(self, info: Delivery, msg: icmpv6.Repr) -> None:
        self._count("Icmp6InNeighborAdvertisements")
        if info.ttl != 255:
            return
        iface = info.iface
        lladdr = next((o.addr for o in msg.options if isinstance(o, icmpv6.TargetLinkAddr)), None)
        with iface.neigh_lock:
            actions = iface.neigh6.advertisement_received(
                msg.target, lladdr, self.host.now(),
                solicited=bool(msg.flags & icmpv6.NA_SOLICITED),
                override=bool(msg.flags & icmpv6.NA_OVERRIDE))
            self.ip.arm_neigh_locked(iface, 6)
        self.ip.run_neigh_actions(iface, 6, actions)

    def send_ns(self, iface: Interface, target: bytes, lladdr: bytes | None) -> None:
        src = self.ip.select_source(iface, target)
        if src is None or iface.mac is None:
            return
        dst = target if lladdr is not None else solicited_node(target)
        solicit = icmpv6.Repr.neighbor_solicit(target, (icmpv6.SourceLinkAddr(iface.mac),))
        self._count("Icmp6OutNeighborSolicits")
        self._send_ndp(iface, src, dst, solicit, lladdr)

    def _send_ndp(self, iface: Interface, src: bytes, dst: bytes, msg: icmpv6.Repr,
                  lladdr: bytes | None) -> None:
        body = msg.build(src=src, dst=dst)
        packet = ipv6.Repr(src, dst, icmpv6.PROTOCOL, body, hop_limit=255).build()
        self.ip.send_frame(iface, lladdr or multicast_mac(dst), ethernet.ETHERTYPE_IPV6, packet)

    def join_solicited_node(self, iface: Interface, addr: bytes) -> None:
        group = solicited_node(addr)
        iface.join_group(group)

    # -- group membership reports ----------
    def report_membership(self, iface: Interface, group: bytes, joined: bool) -> None:
        """Announce a join (or leave) on an Ethernet link: IGMPv2 report/leave for IPv4,
        an MLDv2 report (CHANGE_TO_EXCLUDE {} / CHANGE_TO_INCLUDE {}) for IPv6."""
        if not iface.is_ethernet or iface is self.host.loopback:
            return
        if len(group) == 4:
            kind = igmp.V2_REPORT if joined else igmp.LEAVE_GROUP
            dst = group if joined else igmp.ALL_ROUTERS
            body = igmp.Repr(kind, group).build()
            src = self.ip.select_source(iface, dst) or ANY4
            packet = ipv4.Repr(src, dst, igmp.PROTOCOL, body, ttl=1,
                               options=b"\x94\x04\x00\x00").build()  # Router Alert, RFC 2113
            self.ip.send_frame(iface, multicast_mac(dst), ethernet.ETHERTYPE_IPV4, packet)
            self._count("IgmpOutReports" if joined else "IgmpOutLeaves")
        else:
            mode = icmpv6.CHANGE_TO_EXCLUDE if joined else icmpv6.CHANGE_TO_INCLUDE
            report = icmpv6.Repr(icmpv6.MLDV2_REPORT, 0,
                                 records=(icmpv6.McastRecord(mode, group),))
            src = self.ip.select_source(iface, ALL_NODES) or ANY6
            body = report.build(src=src, dst=MLDV2_ROUTERS)
            hop_by_hop = ipv6.HopByHop(icmpv6.PROTOCOL, ((ipv6.OPT_ROUTER_ALERT, b"\x00\x00"),))
            packet6 = ipv6.Repr(src, MLDV2_ROUTERS, icmpv6.PROTOCOL, body, hop_limit=1,
                                extensions=(hop_by_hop,)).build()
            self.ip.send_frame(iface, multicast_mac(MLDV2_ROUTERS), ethernet.ETHERTYPE_IPV6,
                               packet6)
            self._count("Icmp6OutMLDv2Reports")
