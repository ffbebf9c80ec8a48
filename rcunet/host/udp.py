"""UDP on a Host: datagram sockets on the UDP tables (rcunet.tables.udp), unicast /
broadcast / multicast input, port-unreachable, receive-buffer accounting, ICMP errors.

Counters use Linux's names: UdpInDatagrams, UdpNoPorts, UdpInErrors, UdpInCsumErrors,
UdpRcvbufErrors, UdpOutDatagrams (Udp6* for IPv6).
"""

from __future__ import annotations

import errno
import os
import random
import struct
import threading
import time
from typing import TYPE_CHECKING

from rcunet.host.ip import Delivery
from rcunet.host.timers import Timer
from rcunet.host.udp_cmsg import RecvInfo, SendControl
from rcunet.host.udp_sock import UdpSock
from rcunet.tables.entry import AF_INET, AF_INET6
from rcunet.tables.udp import UdpTable
from rcunet.tables.udp_entry import UdpEntry
from rcunet.tables.udp_mcast import mcast_deliver
from rcunet.wire import icmpv4, icmpv6, udp
from rcunet.wire.addr import is_any, is_multicast
from rcunet.wire.errors import WireError

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.host.interface import Interface

#: Source port, destination port, length: what input needs of a UDP header.
_UDP_PORTS_LEN = struct.Struct("!HHH")
_IN_DATAGRAMS = {AF_INET: "UdpInDatagrams", AF_INET6: "Udp6InDatagrams"}
RECLAIM_DELAY_NS = 1_000_000


