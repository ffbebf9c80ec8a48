"""UDP multicast and broadcast delivery: ``__udp4_lib_mcast_deliver`` /
``__udp6_lib_mcast_deliver`` (reference §6.5), old and new, selected by Tuning.

Which chains are walked (``Tuning.udp_mcast_hash2``):

* legacy: the whole primary chain of the destination port;
* modern: when the primary slot holds more than 10 sockets, the hash2 slot of
  (daddr, port) and then the one of (wildcard, port), the second skipped when both are
  the same slot (2014, "udp: Use hash2 for long hash1 chains").  Every socket sits in
  exactly one hash2 slot, so each is visited once.

How receivers are reached (``Tuning.udp_mcast_deliver_unlocked``):

* legacy (the seed's "before"): under each walked slot's lock, deliver to every match
  as it is found - clone, callback - so the lock is held for the whole fan-out;
* modern, ``UdpTable.mcast_collect == "rcu"`` (the default; Linux since 2016, "udp: no
  longer use SLAB_DESTROY_BY_RCU"): no lock and no reference at all.  Inside one RCU read
  section of ``table.rcu``, walk the chain snapshots into an array of matches, then
  deliver to them.  A socket closed meanwhile may still get this datagram, but its
  destructor (``release``, queued by ``call_rcu``) cannot run before the read section
  ends, so nothing is ever delivered to a socket whose close completed;
* modern, ``mcast_collect == "locked"`` (2009 "Optimise multicast reception" + 2014):
  collect and pin under each slot's lock, deliver after unlocking.

Receivers get the datagram as Linux hands out skbs: the *first* match gets the original,
every other one a ``clone`` made before the original is handed over; a failed clone
(``clone`` returns None or raises MemoryError) bumps that socket's ``drops`` and the
``UdpRcvbufErrors``/``UdpInErrors`` counters and does not affect the others.  No match
counts ``UdpIgnoredMulti``.

Reference §8.2 behaviours covered (tests in tests/tables/test_udp_mcast*.py):

* 42 - N sockets on one port, N > 10 (the hash2 path) and ``hash2(daddr) ==
  hash2(ANY)``: each matching socket receives exactly once; under concurrent add/remove
  a socket present throughout receives exactly one copy, one added or removed receives
  0 or 1, and none receives after its close completed (its destructor ran);
  first match gets the original, the others clones; a clone failure is per socket;
  no match counts IgnoredMulti;
* 43 - the membership/source filter (``ip_mc_sf_allow``) excludes sockets that did not
  join the group on that interface (with IP_MULTICAST_ALL off) or filter the source.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

from rcunet.sync.hooks import yield_point
from rcunet.sync.shards import ShardedStats
from rcunet.tables.entry import AF_INET6
from rcunet.tables.udp_entry import UdpEntry, mcast_allowed, v4_view
from rcunet.wire.addr import ANY4, ANY6

if TYPE_CHECKING:
    from rcunet.tables.udp import UdpSlot, UdpTable
    from rcunet.tuning import Tuning

Deliver = Callable[[UdpEntry, object], None]
Clone = Callable[[object], object]

_perf_ns = time.perf_counter_ns


def copy_datagram(datagram: object) -> object:
    """The default clone: ``bytes`` are immutable and shared (as ``skb_clone`` shares
    data); anything else buffer-like is copied into new ``bytes``."""
    if type(datagram) is bytes:
        return datagram
    return bytes(datagram)  # type: ignore[call-overload]


class McastStats(ShardedStats):
    """Per-thread counters of multicast delivery (reference §8.3: counts, not times).

    ``packets`` datagrams handled, ``receivers`` matches pinned/delivered, ``clones``
    copies made, ``UdpRcvbufErrors``/``UdpInErrors`` failed clones, ``UdpIgnoredMulti``
    datagrams nobody wanted, ``lock_sections``/``lock_hold_ns`` slot-lock critical
    sections taken by delivery and the time they were held.

    Concurrency: each thread writes only its own shard (owner: that thread); ``snapshot``
    copies every registered shard (``list(shard)``) under ``_lock``, which is taken once
    per thread for registration.
    """

    FIELDS: ClassVar[tuple[str, ...]] = ("packets", "receivers", "clones", "UdpRcvbufErrors",
                                         "UdpInErrors", "UdpIgnoredMulti", "lock_sections",
                                         "lock_hold_ns")



# Shard indexes.
_PACKETS, _RECEIVERS, _CLONES, _RCVBUFERR, _INERR, _IGNORED, _SECTIONS, _HOLD = range(8)


# --- the per-socket filter -------------------------------------------------------------
def is_mcast_sock4(sk: UdpEntry, daddr: bytes, dport: int, saddr: bytes, sport: int,
                   dif: int) -> bool:
    """``__udp_is_mcast_sock``: same port; connected peer (address, port) equal to the
    sender or unset; bound address equal to ``daddr`` or wildcard; not v6only; bound
    device unset or ``dif``; then the group membership/source filter."""
    laddr, lport, faddr, fport = sk.key  # atomic: one attribute load (set_key's last store)
    if lport != dport:
        return False
    if sk.family == AF_INET6:
        if sk.v6only:
            return False
        laddr = v4_view(laddr)
        faddr = v4_view(faddr)
    if (faddr != ANY4 and faddr != saddr) or (fport and fport != sport):
        return False
    if laddr != ANY4 and laddr != daddr:
        return False
    dev = sk.bound_dev
    if dev and dev != dif:
        return False
    return mcast_allowed(sk, daddr, saddr, dif)


def is_mcast_sock6(sk: UdpEntry, daddr: bytes, dport: int, saddr: bytes, sport: int,
                   dif: int) -> bool:
    """``__udp_v6_is_mcast_sock``: as the IPv4 test, for PF_INET6 sockets only, then
    ``inet6_mc_check``."""
    laddr, lport, faddr, fport = sk.key  # atomic: one attribute load
    if lport != dport or sk.family != AF_INET6:
        return False
    if (fport and fport != sport) or (faddr != ANY6 and faddr != saddr):
        return False
    dev = sk.bound_dev
    if dev and dev != dif:
        return False
    if laddr != ANY6 and laddr != daddr:
        return False
    return mcast_allowed(sk, daddr, saddr, dif)


MatchFn = Callable[[UdpEntry, bytes, int, bytes, int, int], bool]


def mcast_slots(table: UdpTable, daddr: bytes, dport: int, use_hash2: bool) -> Sequence[UdpSlot]:
    """The chains to walk: the primary slot, or - modern, primary count > 10 - the hash2
    slots of (daddr, port) and (wildcard, port), once if they coincide."""
    hslot = table.primary_slot(dport)
    # A racy int load (see UdpSlot): either answer walks a complete index.
    if not use_hash2 or hslot.count <= 10:
        return (hslot,)
    slot2 = table.secondary_slot(table.portaddr_hash(daddr, dport))
    # portaddr_hash(ANY, port) == portaddr_hash(ANY, 0) ^ port (the address part is
    # computed once, as udp_lib_get_port's hash2_nulladdr).
    slot2_any = table.secondary_slot(table.any_portaddr_hash ^ dport)
    if slot2 is slot2_any:
        return (slot2,)
    return (slot2, slot2_any)


def mcast_deliver(table: UdpTable, daddr: bytes, dport: int, saddr: bytes, sport: int,
                  ifindex: int, datagram: object, deliver: Deliver, *,
                  clone: Clone | None = None, tuning: Tuning | None = None,
                  collect: str | None = None) -> int:
    """Deliver ``datagram`` (sent from ``saddr:sport`` to the multicast or broadcast
    ``daddr:dport``, received on ``ifindex``) to every matching socket of ``table``:
    ``deliver(sk, datagram_or_clone)`` once per receiver.  Returns the number of
    receivers.  ``deliver`` must not raise; it runs with no table lock held in the
    modern modes and under the slot lock in the legacy one.  ``tuning``/``collect``
    override the table's for this call (benchmarks compare modes on one table)."""
    if tuning is None:
        tuning = table.tuning  # one attribute load
    slots = mcast_slots(table, daddr, dport, tuning.udp_mcast_hash2)
    clone_fn = clone if clone is not None else copy_datagram
    shard = table.mcast_stats.shard()
    shard[_PACKETS] += 1  # owner: this thread
    match: MatchFn = is_mcast_sock4 if len(daddr) == 4 else is_mcast_sock6
    if not tuning.udp_mcast_deliver_unlocked:
        count = _deliver_under_lock(table, slots, match, daddr, dport, saddr, sport, ifindex,
                                    datagram, deliver, clone_fn, shard)
    elif (collect if collect is not None else table.mcast_collect) == "rcu":
        section = table.rcu.section()
        section.enter()
        try:
            receivers = _collect_rcu(slots, match, daddr, dport, saddr, sport, ifindex)
            yield_point("udp.mcast.collected")
            count = len(receivers)
            if count == 1:  # the common case: the original, no clone
                deliver(receivers[0], datagram)
            elif count:
                _fan_out(receivers, datagram, deliver, clone_fn, shard)
        finally:
            section.exit()
    else:
        receivers = _collect_locked(slots, match, daddr, dport, saddr, sport, ifindex,
                                    shard)
        yield_point("udp.mcast.collected")
        count = len(receivers)
        try:
            _fan_out(receivers, datagram, deliver, clone_fn, shard)
        finally:
            for sk in receivers:
                table.put(sk)
    shard[_RECEIVERS] += count
    if not count:
        shard[_IGNORED] += 1
    return count


