"""Helpers shared by the codec tests (kept small: other test modules import them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rcunet.wire import WireError

#: Filler of the buffers that codecs build into: any byte a codec forgets to write stays
#: 0xa5 and shows up in a byte comparison.
POISON = 0xA5


def poisoned(n: int) -> bytearray:
    """A writable buffer of ``n`` bytes, all 0xa5."""
    return bytearray([POISON]) * n


def build_poisoned(value: Any, offset: int = 3, **kwargs: Any) -> bytes:
    """Build ``value`` (a Repr) into a poisoned buffer at ``offset`` and return the bytes
    it wrote, after checking the returned length and that no byte around them moved."""
    length = value.buffer_len()
    buf = poisoned(offset + length + 5)
    assert value.build(buf, offset, **kwargs) == length
    assert buf[:offset] == poisoned(offset), "bytes before the offset were written"
    assert buf[offset + length :] == poisoned(5), "bytes past the end were written"
    return bytes(buf[offset : offset + length])


def check_prefixes(parse: Callable[[bytes], object], data: bytes, legal: int | None) -> None:
    """Every proper prefix of ``data`` either parses or raises WireError; the prefixes of
    at least ``legal`` bytes must parse (``None``: every proper prefix must fail)."""
    for cut in range(len(data)):
        try:
            parse(data[:cut])
        except WireError:
            assert legal is None or cut < legal, f"prefix of {cut} bytes rejected"
        else:
            assert legal is not None and cut >= legal, f"prefix of {cut} bytes accepted"
