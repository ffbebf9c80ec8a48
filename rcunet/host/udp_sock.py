"""A UDP socket on a Host: its table identity (``UdpEntry``), the receive queue, and the
calls ``rcunet.api.socket.Socket`` delegates to (bind, connect, send/receive, options,
shutdown, close) — the UDP counterpart of ``rcunet.host.tcp.sock.TcpSock``, with the same
method names and arguments so the api layer is one facade over both.

Input, output and the tables shared by every socket live in ``rcunet.host.udp.UdpLayer``.
"""

from __future__ import annotations

import errno
import os
import socket as _pysocket
import struct
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from rcunet.host import udp_cmsg
from rcunet.host.sockerr import int_option, oserror, ranged, v4mapped, wire
from rcunet.host.udp_cmsg import RecvInfo
from rcunet.sync.lock import LockClass
from rcunet.sync.shared import lockfree_read_slots
from rcunet.tables.entry import AF_INET, AF_INET6
from rcunet.tables.udp_entry import UdpEntry
from rcunet.wire.addr import ANY4, ANY6, LIMITED_BROADCAST, is_any, is_multicast

if TYPE_CHECKING:
    from rcunet.host.host import Host

RECEIVE_QUEUE_LOCK = LockClass("sk_receive_queue.lock")
UDP_SOCK_LOCK = LockClass("udp_sock.lock")
#: Per-datagram memory charged against SO_RCVBUF besides its payload (skb truesize).
DATAGRAM_OVERHEAD = 256
#: (payload, (source, port), what its packet said: None for one made here)
Datagram = tuple[bytes, tuple[bytes, int], RecvInfo | None]
SOL_SOCKET = _pysocket.SOL_SOCKET
IPPROTO_IP = _pysocket.IPPROTO_IP
IPPROTO_IPV6 = _pysocket.IPPROTO_IPV6
MSG_PEEK = int(_pysocket.MSG_PEEK)
MSG_DONTWAIT = int(_pysocket.MSG_DONTWAIT)
IP_MULTICAST_ALL = 49  # linux/in.h; not exported by Python's socket module
SOCK_MIN_RCVBUF = 2048 + 256  # Linux: 2 * (2048 + sizeof(struct sk_buff)) / 2, roughly
_INT = struct.Struct("i")


