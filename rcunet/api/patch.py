"""Drop-in mode: ``with rcunet.patched(host): ...`` makes the ``socket`` module create
its AF_INET/AF_INET6 sockets on ``host`` — ``socket.socket``, and through it the
standard library's ``create_connection``, ``create_server``, ``socketserver``,
``http``, ``urllib``, ``asyncio``, ``selectors`` and third-party code that uses them —
answers names from the host's Network (``rcunet.api.resolver``); ``ssl.SSLContext.
wrap_socket`` returns an rcunet ``TlsSocket`` for an rcunet socket (always: the hook is
installed with ``rcunet.api.socket``).

What rcunet does not do stays with the real module: AF_UNIX (asyncio's self-pipe,
rcunet's own poll fds), AF_PACKET/AF_NETLINK, ``socket.socket(fileno=N)`` of a foreign
fd.  ``isinstance(s, socket.socket)`` is true for rcunet sockets while patched.

Descriptor numbers behave as Linux's (``rcunet.api.fdtable``): ``socket.socket(fileno=N)``
is a second object on number N, ``fromfd``/``dup``/``os.dup`` make new numbers, and
``os.close(N)``/``socket.close(N)`` close that descriptor; the socket closes with its
last one.  ``os.close``/``os.dup`` pass every other number to the real ones.

The patch is process-wide (every thread sees it); patches nest, the innermost host wins.
``patched(host, this_thread=True)`` picks the host for the calling thread only (a test's
server thread on one Host, its client on another), over the process-wide one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket as _pysocket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rcunet.api import fdtable, fork, resolver
from rcunet.api.socket import Socket, dup_of, on_number

if TYPE_CHECKING:
    from rcunet.host.host import Host

_REAL_SOCKET = _pysocket.socket
_REAL = {name: getattr(_pysocket, name) for name in (
    "socket", "socketpair", "fromfd", "getaddrinfo", "gethostbyname", "gethostbyname_ex",
    "gethostbyaddr", "gethostname", "close")}
_REAL_OS: dict[str, Any] = {"close": os.close, "dup": os.dup, "fork": os.fork}
_INET = (-1, _pysocket.AF_INET, _pysocket.AF_INET6)
_lock = threading.Lock()
_hosts: list[Host] = []  # guarded-by: _lock (the process-wide stack; the last is current)
_active = 0  # guarded-by: _lock (patches entered and not left, all threads)
_local = threading.local()  # .hosts: this thread's own stack (this_thread=True)


def current_host() -> Host | None:
    """The Host drop-in sockets are made on (None when not patched)."""
    own = getattr(_local, "hosts", None)
    if own:
        host: Host = own[-1]
        return host
    stack = _hosts  # atomic: one load of the list, then one item load
    return stack[-1] if stack else None


def _host() -> Host:
    host = current_host()
    if host is None:  # a patched function called after the patch ended (a stale alias)
        raise OSError(19, "rcunet drop-in mode has ended")  # ENODEV
    return host


class _SocketMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        if cls is not socket:  # a program's subclass: only its own instances
            return type.__instancecheck__(cls, obj)
        return isinstance(obj, Socket | _REAL_SOCKET)


# (ignore: Socket and the real socket.socket define the same methods with other signatures;
# Socket's come first in the MRO, which is the point)
class socket(Socket, _REAL_SOCKET, metaclass=_SocketMeta):  # type: ignore[misc]  # noqa: N801
    """``socket.socket`` in drop-in mode: an rcunet Socket for the Internet families.

    A subclass a program defines while patched (libraries do: a socket with logging, a
    test's mock) inherits from this class, whose MRO puts rcunet's Socket before the
    real socket classes: its instances are rcunet sockets with the subclass's own
    methods, and ``super()`` calls reach Socket's.  They are made by ``__init__`` (the
    subclass's own ``__init__`` may call it through ``super()``) on the C object the
    real type allocates, which never gets an fd of its own."""

    def __new__(cls, family: int = -1, type: int = -1, proto: int = -1,
                fileno: int | None = None) -> Any:
        if cls is not socket:
            return _REAL_SOCKET.__new__(cls)  # the subclass's object; __init__ makes it
        if isinstance(fileno, int):
            taken = on_number(fileno)
            if taken is not None:
                return taken
            return _REAL_SOCKET(family, type, proto, fileno)
        if fileno is not None:
            return _REAL_SOCKET(family, type, proto, fileno)  # its TypeError
        if family in _INET:
            return Socket(_host(), family, type, proto)
        return _REAL_SOCKET(family, type, proto)

    def __init__(self, family: int = -1, type: int = -1, proto: int = -1,
                 fileno: int | None = None) -> None:
        """A subclass's instance (plain ``socket.socket()`` calls return a Socket from
        ``__new__`` and never get here)."""
        if isinstance(fileno, int):
            desc = fdtable.lookup(fileno)
            if desc is None:
                raise OSError(errno.EBADF, f"fd {fileno} is not an rcunet socket: a "
                              f"subclass of socket.socket defined in drop-in mode "
                              f"({_type_name(self)}) wraps only rcunet sockets")
            self._init(desc.ref.sk.host, desc, _pysocket.getdefaulttimeout())
            return
        if fileno is not None:
            raise TypeError(f"'{_builtin_type(fileno).__name__}' object cannot be "
                            "interpreted as an integer")
        if family not in _INET:
            raise OSError(errno.EAFNOSUPPORT, f"a subclass of socket.socket defined in "
                          f"drop-in mode ({_type_name(self)}) makes only AF_INET and "
                          "AF_INET6 sockets")
        Socket.__init__(self, _host(), family, type, proto)


_builtin_type = type


def _type_name(obj: object) -> str:
    return f"{_builtin_type(obj).__module__}.{_builtin_type(obj).__qualname__}"


def socketpair(family: int | None = None, type: int = _pysocket.SOCK_STREAM,
               proto: int = 0) -> tuple[Any, Any]:
    """AF_UNIX (the default) is the real one; AF_INET/AF_INET6 a connected pair over the
    host's loopback."""
    if family is None or family not in _INET:
        pair: tuple[Any, Any] = _REAL["socketpair"](
            _pysocket.AF_UNIX if family is None else family, type, proto)
        return pair
    loopback = "127.0.0.1" if family in (-1, _pysocket.AF_INET) else "::1"
    with Socket(_host(), family, type, proto) as listener:
        listener.bind((loopback, 0))
        listener.listen(1)
        client = Socket(_host(), family, type, proto)
        try:
            client.connect(listener.getsockname())
            server, _ = listener.accept()
        except BaseException:
            client.close()
            raise
    return client, server


