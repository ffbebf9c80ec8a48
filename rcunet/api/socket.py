"""``rcunet.api.socket.Socket``: the user-facing socket, with ``socket.socket``'s interface
and CPython's semantics (address tuples, ``OSError`` subclasses with Linux's errno and
strerror's text, timeouts raising ``TimeoutError``, non-blocking mode raising
``BlockingIOError``, ``makefile`` over ``socket.SocketIO`` with the deferred close,
``sendmsg``/``recvmsg``, ``dup``/``detach``, ``SO_RCVTIMEO``/``SO_SNDTIMEO``).

One facade over both protocol sockets (``TcpSock``, ``UdpSock``): they take the same calls.

``fileno()`` is a descriptor number as Linux gives one (``rcunet.api.fdtable``): a
``dup`` of the protocol socket's poll fd, so ``select``/``selectors``/asyncio wait on it;
objects made over the same number share it, the socket closes with its last descriptor.

This is the only layer that blocks a caller: it waits on the protocol socket with the
socket's timeout.
"""

from __future__ import annotations

import errno
import functools
import operator
import os
import socket as _pysocket
import struct
import warnings
from typing import TYPE_CHECKING, Any

from rcunet.api import fdtable, fork
from rcunet.api.fdtable import Descriptor, SockRef
from rcunet.host.sockerr import as_python_error, oserror
from rcunet.tables.entry import AF_INET, AF_INET6
from rcunet.wire.addr import (
    ANY4,
    ANY6,
    LIMITED_BROADCAST,
    LOOPBACK4,
    LOOPBACK6,
    V4_MAPPED_ANY,
    is_any,
    v4mapped,
)

if TYPE_CHECKING:
    from rcunet.host.host import Host

SOCK_STREAM = _pysocket.SOCK_STREAM
SOCK_DGRAM = _pysocket.SOCK_DGRAM
SOL_SOCKET = _pysocket.SOL_SOCKET
MSG_TRUNC = int(_pysocket.MSG_TRUNC)
MSG_CTRUNC = int(_pysocket.MSG_CTRUNC)
SO_DOMAIN = getattr(_pysocket, "SO_DOMAIN", 39)
SO_PROTOCOL = getattr(_pysocket, "SO_PROTOCOL", 38)
#: MSG_ZEROCOPY and the error queue (Linux values; Python's socket module lacks some)
SO_ZEROCOPY = 60
MSG_ZEROCOPY = 0x4000000
MSG_ERRQUEUE = 0x2000
SO_EE_ORIGIN_ZEROCOPY = 5
SO_EE_CODE_ZEROCOPY_COPIED = 1
_TIMEVAL = struct.Struct("@ll")
_RealSocket = _pysocket.socket

_oserror = oserror


def pack_address(family: int, host: str | bytes, on: Host | None = None) -> bytes:
    """A socket-API host string (``""``, ``"<broadcast>"``, dotted quad, IPv6 text, a
    name the Network of ``on`` knows) into packed bytes of the socket's family;
    EINVAL/EAFNOSUPPORT as Linux would, ``gaierror`` for an unknown name."""
    if isinstance(host, bytes) and len(host) in (4, 16):
        packed = host
    elif host in ("", b""):
        packed = ANY4 if family == AF_INET else ANY6
    elif host == "<broadcast>":
        packed = LIMITED_BROADCAST
    else:
        packed = _parse_host(host.decode() if isinstance(host, bytes) else host, on, family)
    if family == AF_INET and len(packed) != 4:
        raise _oserror(errno.EAFNOSUPPORT, "IPv6 address on an AF_INET socket")
    if family == AF_INET6 and len(packed) == 4:
        packed = v4mapped(packed)  # as the kernel stores it
    return packed


def _parse_host(text: str, on: Host | None, family: int) -> bytes:
    """Host text -> packed bytes: numeric with the C parsers (``inet_pton``), a name
    through the Network's resolver (``rcunet.api.resolver``)."""
    numeric = text.split("%", 1)[0]
    for parser_family in (AF_INET, AF_INET6):
        try:
            return _pysocket.inet_pton(parser_family, numeric)
        except OSError:
            pass
    if on is None:
        raise _pysocket.gaierror(_pysocket.EAI_NONAME, "Name or service not known")
    from rcunet.api import resolver

    return resolver.resolve(on, text, family)


