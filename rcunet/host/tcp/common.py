"""Names the modules of ``rcunet.host.tcp`` share: the legacy global lock, units, the
table state of each engine state, and address helpers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rcunet.core.tcp import State as CState
from rcunet.sync.lock import LockClass
from rcunet.tables.entry import AF_INET6, State
from rcunet.wire.addr import V4_MAPPED_PREFIX as MAPPED

if TYPE_CHECKING:
    from rcunet.host.host import Host

#: FreeBSD 9.2's INP_INFO lock: taken only with ``Tuning.accept_no_global_lock`` off.
TCBINFO_LOCK = LockClass("tcbinfo_lock")
MS = 1_000_000
MASK32 = 0xFFFFFFFF

TABLE_STATE = {
    CState.CLOSED: State.CLOSE, CState.LISTEN: State.LISTEN, CState.SYN_SENT: State.SYN_SENT,
    CState.SYN_RECEIVED: State.SYN_RECV, CState.ESTABLISHED: State.ESTABLISHED,
    CState.FIN_WAIT_1: State.FIN_WAIT1, CState.FIN_WAIT_2: State.FIN_WAIT2,
    CState.CLOSE_WAIT: State.CLOSE_WAIT, CState.CLOSING: State.CLOSING,
    CState.LAST_ACK: State.LAST_ACK, CState.TIME_WAIT: State.TIME_WAIT,
}


def offloads(host: Host, entry: Any, dst: bytes, local: bool) -> bool:
    """May segments to ``dst`` leave their checksum to the link?  Only to loopback or
    to an on-link peer over a link that offloads: a router would forward a zero
    checksum onto links that verify it."""
    if local:
        return bool(host.loopback.checksum_offload)
    return bool(entry.iface.checksum_offload and entry.next_hop == dst)


def family_form(family: int, addr: bytes) -> bytes:
    """An address as a socket of ``family`` stores it (IPv4 in IPv6: v4-mapped)."""
    if family == AF_INET6 and len(addr) == 4:
        return MAPPED + addr
    return addr