class UdpLayer:
    """The Host's UDP: the tables plus input/output."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.table = UdpTable(tuning=host.tuning, rng=random.Random(host.seed ^ 0x5544),
                              release=self._release)
        self.sockets: set[UdpSock] = set()  # guarded-by: _sockets_lock
        self._sockets_lock = threading.Lock()
        self._reclaim_timer: Timer | None = None  # guarded-by: _sockets_lock
        #: The delivery callback, bound once (not once per datagram).
        self._deliver = self._deliver_one
        host.ip.handlers[udp.PROTOCOL] = self.input
        host.ip.handlers[1] = host.ip.icmp.input4
        host.ip.handlers[(6 << 8) | 58] = host.ip.icmp.input6
        host.ip.error_handlers[udp.PROTOCOL] = self.icmp_error

    def _count(self, name: str, family: int) -> None:
        self.host.counters.inc(name if family == 4 else name.replace("Udp", "Udp6", 1))

    def _release(self, sk: UdpEntry) -> None:
        if isinstance(sk, UdpSock):
            sk.release_resources()

    # -- sockets ----------
    def new_socket(self, family: int) -> UdpSock:
        if family not in (AF_INET, AF_INET6):
            raise OSError(errno.EAFNOSUPPORT, "address family not supported")
        sk = UdpSock(self.host, family)
        with self._sockets_lock:
            self.sockets.add(sk)
        return sk

    def close(self, sk: UdpSock) -> None:
        with sk.lock:
            if sk.closed:
                return
            sk.closed = True
            for group, per_interface in list(sk.mc_list.items()):
                for ifindex in list(per_interface):
                    iface = self._leave_group_locked(sk, group, ifindex)
                    if iface is not None:
                        self.host.ip.icmp.report_membership(iface, group, False)
            self.table.close(sk)  # unhash + drop the owner's reference
        sk.wake_all()
        with self._sockets_lock:
            self.sockets.discard(sk)
            if self._reclaim_timer is None:
                self._reclaim_timer = self.host.timers.schedule(
                    self.host.now() + RECLAIM_DELAY_NS, self._reclaim)

    def _reclaim(self, now: int) -> None:
        """Closed sockets are freed after an RCU grace period (SOCK_RCU_FREE): drive the
        grace periods that let their release callbacks run (timer context)."""
        rcu = self.table.rcu
        for _ in range(2):  # a callback queued in epoch e runs once e + 2 completed
            rcu.synchronize(timeout=0.05)
        with self._sockets_lock:
            self._reclaim_timer = None
            if rcu.pending():
                self._reclaim_timer = self.host.timers.schedule(
                    self.host.clock.now() + RECLAIM_DELAY_NS, self._reclaim)

    def shutdown(self) -> None:
        """Host teardown: close every socket and wait for their frees."""
        self.close_all()
        self.table.rcu.barrier(timeout=2.0)

    def close_all(self) -> None:
        with self._sockets_lock:
            sockets = list(self.sockets)
        for sk in sockets:
            self.close(sk)

    def join_group(self, sk: UdpSock, group: bytes, ifindex: int) -> None:
        """IP_ADD_MEMBERSHIP.  Under the socket lock: a membership change is a
        read-copy-publish of ``sk.mc_list`` (two joins at once must not lose one), and a
        closed socket must not join (its interface count would never be given back)."""
        iface = self.host.interfaces.get(ifindex)
        if iface is None:
            raise OSError(errno.ENODEV, "no such interface")
        with sk.lock:
            if sk.closed:
                raise OSError(errno.EBADF, "socket is closed")
            sk.join_group(group, ifindex)
            first = iface.join_group(group)
        if first:
            self.host.ip.icmp.report_membership(iface, group, True)

    def leave_group(self, sk: UdpSock, group: bytes, ifindex: int) -> None:
        """IP_DROP_MEMBERSHIP, under the socket lock (see ``join_group``)."""
        with sk.lock:
            iface = self._leave_group_locked(sk, group, ifindex)
        if iface is not None:
            self.host.ip.icmp.report_membership(iface, group, False)

    def _leave_group_locked(self, sk: UdpSock, group: bytes, ifindex: int) -> Interface | None:
        """Drop one membership (caller holds ``sk.lock``); returns the interface whose
        last member this was (a leave report is due), else None."""
        sk.leave_group(group, ifindex)
        iface = self.host.interfaces.get(ifindex)
        if iface is not None and iface.leave_group(group):
            return iface
        return None

    def default_multicast_ifindex(self, group: bytes) -> int:
        route = self.host.routes.lookup(group)
        if route is not None:
            return route.ifindex
        for iface in self.host.interfaces.values():
            if iface is not self.host.loopback and iface.addresses_of(4 if len(group) == 4 else 6):
                return iface.ifindex
        raise OSError(errno.ENODEV, "no interface for this multicast group")

    # -- input ----------
    def input(self, info: Delivery, payload: memoryview) -> None:
        # A clean link verified the checksum (NIC-style offload): the header is then read
        # with one unpack and no Repr (udp.Repr.parse checks only the length field for
        # it).  Otherwise the codec parses and verifies.
        if info.iface.checksum_offload and len(payload) >= udp.HEADER_LEN:
            sport, dport, length = _UDP_PORTS_LEN.unpack_from(payload)
            checked = udp.HEADER_LEN <= length <= len(payload)
        else:
            checked = False
        if checked:
            body: bytes | bytearray | memoryview = payload[udp.HEADER_LEN:length]
        else:
            parsed = self._parse_checked(info, payload)
            if parsed is None:
                return
            sport, dport, body = parsed.src_port, parsed.dst_port, parsed.payload
        src = info.src
        datagram = (bytes(body), (src, sport), _recv_info(info))
        if info.to_multicast:
            if not mcast_deliver(self.table, info.dst, dport, src, sport, info.iface.ifindex,
                                 datagram, self._deliver, clone=_share):
                # Linux counts ignored mcast as NoPorts too
                self.host.counters.inc("UdpNoPorts" if len(src) == 4 else "Udp6NoPorts")
            return
        sk = self.table.lookup(src, sport, info.dst, dport, info.iface.ifindex)
        if sk is None:
            self._port_unreachable(info)
            return
        try:
            self._deliver_one(sk, datagram)
        finally:
            self.table.put(sk)

    def _parse_checked(self, info: Delivery, payload: memoryview) -> udp.Repr | None:
        """The codec's parse (and checksum check when the link did not do it); a bad
        datagram is counted and gives None."""
        family = 4 if len(info.src) == 4 else 6
        try:
            if info.iface.checksum_offload:
                datagram = udp.Repr.parse(payload)
            else:
                datagram = udp.Repr.parse(payload, info.src, info.dst)
        except WireError:
            self._count("UdpInErrors", family)
            return None
        if datagram.checksum_ok is False:
            self._count("UdpInCsumErrors", family)
            self._count("UdpInErrors", family)
            return None
        return datagram

    def _port_unreachable(self, info: Delivery) -> None:
        if len(info.src) == 4:
            self._count("UdpNoPorts", 4)
            self.host.ip.icmp.send_error(info.packet, 4, icmpv4.DEST_UNREACHABLE,
                                         icmpv4.PORT_UNREACHABLE)
        else:
            self._count("UdpNoPorts", 6)
            self.host.ip.icmp.send_error(info.packet, 6, icmpv6.DEST_UNREACHABLE,
                                         icmpv6.PORT_UNREACHABLE)

    def _deliver_one(self, sk: UdpEntry, datagram: object) -> None:
        # (ignore: the tables hand back what input gave them, typed object: a Datagram)
        if isinstance(sk, UdpSock) and sk.enqueue(datagram):  # type: ignore[arg-type]
            self.host.counters.inc(_IN_DATAGRAMS[sk.family])
        else:
            family = 4 if sk.family == AF_INET else 6
            sk.add_drop()
            self._count("UdpRcvbufErrors", family)
            self._count("UdpInErrors", family)

    def icmp_error(self, family: int, kind: int, code: int, reporter: bytes,
                   flow: icmpv4.QuotedFlow | icmpv6.QuotedFlow) -> None:
        """An ICMP error about a datagram we sent: connected sockets learn it (Linux
        reports to unconnected ones only with IP_RECVERR)."""
        if flow.src_port is None or flow.dst_port is None:
            return
        sk = self.table.lookup(flow.dst, flow.dst_port, flow.src, flow.src_port)
        if sk is None:
            return
        try:
            connected = not is_any(sk.faddr)
            if isinstance(sk, UdpSock) and connected:
                sk.set_error(_icmp_errno(family, kind, code))
        finally:
            self.table.put(sk)

    # -- output ----------
    def sendto(self, sk: UdpSock, data: bytes, dst: bytes, dport: int,
               control: SendControl | None = None) -> int:
        """One datagram; ``control``: what sendmsg's control messages asked (source,
        interface, TTL, TOS) over the socket's own settings."""
        family = 4 if sk.family == AF_INET else 6
        if len(data) > (65507 if family == 4 else 65527):
            raise OSError(errno.EMSGSIZE, "message too long")
        if not sk.hashed:  # atomic: attribute load; a racy pre-check, re-checked locked
            with sk.lock:
                if not sk.hashed:
                    self.table.autobind(sk)
        # Socket options: one attribute load each (a concurrent setsockopt gives the old
        # or the new value).
        if not sk.broadcast and self.host.ip.is_broadcast(dst):
            raise OSError(errno.EACCES, "permission denied (SO_BROADCAST is off)")
        # atomic: one load of the identity tuple (set_key stores it last), so a concurrent
        # bind()/connect() gives the old or the new (address, port), never a mix.
        laddr, sport, _faddr, _fport = sk.key
        src = None if is_any(laddr) or is_multicast(laddr) else laddr
        message = udp.Repr(sport, dport, data)
        ttl = sk.multicast_ttl if is_multicast(dst) else sk.ttl
        oif = sk.multicast_if if is_multicast(dst) else sk.bound_dev
        tos = sk.tos if family == 4 else sk.tclass
        if control is not None:
            src = control.src if control.src is not None else src
            oif = control.oif or oif
            ttl = control.ttl if control.ttl is not None else ttl
            tos = control.tos if control.tos is not None else tos

        def build(source: bytes, dest: bytes) -> bytes:
            return message.build(src=source, dst=dest)

        err = self.host.ip.output(src, dst, udp.PROTOCOL, build, ttl=ttl, oif=oif, tos=tos)
        if err:
            raise OSError(err, os.strerror(err))
        self._count("UdpOutDatagrams", family)
        if is_multicast(dst) and sk.multicast_loop:
            self._loop_multicast(sk, data, dst, dport, src)
        return len(data)

    def _loop_multicast(self, sk: UdpSock, data: bytes, group: bytes, dport: int,
                        src: bytes | None) -> None:
        """IP_MULTICAST_LOOP: local members of the group get a copy too."""
        try:
            ifindex = sk.multicast_if or self.default_multicast_ifindex(group)
        except OSError:
            return
        iface = self.host.interfaces.get(ifindex)
        if iface is None or group not in iface.groups:
            return
        source = src or self.host.ip.select_source(iface, group)
        if source is None:
            return
        info = RecvInfo(group, ifindex, sk.multicast_ttl, sk.tos if len(group) == 4
                        else sk.tclass, time.time_ns())
        self.table.mcast_deliver(group, dport, source, sk.lport, ifindex,
                                 (data, (source, sk.lport), info), self._deliver,
                                 clone=_share)


