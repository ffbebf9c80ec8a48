"""The Host's data path below the transports: Ethernet, ARP and NDP, IPv4 and IPv6 input
and output, forwarding, fragmentation and reassembly, ICMP and ICMPv6, IGMP/MLD reports.

Every received frame enters ``link_input``.  A malformed packet is a counted drop
(``WireError`` -> the counter named after the layer, e.g. ``IpInHdrErrors``), never an
exception out of a worker.  Output goes ``output_ip`` -> route (pinned dst entry) ->
fragmentation -> neighbour resolution -> link.
"""

from __future__ import annotations

import itertools
import struct
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from rcunet.core import neigh as nd
from rcunet.core.ip.forward import (
    BeyondScope,
    HopLimitExceeded,
    PacketTooBig,
    forward_ipv4,
    forward_ipv6,
)
from rcunet.core.ip.fragment import FragmentationNeeded, fragment_ipv4, fragment_ipv6
from rcunet.core.ip.reassembly import Ipv4Reassembler, Ipv6Reassembler, ParameterProblem
from rcunet.host.icmp import Icmp
from rcunet.host.interface import Interface, multicast_mac
from rcunet.host.timers import Timer
from rcunet.wire import arp, ethernet, icmpv4, icmpv6, igmp, ipv4, ipv6
from rcunet.wire._common import Buffer, new_tuple
from rcunet.wire.addr import (
    ALL_NODES,
    ANY4,
    LIMITED_BROADCAST,
    is_link_local6,
    is_multicast,
    is_multicast4,
)
from rcunet.wire.errors import WireError

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.host.routecache import DstEntry

_FLOW_V4 = struct.Struct("!4s4sHH")
#: An Ethernet header's destination and EtherType (the source is not needed on input).
_ETH_DST_TYPE = struct.Struct("!6s6xH")
_IPV4_HLEN = ipv4.HEADER_LEN


#: A packet on the output path: bytes, or the pieces ``output_gather`` joins only when the
#: frame is made (link header first).
Packet = bytes | tuple[Buffer, ...]


class Delivery(NamedTuple):
    """What a transport handler learns about the packet that carried its payload."""

    iface: Interface
    src: bytes
    dst: bytes
    protocol: int
    ttl: int
    to_multicast: bool  # multicast or broadcast destination
    #: The whole IP packet (for ICMP errors that quote it): a view of the received frame,
    #: which is immutable bytes (no per-packet copy); ``bytes(packet)`` to keep it.
    packet: bytes | memoryview


Handler = Callable[[Delivery, memoryview], None]
ErrorHandler = Callable[[int, int, int, bytes, "icmpv4.QuotedFlow | icmpv6.QuotedFlow"], None]


