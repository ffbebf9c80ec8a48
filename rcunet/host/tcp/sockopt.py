"""A TCP socket's options: setsockopt and getsockopt (SOL_SOCKET, SOL_TCP, IPV6_V6ONLY)
and TCP_INFO; what a connection's engine takes from them is ``connopts.py``'s.
Functions of a ``rcunet.host.tcp.sock.TcpSock``, which delegates its option calls here;
the option attributes they read and write are the socket's, guarded by the socket lock
(setsockopt and getsockopt take it)."""

from __future__ import annotations

import errno
import socket as _pysocket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from rcunet.core.tcp import State as CState
from rcunet.core.tcp.delack import DELACK_MAX
from rcunet.core.tcp.options import MS, SECOND, jiffies_ns
from rcunet.core.tcp.timers import RTO_MIN, TIMEOUT_MIN
from rcunet.host.sockerr import as_python_error, int_option, oserror, ranged
from rcunet.host.tcp import errq as tcp_errq
from rcunet.host.tcp import fastopen_opts as tcp_fastopen
from rcunet.host.tcp import ipopts, md5
from rcunet.host.tcp import meminfo as tcp_meminfo
from rcunet.host.tcp.connopts import TCP_MIN_MSS, conn_options
from rcunet.host.tcp.info import pack as pack_tcp_info
from rcunet.host.tcp.info import snapshot as tcp_info_snapshot
from rcunet.tables.entry import State

if TYPE_CHECKING:
    from rcunet.host.tcp.sock import TcpSock

SOL_TCP = _pysocket.IPPROTO_TCP
SOL_SOCKET = _pysocket.SOL_SOCKET
SO_ACCEPTCONN = getattr(_pysocket, "SO_ACCEPTCONN", 30)
SO_MARK = getattr(_pysocket, "SO_MARK", 36)
TCP_KEEPIDLE = getattr(_pysocket, "TCP_KEEPIDLE", 4)
TCP_KEEPINTVL = getattr(_pysocket, "TCP_KEEPINTVL", 5)
TCP_KEEPCNT = getattr(_pysocket, "TCP_KEEPCNT", 6)
TCP_SYNCNT = getattr(_pysocket, "TCP_SYNCNT", 7)
TCP_INFO = getattr(_pysocket, "TCP_INFO", 11)
TCP_CORK = getattr(_pysocket, "TCP_CORK", 3)
TCP_INQ = 36  # also the cmsg type TCP_CM_INQ (Linux include/uapi/linux/tcp.h)
TCP_USER_TIMEOUT = getattr(_pysocket, "TCP_USER_TIMEOUT", 18)
TCP_NOTSENT_LOWAT = getattr(_pysocket, "TCP_NOTSENT_LOWAT", 25)
#: Linux 6.15+ (include/uapi/linux/tcp.h): per-socket RTO ceiling (ms), RTO floor (us)
#: and delayed-ACK ceiling (us).
TCP_RTO_MAX_MS, TCP_RTO_MIN_US, TCP_DELACK_MAX_US = 44, 45, 46
#: Linux TCP_RTO_MAX and TCP_RTO_MAX_MIN_SEC: the bounds of TCP_RTO_MAX_MS.
RTO_MAX, RTO_MAX_MIN = 120 * SECOND, 1 * SECOND
#: The one SOL_SOCKET option a live connection's engine reads (``live_options``).
_SO_KEEPALIVE = (SOL_SOCKET, _pysocket.SO_KEEPALIVE)
_BUFFERS = (_pysocket.SO_RCVBUF, _pysocket.SO_SNDBUF)
_LINGER = struct.Struct("ii")
#: The user MSS ceiling (MAX_TCP_WINDOW); the floor is TCP_MIN_MSS.
TCP_MAX_USER_MSS = 32767
TCP_MSS_DEFAULT = 536


def setsockopt(sk: TcpSock, level: int, opt: int, value: int | bytes) -> None:
    since = sk._lock()
    try:
        _setsockopt_locked(sk, level, opt, value)
        if sk.conn is not None and level == SOL_SOCKET and opt in _BUFFERS:
            sk.update_buffers_locked(opt == _pysocket.SO_RCVBUF)
        if sk.conn is not None and (level == SOL_TCP or (level, opt) == _SO_KEEPALIVE):
            # what live_options carries; TCP_NODELAY on pushes the tail
            push = level == SOL_TCP and opt == _pysocket.TCP_NODELAY and sk.nodelay
            sk.update_options_locked(push)
    finally:
        sk._unlock(since)

