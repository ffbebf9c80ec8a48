"""TLS over an rcunet socket: ``TlsSocket`` has ``ssl.SSLSocket``'s interface (handshake,
``getpeercert``, ``version``, ``cipher``, ``unwrap``, ``makefile``, timeouts, non-blocking
mode raising ``ssl.SSLWantReadError``/``SSLWantWriteError``) and runs OpenSSL through
``SSLContext.wrap_bio``: an ``SSLObject`` between two ``MemoryBIO``s, whose records this
module moves over the rcunet socket.  ``wrap_socket(context, sock, ...)`` is what
``ctx.wrap_socket(rcunet_socket)`` returns in drop-in mode (``rcunet.api.patch``).

Records sent are flushed before a call returns (blocking mode); in non-blocking mode
what the socket did not take waits in ``_pending_out`` and goes first on the next call.

Concurrency: as with ``ssl.SSLSocket``, one thread may read while another writes.  One
thread at a time sends records (``_out_lock``).  A reader never sends while a writer is
at work (``_writers``): the writer's peer may be blocked sending to us, waiting for that
very reader to read.  It leaves its records to the writer, which looks at the outgoing
BIO again once it is done, so no record is stranded.  One thread at a time reads
(``_in_lock``).
"""

from __future__ import annotations

import socket as _pysocket
import ssl
import threading
from typing import Any

from rcunet.api.socket import Socket

#: Bytes read from the socket per refill of the incoming BIO (a few TLS records).
TLS_READ_SIZE = 65536