def unpack_address(family: int, packed: bytes, port: int) -> tuple[Any, ...]:
    # inet_ntop prints a v4-mapped address as Linux does: ::ffff:10.0.0.1
    if family == AF_INET:
        return (_pysocket.inet_ntop(AF_INET, packed), port)
    return (_pysocket.inet_ntop(AF_INET6, packed), port, 0, 0)


def _check_sockaddr(family: int, address: object) -> tuple[str | bytes, int]:
    name = "AF_INET" if family == AF_INET else "AF_INET6"
    if not isinstance(address, tuple):
        raise TypeError(f"{name} address must be tuple, not {type(address).__name__}")
    if len(address) < 2 or (family == AF_INET and len(address) != 2) or len(address) > 4:
        raise TypeError(f"{name} address must be a pair (host, port)" if family == AF_INET
                        else f"{name} address must be a tuple (host, port[, flowinfo[, "
                        "scopeid]])")
    host, port = address[0], address[1]
    if not isinstance(port, int):
        raise TypeError(f"'{type(port).__name__}' object cannot be interpreted as an integer")
    if not 0 <= port <= 65535:
        raise OverflowError("getsockaddrarg: port must be 0-65535.")
    if not isinstance(host, str | bytes | bytearray):
        raise TypeError(f"str, bytes or bytearray expected, not {type(host).__name__}")
    return bytes(host) if isinstance(host, bytearray) else host, port


def _timeout_value(value: Any) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float):
        raise TypeError("Timeout value must be int, float or None")
    seconds = float(value)
    if seconds != seconds:
        raise ValueError("Invalid value NaN (not a number)")
    if seconds < 0:
        raise ValueError("Timeout value out of range")
    return seconds


