"""A real file descriptor whose poll state mirrors an rcunet TCP socket, so ``selectors``,
``select`` and asyncio's ``add_reader``/``add_writer`` can wait on ``sock.fileno()``.

One fd must be able to show each of the four combinations of readable/writable (a
connecting socket is neither; a connected idle one only writable).  An eventfd cannot
(counter 0 is always writable) and a pipe end is only ever one of the two, so the fd is
one end ``a`` of an AF_UNIX stream socketpair:

* readable   <=> ``a`` has a byte waiting: ``b`` sends one byte to raise, ``a`` reads it
  to lower;
* writable   <=> ``a``'s send buffer has room: ``a`` sends into ``b`` until EAGAIN to
  lower (a few KB with the smallest buffers), ``b`` drains it to raise.

Only transitions cost system calls; a ``refresh`` with unchanged levels does nothing.

The pair comes from ``_socket`` (the C module), not ``socket``: drop-in mode replaces
``socket.socket``/``socket.socketpair``, and these fds are rcunet's own.  Every transfer
passes MSG_DONTWAIT rather than trusting O_NONBLOCK: the api hands out dups of ``a``
(one open file description), and a program may make its dup blocking (``ssl`` taking
the fd over does), which must not make a receive worker block here.
"""

from __future__ import annotations

import _socket
from collections.abc import Callable

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.sync.hooks import yield_point
from rcunet.sync.lock import LockClass

POLL_LOCK = LockClass("tcp_sock.poll")
#: Yield point: a refresh has read the socket's levels and not yet applied them.
POLL_LEVELS_READ = "tcp_poll.levels_read"
_FILL = b"\0" * 512
_DONTWAIT = _socket.MSG_DONTWAIT


class PollFd:
    """Concurrency: ``_lock`` (a leaf: ``levels()`` takes no lock) serialises refreshes,
    levels read and applied as one step; ``readable``/``writable`` are written under it.
    ``fileno()`` is immutable until ``close()``."""

    __slots__ = lockfree_read_slots("_a", "_b", "_lock", "readable", "writable")

    def __init__(self) -> None:
        a, b = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
        for end in (a, b):
            end.setblocking(False)
        a.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDBUF, 1)
        b.setsockopt(_socket.SOL_SOCKET, _socket.SO_RCVBUF, 1)
        self._a, self._b = a, b
        self._lock = POLL_LOCK.new()
        self.readable = False  # guarded-by: _lock
        self.writable = True  # guarded-by: _lock (a fresh socketpair end is writable)

    def fileno(self) -> int:
        return self._a.fileno()

    def refresh(self, levels: Callable[[], tuple[bool, bool]]) -> None:
        """Make the fd show ``levels()`` (readable, writable), read under the lock.

        Every change to what the levels depend on is followed by a refresh.  Read
        outside the lock, a refresh that read before a change could apply its stale
        levels after the refresh that followed the change: the fd would say "not
        readable" with data queued (a selectors server waits for ever).  Read under it,
        the last refresh to take the lock began after every change so far (each
        change's refresh took the lock after it) and applies levels that include them.
        """
        with self._lock:
            if self._a.fileno() < 0:
                return
            readable, writable = levels()
            yield_point(POLL_LEVELS_READ)
            if readable != self.readable:
                if readable:
                    _raise(self._b)
                else:
                    _drain(self._a)
                self.readable = readable
            if writable != self.writable:
                if writable:
                    _drain(self._b)
                else:
                    _fill(self._a)
                self.writable = writable

    def close(self) -> None:
        with self._lock:
            self._a.close()
            self._b.close()


def _raise(end: _socket.socket) -> None:
    try:
        end.send(b"r", _DONTWAIT)
    except BlockingIOError:
        pass  # already full of "readable" bytes (a program read ours away): still readable


def _drain(end: _socket.socket) -> None:
    while True:
        try:
            if not end.recv(65536, _DONTWAIT):
                return
        except BlockingIOError:
            return


def _fill(end: _socket.socket) -> None:
    while True:
        try:
            end.send(_FILL, _DONTWAIT)
        except BlockingIOError:
            return
