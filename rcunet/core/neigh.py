"""Neighbour cache: the ARP / NDP state machine (RFC 4861 §7.3, Linux ``net/core/neighbour.c``).

One ``NeighbourTable`` serves one interface and one family; it does not know whether its
solicitations go out as ARP requests or Neighbor Solicitations.  It is sans-IO: events
come in as method calls with ``now`` (int ns), and every call returns *actions* for the
caller to carry out:

* ``Solicit(addr, lladdr)``: send an ARP request / NS for ``addr``; ``lladdr`` is
  ``None`` for a broadcast / solicited-node multicast probe and the neighbour's known
  link-layer address for a unicast re-probe (PROBE state).
* ``Transmit(addr, lladdr, packets)``: resolution finished; send the queued packets.
* ``Unreachable(addr, packets)``: resolution failed; answer each packet with ICMP
  host-unreachable (ICMPv6 address-unreachable) and drop it.
* ``Discard(addr, packets, reason)``: packets dropped without an ICMP answer (pending
  queue overflow, table full), counted in ``stats``.

States follow Linux: INCOMPLETE sends ``mcast_solicit`` broadcast probes ``retrans_time``
apart and then fails; REACHABLE lasts ``reachable_time`` after the last confirmation;
a STALE entry that carries traffic goes to DELAY, then to PROBE (``ucast_solicit``
unicast probes) unless confirmed within ``delay_first_probe_time``.  ``reachable_time``
is a parameter because Linux randomises it (0.5..1.5 x base_reachable_time) and core
takes no random numbers: the Host draws it and calls ``set_reachable_time``.

The table is bounded (``gc_thresh3``, forced GC at ``gc_thresh2``/``gc_thresh3`` as in
``neigh_alloc``/``neigh_forced_gc``; periodic GC of STALE/FAILED entries unused for
``gc_stale_time``), and so is each entry's pending-packet queue (``unres_qlen`` packets,
``unres_qlen_bytes`` bytes; the oldest packet is dropped first, as Linux does).

Not thread-safe, with one exception: the Host serialises calls on one table (its neighbour
lock), and ``lladdr_rcu`` - the per-packet fast path, Linux ``neigh_output`` /
``neigh_event_send`` on a NUD_CONNECTED, DELAY or PROBE entry - takes no lock.

Lookups in ``_entries`` are subscripts (``addr in d``, ``d[addr]``), never ``dict.get``:
``addr`` is a next-hop ``bytes`` made per packet, the case where free-threaded 3.13's
``dict.get`` spins (``rcunet.core.freethreaded``, point 2).
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
from collections import deque
from collections.abc import Iterable
from typing import Any

SECOND = 1_000_000_000
#: ``used`` is refreshed on the lock-free output path only when it is this old: Linux
#: stores ``jiffies`` (1-10 ms ticks), so its ``neigh->used`` moves once a tick however
#: many packets go out.  Every decision that reads ``used`` (DELAY after REACHABLE
#: times out, garbage collection of STALE entries) works on seconds.
USED_GRANULARITY = 1_000_000  # 1 ms, HZ=1000


class State(enum.Enum):
    NONE = "NONE"  # just allocated; becomes INCOMPLETE/STALE/PERMANENT before the call returns
    INCOMPLETE = "INCOMPLETE"
    REACHABLE = "REACHABLE"
    STALE = "STALE"
    DELAY = "DELAY"
    PROBE = "PROBE"
    FAILED = "FAILED"
    PERMANENT = "PERMANENT"

    def __str__(self) -> str:
        return self.value

    # Identity hash, as core/tcp/state.State has: members are singletons, and Enum's own
    # __hash__ is Python code (even compiled) run by every set lookup of a state.
    __hash__ = object.__hash__


INCOMPLETE = State.INCOMPLETE
REACHABLE = State.REACHABLE
STALE = State.STALE
DELAY = State.DELAY
PROBE = State.PROBE
FAILED = State.FAILED
PERMANENT = State.PERMANENT

#: Linux's NUD_VALID: states with a usable link-layer address.
VALID_STATES = frozenset({REACHABLE, STALE, DELAY, PROBE, PERMANENT})
#: NUD_CONNECTED: states whose address is known to work right now.
CONNECTED_STATES = frozenset({REACHABLE, PERMANENT})
#: States in which sending needs no state change (Linux ``neigh_event_send``'s early return;
#: asked once per packet sent).
_NO_EVENT_STATES = frozenset({REACHABLE, PERMANENT, DELAY, PROBE})


@dataclasses.dataclass(frozen=True, slots=True)
class NeighParams:
    """Per-table parameters, Linux names and defaults (``/proc/sys/net/ipv4/neigh/*``)."""

    retrans_time: int = 1 * SECOND
    reachable_time: int = 30 * SECOND
    delay_first_probe_time: int = 5 * SECOND
    mcast_solicit: int = 3
    ucast_solicit: int = 3
    unres_qlen: int = 101
    unres_qlen_bytes: int = 212992
    gc_thresh1: int = 128
    gc_thresh2: int = 512
    gc_thresh3: int = 1024
    gc_stale_time: int = 60 * SECOND
    gc_interval: int = 15 * SECOND  # periodic work runs every base_reachable_time / 2
    locktime: int = 1 * SECOND


# -- actions -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Solicit:
    """Send an ARP request / Neighbor Solicitation for ``addr`` (unicast to ``lladdr``
    when given, else broadcast / solicited-node multicast)."""

    addr: bytes
    lladdr: bytes | None


@dataclasses.dataclass(frozen=True, slots=True)
class Transmit:
    """``addr`` resolved to ``lladdr``: send these queued packets now, in order."""

    addr: bytes
    lladdr: bytes
    packets: tuple[Any, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Unreachable:
    """Resolution of ``addr`` failed: answer each packet with ICMP host unreachable."""

    addr: bytes
    packets: tuple[Any, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Discard:
    """Packets dropped without an ICMP answer; ``reason`` is "unres_qlen" (pending queue
    full, oldest dropped), "table_full" (no entry could be allocated), "gc" (the entry was
    garbage-collected) or "removed" (deleted by the administrator)."""

    addr: bytes
    packets: tuple[Any, ...]
    reason: str


Action = Solicit | Transmit | Unreachable | Discard

_NO_ACTIONS: tuple[Action, ...] = ()


class Entry:
    """One neighbour.  Mutable, owned by its table.

    Ordinary attributes, not ``__slots__``: ``lladdr_rcu`` reads ``state`` and
    ``lladdr`` from other threads, and on free-threaded 3.13 every such slot read takes
    the instance's mutex (``rcunet.core.freethreaded`` explains).
    """

    def __init__(self, addr: bytes, now: int) -> None:
        self.addr = addr
        self.state = State.NONE
        self.lladdr: bytes | None = None
        self.queue: deque[tuple[Any, int]] = deque()
        self.queue_bytes = 0
        self.probes = 0
        self.timer_at: int | None = None
        self.confirmed = now
        self.updated = now
        self.used = now

    def __repr__(self) -> str:
        return f"Entry({self.addr.hex()} {self.state} lladdr={self.lladdr!r} q={len(self.queue)})"


def _lookup(entries: dict[bytes, Entry], addr: bytes) -> Entry | None:
    """``entries.get(addr)`` spelled with subscripts (module docstring: why)."""
    return entries[addr] if addr in entries else None


class NeighbourTable:
    """Neighbour cache for one interface and one family.  See the module docstring.

    Concurrency: none inside; the caller serialises every method (the Host's
    per-interface neighbour lock) and carries out the returned actions after
    releasing that lock.
    """

    def __init__(self, params: NeighParams | None = None) -> None:
        self.params = params or NeighParams()
        self._entries: dict[bytes, Entry] = {}  # insertion order = gc_list order
        self._timers: list[tuple[int, bytes]] = []  # heap; stale items skipped lazily
        self._gc_at: int | None = None
        self._last_forced_gc: int | None = None
        #: ``/proc/net/stat/arp_cache`` (``ndisc_cache``) counter names.
        self.stats: dict[str, int] = dict.fromkeys(
            ("entries", "allocs", "destroys", "lookups", "hits", "res_failed",
             "unresolved_discards", "periodic_gc_runs", "forced_gc_runs", "table_fulls"),
            0,
        )

    # -- inspection --------------------------------------------------------------------

    def get(self, addr: bytes) -> Entry | None:
        return _lookup(self._entries, addr)

    def state_of(self, addr: bytes) -> State | None:
        entry = _lookup(self._entries, addr)
        return None if entry is None else entry.state

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, addr: object) -> bool:
        return addr in self._entries

    def set_reachable_time(self, reachable_time: int) -> None:
        """The Host re-draws Linux's randomised reachable time now and then."""
        self.params = dataclasses.replace(self.params, reachable_time=reachable_time)

    # -- output path -------------------------------------------------------------------

    def lladdr_rcu(self, addr: bytes, now: int) -> bytes | None:
        """The link-layer address to send to ``addr`` now if no state change is due -
        the entry is REACHABLE, PERMANENT, DELAY or PROBE - else ``None`` (then call
        ``resolve`` under the lock).  Lock-free, as Linux's ``neigh_event_send`` returns
        at once for NUD_CONNECTED | NUD_DELAY | NUD_PROBE and ``neigh_output`` reads the
        address without the entry's lock; like them it counts no lookup and updates
        ``used`` with a plain store.

        Reads, each one atomic: a dict subscript on ``_entries`` (pairs with the locked
        writers' dict set/del), then ``entry.state`` and ``entry.lladdr`` (one attribute
        load each, pairing with ``_set_state`` and ``_update``).  A racing change of state
        may send one more packet to the address the entry had, as in Linux; an entry
        whose new state is stored before its first address returns ``None``."""
        try:
            entry = self._entries[addr]
        except KeyError:  # not yet resolved (or just destroyed): the locked path decides
            return None
        if entry.state not in _NO_EVENT_STATES:
            return None
        if now - entry.used >= USED_GRANULARITY:
            # atomic: one attribute store (Linux WRITE_ONCE).  Once a tick, not per
            # packet: on free-threaded builds each store drops an int another sending
            # thread made, which goes back through that thread's biased-refcount queue.
            entry.used = now
        return entry.lladdr

    def resolve(
        self, addr: bytes, now: int, packet: Any = None, size: int = 0
    ) -> tuple[bytes | None, tuple[Action, ...] | list[Action]]:
        """A packet wants to go to neighbour ``addr``.

        Returns ``(lladdr, actions)``: with a link-layer address the caller sends
        ``packet`` itself; with ``None`` the packet (``size`` bytes, for the queue bound)
        was queued, or dropped as an action says.  ``packet=None`` only starts resolution.
        """
        self.stats["lookups"] += 1
        entry = _lookup(self._entries, addr)
        if entry is not None:
            entry.used = now
            state = entry.state
            if state in VALID_STATES:
                self.stats["hits"] += 1
                if state is STALE:
                    # RFC 4861 §7.3.3: traffic to a STALE entry starts the DELAY timer.
                    entry.state = DELAY
                    entry.updated = now
                    self._arm(entry, now + self.params.delay_first_probe_time)
                return entry.lladdr, _NO_ACTIONS
        actions: list[Action] = []
        if entry is None:
            entry = self._create(addr, now, actions)
            if entry is None:
                if packet is not None:
                    actions.append(Discard(addr, (packet,), "table_full"))
                return None, actions
        if entry.state is not INCOMPLETE:  # new or FAILED: (re)start resolution
            self._start_incomplete(entry, now, actions)
        if packet is not None:
            self._enqueue(entry, packet, size, actions)
        return None, actions

    # -- input path --------------------------------------------------------------------

    def solicitation_received(
        self, addr: bytes, lladdr: bytes, now: int
    ) -> list[Action]:
        """``addr`` asked for one of our addresses and told us its ``lladdr`` (ARP request
        to us; NS with a source link-layer option).  Creates or refreshes the entry as
        STALE (Linux ``neigh_event_ns``; RFC 4861 §7.2.3)."""
        actions: list[Action] = []
        entry = _lookup(self._entries, addr)
        if entry is None:
            entry = self._create(addr, now, actions)
            if entry is None:
                return actions
        self._update(entry, lladdr, STALE, now, override=True, weak_override=False,
                     actions=actions)
        return actions

    def advertisement_received(
        self,
        addr: bytes,
        lladdr: bytes | None,
        now: int,
        *,
        solicited: bool,
        override: bool,
    ) -> list[Action]:
        """A Neighbor Advertisement for ``addr`` (RFC 4861 §7.2.5).  Only updates an
        existing entry: unsolicited advertisements never create one."""
        entry = _lookup(self._entries, addr)
        if entry is None:
            return []
        actions: list[Action] = []
        new = REACHABLE if solicited else STALE
        self._update(entry, lladdr, new, now, override=override, weak_override=True,
                     actions=actions)
        return actions

    def arp_received(
        self, addr: bytes, lladdr: bytes, now: int, *, reply_to_us: bool, gratuitous: bool = False
    ) -> list[Action]:
        """An ARP message from ``addr`` for an existing entry (Linux ``arp_process``):
        a unicast reply confirms reachability; anything else only makes the entry STALE.
        The link-layer address may change only after ``locktime`` since the last
        update, or when the message is gratuitous."""
        entry = _lookup(self._entries, addr)
        if entry is None:
            return []
        actions: list[Action] = []
        override = gratuitous or now > entry.updated + self.params.locktime
        new = REACHABLE if reply_to_us else STALE
        self._update(entry, lladdr, new, now, override=override, weak_override=False,
                     actions=actions)
        return actions

    def confirm(self, addr: bytes, now: int) -> None:
        """Upper-layer reachability confirmation (TCP forward progress, ``MSG_CONFIRM``):
        Linux records the time; the DELAY/REACHABLE timers act on it."""
        entry = _lookup(self._entries, addr)
        if entry is not None:
            entry.confirmed = now

    def add_permanent(self, addr: bytes, lladdr: bytes, now: int) -> list[Action]:
        """A static entry (``ip neigh add ... nud permanent``): never probed or collected."""
        actions: list[Action] = []
        entry = _lookup(self._entries, addr)
        if entry is None:
            entry = Entry(addr, now)
            self._insert(entry)
        entry.lladdr = lladdr
        self._set_state(entry, PERMANENT, now)
        self._release_queue(entry, actions)
        return actions

    def remove(self, addr: bytes) -> list[Action]:
        """Delete an entry (``ip neigh del``); queued packets are discarded."""
        entry = _lookup(self._entries, addr)
        if entry is None:
            return []
        actions: list[Action] = []
        self._destroy(entry, actions, "removed")
        return actions

    # -- timers ------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """The earliest time ``poll`` has work to do, or ``None``."""
        timers = self._timers
        entries = self._entries
        while timers:
            at, addr = timers[0]
            entry = _lookup(entries, addr)
            if entry is not None and entry.timer_at == at:
                break
            heapq.heappop(timers)  # stale: the entry was re-armed or destroyed
        first = timers[0][0] if timers else None
        gc_at = self._gc_at if len(entries) >= self.params.gc_thresh1 else None
        if first is None:
            return gc_at
        return first if gc_at is None else min(first, gc_at)

    def poll(self, now: int) -> list[Action]:
        """Run every timer due at ``now`` and the periodic garbage collection."""
        actions: list[Action] = []
        timers = self._timers
        while timers and timers[0][0] <= now:
            at, addr = heapq.heappop(timers)
            entry = _lookup(self._entries, addr)
            if entry is None or entry.timer_at != at:
                continue
            entry.timer_at = None
            self._timer_fired(entry, now, actions)
        if self._gc_at is None:
            self._gc_at = now + self.params.gc_interval
        elif now >= self._gc_at:
            self._gc_at = now + self.params.gc_interval
            if len(self._entries) >= self.params.gc_thresh1:
                self._periodic_gc(now, actions)
        return actions

    def _timer_fired(self, entry: Entry, now: int, actions: list[Action]) -> None:
        """Linux ``neigh_timer_handler``."""
        p = self.params
        state = entry.state
        if state is REACHABLE:
            if now < entry.confirmed + p.reachable_time:
                self._arm(entry, entry.confirmed + p.reachable_time)
            elif now <= entry.used + p.delay_first_probe_time:
                self._set_state(entry, DELAY, now)
                self._arm(entry, now + p.delay_first_probe_time)
            else:
                self._set_state(entry, STALE, now)
            return
        if state is DELAY:
            if now <= entry.confirmed + p.delay_first_probe_time:
                self._set_state(entry, REACHABLE, now)
                self._arm(entry, entry.confirmed + p.reachable_time)
                return
            self._set_state(entry, PROBE, now)
            entry.probes = 0
        if entry.state in (INCOMPLETE, PROBE):
            limit = p.mcast_solicit if entry.state is INCOMPLETE else p.ucast_solicit
            if entry.probes >= limit:
                self._fail(entry, now, actions)
                return
            self._arm(entry, now + p.retrans_time)
            self._probe(entry, actions)

    # -- state changes -----------------------------------------------------------------

    def _update(
        self,
        entry: Entry,
        lladdr: bytes | None,
        new: State,
        now: int,
        *,
        override: bool,
        weak_override: bool,
        actions: list[Action],
    ) -> None:
        """Linux ``__neigh_update`` for NUD_REACHABLE / NUD_STALE updates."""
        old = entry.state
        if old is PERMANENT:
            return
        if lladdr is None:
            if old not in VALID_STATES:
                return  # an advertisement without an address cannot resolve anything
            lladdr = entry.lladdr
        if new in CONNECTED_STATES:
            entry.confirmed = now
        if old in VALID_STATES:
            if lladdr != entry.lladdr and not override:
                if weak_override and old in CONNECTED_STATES:
                    lladdr = entry.lladdr  # RFC 4861: keep the address, but doubt it
                    new = STALE
                else:
                    return
            elif lladdr == entry.lladdr and new is STALE:
                new = old  # nothing new learned: keep REACHABLE/DELAY/PROBE as they are
        if new is not old or lladdr != entry.lladdr:
            entry.updated = now
        if new is not old:
            self._set_state(entry, new, now)
            if new is REACHABLE:
                self._arm(entry, now + self.params.reachable_time)
        if lladdr != entry.lladdr:
            entry.lladdr = lladdr
            if new not in CONNECTED_STATES:
                # Linux backdates `confirmed` so the next use probes the new address.
                entry.confirmed = now - 2 * self.params.delay_first_probe_time
        if old not in VALID_STATES and new is not old:
            self._release_queue(entry, actions)

    def _set_state(self, entry: Entry, state: State, now: int) -> None:
        entry.state = state
        entry.updated = now
        if state not in (INCOMPLETE, REACHABLE, DELAY, PROBE):
            entry.timer_at = None

    def _start_incomplete(self, entry: Entry, now: int, actions: list[Action]) -> None:
        self._set_state(entry, INCOMPLETE, now)
        entry.probes = 0
        self._arm(entry, now + self.params.retrans_time)
        self._probe(entry, actions)

    def _probe(self, entry: Entry, actions: list[Action]) -> None:
        entry.probes += 1
        unicast = entry.lladdr if entry.state is PROBE else None
        actions.append(Solicit(entry.addr, unicast))

    def _fail(self, entry: Entry, now: int, actions: list[Action]) -> None:
        """``neigh_invalidate``: FAILED, and every queued packet goes back for ICMP."""
        self._set_state(entry, FAILED, now)
        self.stats["res_failed"] += 1
        packets = self._drain(entry)
        if packets:
            actions.append(Unreachable(entry.addr, packets))

    def _arm(self, entry: Entry, at: int) -> None:
        entry.timer_at = at
        heapq.heappush(self._timers, (at, entry.addr))

    # -- pending queue -----------------------------------------------------------------

    def _enqueue(self, entry: Entry, packet: Any, size: int, actions: list[Action]) -> None:
        p = self.params
        dropped = []
        while entry.queue and (
            len(entry.queue) >= p.unres_qlen or entry.queue_bytes + size > p.unres_qlen_bytes
        ):
            old_packet, old_size = entry.queue.popleft()
            entry.queue_bytes -= old_size
            dropped.append(old_packet)
        if dropped:
            self.stats["unresolved_discards"] += len(dropped)
            actions.append(Discard(entry.addr, tuple(dropped), "unres_qlen"))
        entry.queue.append((packet, size))
        entry.queue_bytes += size

    def _drain(self, entry: Entry) -> tuple[Any, ...]:
        packets = tuple(packet for packet, _size in entry.queue)
        entry.queue.clear()
        entry.queue_bytes = 0
        return packets

    def _release_queue(self, entry: Entry, actions: list[Action]) -> None:
        packets = self._drain(entry)
        if packets and entry.lladdr is not None:
            actions.append(Transmit(entry.addr, entry.lladdr, packets))

    # -- allocation and garbage collection -------------------------------------------------

    def _create(self, addr: bytes, now: int, actions: list[Action]) -> Entry | None:
        """Linux ``neigh_alloc``: forced GC when the table is big; refuse when full."""
        p = self.params
        count = len(self._entries)
        recently = self._last_forced_gc is not None and now < self._last_forced_gc + 5 * SECOND
        if count >= p.gc_thresh3 or (count >= p.gc_thresh2 and not recently):
            self._last_forced_gc = now
            freed = self._forced_gc(now, actions)
            if not freed and count >= p.gc_thresh3:
                self.stats["table_fulls"] += 1
                return None
        entry = Entry(addr, now)
        self._insert(entry)
        if self._gc_at is None:
            self._gc_at = now + p.gc_interval
        return entry

    def _insert(self, entry: Entry) -> None:
        self._entries[entry.addr] = entry
        self.stats["allocs"] += 1
        self.stats["entries"] = len(self._entries)

    def _destroy(self, entry: Entry, actions: list[Action], reason: str) -> None:
        del self._entries[entry.addr]
        entry.timer_at = None
        packets = self._drain(entry)
        if packets:
            actions.append(Discard(entry.addr, packets, reason))
        self.stats["destroys"] += 1
        self.stats["entries"] = len(self._entries)

    def _forced_gc(self, now: int, actions: list[Action]) -> int:
        """Linux ``neigh_forced_gc``: oldest first, drop FAILED entries and any entry not
        updated for 5 s (never PERMANENT), until the table is down to ``gc_thresh2``."""
        self.stats["forced_gc_runs"] += 1
        target = self.params.gc_thresh2
        cutoff = now - 5 * SECOND
        victims: list[Entry] = []
        excess = len(self._entries) - target
        for entry in self._entries.values():
            if len(victims) >= max(excess, 1):
                break
            if entry.state is PERMANENT:
                continue
            if entry.state is FAILED or entry.updated <= cutoff:
                victims.append(entry)
        for entry in victims:
            self._destroy(entry, actions, "gc")
        return len(victims)

    def _periodic_gc(self, now: int, actions: list[Action]) -> None:
        """Linux ``neigh_periodic_work``: drop STALE/FAILED entries unused for
        ``gc_stale_time`` (entries with a running timer are left alone)."""
        self.stats["periodic_gc_runs"] += 1
        stale_before = now - self.params.gc_stale_time
        victims = [
            entry
            for entry in self._entries.values()
            if entry.state in (STALE, FAILED) and max(entry.used, entry.confirmed) < stale_before
        ]
        for entry in victims:
            self._destroy(entry, actions, "gc")

    def entries(self) -> Iterable[Entry]:
        return tuple(self._entries.values())