class Socket:
    """A socket on an rcunet Host.  Create with ``host.socket(family, type)`` (or, in
    drop-in mode, ``socket.socket``)."""

    def __init__(self, host: Host, family: int = AF_INET, type: int = SOCK_STREAM,
                 proto: int = 0) -> None:
        if family == -1:
            family = AF_INET
        if type == -1:
            type = SOCK_STREAM
        if family not in (AF_INET, AF_INET6):
            raise _oserror(errno.EAFNOSUPPORT)
        base_type = type & 0xF
        if base_type == SOCK_DGRAM:
            if proto not in (0, -1, _pysocket.IPPROTO_UDP):
                raise _oserror(errno.EPROTONOSUPPORT)
        elif base_type == SOCK_STREAM:
            if proto not in (0, -1, _pysocket.IPPROTO_TCP):
                raise _oserror(errno.EPROTONOSUPPORT)
            if getattr(host, "tcp", None) is None:
                raise _oserror(errno.EPROTONOSUPPORT, "TCP is not available on this host")
        else:
            raise _oserror(errno.ESOCKTNOSUPPORT)
        if fork.CHILD is not None:  # a forked child: the parent's Host makes it
            sk: Any = fork.CHILD.new_socket(family, base_type)
        elif base_type == SOCK_DGRAM:
            sk = host.udp.new_socket(family)
        else:
            sk = host.tcp.new_socket(family)
        timeout = 0.0 if type & _pysocket.SOCK_NONBLOCK else _pysocket.getdefaulttimeout()
        ref = SockRef(sk, family, base_type, max(proto, 0))
        self._init(host, Descriptor(ref), timeout)

    def _init(self, host: Host, desc: Descriptor, timeout: float | None) -> None:
        self._host = host
        self._desc = desc
        self._timeout = timeout
        self._rcvtimeo: float | None = None  # SO_RCVTIMEO (0: none)
        self._sndtimeo: float | None = None  # SO_SNDTIMEO
        self._closed = False  # close() was called (CPython's flag)
        self._released = False  # this object let its descriptor go (real close/detach)
        self._io_refs = 0  # makefile() objects still open (CPython's deferred close)

    @classmethod
    def _over(cls, host: Host, desc: Descriptor) -> Socket:
        """A new object on ``desc`` (its number, or a new descriptor), with the default
        timeout as CPython's constructor gives it."""
        sock = cls.__new__(cls)
        sock._init(host, desc, _pysocket.getdefaulttimeout())
        return sock

    def __repr__(self) -> str:
        gone = self._released or self._desc.closed
        text = self._summary(self.fileno(), gone)
        if not gone:
            for name, call in (("laddr", self.getsockname), ("raddr", self.getpeername)):
                try:
                    text += f", {name}={call()}"
                except OSError:
                    pass
        return text + ">"

    def _summary(self, fd: int, gone: bool) -> str:
        """The start of the repr, from this object's own fields only."""
        closed = " [closed]" if gone else ""
        return (f"<rcunet.Socket{closed} host={self._host.name} fd={fd}, "
                f"family={self.family!s}, type={self.type!s}, proto={self.proto}")

    def __getstate__(self) -> None:
        raise TypeError(f"cannot pickle {type(self).__name__!r} object")

    @property
    def host(self) -> Host:
        return self._host

    @property
    def _sk(self) -> Any:
        """The protocol socket (a forked child's stand-in for it: rcunet.api.fork)."""
        return self._desc.ref.sk  # atomic: two attribute loads; ref.sk is replaced only
        # in a forked child, before any other thread exists

    # properties, not instance attributes: a subclass made in drop-in mode also has
    # socket.socket's read-only ones behind these in its MRO (rcunet.api.patch)
    @property
    def family(self) -> _pysocket.AddressFamily:
        return self._desc.ref.family

    @property
    def type(self) -> _pysocket.SocketKind:
        return self._desc.ref.type

    @property
    def proto(self) -> int:
        """As given (CPython: 0 unless the caller named one)."""
        return self._desc.ref.proto

    # -- lifecycle ----------
    def close(self) -> None:
        self._closed = True
        if self._io_refs <= 0:
            self._real_close()

    def _real_close(self) -> None:
        with fdtable.TABLE_LOCK:  # test-and-set: two closing threads close once
            if self._released:
                return
            self._released = True
        if not fdtable.close(self._desc):
            # another object on the same number (or os.close in drop-in mode) closed it
            # first: EBADF, as CPython's close of an fd closed under it
            raise _oserror(errno.EBADF)

    # CPython's own code: makefile() over socket.SocketIO, the io reference count that
    # defers close() until the last file object is closed, and sendfile by send().
    makefile = _RealSocket.makefile
    # (private methods of CPython's socket.socket that typeshed does not declare)
    _decref_socketios = _RealSocket._decref_socketios  # type: ignore[attr-defined]
    _check_sendfile_params = _RealSocket._check_sendfile_params  # type: ignore[attr-defined]
    _sendfile_use_send = _RealSocket._sendfile_use_send  # type: ignore[attr-defined]

    def _sendfile_use_sendfile(self, file: Any, offset: int = 0,
                               count: int | None = None) -> int:
        raise _pysocket._GiveupOnSendfile(  # type: ignore[attr-defined]  # CPython private
            "os.sendfile() cannot write to an rcunet socket")

    def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        """By ``send`` (``os.sendfile`` cannot write to an rcunet socket), as CPython falls
        back when the fast path is not available."""
        return int(self._sendfile_use_send(file, offset, count))

    def __enter__(self) -> Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if "_released" not in self.__dict__:
            return  # __init__ failed before the socket existed
        if not self._closed and not self._released:
            # Not repr(): fileno() may make a readiness fd (a lock to register, which the
            # collector running this may hold) or, in a forked child, ask the parent.
            text = self._summary(self._desc.number, False)  # atomic: one load
            warnings.warn(f"unclosed {text}>", ResourceWarning, source=self, stacklevel=2)
        try:
            self._real_close()
        except Exception:
            pass

    def _check_open(self) -> None:
        self._open_ref()

    def _open_ref(self) -> SockRef:
        """The socket behind this object's descriptor; EBADF once this object or its
        number was closed.  One call for what each operation checks first."""
        # atomic: one load each of _released (set once under TABLE_LOCK by _real_close
        # or detach) and of the descriptor's closed flag (set once under TABLE_LOCK)
        desc = self._desc
        if self._released or desc.closed:
            raise _oserror(errno.EBADF)
        return desc.ref  # atomic: one load; see _sk

    def fileno(self) -> int:
        """The descriptor number (a readiness fd: ``select``/``selectors``/asyncio wait
        on it), -1 once this object closed or detached it, or its number was closed."""
        # atomic: one load of _released, set once under TABLE_LOCK
        if self._released:
            return -1
        had = self._desc.number  # atomic: one load, stored under TABLE_LOCK
        fd = fdtable.number_of(self._desc)
        if had < 0 <= fd:
            self._mirror_blocking()
        return fd

    def dup(self) -> Socket:
        """A new descriptor of the same socket; the last one closed closes it.  An object
        of this one's class, as CPython's ``dup`` (a subclass's keeps its methods)."""
        self._check_open()
        self._desc.ref.get()
        twin = Descriptor(self._desc.ref)
        if type(self) is Socket:
            return Socket._over(self._host, twin)
        try:
            number = fdtable.number_of(twin)
            subclass: Any = type(self)  # drop-in's socket.socket: (family, type, ...)
            made: Socket = subclass(self.family, self.type, self.proto, fileno=number)
            return made
        except BaseException:
            fdtable.close(twin)
            raise

    def detach(self) -> int:
        """Give up this object without closing its descriptor: returns the number, which
        ``socket.socket(fileno=N)`` (drop-in mode) makes a new object on, and
        ``os.close(N)`` closes."""
        self._closed = True
        fd = self.fileno()
        with fdtable.TABLE_LOCK:
            if self._released or fd < 0:
                return -1
            self._released = True
        return fd

    def get_inheritable(self) -> bool:
        self._check_open()
        return os.get_inheritable(self.fileno())

    def set_inheritable(self, inheritable: bool) -> None:
        self._check_open()
        os.set_inheritable(self.fileno(), inheritable)

    # -- timeouts ----------
    def settimeout(self, value: float | None) -> None:
        self._timeout = _timeout_value(value)
        self._mirror_blocking()

    def _mirror_blocking(self) -> None:
        """O_NONBLOCK on our TCP readiness fd says what the socket's timeout says, as on
        a kernel socket (rcunet itself never relies on the flag: tcp_poll's transfers
        pass MSG_DONTWAIT).  UDP's eventfd keeps O_NONBLOCK: its reads rely on it."""
        fd = self._desc.number  # atomic: one load, stored under TABLE_LOCK
        if fd >= 0 and self.type == SOCK_STREAM:
            try:
                os.set_blocking(fd, self._timeout is None)
            except OSError:
                pass  # the number was closed under us: close() will say so

    def gettimeout(self) -> float | None:
        return self._timeout

    @property
    def timeout(self) -> float | None:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0
        self._mirror_blocking()

    def getblocking(self) -> bool:
        return self._timeout != 0.0

    def _call(self, method: Any, so_timeo: float | None, *args: Any) -> Any:
        """``method(*args, timeout)`` with the socket's timeout; in blocking mode with
        SO_RCVTIMEO/SO_SNDTIMEO set, the call gives up after it with EAGAIN, as Linux's
        ``sock_rcvtimeo`` does.  Errors of the engine become CPython's exceptions."""
        timeout = self._timeout
        try:
            if timeout is None and so_timeo:
                try:
                    return method(*args[:-1], so_timeo, args[-1])
                except TimeoutError:
                    raise _oserror(errno.EAGAIN) from None
            return method(*args[:-1], timeout, args[-1])
        except OSError as exc:
            raise as_python_error(exc) from None

    # -- addresses ----------
    def getsockname(self) -> tuple[Any, ...]:
        ref = self._open_ref()
        laddr, lport, _faddr, _fport = ref.sk.key  # atomic: one load, as in send()
        return unpack_address(ref.family, laddr, lport)

    def getpeername(self) -> tuple[Any, ...]:
        ref = self._open_ref()
        _laddr, _lport, faddr, fport = ref.sk.key  # atomic: one load, as in send()
        if is_any(faddr) and not fport:
            raise _oserror(errno.ENOTCONN)
        return unpack_address(ref.family, faddr, fport)

    # -- bind / connect ----------
    def bind(self, address: tuple[Any, ...]) -> None:
        self._check_open()
        host, port = _check_sockaddr(self.family, address)
        self._sk.bind(pack_address(self.family, host, self._host), port)

    def connect(self, address: tuple[Any, ...]) -> None:
        ref = self._open_ref()
        host, port = _check_sockaddr(ref.family, address)
        addr = _destination(pack_address(ref.family, host, self._host))
        try:
            ref.sk.connect(addr, port, self._timeout)
        except OSError as exc:
            raise as_python_error(exc) from None

    def connect_ex(self, address: tuple[Any, ...]) -> int:
        try:
            self.connect(address)
        except TimeoutError:
            return errno.EAGAIN if self._timeout == 0.0 else errno.ETIMEDOUT
        except _pysocket.gaierror:
            raise
        except OSError as exc:
            return exc.errno or errno.EINVAL
        return 0

    def listen(self, backlog: int = min(_pysocket.SOMAXCONN, 128)) -> None:
        self._check_open()
        self._sk.listen(max(0, _c_int(backlog)))

    def accept(self) -> tuple[Socket, tuple[Any, ...]]:
        ref = self._open_ref()
        try:
            child_sk = ref.sk.accept(self._timeout)
        except OSError as exc:
            raise as_python_error(exc) from None
        # CPython: the accepted socket takes the default timeout, not the listener's
        child = Socket._over(self._host, Descriptor(
            SockRef(child_sk, ref.family, ref.type, ref.proto)))
        return child, child.getpeername()

    def shutdown(self, how: int) -> None:
        self._check_open()
        _c_int(how)
        try:
            self._sk.shutdown(how)
        except OSError as exc:
            raise as_python_error(exc) from None

    # -- send ----------
    def send(self, data: Any, flags: int = 0) -> int:
        sk = self._open_ref().sk
        return int(self._call(sk.send, self._sndtimeo, _byte_view(data), flags))

    def sendall(self, data: Any, flags: int = 0) -> None:
        ref = self._open_ref()
        view = _byte_view(data)
        if ref.type == SOCK_DGRAM:
            self.send(view, flags)
            return
        if flags:
            self._sendall_flags(view, flags)
            return
        timeout, so_timeo = self._timeout, None
        if timeout is None and self._sndtimeo:
            timeout = so_timeo = self._sndtimeo
        try:
            ref.sk.sendall(view, timeout)
        except TimeoutError:
            if so_timeo:
                raise _oserror(errno.EAGAIN) from None  # SO_SNDTIMEO, as in _call
            raise
        except OSError as exc:
            raise as_python_error(exc) from None

    def _sendall_flags(self, view: memoryview, flags: int) -> None:
        sent = 0
        while sent < len(view):
            sent += self.send(view[sent:], flags)

    def sendto(self, data: Any, *args: Any) -> int:
        """``sendto(data, address)`` or ``sendto(data, flags, address)``."""
        self._check_open()
        if len(args) not in (1, 2):
            raise TypeError(f"sendto() takes 2 or 3 arguments ({len(args) + 1} given)")
        flags, address = (0, args[0]) if len(args) == 1 else args
        flags = _c_int(flags)
        host, port = _check_sockaddr(self.family, address)
        if self.type == SOCK_STREAM:
            return self.send(data, flags)  # Linux ignores the address of a TCP sendto
        addr = _destination(pack_address(self.family, host, self._host))
        try:
            return int(self._sk.sendto(_byte_view(data), addr, port))
        except OSError as exc:
            raise as_python_error(exc) from None

    def sendmsg(self, buffers: Any, ancdata: Any = (), flags: int = 0,
                address: Any = None) -> int:
        """Gathers ``buffers``; no ancillary data applies to rcunet's sockets (Linux:
        EINVAL for an unknown control message).  A MSG_ZEROCOPY send on TCP passes the
        buffers' lengths on: each is a page frag of its own in Linux's skbs."""
        self._check_open()
        views = [_byte_view(b) for b in buffers]
        data = b"".join(views)
        control = [_cmsg_item(item) for item in ancdata]
        if self.type == SOCK_DGRAM:
            return self._sendmsg_datagram(data, control, flags, address)
        _check_stream_cmsgs(control)
        if self.type == SOCK_STREAM and flags & MSG_ZEROCOPY and len(views) > 1:
            send = functools.partial(self._sk.send, iov=tuple(len(v) for v in views))
            return int(self._call(send, self._sndtimeo, _byte_view(data), flags))
        return self.send(data, flags)

    def _sendmsg_datagram(self, data: bytes, control: list[tuple[int, int, bytes]],
                          flags: int, address: Any) -> int:
        """UDP's sendmsg: the control messages as ip_cmsg_send/ip6_datagram_send_ctl
        take them (rcunet.host.udp_cmsg)."""
        if address is None:
            if not control:
                return self.send(data, flags)
            dst, port = self._sk.faddr, self._sk.fport
            if not port:
                raise _oserror(errno.EDESTADDRREQ)
        else:
            _c_int(flags)
            host, port = _check_sockaddr(self.family, address)
            dst = _destination(pack_address(self.family, host, self._host))
        try:
            return int(self._sk.sendmsg(data, dst, port, control))
        except OSError as exc:
            raise as_python_error(exc) from None

    # -- receive ----------
    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        sk = self._open_ref().sk
        if bufsize < 0:
            raise ValueError("negative buffersize in recv")
        return bytes(self._call(sk.recv, self._rcvtimeo, bufsize, flags))

    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, tuple[Any, ...] | None]:
        data, address, _size = self._recvfrom(bufsize, flags)
        return data, address

    def _recvfrom(self, bufsize: int, flags: int) -> tuple[bytes, tuple[Any, ...] | None, int]:
        self._check_open()
        if bufsize < 0:
            raise ValueError("negative buffersize in recvfrom")
        if self.type == SOCK_STREAM:
            data = self.recv(bufsize, flags)
            return data, None, len(data)  # TCP fills no address: Python gives None
        data, src, sport, size = self._call(self._sk.recvfrom, self._rcvtimeo, bufsize, flags)
        return data, unpack_address(self.family, src, sport), size

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        if nbytes < 0:
            raise ValueError("negative buffersize in recv_into")
        size = nbytes or len(view)
        if size > len(view):
            raise ValueError("buffer too small for requested bytes")
        data = self.recv(size, flags)
        view[: len(data)] = data
        return len(data)

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, Any]:
        view = memoryview(buffer).cast("B")
        size = nbytes or len(view)
        if size > len(view):
            raise ValueError("nbytes is greater than the length of the buffer")
        data, address = self.recvfrom(size, flags)
        view[: len(data)] = data
        return len(data), address

    def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0
                ) -> tuple[bytes, list[Any], int, Any]:
        """(data, ancdata, msg_flags, address): a TCP socket with TCP_INQ set gets
        (SOL_TCP, TCP_CM_INQ, the bytes left to read) as Linux's tcp_recvmsg gives it
        (MSG_CTRUNC without the room); a datagram longer than ``bufsize`` sets
        MSG_TRUNC.  With MSG_ERRQUEUE: the oldest entry of the error queue (a TCP
        socket's MSG_ZEROCOPY notifications) with its ``IP_RECVERR``/``IPV6_RECVERR``
        control message, as Linux's ``ip_recv_error`` gives it; EAGAIN when the queue is
        empty (it never blocks)."""
        if ancbufsize < 0:
            raise ValueError("negative buffer size in recvmsg()")
        if flags & MSG_ERRQUEUE:
            return self._recv_errqueue(bufsize, ancbufsize)
        if self.type == SOCK_DGRAM:
            self._check_open()
            if bufsize < 0:
                raise ValueError("negative buffersize in recvmsg")
            data, src, sport, size, cmsgs = self._call(self._sk.recvmsg, self._rcvtimeo,
                                                       bufsize, flags)
            address: Any = unpack_address(self.family, src, sport)
            msg_flags = MSG_TRUNC if size > len(data) else 0
        else:
            data, address, _size = self._recvfrom(bufsize, flags)
            cmsgs, msg_flags = self._sk.recv_cmsgs(), 0  # TCP_CM_INQ with TCP_INQ set
        ancdata, truncated = _put_cmsgs(cmsgs, ancbufsize)
        return data, ancdata, msg_flags | truncated, address

    def _recv_errqueue(self, bufsize: int, ancbufsize: int
                       ) -> tuple[bytes, list[Any], int, Any]:
        self._check_open()
        if bufsize < 0:
            raise ValueError("negative buffersize in recvmsg")
        take = getattr(self._sk, "recv_errqueue", None)
        if take is None:  # a UDP socket: rcunet queues no errors for it
            raise _oserror(errno.EAGAIN)
        try:
            data, ancdata, msg_flags = take(bufsize, ancbufsize)
        except OSError as exc:
            raise as_python_error(exc) from None
        return data, ancdata, msg_flags, None

    def recvmsg_into(self, buffers: Any, ancbufsize: int = 0, flags: int = 0
                     ) -> tuple[int, list[Any], int, Any]:
        views = [memoryview(b).cast("B") for b in buffers]
        data, ancdata, msg_flags, address = self.recvmsg(sum(len(v) for v in views),
                                                         ancbufsize, flags)
        offset = 0
        for view in views:
            part = data[offset: offset + len(view)]
            view[: len(part)] = part
            offset += len(part)
        return len(data), ancdata, msg_flags, address

    # -- options ----------
    def setsockopt(self, level: int, optname: int, value: int | bytes | None,
                   optlen: int | None = None) -> None:
        sk = self._open_ref().sk
        if value is None:
            raise _oserror(errno.EINVAL, "setsockopt with a NULL value")
        if not isinstance(value, int):
            value = bytes(value)
        if level == SOL_SOCKET and optname in (_pysocket.SO_RCVTIMEO, _pysocket.SO_SNDTIMEO):
            seconds = _timeval_seconds(value)
            if optname == _pysocket.SO_RCVTIMEO:
                self._rcvtimeo = seconds
            else:
                self._sndtimeo = seconds
            return
        try:
            sk.setsockopt(level, optname, value)
        except OSError as exc:
            raise as_python_error(exc) from None

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> int | bytes:
        self._check_open()
        if level == SOL_SOCKET:
            if optname in (_pysocket.SO_RCVTIMEO, _pysocket.SO_SNDTIMEO):
                seconds = self._rcvtimeo if optname == _pysocket.SO_RCVTIMEO else self._sndtimeo
                packed = _TIMEVAL.pack(int(seconds or 0), round((seconds or 0) % 1 * 1e6))
                return packed[:buflen] if buflen is not None else int.from_bytes(
                    packed[:4], "little", signed=True)
            fixed = {_pysocket.SO_TYPE: int(self.type), SO_DOMAIN: int(self.family),
                     SO_PROTOCOL: self.proto}.get(optname)
            if fixed is not None:
                return struct.pack("i", fixed)[:buflen] if buflen is not None else fixed
        try:
            value: int | bytes = self._sk.getsockopt(level, optname, buflen)
            return value
        except OSError as exc:
            raise as_python_error(exc) from None

    def __getattr__(self, name: str) -> Any:
        """What ``socket.socket`` has and rcunet does not do (``sendmsg_afalg``, and
        platform calls such as ``ioctl``/``share``): OSError as Linux answers them."""
        if name in _NOT_HERE:
            def unsupported(*args: Any, **kwargs: Any) -> Any:
                raise _oserror(_NOT_HERE[name], f"{name} on an rcunet socket")
            return unsupported
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


