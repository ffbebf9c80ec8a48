"""A TCP socket's error queue and MSG_ZEROCOPY, as Linux has them: ``SO_ZEROCOPY``
(``sock_setsockopt``), the id a ``send(MSG_ZEROCOPY)`` takes (``tcp_sendmsg_locked`` with
``msg_zerocopy_realloc``), its completion once the peer acknowledged every byte of it
(``tcp_clean_rtx_queue`` freeing the skbs, then ``__msg_zerocopy_callback``), and
``recvmsg(MSG_ERRQUEUE)`` (``inet_recv_error``: ``ip_recv_error``/``ipv6_recv_error``).

SO_TIMESTAMPING's transmit timestamps for a byte stream use the same queue: the request a
write makes (``tcp_tx_timestamp``), the SCHED/SND timestamps when the segment carrying
its last byte leaves, the ACK timestamp when the cumulative ACK passes it
(``tcp_ack_tstamp``), reported with an SCM_TIMESTAMPING control message before the
extended error (``sock_recv_timestamp``, then ``ip_recv_error``).

The rules themselves (ids, ranges, coalescing, requests) are ``rcunet.core.errqueue``;
this module keeps them on the socket.  Every function here runs with the socket lock
held.
"""

from __future__ import annotations

import errno
import struct
import time
from typing import TYPE_CHECKING

from rcunet.core import errqueue as eq
from rcunet.core.errqueue import ErrorQueue, TxTimestamps, Zerocopy
from rcunet.core.tcp import State as CState
from rcunet.host.sockerr import oserror
from rcunet.host.tcp.life import USER_CLOSED
from rcunet.tables.entry import AF_INET

if TYPE_CHECKING:
    from rcunet.core.tcp import Connection
    from rcunet.host.tcp.sock import TcpSock
    from rcunet.wire import tcp

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
SO_TIMESTAMPING = 37  #: SO_TIMESTAMPING_OLD, also the SCM_TIMESTAMPING cmsg type
SOL_SOCKET = 1
_SCM_TIMESTAMPING = struct.Struct("=qqqqqq")  #: struct scm_timestamping: 3 timespecs
#: CLOCK_REALTIME - CLOCK_MONOTONIC: a timestamp reports the wall clock, as Linux's
#: software timestamps do (a deterministic Host's virtual clock is reported as it is)
_REALTIME_OFFSET = time.time_ns() - time.monotonic_ns()


def set_zerocopy(sk: TcpSock, value: int) -> None:
    """``SO_ZEROCOPY``: 0 or 1 (else EINVAL).  Linux takes it on TCP and UDP sockets;
    rcunet's UDP sockets do not have it (ENOPROTOOPT)."""
    if value not in (0, 1):
        raise oserror(errno.EINVAL, "SO_ZEROCOPY takes 0 or 1")
    sk.zerocopy = bool(value)


def send_noted(sk: TcpSock, conn: Connection, view: memoryview, now: int, zc_round: int,
               partial_ends: bool, iov: tuple[int, ...] | None = None) -> int:
    """One round of a send whose bytes the error queue will report on: queued as any
    send's, then noted before the segments leave.

    ``zc_round`` (MSG_ZEROCOPY with SO_ZEROCOPY set; Linux ignores the flag without it):
    1, the call's first round, takes an id; 2, a later round, extends its range.  The
    range of the previous such send is extended when its bytes are still the unsent tail
    of the write queue (``tcp_write_queue_tail`` is an skb of that uarg:
    ``msg_zerocopy_realloc``).  The skbs of a zerocopy send end where ``iov`` (the
    lengths of its buffers; None: one buffer) fills MAX_SKB_FRAGS page frags, and a send
    that does not extend the tail skb's range starts an skb of its own
    (``skb_zerocopy_iter_stream``: EMSGSIZE / EEXIST).  With SO_TIMESTAMPING, the call's
    last round asks for the timestamps of its last byte (``tcp_tx_timestamp``);
    ``partial_ends``: queueing part of ``view`` ends the call."""
    start = conn.write_seq
    tail_unsent = start != conn.tcb.snd_nxt
    zc = None
    tail_is_last = False
    ends: tuple[int, ...] = ()
    if zc_round and sk.zerocopy:
        zc = sk.zc
        if zc is None:
            zc = sk.zc = Zerocopy()
        last = zc.pending[-1] if zc.pending else None
        tail_is_last = tail_unsent and last is not None and last.end_seq == start
        joins = tail_is_last and (zc_round == 2 or zc.extends(len(view), True))
        frags = zc.tail_frags if joins else 0
        ends, zc.tail_frags = eq.skb_ends(iov or (len(view),), min(len(view),
                                                                   conn.send_space), frags)
        if tail_is_last and not joins:
            ends = (0, *ends)  # another uarg's skb: this send starts a new one
    n = conn.send(view, now, ends) if ends else conn.send(view, now)
    if not n:
        return 0
    if zc is not None:
        zc.sent(n, conn.write_seq, tail_is_last, zc_round == 1)
    ts = sk.ts
    if ts is not None and (partial_ends or n == len(view)):
        ts.wrote((conn.write_seq - 1) & 0xFFFFFFFF, tail_unsent)
    return n


