"""SO_REUSEPORT groups for UDP (``struct sock_reuseport``, reference §6.4).

Linux keeps ``socks[]`` plus ``num_socks`` and publishes a new member by storing it into
``socks[num_socks]``, a write barrier, then incrementing ``num_socks``, so a reader that
sees count k reads k valid entries (§8.2 item 44).  The Python equivalent is one immutable
tuple replaced by a single attribute store: the count *is* ``len(snapshot)``, so no reader
can pair a new count with an old array.

Selection (``reuseport_select_sock_by_hash``) starts at ``reciprocal_scale(hash, n)`` and
walks cyclically, skipping connected members; the hash is the 4-tuple hash, so one flow
maps to one member while membership is unchanged (§8.2 item 41).
"""

from __future__ import annotations

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.sync.hooks import yield_point
from rcunet.tables.entry import State, TableEntry

M32 = 0xFFFFFFFF


def reciprocal_scale(value: int, ep_ro: int) -> int:
    """``reciprocal_scale``: map a 32-bit value into [0, ep_ro) with a multiply-high."""
    return ((value & M32) * ep_ro) >> 32


class ReuseportGroup:
    """The members of one SO_REUSEPORT group (same port, address, device, family, uid).

    Concurrency:
      socks      rcu: replaced by one attribute store; writers hold the primary UDP slot
                 lock of the group's port (every member binds that port, so that one lock
                 serialises all changes to the group).  Readers load it once.
      has_conns  one attribute store (set when a member connects) / load.
      bind_inany immutable.
    """

    __slots__ = lockfree_read_slots("socks", "has_conns", "bind_inany")

    def __init__(self, first: TableEntry, bind_inany: bool) -> None:
        self.socks: tuple[TableEntry, ...] = (first,)  # rcu: writers hold the port's hslot lock
        self.has_conns = False
        self.bind_inany = bind_inany  # immutable

    def add_locked(self, sk: TableEntry) -> None:
        """``reuseport_add_sock``: publish ``sk`` as a new member (one store)."""
        grown = self.socks + (sk,)
        yield_point("udp.reuseport.before_publish")
        self.socks = grown  # atomic: one attribute store (member and count together)

    def detach_locked(self, sk: TableEntry) -> bool:
        """``reuseport_detach_sock``: returns True when the group became empty."""
        self.socks = tuple(member for member in self.socks if member is not sk)
        return not self.socks

    def select_by_hash(self, flow_hash: int) -> TableEntry | None:
        """``reuseport_select_sock_by_hash`` (no BPF, no SO_INCOMING_CPU): the first
        unconnected member from ``reciprocal_scale(hash, n)`` on; None if all connected."""
        socks = self.socks  # atomic: one attribute load, paired with add/detach's store
        n = len(socks)
        if not n:
            return None
        start = i = reciprocal_scale(flow_hash, n)
        while True:
            sk = socks[i]
            if sk.state != State.ESTABLISHED:
                return sk
            i += 1
            if i >= n:
                i = 0
            if i == start:
                return None
