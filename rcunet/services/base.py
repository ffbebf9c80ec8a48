"""The machinery every built-in service shares: sockets on both address families, one
thread per UDP socket or per TCP listener, one thread per accepted connection, and a
``stop()`` that closes all of them and waits for the threads."""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rcunet.host.host import Host

#: Connections one TCP service serves at once; more are accepted and closed at once
#: (a bounded server under a flood, like a full accept backlog but visible).
MAX_CONNECTIONS = 256
#: A connection idle this long is closed (seconds).
IDLE_TIMEOUT = 60.0
LISTEN_BACKLOG = 128
_ANY: dict[int, str] = {socket.AF_INET: "0.0.0.0", socket.AF_INET6: "::"}


class Service:
    """One service on ``port`` of ``host``, IPv4 and IPv6 (an AF_INET6 socket with
    IPV6_V6ONLY beside an AF_INET one, so both families work whatever the dual-stack
    rules).  Subclasses set ``kind`` and implement ``serve_datagrams`` (UDP) or
    ``serve_connection`` (TCP).

    Concurrency:
      _conns     set of open connections, guarded by ``_lock`` (accept threads add,
                 connection threads remove, ``stop`` closes them all).
      _stopping  threading.Event set once by ``stop``; threads check it after every
                 blocking call returns.
    """

    name = "service"
    kind = socket.SOCK_STREAM

    def __init__(self, host: Host, port: int) -> None:
        if not 0 < port < 65536:
            raise ValueError(f"{self.name}: port must be 1..65535, got {port}")
        self.host = host
        self.port = port
        self._sockets: list[Any] = []
        self._threads: list[threading.Thread] = []
        self._conns: set[Any] = set()  # guarded-by: _lock
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.served = 0  # connections (TCP) or datagrams (UDP); owner: see _count
        self._served_lock = threading.Lock()

    def __repr__(self) -> str:
        proto = "tcp" if self.kind == socket.SOCK_STREAM else "udp"
        return f"<{type(self).__name__} {proto}/{self.port}>"

    @property
    def proto(self) -> str:
        return "tcp" if self.kind == socket.SOCK_STREAM else "udp"

    # -- lifecycle ----------
    def start(self) -> Service:
        """Bind and listen on both families, then start the threads.  Raises OSError
        (EADDRINUSE, ...) with nothing left open."""
        try:
            for family in (socket.AF_INET, socket.AF_INET6):
                self._sockets.append(self._open(family))
        except OSError:
            self._close_sockets()
            raise
        for sock in self._sockets:
            target: Callable[..., None] = (
                self._accept_loop if self.kind == socket.SOCK_STREAM else self._udp_loop)
            self._spawn(target, sock)
        return self

    def _open(self, family: int) -> Any:
        sock: Any = self.host.socket(family, self.kind)
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if self.kind == socket.SOCK_STREAM:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((_ANY[family], self.port))
            if self.kind == socket.SOCK_STREAM:
                sock.listen(LISTEN_BACKLOG)
        except OSError:
            sock.close()
            raise
        return sock

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True,
                                  name=f"{self.name}-{self.port}")
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Close the listening sockets and every connection; wait for the threads."""
        self._stopping.set()
        self._close_sockets()
        with self._lock:
            conns = list(self._conns)
            threads = list(self._threads)
        for conn in conns:
            # shutdown() wakes a thread blocked in recv(); close() alone would not (as
            # on Linux), and the peer gets a FIN rather than silence.
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            _close_quietly(conn)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            _close_quietly(sock)

    def _count(self, amount: int = 1) -> None:
        with self._served_lock:
            self.served += amount

    # -- UDP ----------
    def _udp_loop(self, sock: Any) -> None:
        try:
            self.serve_datagrams(sock)
        except OSError:
            if not self._stopping.is_set():
                raise

    def serve_datagrams(self, sock: Any) -> None:
        raise NotImplementedError

    # -- TCP ----------
    def _accept_loop(self, listener: Any) -> None:
        while not self._stopping.is_set():
            try:
                conn, peer = listener.accept()
            except OSError as exc:
                if self._stopping.is_set() or exc.errno in (errno.EBADF, errno.EINVAL):
                    return
                continue  # ECONNABORTED and the like: the next one
            with self._lock:
                full = len(self._conns) >= MAX_CONNECTIONS
                if not full:
                    self._conns.add(conn)
            if full or self._stopping.is_set():
                _close_quietly(conn)
                continue
            self._count()
            self._spawn(self._connection, conn, peer)

    def _connection(self, conn: Any, peer: Any) -> None:
        try:
            conn.settimeout(IDLE_TIMEOUT)
            self.serve_connection(conn, peer)
        except (OSError, TimeoutError):
            pass  # the peer reset, timed out, or we are stopping: the connection ends
        finally:
            with self._lock:
                self._conns.discard(conn)
            _close_quietly(conn)

    def serve_connection(self, conn: Any, peer: Any) -> None:
        raise NotImplementedError


def _close_quietly(sock: Any) -> None:
    try:
        sock.close()
    except OSError:
        pass
