"""Addresses and numbers the IP layer's modules share (``ip``, ``icmp``, the transports)."""

from __future__ import annotations

from rcunet.wire import icmpv6

PROTO_ICMPV6 = icmpv6.PROTOCOL
LIMITED_BROADCAST = b"\xff\xff\xff\xff"
ALL_NODES = bytes.fromhex("ff020000000000000000000000000001")
MLDV2_ROUTERS = bytes.fromhex("ff020000000000000000000000000016")
UNSPECIFIED6 = bytes(16)


def is_multicast(addr: bytes) -> bool:
    return addr[0] >> 4 == 14 if len(addr) == 4 else addr[0] == 0xFF