#: socket.socket methods with no meaning on an INET socket here, and Linux's answer.
_NOT_HERE = {"sendmsg_afalg": errno.EOPNOTSUPP, "ioctl": errno.ENOTTY,
             "share": errno.EOPNOTSUPP}


def on_number(fd: int) -> Socket | None:
    """``socket.socket(fileno=fd)``: a new object on the rcunet descriptor numbered
    ``fd`` (the same number, as CPython's: closing either closes it for both); None for
    a number that is not an rcunet socket's."""
    desc = fdtable.lookup(fd)
    if desc is None:
        return None
    return Socket._over(desc.ref.sk.host, desc)


def dup_of(fd: int) -> Socket | None:
    """``socket.fromfd(fd, ...)``: a new descriptor of the rcunet socket numbered ``fd``
    (fromfd dups, as CPython's); None for a number that is not an rcunet socket's."""
    desc = fdtable.lookup(fd)
    if desc is None:
        return None
    desc.ref.get()
    return Socket._over(desc.ref.sk.host, Descriptor(desc.ref))


_LOOPBACK_FOR = {ANY4: LOOPBACK4, ANY6: LOOPBACK6, V4_MAPPED_ANY: v4mapped(LOOPBACK4)}


def _destination(addr: bytes) -> bytes:
    """A destination of 0.0.0.0 / :: is this host, as on Linux (ip_route_output_key_hash
    makes it the loopback address): ``connect(("0.0.0.0", port))`` reaches a local server."""
    return _LOOPBACK_FOR.get(addr, addr)


