"""What the codec modules share: the ``View`` base of every ``Packet`` view, the
``truncated`` error, and ``build``'s copy into a caller's buffer.

Nothing here adds a Python call to a ``Repr.parse``/``build`` fast path: they use
``new_tuple`` (a C function), raise ``truncated(...)`` only on their error paths, and call
``write_into`` only when the caller passes a buffer (the stack always asks for ``bytes``).
"""

from __future__ import annotations

from typing import ClassVar, Self

from rcunet.wire import checksum as _ck
from rcunet.wire.errors import WireError

Buffer = bytes | bytearray | memoryview
#: The caller's buffer that ``build(buf, offset)`` writes into.
WritableBuffer = bytearray | memoryview

#: ``new_tuple(Repr, fields)`` skips a NamedTuple's generated ``__new__`` (Python code that
#: binds arguments by name) and is twice as fast; ``fields`` must be complete and in order.
new_tuple = tuple.__new__


def truncated(what: str, need: int, got: int) -> WireError:
    """``WireError("truncated")``: ``what`` needs ``need`` bytes and ``got`` are present."""
    return WireError("truncated", f"{what} needs {need} bytes, got {got}")


def write_into(buf: WritableBuffer, offset: int, data: Buffer) -> int:
    """``build(buf, offset)``: copy the encoded ``data`` into ``buf`` at ``offset`` and
    return its length.  Without room for all of it, raise ``WireError("buffer-too-small")``
    and write nothing."""
    end = offset + len(data)
    if offset < 0 or len(buf) < end:
        raise WireError("buffer-too-small", f"need {end} bytes at offset {offset}, "
                        f"have {len(buf)}")
    buf[offset:end] = data
    return len(data)


class View:
    """Base of every protocol's ``Packet``: a zero-copy view over ``buf`` (a
    ``memoryview``, writable when the underlying buffer is).

    A protocol's view names its header (``what``) and fixed length (``min_len``), gives
    each field a typed property named after it and a ``set_<field>`` method (big-endian
    unsigned ints, one-byte ints, addresses as ``bytes``), and extends ``check_len`` with
    what its own length fields need.  Plain properties and methods, not descriptor
    objects in the class body: the compiled build (mypyc) makes these C code, and
    cannot compile a class attribute that is a descriptor instance.
    """

    __slots__ = ("buf",)

    #: How ``check_len``'s error names the header, and how many bytes it needs at least.
    what: ClassVar[str] = "header"
    min_len: ClassVar[int] = 0

    def __init__(self, buf: Buffer) -> None:
        self.buf = memoryview(buf)

    @classmethod
    def unchecked(cls, buf: Buffer) -> Self:
        """A view that trusts ``buf``: a getter past its end reads short or raises."""
        return cls(buf)

    @classmethod
    def checked(cls, buf: Buffer) -> Self:
        """A view of a buffer that ``check_len`` accepts (else ``WireError``)."""
        view = cls(buf)
        view.check_len()
        return view

    def check_len(self) -> None:
        """Raise ``WireError("truncated")`` unless ``min_len`` bytes are present."""
        if len(self.buf) < self.min_len:
            raise truncated(self.what, self.min_len, len(self.buf))

    def _fill_checksum(self, at: int, end: int, initial: int = 0) -> None:
        """Write the Internet checksum of ``buf[:end]`` plus ``initial`` (a pseudo-header
        sum) into the 16-bit checksum field at ``at``, which it first zeroes."""
        self.buf[at : at + 2] = b"\0\0"
        value = _ck.internet_checksum(self.buf[:end], initial)
        self.buf[at : at + 2] = value.to_bytes(2, "big")


class IcmpView(View):
    """Base of the ICMPv4 and ICMPv6 views: the type, code and checksum every message
    starts with, and the echo identifier and sequence number that follow them in both
    (RFC 792, RFC 4443 §4.1)."""

    __slots__ = ()

    @property
    def type(self) -> int:
        return self.buf[0]

    @property
    def code(self) -> int:
        return self.buf[1]

    @property
    def checksum(self) -> int:
        return int.from_bytes(self.buf[2:4], "big")

    @property
    def ident(self) -> int:
        """Echo identifier."""
        return int.from_bytes(self.buf[4:6], "big")

    @property
    def seq(self) -> int:
        """Echo sequence number."""
        return int.from_bytes(self.buf[6:8], "big")

    def set_type(self, value: int) -> None:
        self.buf[0] = value

    def set_code(self, value: int) -> None:
        self.buf[1] = value

    def set_checksum(self, value: int) -> None:
        self.buf[2:4] = value.to_bytes(2, "big")

    def set_ident(self, value: int) -> None:
        self.buf[4:6] = value.to_bytes(2, "big")

    def set_seq(self, value: int) -> None:
        self.buf[6:8] = value.to_bytes(2, "big")