def _collect_rcu(slots: Sequence[UdpSlot], match: MatchFn, daddr: bytes, dport: int,
                 saddr: bytes, sport: int, dif: int) -> list[UdpEntry]:
    """The lockless walk (caller is in an RCU read section): the matches of each chain
    snapshot, each socket once.  Every socket walked gets the full ``match`` test, as in
    the locked walks: the modes differ in which chains they walk and what they lock,
    never in what one socket's test costs."""
    receivers: list[UdpEntry] = []
    # atomic: one attribute load of each chain, paired with the writers' single store.
    for sk in slots[0].chain:
        if match(sk, daddr, dport, saddr, sport, dif):
            receivers.append(sk)
    if len(slots) == 2:
        yield_point("udp.mcast.between_chains")
        seen = set(map(id, receivers)) if receivers else None
        for sk in slots[1].chain:
            if match(sk, daddr, dport, saddr, sport, dif):
                # A socket moved by a concurrent rehash could sit in both snapshots.
                if seen is None or id(sk) not in seen:
                    receivers.append(sk)
    return receivers


def _collect_locked(slots: Sequence[UdpSlot], match: MatchFn, daddr: bytes, dport: int,
                    saddr: bytes, sport: int, dif: int, shard: list[int]) -> list[UdpEntry]:
    """Collect and pin under each slot's lock (writers are excluded, so every hashed
    entry is alive and its get succeeds); delivery happens after the unlock."""
    receivers: list[UdpEntry] = []
    seen: set[int] | None = None
    for index, slot in enumerate(slots):
        if index:
            yield_point("udp.mcast.between_chains")
        if index and receivers:
            # Between the two walks a rehash may move a socket we already pinned.
            seen = {id(sk) for sk in receivers}
        with slot.lock:
            started = _perf_ns()
            yield_point("udp.mcast.locked_walk")
            for sk in slot.chain:
                if match(sk, daddr, dport, saddr, sport, dif) \
                        and (seen is None or id(sk) not in seen) and sk.ref.get():
                    receivers.append(sk)
            shard[_HOLD] += _perf_ns() - started  # owner: this thread
        shard[_SECTIONS] += 1
    return receivers


