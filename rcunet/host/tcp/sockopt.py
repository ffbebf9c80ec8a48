"""A TCP socket's options: setsockopt and getsockopt (SOL_SOCKET, SOL_TCP, IPV6_V6ONLY),
TCP_INFO, and what a connection's engine takes from them (``conn_options`` when it is
made, ``live_options`` when setsockopt reaches it, ``inherit_from`` for a listener's
child).  ``TcpSockOptions`` is a part of ``rcunet.host.tcp.sock.TcpSock`` (a mixin, as
host/tcp's parts of TcpLayer: one class, so a method lookup costs nothing more); the
attributes it reads and writes are TcpSock's, guarded by the socket lock (setsockopt
and getsockopt take it)."""

from __future__ import annotations

import errno
import socket as _pysocket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rcunet.core.tcp import Options
from rcunet.core.tcp import State as CState
from rcunet.core.tcp.window import full_space
from rcunet.host.sockerr import int_option, oserror, ranged
from rcunet.host.tcp import errq as tcp_errq
from rcunet.host.tcp import fastopen_opts as tcp_fastopen
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
SECOND = 1_000_000_000
#: The one SOL_SOCKET option a live connection's engine reads (``live_options``).
_SO_KEEPALIVE = (SOL_SOCKET, _pysocket.SO_KEEPALIVE)
_LINGER = struct.Struct("ii")
#: Linux's TCP_MIN_MSS and the user MSS ceiling (MAX_TCP_WINDOW).
TCP_MIN_MSS, TCP_MAX_USER_MSS = 88, 32767
TCP_MSS_DEFAULT = 536