class UdpSock(UdpEntry):
    """A UDP socket: its table identity (UdpEntry) plus the receive queue.

    Concurrency:
      lock        (udp_sock.lock) serialises the owner's bind/connect/close/options.
      rq_lock     (sk_receive_queue.lock) guards queue, rmem, the eventfd level and
                  wakes readers; receive workers take only this lock.
      err         one attribute store by the ICMP error path, read-and-cleared under rq_lock.
    Lock order: udp_sock.lock > udp_hslot_lock > udp_hslot2_lock; rq_lock is a leaf.
    """

    __slots__ = lockfree_read_slots(
        "host", "lock", "rq_lock", "readable", "queue", "rmem", "rcvbuf", "sndbuf", "err",
        "closed", "_eventfd", "broadcast", "multicast_ttl", "multicast_loop", "multicast_if",
        "ttl", "shutdown_rd", "bound", "waiters", "cmsg_flags", "tos", "tclass",
        base=UdpEntry)

    def __init__(self, host: Host, family: int) -> None:
        super().__init__(family)
        self.host = host
        self.lock = UDP_SOCK_LOCK.new()
        self.rq_lock = RECEIVE_QUEUE_LOCK.new()
        # (ignore: typeshed wants a threading lock; ours has the same acquire/release)
        self.readable = threading.Condition(self.rq_lock)  # type: ignore[arg-type]
        # guarded-by: rq_lock (its contents; the deque object itself is never replaced)
        self.queue: deque[Datagram] = deque()
        self.waiters = 0  # guarded-by: rq_lock (threads blocked in wait_readable)
        self.rmem = 0  # guarded-by: rq_lock
        self.rcvbuf = host.tuning.udp_rmem_default
        self.sndbuf = host.tuning.udp_rmem_default
        self.err = 0
        self.closed = False
        self._eventfd = -1  # guarded-by: rq_lock
        self.broadcast = False
        self.multicast_ttl = 1
        self.multicast_loop = True
        self.multicast_if = 0
        self.ttl: int | None = None
        self.tos = 0  # IP_TOS
        self.tclass = 0  # IPV6_TCLASS
        self.cmsg_flags = 0  # udp_cmsg.WANT_*: the control messages recvmsg delivers
        self.shutdown_rd = False
        self.bound = False

    # -- receive queue ----------
    def enqueue(self, datagram: Datagram) -> bool:
        """Queue a datagram (receive worker); False when SO_RCVBUF is full."""
        size = len(datagram[0]) + DATAGRAM_OVERHEAD
        queue = self.queue
        with self.rq_lock:
            if self.closed or self.shutdown_rd:
                return False
            rmem = self.rmem
            if rmem + size > self.rcvbuf and queue:
                return False  # __udp_enqueue_schedule_skb: at least one datagram fits
            queue.append(datagram)
            self.rmem = rmem + size
            if self._eventfd >= 0 and len(queue) == 1:  # no fileno(): nothing to signal
                self._set_readable_locked(True)
            if self.waiters:  # Condition.notify costs a lock probe even with no waiter
                self.readable.notify()
        return True

    def dequeue(self, peek: bool = False) -> Datagram | None:
        with self.rq_lock:
            if not self.queue:
                return None
            if peek:
                return self.queue[0]
            datagram = self.queue.popleft()
            self.rmem -= len(datagram[0]) + DATAGRAM_OVERHEAD
            if not self.queue and not self.err:
                self._set_readable_locked(False)
            return datagram

    def take_error(self) -> int:
        with self.rq_lock:
            err, self.err = self.err, 0
            if err and not self.queue:
                self._set_readable_locked(False)
            return err

    def set_error(self, err: int) -> None:
        with self.rq_lock:
            self.err = err
            self._set_readable_locked(True)
            self.readable.notify_all()

    def wait_readable(self, timeout: float | None) -> bool:
        with self.rq_lock:
            if self.queue or self.err or self.closed or self.shutdown_rd:
                return True
            self.waiters += 1
            try:
                return self.readable.wait(timeout)
            finally:
                self.waiters -= 1

    def wake_all(self) -> None:
        with self.rq_lock:
            self._set_readable_locked(True)
            self.readable.notify_all()

    def has_data(self) -> bool:
        return bool(self.queue)  # atomic: len of a deque (one load)

    # -- fileno() for selectors ----------
    def fileno(self) -> int:
        """An eventfd that is readable exactly while data (or an error) is queued."""
        with self.rq_lock:
            if self._eventfd < 0:
                self._eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
                if self.queue or self.err:
                    os.eventfd_write(self._eventfd, 1)
            return self._eventfd

    def _set_readable_locked(self, readable: bool) -> None:
        fd = self._eventfd
        if fd < 0:
            return
        if readable:
            os.eventfd_write(fd, 1)
        else:
            try:
                os.eventfd_read(fd)
            except BlockingIOError:
                pass

    def release_resources(self) -> None:
        with self.rq_lock:
            self.queue.clear()
            self.rmem = 0
            fd, self._eventfd = self._eventfd, -1
            self.readable.notify_all()
        if fd >= 0:
            os.close(fd)

    # -- the user side (what rcunet.api.socket.Socket delegates to) ----------
    def bind(self, addr: bytes, port: int) -> None:
        w = wire(addr)
        host = self.host
        local = is_any(w) or host.ip.is_local(w) or is_multicast(w) or w == LIMITED_BROADCAST
        if not local:
            raise oserror(errno.EADDRNOTAVAIL, "cannot assign requested address")
        with self.lock:
            if self.hashed or self.bound:
                raise oserror(errno.EINVAL, "socket is already bound")
            self.set_key(addr, 0, self.faddr, self.fport)
            try:
                host.udp.table.bind(self, port)
            except OSError:
                self.set_key(ANY4 if self.family == AF_INET else ANY6, 0, self.faddr,
                             self.fport)
                raise
            self.bound = True

    def connect(self, addr: bytes, port: int, timeout: float | None = None) -> None:
        del timeout  # a UDP connect never waits
        if port == 0:
            raise oserror(errno.EINVAL, "connect to port 0")  # ip4_datagram_connect
        host = self.host
        wire_dst = wire(addr)
        entry = host.dst_cache.lookup(wire_dst)
        if entry is None:
            raise oserror(errno.ENETUNREACH)
        try:
            src = entry.src if not host.ip.is_local(wire_dst) else wire_dst
        finally:
            entry.release()
        if self.family == AF_INET6:
            src = v4mapped(src)
        with self.lock:
            if not self.hashed:
                host.udp.table.autobind(self)
            laddr = src if is_any(self.laddr) else None
            host.udp.table.connect(self, addr, port, laddr)

    def listen(self, backlog: int) -> None:
        raise oserror(errno.EOPNOTSUPP)

    def accept(self, timeout: float | None) -> Any:
        raise oserror(errno.EOPNOTSUPP)

    def send(self, data: bytes | memoryview, timeout: float | None = None,
             flags: int = 0) -> int:
        """send() on a connected socket (EDESTADDRREQ otherwise)."""
        self._raise_error()
        # atomic: one attribute load of the identity tuple (set_key stores it last), so
        # a concurrent connect() gives the old or the new peer, never a mix of both.
        _laddr, _lport, faddr, fport = self.key
        if not fport:
            raise oserror(errno.EDESTADDRREQ)
        return self.host.udp.sendto(self, bytes(data), wire(faddr), fport)

    def sendall(self, data: bytes | memoryview, timeout: float | None = None) -> None:
        self.send(data, timeout)

    def sendto(self, data: bytes | memoryview, addr: bytes, port: int) -> int:
        self._raise_error()
        if port == 0:
            raise oserror(errno.EINVAL, "destination port 0")
        return self.host.udp.sendto(self, bytes(data), wire(addr), port)

    def sendmsg(self, data: bytes, addr: bytes, port: int,
                ancdata: list[tuple[int, int, bytes]]) -> int:
        """sendto with sendmsg's control messages (rcunet.host.udp_cmsg)."""
        dst = wire(addr)
        control = udp_cmsg.send_control(self.host, self.family == AF_INET6, len(dst) == 4,
                                        self.bound_dev, ancdata) if ancdata else None
        self._raise_error()
        if port == 0:
            raise oserror(errno.EINVAL, "destination port 0")
        return self.host.udp.sendto(self, bytes(data), dst, port, control)

    def _raise_error(self) -> None:
        err = self.take_error()
        if err:
            raise oserror(err)

    def recv(self, bufsize: int, timeout: float | None, flags: int = 0) -> bytes:
        return self.recvfrom(bufsize, timeout, flags)[0]

    def recvfrom(self, bufsize: int, timeout: float | None, flags: int = 0
                 ) -> tuple[bytes, bytes, int, int]:
        """(payload cut to ``bufsize``, source address in the socket's family, source
        port, the datagram's full length: more than ``bufsize`` means MSG_TRUNC)."""
        if bufsize < 0:
            raise ValueError("negative buffersize in recvfrom")
        payload, (src, sport), _info = self._wait_datagram(timeout, flags)
        if self.family == AF_INET6:
            src = v4mapped(src)
        return payload[:bufsize], src, sport, len(payload)

    def recvmsg(self, bufsize: int, timeout: float | None, flags: int = 0
                ) -> tuple[bytes, bytes, int, int, list[tuple[int, int, bytes]]]:
        """recvfrom's answer and the datagram's control messages (the ones asked for
        with IP_PKTINFO, IP_RECVTTL, ..., SO_TIMESTAMP: rcunet.host.udp_cmsg)."""
        if bufsize < 0:
            raise ValueError("negative buffersize in recvmsg")
        payload, (src, sport), info = self._wait_datagram(timeout, flags)
        wanted = self.cmsg_flags  # atomic: one load (a racing setsockopt: old or new)
        cmsgs = udp_cmsg.recv_cmsgs(self.host, wanted, self.family == AF_INET6, info,
                                    src) if wanted and info is not None else []
        if self.family == AF_INET6:
            src = v4mapped(src)
        return payload[:bufsize], src, sport, len(payload), cmsgs

    def _wait_datagram(self, timeout: float | None, flags: int) -> Datagram:
        if flags & MSG_DONTWAIT:
            timeout = 0.0
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._raise_error()
            datagram = self.dequeue(peek=bool(flags & MSG_PEEK))
            if datagram is not None:
                return datagram
            if self.closed:
                raise oserror(errno.EBADF)
            if self.shutdown_rd:
                return (b"", (self.faddr, self.fport), None)
            if deadline is None:
                self.wait_readable(None)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if timeout == 0.0:
                    raise oserror(errno.EAGAIN)
                raise TimeoutError("timed out")
            self.wait_readable(remaining)

    def shutdown(self, how: int) -> None:
        if how not in (_pysocket.SHUT_RD, _pysocket.SHUT_WR, _pysocket.SHUT_RDWR):
            raise oserror(errno.EINVAL)
        if is_any(self.faddr):
            raise oserror(errno.ENOTCONN)
        if how in (_pysocket.SHUT_RD, _pysocket.SHUT_RDWR):
            self.shutdown_rd = True
            self.wake_all()

    def close(self) -> None:
        self.host.udp.close(self)

    # -- options ----------
    def setsockopt(self, level: int, optname: int, value: int | bytes) -> None:
        flag = udp_cmsg.RECV_OPTIONS.get((level, optname))
        if flag is not None and (level == IPPROTO_IP or self.family == AF_INET6):
            on = bool(int_option(value))
            with self.lock:  # read-modify-write of the flags
                self.cmsg_flags = self.cmsg_flags | flag if on else self.cmsg_flags & ~flag
            return
        if level == SOL_SOCKET and optname in (udp_cmsg.SO_TIMESTAMP, udp_cmsg.SO_TIMESTAMPNS):
            on = bool(int_option(value))
            with self.lock:
                self.cmsg_flags = udp_cmsg.timestamp_flags(self.cmsg_flags, optname, on)
            return
        if level == SOL_SOCKET:
            self._set_socket_level(optname, value)
        elif level == IPPROTO_IP:
            self._set_ip_level(optname, value)
        elif level == IPPROTO_IPV6 and self.family == AF_INET6:
            self._set_ipv6_level(optname, value)
        else:
            raise oserror(errno.ENOPROTOOPT)

    def _set_socket_level(self, optname: int, value: int | bytes) -> None:
        number = int_option(value)
        tuning = self.host.tuning
        if optname == _pysocket.SO_REUSEADDR:
            self.reuseaddr = bool(number)
        elif optname == _pysocket.SO_REUSEPORT:
            self.reuseport = bool(number)
        elif optname == _pysocket.SO_BROADCAST:
            self.broadcast = bool(number)
        elif optname == _pysocket.SO_RCVBUF:
            # Linux doubles it (the skb overhead), after the net.core.rmem_max cap
            self.rcvbuf = max(SOCK_MIN_RCVBUF, min(number, tuning.rmem_max) * 2)
        elif optname == _pysocket.SO_SNDBUF:
            self.sndbuf = max(4608, min(number, tuning.wmem_max) * 2)
        elif optname == _pysocket.SO_BINDTODEVICE:
            name = value.rstrip(b"\0").decode() if isinstance(value, bytes) else str(value)
            self.bound_dev = self.host.interface(name).ifindex if name else 0
        else:
            raise oserror(errno.ENOPROTOOPT)

    def _set_ip_level(self, optname: int, value: int | bytes) -> None:
        udp = self.host.udp
        if optname in (_pysocket.IP_ADD_MEMBERSHIP, _pysocket.IP_DROP_MEMBERSHIP):
            # ip_mreq (8 bytes), or ip_mreqn when optlen >= 12 (do_ip_setsockopt): the
            # 16-byte struct.pack("4sl", group, INADDR_ANY) of most examples is an
            # ip_mreqn whose address and ifindex are zero
            if not isinstance(value, bytes) or len(value) < 8:
                raise oserror(errno.EINVAL, "expects struct ip_mreq or ip_mreqn")
            group = value[:4]
            ifindex = self._mreq_ifindex(value[4:8], value[8:12] if len(value) >= 12 else b"")
            ifindex = ifindex or udp.default_multicast_ifindex(group)
            if optname == _pysocket.IP_ADD_MEMBERSHIP:
                udp.join_group(self, group, ifindex)
            else:
                udp.leave_group(self, group, ifindex)
        elif optname == _pysocket.IP_MULTICAST_TTL:
            self.multicast_ttl = ranged(int_option(value), 0, 255)
        elif optname == _pysocket.IP_MULTICAST_LOOP:
            self.multicast_loop = bool(int_option(value))
        elif optname == _pysocket.IP_TTL:
            self.ttl = ranged(int_option(value), 1, 255)
        elif optname == udp_cmsg.IP_TOS:
            self.tos = int_option(value) & 0xFF
        elif optname == IP_MULTICAST_ALL:
            self.mc_all = bool(int_option(value))
        elif optname == _pysocket.IP_MULTICAST_IF:
            if not isinstance(value, bytes) or len(value) < 4:
                raise oserror(errno.EINVAL)
            self.multicast_if = self._mreq_ifindex(
                value[4:8] if len(value) >= 12 else value[:4],
                value[8:12] if len(value) >= 12 else b"")
        else:
            raise oserror(errno.ENOPROTOOPT)

    def _mreq_ifindex(self, address: bytes, ifindex: bytes) -> int:
        if ifindex and int.from_bytes(ifindex, "little"):
            return int.from_bytes(ifindex, "little")
        if address == ANY4:
            return 0
        for iface in self.host.interfaces.values():
            if iface.has_address(address):
                return iface.ifindex
        raise oserror(errno.ENODEV, "no interface with that address")

    def _set_ipv6_level(self, optname: int, value: int | bytes) -> None:
        udp = self.host.udp
        if optname in (_pysocket.IPV6_JOIN_GROUP, _pysocket.IPV6_LEAVE_GROUP):
            if not isinstance(value, bytes) or len(value) != 20:
                raise oserror(errno.EINVAL, "expects struct ipv6_mreq")
            group = value[:16]
            ifindex = int.from_bytes(value[16:20], "little") or \
                udp.default_multicast_ifindex(group)
            if optname == _pysocket.IPV6_JOIN_GROUP:
                udp.join_group(self, group, ifindex)
            else:
                udp.leave_group(self, group, ifindex)
        elif optname == _pysocket.IPV6_V6ONLY:
            if self.hashed:
                raise oserror(errno.EINVAL)
            self.v6only = bool(int_option(value))
        elif optname == _pysocket.IPV6_MULTICAST_HOPS:
            hops = int_option(value)
            self.multicast_ttl = 1 if hops == -1 else ranged(hops, 0, 255)
        elif optname == _pysocket.IPV6_MULTICAST_LOOP:
            self.multicast_loop = bool(int_option(value))
        elif optname == _pysocket.IPV6_UNICAST_HOPS:
            hops = int_option(value)
            self.ttl = None if hops == -1 else ranged(hops, 1, 255)
        elif optname == _pysocket.IPV6_MULTICAST_IF:
            self.multicast_if = int_option(value)
        elif optname == udp_cmsg.IPV6_TCLASS:
            tclass = int_option(value)
            self.tclass = 0 if tclass == -1 else ranged(tclass, 0, 255)
        else:
            raise oserror(errno.ENOPROTOOPT)

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> int | bytes:
        getter = self._option_getters(level).get(optname)
        if getter is None:
            raise oserror(errno.ENOPROTOOPT)
        result: int = getter()
        if buflen is not None:
            return _INT.pack(result)[:buflen]
        return result

    def _option_getters(self, level: int) -> dict[int, Any]:
        if level == SOL_SOCKET:
            return {
                _pysocket.SO_REUSEADDR: lambda: int(self.reuseaddr),
                _pysocket.SO_REUSEPORT: lambda: int(self.reuseport),
                _pysocket.SO_BROADCAST: lambda: int(self.broadcast),
                _pysocket.SO_RCVBUF: lambda: self.rcvbuf,
                _pysocket.SO_SNDBUF: lambda: self.sndbuf,
                _pysocket.SO_ERROR: self.take_error,
                _pysocket.SO_TYPE: lambda: int(_pysocket.SOCK_DGRAM),
                udp_cmsg.SO_TIMESTAMP: lambda: int(bool(
                    self.cmsg_flags & udp_cmsg.WANT_TIMESTAMP)),
                udp_cmsg.SO_TIMESTAMPNS: lambda: int(bool(
                    self.cmsg_flags & udp_cmsg.WANT_TIMESTAMPNS)),
            }
        if level == IPPROTO_IP:
            return {
                _pysocket.IP_MULTICAST_TTL: lambda: self.multicast_ttl,
                _pysocket.IP_MULTICAST_LOOP: lambda: int(self.multicast_loop),
                _pysocket.IP_TTL: lambda: self.ttl or self.host.tuning.ip_default_ttl,
                IP_MULTICAST_ALL: lambda: int(self.mc_all),
                udp_cmsg.IP_TOS: lambda: self.tos,
                **self._flag_getters(IPPROTO_IP),
            }
        if level == IPPROTO_IPV6:
            return {
                _pysocket.IPV6_V6ONLY: lambda: int(self.v6only),
                _pysocket.IPV6_MULTICAST_HOPS: lambda: self.multicast_ttl,
                _pysocket.IPV6_MULTICAST_LOOP: lambda: int(self.multicast_loop),
                udp_cmsg.IPV6_TCLASS: lambda: self.tclass,
                **self._flag_getters(IPPROTO_IPV6),
            }
        return {}

    def _flag_getters(self, level: int) -> dict[int, Any]:
        return {optname: (lambda flag=flag: int(bool(self.cmsg_flags & flag)))
                for (lvl, optname), flag in udp_cmsg.RECV_OPTIONS.items() if lvl == level}

