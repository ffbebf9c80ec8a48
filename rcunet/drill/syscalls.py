"""System calls of a script on the Host's TCP sockets, checked as packetdrill checks them
(``run_system_call.c``): arguments are evaluated, the call is made, and its return value
and errno are compared with the script's.

Every call is made non-blocking on the socket itself; a call on a blocking descriptor
that would block returns ``BLOCKED`` and the runner retries it as the network moves on,
so a blocking call returns at the virtual time Linux's would.
"""

from __future__ import annotations

import errno as _errno
import ipaddress
import socket as _pysocket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rcunet.core.errqueue import iov_after
from rcunet.core.tcp import State as CState
from rcunet.drill import cmsg
from rcunet.drill import script as s
from rcunet.drill.errors import DrillError, DrillUnsupported
from rcunet.host.tcp import fastopen_opts as tcp_fastopen
from rcunet.host.tcp import md5
from rcunet.tables.entry import AF_INET, AF_INET6, State
from rcunet.wire.addr import v4mapped

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.host.tcp.sock import TcpSock

BLOCKED = object()

#: Linux values of the symbols scripts use (linux/*.h), beyond what Python exports.
LINUX_SYMBOLS: dict[str, int] = {
    "AF_INET": 2, "AF_INET6": 10, "AF_UNSPEC": 0, "PF_INET": 2, "PF_INET6": 10,
    "SOCK_STREAM": 1, "SOCK_DGRAM": 2, "SOCK_RAW": 3, "SOCK_NONBLOCK": 0o4000,
    "SOCK_CLOEXEC": 0o2000000,
    "IPPROTO_IP": 0, "IPPROTO_TCP": 6, "IPPROTO_UDP": 17, "IPPROTO_IPV6": 41,
    "IPPROTO_ICMP": 1, "IPPROTO_ICMPV6": 58,
    "SOL_SOCKET": 1, "SOL_TCP": 6, "SOL_IP": 0, "SOL_IPV6": 41, "SOL_UDP": 17,
    "SO_DEBUG": 1, "SO_REUSEADDR": 2, "SO_TYPE": 3, "SO_ERROR": 4, "SO_DONTROUTE": 5,
    "SO_BROADCAST": 6, "SO_SNDBUF": 7, "SO_RCVBUF": 8, "SO_KEEPALIVE": 9,
    "SO_OOBINLINE": 10, "SO_LINGER": 13, "SO_REUSEPORT": 15, "SO_RCVLOWAT": 18,
    "SO_SNDLOWAT": 19, "SO_RCVTIMEO": 20, "SO_SNDTIMEO": 21, "SO_TIMESTAMP": 29,
    "SO_ACCEPTCONN": 30, "SO_SNDBUFFORCE": 32, "SO_RCVBUFFORCE": 33, "SO_MARK": 36,
    "SO_TIMESTAMPING": 37, "SO_PROTOCOL": 38, "SO_DOMAIN": 39, "SO_MAX_PACING_RATE": 47,
    "SO_INCOMING_CPU": 49, "SO_ZEROCOPY": 60, "SO_TXTIME": 61,
    "TCP_NODELAY": 1, "TCP_MAXSEG": 2, "TCP_CORK": 3, "TCP_KEEPIDLE": 4,
    "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 6, "TCP_SYNCNT": 7, "TCP_LINGER2": 8,
    "TCP_DEFER_ACCEPT": 9, "TCP_WINDOW_CLAMP": 10, "TCP_INFO": 11, "TCP_QUICKACK": 12,
    "TCP_CONGESTION": 13, "TCP_MD5SIG": 14, "TCP_THIN_LINEAR_TIMEOUTS": 16,
    "TCP_USER_TIMEOUT": 18, "TCP_REPAIR": 19, "TCP_FASTOPEN": 23, "TCP_TIMESTAMP": 24,
    "TCP_NOTSENT_LOWAT": 25, "TCP_CC_INFO": 26, "TCP_SAVE_SYN": 27, "TCP_SAVED_SYN": 28,
    "TCP_FASTOPEN_CONNECT": 30, "TCP_ULP": 31, "TCP_FASTOPEN_KEY": 33,
    "TCP_FASTOPEN_NO_COOKIE": 34, "TCP_ZEROCOPY_RECEIVE": 35, "TCP_INQ": 36,
    "TCP_CM_INQ": 36, "TCP_TX_DELAY": 37, "TCP_RTO_MAX_MS": 44, "TCP_RTO_MIN_US": 45,
    "TCP_DELACK_MAX_US": 46, "TCP_MD5SIG_EXT": 32,
    "IP_TOS": 1, "IP_TTL": 2, "IP_MTU_DISCOVER": 10, "IP_RECVERR": 11, "IP_MTU": 14,
    "IP_FREEBIND": 15, "IP_PMTUDISC_DONT": 0, "IP_PMTUDISC_WANT": 1, "IP_PMTUDISC_DO": 2,
    "IP_PMTUDISC_PROBE": 3, "IP_PMTUDISC_INTERFACE": 4, "IP_PMTUDISC_OMIT": 5,
    "IPV6_V6ONLY": 26, "IPV6_RECVERR": 25, "IPV6_TCLASS": 67, "IPV6_MTU_DISCOVER": 23,
    "IPV6_MTU": 24,
    "O_RDONLY": 0, "O_WRONLY": 1, "O_RDWR": 2, "O_NONBLOCK": 0o4000, "O_NDELAY": 0o4000,
    "F_GETFL": 3, "F_SETFL": 4, "F_GETFD": 1, "F_SETFD": 2, "FD_CLOEXEC": 1,
    "MSG_OOB": 1, "MSG_PEEK": 2, "MSG_DONTROUTE": 4, "MSG_TRUNC": 0x20,
    "MSG_DONTWAIT": 0x40, "MSG_EOR": 0x80, "MSG_WAITALL": 0x100, "MSG_NOSIGNAL": 0x4000,
    "MSG_MORE": 0x8000, "MSG_ERRQUEUE": 0x2000, "MSG_ZEROCOPY": 0x4000000,
    "MSG_FASTOPEN": 0x20000000, "MSG_CTRUNC": 0x8,
    "SO_EE_ORIGIN_NONE": 0, "SO_EE_ORIGIN_LOCAL": 1, "SO_EE_ORIGIN_ICMP": 2,
    "SO_EE_ORIGIN_ICMP6": 3, "SO_EE_ORIGIN_TXSTATUS": 4, "SO_EE_ORIGIN_TIMESTAMPING": 4,
    "SO_EE_ORIGIN_ZEROCOPY": 5, "SO_EE_CODE_ZEROCOPY_COPIED": 1,
    "SCM_TSTAMP_SND": 0, "SCM_TSTAMP_SCHED": 1, "SCM_TSTAMP_ACK": 2,
    "SCM_TIMESTAMPING": 37, "SCM_TIMESTAMPING_OPT_STATS": 54,
    "SOF_TIMESTAMPING_TX_HARDWARE": 1 << 0, "SOF_TIMESTAMPING_TX_SOFTWARE": 1 << 1,
    "SOF_TIMESTAMPING_RX_HARDWARE": 1 << 2, "SOF_TIMESTAMPING_RX_SOFTWARE": 1 << 3,
    "SOF_TIMESTAMPING_SOFTWARE": 1 << 4, "SOF_TIMESTAMPING_SYS_HARDWARE": 1 << 5,
    "SOF_TIMESTAMPING_RAW_HARDWARE": 1 << 6, "SOF_TIMESTAMPING_OPT_ID": 1 << 7,
    "SOF_TIMESTAMPING_TX_SCHED": 1 << 8, "SOF_TIMESTAMPING_TX_ACK": 1 << 9,
    "SOF_TIMESTAMPING_OPT_CMSG": 1 << 10, "SOF_TIMESTAMPING_OPT_TSONLY": 1 << 11,
    "SOF_TIMESTAMPING_OPT_STATS": 1 << 12, "SOF_TIMESTAMPING_OPT_PKTINFO": 1 << 13,
    "SOF_TIMESTAMPING_OPT_TX_SWHW": 1 << 14, "SOF_TIMESTAMPING_OPT_ID_TCP": 1 << 16,
    "SHUT_RD": 0, "SHUT_WR": 1, "SHUT_RDWR": 2,
    "POLLIN": 0x1, "POLLPRI": 0x2, "POLLOUT": 0x4, "POLLERR": 0x8, "POLLHUP": 0x10,
    "POLLNVAL": 0x20, "POLLRDNORM": 0x40, "POLLRDBAND": 0x80, "POLLWRNORM": 0x100,
    "POLLWRBAND": 0x200, "POLLMSG": 0x400, "POLLRDHUP": 0x2000,
    "EPOLLIN": 0x1, "EPOLLPRI": 0x2, "EPOLLOUT": 0x4, "EPOLLERR": 0x8, "EPOLLHUP": 0x10,
    "EPOLLRDNORM": 0x40, "EPOLLRDBAND": 0x80, "EPOLLWRNORM": 0x100, "EPOLLWRBAND": 0x200,
    "EPOLLRDHUP": 0x2000, "EPOLLEXCLUSIVE": 1 << 28, "EPOLLONESHOT": 1 << 30,
    "EPOLLET": 1 << 31, "EPOLL_CTL_ADD": 1, "EPOLL_CTL_DEL": 2, "EPOLL_CTL_MOD": 3,
    "SIOCINQ": 0x541B, "FIONREAD": 0x541B, "SIOCOUTQ": 0x5411, "TIOCOUTQ": 0x5411,
    "SIOCOUTQNSD": 0x894B,
    "TCP_ESTABLISHED": 1, "TCP_SYN_SENT": 2, "TCP_SYN_RECV": 3, "TCP_FIN_WAIT1": 4,
    "TCP_FIN_WAIT2": 5, "TCP_TIME_WAIT": 6, "TCP_CLOSE": 7, "TCP_CLOSE_WAIT": 8,
    "TCP_LAST_ACK": 9, "TCP_LISTEN": 10, "TCP_CLOSING": 11,
    "TCP_CA_Open": 0, "TCP_CA_Disorder": 1, "TCP_CA_CWR": 2, "TCP_CA_Recovery": 3,
    "TCP_CA_Loss": 4,
    "NULL": 0,
}
#: What the runners define per family for the error queue's control message
#: (run_all.py and the kernel's ksft_runner.sh: ``-D CMSG_LEVEL_IP=SOL_IP`` ...).
FAMILY_SYMBOLS: dict[int, dict[str, int]] = {
    2: {"CMSG_LEVEL_IP": 0, "CMSG_TYPE_RECVERR": 11},
    10: {"CMSG_LEVEL_IP": 41, "CMSG_TYPE_RECVERR": 25},
}
ERRNO_NAMES = {name: code for code, name in _errno.errorcode.items()}
ERRNO_NAMES.update({"EAGAIN": _errno.EAGAIN, "EWOULDBLOCK": _errno.EAGAIN})
# every alias too (errorcode keeps one name per value: ENOTSUP for EOPNOTSUPP's 95)
ERRNO_NAMES.update({name: getattr(_errno, name) for name in dir(_errno)
                    if name.startswith("E") and isinstance(getattr(_errno, name), int)})