def fromfd(fd: int, family: int, type: int, proto: int = 0) -> Any:
    """An rcunet socket's number gives a new descriptor of that socket (fromfd dups)."""
    taken = dup_of(fd)
    if taken is not None:
        return taken
    return _REAL["fromfd"](fd, family, type, proto)


def close_fd(fd: int) -> None:
    """``os.close``/``socket.close``: an rcunet number closes that descriptor."""
    if not fdtable.close_number(fd):
        _REAL_OS["close"](fd)


def fork_process() -> int:
    """``os.fork``: the child's sockets are served by this process's Host (api/fork.py)."""
    return fork.fork(current_host())


def dup_fd(fd: int) -> int:
    """``os.dup``: an rcunet number gives a new descriptor of that socket."""
    number = fdtable.dup_number(fd)
    if number is None:
        return int(_REAL_OS["dup"](fd))
    return number


def getaddrinfo(host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0,
                flags: int = 0) -> list[tuple[Any, ...]]:
    return resolver.getaddrinfo(_host(), host, port, family, type, proto, flags)


def gethostbyname(name: str) -> str:
    return resolver.gethostbyname(_host(), name)


def gethostbyname_ex(name: str) -> tuple[str, list[str], list[str]]:
    return resolver.gethostbyname_ex(_host(), name)


def gethostbyaddr(address: str) -> tuple[str, list[str], list[str]]:
    return resolver.gethostbyaddr(_host(), address)


def gethostname() -> str:
    return _host().name


_PATCHES: dict[str, Any] = {
    "socket": socket, "socketpair": socketpair, "fromfd": fromfd, "getaddrinfo": getaddrinfo,
    "gethostbyname": gethostbyname, "gethostbyname_ex": gethostbyname_ex,
    "gethostbyaddr": gethostbyaddr, "gethostname": gethostname, "close": close_fd,
}
_OS_PATCHES: dict[str, Any] = {"close": close_fd, "dup": dup_fd, "fork": fork_process}


def install(host: Host, this_thread: bool = False) -> None:
    """Enter drop-in mode for ``host`` (``uninstall`` leaves it); prefer ``patched``."""
    global _active
    if getattr(host, "deterministic", False):
        raise ValueError(f"{host.name}: drop-in mode needs a threaded Network (programs "
                         "block in their socket calls)")
    with _lock:
        if this_thread:
            _local.hosts = [*getattr(_local, "hosts", []), host]
        else:
            _hosts.append(host)
        _active += 1
        if _active == 1:
            for name, value in _PATCHES.items():
                setattr(_pysocket, name, value)
            for name, value in _OS_PATCHES.items():
                setattr(os, name, value)


def uninstall(host: Host, this_thread: bool = False) -> None:
    global _active
    with _lock:
        stack = getattr(_local, "hosts", []) if this_thread else _hosts
        if host not in stack:
            return
        del stack[len(stack) - 1 - stack[::-1].index(host)]  # the innermost: patches nest
        _active -= 1
        if _active == 0:
            for name, value in _REAL.items():
                setattr(_pysocket, name, value)
            for name, value in _REAL_OS.items():
                setattr(os, name, value)


@contextlib.contextmanager
def patched(host: Host, *, this_thread: bool = False) -> Iterator[Host]:
    """``with rcunet.patched(host):`` — the socket module's Internet sockets are
    ``host``'s for the duration (all threads; only the calling one with
    ``this_thread=True``)."""
    install(host, this_thread)
    try:
        yield host
    finally:
        uninstall(host, this_thread)
