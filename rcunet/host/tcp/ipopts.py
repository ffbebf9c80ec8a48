"""The IPv4-level socket options of a TCP socket, as do_ip_setsockopt and
do_ip_getsockopt treat them: IP_TOS, IP_MTU_DISCOVER and IP_FREEBIND, and the two
rules of the transmit path that read them (ip_dont_fragment, and the path-MTU update
tcp_v4_mtu_reduced skips under IP_PMTUDISC_DONT)."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from rcunet.host.sockerr import oserror

if TYPE_CHECKING:
    from rcunet.host.tcp.sock import TcpSock

IP_TOS = 1
IP_MTU_DISCOVER = 10
IP_FREEBIND = 15
#: inet->pmtudisc values (include/uapi/linux/in.h)
IP_PMTUDISC_DONT, IP_PMTUDISC_WANT, IP_PMTUDISC_DO = 0, 1, 2
IP_PMTUDISC_PROBE, IP_PMTUDISC_INTERFACE, IP_PMTUDISC_OMIT = 3, 4, 5
#: the two ECN bits of the TOS byte (INET_ECN_MASK): TCP's own, never the socket's
ECN_MASK = 0x03

OPTIONS = frozenset({IP_TOS, IP_MTU_DISCOVER, IP_FREEBIND})


def setsockopt(sk: TcpSock, opt: int, number: int) -> None:
    """do_ip_setsockopt for ``opt`` (one of ``OPTIONS``), the socket lock held."""
    if opt == IP_TOS:
        set_tos(sk, number)
    elif opt == IP_MTU_DISCOVER:
        if not IP_PMTUDISC_DONT <= number <= IP_PMTUDISC_OMIT:
            raise oserror(errno.EINVAL, "IP_MTU_DISCOVER takes 0..5")
        sk.pmtudisc = number  # atomic: one attribute store, loaded once per segment
    else:
        sk.freebind = bool(number)


def getsockopt(sk: TcpSock, opt: int) -> int:
    """do_ip_getsockopt for ``opt`` (one of ``OPTIONS``)."""
    if opt == IP_TOS:
        return sk.tos
    if opt == IP_MTU_DISCOVER:
        return sk.pmtudisc
    return int(sk.freebind)


def set_tos(sk: TcpSock, tos: int) -> None:
    """__ip_sock_set_tos: a stream socket keeps the ECN bits out of the socket's TOS
    (the connection sets ECT per segment).  Linux also drops the pinned route
    (sk_dst_reset) since its lookup keys on the TOS; rcunet's routes do not, so the
    pinned one stays right."""
    sk.tos = (tos & 0xFF & ~ECN_MASK) | (sk.tos & ECN_MASK)  # atomic: one store


def dont_fragment(pmtudisc: int) -> bool:
    """ip_dont_fragment: DF on a segment under IP_PMTUDISC_DO and WANT (rcunet has no
    locked route MTU), off under DONT, PROBE, INTERFACE and OMIT."""
    return pmtudisc in (IP_PMTUDISC_WANT, IP_PMTUDISC_DO)


def accepts_pmtu(pmtudisc: int) -> bool:
    """tcp_v4_mtu_reduced lowers the MSS to a reported path MTU unless the socket
    asked for IP_PMTUDISC_DONT, and ip_sk_accept_pmtu refuses it under INTERFACE and
    OMIT (whose packets go out at the interface MTU, fragmented on the way)."""
    return pmtudisc not in (IP_PMTUDISC_DONT, IP_PMTUDISC_INTERFACE, IP_PMTUDISC_OMIT)