def _setsockopt_locked(sk: TcpSock, level: int, opt: int, value: int | bytes) -> None:
    if level == SOL_SOCKET:
        if opt == _pysocket.SO_LINGER:
            if not isinstance(value, bytes | bytearray) or len(value) < _LINGER.size:
                raise oserror(errno.EINVAL, "SO_LINGER takes struct linger (8 bytes)")
            onoff, seconds = _LINGER.unpack_from(value)
            sk.linger = (bool(onoff), max(0, seconds))
            return
        number = int_option(value)
        setters: dict[int, Callable[[], None]] = {
            _pysocket.SO_REUSEADDR: lambda: setattr(sk, "reuseaddr", bool(number)),
            _pysocket.SO_REUSEPORT: lambda: setattr(sk, "reuseport", bool(number)),
            _pysocket.SO_KEEPALIVE: lambda: setattr(sk, "keepalive", bool(number)),
            _pysocket.SO_RCVBUF: lambda: _set_rcvbuf(sk, number),
            _pysocket.SO_SNDBUF: lambda: _set_sndbuf(sk, number),
            tcp_errq.SO_ZEROCOPY: lambda: tcp_errq.set_zerocopy(sk, number),
            tcp_errq.SO_TIMESTAMPING: lambda: tcp_errq.set_timestamping(sk, number),
            SO_MARK: lambda: setattr(sk, "mark", number & 0xFFFFFFFF),
        }
    elif level == SOL_TCP:
        if opt in tcp_fastopen.FASTOPEN_OPTIONS:
            tcp_fastopen.setsockopt(sk, opt, value)
            return
        if opt in (md5.TCP_MD5SIG, md5.TCP_MD5SIG_EXT):
            # one store of a new tuple: lockless readers see the old keys or the new
            try:
                sk.md5_keys = md5.apply_setsockopt(sk.md5_keys, sk.family, opt, value)
            except OSError as err:
                raise as_python_error(err) from None
            return
        number = int_option(value)
        setters = {
            _pysocket.TCP_NODELAY: lambda: setattr(sk, "nodelay", bool(number)),
            TCP_CORK: lambda: setattr(sk, "cork", bool(number)),
            TCP_INQ: lambda: setattr(sk, "inq", bool(number)),
            TCP_USER_TIMEOUT: lambda: _set_user_timeout(sk, number),
            TCP_NOTSENT_LOWAT: lambda: setattr(sk, "notsent_lowat",
                                               number & 0xFFFFFFFF),
            _pysocket.TCP_MAXSEG: lambda: _set_maxseg(sk, number),
            TCP_KEEPIDLE: lambda: setattr(sk, "keepidle", ranged(number, 1, 32767)),
            TCP_KEEPINTVL: lambda: setattr(sk, "keepintvl", ranged(number, 1, 32767)),
            TCP_KEEPCNT: lambda: setattr(sk, "keepcnt", ranged(number, 1, 127)),
            TCP_SYNCNT: lambda: setattr(sk, "syncnt", ranged(number, 1, 127)),
            TCP_RTO_MAX_MS: lambda: setattr(sk, "rto_max", _rto_max(number)),
            TCP_RTO_MIN_US: lambda: setattr(sk, "rto_min", _in_jiffies(
                number, TIMEOUT_MIN, RTO_MIN, "TCP_RTO_MIN_US")),
            TCP_DELACK_MAX_US: lambda: setattr(sk, "delack_max", _in_jiffies(
                number, TIMEOUT_MIN, DELACK_MAX, "TCP_DELACK_MAX_US")),
        }
    elif level in (_pysocket.IPPROTO_IP, _pysocket.IPPROTO_IPV6):
        if level == _pysocket.IPPROTO_IP and opt in ipopts.OPTIONS:
            ipopts.setsockopt(sk, opt, int_option(value))
            return
        if level == _pysocket.IPPROTO_IPV6 and opt == _pysocket.IPV6_V6ONLY:
            if sk.tb is not None:
                raise oserror(errno.EINVAL)
            sk.v6only = bool(int_option(value))
            return
        raise oserror(errno.ENOPROTOOPT)
    else:
        raise oserror(errno.ENOPROTOOPT)
    setter = setters.get(opt)
    if setter is None:
        raise oserror(errno.ENOPROTOOPT)
    setter()

