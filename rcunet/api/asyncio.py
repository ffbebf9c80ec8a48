"""asyncio on rcunet sockets: TCP streams (``open_connection``, ``start_server``) and UDP
datagram endpoints (``create_datagram_endpoint``); the stream helpers are
the equivalents of ``asyncio.open_connection`` / ``asyncio.start_server`` for a Host.

They return asyncio's own ``StreamReader``/``StreamWriter``; underneath, a small
``Transport`` drives a non-blocking rcunet socket from the event loop with
``loop.add_reader``/``add_writer`` on its ``fileno()``, whose readiness mirrors the
socket's (``rcunet.host.tcp.poll``).  The Host must run threaded (``host.start()``):
its receive workers move the data while the loop waits.

    reader, writer = await open_connection(host, "10.0.0.2", 8080)
    server = await start_server(handle, host, "0.0.0.0", 8080)

TLS: ``ssl=`` on both (an ``SSLContext``, or True for the default client context) runs
asyncio's own ``SSLProtocol`` over the transport, as ``loop.start_tls`` does, and
``writer.start_tls(ctx)`` upgrades a plain connection later (the transport is
start_tls-compatible and feeds buffered protocols).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket as _pysocket
import ssl as _ssl
from collections.abc import Awaitable, Callable
from typing import Any

from rcunet.api.socket import Socket

ClientCallback = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None] | None]
READ_SIZE = 65536
STREAM_LIMIT = 2 ** 16


def _family_of(address: str) -> int:
    return _pysocket.AF_INET6 if ":" in address else _pysocket.AF_INET


class RcunetTransport(asyncio.Transport):
    """A stream transport over one non-blocking rcunet socket (loop thread only)."""

    _start_tls_compatible = True  # what loop.start_tls() asks of a transport

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: Socket,
                 protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._protocol = protocol
        self._fd = sock.fileno()
        self._buffer = bytearray()
        self._closing = False
        self._lost = False
        self._eof_pending = False
        self._reading = False
        self._writing = False
        self._protocol_paused = False
        self._high, self._low = 64 * 1024, 16 * 1024
        loop.call_soon(protocol.connection_made, self)
        loop.call_soon(self._start_reading)

    # -- reading ----------
    def _start_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            self._loop.add_reader(self._fd, self._read_ready)

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def _read_ready(self) -> None:
        try:
            data = self._sock.recv(READ_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            self._fatal(exc)
            return
        if data:
            protocol = self._protocol
            if isinstance(protocol, asyncio.BufferedProtocol):
                _feed_buffered(protocol, data)
            else:
                protocol.data_received(data)
            return
        self._stop_reading()
        if not self._protocol.eof_received():
            self.close()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        # (asyncio.Transport declares any BaseProtocol; a stream transport's is a Protocol)
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def pause_reading(self) -> None:
        self._stop_reading()

    def resume_reading(self) -> None:
        self._start_reading()

    def is_reading(self) -> bool:
        return self._reading

    # -- writing ----------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._eof_pending:
            raise RuntimeError("write after close or write_eof")
        if not data:
            return
        if not self._buffer:
            try:
                sent = self._sock.send(bytes(data))
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                self._fatal(exc)
                return
            data = memoryview(data)[sent:]
            if not data:
                return
        self._buffer += data
        if not self._writing:
            self._writing = True
            self._loop.add_writer(self._fd, self._write_ready)
        self._maybe_pause_protocol()

    def _write_ready(self) -> None:
        try:
            sent = self._sock.send(bytes(self._buffer))
        except BlockingIOError:
            return
        except OSError as exc:
            self._fatal(exc)
            return
        del self._buffer[:sent]
        self._maybe_resume_protocol()
        if self._buffer:
            return
        self._writing = False
        self._loop.remove_writer(self._fd)
        if self._eof_pending:
            self._sock.shutdown(_pysocket.SHUT_WR)
        if self._closing:
            self._connection_lost(None)

    def _maybe_pause_protocol(self) -> None:
        if not self._protocol_paused and len(self._buffer) > self._high:
            self._protocol_paused = True
            self._protocol.pause_writing()

    def _maybe_resume_protocol(self) -> None:
        if self._protocol_paused and len(self._buffer) <= self._low:
            self._protocol_paused = False
            self._protocol.resume_writing()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._eof_pending or self._closing:
            return
        self._eof_pending = True
        if not self._buffer:
            self._sock.shutdown(_pysocket.SHUT_WR)

    def get_write_buffer_size(self) -> int:
        return len(self._buffer)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._high = 64 * 1024 if high is None else high
        self._low = self._high // 4 if low is None else low

    # -- closing ----------
    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._stop_reading()
        if not self._buffer:
            self._loop.call_soon(self._connection_lost, None)

    def abort(self) -> None:
        self._buffer.clear()
        self._closing = True
        self._stop_reading()
        self._connection_lost(None)

    def _fatal(self, exc: BaseException) -> None:
        self._buffer.clear()
        self._closing = True
        self._stop_reading()
        self._connection_lost(exc)

    def _connection_lost(self, exc: BaseException | None) -> None:
        if self._lost:
            return
        self._lost = True
        if self._writing:
            self._writing = False
            self._loop.remove_writer(self._fd)
        try:
            # (typeshed says Exception; asyncio's own transports pass any BaseException)
            self._protocol.connection_lost(exc)  # type: ignore[arg-type]
        finally:
            self._sock.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return self._sock
        try:
            if name == "peername":
                return self._sock.getpeername()
            if name == "sockname":
                return self._sock.getsockname()
        except OSError:
            return default
        return default


def _feed_buffered(protocol: asyncio.BufferedProtocol, data: bytes) -> None:
    """Hand ``data`` to a buffered protocol (asyncio's SSLProtocol is one) through the
    buffers it offers."""
    view = memoryview(data)
    while view:
        buffer = memoryview(protocol.get_buffer(len(view))).cast("B")
        if not len(buffer):
            raise RuntimeError("get_buffer() returned an empty buffer")
        n = min(len(buffer), len(view))
        buffer[:n] = view[:n]
        protocol.buffer_updated(n)
        view = view[n:]


def _client_context(ssl: Any) -> _ssl.SSLContext | None:
    if ssl is None or ssl is False:
        return None
    if ssl is True:
        return _ssl.create_default_context()
    if not isinstance(ssl, _ssl.SSLContext):
        raise TypeError(f"ssl must be an SSLContext, True or None, not {ssl!r}")
    return ssl


def _streams(loop: asyncio.AbstractEventLoop, sock: Socket, limit: int,
             callback: ClientCallback | None = None
             ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, callback, loop=loop)
    transport = RcunetTransport(loop, sock, protocol)
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    return reader, writer


async def _wait_fd(loop: asyncio.AbstractEventLoop, fd: int, writable: bool) -> None:
    future: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not future.done():
            future.set_result(None)

    (loop.add_writer if writable else loop.add_reader)(fd, ready)
    try:
        await future
    finally:
        (loop.remove_writer if writable else loop.remove_reader)(fd)


async def open_connection(host: Any, address: str, port: int, *, family: int | None = None,
                          limit: int = STREAM_LIMIT, ssl: Any = None,
                          server_hostname: str | None = None,
                          ssl_handshake_timeout: float | None = None
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to (address, port) from ``host``; asyncio's reader/writer pair (over TLS
    with ``ssl=``: the handshake is done when this returns)."""
    context = _client_context(ssl)
    loop = asyncio.get_running_loop()
    sock: Socket = host.socket(family or _family_of(address), _pysocket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        err = sock.connect_ex((address, port))
        if err == errno.EINPROGRESS:
            await _wait_fd(loop, sock.fileno(), writable=True)
            err = int(sock.getsockopt(_pysocket.SOL_SOCKET, _pysocket.SO_ERROR))
        if err:
            raise OSError(err, f"connect to {address}:{port}: {os.strerror(err)}")
    except BaseException:
        sock.close()
        raise
    reader, writer = _streams(loop, sock, limit)
    if context is not None:
        try:
            await writer.start_tls(context, server_hostname=server_hostname or address,
                                   ssl_handshake_timeout=ssl_handshake_timeout)
        except BaseException:
            writer.transport.abort()
            raise
    return reader, writer


class Server:
    """What ``start_server`` returns: ``close()``, ``await wait_closed()``, ``sockets``,
    and ``async with``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, listener: Socket,
                 callback: ClientCallback, limit: int,
                 ssl: _ssl.SSLContext | None = None) -> None:
        self._loop = loop
        self._ssl = ssl
        self._listener = listener
        self._callback = callback
        self._limit = limit
        self._fd = listener.fileno()
        self._closed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        loop.add_reader(self._fd, self._accept_ready)

    @property
    def sockets(self) -> tuple[Socket, ...]:
        return () if self._closed.is_set() else (self._listener,)

    def _accept_ready(self) -> None:
        while True:
            try:
                child, _ = self._listener.accept()
            except BlockingIOError:
                return
            except OSError:
                self.close()
                return
            child.setblocking(False)
            reader, writer = _streams(self._loop, child, self._limit)
            if self._ssl is not None:
                self._track(self._serve_tls(reader, writer))
                continue
            result = self._callback(reader, writer)
            if asyncio.iscoroutine(result):
                self._track(result)

    def _track(self, coroutine: Any) -> None:
        task = self._loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve_tls(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        """The server side of the handshake (StreamWriter.start_tls would take the
        client side: our protocol has no connected-callback), then the callback."""
        protocol: Any = writer._protocol  # type: ignore[attr-defined]  # asyncio private
        assert self._ssl is not None
        try:
            tls_transport = await self._loop.start_tls(writer.transport, protocol, self._ssl,
                                                       server_side=True)
        except OSError:  # SSLError, ConnectionError and TimeoutError are OSErrors
            writer.transport.abort()  # a failed handshake ends this connection only
            return
        writer._transport = tls_transport  # type: ignore[attr-defined]  # asyncio private
        protocol._replace_writer(writer)
        result = self._callback(reader, writer)
        if asyncio.iscoroutine(result):
            await result

    def is_serving(self) -> bool:
        return not self._closed.is_set()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._loop.remove_reader(self._fd)
        self._listener.close()
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
        await self.wait_closed()


async def start_server(callback: ClientCallback, host: Any, address: str, port: int, *,
                       family: int | None = None, backlog: int = 100,
                       reuse_address: bool = True, limit: int = STREAM_LIMIT,
                       ssl: _ssl.SSLContext | None = None) -> Server:
    """Listen on (address, port) of ``host``; ``callback(reader, writer)`` (a function
    or a coroutine function) runs for every accepted connection (after the TLS
    handshake with ``ssl=``)."""
    if ssl is not None and not isinstance(ssl, _ssl.SSLContext):
        raise TypeError(f"ssl must be an SSLContext or None, not {ssl!r}")
    loop = asyncio.get_running_loop()
    listener: Socket = host.socket(family or _family_of(address), _pysocket.SOCK_STREAM)
    try:
        if reuse_address:
            listener.setsockopt(_pysocket.SOL_SOCKET, _pysocket.SO_REUSEADDR, 1)
        listener.bind((address, port))
        listener.listen(backlog)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return Server(loop, listener, callback, limit, ssl)


class RcunetDatagramTransport(asyncio.DatagramTransport):
    """A datagram transport over one non-blocking rcunet UDP socket (loop thread only):
    the loop watches the socket's eventfd (readable while datagrams are queued) and
    drains the queue into ``protocol.datagram_received``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: Socket,
                 protocol: asyncio.DatagramProtocol, remote: tuple[Any, ...] | None) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._protocol = protocol
        self._remote = remote
        self._closing = False
        self._fd = sock.fileno()
        loop.add_reader(self._fd, self._read_ready)

    def _read_ready(self) -> None:
        while not self._closing:
            try:
                data, address = self._sock.recvfrom(READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:
                self._protocol.error_received(exc)
                return
            assert address is not None  # a datagram socket's recvfrom names the sender
            self._protocol.datagram_received(data, address)

    def sendto(self, data: Any, addr: Any = None) -> None:
        if self._closing:
            raise OSError(errno.EBADF, "transport is closing")
        try:
            if addr is None:
                if self._remote is None:
                    raise ValueError("no remote address: pass addr or connect the endpoint")
                self._sock.send(bytes(data))
            else:
                self._sock.sendto(bytes(data), addr)
        except OSError as exc:
            self._protocol.error_received(exc)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return self._sock
        if name == "sockname":
            return self._sock.getsockname()
        if name == "peername":
            return self._remote
        return default

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        self._sock.close()
        self._loop.call_soon(self._protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def get_write_buffer_size(self) -> int:
        return 0  # datagrams go straight to the Host; nothing is buffered here


async def create_datagram_endpoint(
    host: Any,
    protocol_factory: Callable[[], asyncio.DatagramProtocol],
    local_addr: tuple[str, int] | None = None,
    remote_addr: tuple[str, int] | None = None,
    *,
    family: int | None = None,
    reuse_port: bool = False,
    allow_broadcast: bool = False,
) -> tuple[RcunetDatagramTransport, asyncio.DatagramProtocol]:
    """``loop.create_datagram_endpoint`` for a Host: a UDP socket bound to
    ``local_addr`` and/or connected to ``remote_addr``, driven by the running loop."""
    loop = asyncio.get_running_loop()
    if family is None:
        address = (remote_addr or local_addr or ("0.0.0.0", 0))[0]
        family = _family_of(address)
    sock = host.socket(family, _pysocket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        if reuse_port:
            sock.setsockopt(_pysocket.SOL_SOCKET, _pysocket.SO_REUSEPORT, 1)
        if allow_broadcast:
            sock.setsockopt(_pysocket.SOL_SOCKET, _pysocket.SO_BROADCAST, 1)
        if local_addr is not None:
            sock.bind(local_addr)
        if remote_addr is not None:
            sock.connect(remote_addr)
    except BaseException:
        sock.close()
        raise
    protocol = protocol_factory()
    transport = RcunetDatagramTransport(loop, sock, protocol, remote_addr)
    protocol.connection_made(transport)
    return transport, protocol
