"""UDP's ancillary data, as Linux delivers and accepts it.

Receive (``udp_recvmsg``/``udpv6_recvmsg``): each queued datagram carries what its
packet said (``RecvInfo``); ``recv_cmsgs`` turns it into the control messages the
socket asked for, in Linux's order: the timestamp (``sock_recv_cmsgs``), then for an
IPv4 packet ``ip_cmsg_recv_offset``'s IP_PKTINFO, IP_TTL, IP_TOS, and for an IPv6 one
``ip6_datagram_recv_common_ctl``'s IPV6_PKTINFO then ``..._specific_ctl``'s
IPV6_HOPLIMIT, IPV6_TCLASS (an IPv6 socket's IPv4 packet: IPV6_PKTINFO with the
v4-mapped address, then the IPv4 ones).

Send (``ip_cmsg_send``/``ip6_datagram_send_ctl``): ``send_control`` reads a sendmsg's
control messages into a ``SendControl`` (source, outgoing interface, TTL/hop limit,
TOS/traffic class), with Linux's answers: a wrong length, a value out of range or an
unknown type of the socket's own level is EINVAL; another protocol's level is ignored;
SOL_SOCKET takes SCM_RIGHTS/SCM_CREDENTIALS (ignored on an inet socket) and refuses the
rest; an interface that does not exist is ENODEV; a source that is not ours is
ENETUNREACH (IPv4's route lookup) or EINVAL (IPv6).

Layouts are the x86-64/aarch64 ones (``struct in_pktinfo``, ``struct in6_pktinfo``, an
``int`` for TTL/hop limit/traffic class, one byte for IP_TOS on receive,
``struct timeval``/``timespec`` of two longs).
"""

from __future__ import annotations

import errno
import socket as _pysocket
import struct
from typing import TYPE_CHECKING, NamedTuple

from rcunet.host.sockerr import oserror
from rcunet.wire.addr import ANY4, ANY6, is_v4mapped, v4mapped

if TYPE_CHECKING:
    from rcunet.host.host import Host

SOL_SOCKET = _pysocket.SOL_SOCKET
SOL_IP = 0
SOL_IPV6 = 41
# linux/in.h, linux/in6.h, asm-generic/socket.h (Python's socket module lacks some)
IP_TOS = 1
IP_TTL = 2
IP_PKTINFO = 8
IP_RECVTTL = 12
IP_RECVTOS = 13
IPV6_RECVPKTINFO = 49
IPV6_PKTINFO = 50
IPV6_RECVHOPLIMIT = 51
IPV6_HOPLIMIT = 52
IPV6_RECVTCLASS = 66
IPV6_TCLASS = 67
SO_TIMESTAMP = 29
SO_TIMESTAMPNS = 35
SCM_RIGHTS = 1
SCM_CREDENTIALS = 2

# the socket's receive flags (Linux: inet->cmsg_flags, np->rxopt, SOCK_RCVTSTAMP[NS])
WANT_PKTINFO = 1
WANT_TTL = 2
WANT_TOS = 4
WANT_PKTINFO6 = 8
WANT_HOPLIMIT = 16
WANT_TCLASS = 32
WANT_TIMESTAMP = 64
WANT_TIMESTAMPNS = 128

#: (level, option) -> the flag it sets
RECV_OPTIONS = {
    (SOL_IP, IP_PKTINFO): WANT_PKTINFO, (SOL_IP, IP_RECVTTL): WANT_TTL,
    (SOL_IP, IP_RECVTOS): WANT_TOS, (SOL_IPV6, IPV6_RECVPKTINFO): WANT_PKTINFO6,
    (SOL_IPV6, IPV6_RECVHOPLIMIT): WANT_HOPLIMIT, (SOL_IPV6, IPV6_RECVTCLASS): WANT_TCLASS,
}

_INT = struct.Struct("@i")
_PKTINFO = struct.Struct("@i4s4s")
_PKTINFO6 = struct.Struct("@16si")
_TWO_LONGS = struct.Struct("@qq")


class RecvInfo(NamedTuple):
    """What the packet that carried a datagram said, kept with it in the queue."""

    dst: bytes  # the IP destination (4 or 16 bytes)
    ifindex: int  # the interface it came in on
    ttl: int  # TTL / hop limit
    tos: int  # TOS / traffic class
    stamp_ns: int  # when it was received (CLOCK_REALTIME)


class SendControl(NamedTuple):
    """What a sendmsg's control messages ask of one datagram (None: the socket's)."""

    src: bytes | None = None
    oif: int = 0
    ttl: int | None = None
    tos: int | None = None


def timestamp_flags(flags: int, optname: int, on: bool) -> int:
    """sock_set_timestamp: SO_TIMESTAMP gives a timeval, SO_TIMESTAMPNS a timespec;
    turning either off turns both off."""
    flags &= ~(WANT_TIMESTAMP | WANT_TIMESTAMPNS)
    if on:
        flags |= WANT_TIMESTAMP if optname == SO_TIMESTAMP else WANT_TIMESTAMPNS
    return flags


