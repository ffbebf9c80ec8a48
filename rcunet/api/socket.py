"""``rcunet.api.socket.Socket``: the user-facing socket, compatible with Python's
``socket.socket`` (method names, address tuples, ``OSError`` with Linux's errno,
timeouts raising ``TimeoutError``, non-blocking mode raising ``BlockingIOError``, and a
``fileno()`` that ``selectors`` can wait on).

This is the only layer that blocks a caller: it waits on the protocol socket's
condition variable with the socket's timeout.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket as _pysocket
import struct
import time
from typing import TYPE_CHECKING, Any

from rcunet.host.udp import UdpSock
from rcunet.tables.entry import AF_INET, AF_INET6, ANY4, ANY6

if TYPE_CHECKING:
    from rcunet.host.host import Host

SOCK_STREAM = _pysocket.SOCK_STREAM
SOCK_DGRAM = _pysocket.SOCK_DGRAM
SOL_SOCKET = _pysocket.SOL_SOCKET
IPPROTO_IP = _pysocket.IPPROTO_IP
IPPROTO_IPV6 = _pysocket.IPPROTO_IPV6
MSG_PEEK = _pysocket.MSG_PEEK
MSG_DONTWAIT = _pysocket.MSG_DONTWAIT
IP_MULTICAST_ALL = 49  # linux/in.h; not exported by Python's socket module
SOCK_MIN_RCVBUF = 2048 + 256  # Linux: 2 * (2048 + sizeof(struct sk_buff)) / 2, roughly
_INT = struct.Struct("i")


def _oserror(code: int, detail: str = "") -> OSError:
    message = os.strerror(code) + (f" ({detail})" if detail else "")
    if code in (errno.EAGAIN, errno.EWOULDBLOCK):
        return BlockingIOError(code, message)
    if code == errno.ECONNREFUSED:
        return ConnectionRefusedError(code, message)
    if code == errno.ECONNRESET:
        return ConnectionResetError(code, message)
    if code == errno.EPIPE:
        return BrokenPipeError(code, message)
    return OSError(code, message)


def pack_address(family: int, host: str | bytes) -> bytes:
    """A socket-API host string (``""``, ``"<broadcast>"``, dotted quad, IPv6 text)
    into packed bytes of the socket's family; EINVAL/EAFNOSUPPORT as Linux would."""
    if isinstance(host, bytes) and len(host) in (4, 16):
        packed = host
    elif host in ("", b""):
        packed = ANY4 if family == AF_INET else ANY6
    elif host == "<broadcast>":
        packed = b"\xff\xff\xff\xff"
    else:
        packed = _parse_host(host.decode() if isinstance(host, bytes) else host)
    if family == AF_INET and len(packed) != 4:
        raise _oserror(errno.EAFNOSUPPORT, "IPv6 address on an AF_INET socket")
    if family == AF_INET6 and len(packed) == 4:
        packed = b"\0" * 10 + b"\xff\xff" + packed  # v4-mapped, as the kernel stores it
    return packed


def _parse_host(text: str) -> bytes:
    """Numeric host text -> packed bytes with the C parsers (``inet_pton``)."""
    text = text.split("%", 1)[0]
    try:
        return _pysocket.inet_pton(AF_INET, text)
    except OSError:
        pass
    try:
        return _pysocket.inet_pton(AF_INET6, text)
    except OSError:
        raise _pysocket.gaierror(-2, "Name or service not known") from None


def unpack_address(family: int, packed: bytes, port: int) -> tuple[Any, ...]:
    if family == AF_INET:
        return (_pysocket.inet_ntop(AF_INET, packed), port)  # str(IPv4Address), in C
    return (str(ipaddress.IPv6Address(packed)), port, 0, 0)


def _check_sockaddr(family: int, address: object) -> tuple[str | bytes, int]:
    if not isinstance(address, tuple) or len(address) < 2 or (
            family == AF_INET and len(address) != 2) or len(address) > 4:
        expected = "(host, port)" if family == AF_INET else "(host, port[, flowinfo, scope_id])"
        raise TypeError(f"{'AF_INET' if family == AF_INET else 'AF_INET6'} address must be "
                        f"a tuple {expected}")
    host, port = address[0], address[1]
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise OverflowError("port must be 0-65535.")
    if not isinstance(host, str | bytes):
        raise TypeError("host must be a str")
    return host, port