def _set_user_timeout(sk: TcpSock, value: int) -> None:
    """TCP_USER_TIMEOUT in ms: negative is EINVAL (do_tcp_setsockopt ->
    tcp_sock_set_user_timeout)."""
    if value < 0:
        raise oserror(errno.EINVAL, "TCP_USER_TIMEOUT must be >= 0")
    sk.user_timeout = value

def _rto_max(value: int) -> int:
    """TCP_RTO_MAX_MS: 1 s to TCP_RTO_MAX (120 s), else EINVAL (do_tcp_setsockopt)."""
    if not RTO_MAX_MIN <= value * MS <= RTO_MAX:
        raise oserror(errno.EINVAL, "TCP_RTO_MAX_MS must be 1000..120000")
    return value * MS

def _in_jiffies(value: int, low: int, high: int, name: str) -> int:
    """TCP_RTO_MIN_US / TCP_DELACK_MAX_US: microseconds rounded up to a jiffy
    (usecs_to_jiffies; a negative int is a huge unsigned one), within [low, high]
    (TCP_TIMEOUT_MIN and TCP_RTO_MIN / TCP_DELACK_MAX), else EINVAL."""
    ns = jiffies_ns(value & 0xFFFFFFFF)
    if not low <= ns <= high:
        raise oserror(errno.EINVAL, f"{name} out of range")
    return ns

def _set_maxseg(sk: TcpSock, value: int) -> None:
    if value and not TCP_MIN_MSS <= value <= TCP_MAX_USER_MSS:
        raise oserror(errno.EINVAL, f"TCP_MAXSEG must be {TCP_MIN_MSS}..{TCP_MAX_USER_MSS}")
    sk.user_mss = value

def getsockopt(sk: TcpSock, level: int, opt: int, buflen: int | None = None) -> int | bytes:
    if level == SOL_SOCKET and opt == _pysocket.SO_LINGER:
        return _LINGER.pack(int(sk.linger[0]), sk.linger[1])
    if level == SOL_TCP and opt == TCP_INFO:
        return tcp_info(sk, buflen)
    if level == SOL_SOCKET and opt == tcp_meminfo.SO_MEMINFO:
        return tcp_meminfo.getsockopt(sk, buflen)
    if level == SOL_TCP and opt in tcp_fastopen.FASTOPEN_OPTIONS:
        return tcp_fastopen.getsockopt(sk, opt, buflen)
    conn = sk.conn
    getters: dict[int, Callable[[], int]]
    if level == SOL_SOCKET:
        getters = {
            _pysocket.SO_REUSEADDR: lambda: int(sk.reuseaddr),
            _pysocket.SO_REUSEPORT: lambda: int(sk.reuseport),
            _pysocket.SO_KEEPALIVE: lambda: int(sk.keepalive),
            _pysocket.SO_RCVBUF: lambda: sk.rcvbuf if conn is None else conn.rcvbuf,
            _pysocket.SO_SNDBUF: lambda: sk.sndbuf if conn is None else conn.options.sndbuf,
            _pysocket.SO_ERROR: lambda: _so_error(sk),
            _pysocket.SO_TYPE: lambda: _pysocket.SOCK_STREAM,
            tcp_errq.SO_ZEROCOPY: lambda: int(sk.zerocopy),
            tcp_errq.SO_TIMESTAMPING: lambda: sk.ts.flags if sk.ts else 0,
            SO_MARK: lambda: sk.mark,
            SO_ACCEPTCONN: lambda: int(sk.state == State.LISTEN),
        }
    elif level == SOL_TCP:
        getters = {
            _pysocket.TCP_NODELAY: lambda: int(sk.nodelay),
            TCP_CORK: lambda: int(sk.cork),
            TCP_INQ: lambda: int(sk.inq),
            TCP_USER_TIMEOUT: lambda: sk.user_timeout,
            TCP_NOTSENT_LOWAT: lambda: sk.notsent_lowat,
            _pysocket.TCP_MAXSEG: lambda: (conn.tcb.snd_mss if conn is not None
                                           and conn.state.synchronized
                                           else sk.user_mss or TCP_MSS_DEFAULT),
            TCP_KEEPIDLE: lambda: _keepalive_setting(sk, "keepalive_time", SECOND),
            TCP_KEEPINTVL: lambda: _keepalive_setting(sk, "keepalive_intvl", SECOND),
            TCP_KEEPCNT: lambda: _keepalive_setting(sk, "keepalive_probes", 1),
            TCP_SYNCNT: lambda: _keepalive_setting(sk, "syn_retries", 1),
            TCP_RTO_MAX_MS: lambda: sk.rto_max // MS,  # jiffies_to_msecs
            TCP_RTO_MIN_US: lambda: sk.rto_min // 1000,  # jiffies_to_usecs
            TCP_DELACK_MAX_US: lambda: sk.delack_max // 1000,
        }
    elif level == _pysocket.IPPROTO_IPV6 and opt == _pysocket.IPV6_V6ONLY:
        return int(sk.v6only)
    elif level == _pysocket.IPPROTO_IP and opt in ipopts.OPTIONS:
        getters = {opt: lambda: ipopts.getsockopt(sk, opt)}
    else:
        raise oserror(errno.ENOPROTOOPT)
    getter = getters.get(opt)
    if getter is None:
        raise oserror(errno.ENOPROTOOPT)
    result = getter()
    if buflen is not None:
        return struct.pack("i", result)[:buflen]
    return result

