"""What the codec modules share: the ``View`` base of every ``Packet`` view and the field
descriptors it is declared with, the ``truncated`` error, and ``build``'s copy into a
caller's buffer.

Nothing here adds a Python call to a ``Repr.parse``/``build`` fast path: they use
``new_tuple`` (a C function), raise ``truncated(...)`` only on their error paths, and call
``write_into`` only when the caller passes a buffer (the stack always asks for ``bytes``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar, Generic, Self, TypeVar, overload

from rcunet.wire import checksum as _ck
from rcunet.wire.errors import WireError

Buffer = bytes | bytearray | memoryview
#: The caller's buffer that ``build(buf, offset)`` writes into.
WritableBuffer = bytearray | memoryview

#: ``new_tuple(Repr, fields)`` skips a NamedTuple's generated ``__new__`` (Python code that
#: binds arguments by name) and is twice as fast; ``fields`` must be complete and in order.
new_tuple = tuple.__new__

_T = TypeVar("_T")


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

    A protocol's view names its header (``what``) and fixed length (``min_len``), declares
    its plain fields with ``ByteField``/``UintField``/``BytesField`` (getter named after
    the field, ``set_<field> = <field>.setter``), writes properties for the others, and
    extends ``check_len`` with what its own length fields need.
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


class Field(ABC, Generic[_T]):
    """A header field of a ``View``, declared in the class body: reading it on a view
    gives its value, ``setter`` is the matching ``set_*`` method.  Subclasses say how the
    value is read from and written to the view's buffer."""

    def __init__(self, doc: str | None = None) -> None:
        self.__doc__ = doc

    @overload
    def __get__(self, view: None, owner: type[View]) -> Self: ...

    @overload
    def __get__(self, view: View, owner: type[View]) -> _T: ...

    def __get__(self, view: View | None, owner: type[View]) -> _T | Self:
        if view is None:
            return self
        return self.read(view.buf)

    @abstractmethod
    def read(self, buf: memoryview) -> _T: ...

    @abstractmethod
    def write(self, buf: memoryview, value: _T) -> None: ...

    @property
    def setter(self) -> Callable[[View, _T], None]:
        """The field's ``set_*`` method (assign it in the class body)."""
        write = self.write

        def set_field(view: View, value: _T) -> None:
            write(view.buf, value)

        return set_field


class ByteField(Field[int]):
    """A one-byte field at ``buf[at]``."""

    def __init__(self, at: int, doc: str | None = None) -> None:
        super().__init__(doc)
        self.at = at

    def read(self, buf: memoryview) -> int:
        return buf[self.at]

    def write(self, buf: memoryview, value: int) -> None:
        buf[self.at] = value


class UintField(Field[int]):
    """A big-endian unsigned field at ``buf[start:end]`` (a buffer cut inside the field
    reads the bytes present; writing a value that does not fit is ``OverflowError``)."""

    def __init__(self, start: int, end: int, doc: str | None = None) -> None:
        super().__init__(doc)
        self.span = slice(start, end)
        self.size = end - start

    def read(self, buf: memoryview) -> int:
        return int.from_bytes(buf[self.span], "big")

    def write(self, buf: memoryview, value: int) -> None:
        buf[self.span] = value.to_bytes(self.size, "big")


class BytesField(Field[bytes]):
    """A field at ``buf[start:end]`` read as ``bytes`` (an address); a value written must
    have the field's length."""

    def __init__(self, start: int, end: int, doc: str | None = None) -> None:
        super().__init__(doc)
        self.span = slice(start, end)

    def read(self, buf: memoryview) -> bytes:
        return bytes(buf[self.span])

    def write(self, buf: memoryview, value: bytes) -> None:
        buf[self.span] = value


class IcmpView(View):
    """Base of the ICMPv4 and ICMPv6 views: the type, code and checksum every message
    starts with, and the echo identifier and sequence number that follow them in both
    (RFC 792, RFC 4443 §4.1)."""

    __slots__ = ()

    type = ByteField(0)
    code = ByteField(1)
    checksum = UintField(2, 4)
    ident = UintField(4, 6, "Echo identifier.")
    seq = UintField(6, 8, "Echo sequence number.")
    set_type = type.setter
    set_code = code.setter
    set_checksum = checksum.setter
    set_ident = ident.setter
    set_seq = seq.setter