def set_timestamping(sk: TcpSock, value: int) -> None:
    """``SO_TIMESTAMPING`` (``sock_set_timestamping``): unknown bits or OPT_ID_TCP without
    OPT_ID are EINVAL; turning OPT_ID on sets the key base to snd_una (write_seq with
    OPT_ID_TCP), which a closed or listening TCP socket does not have (EINVAL)."""
    if value & ~eq.SOF_MASK or (value & eq.SOF_OPT_ID_TCP and not value & eq.SOF_OPT_ID):
        raise oserror(errno.EINVAL, "bad SO_TIMESTAMPING flags")
    ts = sk.ts
    if ts is None:
        ts = sk.ts = TxTimestamps()
    if value & eq.SOF_OPT_ID and not ts.flags & eq.SOF_OPT_ID:
        conn = sk.conn
        if conn is None or conn.state is CState.CLOSED:
            raise oserror(errno.EINVAL, "SOF_TIMESTAMPING_OPT_ID needs a connection")
        ts.key_base = conn.write_seq if value & eq.SOF_OPT_ID_TCP else conn.una_seq
    ts.flags = value


def realtime(sk: TcpSock) -> int:
    host = sk.host
    now: int = host.now()
    return now if host.deterministic else now + _REALTIME_OFFSET


def collect(sk: TcpSock, conn: Connection, segments: list[tcp.Repr]) -> bool:
    """After the engine ran: zerocopy completions, then the timestamps of the segments it
    produced (they are transmitted next) and of the bytes acknowledged.  True when an
    entry was queued (the caller reports it: ``sk_error_report``)."""
    done = zerocopy_collect(sk, conn)
    ts = sk.ts
    # atomic: one load of life, paired with advance(USER_CLOSED) in TcpSock.close
    if ts is not None and ts.requests and not sk.life & USER_CLOSED:
        errq = error_queue(sk)
        now = realtime(sk)
        limit = max(sk.rcvbuf, conn.options.rcvbuf)  # sk_rcvbuf (sock_queue_err_skb)
        stamped = False
        for seg in segments:
            n = len(seg.payload)
            if n:
                stamped |= ts.transmitted(seg.seq, (seg.seq + n) & 0xFFFFFFFF,
                                          bytes(seg.payload), now, errq, limit)
        stamped |= ts.acked(conn.una_seq, now, errq, limit)
        if stamped:
            sk.err_reports += 1
            done = True
    return done


def zerocopy_syn_data(sk: TcpSock, conn: Connection, n: int) -> None:
    """A Fast Open SYN carries ``n`` bytes of a MSG_ZEROCOPY send: they take its id and
    complete when the SYN-ACK (or a later ACK) acknowledges them."""
    if not sk.zerocopy:
        return
    zc = sk.zc
    if zc is None:
        zc = sk.zc = Zerocopy()
    zc.sent(n, conn.write_seq, False, True)


def zerocopy_collect(sk: TcpSock, conn: Connection) -> bool:
    """Complete the MSG_ZEROCOPY ranges the peer acknowledged, or all of them when the
    send queue was dropped (the connection closed: ``tcp_write_queue_purge``).  A closed
    socket (``SOCK_DEAD``) gets no notification.  True when one was queued."""
    zc = sk.zc
    if zc is None or not zc.pending:
        return False
    if sk.life & USER_CLOSED:  # atomic: one load, paired with advance in TcpSock.close
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
    msg_flags); EAGAIN when the queue is empty (never waits: ``inet_recv_error``).  A
    timestamp comes first as SOL_SOCKET/SCM_TIMESTAMPING when SOF_TIMESTAMPING_SOFTWARE
    asks for software timestamps (``__sock_recv_timestamp``); then ``SOL_IP``/
    ``IP_RECVERR`` for an AF_INET socket, else ``SOL_IPV6``/``IPV6_RECVERR``, the
    extended error and a zero offender address.  Control messages that do not fit in
    ``ancbufsize`` are cut as ``put_cmsg`` cuts them (MSG_CTRUNC)."""
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
    cmsgs = []
    ts = sk.ts
    if entry.tstamp_ns is not None and ts is not None and ts.flags & eq.SOF_SOFTWARE:
        sec, nsec = divmod(entry.tstamp_ns, 1_000_000_000)
        cmsgs.append((SOL_SOCKET, SO_TIMESTAMPING, _SCM_TIMESTAMPING.pack(sec, nsec, 0, 0,
                                                                           0, 0)))
    level, kind = (SOL_IP, IP_RECVERR) if v4 else (SOL_IPV6, IPV6_RECVERR)
    cmsgs.append((level, kind, entry.ee.pack() + bytes(_OFFENDER_LEN[v4])))
    out, cut = _put_cmsgs(cmsgs, ancbufsize)
    return data, out, flags | (MSG_CTRUNC if cut else 0)


def _put_cmsgs(cmsgs: list[tuple[int, int, bytes]], room: int
               ) -> tuple[list[tuple[int, int, bytes]], bool]:
    """``put_cmsg`` for each in turn: a message needs its header's room, is cut to what is
    left, and takes CMSG_SPACE (8-byte aligned) of the buffer."""
    out: list[tuple[int, int, bytes]] = []
    for level, kind, cdata in cmsgs:
        if room < CMSG_HDR_LEN:
            return out, True
        whole = CMSG_HDR_LEN + len(cdata)
        if room < whole:
            out.append((level, kind, cdata[: room - CMSG_HDR_LEN]))
            return out, True
        out.append((level, kind, cdata))
        room -= min((whole + 7) & ~7, room)
    return out, False
