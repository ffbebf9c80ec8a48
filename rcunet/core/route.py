"""Routing table (longest-prefix match, IPv4 and IPv6) and the path-MTU store.

A ``Route`` is an immutable value.  ``RoutingTable`` keeps, per address family, one dict
per prefix length (masked destination integer -> routes on that prefix, best metric
first) and searches the lengths present from longest to shortest: a lookup costs one
dict probe per distinct prefix length in use, usually a handful.

The table is published RCU-style: every change builds a new immutable ``_Snapshot`` and
stores it with one attribute assignment, so lookups take no lock and always see one
consistent table with its ``generation``.  Writers must be serialised by the caller
(``core`` has no threads and no locks; the Host holds its routing lock around
``add``/``remove``).  ``generation`` grows by one on every change so a route cache
(seed 002) can tell whether an entry it pinned is still current.

``PmtuStore`` holds path MTUs learned from ICMP fragmentation-needed / packet-too-big
with Linux's clamps (``ip_rt_min_pmtu`` 552 for IPv4, the IPv6 minimum MTU 1280) and
expiry (``ip_rt_mtu_expires``, 10 minutes).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from typing import NamedTuple

#: Address length in bytes -> bits, for the two families.
_BITS = {4: 32, 16: 128}

#: Linux's route metric defaults: IPv4 routes get 0, IPv6 routes get 1024
#: (``IP6_RT_PRIO_USER``), connected IPv6 routes 256 (``IP6_RT_PRIO_ADDRCONF``).
IPV4_DEFAULT_METRIC = 0
IPV6_DEFAULT_METRIC = 1024
IPV6_CONNECTED_METRIC = 256

#: ``net.ipv4.route.min_pmtu``: a smaller advertised MTU is raised to this.
IPV4_MIN_PMTU = 552
#: RFC 8200 §5: every IPv6 link carries 1280 bytes, so no path MTU is smaller.
IPV6_MIN_MTU = 1280
#: ``net.ipv4.route.mtu_expires`` (and IPv6's ``ip6_rt_mtu_expires``): 10 minutes.
PMTU_EXPIRES_NS = 600 * 1_000_000_000
#: Bound on remembered path MTUs; a flood of ICMP errors for random destinations evicts
#: the oldest instead of growing without limit.
PMTU_MAX_ENTRIES = 4096

KIND_UNICAST = "unicast"
KIND_CONNECTED = "connected"


class Route(NamedTuple):
    """One route.  ``dst`` is the network address (host bits zero), ``gateway`` is
    ``None`` for an on-link route, ``prefsrc`` the preferred source address (Linux's
    ``src``), ``mtu`` 0 means "the interface's MTU"."""

    dst: bytes
    prefix_len: int
    ifindex: int
    gateway: bytes | None = None
    prefsrc: bytes | None = None
    metric: int = 0
    mtu: int = 0
    kind: str = KIND_UNICAST

    @property
    def family(self) -> int:
        return 4 if len(self.dst) == 4 else 6

    def next_hop(self, dst: bytes) -> bytes:
        """The neighbour to resolve for a packet to ``dst`` on this route."""
        return dst if self.gateway is None else self.gateway


def _bits_of(addr: bytes) -> int:
    try:
        return _BITS[len(addr)]
    except KeyError:
        raise ValueError(f"address of {len(addr)} bytes is neither IPv4 nor IPv6") from None


def prefix_mask(bits: int, prefix_len: int) -> int:
    """The netmask of ``prefix_len`` as an integer over ``bits`` address bits."""
    return ((1 << prefix_len) - 1) << (bits - prefix_len)


def network_of(addr: bytes, prefix_len: int) -> bytes:
    """``addr`` with the host bits cleared."""
    bits = _bits_of(addr)
    if not 0 <= prefix_len <= bits:
        raise ValueError(f"prefix length {prefix_len} out of 0..{bits}")
    value = int.from_bytes(addr, "big") & prefix_mask(bits, prefix_len)
    return value.to_bytes(len(addr), "big")


def _route_rank(route: Route) -> int:
    return route.metric


class _FamilyTable(NamedTuple):
    """One family's routes: ``levels`` is ``((prefix_len, mask, {net: routes}), ...)``
    longest prefix first; each ``routes`` tuple is sorted best metric first (stable,
    so equal metrics keep insertion order)."""

    levels: tuple[tuple[int, int, dict[int, tuple[Route, ...]]], ...]


_EMPTY_FAMILY = _FamilyTable(())


class _Snapshot(NamedTuple):
    generation: int
    v4: _FamilyTable
    v6: _FamilyTable


class RoutingTable:
    """Longest-prefix-match routing table for both families.

    Concurrency:
      readers   any thread, no lock: ``lookup``/``routes`` load ``self._snapshot`` once
                (one attribute load) and search that immutable value.
      writers   ``add``/``remove``/``add_connected``/``remove_interface`` must be
                serialised by the caller (the Host's routing lock); each builds a new
                snapshot and publishes it with one attribute store, pairing with the
                readers' load.
      observed  a reader sees the table before or after a change, never half of it, and
                the ``generation`` it returns belongs to the routes it searched.
    """

    def __init__(self) -> None:
        self._snapshot = _Snapshot(0, _EMPTY_FAMILY, _EMPTY_FAMILY)  # rcu: caller-serialised

    # -- reading ---------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """Bumped on every change; a cached lookup is valid while this is unchanged."""
        return self._snapshot.generation  # atomic: one attribute load (pairs with _publish)

    def lookup(self, dst: bytes, oif: int | None = None) -> Route | None:
        """The best route to ``dst``: longest prefix, then lowest metric, then the first
        added.  With ``oif`` only routes through that interface count (SO_BINDTODEVICE,
        link-local destinations with a scope)."""
        return self.lookup_with_generation(dst, oif)[0]

    def lookup_with_generation(
        self, dst: bytes, oif: int | None = None
    ) -> tuple[Route | None, int]:
        """``lookup`` plus the generation of the snapshot searched, for route caches."""
        snap = self._snapshot  # atomic: one attribute load (pairs with _publish)
        table = snap.v4 if len(dst) == 4 else snap.v6
        value = int.from_bytes(dst, "big")
        for _plen, mask, nets in table.levels:
            key = value & mask
            # ``in`` + subscript, not nets.get: the key is a fresh int
            # (rcunet.core.freethreaded, point 2).  Both reads are atomic on the
            # immutable-after-publish level dict.
            if key not in nets:
                continue
            routes = nets[key]
            if oif is None:
                return routes[0], snap.generation
            for route in routes:
                if route.ifindex == oif:
                    return route, snap.generation
        return None, snap.generation

    def routes(self, family: int | None = None) -> list[Route]:
        """Every route (longest prefix first), optionally of one family (4 or 6)."""
        snap = self._snapshot  # atomic: one attribute load
        tables = {4: (snap.v4,), 6: (snap.v6,), None: (snap.v4, snap.v6)}[family]
        return [
            route
            for table in tables
            for _plen, _mask, nets in table.levels
            for routes in nets.values()
            for route in routes
        ]

    def __len__(self) -> int:
        return len(self.routes())

    def __iter__(self) -> Iterator[Route]:
        return iter(self.routes())

    # -- writing (caller-serialised) ----------------------------------------------------

    def add(self, route: Route) -> Route:
        """Add ``route`` (its ``dst`` is masked to the prefix).  An identical route
        (same prefix, gateway, interface and metric) raises ``FileExistsError``
        (EEXIST), as ``ip route add`` does.  Returns the route as stored."""
        route = route._replace(dst=network_of(route.dst, route.prefix_len))
        if route.gateway is not None and len(route.gateway) != len(route.dst):
            raise ValueError("gateway and destination are of different families")
        current = self._routes_at(route.dst, route.prefix_len)
        if any(_same_route(route, other) for other in current):
            raise FileExistsError(17, "route exists", _describe(route))
        ranked = tuple(sorted((*current, route), key=_route_rank))
        self._replace_level(route.dst, route.prefix_len, ranked)
        return route

    def remove(self, route: Route) -> None:
        """Remove the route equal to ``route`` (prefix, gateway, interface, metric);
        ``ProcessLookupError`` (ESRCH) when there is none, as ``ip route del`` says."""
        dst = network_of(route.dst, route.prefix_len)
        current = self._routes_at(dst, route.prefix_len)
        probe = route._replace(dst=dst)
        kept = tuple(other for other in current if not _same_route(probe, other))
        if len(kept) == len(current):
            raise ProcessLookupError(3, "no such route", _describe(probe))
        self._replace_level(dst, route.prefix_len, kept)

    def add_connected(
        self, ifindex: int, address: bytes, prefix_len: int, metric: int | None = None
    ) -> Route:
        """The on-link route an interface address implies (``10.0.0.1/24`` ->
        ``10.0.0.0/24 dev ifindex src 10.0.0.1``)."""
        if metric is None:
            metric = IPV4_DEFAULT_METRIC if len(address) == 4 else IPV6_CONNECTED_METRIC
        return self.add(
            Route(address, prefix_len, ifindex, None, address, metric, 0, KIND_CONNECTED)
        )

    def add_default(
        self, gateway: bytes, ifindex: int, metric: int | None = None, prefsrc: bytes | None = None
    ) -> Route:
        """``default via gateway dev ifindex``."""
        if metric is None:
            metric = IPV4_DEFAULT_METRIC if len(gateway) == 4 else IPV6_DEFAULT_METRIC
        zero = bytes(len(gateway))
        return self.add(Route(zero, 0, ifindex, gateway, prefsrc, metric))

    def remove_interface(self, ifindex: int) -> list[Route]:
        """Drop every route through ``ifindex`` (the interface went down or away) in one
        publication; returns the routes removed."""
        removed = [route for route in self.routes() if route.ifindex == ifindex]
        if removed:
            snap = self._snapshot
            self._publish(
                _without(snap.v4, removed, 32), _without(snap.v6, removed, 128), snap.generation
            )
        return removed

    def replace_all(self, routes: Iterable[Route]) -> None:
        """Swap in a whole new set of routes in one publication (one generation bump)."""
        fresh = RoutingTable()
        for route in routes:
            fresh.add(route)
        snap = self._snapshot
        self._publish(fresh._snapshot.v4, fresh._snapshot.v6, snap.generation)

    # -- helpers -----------------------------------------------------------------------

    def _routes_at(self, net: bytes, prefix_len: int) -> tuple[Route, ...]:
        table = self._family(self._snapshot, net)
        key = int.from_bytes(net, "big")
        for plen, _mask, nets in table.levels:
            if plen == prefix_len:
                return nets.get(key, ())
        return ()

    @staticmethod
    def _family(snap: _Snapshot, addr: bytes) -> _FamilyTable:
        return snap.v4 if len(addr) == 4 else snap.v6

    def _replace_level(self, net: bytes, prefix_len: int, routes: tuple[Route, ...]) -> None:
        """Publish a snapshot where prefix ``net/prefix_len`` holds exactly ``routes``."""
        snap = self._snapshot
        bits = _bits_of(net)
        table = self._family(snap, net)
        key = int.from_bytes(net, "big")
        levels = {plen: dict(nets) for plen, _mask, nets in table.levels}
        nets = levels.setdefault(prefix_len, {})
        if routes:
            nets[key] = routes
        else:
            nets.pop(key, None)
        new_table = _build_family(levels, bits)
        if bits == 32:
            self._publish(new_table, snap.v6, snap.generation)
        else:
            self._publish(snap.v4, new_table, snap.generation)

    def _publish(self, v4: _FamilyTable, v6: _FamilyTable, generation: int) -> None:
        # One attribute store: readers see the old snapshot or this one (pairs with the
        # attribute loads in lookup_with_generation/routes/generation).
        self._snapshot = _Snapshot(generation + 1, v4, v6)


def _build_family(levels: dict[int, dict[int, tuple[Route, ...]]], bits: int) -> _FamilyTable:
    return _FamilyTable(
        tuple(
            (plen, prefix_mask(bits, plen), nets)
            for plen, nets in sorted(levels.items(), reverse=True)
            if nets
        )
    )


def _without(table: _FamilyTable, removed: list[Route], bits: int) -> _FamilyTable:
    gone = set(removed)
    levels: dict[int, dict[int, tuple[Route, ...]]] = {}
    for plen, _mask, nets in table.levels:
        kept_nets = {}
        for key, routes in nets.items():
            kept = tuple(route for route in routes if route not in gone)
            if kept:
                kept_nets[key] = kept
        levels[plen] = kept_nets
    return _build_family(levels, bits)


def _same_route(a: Route, b: Route) -> bool:
    """Linux's identity for ``ip route add/del``: prefix, gateway, device, metric."""
    return (
        a.dst == b.dst
        and a.prefix_len == b.prefix_len
        and a.gateway == b.gateway
        and a.ifindex == b.ifindex
        and a.metric == b.metric
    )


def _describe(route: Route) -> str:
    net = ipaddress.ip_address(route.dst)
    via = f" via {ipaddress.ip_address(route.gateway)}" if route.gateway else ""
    return f"{net}/{route.prefix_len}{via} dev {route.ifindex} metric {route.metric}"


# -- path MTU ------------------------------------------------------------------------------


class PmtuEntry(NamedTuple):
    mtu: int
    expires_at: int


def clamp_pmtu(dst: bytes, mtu: int) -> int:
    """The MTU Linux would record for an ICMP-advertised ``mtu`` towards ``dst``: never
    below ``IPV4_MIN_PMTU`` (552) for IPv4 or ``IPV6_MIN_MTU`` (1280) for IPv6, so a
    forged tiny MTU cannot force a flood of tiny fragments."""
    floor = IPV4_MIN_PMTU if len(dst) == 4 else IPV6_MIN_MTU
    return max(mtu, floor)


class PmtuStore:
    """Path MTUs per destination address, learned from ICMP, expiring after
    ``expires`` ns (Linux's route exceptions, ``fnhe_pmtu``).

    Concurrency:
      readers   ``get`` takes no lock: one ``dict.get`` (atomic) returning an immutable
                ``PmtuEntry``, paired with the single-key stores in ``update``/``expire``.
                An expired entry is ignored by readers and purged by the next writer.
      writers   ``update``/``expire``/``forget`` must be serialised by the caller.
    ``generation`` grows on every change so a route cache can re-read the MTU.
    """

    def __init__(self, expires: int = PMTU_EXPIRES_NS, max_entries: int = PMTU_MAX_ENTRIES) -> None:
        self.expires = expires  # immutable
        self.max_entries = max_entries  # immutable
        self._entries: dict[bytes, PmtuEntry] = {}  # writers caller-serialised; readers get()
        self.generation = 0  # written by writers only; one attribute store

    def get(self, dst: bytes, now: int) -> int | None:
        """The learned path MTU towards ``dst``, or ``None`` (none, or expired)."""
        entries = self._entries
        # atomic: dict containment, then a subscript (not dict.get: see
        # rcunet.core.freethreaded, point 2); both pair with the stores below.  Most
        # destinations have no entry, and a miss then raises no KeyError.
        if dst not in entries:
            return None
        try:
            entry = entries[dst]
        except KeyError:  # expired and dropped in between
            return None
        if entry.expires_at <= now:
            return None
        return entry.mtu

    def path_mtu(self, dst: bytes, link_mtu: int, now: int) -> int:
        """What to size packets to ``dst`` by: the smaller of the route/interface MTU
        and any learned path MTU."""
        learned = self.get(dst, now)
        return link_mtu if learned is None else min(link_mtu, learned)

    def update(self, dst: bytes, mtu: int, now: int) -> int | None:
        """Record an MTU from fragmentation-needed / packet-too-big.  Returns the new path
        MTU, or ``None`` when nothing changed (Linux only ever lowers a live PMTU: a
        larger advertised value is ignored until the entry expires)."""
        mtu = clamp_pmtu(dst, mtu)
        current = self.get(dst, now)
        if current is not None and mtu >= current:
            return None
        entries = self._entries
        entries.pop(dst, None)  # re-insert at the end: dict order is age order
        if len(entries) >= self.max_entries:
            self._evict_oldest()
        entries[dst] = PmtuEntry(mtu, now + self.expires)
        self.generation += 1
        return mtu

    def forget(self, dst: bytes) -> bool:
        if self._entries.pop(dst, None) is None:
            return False
        self.generation += 1
        return True

    def expire(self, now: int) -> int:
        """Drop expired entries; returns how many."""
        stale = [dst for dst, entry in self._entries.items() if entry.expires_at <= now]
        for dst in stale:
            del self._entries[dst]
        if stale:
            self.generation += 1
        return len(stale)

    def next_deadline(self) -> int | None:
        """When the oldest-inserted entry expires (every entry lives ``expires`` ns, so
        insertion order is expiry order)."""
        for entry in self._entries.values():
            return entry.expires_at
        return None

    def __len__(self) -> int:
        return len(self._entries)

    def _evict_oldest(self) -> None:
        oldest = next(iter(self._entries))
        del self._entries[oldest]
