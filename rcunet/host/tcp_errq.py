"""A TCP socket's error queue and MSG_ZEROCOPY, as Linux has them: ``SO_ZEROCOPY``
(``sock_setsockopt``), the id a ``send(MSG_ZEROCOPY)`` takes (``tcp_sendmsg_locked`` with
``msg_zerocopy_realloc``), its completion once the peer acknowledged every byte of it
(``tcp_clean_rtx_queue`` freeing the skbs, then ``__msg_zerocopy_callback``), and
``recvmsg(MSG_ERRQUEUE)`` (``inet_recv_error``: ``ip_recv_error``/``ipv6_recv_error``).

The rules themselves (ids, ranges, coalescing) are ``rcunet.core.errqueue``; this module
keeps them on the socket.  Every function here runs with the socket lock held.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from rcunet.core.errqueue import ErrorQueue, Zerocopy
from rcunet.core.tcp import State as CState
from rcunet.host.sockerr import oserror
from rcunet.tables.entry import AF_INET

if TYPE_CHECKING:
    from rcunet.core.tcp import Connection
    from rcunet.host.tcp_sock import TcpSock

#: Linux values (asm-generic/socket.h, linux/socket.h, linux/in.h, linux/in6.h)
SO_ZEROCOPY = 60
MSG_ZEROCOPY = 0x4000000
MSG_ERRQUEUE = 0x2000
MSG_CTRUNC = 0x8
MSG_TRUNC = 0x20
SOL_IP, IP_RECVERR = 0, 11
SOL_IPV6, IPV6_RECVERR = 41, 25
#: ip_recv_error / ipv6_recv_error append the offender's address to the extended error:
#: a sockaddr_in (16 bytes) or sockaddr_in6 (28), zero unless the origin is ICMP
_OFFENDER_LEN = {True: 16, False: 28}
CMSG_HDR_LEN = 16  #: CMSG_LEN(0) on LP64: struct cmsghdr


def set_zerocopy(sk: TcpSock, value: int) -> None:
    """``SO_ZEROCOPY``: 0 or 1 (else EINVAL), on TCP and UDP sockets of PF_INET/PF_INET6."""
    if value not in (0, 1):
        raise oserror(errno.EINVAL, "SO_ZEROCOPY takes 0 or 1")
    sk.zerocopy = bool(value)


def send_zerocopy(sk: TcpSock, conn: Connection, view: memoryview, now: int,
                  first: bool) -> int:
    """One round of a MSG_ZEROCOPY send (``first``: its call's first): the bytes are
    queued as any send's, and the range they belong to is recorded.  The range of the
    previous such send is extended when its bytes are still the unsent tail of the write
    queue (``tcp_write_queue_tail`` is an skb of that uarg: ``msg_zerocopy_realloc``)."""
    start = conn.write_seq
    tail_unsent = start != conn.tcb.snd_nxt
    n = conn.send(view, now)
    if n:
        zc = sk.zc
        if zc is None:
            zc = sk.zc = Zerocopy()
        last = zc.pending[-1] if zc.pending else None
        joins = tail_unsent and last is not None and last.end_seq == start
        zc.sent(n, conn.write_seq, joins, first)
    return n


def zerocopy_collect(sk: TcpSock, conn: Connection) -> bool:
    """After the engine ran: complete the ranges the peer acknowledged, or all of them when
    the send queue was dropped (the connection closed: ``tcp_write_queue_purge``).  A
    closed socket (``SOCK_DEAD``) gets no notification.  True when one was queued (the
    caller reports it: ``sk_error_report``)."""
    zc = sk.zc
    if zc is None or not zc.pending:
        return False
    if sk.user_closed:
        zc.purge(None)
        return False
    errq = error_queue(sk)
    if conn.state is CState.CLOSED:
        done = zc.purge(errq)
    else:
        done = zc.acked(conn.una_seq, errq)
    if done:
        sk.err_reports += 1
    return done


def error_queue(sk: TcpSock) -> ErrorQueue:
    errq = sk.errq
    if errq is None:
        errq = sk.errq = ErrorQueue()
    return errq


def recv_errqueue(sk: TcpSock, bufsize: int, ancbufsize: int
                  ) -> tuple[bytes, list[tuple[int, int, bytes]], int]:
    """``recvmsg(MSG_ERRQUEUE)``: the oldest entry as (payload, [(level, type, data)],
    msg_flags); EAGAIN when the queue is empty (never waits: ``inet_recv_error``).  The
    control message is ``SOL_IP``/``IP_RECVERR`` for an AF_INET socket, else
    ``SOL_IPV6``/``IPV6_RECVERR``; its data the extended error and a zero offender
    address.  ``ancbufsize`` < the control message's length truncates it (``put_cmsg``:
    MSG_CTRUNC); None: no limit."""
    errq = sk.errq
    entry = errq.dequeue() if errq is not None else None
    if entry is None:
        raise oserror(errno.EAGAIN)
    if errq:
        sk.err_reports += 1  # sock_dequeue_err_skb: more queued, sk_error_report again
        sk.wakeup()
    elif sk.poll is not None:
        sk.update_poll()
    flags = MSG_ERRQUEUE
    data = entry.payload
    if len(data) > bufsize:
        data = data[:bufsize]
        flags |= MSG_TRUNC
    v4 = sk.family == AF_INET
    level, kind = (SOL_IP, IP_RECVERR) if v4 else (SOL_IPV6, IPV6_RECVERR)
    cdata = entry.ee.pack() + bytes(_OFFENDER_LEN[v4])
    if ancbufsize < CMSG_HDR_LEN + len(cdata):
        flags |= MSG_CTRUNC
        if ancbufsize < CMSG_HDR_LEN:
            return data, [], flags
        cdata = cdata[: ancbufsize - CMSG_HDR_LEN]
    return data, [(level, kind, cdata)], flags