class IpLayer:
    """The Host's link and IP layers; ICMP, NDP and membership reports are ``icmp``, an
    ``rcunet.host.icmp.Icmp`` it holds.

    Concurrency: reassemblers are guarded by ``_frag_lock``; the neighbour tables by
    their interface's ``neigh_lock``; the ident counter is an itertools.count (each
    ``next`` one atomic step); everything else is per packet."""

    def __init__(self, host: Host) -> None:
        self.host = host
        # The host's Counters.inc itself, bound once (Host makes its counters before its
        # IpLayer and never replaces them): a count is one call, not two
        self._count: Callable[..., None] = host.counters.inc
        self.handlers: dict[int, Handler] = {}  # protocol -> transport input (config time)
        self.error_handlers: dict[int, ErrorHandler] = {}
        self._frag_lock = threading.Lock()
        tuning = host.tuning
        timeout = int(tuning.ipfrag_time * 1e9)
        self.reasm4 = Ipv4Reassembler(tuning.ipfrag_high_thresh, timeout)  # guarded-by: _frag_lock
        self.reasm6 = Ipv6Reassembler(tuning.ipfrag_high_thresh, timeout)  # guarded-by: _frag_lock
        self._reasm_timer: Timer | None = None  # guarded-by: _frag_lock
        # the IPv4 Identification counter: next() of an itertools.count is one atomic
        # step (no lost or repeated value across threads), the low 16 bits go out
        self._idents = itertools.count((host.random_u32() & 0xFFFF) + 1)
        self._neigh_timers: dict[tuple[int, int], Timer] = {}  # guarded-by: neigh_lock
        self.icmp = Icmp(host, self)

    # -- helpers ----------
    def flow_hash(self, iface: Interface, frame: bytes) -> int:
        """RSS: a hash of addresses and ports, so one flow always lands on one queue."""
        offset = 14 if iface.is_ethernet else 0
        if len(frame) >= offset + 24 and frame[offset] >> 4 == 4:
            return hash(frame[offset + 12 : offset + 24])
        if len(frame) >= offset + 44:
            return hash(frame[offset + 8 : offset + 44])
        return 0

    def next_ident(self) -> int:
        return next(self._idents) & 0xFFFF

    def is_local(self, addr: bytes) -> bool:
        return addr in self.host.local_addrs  # atomic: one attribute load

    def is_broadcast(self, addr: bytes) -> bool:
        """The limited broadcast or the directed broadcast of one of our subnets."""
        if addr == LIMITED_BROADCAST:
            return True
        return addr in self.host.broadcast_addrs

    def select_source(self, iface: Interface, dst: bytes) -> bytes | None:
        """Source address for ``dst`` out of ``iface`` (RFC 6724 in brief: same family,
        link-local only for link-local destinations, else prefer global scope)."""
        family = 4 if len(dst) == 4 else 6
        candidates = iface.addresses_of(family)
        if not candidates:
            candidates = [a for i in self.host.interfaces.values() for a in i.addresses_of(family)]
        if family == 6:
            # a link-local destination, or a multicast one of link scope (ff02::/16 etc.)
            link_local_dst = is_link_local6(dst) or (dst[0] == 0xFF and dst[1] & 0x0F == 2)
            scoped = [a for a in candidates if is_link_local6(a.addr) == link_local_dst]
            candidates = scoped or candidates
        for address in candidates:  # prefer the address whose subnet holds dst
            if _same_subnet(address.addr, dst, address.prefix_len):
                return address.addr
        return candidates[0].addr if candidates else None

    def handler_for(self, family: int, protocol: int) -> Handler | None:
        """The transport handler of ``protocol`` for ``family`` (4 or 6): one registered
        for that family alone, else one registered for both (inet_protos/inet6_protos)."""
        handlers = self.handlers  # atomic: one attribute load and dict.get
        return handlers.get((family << 8) | protocol) or handlers.get(protocol)

    def _accept_v4(self, iface: Interface, dst: bytes, data: memoryview,
                   link_multicast: bool, packet: ipv4.Repr | None = None) -> bool | None:
        """Whether this host takes an IPv4 packet for ``dst`` received on ``iface``
        (ip_route_input_noref's local/broadcast/multicast decision): True for a
        multicast group joined on ``iface`` (or 224.0.0.1) or a broadcast, False for one
        of our unicast addresses.  Anything else is handled here and gives None: a group
        not joined is IpInAddrErrors, a unicast packet for another host is forwarded
        (``packet``: its parse, if the caller has one) unless it came as a link-layer
        broadcast."""
        if is_multicast4(dst):
            if dst in iface.groups or dst == igmp.ALL_HOSTS:
                return True
            self._count("IpInAddrErrors")
            return None
        # atomic: one attribute load of local_addrs (a set republished whole by address
        # changes)
        if _broadcast_on(iface, dst):
            return True
        if dst in self.host.local_addrs:
            return False
        if link_multicast:
            self._count("IpInAddrErrors")  # Linux drops L2-broadcast frames not for us
            return None
        self._forward_v4(iface, packet if packet is not None else ipv4.Repr.parse(data), data)
        return None

    # -- link input ----------
    def link_input(self, iface: Interface, frame: bytes) -> None:
        mac = iface.mac
        if mac is None:  # not is_ethernet
            self._ip_input(iface, frame, link_multicast=False)
            return
        # The common frame, untagged IPv4 or IPv6, read with one unpack and no Repr (for
        # these EtherTypes ethernet.Repr.parse checks only the length); everything else
        # (VLAN tags, ARP, runts, bad EtherTypes) goes through the codec.
        if len(frame) >= ethernet.HEADER_LEN:
            dst, ethertype = _ETH_DST_TYPE.unpack_from(frame)
            if ethertype == ethernet.ETHERTYPE_IPV4 or ethertype == ethernet.ETHERTYPE_IPV6:
                link_multicast = dst[0] & 1 == 1
                if not link_multicast and dst != mac:
                    self._count("RcunetEthOtherHost")  # PACKET_OTHERHOST: not for us
                    return
                self._ip_input(iface, memoryview(frame)[ethernet.HEADER_LEN:],
                               link_multicast=link_multicast)
                return
        self._link_input_parsed(iface, mac, frame)

    def _link_input_parsed(self, iface: Interface, mac: bytes, frame: bytes) -> None:
        """Any Ethernet frame, through the codec; ``mac`` is ``iface``'s."""
        try:
            eth = ethernet.Repr.parse(frame)
        except WireError:
            self._count("RcunetEthInErrors")
            return
        dst = eth.dst
        link_multicast = dst[0] & 1 == 1
        if not link_multicast and dst != mac:
            self._count("RcunetEthOtherHost")  # PACKET_OTHERHOST: not for us
            return
        ethertype = eth.ethertype
        if ethertype == ethernet.ETHERTYPE_IPV4 or ethertype == ethernet.ETHERTYPE_IPV6:
            # a parsed frame's payload is a view of it already: memoryview() adds no copy
            self._ip_input(iface, memoryview(eth.payload), link_multicast=link_multicast)
        elif ethertype == ethernet.ETHERTYPE_ARP:
            self._arp_input(iface, mac, eth)
        else:
            self._count("RcunetEthUnknownType")

    def _ip_input(self, iface: Interface, data: bytes | memoryview, *,
                  link_multicast: bool) -> None:
        """IPv4 or IPv6: the version nibble decides (either EtherType, or no link
        header at all), as Linux's tun and loopback do."""
        if len(data) and data[0] >> 4 == 6:
            self._ipv6_input(iface, data)
        else:
            self._ipv4_input(iface, data, link_multicast)

    # -- ARP ----------
    def _arp_input(self, iface: Interface, mac: bytes, eth: ethernet.Repr) -> None:
        try:
            msg = arp.Repr.parse(eth.payload)
        except WireError:
            self._count("RcunetArpInErrors")
            return
        now = self.host.now()
        target_is_ours = iface.has_address(msg.target_ip)
        with iface.neigh_lock:
            table = iface.neigh4
            if target_is_ours and msg.operation == arp.REQUEST:
                actions = table.solicitation_received(msg.sender_ip, msg.sender_mac, now)
            else:
                gratuitous = msg.sender_ip == msg.target_ip
                actions = list(table.arp_received(
                    msg.sender_ip, msg.sender_mac, now,
                    reply_to_us=msg.operation == arp.REPLY and target_is_ours,
                    gratuitous=gratuitous))
            self.arm_neigh_locked(iface, 4)
        if target_is_ours and msg.operation == arp.REQUEST:
            reply = arp.Repr(arp.REPLY, mac, msg.target_ip, msg.sender_mac,
                             msg.sender_ip)
            self.send_frame(iface, msg.sender_mac, ethernet.ETHERTYPE_ARP, reply.build())
            self._count("RcunetArpOutReplies")
        self.run_neigh_actions(iface, 4, actions)

    def _send_arp_request(self, iface: Interface, target: bytes, lladdr: bytes | None) -> None:
        mac = iface.mac
        assert mac is not None, "neighbours are resolved on Ethernet interfaces only"
        src = self.select_source(iface, target) or ANY4
        request = arp.Repr(arp.REQUEST, mac, src, bytes(6), target)
        self.send_frame(iface, lladdr or ethernet.BROADCAST, ethernet.ETHERTYPE_ARP,
                        request.build())
        self._count("RcunetArpOutRequests")

    # -- neighbours ----------
    def _neigh_table(self, iface: Interface, family: int) -> nd.NeighbourTable:
        return iface.neigh4 if family == 4 else iface.neigh6

    def arm_neigh_locked(self, iface: Interface, family: int) -> None:
        """Schedule the table's next deadline.  Caller holds ``iface.neigh_lock``."""
        deadline = self._neigh_table(iface, family).next_deadline()
        if deadline is None:
            return
        key = (iface.ifindex, family)
        timer = self._neigh_timers.get(key)
        if timer is not None and not timer.cancelled and timer.at <= deadline:
            return
        if timer is not None:
            timer.cancel()
        self._neigh_timers[key] = self.host.timers.schedule(
            deadline, lambda now: self._neigh_timer(iface, family, now))

    def _neigh_timer(self, iface: Interface, family: int, now: int) -> None:
        with iface.neigh_lock:
            self._neigh_timers.pop((iface.ifindex, family), None)
            actions = self._neigh_table(iface, family).poll(now)
            self.arm_neigh_locked(iface, family)
        self.run_neigh_actions(iface, family, actions)

    def run_neigh_actions(self, iface: Interface, family: int,
                          actions: Iterable[nd.Action]) -> None:
        """Carry out neighbour actions with no lock held."""
        for action in actions:
            if isinstance(action, nd.Solicit):
                if family == 4:
                    self._send_arp_request(iface, action.addr, action.lladdr)
                else:
                    self.icmp.send_ns(iface, action.addr, action.lladdr)
            elif isinstance(action, nd.Transmit):
                ethertype = ethernet.ETHERTYPE_IPV4 if family == 4 else ethernet.ETHERTYPE_IPV6
                for packet in action.packets:
                    self.send_frame(iface, action.lladdr, ethertype, packet)
            elif isinstance(action, nd.Unreachable):
                for packet in action.packets:
                    self._count("RcunetNeighUnreachable")
                    self.icmp.host_unreachable(packet)
            elif isinstance(action, nd.Discard):
                self.host.counters.inc("RcunetNeighDiscards", len(action.packets))

    def _resolve_and_send(self, iface: Interface, next_hop: bytes, packet: Packet) -> None:
        """Resolve ``next_hop`` and send ``packet`` (bytes, or the gathered pieces of
        ``output_gather``: a packet that waits for resolution is queued as it is)."""
        if len(next_hop) == 4:
            family, ethertype, table = 4, ethernet.ETHERTYPE_IPV4, iface.neigh4
            if is_multicast4(next_hop):
                self.send_frame(iface, multicast_mac(next_hop), ethertype, packet)
                return
            if _broadcast_on(iface, next_hop):
                self.send_frame(iface, ethernet.BROADCAST, ethertype, packet)
                return
        else:
            family, ethertype, table = 6, ethernet.ETHERTYPE_IPV6, iface.neigh6
            if next_hop[0] == 0xFF:
                self.send_frame(iface, multicast_mac(next_hop), ethertype, packet)
                return
        now = self.host.clock.now()
        # neigh_output: an entry whose sending changes no state gives its address with no
        # lock (NeighbourTable.lladdr_rcu); anything else goes through resolve, locked
        lladdr = table.lladdr_rcu(next_hop, now)
        if lladdr is not None:
            self.send_frame(iface, lladdr, ethertype, packet)
            return
        size = sum(map(len, packet)) if isinstance(packet, tuple) else len(packet)
        with iface.neigh_lock:
            lladdr, actions = table.resolve(next_hop, now, packet, size)
            if actions:
                self.arm_neigh_locked(iface, family)
        if lladdr is not None:
            self.send_frame(iface, lladdr, ethertype, packet)
        if actions:
            self.run_neigh_actions(iface, family, actions)

    def send_frame(self, iface: Interface, dst_mac: bytes, ethertype: int,
                   payload: Packet) -> None:
        """``payload`` in an Ethernet frame from ``iface`` (an Ethernet interface)."""
        mac = iface.mac
        assert mac is not None, "frames go out on Ethernet interfaces only"
        if isinstance(payload, tuple):  # gathered: the frame is made by one join
            header = ethernet.build_untagged_header(dst_mac, mac, ethertype)
            iface.transmit(b"".join((header, *payload)))
            return
        frame = ethernet.Repr(dst_mac, mac, ethertype, payload).build()
        iface.transmit(frame)

    # -- IPv4 input ----------
    def _ipv4_input(self, iface: Interface, data: bytes | memoryview, link_multicast: bool) -> None:
        """IPv4 input.  The common packet - no options, not a fragment, its total length
        within the buffer - is read by the codec's ``ipv4.parse_plain`` (one unpack, no
        Repr); every other packet goes through ``ipv4.Repr.parse``
        (``_ipv4_input_parsed``).  Both take the same acceptance rule (``_accept_v4``)
        and delivery (``_deliver``)."""
        self._count("IpInReceives")
        if type(data) is not memoryview:
            data = memoryview(data)
        plain = ipv4.parse_plain(data)
        if plain is None:
            self._ipv4_input_parsed(iface, data, link_multicast)
            return
        total_len, ttl, protocol, src, dst = plain
        if not iface.checksum_offload \
                and not ipv4.header_checksum_ok(data[:_IPV4_HLEN]):
            self._count("IpInCsumErrors")
            self._count("IpInHdrErrors")
            return
        to_multicast = self._accept_v4(iface, dst, data, link_multicast)
        if to_multicast is None:
            return
        self._deliver(iface, 4, src, dst, protocol, ttl, to_multicast,
                      data[_IPV4_HLEN:total_len], data)

    def _ipv4_input_parsed(self, iface: Interface, data: memoryview,
                           link_multicast: bool) -> None:
        """Any IPv4 packet (options, fragments, malformed), through the codec;
        IpInReceives is counted already."""
        try:
            packet = ipv4.Repr.parse(data)
        except WireError as exc:
            self._count("IpInTruncatedPkts" if exc.reason == "truncated" else "IpInHdrErrors")
            return
        if packet.checksum_ok is False and not iface.checksum_offload:
            self._count("IpInCsumErrors")
            self._count("IpInHdrErrors")
            return
        dst = packet.dst
        to_multicast = self._accept_v4(iface, dst, data, link_multicast, packet)
        if to_multicast is None:
            return
        if packet.more_fragments or packet.frag_offset:
            with self._frag_lock:
                result = self.reasm4.add(packet, self.host.now(), iface.ifindex)
                self._arm_reasm_locked()
            if result is None:
                return
            packet = result
            data = packet.build()
        self._deliver(iface, 4, packet.src, dst, packet.protocol, packet.ttl, to_multicast,
                      packet.payload, data)

    def _deliver(self, iface: Interface, family: int, src: bytes, dst: bytes, protocol: int,
                 ttl: int, to_multicast: bool, payload: Buffer,
                 raw: bytes | memoryview) -> None:
        handler = self.handler_for(family, protocol)
        if handler is None:
            if family == 4:
                self._count("IpInUnknownProtos")
                if not to_multicast:
                    self.icmp.send_error(raw, 4, icmpv4.DEST_UNREACHABLE,
                                         icmpv4.PROTOCOL_UNREACHABLE)
            else:
                self._count("Ip6InUnknownProtos")
                if not to_multicast:
                    self.icmp.send_error(raw, 6, icmpv6.PARAMETER_PROBLEM,
                                         icmpv6.UNRECOGNIZED_NEXT_HEADER, pointer=6)
            return
        self.host.counters.inc("IpInDelivers" if family == 4 else "Ip6InDelivers")
        if type(payload) is not memoryview:
            payload = memoryview(payload)
        # new_tuple: Delivery's fields complete and in order, without the NamedTuple's
        # Python-level __new__ (once a packet).
        handler(new_tuple(Delivery, (iface, src, dst, protocol, ttl, to_multicast, raw)),
                payload)

    def _arm_reasm_locked(self) -> None:
        deadlines = [d for d in (self.reasm4.next_deadline(), self.reasm6.next_deadline()) if d]
        if not deadlines:
            return
        at = min(deadlines)
        timer = self._reasm_timer
        if timer is not None and not timer.cancelled and timer.at <= at:
            return
        if timer is not None:
            timer.cancel()
        self._reasm_timer = self.host.timers.schedule(at, self._reasm_expire)

    def _reasm_expire(self, now: int) -> None:
        with self._frag_lock:
            self._reasm_timer = None
            events4 = self.reasm4.expire(now)
            events6 = self.reasm6.expire(now)
            self._arm_reasm_locked()
        for event in events4:
            self.icmp.send_error(event.first.build(), 4, icmpv4.TIME_EXCEEDED,
                                 icmpv4.REASSEMBLY_TIME_EXCEEDED)
        for event in events6:
            self.icmp.send_error(event.first.build(), 6, icmpv6.TIME_EXCEEDED,
                                 icmpv6.REASSEMBLY_TIME_EXCEEDED)

    def reassembly_counters(self) -> dict[str, int]:
        with self._frag_lock:
            four = dict(self.reasm4.counters)
            six = dict(self.reasm6.counters)
        merged = {f"Ip{name}": value for name, value in four.items()}
        merged.update({f"Ip6{name}": value for name, value in six.items()})
        return merged

    # -- forwarding ----------
    def _forward_v4(self, iface: Interface, packet: ipv4.Repr, raw: bytes | memoryview) -> None:
        """A packet for another host: routed (ip_route_input), then the forwarding rule
        of ``core.ip.forward`` (ip_forward: TTL, then fragmentation), errors answered
        with ICMP and counted as Linux counts them."""
        if not self.host.tuning.ip_forward:
            self._count("IpInAddrErrors")
            return
        dst_entry = self.host.dst_cache.lookup(packet.dst)
        if dst_entry is None:
            self._count("IpOutNoRoutes")
            self.icmp.send_error(bytes(raw), 4, icmpv4.DEST_UNREACHABLE, icmpv4.NET_UNREACHABLE)
            return
        try:
            out = dst_entry.use()
            pieces = forward_ipv4(packet, out.mtu)
            if isinstance(pieces, HopLimitExceeded):
                self._count("IpInHdrErrors")
                self.icmp.send_error(bytes(raw), 4, icmpv4.TIME_EXCEEDED, icmpv4.TTL_EXCEEDED)
                return
            if isinstance(pieces, FragmentationNeeded):
                self._count("IpFragFails")
                self.icmp.send_error(bytes(raw), 4, icmpv4.DEST_UNREACHABLE,
                                     icmpv4.FRAG_NEEDED, mtu=out.mtu)
                return
            if len(pieces) > 1:
                self._count("IpFragOKs")
            self._count("IpForwDatagrams")
            for piece in pieces:
                self._link_output(out.iface, out.next_hop, piece.build())
        finally:
            dst_entry.release()

    def _forward_v6(self, iface: Interface, packet: ipv6.Repr, raw: bytes | memoryview) -> None:
        """As ``_forward_v4``, with ``core.ip.forward.forward_ipv6`` (ip6_forward: scope,
        hop limit, and packet-too-big, since routers never fragment IPv6)."""
        if not self.host.tuning.ip_forward:
            self._count("Ip6InAddrErrors")
            return
        dst_entry = self.host.dst_cache.lookup(packet.dst)
        if dst_entry is None:
            self._count("Ip6OutNoRoutes")
            self.icmp.send_error(bytes(raw), 6, icmpv6.DEST_UNREACHABLE, icmpv6.NO_ROUTE)
            return
        try:
            out = dst_entry.use()
            forwarded = forward_ipv6(packet, out.mtu)
            if isinstance(forwarded, BeyondScope):
                self._count("Ip6InAddrErrors")
                if forwarded.answer:  # a link-local source: ICMPV6_NOT_NEIGHBOUR
                    self.icmp.send_error(bytes(raw), 6, icmpv6.DEST_UNREACHABLE,
                                         icmpv6.BEYOND_SCOPE)
                return
            if isinstance(forwarded, HopLimitExceeded):
                self._count("Ip6InHdrErrors")
                self.icmp.send_error(bytes(raw), 6, icmpv6.TIME_EXCEEDED,
                                     icmpv6.HOP_LIMIT_EXCEEDED)
                return
            if isinstance(forwarded, PacketTooBig):
                self._count("Ip6InTooBigErrors")
                self.icmp.send_error(bytes(raw), 6, icmpv6.PACKET_TOO_BIG, 0, mtu=out.mtu)
                return
            self._count("Ip6OutForwDatagrams")
            self._link_output(out.iface, out.next_hop, forwarded.build())
        finally:
            dst_entry.release()

    # -- IPv6 input ----------
    def _ipv6_input(self, iface: Interface, data: bytes | memoryview) -> None:
        self._count("Ip6InReceives")
        try:
            packet = ipv6.Repr.parse(data)
        except WireError as exc:
            self._count("Ip6InTruncatedPkts" if exc.reason == "truncated" else "Ip6InHdrErrors")
            return
        dst = packet.dst
        multicast = is_multicast(dst)
        local = dst in self.host.local_addrs
        if multicast and dst not in iface.groups and dst != ALL_NODES:
            self._count("Ip6InAddrErrors")
            return
        if not (local or multicast):
            self._forward_v6(iface, packet, data)
            return
        if packet.fragment is not None:
            with self._frag_lock:
                result = self.reasm6.add(packet, self.host.now(), iface.ifindex)
                self._arm_reasm_locked()
            if result is None:
                return
            if isinstance(result, ParameterProblem):
                self.icmp.send_error(result.packet.build(), 6, icmpv6.PARAMETER_PROBLEM, 0,
                                     pointer=result.pointer)
                return
            packet = result
            data = packet.build()
        self._deliver(iface, 6, packet.src, dst, packet.next_header, packet.hop_limit,
                      multicast, packet.payload, data)

    # -- output ----------
    def output(
        self,
        src: bytes | None,
        dst: bytes,
        protocol: int,
        build_payload: Callable[[bytes, bytes], bytes],
        *,
        ttl: int | None = None,
        dont_fragment: bool = False,
        oif: int = 0,
        tos: int = 0,
    ) -> int:
        """Route and send one datagram.  ``build_payload(src, dst)`` returns the transport
        bytes (it needs the final source address for the pseudo-header checksum).
        ``tos``: the IPv4 TOS byte / IPv6 traffic class.
        Returns 0 or a positive errno (ENETUNREACH, EMSGSIZE, EADDRNOTAVAIL)."""
        if self.is_local(dst):
            # Linux's local table: our own addresses go out (and back in) through lo.
            lo = self.host.loopback
            source = src or dst
            return self._send_ip(lo, dst, source, dst, protocol, build_payload(source, dst),
                                 ttl, dont_fragment, lo.mtu, tos)
        if is_multicast(dst) or dst == LIMITED_BROADCAST:
            return self._output_multicast(src, dst, protocol, build_payload, ttl, oif, tos)
        entry = self.host.dst_cache.lookup(dst, oif)
        if entry is None:
            self._count("IpOutNoRoutes" if len(dst) == 4 else "Ip6OutNoRoutes")
            return 101  # ENETUNREACH
        try:
            out = entry.use()
            source = src or out.src
            return self._send_ip(out.iface, out.next_hop, source, dst, protocol,
                                 build_payload(source, dst), ttl, dont_fragment, out.mtu, tos)
        finally:
            entry.release()

    def output_gather(
        self,
        src: bytes,
        dst: bytes,
        protocol: int,
        build_header: Callable[[bytes, bytes], bytes],
        payload: Buffer,
        *,
        dont_fragment: bool = False,
        oif: int = 0,
        tos: int = 0,
    ) -> int:
        """``output`` for a transport that hands its header and its payload apart: a
        unicast packet that needs no fragmenting leaves as one frame made by one join
        of the link, IP and transport headers and ``payload`` (``output`` copies the
        payload once per layer).  ``build_header(src, dst)`` returns the transport
        header (its checksum covers ``payload``).  ``payload`` must not change after the
        call (it may wait in a neighbour queue).  Returns 0 or a positive errno."""
        v4 = len(dst) == 4
        if (dst[0] >> 4 == 14 or dst == LIMITED_BROADCAST) if v4 else dst[0] == 0xFF:
            return self.output(src, dst, protocol,
                               lambda s, d: build_header(s, d) + payload,
                               dont_fragment=dont_fragment, oif=oif, tos=tos)
        send = self._send_gather
        if self.is_local(dst):
            lo = self.host.loopback
            return send(lo, dst, src, dst, protocol, build_header(src, dst), payload,
                        dont_fragment, lo.mtu, tos)
        entry = self.host.dst_cache.lookup(dst, oif)
        if entry is None:
            self._count("IpOutNoRoutes" if v4 else "Ip6OutNoRoutes")
            return 101  # ENETUNREACH
        try:
            out = entry.use()
            return send(out.iface, out.next_hop, src, dst, protocol, build_header(src, dst),
                        payload, dont_fragment, out.mtu, tos)
        finally:
            entry.release()

    def output_pinned(
        self,
        entry: DstEntry,
        src: bytes,
        dst: bytes,
        protocol: int,
        header: bytes,
        payload: Buffer,
        *,
        dont_fragment: bool = False,
        tos: int = 0,
    ) -> int:
        """``output_gather`` through a route the caller holds pinned (a connected
        socket's dst entry: Linux's ip_queue_xmit with sk_dst_cache), so no lookup and
        no reference taken or dropped per packet.  The caller has checked that the
        entry is still ``DstCache.current``; unicast only (the entry's ``dst``), so the
        transport ``header`` (built for ``src``/``dst``) comes ready-made."""
        out = entry.use()
        return self._send_gather(out.iface, out.next_hop, src, dst, protocol, header, payload,
                                 dont_fragment, out.mtu, tos)

    def _send_gather(self, iface: Interface, next_hop: bytes, src: bytes, dst: bytes,
                     protocol: int, header: bytes, payload: Buffer, dont_fragment: bool,
                     mtu: int, tos: int = 0) -> int:
        """One packet of ``header`` + ``payload``: the IP header built for that length and
        the frame made by one join; anything to fragment takes the general path.
        ``tos``: the IPv4 TOS / IPv6 traffic class byte (DSCP and ECN field)."""
        length = len(header) + len(payload)
        if len(dst) == 4:
            if ipv4.HEADER_LEN + length > mtu:  # fragments (or EMSGSIZE)
                return self._send_ip(iface, next_hop, src, dst, protocol, header + payload,
                                     None, dont_fragment, mtu, tos)
            self.host.counters.inc("IpOutRequests")
            # ipv4.Repr(...).build_header(length) and next_ident(), without the Repr or
            # the calls: once per packet
            ip_header = ipv4.build_plain_header(src, dst, protocol,
                                                self.host.tuning.ip_default_ttl,
                                                next(self._idents) & 0xFFFF, dont_fragment,
                                                length, tos=tos)
        else:
            if ipv6.HEADER_LEN + length > mtu:  # source fragments (or EMSGSIZE)
                return self._send_ip(iface, next_hop, src, dst, protocol, header + payload,
                                     None, dont_fragment, mtu, tos)
            self._count("Ip6OutRequests")
            ip_header = ipv6.Repr(src, dst, protocol, b"",
                                  hop_limit=self.host.tuning.ip_default_ttl,
                                  traffic_class=tos).build_header(length)
        self._link_output(iface, next_hop, (ip_header, header, payload))
        return 0

    def _output_multicast(self, src: bytes | None, dst: bytes, protocol: int,
                          build_payload: Callable[[bytes, bytes], bytes], ttl: int | None,
                          oif: int, tos: int = 0) -> int:
        iface = self.host.interfaces.get(oif) if oif else None
        if iface is None:
            route = self.host.routes.lookup(dst)
            iface = self.host.interfaces.get(route.ifindex) if route else None
        if iface is None:
            candidates = [i for i in self.host.interfaces.values() if i is not self.host.loopback
                          and i.addresses_of(len(dst) == 4 and 4 or 6)]
            if not candidates:
                return 101
            iface = candidates[0]
        source = src or self.select_source(iface, dst)
        if source is None:
            return 99  # EADDRNOTAVAIL
        payload = build_payload(source, dst)
        hops = ttl if ttl is not None else 1
        return self._send_ip(iface, dst, source, dst, protocol, payload, hops, False, iface.mtu,
                             tos)

    def _send_ip(self, iface: Interface, next_hop: bytes, src: bytes, dst: bytes, protocol: int,
                 payload: bytes, ttl: int | None, dont_fragment: bool, mtu: int,
                 tos: int = 0) -> int:
        hops = ttl if ttl is not None else self.host.tuning.ip_default_ttl
        if len(dst) == 4:
            self._count("IpOutRequests")
            packet = ipv4.Repr(src, dst, protocol, payload, hops, self.next_ident(),
                               dont_fragment, dscp=tos >> 2, ecn=tos & 3)
            if ipv4.HEADER_LEN + len(payload) <= mtu:  # no options: buffer_len()
                self._link_output(iface, next_hop, packet.build())
                return 0
            fragments = fragment_ipv4(packet, mtu)
            if isinstance(fragments, FragmentationNeeded):
                self._count("IpFragFails")
                return 90  # EMSGSIZE
            pieces: list[ipv4.Repr] | list[ipv6.Repr] = fragments
            self._count("IpFragOKs")
            self.host.counters.inc("IpFragCreates", len(pieces))
        else:
            self._count("Ip6OutRequests")
            packet6 = ipv6.Repr(src, dst, protocol, payload, hop_limit=hops, traffic_class=tos)
            if packet6.buffer_len() <= mtu:
                self._link_output(iface, next_hop, packet6.build())
                return 0
            if dont_fragment:
                return 90
            pieces = fragment_ipv6(packet6, mtu, self.host.random_u32())
            self._count("Ip6FragOKs")
            self.host.counters.inc("Ip6FragCreates", len(pieces))
        for piece in pieces:
            self._link_output(iface, next_hop, piece.build())
        return 0

    def _link_output(self, iface: Interface, next_hop: bytes, packet: Packet) -> None:
        """``packet`` onto ``iface``'s link: through neighbour resolution on Ethernet,
        as it is on a link with no link header (TUN, loopback)."""
        if iface.is_ethernet:
            self._resolve_and_send(iface, next_hop, packet)
        else:
            iface.transmit(b"".join(packet) if isinstance(packet, tuple) else packet)


def _broadcast_on(iface: Interface, addr: bytes) -> bool:
    """The limited broadcast, or the directed broadcast of one of ``iface``'s subnets."""
    # atomic: one attribute load of broadcasts (a set republished whole by address changes)
    return addr == LIMITED_BROADCAST or addr in iface.broadcasts


def _same_subnet(a: bytes, b: bytes, prefix_len: int) -> bool:
    if len(a) != len(b):
        return False
    bits = len(a) * 8
    mask = ((1 << prefix_len) - 1) << (bits - prefix_len) if prefix_len else 0
    return int.from_bytes(a, "big") & mask == int.from_bytes(b, "big") & mask
