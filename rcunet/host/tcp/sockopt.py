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
        setters = _SOCKET_SETTERS
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
        setters = _TCP_SETTERS
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
    number = int_option(value)  # before the lookup: a bad value is EINVAL for any option
    setter = setters.get(opt)
    if setter is None:
        raise oserror(errno.ENOPROTOOPT)
    setter(sk, number)

#: Stores an int option's value (already read by ``int_option``) on the socket.
Setter = Callable[["TcpSock", int], None]

def _store(name: str, convert: Callable[[int], object]) -> Setter:
    """A setter that stores ``convert(value)`` as the socket's attribute ``name``."""
    def store(sk: TcpSock, number: int) -> None:
        setattr(sk, name, convert(number))
    return store

def _u32(number: int) -> int:
    return number & 0xFFFFFFFF

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
    if level == SOL_SOCKET:
        getters = _SOCKET_GETTERS
    elif level == SOL_TCP:
        getters = _TCP_GETTERS
    elif level == _pysocket.IPPROTO_IPV6 and opt == _pysocket.IPV6_V6ONLY:
        return int(sk.v6only)
    elif level == _pysocket.IPPROTO_IP and opt in ipopts.OPTIONS:
        return _as_buffer(ipopts.getsockopt(sk, opt), buflen)
    else:
        raise oserror(errno.ENOPROTOOPT)
    getter = getters.get(opt)
    if getter is None:
        raise oserror(errno.ENOPROTOOPT)
    return _as_buffer(getter(sk), buflen)

def _as_buffer(result: int, buflen: int | None) -> int | bytes:
    """An int option as getsockopt returns it: the int, or its C int's first ``buflen``
    bytes when the caller gave a buffer length."""
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

def _user_mss(sk: TcpSock) -> int:
    """TCP_MAXSEG: the connection's MSS once synchronized, else the user's or 536."""
    conn = sk.conn
    if conn is not None and conn.state.synchronized:
        return conn.tcb.snd_mss
    return sk.user_mss or TCP_MSS_DEFAULT

def _rcvbuf(sk: TcpSock) -> int:
    conn = sk.conn
    return sk.rcvbuf if conn is None else conn.rcvbuf

def _sndbuf(sk: TcpSock) -> int:
    conn = sk.conn
    return sk.sndbuf if conn is None else conn.options.sndbuf

# Built once: a table per level, by option number (setsockopt and getsockopt look up one).
_SOCKET_SETTERS: dict[int, Setter] = {
    _pysocket.SO_REUSEADDR: _store("reuseaddr", bool),
    _pysocket.SO_REUSEPORT: _store("reuseport", bool),
    _pysocket.SO_KEEPALIVE: _store("keepalive", bool),
    _pysocket.SO_RCVBUF: _set_rcvbuf,
    _pysocket.SO_SNDBUF: _set_sndbuf,
    tcp_errq.SO_ZEROCOPY: tcp_errq.set_zerocopy,
    tcp_errq.SO_TIMESTAMPING: tcp_errq.set_timestamping,
    SO_MARK: _store("mark", _u32),
}
_TCP_SETTERS: dict[int, Setter] = {
    _pysocket.TCP_NODELAY: _store("nodelay", bool),
    TCP_CORK: _store("cork", bool),
    TCP_INQ: _store("inq", bool),
    TCP_USER_TIMEOUT: _set_user_timeout,
    TCP_NOTSENT_LOWAT: _store("notsent_lowat", _u32),
    _pysocket.TCP_MAXSEG: _set_maxseg,
    TCP_KEEPIDLE: _store("keepidle", lambda number: ranged(number, 1, 32767)),
    TCP_KEEPINTVL: _store("keepintvl", lambda number: ranged(number, 1, 32767)),
    TCP_KEEPCNT: _store("keepcnt", lambda number: ranged(number, 1, 127)),
    TCP_SYNCNT: _store("syncnt", lambda number: ranged(number, 1, 127)),
    TCP_RTO_MAX_MS: _store("rto_max", _rto_max),
    TCP_RTO_MIN_US: _store("rto_min", lambda number: _in_jiffies(
        number, TIMEOUT_MIN, RTO_MIN, "TCP_RTO_MIN_US")),
    TCP_DELACK_MAX_US: _store("delack_max", lambda number: _in_jiffies(
        number, TIMEOUT_MIN, DELACK_MAX, "TCP_DELACK_MAX_US")),
}
#: Reads an int option's value from the socket.
Getter = Callable[["TcpSock"], int]

def _load(name: str, unit: int = 1) -> Getter:
    """A getter of the socket's attribute ``name`` (an int or a flag) in ``unit``s."""
    def load(sk: TcpSock) -> int:
        return int(getattr(sk, name)) // unit
    return load

def _load_u32(name: str) -> Getter:
    """A getter of a u32 the socket keeps (SO_MARK, TCP_NOTSENT_LOWAT), read back as the
    C int getsockopt copies out: 0xFFFFFFFF is -1, as on Linux."""
    def load(sk: TcpSock) -> int:
        value: int = getattr(sk, name)
        return value - (1 << 32) if value >= 1 << 31 else value
    return load

def _timestamping(sk: TcpSock) -> int:
    return sk.ts.flags if sk.ts else 0

def _acceptconn(sk: TcpSock) -> int:
    return int(sk.state == State.LISTEN)

_SOCKET_GETTERS: dict[int, Getter] = {
    _pysocket.SO_REUSEADDR: _load("reuseaddr"),
    _pysocket.SO_REUSEPORT: _load("reuseport"),
    _pysocket.SO_KEEPALIVE: _load("keepalive"),
    _pysocket.SO_RCVBUF: _rcvbuf,
    _pysocket.SO_SNDBUF: _sndbuf,
    _pysocket.SO_ERROR: _so_error,
    _pysocket.SO_TYPE: lambda sk: _pysocket.SOCK_STREAM,
    tcp_errq.SO_ZEROCOPY: _load("zerocopy"),
    tcp_errq.SO_TIMESTAMPING: _timestamping,
    SO_MARK: _load_u32("mark"),
    SO_ACCEPTCONN: _acceptconn,
}
_TCP_GETTERS: dict[int, Getter] = {
    _pysocket.TCP_NODELAY: _load("nodelay"),
    TCP_CORK: _load("cork"),
    TCP_INQ: _load("inq"),
    TCP_USER_TIMEOUT: _load("user_timeout"),
    TCP_NOTSENT_LOWAT: _load_u32("notsent_lowat"),
    _pysocket.TCP_MAXSEG: _user_mss,
    TCP_KEEPIDLE: lambda sk: _keepalive_setting(sk, "keepalive_time", SECOND),
    TCP_KEEPINTVL: lambda sk: _keepalive_setting(sk, "keepalive_intvl", SECOND),
    TCP_KEEPCNT: lambda sk: _keepalive_setting(sk, "keepalive_probes", 1),
    TCP_SYNCNT: lambda sk: _keepalive_setting(sk, "syn_retries", 1),
    TCP_RTO_MAX_MS: _load("rto_max", MS),  # jiffies_to_msecs
    TCP_RTO_MIN_US: _load("rto_min", 1000),  # jiffies_to_usecs
    TCP_DELACK_MAX_US: _load("delack_max", 1000),
}
