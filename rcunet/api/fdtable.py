"""rcunet's sockets as a process's file descriptor table holds kernel sockets.

Linux keeps one ``struct file`` per socket and one reference on it per descriptor: a
descriptor number is closed once, by whichever holder closes it, and the socket goes
away with its last descriptor (``__fput``).  Python objects are views over a number:
``socket.socket(fileno=n)`` makes a second object on the *same* number, ``detach()``
forgets the number without closing it, ``dup()``/``fromfd``/``os.dup`` make a new number.

Here, a ``Descriptor`` is one number: it holds one reference on the protocol socket
(``SockRef``, the ``struct file``) and owns a real OS fd, a ``dup`` of the protocol
socket's poll fd, which is what ``fileno()`` returns and ``select``/asyncio wait on (so
the numbers are the kernel's own, never reused while open).  The number is made the first
time it is asked for; until then the descriptor has none.

``TABLE`` maps open numbers to their descriptors, so drop-in mode finds the socket
behind a number (``socket.socket(fileno=)``, ``os.close``, ``os.dup``).  A number that
was closed behind rcunet's back (``os.close`` outside drop-in mode) is recognised by the
open file's identity (device, inode) and treated as foreign.

Locking: ``TABLE_LOCK`` guards ``TABLE``, ``OPEN`` and every descriptor's ``number``,
``identity`` and ``closed``.  Lock order: TABLE_LOCK > SockRef.lock (only
``rcunet.api.fork`` nests them, taking the child's references across the fork); the
protocol socket's close runs after both are released.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import weakref
from typing import Any

from rcunet.host.sockerr import oserror

#: the real ``os.close``/``os.dup``: drop-in mode replaces the module's with ones that
#: come here first
_os_close = os.close
_os_dup = os.dup


#: The enum members SockRef reports, by value: calling the Enum (interpreted Python) twice
#: per socket cost more than the rest of SockRef.  Any other value goes to the Enum.
_FAMILIES = {int(member): member for member in socket.AddressFamily}
_KINDS = {int(member): member for member in socket.SocketKind}


class SockRef:
    """One protocol socket (the ``struct file``), shared by its descriptors: the last
    descriptor closed closes it.  Family, type and protocol are the socket's own, what
    an object made over any of its numbers reports."""

    __slots__ = ("sk", "family", "type", "proto", "refs", "lock")

    def __init__(self, sk: Any, family: int, type: int, proto: int) -> None:
        self.sk = sk
        known_family, known_type = _FAMILIES.get(family), _KINDS.get(type)
        self.family = known_family if known_family is not None else socket.AddressFamily(family)
        self.type = known_type if known_type is not None else socket.SocketKind(type)
        self.proto = proto
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


class Descriptor:
    """One descriptor number of a socket: one reference on its ``SockRef``."""

    __slots__ = ("ref", "number", "identity", "closed", "__weakref__")

    def __init__(self, ref: SockRef) -> None:
        self.ref = ref
        self.number = -1  # guarded-by: TABLE_LOCK (-1: not made yet, or closed)
        self.identity: tuple[int, int] | None = None  # guarded-by: TABLE_LOCK
        self.closed = False  # guarded-by: TABLE_LOCK (set once)
        with TABLE_LOCK:
            OPEN.add(self)


TABLE: dict[int, Descriptor] = {}  # guarded-by: TABLE_LOCK
#: Every open descriptor, numbered or not (what a fork copies: rcunet.api.fork).
OPEN: weakref.WeakSet[Descriptor] = weakref.WeakSet()  # guarded-by: TABLE_LOCK
TABLE_LOCK = threading.Lock()


def identity(fd: int) -> tuple[int, int] | None:
    """(device, inode) of the open file behind ``fd``; None if it is not open."""
    try:
        status = os.fstat(fd)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def number_of(desc: Descriptor) -> int:
    """The descriptor's number, made on first use (-1 once it is closed)."""
    # atomic: one load each of number and closed, both stored under TABLE_LOCK; a racing
    # close may make the number stale at once, as with any fd
    fd = desc.number
    if fd >= 0 or desc.closed:
        return fd
    poll_fd = desc.ref.sk.fileno()  # outside TABLE_LOCK: it may make the poll fd
    with TABLE_LOCK:
        if desc.number < 0 and not desc.closed:
            fd = _os_dup(poll_fd)  # non-inheritable, as sockets are
            desc.identity = identity(fd)
            desc.number = fd
            TABLE[fd] = desc
        return desc.number


def close(desc: Descriptor) -> bool:
    """Close the descriptor: its number goes, and its reference on the socket with it.
    False if it was already closed (by another object on the same number)."""
    with TABLE_LOCK:  # test-and-set: two closing threads put the reference once
        if desc.closed:
            return False
        desc.closed = True
        OPEN.discard(desc)
        fd, desc.number = desc.number, -1
        if fd >= 0 and TABLE.get(fd) is desc:
            del TABLE[fd]
    try:
        _close_own_fd(fd, desc.identity)
    finally:
        desc.ref.put()
    return True


def _close_own_fd(fd: int, own: tuple[int, int] | None) -> None:
    # Close the OS fd only if the number is still ours: a program that os.close()d it
    # outside drop-in mode may have had the number reused for a file of its own since
    # (and close() then fails with EBADF, as CPython's does once its fd was closed
    # under it).
    if fd >= 0:
        if identity(fd) != own:
            raise oserror(errno.EBADF, "the socket's fd was closed by someone else")
        _os_close(fd)


def open_descriptors() -> list[Descriptor]:
    """Every open descriptor (call with TABLE_LOCK held)."""
    return [desc for desc in OPEN if not desc.closed]


def lookup(fd: int) -> Descriptor | None:
    """The open descriptor numbered ``fd`` (None: not an rcunet socket's number)."""
    with TABLE_LOCK:
        desc = TABLE.get(fd)
        own = desc.identity if desc is not None else None
    if desc is None or identity(fd) != own:
        return None  # closed behind our back and the number reused: a foreign fd
    return desc


def close_number(fd: int) -> bool:
    """``os.close(fd)`` for an rcunet number: closes that descriptor (True); False for a
    number that is not one."""
    desc = lookup(fd)
    return desc is not None and close(desc)


def dup_number(fd: int) -> int | None:
    """``os.dup(fd)`` for an rcunet number: a new descriptor of the same socket (None for
    a number that is not one)."""
    desc = lookup(fd)
    if desc is None:
        return None
    desc.ref.get()
    twin = Descriptor(desc.ref)
    try:
        number_of(twin)
    except BaseException:
        close(twin)
        raise
    return twin.number
