"""``rcunet.api.socket.Socket``: the user-facing socket, with ``socket.socket``'s interface
and CPython's semantics (address tuples, ``OSError`` subclasses with Linux's errno and
strerror's text, timeouts raising ``TimeoutError``, non-blocking mode raising
``BlockingIOError``, ``makefile`` over ``socket.SocketIO`` with the deferred close,
``sendmsg``/``recvmsg``, ``dup``/``detach``, ``SO_RCVTIMEO``/``SO_SNDTIMEO``).

One facade over both protocol sockets (``TcpSock``, ``UdpSock``): they take the same calls.

``fileno()`` is a readiness fd: a ``dup`` of the protocol socket's poll fd, owned by this
object.  Whatever a program does with that number (``os.close``, ``socket.socket(fileno=)``
taking it over, a selector keeping it) leaves the protocol socket and its poll fd intact.

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
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any

from rcunet.host.sockerr import as_python_error, oserror
from rcunet.tables.entry import AF_INET, AF_INET6, ANY4, ANY6

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

#: Readiness fds handed out by ``fileno()`` -> their Socket, so ``socket.fromfd`` and
#: ``socket.socket(fileno=)`` in drop-in mode find the rcunet socket behind a number.
#: guarded-by: _FDS_LOCK
_FDS: weakref.WeakValueDictionary[int, Socket] = weakref.WeakValueDictionary()
#: Fds given away by ``detach()``: the protocol socket waits there to be adopted.
_DETACHED: dict[int, tuple[_SockRef, int, int, int]] = {}
_FDS_LOCK = threading.Lock()


_oserror = oserror


class _SockRef:
    """One protocol socket shared by a Socket and its ``dup()``s: closed by the last."""

    __slots__ = ("sk", "refs", "lock")

    def __init__(self, sk: Any) -> None:
        self.sk = sk
        self.refs = 1  # guarded-by: lock
        self.lock = threading.Lock()

    def get(self) -> None:
        with self.lock:
            self.refs += 1

    def put(self) -> None:
        with self.lock:
            self.refs -= 1
            last = self.refs == 0
        if last:
            self.sk.close()


def pack_address(family: int, host: str | bytes, on: Host | None = None) -> bytes:
    """A socket-API host string (``""``, ``"<broadcast>"``, dotted quad, IPv6 text, a
    name the Network of ``on`` knows) into packed bytes of the socket's family;
    EINVAL/EAFNOSUPPORT as Linux would, ``gaierror`` for an unknown name."""
    if isinstance(host, bytes) and len(host) in (4, 16):
        packed = host
    elif host in ("", b""):
        packed = ANY4 if family == AF_INET else ANY6
    elif host == "<broadcast>":
        packed = b"\xff\xff\xff\xff"
    else:
        packed = _parse_host(host.decode() if isinstance(host, bytes) else host, on, family)
    if family == AF_INET and len(packed) != 4:
        raise _oserror(errno.EAFNOSUPPORT, "IPv6 address on an AF_INET socket")
    if family == AF_INET6 and len(packed) == 4:
        packed = b"\0" * 10 + b"\xff\xff" + packed  # v4-mapped, as the kernel stores it
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
    value = float(value)
    if value != value:
        raise ValueError("Invalid value NaN (not a number)")
    if value < 0:
        raise ValueError("Timeout value out of range")
    return value


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
            sk: Any = host.udp.new_socket(family)
        elif base_type == SOCK_STREAM:
            if proto not in (0, -1, _pysocket.IPPROTO_TCP):
                raise _oserror(errno.EPROTONOSUPPORT)
            tcp = getattr(host, "tcp", None)
            if tcp is None:
                raise _oserror(errno.EPROTONOSUPPORT, "TCP is not available on this host")
            sk = tcp.new_socket(family)
        else:
            raise _oserror(errno.ESOCKTNOSUPPORT)
        timeout = 0.0 if type & _pysocket.SOCK_NONBLOCK else _pysocket.getdefaulttimeout()
        self._init(host, sk, _SockRef(sk), family, base_type, proto, timeout)

    def _init(self, host: Host, sk: Any, ref: _SockRef, family: int, type: int, proto: int,
              timeout: float | None) -> None:
        self._host = host
        self._sk = sk
        self._ref = ref
        self.family = _pysocket.AddressFamily(family)
        self.type = _pysocket.SocketKind(type)
        self.proto = max(proto, 0)  # as given (CPython: 0 unless the caller named one)
        self._timeout = timeout
        self._rcvtimeo: float | None = None  # SO_RCVTIMEO (0: none)
        self._sndtimeo: float | None = None  # SO_SNDTIMEO
        self._closed = False  # close() was called (CPython's flag)
        self._released = False  # the protocol socket is no longer ours (real close/detach)
        self._io_refs = 0  # makefile() objects still open (CPython's deferred close)
        self._fd = -1
        self._fd_identity: tuple[int, int] | None = None

    @classmethod
    def _sharing(cls, host: Host, ref: _SockRef, family: int, type: int, proto: int,
                 timeout: float | None) -> Socket:
        sock = cls.__new__(cls)
        sock._init(host, ref.sk, ref, family, type, proto, timeout)
        return sock

    def __repr__(self) -> str:
        closed = " [closed]" if self._released else ""
        text = (f"<rcunet.Socket{closed} host={self._host.name} fd={self.fileno()}, "
                f"family={self.family!s}, type={self.type!s}, proto={self.proto}")
        if not self._released:
            for name, call in (("laddr", self.getsockname), ("raddr", self.getpeername)):
                try:
                    text += f", {name}={call()}"
                except OSError:
                    pass
        return text + ">"

    def __getstate__(self) -> None:
        raise TypeError(f"cannot pickle {type(self).__name__!r} object")

    @property
    def host(self) -> Host:
        return self._host

    # -- lifecycle ----------
    def close(self) -> None:
        self._closed = True
        if self._io_refs <= 0:
            self._real_close()

    def _real_close(self) -> None:
        with _FDS_LOCK:  # test-and-set: two closing threads put our reference once
            if self._released:
                return
            self._released = True
            fd, self._fd = self._fd, -1
            if fd >= 0 and _FDS.get(fd) is self:
                del _FDS[fd]
        try:
            self._drop_fd(fd)
        finally:
            self._ref.put()

    def _drop_fd(self, fd: int) -> None:
        # Close our dup only if the number is still it: a program that os.close()d it may
        # have had the number reused for a file of its own since (and close() then
        # fails with EBADF, as CPython's does once its fd was closed under it).
        if fd >= 0:
            if _identity(fd) != self._fd_identity:
                raise _oserror(errno.EBADF, "the socket's fd was closed by someone else")
            os.close(fd)

    # CPython's own code: makefile() over socket.SocketIO, the io reference count that
    # defers close() until the last file object is closed, and sendfile by send().
    makefile = _RealSocket.makefile
    _decref_socketios = _RealSocket._decref_socketios
    _check_sendfile_params = _RealSocket._check_sendfile_params
    _sendfile_use_send = _RealSocket._sendfile_use_send

    def _sendfile_use_sendfile(self, file: Any, offset: int = 0,
                               count: int | None = None) -> int:
        raise _pysocket._GiveupOnSendfile(  # type: ignore[attr-defined]
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
            warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self, stacklevel=2)
        try:
            self._real_close()
        except Exception:
            pass

    def _check_open(self) -> None:
        # atomic: one attribute load; set once under _FDS_LOCK by _real_close/detach
        if self._released:
            raise _oserror(errno.EBADF)

    def fileno(self) -> int:
        """A readiness fd (``select``/``selectors``/asyncio wait on it), -1 once closed."""
        # atomic: one load each of _fd and _released, both stored under _FDS_LOCK; a
        # racing close() may make the number stale at once, as with any fd
        fd = self._fd
        if fd >= 0 or self._released:
            return fd
        poll_fd = self._sk.fileno()  # outside _FDS_LOCK: it may make the poll fd
        with _FDS_LOCK:
            if self._fd < 0 and not self._released:
                fd = os.dup(poll_fd)  # non-inheritable, as sockets are
                self._fd_identity = _identity(fd)
                self._fd = fd
                _FDS[fd] = self
        self._mirror_blocking()
        return self._fd

    def dup(self) -> Socket:
        """A second Socket on the same connection; the last close() closes it."""
        self._check_open()
        self._ref.get()
        return Socket._sharing(self._host, self._ref, self.family, self.type, self.proto,
                               _pysocket.getdefaulttimeout())

    def detach(self) -> int:
        """Give up the socket object, keeping the connection: returns the fd number, which
        ``socket.socket(fileno=N)``/``socket.fromfd`` (drop-in mode) take over."""
        self._closed = True
        fd = self.fileno()
        with _FDS_LOCK:
            if self._released or fd < 0:
                return -1
            _FDS.pop(fd, None)
            self._fd = -1
            self._released = True
            _DETACHED[fd] = (self._ref, self.family, self.type, self.proto)
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
        fd = self._fd
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
        self._check_open()
        laddr, lport, _faddr, _fport = self._sk.key  # atomic: one load, as in send()
        return unpack_address(self.family, laddr, lport)

    def getpeername(self) -> tuple[Any, ...]:
        self._check_open()
        _laddr, _lport, faddr, fport = self._sk.key  # atomic: one load, as in send()
        if faddr in (ANY4, ANY6) and not fport:
            raise _oserror(errno.ENOTCONN)
        return unpack_address(self.family, faddr, fport)

    # -- bind / connect ----------
    def bind(self, address: tuple[Any, ...]) -> None:
        self._check_open()
        host, port = _check_sockaddr(self.family, address)
        self._sk.bind(pack_address(self.family, host, self._host), port)

    def connect(self, address: tuple[Any, ...]) -> None:
        self._check_open()
        host, port = _check_sockaddr(self.family, address)
        addr = _destination(pack_address(self.family, host, self._host))
        try:
            self._sk.connect(addr, port, self._timeout)
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
        self._check_open()
        try:
            child_sk = self._sk.accept(self._timeout)
        except OSError as exc:
            raise as_python_error(exc) from None
        # CPython: the accepted socket takes the default timeout, not the listener's
        child = Socket._sharing(self._host, _SockRef(child_sk), self.family, self.type,
                                self.proto, _pysocket.getdefaulttimeout())
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
        self._check_open()
        return int(self._call(self._sk.send, self._sndtimeo, _byte_view(data), flags))

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._check_open()
        view = _byte_view(data)
        if self.type == SOCK_DGRAM:
            self.send(view, flags)
            return
        if flags:
            self._sendall_flags(view, flags)
            return
        timeout, so_timeo = self._timeout, None
        if timeout is None and self._sndtimeo:
            timeout = so_timeo = self._sndtimeo
        try:
            self._sk.sendall(view, timeout)
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
        if list(ancdata):
            raise _oserror(errno.EINVAL, "rcunet sockets take no ancillary data")
        if address is not None and self.type == SOCK_DGRAM:
            return self.sendto(data, flags, address)
        if self.type == SOCK_STREAM and flags & MSG_ZEROCOPY and len(views) > 1:
            send = functools.partial(self._sk.send, iov=tuple(len(v) for v in views))
            return int(self._call(send, self._sndtimeo, _byte_view(data), flags))
        return self.send(data, flags)

    # -- receive ----------
    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._check_open()
        if bufsize < 0:
            raise ValueError("negative buffersize in recv")
        return bytes(self._call(self._sk.recv, self._rcvtimeo, bufsize, flags))

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
        data, address, size = self._recvfrom(bufsize, flags)
        msg_flags = MSG_TRUNC if self.type == SOCK_DGRAM and size > len(data) else 0
        ancdata: list[Any] = []
        cmsgs = getattr(self._sk, "recv_cmsgs", None)  # TCP: TCP_CM_INQ with TCP_INQ set
        if cmsgs is not None:
            for level, kind, payload in cmsgs():
                if ancbufsize < _pysocket.CMSG_LEN(len(payload)):
                    msg_flags |= MSG_CTRUNC  # put_cmsg: no room for it
                    break
                ancbufsize -= _pysocket.CMSG_SPACE(len(payload))
                ancdata.append((level, kind, payload))
        return data, ancdata, msg_flags, address

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
        self._check_open()
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
            self._sk.setsockopt(level, optname, value)
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
            return self._sk.getsockopt(level, optname, buflen)  # type: ignore[no-any-return]
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


def adopt(fd: int) -> Socket | None:
    """The Socket behind a readiness fd: a detached one is taken over (the fd becomes
    the new Socket's), a live one is shared (as ``dup``); None for a foreign fd."""
    with _FDS_LOCK:
        detached = _DETACHED.pop(fd, None)
        live = _FDS.get(fd)
    if detached is not None:
        ref, family, type, proto = detached
        sock = Socket._sharing(_host_of(ref), ref, family, type, proto,
                               _pysocket.getdefaulttimeout())
        with _FDS_LOCK:
            sock._fd = fd
            sock._fd_identity = _identity(fd)
            _FDS[fd] = sock
        return sock
    if live is not None:
        return live.dup()
    return None


def _host_of(ref: _SockRef) -> Host:
    return ref.sk.host  # type: ignore[no-any-return]


_LOOPBACK_FOR = {ANY4: b"\x7f\0\0\x01", ANY6: b"\0" * 15 + b"\x01",
                 b"\0" * 10 + b"\xff\xff" + ANY4: b"\0" * 10 + b"\xff\xff\x7f\0\0\x01"}


def _destination(addr: bytes) -> bytes:
    """A destination of 0.0.0.0 / :: is this host, as on Linux (ip_route_output_key_hash
    makes it the loopback address): ``connect(("0.0.0.0", port))`` reaches a local server."""
    return _LOOPBACK_FOR.get(addr, addr)


def _c_int(value: int) -> int:
    """An argument the C socket module takes as an ``int``: OverflowError beyond it."""
    value = operator.index(value)  # TypeError for a str, as CPython's argument parser
    if not -(2 ** 31) <= value < 2 ** 31:
        raise OverflowError("signed integer is greater than maximum" if value > 0
                            else "signed integer is less than minimum")
    return value


def _identity(fd: int) -> tuple[int, int] | None:
    """(device, inode) of the open file behind ``fd``; None if it is not open."""
    try:
        status = os.fstat(fd)
    except OSError:
        return None
    return status.st_dev, status.st_ino


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

