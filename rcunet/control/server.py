"""The control socket of a running Host (``rcunet up --control PATH``).

Protocol: the client sends one line naming what it wants (``ss``, ``nstat``,
``lockstat``, ``tracemalloc`` when ``RCUNET_TRACEMALLOC`` is set: see
``rcunet.control.memory``) and reads the answer until EOF: one line of JSON on success, or one line
``error: ...`` (anything it does not know, a line too long, a client too slow).  The
socket is created mode 0600 (root, like the daemon); a stale file from a dead daemon is
replaced, a live daemon's is not.

Concurrency: one thread accepts and answers clients one at a time (an answer is a table
walk, short); ``stop`` closes the listener and joins the thread.  The table walks read
the Host's tables as their own introspection helpers do (per-bucket snapshots), so an
answer is a consistent view of each bucket, not of the whole Host at one instant.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
from typing import Any

from rcunet.control import snapshot

MAX_REQUEST = 256
CLIENT_TIMEOUT = 5.0
REQUESTS = ("ss", "nstat", "lockstat", "tracemalloc")


class ControlError(Exception):
    pass


def _claim(path: str) -> None:
    """Remove a stale socket file at ``path``; refuse a live one or a non-socket."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ControlError(f"{path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # nobody listens: a daemon that died without cleaning up
            return
    raise ControlError(f"{path} is in use by another rcunet up")


class ControlServer:
    def __init__(self, host: Any, path: str, tracer: Any = None) -> None:
        self.host = host
        self.tracer = tracer  # a control.memory.MemoryTracer, or None
        self.path = path
        self.refused = 0  # requests answered with an error; owner: the serving thread
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> ControlServer:
        _claim(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # created 0600: no window where others could connect
        try:
            sock.bind(self.path)
        except OSError as exc:
            sock.close()
            raise ControlError(f"cannot bind {self.path}: {exc.strerror}") from None
        finally:
            os.umask(old_umask)
        sock.listen(16)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="rcunet-control",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        if self._thread is not None:
            self._thread.join(5.0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed by stop()
            with conn:
                try:
                    self._answer(conn)
                except OSError:
                    pass  # the client went away; the next one

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(CLIENT_TIMEOUT)
        try:
            request = _read_line(conn)
            conn.sendall(self.reply(request).encode() + b"\n")
        except ControlError as exc:
            self.refused += 1
            conn.sendall(f"error: {exc}\n".encode())
        except Exception as exc:  # a bug in a table walk: say so, keep serving
            self.refused += 1
            conn.sendall(f"error: internal: {type(exc).__name__}: {exc}\n".encode())
        _drain(conn)

    def reply(self, request: str) -> str:
        """The answer to one request line (JSON), or ControlError."""
        word = request.strip()
        if word == "ss":
            return json.dumps(snapshot.sockets(self.host))
        if word == "nstat":
            return json.dumps(snapshot.counters(self.host))
        if word == "lockstat":
            text = snapshot.lock_stat()
            if text is None:
                raise ControlError("lock statistics are off (start rcunet up with "
                                   "--lockstat)")
            return json.dumps({"lock_stat": text})
        if word == "tracemalloc":
            diff = self.tracer.diff() if self.tracer is not None else None
            if diff is None:
                raise ControlError("allocation tracing is off (start rcunet up with "
                                   "RCUNET_TRACEMALLOC=FRAMES)")
            return json.dumps(diff)
        shown = word if len(word) <= 40 and word.isprintable() else f"{word[:40]!r}..."
        raise ControlError(f"unknown request {shown!r} (known: {', '.join(REQUESTS)})")


def _drain(conn: socket.socket) -> None:
    """End our side, then read what the client still sends (a bounded amount): closing
    with unread bytes would reset the connection and lose the answer in flight."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(1.0)
        for _ in range(64):
            if not conn.recv(4096):
                break


def _read_line(conn: socket.socket) -> str:
    data = b""
    while b"\n" not in data:
        try:
            chunk = conn.recv(MAX_REQUEST)
        except TimeoutError:
            raise ControlError("no request line within 5 s") from None
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ControlError(f"request longer than {MAX_REQUEST} bytes")
    line, _, _ = data.partition(b"\n")
    try:
        return line.decode("ascii")
    except UnicodeDecodeError:
        raise ControlError("request is not ASCII text") from None