class TlsSocket:
    """A TLS connection over an rcunet ``Socket`` (the caller's socket is taken over)."""

    def __init__(self, sock: Socket, context: ssl.SSLContext, *, server_side: bool = False,
                 server_hostname: str | None = None, do_handshake_on_connect: bool = True,
                 suppress_ragged_eofs: bool = True, session: ssl.SSLSession | None = None
                 ) -> None:
        if sock.type != _pysocket.SOCK_STREAM:
            raise NotImplementedError("only stream sockets are supported")
        if server_side and server_hostname:
            raise ValueError("server_hostname can only be specified in client mode")
        if session is not None and server_side:
            raise ValueError("session is only valid for client connections")
        if context.check_hostname and not server_side and not server_hostname:
            raise ValueError("check_hostname requires server_hostname")
        self._sock = sock
        self.context = context
        self.server_side = server_side
        self.server_hostname = server_hostname
        self.do_handshake_on_connect = do_handshake_on_connect
        self.suppress_ragged_eofs = suppress_ragged_eofs
        self._session = session
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._pending_out = bytearray()  # guarded-by: _out_lock
        self._out_lock = threading.Lock()
        self._writers = 0  # guarded-by: _state_lock (threads in write/handshake/unwrap)
        self._state_lock = threading.Lock()
        self._in_lock = threading.Lock()
        self._sslobj: ssl.SSLObject | None = None
        self._closed = False
        self._io_refs = 0
        try:
            sock.getpeername()
        except OSError:
            return  # not connected yet: connect() starts TLS
        self._start()
        if do_handshake_on_connect:
            if sock.gettimeout() == 0.0:
                raise ValueError("do_handshake_on_connect should not be specified for "
                                 "non-blocking sockets")
            try:
                self.do_handshake()
            except (OSError, ValueError):
                self.close()
                raise

    def _start(self) -> None:
        self._sslobj = self.context.wrap_bio(
            self._incoming, self._outgoing, server_side=self.server_side,
            server_hostname=self.server_hostname, session=self._session)

    def __repr__(self) -> str:
        return f"<rcunet.TlsSocket over {self._sock!r}>"

    # -- moving records ----------
    def _flush(self, writer: bool) -> None:
        """Send the records OpenSSL produced; SSLWantWriteError when a non-blocking
        socket's buffer is full (the rest goes on the next call)."""
        while self._outgoing.pending or self._pending_out:
            if not writer:
                if self._writers:  # atomic: one int load; the writer re-checks when done
                    return
                if not self._out_lock.acquire(blocking=False):
                    return  # a writer holds it (and re-checks the BIO when done)
            else:
                self._out_lock.acquire()
            try:
                self._send_pending()
            finally:
                self._out_lock.release()

    def _send_pending(self) -> None:
        while True:
            data = self._outgoing.read()
            if data:
                self._pending_out += data
            if not self._pending_out:
                return
            try:
                sent = self._sock.send(self._pending_out)
            except BlockingIOError:
                raise ssl.SSLWantWriteError(ssl.SSL_ERROR_WANT_WRITE,
                                            "The operation did not complete (write)") from None
            del self._pending_out[:sent]

    def _fill(self) -> None:
        """Read records from the socket into the incoming BIO (EOF: ``write_eof``)."""
        with self._in_lock:
            if self._incoming.pending:
                return  # another reader brought records in meanwhile: use them first
            try:
                data = self._sock.recv(TLS_READ_SIZE)
            except BlockingIOError:
                raise ssl.SSLWantReadError(ssl.SSL_ERROR_WANT_READ,
                                           "The operation did not complete (read)") from None
            if data:
                self._incoming.write(data)
            else:
                self._incoming.write_eof()

    def _run(self, operation: Any, *args: Any, writer: bool = True) -> Any:
        """``operation(*args)`` on the SSLObject, moving records until it completes
        (``writer``: write, handshake and unwrap; read is not)."""
        if not writer:
            return self._pump(operation, args, writer)
        with self._state_lock:
            self._writers += 1
        try:
            return self._pump(operation, args, writer)
        finally:
            with self._state_lock:
                self._writers -= 1
            if self._outgoing.pending:  # a reader's records, left to us
                self._flush(writer=True)

    def _pump(self, operation: Any, args: tuple[Any, ...], writer: bool) -> Any:
        if self._pending_out:  # atomic: len of a bytearray; _flush locks
            self._flush(writer)
        while True:
            try:
                result = operation(*args)
            except ssl.SSLWantReadError:
                self._flush(writer)
                if self._incoming.eof:
                    raise ssl.SSLEOFError(ssl.SSL_ERROR_EOF,
                                          "EOF occurred in violation of protocol") from None
                self._fill()
                continue
            except ssl.SSLWantWriteError:
                self._flush(writer)
                continue
            self._flush(writer)
            return result

    def _obj(self) -> ssl.SSLObject:
        if self._sslobj is None:
            if self._closed:
                raise OSError(9, "Bad file descriptor")
            raise OSError(107, "Transport endpoint is not connected")  # ENOTCONN
        return self._sslobj

    # -- handshake / connect / accept ----------
    def do_handshake(self, block: bool = False) -> None:
        self._run(self._obj().do_handshake)

    def connect(self, address: Any) -> None:
        if self._sslobj is not None:
            raise ValueError("attempt to connect already-connected SSLSocket!")
        self._sock.connect(address)
        self._start()
        if self.do_handshake_on_connect:
            self.do_handshake()

    def connect_ex(self, address: Any) -> int:
        try:
            self.connect(address)
        except BlockingIOError as exc:
            return exc.errno or 0
        except OSError as exc:
            return exc.errno or 5
        return 0

    def accept(self) -> tuple[TlsSocket, Any]:
        child, address = self._sock.accept()
        return TlsSocket(child, self.context, server_side=True,
                         do_handshake_on_connect=self.do_handshake_on_connect,
                         suppress_ragged_eofs=self.suppress_ragged_eofs), address

    # -- data ----------
    def read(self, len: int = 1024, buffer: Any = None) -> Any:
        try:
            if buffer is not None:
                return self._run(self._obj().read, len, buffer, writer=False)
            return self._run(self._obj().read, len, writer=False)
        except ssl.SSLError as exc:
            if exc.args[0] == ssl.SSL_ERROR_EOF and self.suppress_ragged_eofs:
                return 0 if buffer is not None else b""
            raise

    def write(self, data: Any) -> int:
        return int(self._run(self._obj().write, data))

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        if flags:
            raise ValueError(f"non-zero flags not allowed in calls to recv() on {type(self)}")
        if self._sslobj is None:
            return self._sock.recv(buflen, flags)
        return bytes(self.read(buflen))

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        if flags:
            raise ValueError(f"non-zero flags not allowed in calls to recv_into() on "
                             f"{type(self)}")
        view = memoryview(buffer).cast("B")
        nbytes = nbytes or len(view)
        if self._sslobj is None:
            return self._sock.recv_into(view, nbytes)
        return int(self.read(nbytes, view))

    def send(self, data: Any, flags: int = 0) -> int:
        if flags:
            raise ValueError(f"non-zero flags not allowed in calls to send() on {type(self)}")
        if self._sslobj is None:
            return self._sock.send(data)
        return self.write(data)

    def sendall(self, data: Any, flags: int = 0) -> None:
        view = memoryview(data).cast("B")
        sent = 0
        while sent < len(view):
            sent += self.send(view[sent:], flags)

    def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        # (ignores: private methods of CPython's socket.socket that typeshed does not declare)
        return int(_pysocket.socket._sendfile_use_send(self, file, offset,  # type: ignore[attr-defined]
                                                       count))

    _check_sendfile_params = _pysocket.socket._check_sendfile_params  # type: ignore[attr-defined]

    def pending(self) -> int:
        return self._sslobj.pending() if self._sslobj is not None else 0

    # -- what the handshake gave ----------
    def getpeercert(self, binary_form: bool = False) -> Any:
        return self._obj().getpeercert(binary_form)

    def cipher(self) -> Any:
        return None if self._sslobj is None else self._sslobj.cipher()

    def shared_ciphers(self) -> Any:
        return None if self._sslobj is None else self._sslobj.shared_ciphers()

    def version(self) -> str | None:
        return None if self._sslobj is None else self._sslobj.version()

    def compression(self) -> str | None:
        return None if self._sslobj is None else self._sslobj.compression()

    def selected_alpn_protocol(self) -> str | None:
        return None if self._sslobj is None else self._sslobj.selected_alpn_protocol()

    def selected_npn_protocol(self) -> None:
        return None

    def get_channel_binding(self, cb_type: str = "tls-unique") -> bytes | None:
        return None if self._sslobj is None else self._sslobj.get_channel_binding(cb_type)

    def verify_client_post_handshake(self) -> None:
        self._obj().verify_client_post_handshake()

    @property
    def session(self) -> ssl.SSLSession | None:
        return self._session if self._sslobj is None else self._sslobj.session

    @property
    def session_reused(self) -> bool | None:
        return None if self._sslobj is None else self._sslobj.session_reused

    # -- ending ----------
    def unwrap(self) -> Socket:
        """Send close_notify, wait for the peer's, and hand back the plain socket."""
        obj = self._obj()
        self._run(obj.unwrap)
        self._sslobj = None
        return self._sock

    def shutdown(self, how: int) -> None:
        self._sslobj = None
        self._sock.shutdown(how)

    def close(self) -> None:
        self._closed = True
        if self._io_refs <= 0:
            self._real_close()

    def _real_close(self) -> None:
        self._sslobj = None
        self._sock.close()

    makefile = _pysocket.socket.makefile
    # (CPython private, not in typeshed)
    _decref_socketios = _pysocket.socket._decref_socketios  # type: ignore[attr-defined]

    def __enter__(self) -> TlsSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the plain socket's calls ----------
    def fileno(self) -> int:
        return self._sock.fileno()

    def settimeout(self, value: float | None) -> None:
        self._sock.settimeout(value)

    def gettimeout(self) -> float | None:
        return self._sock.gettimeout()

    @property
    def timeout(self) -> float | None:
        return self._sock.gettimeout()

    def setblocking(self, flag: bool) -> None:
        self._sock.setblocking(flag)

    def getblocking(self) -> bool:
        return self._sock.getblocking()

    @property
    def family(self) -> int:
        return self._sock.family

    @property
    def type(self) -> int:
        return self._sock.type

    @property
    def proto(self) -> int:
        return self._sock.proto

    def __getattr__(self, name: str) -> Any:
        # getsockname, getpeername, setsockopt, getsockopt, bind, listen, ...
        if name.startswith("__") or name == "_sock":
            raise AttributeError(name)
        return getattr(self._sock, name)