def inq_hint(sk: TcpSock) -> int:
    """Linux tcp_inq_hint: in-order bytes not read yet; 1 once none are left and the
    peer's FIN (or a reset) ended the stream (SOCK_DONE), so a reader that asked for
    TCP_INQ reads on to the EOF."""
    since = sk._lock()
    try:
        conn = sk.conn
        inq = conn.readable if conn is not None else 0
        if inq == 0 and (conn is None or conn.state.fin_received
                         or conn.state is CState.CLOSED):
            inq = 1
    finally:
        sk._unlock(since)
    return inq

def recv_cmsgs(sk: TcpSock) -> list[tuple[int, int, bytes]]:
    """The control messages a recvmsg that just read data gets: TCP_CM_INQ with the
    TCP_INQ hint, computed after the read as tcp_recvmsg does."""
    if not sk.inq:
        return []
    return [(SOL_TCP, TCP_INQ, struct.pack("i", inq_hint(sk)))]

def tcp_info(sk: TcpSock, buflen: int | None = None) -> bytes:
    """TCP_INFO: Linux's struct tcp_info (host/tcp/info.py), cut to ``buflen`` as
    do_tcp_getsockopt copies min(len, sizeof); a negative length is EINVAL."""
    if buflen is not None and buflen < 0:
        raise oserror(errno.EINVAL, "TCP_INFO length must be >= 0")
    since = sk._lock()
    try:
        values = tcp_info_snapshot(sk, sk.host.now())
    finally:
        sk._unlock(since)
    return pack_tcp_info(values, buflen)

def _keepalive_setting(sk: TcpSock, name: str, unit: int) -> int:
    """A TCP_KEEP* value: the socket's own, else what the sysctls give."""
    return int(getattr(conn_options(sk, TCP_MSS_DEFAULT), name) // unit)

def _so_error(sk: TcpSock) -> int:
    since = sk._lock()
    try:
        err = sk._take_error()
    finally:
        sk._unlock(since)
    return err

def _set_rcvbuf(sk: TcpSock, number: int) -> None:
    """sock_setsockopt SO_RCVBUF: the value as a u32, capped by net.core.rmem_max (not
    tcp_rmem[2], which bounds autotuning only), doubled for overhead, at least
    SOCK_MIN_RCVBUF; autotuning stops (SOCK_RCVBUF_LOCK)."""
    sk.rcvbuf = max(2304, min(number & 0xFFFFFFFF, sk.host.tuning.rmem_max) * 2)
    sk.rcvbuf_locked = True

def _set_sndbuf(sk: TcpSock, number: int) -> None:
    """sock_setsockopt SO_SNDBUF: as SO_RCVBUF, with net.core.wmem_max and
    SOCK_MIN_SNDBUF."""
    sk.sndbuf = max(4608, min(number & 0xFFFFFFFF, sk.host.tuning.wmem_max) * 2)
    sk.sndbuf_locked = True