def recv_cmsgs(host: Host, flags: int, socket_v6: bool, info: RecvInfo, src: bytes
               ) -> list[tuple[int, int, bytes]]:
    """The control messages of one received datagram (``src``: its source, 4 or 16
    bytes as it came on the wire)."""
    out: list[tuple[int, int, bytes]] = []
    if flags & (WANT_TIMESTAMP | WANT_TIMESTAMPNS):
        seconds, nanos = divmod(info.stamp_ns, 1_000_000_000)
        if flags & WANT_TIMESTAMPNS:
            out.append((SOL_SOCKET, SO_TIMESTAMPNS, _TWO_LONGS.pack(seconds, nanos)))
        else:
            out.append((SOL_SOCKET, SO_TIMESTAMP, _TWO_LONGS.pack(seconds, nanos // 1000)))
    v4_packet = len(info.dst) == 4
    if socket_v6 and flags & WANT_PKTINFO6:
        dst = v4mapped(info.dst)
        out.append((SOL_IPV6, IPV6_PKTINFO, _PKTINFO6.pack(dst, info.ifindex)))
    if v4_packet:
        if flags & WANT_PKTINFO:
            spec_dst = _spec_dst(host, info, src)
            out.append((SOL_IP, IP_PKTINFO, _PKTINFO.pack(info.ifindex, spec_dst, info.dst)))
        if flags & WANT_TTL:
            out.append((SOL_IP, IP_TTL, _INT.pack(info.ttl)))
        if flags & WANT_TOS:
            out.append((SOL_IP, IP_TOS, bytes((info.tos,))))
    else:
        if flags & WANT_HOPLIMIT:
            out.append((SOL_IPV6, IPV6_HOPLIMIT, _INT.pack(info.ttl)))
        if flags & WANT_TCLASS:
            out.append((SOL_IPV6, IPV6_TCLASS, _INT.pack(info.tos)))
    return out


def _spec_dst(host: Host, info: RecvInfo, src: bytes) -> bytes:
    """fib_compute_spec_dst: the local address a reply should come from — the packet's
    destination when that is one of ours, else (broadcast, multicast) the address the
    receiving interface would use toward the sender."""
    if host.ip.is_local(info.dst):
        return info.dst
    iface = host.interfaces.get(info.ifindex)
    chosen = host.ip.select_source(iface, src) if iface is not None else None
    return chosen if chosen is not None and len(chosen) == 4 else ANY4


def send_control(host: Host, socket_v6: bool, to_v4: bool, bound_dev: int,
                 ancdata: list[tuple[int, int, bytes]]) -> SendControl:
    """A sendmsg's control messages -> SendControl (OSError as Linux answers).
    ``to_v4``: the datagram goes out as IPv4 (an IPv6 socket's v4-mapped destination
    takes ip_cmsg_send's rules, with IPV6_PKTINFO allowed)."""
    control = SendControl()
    for level, kind, data in ancdata:
        if level == SOL_SOCKET:
            if kind not in (SCM_RIGHTS, SCM_CREDENTIALS):  # __sock_cmsg_send
                raise oserror(errno.EINVAL, "control message not taken by a UDP socket")
        elif to_v4 and level == SOL_IP:
            control = _ip_cmsg(control, kind, data)
        elif socket_v6 and level == SOL_IPV6:
            control = _ipv6_cmsg(control, kind, data, to_v4)
        # any other level: not this protocol's, ignored as Linux does
    if control.oif:
        if control.oif not in host.interfaces:
            raise oserror(errno.ENODEV, "no such interface")
        if bound_dev and control.oif != bound_dev:
            raise oserror(errno.EINVAL, "interface differs from SO_BINDTODEVICE's")
    src = control.src
    if src is not None:
        if src in (ANY4, ANY6):
            control = control._replace(src=None)
        elif not host.ip.is_local(src):
            if len(src) == 4:  # the route lookup with a foreign saddr
                raise oserror(errno.ENETUNREACH)
            raise oserror(errno.EINVAL, "source address is not ours")
    return control


def _int_of(data: bytes) -> int:
    if len(data) != _INT.size:
        raise oserror(errno.EINVAL, "control message of the wrong length")
    return int(_INT.unpack(data)[0])


def _ip_cmsg(control: SendControl, kind: int, data: bytes) -> SendControl:
    if kind == IP_PKTINFO:
        if len(data) != _PKTINFO.size:
            raise oserror(errno.EINVAL, "IP_PKTINFO takes a struct in_pktinfo")
        ifindex, spec_dst, _addr = _PKTINFO.unpack(data)
        return control._replace(oif=ifindex, src=spec_dst)
    if kind == IP_TTL:
        ttl = _int_of(data)
        if not 1 <= ttl <= 255:
            raise oserror(errno.EINVAL, "IP_TTL out of range")
        return control._replace(ttl=ttl)
    if kind == IP_TOS:
        tos = data[0] if len(data) == 1 else _int_of(data)
        if not 0 <= tos <= 255:
            raise oserror(errno.EINVAL, "IP_TOS out of range")
        return control._replace(tos=tos)
    raise oserror(errno.EINVAL, "control message not taken by a UDP socket")


def _ipv6_cmsg(control: SendControl, kind: int, data: bytes, to_v4: bool) -> SendControl:
    if kind == IPV6_PKTINFO:
        if len(data) < _PKTINFO6.size:
            raise oserror(errno.EINVAL, "IPV6_PKTINFO takes a struct in6_pktinfo")
        address, ifindex = _PKTINFO6.unpack_from(data)
        if to_v4:  # ip_cmsg_send: only a v4-mapped source
            if not is_v4mapped(address):
                raise oserror(errno.EINVAL, "IPV6_PKTINFO to an IPv4 peer needs a "
                              "v4-mapped source")
            address = address[12:]
        if control.oif and ifindex and ifindex != control.oif:
            raise oserror(errno.EINVAL)
        return control._replace(oif=ifindex or control.oif, src=address)
    if to_v4:
        return control  # ip_cmsg_send takes only IPV6_PKTINFO of this level
    if kind in (IPV6_HOPLIMIT, IPV6_TCLASS):
        value = _int_of(data)
        if not -1 <= value <= 255:
            raise oserror(errno.EINVAL, "value out of range")
        if value == -1:
            return control  # -1: the socket's own
        if kind == IPV6_HOPLIMIT:
            return control._replace(ttl=value)
        return control._replace(tos=value)
    raise oserror(errno.EINVAL, "control message not taken by a UDP socket")