class TcpSockOptions:
    """TcpSock's option calls (see the module's docstring)."""

    __slots__ = ()

    # TcpSock's, for the type checker
    if TYPE_CHECKING:
        host: Any
        layer: Any
        conn: Any
        def _lock(self) -> int: ...
        def _unlock(self, since: int) -> None: ...
        def _take_error(self) -> int: ...

    def setsockopt(self, level: int, opt: int, value: int | bytes) -> None:
        since = self._lock()
        try:
            self._setsockopt_locked(level, opt, value)
            if self.conn is not None and (level == SOL_TCP or (level, opt) == _SO_KEEPALIVE):
                # what live_options carries; TCP_NODELAY on pushes the tail
                push = level == SOL_TCP and opt == _pysocket.TCP_NODELAY and self.nodelay
                self.update_options_locked(push)
        finally:
            self._unlock(since)

    def _setsockopt_locked(self, level: int, opt: int, value: int | bytes) -> None:
        if level == SOL_SOCKET:
            if opt == _pysocket.SO_LINGER:
                if not isinstance(value, bytes | bytearray) or len(value) < _LINGER.size:
                    raise oserror(errno.EINVAL, "SO_LINGER takes struct linger (8 bytes)")
                onoff, seconds = _LINGER.unpack_from(value)
                self.linger = (bool(onoff), max(0, seconds))
                return
            number = int_option(value)
            setters: dict[int, Callable[[], None]] = {
                _pysocket.SO_REUSEADDR: lambda: setattr(self, "reuseaddr", bool(number)),
                _pysocket.SO_REUSEPORT: lambda: setattr(self, "reuseport", bool(number)),
                _pysocket.SO_KEEPALIVE: lambda: setattr(self, "keepalive", bool(number)),
                _pysocket.SO_RCVBUF: lambda: self._set_rcvbuf(number),
                _pysocket.SO_SNDBUF: lambda: self._set_sndbuf(number),
                tcp_errq.SO_ZEROCOPY: lambda: tcp_errq.set_zerocopy(self, number),
                tcp_errq.SO_TIMESTAMPING: lambda: tcp_errq.set_timestamping(self, number),
                SO_MARK: lambda: setattr(self, "mark", number & 0xFFFFFFFF),
            }
        elif level == SOL_TCP:
            if opt in tcp_fastopen.FASTOPEN_OPTIONS:
                tcp_fastopen.setsockopt(self, opt, value)
                return
            number = int_option(value)
            setters = {
                _pysocket.TCP_NODELAY: lambda: setattr(self, "nodelay", bool(number)),
                TCP_CORK: lambda: setattr(self, "cork", bool(number)),
                TCP_INQ: lambda: setattr(self, "inq", bool(number)),
                TCP_USER_TIMEOUT: lambda: self._set_user_timeout(number),
                TCP_NOTSENT_LOWAT: lambda: setattr(self, "notsent_lowat",
                                                   number & 0xFFFFFFFF),
                _pysocket.TCP_MAXSEG: lambda: self._set_maxseg(number),
                TCP_KEEPIDLE: lambda: setattr(self, "keepidle", ranged(number, 1, 32767)),
                TCP_KEEPINTVL: lambda: setattr(self, "keepintvl", ranged(number, 1, 32767)),
                TCP_KEEPCNT: lambda: setattr(self, "keepcnt", ranged(number, 1, 127)),
                TCP_SYNCNT: lambda: setattr(self, "syncnt", ranged(number, 1, 127)),
            }
        elif level in (_pysocket.IPPROTO_IP, _pysocket.IPPROTO_IPV6):
            if level == _pysocket.IPPROTO_IPV6 and opt == _pysocket.IPV6_V6ONLY:
                if self.tb is not None:
                    raise oserror(errno.EINVAL)
                self.v6only = bool(int_option(value))
                return
            raise oserror(errno.ENOPROTOOPT)
        else:
            raise oserror(errno.ENOPROTOOPT)
        setter = setters.get(opt)
        if setter is None:
            raise oserror(errno.ENOPROTOOPT)
        setter()

    def _set_user_timeout(self, value: int) -> None:
        """TCP_USER_TIMEOUT in ms: negative is EINVAL (do_tcp_setsockopt ->
        tcp_sock_set_user_timeout)."""
        if value < 0:
            raise oserror(errno.EINVAL, "TCP_USER_TIMEOUT must be >= 0")
        self.user_timeout = value

    def _set_maxseg(self, value: int) -> None:
        if value and not TCP_MIN_MSS <= value <= TCP_MAX_USER_MSS:
            raise oserror(errno.EINVAL, f"TCP_MAXSEG must be {TCP_MIN_MSS}..{TCP_MAX_USER_MSS}")
        self.user_mss = value

    def getsockopt(self, level: int, opt: int, buflen: int | None = None) -> int | bytes:
        if level == SOL_SOCKET and opt == _pysocket.SO_LINGER:
            return _LINGER.pack(int(self.linger[0]), self.linger[1])
        if level == SOL_TCP and opt == TCP_INFO:
            return self.tcp_info(buflen)
        if level == SOL_TCP and opt in tcp_fastopen.FASTOPEN_OPTIONS:
            return tcp_fastopen.getsockopt(self, opt, buflen)
        conn = self.conn
        getters: dict[int, Callable[[], int]]
        if level == SOL_SOCKET:
            getters = {
                _pysocket.SO_REUSEADDR: lambda: int(self.reuseaddr),
                _pysocket.SO_REUSEPORT: lambda: int(self.reuseport),
                _pysocket.SO_KEEPALIVE: lambda: int(self.keepalive),
                _pysocket.SO_RCVBUF: lambda: self.rcvbuf if conn is None else conn.rcvbuf,
                _pysocket.SO_SNDBUF: lambda: self.sndbuf,
                _pysocket.SO_ERROR: self._so_error,
                _pysocket.SO_TYPE: lambda: _pysocket.SOCK_STREAM,
                tcp_errq.SO_ZEROCOPY: lambda: int(self.zerocopy),
                tcp_errq.SO_TIMESTAMPING: lambda: self.ts.flags if self.ts else 0,
                SO_MARK: lambda: self.mark,
                SO_ACCEPTCONN: lambda: int(self.state == State.LISTEN),
            }
        elif level == SOL_TCP:
            getters = {
                _pysocket.TCP_NODELAY: lambda: int(self.nodelay),
                TCP_CORK: lambda: int(self.cork),
                TCP_INQ: lambda: int(self.inq),
                TCP_USER_TIMEOUT: lambda: self.user_timeout,
                TCP_NOTSENT_LOWAT: lambda: self.notsent_lowat,
                _pysocket.TCP_MAXSEG: lambda: (conn.tcb.snd_mss if conn is not None
                                               and conn.state.synchronized
                                               else self.user_mss or TCP_MSS_DEFAULT),
                TCP_KEEPIDLE: lambda: self._keepalive_setting("keepalive_time", SECOND),
                TCP_KEEPINTVL: lambda: self._keepalive_setting("keepalive_intvl", SECOND),
                TCP_KEEPCNT: lambda: self._keepalive_setting("keepalive_probes", 1),
                TCP_SYNCNT: lambda: self._keepalive_setting("syn_retries", 1),
            }
        elif level == _pysocket.IPPROTO_IPV6 and opt == _pysocket.IPV6_V6ONLY:
            return int(self.v6only)
        else:
            raise oserror(errno.ENOPROTOOPT)
        getter = getters.get(opt)
        if getter is None:
            raise oserror(errno.ENOPROTOOPT)
        result = getter()
        if buflen is not None:
            return struct.pack("i", result)[:buflen]
        return result

    def inq_hint(self) -> int:
        """Linux tcp_inq_hint: in-order bytes not read yet; 1 once none are left and the
        peer's FIN (or a reset) ended the stream (SOCK_DONE), so a reader that asked for
        TCP_INQ reads on to the EOF."""
        since = self._lock()
        try:
            conn = self.conn
            inq = conn.readable if conn is not None else 0
            if inq == 0 and (conn is None or conn.state.fin_received
                             or conn.state is CState.CLOSED):
                inq = 1
        finally:
            self._unlock(since)
        return inq

    def recv_cmsgs(self) -> list[tuple[int, int, bytes]]:
        """The control messages a recvmsg that just read data gets: TCP_CM_INQ with the
        TCP_INQ hint, computed after the read as tcp_recvmsg does."""
        if not self.inq:
            return []
        return [(SOL_TCP, TCP_INQ, struct.pack("i", self.inq_hint()))]

    def tcp_info(self, buflen: int | None = None) -> bytes:
        """TCP_INFO: Linux's struct tcp_info (host/tcp/info.py), cut to ``buflen``."""
        since = self._lock()
        try:
            values = tcp_info_snapshot(self, self.host.now())
        finally:
            self._unlock(since)
        return pack_tcp_info(values, buflen)

    def _keepalive_setting(self, name: str, unit: int) -> int:
        """A TCP_KEEP* value: the socket's own, else what the sysctls give."""
        return int(getattr(self.conn_options(TCP_MSS_DEFAULT), name) // unit)

    def _so_error(self) -> int:
        since = self._lock()
        try:
            err = self._take_error()
        finally:
            self._unlock(since)
        return err

    def _set_rcvbuf(self, number: int) -> None:
        """sock_setsockopt SO_RCVBUF: the value as a u32, capped by net.core.rmem_max (not
        tcp_rmem[2], which bounds autotuning only), doubled for overhead, at least
        SOCK_MIN_RCVBUF; autotuning stops (SOCK_RCVBUF_LOCK)."""
        self.rcvbuf = max(2304, min(number & 0xFFFFFFFF, self.host.tuning.rmem_max) * 2)
        self.rcvbuf_locked = True

    def _set_sndbuf(self, number: int) -> None:
        """sock_setsockopt SO_SNDBUF: as SO_RCVBUF, with net.core.wmem_max and
        SOCK_MIN_SNDBUF."""
        self.sndbuf = max(4608, min(number & 0xFFFFFFFF, self.host.tuning.wmem_max) * 2)
        self.sndbuf_locked = True

    def conn_options(self, mss: int) -> Options:
        """Engine settings for a connection of this socket: the host's sysctls
        (``Options.from_tuning``), then the socket options and the route's MSS.  The send
        buffer may grow up to tcp_wmem[2] unless SO_SNDBUF fixed it (tcp_sndbuf_expand), the
        receive buffer up to tcp_rmem[2] (tcp_rcv_space_adjust), and the window scale covers
        tcp_rmem[2], unless SO_RCVBUF fixed the receive buffer (tcp_select_initial_window)."""
        if self.user_mss:
            mss = min(mss, self.user_mss)
        return Options.from_tuning(
            self.host.tuning, mss=max(TCP_MIN_MSS, min(mss, 65495)), rcvbuf=self.rcvbuf,
            sndbuf=self.sndbuf,
            sndbuf_max=0 if self.sndbuf_locked else self.host.tuning.tcp_wmem[2],
            # SO_RCVBUF also fixes the window clamp at tcp_full_space (tcp_connect_init,
            # tcp_openreq_init_rwin: SOCK_RCVBUF_LOCK)
            **({"rcvbuf_max": 0, "wscale_space": 0, "window_clamp": full_space(self.rcvbuf)}
               if self.rcvbuf_locked else {}),
            **self._keepalive_overrides())

    def _keepalive_overrides(self) -> dict[str, Any]:
        """Socket-level settings; the TCP_KEEP* ones only when set (else the sysctls)."""
        values: dict[str, Any] = {"nodelay": self.nodelay, "cork": self.cork,
                                  "keepalive": self.keepalive,
                                  "user_timeout": self.user_timeout * 1_000_000,  # ms -> ns
                                  "notsent_lowat": (self.notsent_lowat
                                                    or self.host.tuning.tcp_notsent_lowat)}
        if self.keepidle is not None:
            values["keepalive_time"] = self.keepidle * SECOND
        if self.keepintvl is not None:
            values["keepalive_intvl"] = self.keepintvl * SECOND
        if self.keepcnt is not None:
            values["keepalive_probes"] = self.keepcnt
        if self.syncnt is not None:
            values["syn_retries"] = self.syncnt
        return values

    def live_options(self) -> dict[str, Any]:
        """The options a live connection picks up from setsockopt
        (``Connection.update_options``' keywords)."""
        return self._keepalive_overrides()

    def inherit_from(self, listener: TcpSock) -> None:
        """Socket options a child copies from its listener (sk_clone_lock)."""
        self.rcvbuf, self.sndbuf = listener.rcvbuf, listener.sndbuf
        self.sndbuf_locked, self.rcvbuf_locked = listener.sndbuf_locked, listener.rcvbuf_locked
        self.nodelay, self.keepalive = listener.nodelay, listener.keepalive
        self.cork, self.inq = listener.cork, listener.inq
        self.user_timeout, self.notsent_lowat = listener.user_timeout, listener.notsent_lowat
        self.keepidle, self.keepintvl, self.keepcnt = (
            listener.keepidle, listener.keepintvl, listener.keepcnt)
        self.user_mss, self.linger = listener.user_mss, listener.linger
        self.reuseaddr, self.bound_dev = listener.reuseaddr, listener.bound_dev
        self.zerocopy = listener.zerocopy