def _deliver_under_lock(table: UdpTable, slots: Sequence[UdpSlot], match: MatchFn,
                        daddr: bytes, dport: int, saddr: bytes, sport: int, dif: int,
                        datagram: object, deliver: Deliver, clone: Clone,
                        shard: list[int]) -> int:
    """The legacy fan-out: every match served while its slot lock is held.  The first
    match is pinned so the original can go to it at the end (under the last lock)."""
    first: UdpEntry | None = None
    count = 0
    last = len(slots) - 1
    # With two hash2 walks, a rehash between them may move a served socket into the
    # second chain: remember who was served by the first walk.
    served: set[int] | None = set() if last else None
    try:
        for index, slot in enumerate(slots):
            if index:
                yield_point("udp.mcast.between_chains")
            with slot.lock:
                started = _perf_ns()
                yield_point("udp.mcast.locked_walk")
                for sk in slot.chain:
                    if not match(sk, daddr, dport, saddr, sport, dif):
                        continue
                    if served is not None:
                        if index:
                            if id(sk) in served:
                                continue
                        else:
                            served.add(id(sk))
                    count += 1
                    if first is None:
                        if sk.ref.get():
                            first = sk
                        continue
                    _deliver_clone(sk, datagram, deliver, clone, shard)
                if index == last and first is not None:
                    deliver(first, datagram)
                shard[_HOLD] += _perf_ns() - started  # owner: this thread
            shard[_SECTIONS] += 1
    finally:
        if first is not None:
            table.put(first)
    return count


def _fan_out(receivers: list[UdpEntry], datagram: object, deliver: Deliver, clone: Clone,
             shard: list[int]) -> None:
    """Clones to all but the first receiver, then the original to the first (each clone
    through ``_deliver_clone``, as the legacy walk delivers them)."""
    for index in range(1, len(receivers)):
        _deliver_clone(receivers[index], datagram, deliver, clone, shard)
    if receivers:
        deliver(receivers[0], datagram)


def _deliver_clone(sk: UdpEntry, datagram: object, deliver: Deliver, clone: Clone,
                   shard: list[int]) -> None:
    try:
        copy = clone(datagram)
    except MemoryError:
        copy = None
    if copy is None:
        sk.add_drop()
        shard[_RCVBUFERR] += 1
        shard[_INERR] += 1
        return
    shard[_CLONES] += 1
    deliver(sk, copy)
