"""The addresses every layer names, and the tests on them: one home for each.

Addresses are packed ``bytes``: 4 long for IPv4, 16 for IPv6.  An IPv6 socket sees an
IPv4 peer as a v4-mapped address (``::ffff:a.b.c.d``, RFC 4291 §2.5.5.2); the wire
carries the IPv4 form.
"""

from __future__ import annotations

#: INADDR_ANY (0.0.0.0) and in6addr_any (::): the wildcards.
ANY4 = bytes(4)
ANY6 = bytes(16)
#: INADDR_LOOPBACK (127.0.0.1) and in6addr_loopback (::1).
LOOPBACK4 = b"\x7f\0\0\x01"
LOOPBACK6 = bytes(15) + b"\x01"
#: INADDR_BROADCAST (255.255.255.255): the limited broadcast.
LIMITED_BROADCAST = b"\xff" * 4
#: ::ffff:0:0/96, the prefix of a v4-mapped address (``ipv6_addr_v4mapped``).
V4_MAPPED_PREFIX = bytes(10) + b"\xff\xff"
#: ::ffff:0.0.0.0, the IPv4 wildcard as an IPv6 socket stores it.
V4_MAPPED_ANY = V4_MAPPED_PREFIX + ANY4
#: ff02::1 and ff02::16: all nodes, and the MLDv2-capable routers (RFC 3810 §5.2.14).
ALL_NODES = bytes.fromhex("ff020000000000000000000000000001")
MLDV2_ROUTERS = bytes.fromhex("ff020000000000000000000000000016")


def is_any(addr: bytes) -> bool:
    """0.0.0.0 or ::."""
    return addr == ANY4 or addr == ANY6


def is_v4mapped(addr: bytes) -> bool:
    """``ipv6_addr_v4mapped``: an IPv6 address in ::ffff:0:0/96."""
    return len(addr) == 16 and addr[:12] == V4_MAPPED_PREFIX


def v4mapped(addr: bytes) -> bytes:
    """An IPv4 address as an AF_INET6 socket sees it (``::ffff:a.b.c.d``); IPv6 as is."""
    return V4_MAPPED_PREFIX + addr if len(addr) == 4 else addr


def unmapped(addr: bytes) -> bytes:
    """The address on the wire: a v4-mapped IPv6 address is IPv4; any other as is."""
    return addr[12:] if is_v4mapped(addr) else addr


def is_multicast4(addr: bytes) -> bool:
    """``ipv4_is_multicast``: 224.0.0.0/4 (the first octet's top four bits are 1110)."""
    return addr[0] >> 4 == 14


def is_multicast(addr: bytes) -> bool:
    """224.0.0.0/4 for IPv4, ff00::/8 for IPv6."""
    return addr[0] >> 4 == 14 if len(addr) == 4 else addr[0] == 0xFF


def is_link_local6(addr: bytes) -> bool:
    """fe80::/10, the IPv6 link-local unicast prefix (RFC 4291 §2.5.6); False for IPv4."""
    return len(addr) == 16 and addr[0] == 0xFE and addr[1] & 0xC0 == 0x80


def is_loopback(addr: bytes) -> bool:
    """127/8, ::1, or v4-mapped 127/8 (what ``tcp_tw_reuse = 2`` counts as loopback)."""
    if len(addr) == 4:
        return addr[0] == 127
    if is_v4mapped(addr):
        return addr[12] == 127
    return addr == LOOPBACK6
