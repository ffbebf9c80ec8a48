"""TCP Fast Open's socket options (Linux do_tcp_setsockopt / do_tcp_getsockopt:
TCP_FASTOPEN, TCP_FASTOPEN_CONNECT, TCP_FASTOPEN_KEY, TCP_FASTOPEN_NO_COOKIE) and what
listen() does for Fast Open (inet_listen).  The listener path is
``rcunet.host.tcp.fastopen``."""

from __future__ import annotations

import errno
import hashlib
import socket as _pysocket
import struct
from typing import TYPE_CHECKING

from rcunet.core.tcp import State as CState
from rcunet.core.tcp import fastopen
from rcunet.host.sockerr import oserror, wire
from rcunet.host.tcp import errq as tcp_errq
from rcunet.tables.entry import State

if TYPE_CHECKING:
    from rcunet.host.tcp.sock import TcpSock

SOL_TCP = _pysocket.IPPROTO_TCP
#: Linux's option numbers (include/uapi/linux/tcp.h).
TCP_FASTOPEN = 23
TCP_FASTOPEN_CONNECT = 30
TCP_FASTOPEN_KEY = 33
TCP_FASTOPEN_NO_COOKIE = 34
FASTOPEN_OPTIONS = frozenset({TCP_FASTOPEN, TCP_FASTOPEN_CONNECT, TCP_FASTOPEN_KEY,
                              TCP_FASTOPEN_NO_COOKIE})
_CLOSE_OR_LISTEN = (State.CLOSE, State.LISTEN)


def host_key(secret: bytes) -> bytes:
    """The Host's own Fast Open key when net.ipv4.tcp_fastopen_key was never set (Linux
    draws a random one on first use: tcp_fastopen_init_key_once); derived from the
    Host's secret, so a seeded Host is repeatable."""
    return hashlib.blake2b(secret, digest_size=fastopen.KEY_LENGTH,
                           person=b"tcp-fastopen").digest()


def setsockopt(sk: TcpSock, opt: int, value: int | bytes) -> None:
    """do_tcp_setsockopt's Fast Open options (socket lock held)."""
    if opt == TCP_FASTOPEN_KEY:
        # tcp_fastopen_reset_cipher for this listener: 16 bytes, or 32 with a backup key
        if not isinstance(value, bytes | bytearray) or len(value) not in (16, 32):
            raise oserror(errno.EINVAL, "TCP_FASTOPEN_KEY takes 16 or 32 bytes")
        raw = bytes(value)
        sk.fastopen_keys = (raw[:16],) if len(raw) == 16 else (raw[:16], raw[16:])
        return
    number = _number(value)
    if opt == TCP_FASTOPEN:
        if number < 0 or sk.state not in _CLOSE_OR_LISTEN:
            raise oserror(errno.EINVAL)
        sk.fastopen_max_qlen = min(number, sk.host.tuning.somaxconn)  # fastopen_queue_tune
    elif opt == TCP_FASTOPEN_CONNECT:
        if not 0 <= number <= 1:
            raise oserror(errno.EINVAL)
        if not sk.host.tuning.tcp_fastopen & fastopen.TFO_CLIENT_ENABLE:
            raise oserror(errno.EOPNOTSUPP)
        if sk.state != State.CLOSE or sk.conn is not None:
            raise oserror(errno.EINVAL)
        sk.fastopen_connect = bool(number)
    elif opt == TCP_FASTOPEN_NO_COOKIE:
        if not 0 <= number <= 1 or sk.state not in _CLOSE_OR_LISTEN:
            raise oserror(errno.EINVAL)
        sk.fastopen_no_cookie = bool(number)


def getsockopt(sk: TcpSock, opt: int, buflen: int | None = None) -> int | bytes:
    """do_tcp_getsockopt's Fast Open options (an int, or its bytes cut to ``buflen``)."""
    if opt == TCP_FASTOPEN_KEY:
        keys = b"".join(sk.layer.fastopen.keys(sk))
        return keys if buflen is None else keys[:buflen]
    if opt == TCP_FASTOPEN:
        value = sk.fastopen_max_qlen
    elif opt == TCP_FASTOPEN_CONNECT:
        value = int(sk.fastopen_connect)
    else:
        value = int(sk.fastopen_no_cookie)
    return value if buflen is None else struct.pack("i", value)[:buflen]


