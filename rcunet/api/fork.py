"""``os.fork`` in drop-in mode: a forked child keeps working sockets, served by its
parent's Host over a channel, as a kernel keeps one socket for both processes.

A forked child has a copy of the Host but none of its threads (receive workers, timers,
links), so it cannot run the stack itself.  Instead:

* At fork, the parent takes one reference on every socket the process has a descriptor
  of, on the child's behalf (Linux's fork dups the fd table).  The child's copies of
  those sockets become ``RemoteSock`` stand-ins: each call (``recv``, ``accept``,
  ``sendto`` ...) goes to the parent, which runs it on the real socket in a thread of
  its own and answers with the result or the OSError.  A socket the child creates, or
  accepts, is made by the parent's Host the same way.  ``fileno()`` in the child is a
  dup of the parent's readiness fd, passed with SCM_RIGHTS, so ``select`` works.
* The channel: an AF_UNIX listener in the parent (abstract name, nothing on disk);
  each of the child's threads opens its own connection, so a blocked ``recv`` in one
  thread never holds up another's ``send``.
* When the child closes its last descriptor of a socket, the parent drops the child's
  reference; when the child ends (exits, is killed, execs), the parent sees its end of
  a socketpair close and drops every reference the child still held: the sockets stay
  open for the parent's other holders, and close if the child was the last.
* The child never outlives its parent silently: a thread of the child waits on its end
  of that socketpair, and when the parent's end closes (the parent died) the child says
  so on stderr and exits; a call whose parent is gone fails with ``OSError(ENETDOWN)``,
  and says so on stderr if it saw the parent's end first (once per child).
  (Not a signal handler: a Python-level handler can miss a signal that arrives just
  before the main thread blocks in C, as a multiprocessing worker does.)  ``rcunet run``
  waits for children that still hold sockets before it stops the network.

* A call in the child's main thread waits for its reply in slices
  (``signals.wait_readable_in_main_thread``), so Ctrl-C interrupts it.  The interrupted
  call's connection is closed; the thread's next call opens another.

Limits: a forked child cannot fork again (``OSError(ENOSYS)`` at once): its sockets live
in its parent, which serves its own children only.  An interrupted call is not taken
back in the parent: a ``recv`` it was making still takes the data that comes, and that
data is lost (Linux's interrupted ``recv`` takes nothing).
"""

from __future__ import annotations

import _socket
import array
import errno
import functools
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
from typing import Any

from rcunet.api import fdtable
from rcunet.sync import signals

_real_fork = os.fork
_os_close = os.close  # the real one: drop-in mode's takes the descriptor table's lock
_LEN = struct.Struct("!I")
_FD_ROOM = _socket.CMSG_SPACE(struct.calcsize("i"))

NESTED_LIMIT = ("rcunet drop-in mode: a forked child cannot fork again (its sockets are "
                "served by its parent, which serves its own children only)")

#: The protocol-socket calls a child's stand-in forwards to the parent.
_FORWARDED = frozenset({
    "bind", "connect", "listen", "accept", "send", "sendall", "sendto", "sendmsg", "recv",
    "recvfrom", "recvmsg", "shutdown", "setsockopt", "getsockopt", "recv_cmsgs",
    "recv_errqueue"})


# -- framing: a length, a pickle, and at most one fd (SCM_RIGHTS) ----------
def _send(conn: Any, message: Any, fd: int = -1) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = _LEN.pack(len(payload)) + payload
    ancdata = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array.array("i", [fd]))] \
        if fd >= 0 else []
    sent = conn.sendmsg([data], ancdata)
    if sent < len(data):
        conn.sendall(data[sent:])


def _recv(conn: Any) -> tuple[Any, int]:
    """(message, fd or -1); EOFError when the other end closed."""
    head, ancdata, _flags, _addr = conn.recvmsg(_LEN.size, _FD_ROOM)
    fd = -1
    for level, kind, data in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fd = array.array("i", data[: len(data) - len(data) % 4])[0]
    if not head:
        raise EOFError
    head += _exactly(conn, _LEN.size - len(head))
    return pickle.loads(_exactly(conn, _LEN.unpack(head)[0])), fd


def _exactly(conn: Any, size: int) -> bytes:
    parts = []
    while size:
        chunk = conn.recv(min(size, 1 << 20))
        if not chunk:
            raise EOFError
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def _plain(value: Any) -> Any:
    """A result made picklable: buffers as bytes, tuples and lists element by element."""
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


