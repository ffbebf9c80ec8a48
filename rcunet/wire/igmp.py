"""IGMPv2 (RFC 2236) messages: membership query, v2 report, leave group.

rcunet announces group memberships with IGMPv2 reports and leaves; IGMPv3 queries
(longer than 8 bytes) parse as queries with their extra bytes ignored, as RFC 3376 §7.1
lets an IGMPv2 host do.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, overload

from rcunet.wire import checksum as _ck
from rcunet.wire._common import Buffer as Buffer  # re-exported: callers annotate with it
from rcunet.wire._common import WritableBuffer, truncated, write_into
from rcunet.wire.errors import WireError

PROTOCOL = 2
HEADER_LEN = 8
MEMBERSHIP_QUERY = 0x11
V1_REPORT = 0x12
V2_REPORT = 0x16
V3_REPORT = 0x22
LEAVE_GROUP = 0x17
ALL_HOSTS = bytes([224, 0, 0, 1])
ALL_ROUTERS = bytes([224, 0, 0, 2])

_MESSAGE = struct.Struct("!BBH4s")


class Repr(NamedTuple):
    type: int
    group: bytes
    max_resp_time: int = 0  # tenths of a second (queries only)
    checksum: int = 0
    checksum_ok: bool | None = None

    @classmethod
    def parse(cls, buf: Buffer, *, verify: bool = False) -> Repr:
        view = memoryview(buf)
        if len(view) < HEADER_LEN:
            raise truncated("IGMP", HEADER_LEN, len(view))
        kind, max_resp, csum, group = _MESSAGE.unpack_from(view)
        ok = _ck.is_valid(view)
        if verify and not ok:
            raise WireError("bad-checksum", f"IGMP checksum {csum:#06x}")
        return cls(kind, group, max_resp, csum, ok)

    def buffer_len(self) -> int:
        return HEADER_LEN

    @overload
    def build(self, buf: None = None, offset: int = 0) -> bytes: ...

    @overload
    def build(self, buf: WritableBuffer, offset: int = 0) -> int: ...

    def build(self, buf: WritableBuffer | None = None, offset: int = 0) -> bytes | int:
        if len(self.group) != 4 or not 0 <= self.type <= 255 or not 0 <= self.max_resp_time <= 255:
            raise WireError("bad-field", "IGMP type/max-resp out of range or group not 4 bytes")
        kind, group, max_resp_time, _, _ = self
        csum = _ck.internet_checksum(_MESSAGE.pack(kind, max_resp_time, 0, group))
        message = _MESSAGE.pack(kind, max_resp_time, csum, group)
        if buf is None:
            return message
        return write_into(buf, offset, message)