def _recv_info(info: Delivery) -> RecvInfo:
    """What recvmsg's control messages may tell of this packet (rcunet.host.udp_cmsg);
    the TOS / traffic class is read from the header still in ``info.packet``."""
    packet = info.packet
    if len(info.src) == 4:
        tos = packet[1]
    else:
        tos = ((packet[0] & 0x0F) << 4) | (packet[1] >> 4)
    return RecvInfo(info.dst, info.iface.ifindex, info.ttl, tos, time.time_ns())


def _share(datagram: object) -> object:
    """Datagrams are immutable (bytes, address): every receiver can share one."""
    return datagram


def _icmp_errno(family: int, kind: int, code: int) -> int:
    """icmp_err_convert / icmpv6_err_convert."""
    if family == 4:
        if kind == icmpv4.DEST_UNREACHABLE:
            return {
                icmpv4.NET_UNREACHABLE: errno.ENETUNREACH,
                icmpv4.HOST_UNREACHABLE: errno.EHOSTUNREACH,
                icmpv4.PROTOCOL_UNREACHABLE: errno.ENOPROTOOPT,
                icmpv4.PORT_UNREACHABLE: errno.ECONNREFUSED,
                icmpv4.FRAG_NEEDED: errno.EMSGSIZE,
            }.get(code, errno.EHOSTUNREACH)
        return errno.EHOSTUNREACH
    if kind == icmpv6.DEST_UNREACHABLE:
        return {
            icmpv6.NO_ROUTE: errno.ENETUNREACH,
            icmpv6.ADMIN_PROHIBITED: errno.EACCES,
            icmpv6.ADDRESS_UNREACHABLE: errno.EHOSTUNREACH,
            icmpv6.PORT_UNREACHABLE: errno.ECONNREFUSED,
        }.get(code, errno.EHOSTUNREACH)
    if kind == icmpv6.PACKET_TOO_BIG:
        return errno.EMSGSIZE
    return errno.EHOSTUNREACH
