"""What the UDP tables store: a socket's ``sock_common`` part plus the UDP-only fields.

``UdpEntry`` extends ``SockEntry`` (rcunet.tables.entry) with what ``udp_sock`` and the
multicast code keep per socket (reference §6.1, §6.5):

* ``portaddr_hash``: ``udp_portaddr_hash`` - the keyed hash of the bound address xor the
  port, computed once at bind, which picks the socket's secondary (hash2) slot;
* ``hashed``: the socket is linked into the tables (``sk_hashed``);
* ``mc_list`` and ``mc_all``: multicast group memberships with their source filters
  (``inet->mc_list`` / ``ipv6_mc_socklist``) and IP_MULTICAST_ALL (Linux default: on);
* ``drops``: ``sk_drops``, bumped when a clone for this socket could not be made.

``mcast_allowed`` is ``ip_mc_sf_allow`` / ``inet6_mc_check``: the group-membership and
source filter every multicast receiver must pass (reference §8.2 item 43).
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterable

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.sync.hooks import yield_point
from rcunet.tables.entry import AF_INET, AF_INET6, LOOPBACK4_IPV6, SockEntry, check_address
from rcunet.wire.addr import ANY4, ANY6, is_multicast, is_multicast4, is_v4mapped

_DROPS_LOCK = threading.Lock()

#: Yield point in a membership change, after the copies are built, before the store.
MEMBERSHIP_BEFORE_PUBLISH = "udp.membership.before_publish"

#: Source-filter modes (``MCAST_INCLUDE`` / ``MCAST_EXCLUDE`` from linux/in.h).
MCAST_EXCLUDE = 0
MCAST_INCLUDE = 1

#: One membership: (filter mode, source addresses).  IP_ADD_MEMBERSHIP is EXCLUDE {}.
McFilter = tuple[int, frozenset[bytes]]


def v4_view(addr: bytes) -> bytes:
    """The IPv4 view Linux keeps of an address in ``inet_rcv_saddr``/``inet_daddr``:
    itself for IPv4, the embedded address for v4-mapped, 0.0.0.0 for ``::`` and
    LOOPBACK4_IPV6 (127.0.0.6, which no IPv4 datagram carries) for other IPv6."""
    if len(addr) == 4:
        return addr
    if is_v4mapped(addr):
        return addr[12:]
    return ANY4 if addr == ANY6 else LOOPBACK4_IPV6


class UdpEntry(SockEntry):
    """A UDP socket as the UDP tables see it.  The host's UDP socket subclasses this.

    Concurrency:
      identity       as TableEntry: ``key`` is stored last by ``set_key``, so a lockless
                     reader that loads ``key`` once gets a consistent 4-tuple.
      portaddr_hash  written under the primary slot lock before the entry is published
                     in a chain; read by writers under that lock.
      hashed         guarded-by the primary slot lock of ``lport``.
      mc_list        group -> {ifindex -> filter}; copy-on-write (neither level is
                     mutated after publication), replaced by one attribute store by
                     ``join_group``/``leave_group``/``set_source_filter``; those run in the
                     socket's owner context (the host holds the socket lock), the tables
                     only read it: one attribute load, then ``dict.get`` (atomic).
      mc_all         one attribute store (IP_MULTICAST_ALL) / load.
      drops          guarded-by ``_DROPS_LOCK``: a rare slow path (a failed clone), bumped
                     from any receive worker; read racily (one attribute load).
    """

    __slots__ = lockfree_read_slots("portaddr_hash", "hashed", "mc_list", "mc_all", "drops",
                                    base=SockEntry)

    def __init__(self, family: int, laddr: bytes | None = None, lport: int = 0,
                 faddr: bytes | None = None, fport: int = 0, **kw: object) -> None:
        if laddr is None:
            laddr = ANY4 if family == AF_INET else ANY6
        super().__init__(family, laddr, lport, faddr, fport, **kw)  # type: ignore[arg-type]
        self.portaddr_hash = 0
        self.hashed = False
        self.mc_list: dict[bytes, dict[int, McFilter]] = {}  # group -> ifindex -> filter
        self.mc_all = True
        self.drops = 0  # guarded-by: _DROPS_LOCK

    def add_drop(self) -> None:
        """``atomic_inc(&sk->sk_drops)``: a read-modify-write, so under a (shared, rarely
        taken) lock."""
        with _DROPS_LOCK:
            self.drops += 1

    # --- multicast memberships (IP_ADD_MEMBERSHIP & co.; the host layer calls these) -----
    def join_group(self, group: bytes, ifindex: int, *, mode: int = MCAST_EXCLUDE,
                   sources: Iterable[bytes] = ()) -> None:
        """IP_ADD_MEMBERSHIP (EXCLUDE, no sources) or IP_ADD_SOURCE_MEMBERSHIP /
        MCAST_JOIN_SOURCE_GROUP (INCLUDE a source list) on interface ``ifindex``."""
        self._check_group(group)
        if mode not in (MCAST_EXCLUDE, MCAST_INCLUDE):
            raise OSError(errno.EINVAL, f"bad multicast filter mode {mode!r}")
        if ifindex in self.mc_list.get(group, {}):
            # ip_mc_join_group: "already a member" is EADDRINUSE.
            raise OSError(errno.EADDRINUSE, "already a member of this group on this interface")
        srcs = frozenset(sources)
        for src in srcs:
            check_address(AF_INET if len(group) == 4 else AF_INET6, src)
        self._publish_membership(group, ifindex, (mode, srcs))

    def leave_group(self, group: bytes, ifindex: int) -> None:
        """IP_DROP_MEMBERSHIP: EADDRNOTAVAIL when not a member (ip_mc_leave_group)."""
        if ifindex not in self.mc_list.get(group, {}):
            raise OSError(errno.EADDRNOTAVAIL, "not a member of this group on this interface")
        self._publish_membership(group, ifindex, None)

    def set_source_filter(self, group: bytes, ifindex: int, mode: int,
                          sources: Iterable[bytes]) -> None:
        """MCAST_MSFILTER on an existing membership (EADDRNOTAVAIL if not joined)."""
        if ifindex not in self.mc_list.get(group, {}):
            raise OSError(errno.EADDRNOTAVAIL, "not a member of this group on this interface")
        if mode not in (MCAST_EXCLUDE, MCAST_INCLUDE):
            raise OSError(errno.EINVAL, f"bad multicast filter mode {mode!r}")
        self._publish_membership(group, ifindex, (mode, frozenset(sources)))

    def memberships(self) -> list[tuple[bytes, int, int, frozenset[bytes]]]:
        """(group, ifindex, mode, sources) for every membership."""
        return [(group, ifindex, mode, sources)
                for group, per_if in self.mc_list.items()
                for ifindex, (mode, sources) in per_if.items()]

    def _publish_membership(self, group: bytes, ifindex: int, filt: McFilter | None) -> None:
        """Copy-on-write both levels, then publish with one store.  Keyed by the group's
        bytes, then the ifindex (never by a (group, ifindex) tuple: on free-threaded 3.13 a
        tuple-keyed dict lookup from a thread other than the dict's creator takes tens of
        microseconds, and receive workers are such threads)."""
        per_if = dict(self.mc_list.get(group, {}))
        if filt is None:
            del per_if[ifindex]
        else:
            per_if[ifindex] = filt
        updated = dict(self.mc_list)
        if per_if:
            updated[group] = per_if
        else:
            del updated[group]
        yield_point(MEMBERSHIP_BEFORE_PUBLISH)  # a second writer here would lose an update
        self.mc_list = updated  # atomic: one attribute store (publication)

    def _check_group(self, group: bytes) -> None:
        if not isinstance(group, bytes) or len(group) not in (4, 16):
            raise OSError(errno.EINVAL, f"group must be 4 or 16 packed bytes, got {group!r}")
        if not is_multicast(group):
            raise OSError(errno.EINVAL, "not a multicast address")
        if len(group) == 4 and self.family == AF_INET6 and self.v6only:
            raise OSError(errno.EINVAL, "IPv4 group on an IPV6_V6ONLY socket")
        if len(group) == 16 and self.family == AF_INET:
            raise OSError(errno.EINVAL, "IPv6 group on an IPv4 socket")


def mcast_allowed(sk: UdpEntry, group: bytes, source: bytes, ifindex: int) -> bool:
    """``ip_mc_sf_allow`` (IPv4) / ``inet6_mc_check`` (IPv6).

    A destination that is not multicast (broadcast) always passes.  A socket that has not
    joined ``group`` - on ``ifindex`` for IPv4; IPv6 matches the group on any interface,
    as ``inet6_mc_check`` does - passes only with IP_MULTICAST_ALL (``mc_all``, Linux's
    default).  A member passes its source filter: INCLUDE lists the allowed sources,
    EXCLUDE the refused ones.
    """
    if len(group) == 4:
        if not is_multicast4(group):
            return True
        per_if = sk.mc_list.get(group)  # atomic: attribute load + dict.get (COW dict)
        found = per_if.get(ifindex) if per_if is not None else None
    else:
        per_if = sk.mc_list.get(group)
        found = next(iter(per_if.values())) if per_if else None
    if found is None:
        return sk.mc_all
    mode, sources = found
    if mode == MCAST_INCLUDE:
        return source in sources
    return source not in sources
