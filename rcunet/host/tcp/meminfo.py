"""SO_MEMINFO: a socket's memory as Linux's sk_get_meminfo reports it (the u32 array
``ss -m`` shows as skmem and packetdrill's code blocks read as ``SK_MEMINFO_*``).

rmem_alloc is the truesize the engine charges for every received segment held, in
order or not (rcunet.core.tcp.window.rx_truesize); wmem_queued is the send queue's
truesize as Linux charges it (its bytes and one empty skb per skb it would hold:
rcunet.core.tcp.sndbuf); backlog is the socket
lock's backlog charge and drops the segments that backlog refused.  rcunet keeps no
page-granular reservations (fwd_alloc), no option memory (optmem) and hands segments
to the link at once (wmem_alloc): those read 0.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rcunet.host.tcp.sock import TcpSock

#: SOL_SOCKET option (include/uapi/asm-generic/socket.h).
SO_MEMINFO = 55
#: enum sk_meminfo (include/uapi/linux/sock_diag.h), in array order.
NAMES = ("SK_MEMINFO_RMEM_ALLOC", "SK_MEMINFO_RCVBUF", "SK_MEMINFO_WMEM_ALLOC",
         "SK_MEMINFO_SNDBUF", "SK_MEMINFO_FWD_ALLOC", "SK_MEMINFO_WMEM_QUEUED",
         "SK_MEMINFO_OPTMEM", "SK_MEMINFO_BACKLOG", "SK_MEMINFO_DROPS")
_ARRAY = struct.Struct(f"{len(NAMES)}I")


def values(sk: TcpSock) -> tuple[int, ...]:
    """sk_get_meminfo for ``sk``; the caller holds the socket lock."""
    conn = sk.conn
    if conn is None:
        rmem, rcvbuf, sndbuf, queued = 0, sk.rcvbuf, sk.sndbuf, 0
    else:
        rmem = conn.receiver.rmem
        rcvbuf, sndbuf = conn.options.rcvbuf, conn.options.sndbuf
        queued = conn.sender.wmem_queued()
    lock = sk.sl
    with lock.slock:  # the backlog's fields are the spinlock's (socklock.py)
        backlog, drops = lock.backlog_len, lock.backlog_drops
    return (rmem, rcvbuf, 0, sndbuf, 0, queued, 0, backlog, drops)


def getsockopt(sk: TcpSock, buflen: int | None) -> bytes:
    """SO_MEMINFO: the array, cut to ``buflen`` (sock_getsockopt copies at most that)."""
    since = sk._lock()
    try:
        mem = values(sk)
    finally:
        sk._unlock(since)
    data = _ARRAY.pack(*(v & 0xFFFFFFFF for v in mem))
    return data if buflen is None else data[:buflen]


def snapshot(sk: TcpSock) -> dict[str, int]:
    """The array by name, for packetdrill's code blocks."""
    since = sk._lock()
    try:
        return dict(zip(NAMES, values(sk), strict=True))
    finally:
        sk._unlock(since)


__all__ = ["NAMES", "SO_MEMINFO", "getsockopt", "snapshot", "values"]