# -- the parent ----------
class _Child:
    """What the parent holds for one forked child: a reference on each socket it has."""

    def __init__(self, refs: dict[int, fdtable.SockRef]) -> None:
        self.refs = refs  # guarded-by: lock (id -> the reference held for the child)
        self.lock = threading.Lock()
        self.alive = True  # guarded-by: lock
        self.ended = threading.Event()

    def add(self, ref: fdtable.SockRef) -> int:
        with self.lock:
            if not self.alive:  # it died while the call ran: nobody will release it
                orphan = True
            else:
                self.refs[id(ref)] = ref
                orphan = False
        if orphan:
            ref.put()
        return id(ref)

    def get(self, ref_id: int) -> fdtable.SockRef:
        with self.lock:
            ref = self.refs.get(ref_id)
        if ref is None:
            raise OSError(errno.EBADF, "not a socket of this process")
        return ref

    def release(self, ref_id: int) -> None:
        with self.lock:
            ref = self.refs.pop(ref_id, None)
        if ref is not None:
            ref.put()

    def release_all(self) -> None:
        with self.lock:
            self.alive = False
            refs, self.refs = list(self.refs.values()), {}
        for ref in refs:
            ref.put()
        self.ended.set()


class _Server:
    """The parent's end: the listener its children connect to, and their references."""

    def __init__(self) -> None:
        self.address = b"\0rcunet-fork-%d-%s" % (os.getpid(), os.urandom(6).hex().encode())
        self.listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self.listener.bind(self.address)
        self.listener.listen(128)
        self.children: dict[int, _Child] = {}  # guarded-by: lock
        self.lives: dict[int, Any] = {}  # guarded-by: lock (pid -> our end of its life)
        self.lock = threading.Condition()
        self.host: Any = None  # the Host new sockets of the children are made on
        # one thread watches every child's life (started before any fork: a thread
        # started by the forking thread right after fork can hang on 3.13t)
        self._wake_r, self._wake_w = os.pipe()
        threading.Thread(target=self._accept_loop, name="rcunet-fork-server",
                         daemon=True).start()
        threading.Thread(target=self._watch_lives, name="rcunet-fork-watch",
                         daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            # (socket.socket._accept: CPython's private call that returns the bare fd)
            fd, _address = self.listener._accept()  # type: ignore[attr-defined]
            sock = _socket.socket(fileno=fd)
            threading.Thread(target=self._serve, args=(sock,), name="rcunet-fork-call",
                             daemon=True).start()

    def adopt(self, pid: int, child: _Child, life: Any) -> None:
        with self.lock:
            self.children[pid] = child
            self.lives[pid] = life
            self.lock.notify_all()
        os.write(self._wake_w, b"!")  # _watch_lives: one more to watch

    def _watch_lives(self) -> None:
        """The child's end of its life socketpair closes when it ends (exit, kill,
        exec): release what it held."""
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        watched: dict[int, tuple[int, Any]] = {}  # fd -> (pid, our end)
        while True:
            with self.lock:
                lives = list(self.lives.items())
            for pid, life in lives:
                if life.fileno() not in watched:
                    watched[life.fileno()] = (pid, life)
                    poller.register(life.fileno(), select.POLLIN)
            for fd, _events in poller.poll():
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                pid, life = watched[fd]
                try:
                    if life.recv(64):
                        continue  # a child never writes: not its end
                except OSError:
                    pass
                poller.unregister(fd)
                del watched[fd]
                self._ended(pid, life)

    def _ended(self, pid: int, life: Any) -> None:
        with self.lock:
            child = self.children.pop(pid, None)
            self.lives.pop(pid, None)
        if child is not None:
            child.release_all()
        with self.lock:
            self.lock.notify_all()
        life.close()

    def _child(self, pid: int) -> _Child | None:
        with self.lock:  # the child may call before fork() returned in the parent
            self.lock.wait_for(lambda: pid in self.children, timeout=30)
            return self.children.get(pid)

    def _serve(self, conn: Any) -> None:
        try:
            (kind, pid), _fd = _recv(conn)
            child = self._child(pid) if kind == "hello" else None
            while child is not None:
                request, _fd = _recv(conn)
                fd = -1
                try:
                    reply, fd = self._answer(child, request)
                except BaseException as exc:  # the call's own error, for the child
                    reply = ("raise", _picklable(exc))
                _send(conn, reply, fd)
        except (EOFError, OSError):
            pass  # the child's thread or the child ended
        finally:
            conn.close()

    def _answer(self, child: _Child, request: tuple[Any, ...]) -> tuple[Any, int]:
        kind = request[0]
        if kind == "call":
            _kind, ref_id, name, args, kwargs = request
            ref = child.get(ref_id)
            result = getattr(ref.sk, name)(*args, **kwargs)
            if name == "accept":  # a new socket, held for the child
                new = fdtable.SockRef(result, ref.family, ref.type, ref.proto)
                return ("sock", child.add(new)), -1
            return ("value", _plain(result)), -1
        if kind == "attr":
            return ("value", _plain(getattr(child.get(request[1]).sk, request[2]))), -1
        if kind == "fileno":
            return ("value", None), child.get(request[1]).sk.fileno()
        if kind == "new":
            _kind, family, type_ = request
            layer = self.host.udp if type_ == _socket.SOCK_DGRAM else self.host.tcp
            new = fdtable.SockRef(layer.new_socket(family), family, type_, 0)
            return ("sock", child.add(new)), -1
        if kind == "release":
            child.release(request[1])
            return ("value", None), -1
        raise OSError(errno.EINVAL, f"unknown request {kind!r}")

    def wait_children(self, timeout: float | None = None) -> list[int]:
        """Until every child holding sockets has ended; the pids still running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while self.children:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self.lock.wait(remaining)
            return sorted(self.children)


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return OSError(errno.EIO, f"{type(exc).__name__}: {exc}")
    return exc


_SERVER: _Server | None = None
_SERVER_LOCK = threading.Lock()


def _server() -> _Server:
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None:
            _SERVER = _Server()
        return _SERVER


def wait_children(timeout: float | None = None) -> list[int]:
    """``rcunet run``'s end: wait for forked children that still hold sockets (their
    calls need this process's Host); returns the pids still running after ``timeout``."""
    server = _SERVER
    return [] if server is None or CHILD is not None else server.wait_children(timeout)


# -- the child ----------
class RemoteSock:
    """A forked child's stand-in for a protocol socket of its parent's Host."""

    def __init__(self, channel: _Channel, ref_id: int, host: Any) -> None:
        self._channel = channel
        self._ref_id = ref_id
        self.host = host
        self._fd = -1

    def __getattr__(self, name: str) -> Any:
        if name in _FORWARDED:
            return functools.partial(self._call, name)
        return self._channel.request(("attr", self._ref_id, name))

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        args = tuple(bytes(a) if isinstance(a, memoryview | bytearray) else a for a in args)
        return self._channel.request(("call", self._ref_id, name, args, kwargs))

    def fileno(self) -> int:
        if self._fd < 0:
            self._channel.request(("fileno", self._ref_id))
            self._fd = self._channel.last_fd()
        return self._fd

    def close(self) -> None:
        try:
            self._channel.request(("release", self._ref_id))
        except OSError:
            pass  # the parent is gone: so is its reference
        if self._fd >= 0:
            _os_close(self._fd)
            self._fd = -1


class _Channel:
    """The child's end: one connection to the parent per thread of the child."""

    def __init__(self, address: bytes, host: Any, parent: int) -> None:
        self.address = address
        self.host = host
        self.parent = parent  # the pid that serves our sockets
        self._local = threading.local()
        self._told_lock = threading.Lock()
        self._told = False  # guarded-by: _told_lock

    def parent_gone(self) -> OSError:
        """The parent has ended: say so on stderr once (the thread that waits on ``life``
        and a call that found its connection closed race to see it first; a call's
        thread may end the process before the other one runs), and the error a call
        raises."""
        with self._told_lock:
            told, self._told = self._told, True
        if not told:
            os.write(2, f"rcunet: forked child {os.getpid()}: its parent {self.parent}, "
                        f"which served its sockets, has ended; exiting\n".encode())
        return OSError(errno.ENETDOWN, "rcunet: the parent process that serves this "
                       "forked child's sockets has ended")

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                conn.connect(self.address)
                _send(conn, ("hello", os.getpid()))
            except OSError:
                conn.close()
                raise self.parent_gone() from None
            self._local.conn = conn
        return conn

    def request(self, message: Any) -> Any:
        conn = self._connection()
        try:
            _send(conn, message)
            if threading.get_ident() == signals.main_ident:  # atomic: one module load
                signals.wait_readable_in_main_thread(conn.fileno())  # hears Ctrl-C
            (kind, value), fd = _recv(conn)
        except (OSError, EOFError):
            raise self.parent_gone() from None
        except BaseException:
            # Interrupted (Ctrl-C) before the reply came: it would answer this thread's
            # next call (a close on the way out would wait for it for good).  The
            # connection goes; the next call opens another.
            self._local.conn = None
            conn.close()
            raise
        self._local.fd = fd
        if kind == "raise":
            raise value
        if kind == "sock":
            return RemoteSock(self, value, self.host)
        return value

    def last_fd(self) -> int:
        return int(getattr(self._local, "fd", -1))

    def new_socket(self, family: int, type_: int) -> RemoteSock:
        sock: RemoteSock = self.request(("new", family, type_))
        return sock


#: Set in a forked child: its channel to the parent (None in the parent).
CHILD: _Channel | None = None


def _become_child(server: _Server, host: Any, refs: list[fdtable.SockRef],
                  life: Any, parent: int) -> None:
    """In the child, right after fork: the only thread; every lock another thread held
    at fork time is still held in this copy, so the ones rcunet needs are made anew."""
    global CHILD, _SERVER
    channel = CHILD = _Channel(server.address, host, parent)
    _SERVER = None
    server.listener.close()  # the copies of the parent's ends: its other children's
    for other in list(server.lives.values()):  # lives must end with the parent alone
        other.close()
    _os_close(server._wake_r)  # TABLE_LOCK is still held here: the real close
    _os_close(server._wake_w)
    counts: dict[int, int] = {}
    for desc in fdtable.open_descriptors():
        counts[id(desc.ref)] = counts.get(id(desc.ref), 0) + 1
    for ref in refs:
        ref.lock = threading.Lock()
        ref.refs = counts.get(id(ref), 0)  # the child's own descriptors of it
        ref.sk = RemoteSock(channel, id(ref), getattr(ref.sk, "host", host))
    threading.Thread(target=_die_with, args=(life, channel), name="rcunet-fork-parent",
                     daemon=True).start()


def _die_with(life: Any, channel: _Channel) -> None:
    """Our end of ``life`` reads EOF once the parent's end closes: the parent died."""
    try:
        while life.recv(64):
            pass
    except OSError:
        pass
    channel.parent_gone()
    os._exit(1)


def fork(host: Any) -> int:
    """``os.fork`` in drop-in mode on ``host`` (see the module's docstring)."""
    if CHILD is not None:
        raise OSError(errno.ENOSYS, NESTED_LIMIT)
    server = _server()
    server.host = host
    life_parent, life_child = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    parent = os.getpid()
    # Ctrl-C (sent to the whole group) and SIGQUIT wait until the child has become one:
    # a handler run before _become_child would take the child for the parent.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        return _fork_holding_signals(server, life_parent, life_child, parent)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


#: Signals a fork holds back until the child is set up (their handlers read CHILD).
_HELD_SIGNALS = frozenset({signal.SIGINT, signal.SIGQUIT})


def _fork_holding_signals(server: _Server, life_parent: Any, life_child: Any,
                          parent: int) -> int:
    with fdtable.TABLE_LOCK:  # no descriptor opens or closes across the fork
        refs = list({id(d.ref): d.ref for d in fdtable.open_descriptors()}.values())
        for ref in refs:
            ref.get()  # the child's reference, as fork dups the fd table
        try:
            pid = _real_fork()
        except BaseException:
            for ref in refs:
                ref.put()
            life_parent.close()
            life_child.close()
            raise
        if pid == 0:
            life_parent.close()
            _become_child(server, server.host, refs, life_child, parent)
            return 0
    life_child.close()
    server.adopt(pid, _Child({id(ref): ref for ref in refs}), life_parent)
    return pid


def exit_if_child(status: int) -> None:
    """``rcunet run`` in a forked child whose program returned: end here.  Closing the
    child's copy of the network would act on the parent's links; the child's sockets
    are released by the parent when it sees the child end."""
    if CHILD is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)
