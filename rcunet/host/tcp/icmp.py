"""ICMP errors for TCP (Linux ``tcp_v4_err`` / ``tcp_v6_err``): path MTU reductions resize
the connection (deferred to release_sock while the user owns the socket), other errors
become the soft error SO_ERROR reports, and abort a connection still in SYN_SENT; a
request still in SYN_RECV is dropped by the fatal ones, untouched by the rest
(``tcp_req_err``)."""

from __future__ import annotations

import errno
from functools import partial
from typing import TYPE_CHECKING

from rcunet.core.tcp import State as CState
from rcunet.host.sockerr import wire
from rcunet.host.tcp.ipopts import accepts_pmtu
from rcunet.host.tcp.sock import ICMP_DEFERRED, MTU_REDUCED_DEFERRED, TcpSock
from rcunet.tables.ehash import put_entry
from rcunet.wire import icmpv4, icmpv6
from rcunet.wire.seqnum import le

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.host.tcp.demux import Demux

#: Errors that abort a connection in SYN_SENT (icmp_err_convert's fatal ones).
_HARD_ERRORS = frozenset({errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH,
                          errno.ENOPROTOOPT, errno.EACCES})


class IcmpErrors:
    """The Host's ICMP error handler for TCP; holds no state (a socket's ``mtu_info``
    and ``soft_err`` are the socket's)."""

    def __init__(self, host: Host, demux: Demux) -> None:
        self.host = host
        self.demux = demux

    def error(self, family: int, kind: int, code: int, reporter: bytes,
                   flow: icmpv4.QuotedFlow | icmpv6.QuotedFlow) -> None:
        """tcp_v4_err: a hard error aborts a connection still in SYN_SENT; otherwise it
        is remembered as the soft error SO_ERROR reports."""
        if flow.src_port is None or flow.dst_port is None:
            return
        found = self.demux.lookup_established(flow.src, flow.src_port, flow.dst, flow.dst_port, 0)
        if found is None:
            return
        try:
            if not isinstance(found, TcpSock):
                return
            if _is_request(found):
                self._request_error(found, family, kind, code, _quoted_seq(flow))
                return
            if (family == 4 and kind == icmpv4.DEST_UNREACHABLE and code == icmpv4.FRAG_NEEDED) \
                    or (family == 6 and kind == icmpv6.PACKET_TOO_BIG):
                # The IP layer has updated the path MTU; the connection resizes its
                # segments now, or at release_sock when the user owns the socket
                # (Linux TCP_MTU_REDUCED_DEFERRED with tp->mtu_info).
                mtu = self.host.pmtu.get(flow.dst, self.host.now())
                if mtu is not None:
                    found.note_mtu_info(mtu, _quoted_seq(flow))
                    found.sl.bh_defer(MTU_REDUCED_DEFERRED,
                                     partial(self.mtu_reduced_locked, found))
                    found.post()
            elif not self._icmp_in_window(found, _quoted_seq(flow)):
                self.host.counters.inc("TcpExtOutOfWindowIcmps")
            else:
                err = _icmp_errno(family, kind, code)
                found.note_soft_error(err)  # a hard error also aborts SYN_SENT below
                found.sl.bh_defer(ICMP_DEFERRED, partial(self._icmp_locked, found, err))
                found.post()
        finally:
            put_entry(found)

    def _request_error(self, sk: TcpSock, family: int, kind: int, code: int,
                       seq: int | None) -> None:
        """tcp_req_err: an error for what Linux holds as a request socket (a child still
        in SYN_RECV, not Fast Open) must quote our ISN, else it is out of window; one
        tcp_v4_err / tcp_v6_err calls fatal drops the request silently, as if it had
        never been (inet_csk_reqsk_queue_drop, counted in the listener's drops: a later
        ACK then meets the listener).  No other error leaves a trace: a request has no
        sk_err for accept() to hand over."""
        conn = sk.conn
        if conn is None:
            return
        if seq != conn.tcb.iss:
            self.host.counters.inc("TcpExtOutOfWindowIcmps")
        elif _aborts_request(family, kind, code):
            self.host.counters.inc("TcpExtListenDrops")
            err = _icmp_errno(family, kind, code)
            sk.sl.bh_defer(ICMP_DEFERRED, partial(self._drop_request_locked, sk, err))
            sk.post()

    def _drop_request_locked(self, sk: TcpSock, err: int) -> None:
        conn = sk.conn
        if conn is not None and conn.state is CState.SYN_RECEIVED:
            sk.engine(conn.fail, err, self.host.now())

    def mtu_reduced_locked(self, sk: TcpSock) -> None:
        """tcp_v4_mtu_reduced, under the socket lock: an error quoting a sequence number
        we never sent or that is already acknowledged is ignored (RFC 5927 §4.1,
        ``TcpExtOutOfWindowIcmps``); otherwise the connection lowers its MSS to the path
        and resends its flight."""
        info = sk.take_mtu_info()
        conn = sk.conn
        if info is None or conn is None:
            return
        mtu, seq = info
        t = conn.tcb
        if seq is not None and not (le(t.snd_una, seq) and le(seq, t.snd_max)):
            self.host.counters.inc("TcpExtOutOfWindowIcmps")
            return
        v4 = len(wire(sk.faddr)) == 4
        if v4 and not accepts_pmtu(sk.pmtudisc):
            return  # tcp_v4_mtu_reduced: IP_PMTUDISC_DONT keeps the MSS
        headers = 40 if v4 else 60  # IP + bare TCP header
        sk.engine(conn.mtu_reduced, mtu - headers, self.host.now())

    @staticmethod
    def _icmp_in_window(sk: TcpSock, seq: int | None) -> bool:
        """tcp_v4_err: an error must quote a sequence number in [SND.UNA, SND.MAX]
        (the ISN for a Fast Open child, whose SYN,ACK SND.UNA does not cover yet).
        SND.MAX, not SND.NXT: Linux's snd_nxt is the highest sent (it never moves back),
        ours goes back to SND.UNA after an RTO while the later segments are still out.
        Lockless: the connection and its two sequence numbers are single attribute
        loads; a stale value misjudges one ICMP error, as a racing ACK would."""
        conn = sk.conn
        if seq is None or conn is None:
            return True
        t = conn.tcb
        start = t.iss if conn.state is CState.SYN_RECEIVED else t.snd_una
        return le(start, seq) and le(seq, t.snd_max)

    def _icmp_locked(self, sk: TcpSock, err: int) -> None:
        conn = sk.conn
        if conn is not None and conn.state is CState.SYN_SENT and err in _HARD_ERRORS:
            sk.engine(conn.abort, self.host.now())
        elif conn is not None and conn.fastopen_child and conn.state is CState.SYN_RECEIVED \
                and self._fastopen_unaccepted(sk):
            # tcp_v4_err for a Fast Open child nobody accepted yet: sk_err, then
            # tcp_done (no RST); read() reports the error after the SYN's data
            sk.note_soft_error(0)
            sk.engine(conn.fail, err, self.host.now())

    @staticmethod
    def _fastopen_unaccepted(sk: TcpSock) -> bool:
        """Still on its listener's accept queue (Linux: fastopen_rsk->sk still set)."""
        lsk = sk.tfo_listener
        if lsk is None:
            return False
        with lsk.rskq_lock:
            return sk in lsk.acceptq


