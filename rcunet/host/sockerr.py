"""The two helpers every socket layer shares: ``OSError`` as CPython raises it for an
errno (the subclass and the strerror text), and the v4-mapped address conversions."""

from __future__ import annotations

import errno
import os

from rcunet.tables.entry import is_v4mapped

_V4MAPPED_PREFIX = b"\0" * 10 + b"\xff\xff"

#: The OSError subclass CPython raises for an errno (the rest raise OSError itself).
OSERROR_CLASSES: dict[int, type[OSError]] = {
    errno.EAGAIN: BlockingIOError, errno.EINPROGRESS: BlockingIOError,
    errno.EALREADY: BlockingIOError, errno.ECONNREFUSED: ConnectionRefusedError,
    errno.ECONNRESET: ConnectionResetError, errno.EPIPE: BrokenPipeError,
    errno.ECONNABORTED: ConnectionAbortedError, errno.ETIMEDOUT: TimeoutError,
    errno.ESHUTDOWN: BrokenPipeError,
}


def oserror(code: int, detail: str = "") -> OSError:
    """OSError (or the matching subclass, as CPython raises) for ``code``, with strerror's
    text (``detail`` in parentheses after it)."""
    message = os.strerror(code) + (f" ({detail})" if detail else "")
    return OSERROR_CLASSES.get(code, OSError)(code, message)


def as_python_error(exc: OSError) -> OSError:
    """``exc`` as CPython's socket would raise it: the protocol engine's
    ``OSError(ECONNRESET, "ECONNRESET")`` becomes ``ConnectionResetError`` with strerror's
    text ("Connection reset by peer")."""
    code = exc.errno
    if code is None:
        return exc
    if exc.strerror in (None, errno.errorcode.get(code)) or (
            type(exc) is OSError and code in OSERROR_CLASSES):
        return oserror(code)
    return exc


def wire(addr: bytes) -> bytes:
    """The address on the wire: a v4-mapped IPv6 address is IPv4."""
    return addr[12:] if is_v4mapped(addr) else addr


def v4mapped(addr: bytes) -> bytes:
    """An IPv4 address as an AF_INET6 socket sees it (``::ffff:a.b.c.d``); IPv6 as is."""
    return _V4MAPPED_PREFIX + addr if len(addr) == 4 else addr
