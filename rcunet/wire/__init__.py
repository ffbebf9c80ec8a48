"""Packet codecs: pure functions and values, no state, no I/O.

Conventions (every protocol module follows them; ``udp.py`` is the smallest example):

* ``Packet`` is a zero-copy view over a buffer (``memoryview``): getters named after the
  header fields (``src_port``), setters ``set_*``, ``payload()`` / ``payload_mut()``.
  ``Packet.checked(buf)`` validates lengths, ``Packet.unchecked(buf)`` does not.  Views
  derive from ``_common.View`` and spell each field out as a typed property and its
  ``set_*`` method (``int.from_bytes(self.buf[0:2], "big")``: the offsets are the
  header's table); ``_common`` also holds what ``parse``/``build`` share
  (``truncated(...)``, ``write_into``).
* ``Repr`` is an immutable, checked value (a ``NamedTuple``: fast to build, compared by
  value).  ``Repr.parse(buf, ...)`` takes arbitrary bytes and returns a valid ``Repr``
  or raises ``WireError``; nothing else ever escapes.  Payloads are ``memoryview``
  slices of the input (zero copy).  ``repr.build()`` returns ``bytes``;
  ``repr.build(buf, offset)`` writes into a caller's writable buffer and returns the
  number of bytes written.  ``repr.buffer_len()`` is that number.
* Addresses are packed ``bytes`` (4 or 16 long) on the fast path; ``ipaddress``
  objects only at the edges (CLI, API, pretty-printing).
* Checksums: ``parse`` reports validity in ``checksum_ok`` (``None`` when it could not
  be checked, e.g. no pseudo-header addresses were given); ``verify=True`` turns a bad
  checksum into ``WireError("bad-checksum")``.  ``build`` computes the checksum unless
  told ``checksum=False`` (checksum offload), which leaves the field zero.
* ``wire`` never imports threading, time, socket, random or os (a test enforces it).
"""

from rcunet.wire.errors import WireError

__all__ = ["WireError"]
