"""Names the modules of ``rcunet.host.tcp`` share: the legacy global lock, units, and
address helpers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rcunet.sync.lock import LockClass
from rcunet.tables.entry import AF_INET6
from rcunet.wire.addr import v4mapped

if TYPE_CHECKING:
    from rcunet.host.host import Host

#: FreeBSD 9.2's INP_INFO lock: taken only with ``Tuning.accept_no_global_lock`` off.
TCBINFO_LOCK = LockClass("tcbinfo_lock")
MS = 1_000_000
MASK32 = 0xFFFFFFFF



def offloads(host: Host, entry: Any, dst: bytes, local: bool) -> bool:
    """May segments to ``dst`` leave their checksum to the link?  Only to loopback or
    to an on-link peer over a link that offloads: a router would forward a zero
    checksum onto links that verify it."""
    if local:
        return bool(host.loopback.checksum_offload)
    return bool(entry.iface.checksum_offload and entry.next_hop == dst)


def family_form(family: int, addr: bytes) -> bytes:
    """An address as a socket of ``family`` stores it (IPv4 in IPv6: v4-mapped)."""
    return v4mapped(addr) if family == AF_INET6 else addr