def _is_request(sk: TcpSock) -> bool:
    """Would Linux hold ``sk`` as a request socket (TCP_NEW_SYN_RECV)?  A passive child
    whose handshake has not completed; a Fast Open child is a full socket from its SYN.
    Lockless: loads of the connection and its state; a child that completes its
    handshake meanwhile is re-checked under its lock (``_drop_request_locked``)."""
    conn = sk.conn
    return (conn is not None and conn.state is CState.SYN_RECEIVED and conn.passive
            and not conn.fastopen_child)


def _aborts_request(family: int, kind: int, code: int) -> bool:
    """The errors that drop a request socket: tcp_v4_err's parameter problem, time
    exceeded and network or host unreachable; tcp_v6_err's fatal ones
    (icmpv6_err_convert: a parameter problem, and a destination unreachable but for no
    route and address unreachable)."""
    if family == 4:
        return kind in (icmpv4.PARAMETER_PROBLEM, icmpv4.TIME_EXCEEDED) or (
            kind == icmpv4.DEST_UNREACHABLE
            and code in (icmpv4.NET_UNREACHABLE, icmpv4.HOST_UNREACHABLE))
    if kind == icmpv6.PARAMETER_PROBLEM:
        return True
    # code 2, beyond scope (Linux's table still reads it as the old "not a
    # neighbour"), is not fatal either
    return kind == icmpv6.DEST_UNREACHABLE and code not in (
        icmpv6.NO_ROUTE, icmpv6.BEYOND_SCOPE, icmpv6.ADDRESS_UNREACHABLE)


def _quoted_seq(flow: icmpv4.QuotedFlow | icmpv6.QuotedFlow) -> int | None:
    """The sequence number of the segment an ICMP error quotes (bytes 4..8 of its TCP
    header), when the quote holds it."""
    head = flow.transport_head
    return int.from_bytes(head[4:8], "big") if len(head) >= 8 else None


def _icmp_errno(family: int, kind: int, code: int) -> int:
    from rcunet.host.udp import _icmp_errno as convert

    return convert(family, kind, code)
