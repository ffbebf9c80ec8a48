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

from rcunet.core.tcp import fastopen
from rcunet.host.sockerr import oserror
from rcunet.tables.entry import State

if TYPE_CHECKING:
    from rcunet.host.tcp_sock import TcpSock

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
        keys = b"".join(sk.layer.fastopen_keys(sk))
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