_STATE_NUMBERS = {
    CState.ESTABLISHED: 1, CState.SYN_SENT: 2, CState.SYN_RECEIVED: 3,
    CState.FIN_WAIT_1: 4, CState.FIN_WAIT_2: 5, CState.TIME_WAIT: 6, CState.CLOSED: 7,
    CState.CLOSE_WAIT: 8, CState.LAST_ACK: 9, CState.CLOSING: 11,
}


class SyscallError(Exception):
    """The call returned -1 with this errno."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class Outcome:
    result: int
    errno: int = 0
    #: extra checks made after the call (values written through pointers), each a
    #: message when it failed
    problems: list[str] = field(default_factory=list)


@dataclass
class Fd:
    sk: TcpSock
    family: int
    nonblocking: bool = False
    #: for the runner: the packetdrill "socket" this descriptor is (its script state)
    state: str = "new"  #: new, listening, connecting, accepted
    is_epoll: bool = False


@dataclass
class EpollFd:
    interest: dict[int, tuple[int, int]] = field(default_factory=dict)  #: fd -> (events, data)
    #: edge-triggered bookkeeping: the readiness last reported per fd
    last: dict[int, int] = field(default_factory=dict)
    #: per fd: the socket's error-report count when last looked at (sk_error_report
    #: wakes an edge-triggered item even when EPOLLERR was already set)
    err_seen: dict[int, int] = field(default_factory=dict)
    #: per fd: RCV.NXT when last looked at (in-order data or a FIN arrived since:
    #: sk_data_ready / sk_state_change woke the item)
    rx_seen: dict[int, int | None] = field(default_factory=dict)
    #: per fd: the socket's write-space wakeups when last looked at
    tx_seen: dict[int, int] = field(default_factory=dict)
    #: EPOLLONESHOT items that reported and wait for EPOLL_CTL_MOD
    disarmed: set[int] = field(default_factory=set)


class Syscalls:
    """The descriptor table of the process under test and its calls."""

    def __init__(self, host: Host, family: int, local_ip: str, remote_ip: str,
                 bind_port: int = 8080, connect_port: int = 8080,
                 on_socket_event: Callable[[str, Fd | None, TcpSock | None], None] | None = None
                 ) -> None:
        self.host = host
        self.family = family
        self.local_ip = local_ip
        self.remote_ip = remote_ip
        self.bind_port = bind_port
        self.connect_port = connect_port
        self.fds: dict[int, Fd | EpollFd] = {}
        self.notify = on_socket_event or (lambda *_: None)
        #: the descriptor number the script expects from the next socket()/accept()
        self.wanted_fd: int | None = None
        #: for a retried blocking call: virtual milliseconds since it started, and when
        #: (ms after its start) it gives up on its own (poll/epoll_wait timeouts)
        self.elapsed_ms = 0
        self.block_deadline_ms: int | None = None
        #: for timestamps in control messages: the live time of script time 0 (ns) and
        #: the tolerance (the runner sets both)
        self.live_start_ns = 0
        self.tolerance_usecs = 4000

    # -- descriptors ------------------------------------------------------------------
    def _new_fd(self, obj: Fd | EpollFd) -> int:
        if self.wanted_fd is not None and self.wanted_fd not in self.fds:
            self.fds[self.wanted_fd] = obj
            return self.wanted_fd
        fd = 3
        while fd in self.fds:
            fd += 1
        self.fds[fd] = obj
        return fd

    def _fd(self, value: Any) -> Fd:
        fd = self.int_value(value)
        obj = self.fds.get(fd)
        if obj is None:
            raise SyscallError(_errno.EBADF)
        if isinstance(obj, EpollFd):
            raise SyscallError(_errno.ENOTSOCK)
        return obj

    # -- expressions ------------------------------------------------------------------
    def int_value(self, expr: Any) -> int:
        if isinstance(expr, bool):
            return int(expr)
        if isinstance(expr, int):
            return expr
        if isinstance(expr, s.Symbol):
            name = expr.name
            if name in LINUX_SYMBOLS:
                return LINUX_SYMBOLS[name]
            family_value = FAMILY_SYMBOLS[self.family].get(name)
            if family_value is not None:
                return family_value
            if name in ERRNO_NAMES:
                return ERRNO_NAMES[name]
            raise DrillUnsupported(0, f"unknown symbol {name}")
        if isinstance(expr, s.BinOr):
            return self.int_value(expr.left) | self.int_value(expr.right)
        if isinstance(expr, s.Array) and len(expr.items) == 1:
            return self.int_value(expr.items[0])
        if isinstance(expr, s.Call) and expr.name == "htons" and len(expr.args) == 1:
            return self.int_value(expr.args[0])
        raise DrillError(0, f"expected an integer, got {describe(expr)}")

    def _count(self, expr: Any) -> int:
        n = self.int_value(expr)
        if not 0 <= n <= 64 * 1024 * 1024:
            raise DrillError(0, f"buffer size out of range: {n}")
        return n

    # -- the calls --------------------------------------------------------------------
    def call(self, spec: s.SyscallSpec) -> Outcome | object:
        self.block_deadline_ms = None
        handler = getattr(self, "sys_" + spec.name, None)
        if handler is None:
            raise DrillUnsupported(0, f"system call {spec.name}() is not supported")
        try:
            result = handler(spec.args, spec)
        except SyscallError as exc:
            return Outcome(-1, exc.code)
        except OSError as exc:
            if exc.errno in (_errno.EAGAIN, _errno.EINPROGRESS) and \
                    exc.errno is not None:
                return Outcome(-1, exc.errno)
            return Outcome(-1, exc.errno or _errno.EIO)
        return result

    def _args(self, args: tuple[Any, ...], n: int, name: str) -> None:
        if len(args) != n:
            raise DrillError(0, f"{name}() takes {n} arguments, the script gives {len(args)}")

    def _blocking(self, fd: Fd, flags: int = 0) -> bool:
        return not fd.nonblocking and not flags & LINUX_SYMBOLS["MSG_DONTWAIT"]

    def sys_socket(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome:
        self._args(args, 3, "socket")
        family = self.family if args[0] is s.ELLIPSIS else self.int_value(args[0])
        if family == 10:
            family = AF_INET6
        elif family == 2:
            family = AF_INET
        else:
            raise SyscallError(_errno.EAFNOSUPPORT)
        kind = self.int_value(args[1])
        proto = self.int_value(args[2]) if args[2] is not s.ELLIPSIS else 0
        if kind & 0xF != 1:
            raise DrillUnsupported(0, "only SOCK_STREAM sockets are supported")
        if proto not in (0, 6):
            raise SyscallError(_errno.EPROTONOSUPPORT)
        if family == AF_INET and self.family == AF_INET6:
            raise DrillUnsupported(0, "an AF_INET socket in an IPv6 run")
        sk = self.host.tcp.new_socket(family)
        fd = Fd(sk, family, nonblocking=bool(kind & LINUX_SYMBOLS["SOCK_NONBLOCK"]))
        number = self._new_fd(fd)
        self.notify("socket", fd, None)
        return Outcome(number)

    def _sockaddr(self, expr: Any, default_ip: str, default_port: int) -> tuple[bytes, int]:
        from rcunet.api.socket import pack_address

        if expr is s.ELLIPSIS:
            return pack_address(self.family, default_ip), default_port
        if isinstance(expr, s.Struct):
            port = expr.field("sin_port", expr.field("sin6_port"))
            addr = expr.field("sin_addr", expr.field("sin6_addr"))
            ip = default_ip
            if isinstance(addr, s.Call) and addr.args and isinstance(addr.args[0], s.Bytes):
                ip = addr.args[0].text
            return pack_address(self.family, ip), (self.int_value(port) if port is not None
                                                   else default_port)
        raise DrillUnsupported(0, f"address argument {describe(expr)}")

    def sys_bind(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome:
        self._args(args, 3, "bind")
        fd = self._fd(args[0])
        addr, port = self._sockaddr(args[1], self.local_ip, self.bind_port)
        fd.sk.bind(addr, port)
        return Outcome(0)

    def sys_listen(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome:
        self._args(args, 2, "listen")
        fd = self._fd(args[0])
        fd.sk.listen(self.int_value(args[1]))
        fd.state = "listening"
        self.notify("listen", fd, None)
        return Outcome(0)

    def sys_accept(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 3, "accept")
        return self._accept(args, 0)

    def sys_accept4(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 4, "accept4")
        return self._accept(args, self.int_value(args[3]))

    def _accept(self, args: tuple[Any, ...], flags: int) -> Outcome | object:
        fd = self._fd(args[0])
        try:
            child = fd.sk.accept(0.0)
        except BlockingIOError:
            if self._blocking(fd):
                return BLOCKED
            raise SyscallError(_errno.EAGAIN) from None
        new = Fd(child, fd.family, nonblocking=bool(flags & LINUX_SYMBOLS["SOCK_NONBLOCK"]),
                 state="accepted")
        number = self._new_fd(new)
        self.notify("accept", new, child)
        return Outcome(number)

    def sys_connect(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 3, "connect")
        fd = self._fd(args[0])
        if isinstance(args[1], s.Symbol) and args[1].name == "AF_UNSPEC":
            if fd.sk.state == State.LISTEN:  # inet_csk_listen_stop: no longer listening
                raise DrillUnsupported(0, "connect(AF_UNSPEC) on a listener")
            fd.sk.disconnect()  # tcp_disconnect
            fd.state = "new"
            return Outcome(0)
        addr, port = self._sockaddr(args[1], self.remote_ip, self.connect_port)
        sk = fd.sk
        conn = sk.conn
        if conn is not None and conn.state is CState.SYN_SENT and fd.state == "connecting" \
                and getattr(fd, "_connect_pending", False):
            return self._connect_wait(fd)
        fd.state = "connecting"
        self.notify("connect", fd, None)
        try:
            sk.connect(addr, port, 0.0)
        except BlockingIOError as exc:
            if exc.errno == _errno.EINPROGRESS and self._blocking(fd):
                fd._connect_pending = True  # type: ignore[attr-defined]
                return self._connect_wait(fd)
            raise
        return Outcome(0)

    def _connect_wait(self, fd: Fd) -> Outcome | object:
        conn = fd.sk.conn
        assert conn is not None
        if conn.state is CState.SYN_SENT:
            return BLOCKED
        fd._connect_pending = False  # type: ignore[attr-defined]
        if conn.state is CState.CLOSED or conn.error is not None:
            err = fd.sk._take_error() or _errno.ECONNREFUSED
            raise SyscallError(err)
        return Outcome(0)

    def resume(self, spec: s.SyscallSpec) -> Outcome | object:
        """Retry a call that returned BLOCKED (connect waits for its handshake)."""
        if spec.name == "connect":
            try:
                return self._connect_wait(self._fd(spec.args[0]))
            except SyscallError as exc:
                return Outcome(-1, exc.code)
        return self.call(spec)

    # -- data -------------------------------------------------------------------------
    def _send(self, fd: Fd, n: int, flags: int,
              iov: tuple[int, ...] | None = None, to: Any = None) -> Outcome | object:
        """A send, sendto, sendmsg or write; a blocked call retried as the Host runs
        counts as a writer waiting for the handshake while the socket is connecting."""
        blocked = False
        try:
            result = self._send_once(fd, n, flags, iov, to)
            blocked = result is BLOCKED
            return result
        finally:
            self._note_connect_wait(fd, blocked)

    @staticmethod
    def _note_connect_wait(fd: Fd, blocked: bool) -> None:
        """The blocked thread of a send waiting for the handshake is one of the socket's
        ``write_pending`` writers (sk_stream_wait_connect) until it stops waiting; a Fast
        Open sendto whose SYN took all its data is not (tcp_send_syn_data clears
        fo->data, so inet_wait_for_connect's writebias is 0)."""
        waiting = getattr(fd, "_connect_wait", None)
        if (blocked and waiting is None
                and getattr(fd, "_send_left", None) is not None):
            fd._connect_wait = fd.sk.wait_connect_begin()  # type: ignore[attr-defined]
        elif waiting is not None and (not blocked or waiting.state is not CState.SYN_SENT):
            fd.sk.wait_connect_end(waiting)
            fd._connect_wait = None  # type: ignore[attr-defined]

    def _send_once(self, fd: Fd, n: int, flags: int,
                   iov: tuple[int, ...] | None = None, to: Any = None) -> Outcome | object:
        if flags & ~(LINUX_SYMBOLS["MSG_DONTWAIT"] | LINUX_SYMBOLS["MSG_NOSIGNAL"]
                     | LINUX_SYMBOLS["MSG_MORE"] | LINUX_SYMBOLS["MSG_EOR"]
                     | LINUX_SYMBOLS["MSG_ZEROCOPY"] | LINUX_SYMBOLS["MSG_FASTOPEN"]):
            raise DrillUnsupported(0, f"send flags {flags:#x}")
        sk_flags = ((_pysocket.MSG_MORE if flags & LINUX_SYMBOLS["MSG_MORE"] else 0)
                    | (_pysocket.MSG_EOR if flags & LINUX_SYMBOLS["MSG_EOR"] else 0))
        if getattr(fd, "_fastopen_wait", False):
            # a blocking Fast Open send returns once the connection is open
            # (inet_wait_for_connect), then queues what the SYN did not carry
            conn = fd.sk.conn
            if conn is not None and conn.state is CState.SYN_SENT:
                return BLOCKED
            fd._fastopen_wait = False  # type: ignore[attr-defined]
            if conn is not None and conn.state is CState.CLOSED:
                fd._send_left = None  # type: ignore[attr-defined]
                raise SyscallError(fd.sk._take_error() or _errno.ECONNREFUSED)
            if getattr(fd, "_send_left", None) is None:
                return Outcome(n)  # the SYN carried it all
        elif flags & LINUX_SYMBOLS["MSG_FASTOPEN"] or (
                fd.sk.fastopen_defer is not None and self._blocking(fd, flags)):
            # (a blocking write on a deferred connect waits for the handshake too)
            started = self._fastopen_send(fd, n, flags, to)
            if started is not None:
                return started
        pending = getattr(fd, "_send_left", None)
        if pending is not None and not self._write_woken(fd):
            return BLOCKED  # asleep in sk_stream_wait_memory: nothing woke it yet
        left = n if pending is None else pending
        data = bytes(left)
        zerocopy = flags & LINUX_SYMBOLS["MSG_ZEROCOPY"]
        try:
            # a retried blocking send continues its MSG_ZEROCOPY range (one id per call)
            # (an empty write on a deferred Fast Open connect still sends the SYN)
            sent = fd.sk.send(data, 0.0, zerocopy | sk_flags,
                              zc_more=pending is not None and left < n,
                              iov=iov_after(iov, n - left) if iov else None) if (
                left or fd.sk.fastopen_defer is not None) else 0
        except BlockingIOError as exc:
            if exc.errno == _errno.EINPROGRESS:
                raise SyscallError(_errno.EINPROGRESS) from None  # a Fast Open SYN, no data
            if self._blocking(fd, flags):
                fd._send_left = left  # type: ignore[attr-defined]
                return BLOCKED
            if pending is not None:
                fd._send_left = None  # type: ignore[attr-defined]
                return Outcome(n - left)
            raise SyscallError(_errno.EAGAIN) from None
        left -= sent
        if left and self._blocking(fd, flags):
            fd._send_left = left  # type: ignore[attr-defined]
            fd._send_sleep = self._wakeup_sources(fd)  # type: ignore[attr-defined]
            return BLOCKED
        fd._send_left = None  # type: ignore[attr-defined]
        return Outcome(n - left)

    @staticmethod
    def _wakeup_sources(fd: Fd) -> tuple[object, ...]:
        """What wakes a writer asleep for buffer space (sk_stream_wait_memory's wait
        queue): a write-space wakeup (sk_stream_write_space), in-order data or a FIN
        (sk_data_ready), an error or a state change."""
        sk = fd.sk
        conn = sk.conn
        if conn is None:
            return (None,)
        return (sk.write_wakes, conn.tcb.rcv_nxt, conn.error, conn.state, sk.soft_err)

    def _write_woken(self, fd: Fd) -> bool:
        """Did anything wake a blocked writer since it went to sleep (a writer that
        waited for the handshake, not for space, is always retried)?"""
        asleep = getattr(fd, "_send_sleep", None)
        if asleep is None:
            return True
        if asleep != self._wakeup_sources(fd):
            fd._send_sleep = None  # type: ignore[attr-defined]
            return True
        return False

    def _fastopen_send(self, fd: Fd, n: int, flags: int, to: Any) -> Outcome | object | None:
        """sendto(MSG_FASTOPEN) (tcp_sendmsg_fastopen); None: the socket is connected,
        the call is a plain send."""
        target = fd.sk.fastopen_defer
        if to is not None and not (isinstance(to, s.Symbol) and to.name == "AF_UNSPEC"):
            target = self._sockaddr(to, self.remote_ip, self.connect_port)
        elif to is not None:
            target = None  # AF_UNSPEC
        sk = fd.sk
        if sk.conn is None and target is not None and sk.fastopen_defer is None:
            fd.state = "connecting"
            self.notify("connect", fd, None)
        try:
            carried = tcp_fastopen.sendto(sk, bytes(n), target,
                                          bool(flags & LINUX_SYMBOLS["MSG_ZEROCOPY"]))
        except BlockingIOError as exc:  # the SYN carried nothing (a cookie request)
            if exc.errno != _errno.EINPROGRESS or not self._blocking(fd, flags):
                raise
            carried = 0
        if carried is None:
            return None
        if self._blocking(fd, flags):
            fd._send_left = n - carried if n > carried else None  # type: ignore[attr-defined]
            fd._fastopen_wait = True  # type: ignore[attr-defined]
            return BLOCKED
        return Outcome(carried)

    def _recv(self, fd: Fd, n: int, flags: int) -> Outcome | object:
        allowed = (LINUX_SYMBOLS["MSG_DONTWAIT"] | LINUX_SYMBOLS["MSG_PEEK"]
                   | LINUX_SYMBOLS["MSG_WAITALL"] | LINUX_SYMBOLS["MSG_TRUNC"])
        if flags & ~allowed:
            raise DrillUnsupported(0, f"recv flags {flags:#x}")
        sk_flags = flags & (LINUX_SYMBOLS["MSG_PEEK"] | LINUX_SYMBOLS["MSG_WAITALL"])
        try:
            data = fd.sk.recv(n, 0.0, sk_flags)
        except BlockingIOError:
            if self._blocking(fd, flags):
                return BLOCKED
            raise SyscallError(_errno.EAGAIN) from None
        return Outcome(len(data))

    def _buffer(self, expr: Any) -> None:
        """A NULL buffer faults in copy_from_user/copy_to_user: EFAULT, as on Linux."""
        if isinstance(expr, s.Symbol) and expr.name == "NULL" or expr == 0:
            raise SyscallError(_errno.EFAULT)

    def sys_write(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 3, "write")
        self._buffer(args[1])
        return self._send(self._fd(args[0]), self._count(args[2]), 0)

    def sys_send(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 4, "send")
        self._buffer(args[1])
        return self._send(self._fd(args[0]), self._count(args[2]), self.int_value(args[3]))

    def sys_sendto(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 6, "sendto")
        self._buffer(args[1])
        return self._send(self._fd(args[0]), self._count(args[2]), self.int_value(args[3]),
                          to=args[4])

    def sys_writev(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 3, "writev")
        return self._send(self._fd(args[0]), self._iov_len(args[1]), 0)

    def sys_sendmsg(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 3, "sendmsg")
        msg = args[1]
        if not isinstance(msg, s.Struct):
            raise DrillError(0, "sendmsg() needs a msghdr {...}")
        control = msg.field("msg_control")
        if isinstance(control, s.Array) and control.items:
            raise DrillUnsupported(0, "sendmsg() with control messages")
        lengths = self._iov_lengths(msg.field("msg_iov"))
        return self._send(self._fd(args[0]), sum(lengths), self.int_value(args[2]), lengths,
                          to=msg.field("msg_name"))

    def _iov_len(self, iov: Any) -> int:
        return sum(self._iov_lengths(iov))

    def _iov_lengths(self, iov: Any) -> tuple[int, ...]:
        if not isinstance(iov, s.Array):
            raise DrillError(0, f"expected an iovec array, got {describe(iov)}")
        lengths = []
        for item in iov.items:
            if not isinstance(item, s.Struct) or len(item.items) != 2:
                raise DrillError(0, f"expected {{..., len}} in an iovec, got {describe(item)}")
            lengths.append(self._count(item.items[1]))
        return tuple(lengths)

    def sys_read(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 3, "read")
        self._buffer(args[1])
        return self._recv(self._fd(args[0]), self._count(args[2]), 0)

    def sys_recv(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 4, "recv")
        self._buffer(args[1])
        return self._recv(self._fd(args[0]), self._count(args[2]), self.int_value(args[3]))

    def sys_recvfrom(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 6, "recvfrom")
        self._buffer(args[1])
        return self._recv(self._fd(args[0]), self._count(args[2]), self.int_value(args[3]))

    def sys_readv(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 3, "readv")
        return self._recv(self._fd(args[0]), self._iov_len(args[1]), 0)

    def sys_recvmsg(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 3, "recvmsg")
        msg = args[1]
        if not isinstance(msg, s.Struct):
            raise DrillError(0, "recvmsg() needs a msghdr {...}")
        control = msg.field("msg_control")
        fd = self._fd(args[0])
        flags = self.int_value(args[2])
        size = self._iov_len(msg.field("msg_iov"))
        if flags & LINUX_SYMBOLS["MSG_ERRQUEUE"]:
            return self._recv_errqueue(fd, msg, size, flags)
        result = self._recv(fd, size, flags)
        if isinstance(result, Outcome) and isinstance(control, s.Array) and control.items:
            # checked after the read, as tcp_recvmsg computes TCP_CM_INQ after it
            expected = cmsg.expected_cmsgs(control, self.int_value)
            got = [cmsg.Cmsg(*c) for c in fd.sk.recv_cmsgs()]
            problem = cmsg.compare(expected, got)
            if problem:
                result.problems.append(problem)
        return result

    def _recv_errqueue(self, fd: Fd, msg: s.Struct, size: int, flags: int) -> Outcome:
        """recvmsg(MSG_ERRQUEUE): never blocks; on success msg_flags and the control
        messages are checked as syscall_recvmsg checks them (drill/cmsg.py)."""
        if flags & ~(LINUX_SYMBOLS["MSG_ERRQUEUE"] | LINUX_SYMBOLS["MSG_DONTWAIT"]):
            raise DrillUnsupported(0, f"recvmsg flags {flags:#x} with MSG_ERRQUEUE")
        expected = cmsg.expected_cmsgs(msg.field("msg_control"), self.int_value)
        # packetdrill's buffer holds exactly the expected control messages
        room = sum(cmsg.CMSG_HDR + ((len(c.data) + 7) & ~7) for c in expected or [])
        data, got, msg_flags = fd.sk.recv_errqueue(size, room)
        out = Outcome(len(data))
        want_flags = msg.field("msg_flags")
        want = 0 if want_flags is None else self.int_value(want_flags)
        if msg_flags != want:
            out.problems.append(f"Expected msg_flags 0x{want:08X} but got 0x{msg_flags:08X}")
            return out
        problem = cmsg.compare(expected, [cmsg.Cmsg(*c) for c in got],
                               self.live_start_ns // 1000, self.tolerance_usecs)
        if problem:
            out.problems.append(problem)
        return out

    # -- lifecycle --------------------------------------------------------------------
    def sys_close(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome:
        self._args(args, 1, "close")
        number = self.int_value(args[0])
        obj = self.fds.pop(number, None)
        if obj is None:
            raise SyscallError(_errno.EBADF)
        if isinstance(obj, Fd):
            obj.sk.close()
        return Outcome(0)

    def sys_shutdown(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome:
        self._args(args, 2, "shutdown")
        self._fd(args[0]).sk.shutdown(self.int_value(args[1]))
        return Outcome(0)

    def sys_fcntl(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome:
        if len(args) not in (2, 3):
            raise DrillError(0, "fcntl() takes 2 or 3 arguments")
        fd = self._fd(args[0])
        cmd = self.int_value(args[1])
        if cmd == LINUX_SYMBOLS["F_GETFL"]:
            return Outcome(LINUX_SYMBOLS["O_RDWR"] | (LINUX_SYMBOLS["O_NONBLOCK"]
                                                       if fd.nonblocking else 0))
        if cmd == LINUX_SYMBOLS["F_SETFL"]:
            if len(args) != 3:
                raise DrillError(0, "fcntl(F_SETFL) needs the flags")
            fd.nonblocking = bool(self.int_value(args[2]) & LINUX_SYMBOLS["O_NONBLOCK"])
            return Outcome(0)
        if cmd in (LINUX_SYMBOLS["F_GETFD"], LINUX_SYMBOLS["F_SETFD"]):
            return Outcome(0)
        raise DrillUnsupported(0, f"fcntl command {cmd}")

    def sys_ioctl(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome:
        self._args(args, 3, "ioctl")
        fd = self._fd(args[0])
        request = self.int_value(args[1])
        conn = fd.sk.conn
        if fd.sk.state == State.LISTEN:
            raise SyscallError(_errno.EINVAL)
        if request == LINUX_SYMBOLS["SIOCINQ"]:
            value = conn.readable if conn is not None else 0
        elif request == LINUX_SYMBOLS["SIOCOUTQ"]:
            value = conn.unacked if conn is not None else 0
        else:
            raise DrillUnsupported(0, f"ioctl request {request:#x}")
        return self._check_pointer(args[2], value, "ioctl value")

    def _check_pointer(self, expr: Any, value: int, what: str) -> Outcome:
        out = Outcome(0)
        if isinstance(expr, s.Array) and expr.items and expr.items[0] is not s.ELLIPSIS:
            want = self.int_value(expr.items[0])
            if want != value:
                out.problems.append(f"Bad {what}: expected: {want} actual: {value}")
        return out

    # -- options ----------------------------------------------------------------------
    def sys_setsockopt(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome:
        self._args(args, 5, "setsockopt")
        fd = self._fd(args[0])
        level, name = self.int_value(args[1]), self.int_value(args[2])
        value = args[3]
        if isinstance(value, s.Struct) and value.field("onoff") is not None:
            raw: int | bytes = struct.pack("ii", self.int_value(value.field("onoff")),
                                           self.int_value(value.field("linger")))
        elif isinstance(value, s.Struct) and name in (LINUX_SYMBOLS["TCP_MD5SIG"],
                                                      LINUX_SYMBOLS["TCP_MD5SIG_EXT"]):
            raw = self._md5sig(fd, value)
        elif isinstance(value, s.Bytes) and name == LINUX_SYMBOLS["TCP_FASTOPEN_KEY"]:
            # the string's bytes cut or NUL-padded to optlen, as the kernel copies them
            optlen = self.int_value(args[4])
            if not 0 <= optlen <= 4096:
                raise DrillError(0, f"setsockopt() optlen out of range: {optlen}")
            data = value.text.encode("latin-1", "replace")
            raw = (data + bytes(max(0, optlen - len(data))))[:optlen]
        elif isinstance(value, s.Bytes):
            raise DrillUnsupported(0, f"setsockopt() with a string value ({value.text!r})")
        else:
            raw = self.int_value(value)
        fd.sk.setsockopt(level, name, raw)
        return Outcome(0)

    def _md5sig(self, fd: Fd, value: s.Struct) -> bytes:
        """struct tcp_md5sig from ``{tcpm_key="...", tcpm_keylen=N, tcpm_flags=F,
        tcpm_prefixlen=P}`` (packetdrill has no syntax for it): the address is the
        remote end's, in the socket's family (v4-mapped on an IPv6 socket)."""
        key = value.field("tcpm_key")
        data = key.text.encode("latin-1", "replace") if isinstance(key, s.Bytes) else b""
        keylen = value.field("tcpm_keylen")
        family = fd.sk.family
        remote = ipaddress.ip_address(self.remote_ip)
        if family == 10:
            if remote.version == 4:
                remote = ipaddress.IPv6Address(v4mapped(remote.packed))
            sockaddr = struct.pack("=HHI16s", family, 0, 0, remote.packed)
        else:
            sockaddr = struct.pack("=HH4s", family, 0, remote.packed)
        return struct.pack("=128sBBHi80s", sockaddr,
                           self.int_value(value.field("tcpm_flags", 0)),
                           self.int_value(value.field("tcpm_prefixlen", 0)),
                           len(data) if keylen is None else self.int_value(keylen), 0, data)

    def md5_key(self) -> bytes | None:
        """The TCP_MD5SIG key a socket of the script holds for the remote end (the
        runner signs what it injects with it and checks what the Host sends)."""
        remote = ipaddress.ip_address(self.remote_ip).packed
        for fd in self.fds.values():
            if isinstance(fd, Fd):
                key = md5.lookup(fd.sk.md5_keys, remote)
                if key is not None:
                    return key.key
        return None

    def sys_getsockopt(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome:
        self._args(args, 5, "getsockopt")
        fd = self._fd(args[0])
        level, name = self.int_value(args[1]), self.int_value(args[2])
        if (level, name) == (6, LINUX_SYMBOLS["TCP_INFO"]):
            raise DrillUnsupported(0, "getsockopt(TCP_INFO) with a struct argument")
        if (level, name) == (1, LINUX_SYMBOLS["SO_LINGER"]):
            raw = fd.sk.getsockopt(level, name)
            onoff, seconds = struct.unpack("ii", raw)  # type: ignore[arg-type]
            out = Outcome(0)
            want = args[3]
            if isinstance(want, s.Struct) and want.field("onoff") is not None:
                if (self.int_value(want.field("onoff")), self.int_value(
                        want.field("linger"))) != (onoff, seconds):
                    out.problems.append(f"Bad linger: actual {{onoff={onoff}, "
                                        f"linger={seconds}}}")
            return out
        value = fd.sk.getsockopt(level, name)
        if not isinstance(value, int):
            raise DrillUnsupported(0, f"getsockopt({level}, {name}) returns a structure")
        return self._check_pointer(args[3], value, "getsockopt value")

    # -- readiness --------------------------------------------------------------------
    def poll_mask(self, fd: Fd) -> int:
        """tcp_poll's mask for the socket."""
        sk = fd.sk
        conn = sk.conn
        pollin = 0x1 | 0x40
        pollout = 0x4 | 0x100
        if sk.state == State.LISTEN:
            return pollin if sk.acceptq else 0
        if conn is None and sk.fastopen_defer is not None:
            return pollout  # SYN_SENT with DEFER_CONNECT: writable, so write() sends the SYN
        if conn is None:
            # TCP_CLOSE: EPOLLOUT | EPOLLHUP (unconnected), EPOLLERR with an error queued
            return 0x10 | 0x4 | 0x100 | (0x8 if sk.errq else 0)
        st = conn.state
        mask = 0
        if conn.error is not None or sk.soft_err or sk.errq:
            mask |= 0x8  # sk_err, or a non-empty error queue (tcp_poll)
        # tcp_done sets SHUTDOWN_MASK: a closed connection is read-shut too (EPOLLIN)
        shut_rd = sk.shutdown_rd or st.fin_received or st is CState.CLOSED
        shutdown_both = st is CState.CLOSED or (shut_rd and st in (
            CState.LAST_ACK, CState.CLOSING, CState.TIME_WAIT))
        if shutdown_both:
            mask |= 0x10
        if shut_rd:
            mask |= pollin | 0x2000
        if st in (CState.SYN_SENT, CState.SYN_RECEIVED):
            return mask
        if conn.readable:
            mask |= pollin
        if st in (CState.ESTABLISHED, CState.CLOSE_WAIT):
            if conn.writeable():
                mask |= pollout
            else:
                conn.poll_nospace()  # tcp_poll: SOCK_NOSPACE, the next write space wakes
        else:
            mask |= pollout
        return mask

    def sys_poll(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 3, "poll")
        fds = args[0]
        if not isinstance(fds, s.Array):
            raise DrillError(0, "poll() needs an array of pollfd")
        timeout = self.int_value(args[2])
        ready = 0
        problems = []
        for item in fds.items:
            if not isinstance(item, s.Struct):
                raise DrillError(0, "poll() needs {fd=..., events=...} entries")
            fd = self._fd(item.field("fd"))
            events = self.int_value(item.field("events"))
            revents = self.poll_mask(fd) & (events | 0x8 | 0x10 | 0x20)
            want = item.field("revents")
            if revents:
                ready += 1
            if want is not None and want is not s.ELLIPSIS:
                problems.append((self.int_value(want), revents))
        if ready == 0 and timeout != 0:
            if timeout > 0:
                self.block_deadline_ms = timeout
                if self.elapsed_ms >= timeout:
                    return Outcome(0)
            return BLOCKED
        out = Outcome(ready)
        for want_mask, got in problems:
            if want_mask != got:
                out.problems.append(f"poll revents: expected {want_mask:#x} actual {got:#x}")
        return out

    def sys_epoll_create(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome:
        return Outcome(self._new_fd(EpollFd()))

    sys_epoll_create1 = sys_epoll_create

    def sys_epoll_ctl(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome:
        self._args(args, 4, "epoll_ctl")
        ep = self.fds.get(self.int_value(args[0]))
        if not isinstance(ep, EpollFd):
            raise SyscallError(_errno.EINVAL if ep is not None else _errno.EBADF)
        op, target = self.int_value(args[1]), self.int_value(args[2])
        self._fd(target)
        if op == 2:
            if ep.interest.pop(target, None) is None:
                raise SyscallError(_errno.ENOENT)
            ep.disarmed.discard(target)
            return Outcome(0)
        event = args[3]
        if not isinstance(event, s.Struct):
            raise DrillError(0, "epoll_ctl() needs {events=..., fd=...}")
        events = self.int_value(event.field("events"))
        data = event.field("fd", event.field("u32", event.field("u64", target)))
        if op == 1 and target in ep.interest:
            raise SyscallError(_errno.EEXIST)
        if op == 3 and target not in ep.interest:
            raise SyscallError(_errno.ENOENT)
        ep.interest[target] = (events, self.int_value(data))
        ep.last.pop(target, None)
        ep.disarmed.discard(target)  # EPOLL_CTL_MOD re-arms an EPOLLONESHOT item
        sk = self._fd(target).sk
        ep.err_seen[target] = sk.err_reports
        ep.rx_seen[target] = _rcv_nxt(sk)
        ep.tx_seen[target] = sk.write_wakes
        return Outcome(0)

    def sys_epoll_wait(self, args: tuple[Any, ...], spec: s.SyscallSpec) -> Outcome | object:
        self._args(args, 4, "epoll_wait")
        ep = self.fds.get(self.int_value(args[0]))
        if not isinstance(ep, EpollFd):
            raise SyscallError(_errno.EINVAL if ep is not None else _errno.EBADF)
        timeout = self.int_value(args[3])
        got: list[tuple[int, int]] = []
        for target, (events, data) in list(ep.interest.items()):
            obj = self.fds.get(target)
            if not isinstance(obj, Fd):
                continue
            if target in ep.disarmed:
                continue
            mask = self.poll_mask(obj) & (events | 0x8 | 0x10)
            if events & LINUX_SYMBOLS["EPOLLET"]:
                mask = self._edge(ep, target, obj, mask, events)
            if mask:
                got.append((mask, data))
                if events & LINUX_SYMBOLS["EPOLLONESHOT"]:
                    ep.disarmed.add(target)  # ep_send_events: until EPOLL_CTL_MOD
        if not got and timeout != 0:
            if timeout > 0:
                self.block_deadline_ms = timeout
                if self.elapsed_ms >= timeout:
                    return Outcome(0)
            return BLOCKED
        out = Outcome(len(got))
        want = args[1]
        if isinstance(want, s.Array):
            for i, item in enumerate(want.items):
                if i < len(got) and isinstance(item, s.Struct):
                    w = self.int_value(item.field("events"))
                    if w != got[i][0]:
                        out.problems.append(f"epoll events: expected {w:#x} actual "
                                            f"{got[i][0]:#x}")
        return out

    @staticmethod
    def _edge(ep: EpollFd, target: int, obj: Fd, mask: int, events: int) -> int:
        """Edge-triggered: a readiness bit is reported when it newly appears, and a woken
        item reports its whole mask (ep_poll_callback, then ep_item_poll), also with the
        bits it reported before: woken by in-order data or a FIN (sk_data_ready,
        sk_state_change: RCV.NXT moved) when it waits for EPOLLIN, by an error report
        (sk_error_report: an error-queue entry queued or extended) when EPOLLERR is set."""
        sk = obj.sk
        reports = sk.err_reports
        woken = reports != ep.err_seen.get(target, reports) and mask & 0x8
        ep.err_seen[target] = reports
        rcv_nxt = _rcv_nxt(sk)
        if rcv_nxt != ep.rx_seen.get(target, rcv_nxt) and mask and (
                events & 0xC1  # sk_data_ready's key: EPOLLIN | EPOLLRDNORM | EPOLLRDBAND
                or sk.conn is not None and sk.conn.state.fin_received):  # key 0: all
            woken = True
        ep.rx_seen[target] = rcv_nxt
        wakes = sk.write_wakes
        if wakes != ep.tx_seen.get(target, wakes) and mask and events & 0x4:
            woken = True  # sk_stream_write_space's key: EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND
        ep.tx_seen[target] = wakes
        fresh = mask & ~ep.last.get(target, 0)
        ep.last[target] = mask
        return mask if woken else fresh


def _rcv_nxt(sk: TcpSock) -> int | None:
    conn = sk.conn
    return None if conn is None else conn.tcb.rcv_nxt


def describe(expr: Any) -> str:
    if isinstance(expr, s.Symbol):
        return expr.name
    if expr is s.ELLIPSIS:
        return "..."
    if isinstance(expr, s.Struct):
        return "{...}"
    if isinstance(expr, s.Array):
        return "[...]"
    if isinstance(expr, s.Bytes):
        return repr(expr.text)
    return repr(expr)


def errno_name(code: int) -> str:
    return _errno.errorcode.get(code, str(code))