def wrap_socket(context: ssl.SSLContext, sock: Socket, server_side: bool = False,
                do_handshake_on_connect: bool = True, suppress_ragged_eofs: bool = True,
                server_hostname: str | None = None, session: ssl.SSLSession | None = None
                ) -> TlsSocket:
    """``context.wrap_socket(sock, ...)`` for an rcunet socket."""
    return TlsSocket(sock, context, server_side=server_side, server_hostname=server_hostname,
                     do_handshake_on_connect=do_handshake_on_connect,
                     suppress_ragged_eofs=suppress_ragged_eofs, session=session)


_REAL_WRAP_SOCKET = ssl.SSLContext.wrap_socket


def _wrap_socket_hook(self: ssl.SSLContext, sock: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(sock, Socket):
        return wrap_socket(self, sock, *args, **kwargs)
    return _REAL_WRAP_SOCKET(self, sock, *args, **kwargs)


def install_wrap_socket_hook() -> None:
    """``ssl.SSLContext.wrap_socket`` hands rcunet sockets to ``wrap_socket`` above and
    every other socket to the real method (idempotent)."""
    if ssl.SSLContext.wrap_socket is not _wrap_socket_hook:
        # (replacing a method is this hook's whole purpose)
        ssl.SSLContext.wrap_socket = _wrap_socket_hook  # type: ignore[method-assign]


install_wrap_socket_hook()