class Socket:
    """A socket on an rcunet Host.  Create with ``host.socket(family, type)``."""

    def __init__(self, host: Host, family: int = AF_INET, type: int = SOCK_STREAM,
                 proto: int = 0) -> None:
        if family not in (AF_INET, AF_INET6):
            raise _oserror(errno.EAFNOSUPPORT)
        base_type = type & 0xF
        if base_type == SOCK_DGRAM:
            if proto not in (0, _pysocket.IPPROTO_UDP):
                raise _oserror(errno.EPROTONOSUPPORT)
            self._sk: Any = host.udp.new_socket(family)
        elif base_type == SOCK_STREAM:
            if proto not in (0, _pysocket.IPPROTO_TCP):
                raise _oserror(errno.EPROTONOSUPPORT)
            tcp = getattr(host, "tcp", None)
            if tcp is None:
                raise _oserror(errno.EPROTONOSUPPORT, "TCP is not available on this host")
            self._sk = tcp.new_socket(family)
        else:
            raise _oserror(errno.ESOCKTNOSUPPORT)
        self._host = host
        self.family = family
        self.type = base_type
        self.proto = proto or (_pysocket.IPPROTO_UDP if base_type == SOCK_DGRAM
                               else _pysocket.IPPROTO_TCP)
        self._timeout: float | None = None
        self._closed = False
        if type & _pysocket.SOCK_NONBLOCK:
            self._timeout = 0.0

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"laddr={self._sk.laddr.hex()}:{self._sk.lport}"
        return f"<rcunet.Socket {self._host.name} family={self.family} type={self.type} {state}>"

    # -- lifecycle ----------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if isinstance(self._sk, UdpSock):
            self._host.udp.close(self._sk)
        else:
            self._sk.close()

    def __enter__(self) -> Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass

    def _check_open(self) -> None:
        if self._closed:
            raise _oserror(errno.EBADF)

    def fileno(self) -> int:
        self._check_open()
        return int(self._sk.fileno())

    # -- timeouts ----------
    def settimeout(self, value: float | None) -> None:
        if value is not None:
            value = float(value)
            if value < 0:
                raise ValueError("Timeout value out of range")
        self._timeout = value

    def gettimeout(self) -> float | None:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0

    def getblocking(self) -> bool:
        return self._timeout != 0.0

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
        addr = pack_address(self.family, host)
        if isinstance(self._sk, UdpSock):
            self._bind_udp(addr, port)
        else:
            self._sk.bind(addr, port)

    def _bind_udp(self, addr: bytes, port: int) -> None:
        sk = self._sk
        wire_addr = addr[12:] if len(addr) == 16 and addr[:12] == b"\0" * 10 + b"\xff\xff" else addr
        local = wire_addr in (ANY4, ANY6) or self._host.ip.is_local(wire_addr) \
            or wire_addr[0] >> 4 == 14 or wire_addr[0] == 0xFF or wire_addr == b"\xff" * 4
        if not local:
            raise _oserror(errno.EADDRNOTAVAIL, "cannot assign requested address")
        with sk.lock:
            if sk.hashed or sk.bound:
                raise _oserror(errno.EINVAL, "socket is already bound")
            sk.set_key(addr, 0, sk.faddr, sk.fport)
            try:
                self._host.udp.table.bind(sk, port)
            except OSError:
                sk.set_key(ANY4 if self.family == AF_INET else ANY6, 0, sk.faddr, sk.fport)
                raise
            sk.bound = True

    def connect(self, address: tuple[Any, ...]) -> None:
        self._check_open()
        host, port = _check_sockaddr(self.family, address)
        addr = pack_address(self.family, host)
        if isinstance(self._sk, UdpSock):
            self._connect_udp(addr, port)
        else:
            self._sk.connect(addr, port, self._timeout)

    def connect_ex(self, address: tuple[Any, ...]) -> int:
        try:
            self.connect(address)
        except OSError as exc:
            return exc.errno or errno.EINVAL
        return 0

    def _connect_udp(self, addr: bytes, port: int) -> None:
        sk = self._sk
        if port == 0:
            raise _oserror(errno.EINVAL, "connect to port 0")  # ip4_datagram_connect
        wire_dst = _wire(addr)
        entry = self._host.dst_cache.lookup(wire_dst)
        if entry is None:
            raise _oserror(errno.ENETUNREACH)
        try:
            src = entry.src if not self._host.ip.is_local(wire_dst) else wire_dst
        finally:
            entry.release()
        if self.family == AF_INET6 and len(src) == 4:
            src = b"\0" * 10 + b"\xff\xff" + src
        with sk.lock:
            if not sk.hashed:
                self._host.udp.table.autobind(sk)
            laddr = src if sk.laddr in (ANY4, ANY6) else None
            self._host.udp.table.connect(sk, addr, port, laddr)

    # -- send ----------
    def sendto(self, data: bytes, flags_or_address: Any, address: Any = None) -> int:
        self._check_open()
        if address is None:
            address, flags = flags_or_address, 0
        else:
            flags = flags_or_address
        del flags
        host, port = _check_sockaddr(self.family, address)
        if isinstance(self._sk, UdpSock):
            err = self._sk.take_error()
            if err:
                raise _oserror(err)
            if port == 0:
                raise _oserror(errno.EINVAL, "destination port 0")
            addr = pack_address(self.family, host)
            return self._host.udp.sendto(self._sk, bytes(data), _wire(addr), port)
        raise _oserror(errno.EISCONN)

    def send(self, data: bytes, flags: int = 0) -> int:
        self._check_open()
        sk = self._sk
        if isinstance(sk, UdpSock):
            err = sk.take_error()
            if err:
                raise _oserror(err)
            # atomic: one attribute load of the identity tuple (set_key stores it last), so
            # a concurrent connect() gives the old or the new peer, never a mix of both.
            _laddr, _lport, faddr, fport = sk.key
            if not fport:
                raise _oserror(errno.EDESTADDRREQ)
            return self._host.udp.sendto(sk, bytes(data), _wire(faddr), fport)
        return int(sk.send(_byte_view(data), self._timeout, flags))

    def sendall(self, data: bytes, flags: int = 0) -> None:
        self._check_open()
        if isinstance(self._sk, UdpSock):
            self.send(data, flags)
            return
        self._sk.sendall(_byte_view(data), self._timeout)

    # -- receive ----------
    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, tuple[Any, ...] | None]:
        self._check_open()
        if bufsize < 0:
            raise ValueError("negative buffersize in recvfrom")
        sk = self._sk
        if not isinstance(sk, UdpSock):
            data = sk.recv(bufsize, self._timeout, flags)
            return data, self.getpeername()
        datagram = self._wait_datagram(sk, flags)
        payload, (src, sport) = datagram
        family_src = src if self.family == AF_INET or len(src) == 16 else \
            b"\0" * 10 + b"\xff\xff" + src
        return payload[:bufsize], unpack_address(self.family, family_src, sport)

    def _wait_datagram(self, sk: UdpSock, flags: int) -> Any:
        timeout = 0.0 if flags & MSG_DONTWAIT else self._timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            err = sk.take_error()
            if err:
                raise _oserror(err)
            datagram = sk.dequeue(peek=bool(flags & MSG_PEEK))
            if datagram is not None:
                return datagram
            if self._closed or sk.closed:
                raise _oserror(errno.EBADF)
            if sk.shutdown_rd:
                return (b"", (sk.faddr, sk.fport))
            if deadline is None:
                sk.wait_readable(None)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if timeout == 0.0:
                    raise _oserror(errno.EAGAIN)
                raise TimeoutError("timed out")
            sk.wait_readable(remaining)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._check_open()
        if isinstance(self._sk, UdpSock):
            return self.recvfrom(bufsize, flags)[0]
        if bufsize < 0:
            raise ValueError("negative buffersize in recv")
        return bytes(self._sk.recv(bufsize, self._timeout, flags))

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        size = nbytes or len(view)
        data = self.recv(size, flags)
        view[: len(data)] = data
        return len(data)

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, Any]:
        view = memoryview(buffer).cast("B")
        size = nbytes or len(view)
        data, address = self.recvfrom(size, flags)
        view[: len(data)] = data
        return len(data), address

    # -- TCP-only calls (delegated) ----------
    def listen(self, backlog: int = 128) -> None:
        self._check_open()
        if isinstance(self._sk, UdpSock):
            raise _oserror(errno.EOPNOTSUPP)
        self._sk.listen(backlog)

    def accept(self) -> tuple[Socket, tuple[Any, ...]]:
        self._check_open()
        if isinstance(self._sk, UdpSock):
            raise _oserror(errno.EOPNOTSUPP)
        child_sk = self._sk.accept(self._timeout)
        child = Socket.__new__(Socket)
        child._sk = child_sk
        child._host = self._host
        child.family, child.type, child.proto = self.family, self.type, self.proto
        # CPython: the accepted socket takes the default timeout, not the listener's
        child._timeout = _pysocket.getdefaulttimeout()
        child._closed = False
        return child, child.getpeername()

    def shutdown(self, how: int) -> None:
        self._check_open()
        if how not in (_pysocket.SHUT_RD, _pysocket.SHUT_WR, _pysocket.SHUT_RDWR):
            raise _oserror(errno.EINVAL)
        sk = self._sk
        if isinstance(sk, UdpSock):
            if sk.faddr in (ANY4, ANY6):
                raise _oserror(errno.ENOTCONN)
            if how in (_pysocket.SHUT_RD, _pysocket.SHUT_RDWR):
                sk.shutdown_rd = True
                sk.wake_all()
            return
        sk.shutdown(how)

    # -- options ----------
    def setsockopt(self, level: int, optname: int, value: int | bytes, optlen: int | None = None
                   ) -> None:
        self._check_open()
        sk = self._sk
        if not isinstance(sk, UdpSock):
            sk.setsockopt(level, optname, value)
            return
        if level == SOL_SOCKET:
            self._set_socket_level(sk, optname, value)
        elif level == IPPROTO_IP:
            self._set_ip_level(sk, optname, value)
        elif level == IPPROTO_IPV6 and self.family == AF_INET6:
            self._set_ipv6_level(sk, optname, value)
        else:
            raise _oserror(errno.ENOPROTOOPT)

    def _set_socket_level(self, sk: UdpSock, optname: int, value: int | bytes) -> None:
        number = _int_value(value)
        if optname == _pysocket.SO_REUSEADDR:
            sk.reuseaddr = bool(number)
        elif optname == _pysocket.SO_REUSEPORT:
            sk.reuseport = bool(number)
        elif optname == _pysocket.SO_BROADCAST:
            sk.broadcast = bool(number)
        elif optname == _pysocket.SO_RCVBUF:
            # Linux doubles it (the skb overhead), after the net.core.rmem_max cap
            sk.rcvbuf = max(SOCK_MIN_RCVBUF, min(number, self._host.tuning.rmem_max) * 2)
        elif optname == _pysocket.SO_SNDBUF:
            sk.sndbuf = max(4608, min(number, self._host.tuning.wmem_max) * 2)
        elif optname == _pysocket.SO_BINDTODEVICE:
            name = value.rstrip(b"\0").decode() if isinstance(value, bytes) else str(value)
            sk.bound_dev = self._host.interface(name).ifindex if name else 0
        else:
            raise _oserror(errno.ENOPROTOOPT)

    def _set_ip_level(self, sk: UdpSock, optname: int, value: int | bytes) -> None:
        if optname in (_pysocket.IP_ADD_MEMBERSHIP, _pysocket.IP_DROP_MEMBERSHIP):
            if not isinstance(value, bytes) or len(value) not in (8, 12):
                raise _oserror(errno.EINVAL, "expects struct ip_mreq or ip_mreqn")
            group = value[:4]
            ifindex = self._mreq_ifindex(value[4:8], value[8:12] if len(value) == 12 else b"")
            ifindex = ifindex or self._host.udp.default_multicast_ifindex(group)
            if optname == _pysocket.IP_ADD_MEMBERSHIP:
                self._host.udp.join_group(sk, group, ifindex)
            else:
                self._host.udp.leave_group(sk, group, ifindex)
        elif optname == _pysocket.IP_MULTICAST_TTL:
            sk.multicast_ttl = _ranged(_int_value(value), 0, 255)
        elif optname == _pysocket.IP_MULTICAST_LOOP:
            sk.multicast_loop = bool(_int_value(value))
        elif optname == _pysocket.IP_TTL:
            sk.ttl = _ranged(_int_value(value), 1, 255)
        elif optname == IP_MULTICAST_ALL:
            sk.mc_all = bool(_int_value(value))
        elif optname == _pysocket.IP_MULTICAST_IF:
            if isinstance(value, bytes) and len(value) >= 4:
                sk.multicast_if = self._mreq_ifindex(value[:4], b"")
            else:
                raise _oserror(errno.EINVAL)
        else:
            raise _oserror(errno.ENOPROTOOPT)

    def _mreq_ifindex(self, address: bytes, ifindex: bytes) -> int:
        if ifindex and int.from_bytes(ifindex, "little"):
            return int.from_bytes(ifindex, "little")
        if address == ANY4:
            return 0
        for iface in self._host.interfaces.values():
            if iface.has_address(address):
                return iface.ifindex
        raise _oserror(errno.ENODEV, "no interface with that address")

    def _set_ipv6_level(self, sk: UdpSock, optname: int, value: int | bytes) -> None:
        if optname in (_pysocket.IPV6_JOIN_GROUP, _pysocket.IPV6_LEAVE_GROUP):
            if not isinstance(value, bytes) or len(value) != 20:
                raise _oserror(errno.EINVAL, "expects struct ipv6_mreq")
            group = value[:16]
            ifindex = int.from_bytes(value[16:20], "little") or \
                self._host.udp.default_multicast_ifindex(group)
            if optname == _pysocket.IPV6_JOIN_GROUP:
                self._host.udp.join_group(sk, group, ifindex)
            else:
                self._host.udp.leave_group(sk, group, ifindex)
        elif optname == _pysocket.IPV6_V6ONLY:
            if sk.hashed:
                raise _oserror(errno.EINVAL)
            sk.v6only = bool(_int_value(value))
        elif optname == _pysocket.IPV6_MULTICAST_HOPS:
            hops = _int_value(value)
            sk.multicast_ttl = 1 if hops == -1 else _ranged(hops, 0, 255)
        elif optname == _pysocket.IPV6_MULTICAST_LOOP:
            sk.multicast_loop = bool(_int_value(value))
        elif optname == _pysocket.IPV6_UNICAST_HOPS:
            hops = _int_value(value)
            sk.ttl = None if hops == -1 else _ranged(hops, 1, 255)
        elif optname == _pysocket.IPV6_MULTICAST_IF:
            sk.multicast_if = _int_value(value)
        else:
            raise _oserror(errno.ENOPROTOOPT)

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> int | bytes:
        self._check_open()
        sk = self._sk
        if not isinstance(sk, UdpSock):
            return sk.getsockopt(level, optname, buflen)  # type: ignore[no-any-return]
        result: int
        if level == SOL_SOCKET:
            table = {
                _pysocket.SO_REUSEADDR: lambda: int(sk.reuseaddr),
                _pysocket.SO_REUSEPORT: lambda: int(sk.reuseport),
                _pysocket.SO_BROADCAST: lambda: int(sk.broadcast),
                _pysocket.SO_RCVBUF: lambda: sk.rcvbuf,
                _pysocket.SO_SNDBUF: lambda: sk.sndbuf,
                _pysocket.SO_ERROR: sk.take_error,
                _pysocket.SO_TYPE: lambda: self.type,
            }
        elif level == IPPROTO_IP:
            table = {
                _pysocket.IP_MULTICAST_TTL: lambda: sk.multicast_ttl,
                _pysocket.IP_MULTICAST_LOOP: lambda: int(sk.multicast_loop),
                _pysocket.IP_TTL: lambda: sk.ttl or self._host.tuning.ip_default_ttl,
                IP_MULTICAST_ALL: lambda: int(sk.mc_all),
            }
        elif level == IPPROTO_IPV6:
            table = {
                _pysocket.IPV6_V6ONLY: lambda: int(sk.v6only),
                _pysocket.IPV6_MULTICAST_HOPS: lambda: sk.multicast_ttl,
                _pysocket.IPV6_MULTICAST_LOOP: lambda: int(sk.multicast_loop),
            }
        else:
            raise _oserror(errno.ENOPROTOOPT)
        getter = table.get(optname)
        if getter is None:
            raise _oserror(errno.ENOPROTOOPT)
        result = getter()
        if buflen is not None:
            return _INT.pack(result)[:buflen]
        return result


def _byte_view(data: Any) -> memoryview:
    """A read-only byte view of a bytes-like ``data`` for TCP send: no copy here (the
    engine copies once into its send queue before the call returns, so the caller may
    reuse its buffer afterwards, as with Python's sockets).  Items wider than a byte
    (``array('i')``) count as their bytes, as ``socket.send`` counts them."""
    view = memoryview(data)
    if view.itemsize != 1 or view.ndim != 1:
        view = view.cast("B")
    return view.toreadonly()


def _wire(addr: bytes) -> bytes:
    """The address as it goes on the wire: v4-mapped IPv6 becomes IPv4."""
    if len(addr) == 16 and addr[:12] == b"\0" * 10 + b"\xff\xff":
        return addr[12:]
    return addr


def _int_value(value: int | bytes) -> int:
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, bytes) and len(value) >= 4:
        return int(_INT.unpack_from(value)[0])
    if isinstance(value, bytes) and len(value) == 1:
        return value[0]
    raise _oserror(errno.EINVAL)


def _ranged(value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise _oserror(errno.EINVAL, f"value must be {low}..{high}")
    return value
