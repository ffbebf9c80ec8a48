"""The helpers every socket layer shares: ``OSError`` as CPython raises it for an errno
(the subclass and the strerror text), the v4-mapped address conversions, and the integer
value of a setsockopt argument."""

from __future__ import annotations

import errno
import os
import struct

from rcunet.wire.addr import unmapped as wire
from rcunet.wire.addr import v4mapped

#: wire and v4mapped are the sockets' names for the rules of rcunet.wire.addr (re-exported).
__all__ = ["OSERROR_CLASSES", "as_python_error", "int_option", "oserror", "ranged", "v4mapped",
           "wire"]

_C_INT = struct.Struct("i")

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


def int_option(value: int | bytes) -> int:
    """A setsockopt argument as the int Linux's do_*_setsockopt reads from it: an int, a
    C int's bytes (the first four), or a single byte (which Linux takes for the
    byte-wide IP options); anything else is EINVAL."""
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, bytes | bytearray) and len(value) >= 4:
        return int(_C_INT.unpack_from(value)[0])
    if isinstance(value, bytes | bytearray) and len(value) == 1:
        return value[0]
    raise oserror(errno.EINVAL)


def ranged(value: int, low: int, high: int) -> int:
    """``value`` if it lies in [low, high], else EINVAL."""
    if not low <= value <= high:
        raise oserror(errno.EINVAL, f"value must be {low}..{high}")
    return value