def on_listen(sk: TcpSock, backlog: int) -> None:
    """inet_listen: with TFO_SERVER_WO_SOCKOPT1 and the server bit, a listener without
    TCP_FASTOPEN gets a Fast Open queue as long as its backlog."""
    bits = sk.host.tuning.tcp_fastopen
    if (bits & fastopen.TFO_SERVER_WO_SOCKOPT1 and bits & fastopen.TFO_SERVER_ENABLE
            and not sk.fastopen_max_qlen):
        sk.fastopen_max_qlen = min(backlog, sk.host.tuning.somaxconn)


def _number(value: int | bytes) -> int:
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, bytes | bytearray) and len(value) >= 4:
        return int(struct.unpack_from("i", value)[0])
    raise oserror(errno.EINVAL)


# -- the client side (Linux tcp_sendmsg_fastopen, tcp_fastopen_defer_connect) ------------
def sendto(sk: TcpSock, data: bytes, target: tuple[bytes, int] | None,
           zerocopy: bool = False) -> int | None:
    """sendto(MSG_FASTOPEN) (tcp_sendmsg_fastopen): connect to ``target`` (None:
    AF_UNSPEC) with a SYN carrying what ``data`` it may (a cached cookie, or no cookie
    needed; otherwise a SYN asking for one).  Returns the bytes the SYN carries, raises
    EINPROGRESS when none; None when the socket is connected already (the caller sends
    as usual).  Never waits: a blocking caller waits for the connection itself.
    ``zerocopy``: MSG_ZEROCOPY, whose id the SYN's data takes (tcp_sendmsg_locked makes
    the uarg before tcp_sendmsg_fastopen; a SYN without data gives it back)."""
    if not sk.host.tuning.tcp_fastopen & fastopen.TFO_CLIENT_ENABLE or target is None:
        raise oserror(errno.EOPNOTSUPP)
    since = sk._lock()
    try:
        conn = sk.conn
        if sk.state == State.LISTEN:
            raise oserror(errno.EPIPE)
        if sk.fastopen_defer is not None:
            target, sk.fastopen_defer = sk.fastopen_defer, None
        elif conn is not None and conn.state is not CState.CLOSED:
            if conn.state is CState.SYN_SENT:
                raise oserror(errno.EALREADY)  # another connect is in progress
            return None
        elif conn is not None:
            sk.start_over()  # a failed attempt: start over (tcp_disconnect)
        n = sk.layer.connect_locked(sk, target[0], target[1], fastopen=bytes(data))
        if zerocopy and n and sk.conn is not None:
            tcp_errq.zerocopy_syn_data(sk, sk.conn, n)
    finally:
        sk._unlock(since)
    if not n:
        raise oserror(errno.EINPROGRESS)
    return n


def defer_connect_locked(sk: TcpSock, addr: bytes, port: int) -> bool:
    """tcp_fastopen_defer_connect (connect() with TCP_FASTOPEN_CONNECT, socket lock
    held): with a cookie cached for the server (or none needed) the SYN waits for the
    first write, which it carries; connect() returns 0 at once."""
    if not sk.fastopen_connect or not sk.layer.fastopen.may_defer(sk, wire(addr)):
        return False
    sk.fastopen_defer = (addr, port)
    return True


def send_deferred_locked(sk: TcpSock, view: memoryview, zerocopy: bool = False) -> int:
    """The first write on a deferred connect (tcp_sendmsg_locked's DEFER_CONNECT case):
    the SYN goes now, with as much of the data as it may carry (``zerocopy``: a
    MSG_ZEROCOPY write, whose id the SYN's data takes)."""
    target, sk.fastopen_defer = sk.fastopen_defer, None
    assert target is not None
    n = sk.layer.connect_locked(sk, target[0], target[1], fastopen=bytes(view))
    if zerocopy and n and sk.conn is not None:
        tcp_errq.zerocopy_syn_data(sk, sk.conn, n)
    if not n:
        raise oserror(errno.EINPROGRESS)
    return n