def _cmsg_item(item: Any) -> tuple[int, int, bytes]:
    """One (level, type, data) of sendmsg's ancdata, checked as CPython checks it."""
    try:
        level, kind, data = item
    except (TypeError, ValueError):
        raise TypeError("ancillary data items must be (level, type, data) sequences"
                        ) from None
    return _c_int(level), _c_int(kind), bytes(_byte_view(data))


#: SOL_SOCKET messages an inet socket's sendmsg takes and ignores (__sock_cmsg_send)
_IGNORED_SOCKET_CMSGS = (_pysocket.SCM_RIGHTS, getattr(_pysocket, "SCM_CREDENTIALS", 2))


def _check_stream_cmsgs(control: list[tuple[int, int, bytes]]) -> None:
    """tcp_sendmsg: sock_cmsg_send reads SOL_SOCKET messages only (EINVAL for one it
    does not take); other levels are ignored."""
    for level, kind, _data in control:
        if level == SOL_SOCKET and kind not in _IGNORED_SOCKET_CMSGS:
            raise _oserror(errno.EINVAL, "control message not taken by a TCP socket")


def _put_cmsgs(cmsgs: list[tuple[int, int, bytes]], room: int
               ) -> tuple[list[tuple[int, int, bytes]], int]:
    """What ``recvmsg`` with ``room`` bytes of control buffer gets, as Linux's put_cmsg
    gives it: a message whose header fits but not its data comes cut, one whose header
    does not fit is left out, and either sets MSG_CTRUNC.  Returns (messages, flags)."""
    out: list[tuple[int, int, bytes]] = []
    flags = 0
    header = _pysocket.CMSG_LEN(0)
    for level, kind, data in cmsgs:
        if room < header:
            flags = MSG_CTRUNC
            continue
        space = _pysocket.CMSG_SPACE(len(data))
        if room < _pysocket.CMSG_LEN(len(data)):
            flags = MSG_CTRUNC
            data = data[: room - header]
        out.append((level, kind, data))
        room -= min(space, room)
    return out, flags


def _c_int(value: int) -> int:
    """An argument the C socket module takes as an ``int``: OverflowError beyond it."""
    value = operator.index(value)  # TypeError for a str, as CPython's argument parser
    if not -(2 ** 31) <= value < 2 ** 31:
        raise OverflowError("signed integer is greater than maximum" if value > 0
                            else "signed integer is less than minimum")
    return value


def _timeval_seconds(value: int | bytes) -> float | None:
    if isinstance(value, int):
        raise _oserror(errno.EINVAL, "SO_RCVTIMEO/SO_SNDTIMEO take a struct timeval")
    if len(value) < _TIMEVAL.size:
        raise _oserror(errno.EINVAL)
    sec, usec = _TIMEVAL.unpack_from(value)
    if usec < 0 or usec >= 1_000_000:
        raise _oserror(errno.EDOM)
    seconds = sec + usec / 1e6
    return seconds if seconds > 0 else None


def _byte_view(data: Any) -> memoryview:
    """A read-only byte view of a bytes-like ``data``: no copy here (the engine copies
    once into its send queue before the call returns, so the caller may reuse its buffer
    afterwards, as with Python's sockets).  Items wider than a byte (``array('i')``)
    count as their bytes, as ``socket.send`` counts them."""
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"a bytes-like object is required, not "
                        f"'{type(data).__name__}'") from None
    if view.itemsize != 1 or view.ndim != 1:
        view = view.cast("B")
    return view.toreadonly()

