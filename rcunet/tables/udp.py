"""UDP socket tables (reference §6): the primary hash by local port (``hslot``), the
secondary hash by (local address, local port) (``hslot2``), bind with Linux's conflict
rules and ephemeral search (``udp_lib_get_port``), unicast lookup scoring
(``__udp4_lib_lookup`` / ``__udp6_lib_lookup``), SO_REUSEPORT groups, connect()'s rehash,
and multicast/broadcast delivery (in ``udp_mcast``, re-exported as
``UdpTable.mcast_deliver``).

How the Linux mechanisms map to Python:

* ``udp_hslot {head, count, lock}``  ->  ``UdpSlot``: an immutable tuple chain replaced by
  one attribute store under the slot's instrumented lock, the count Linux keeps, the lock.
  Inserts go at the chain head (``sk_add_node_rcu``); an IPv6 SO_REUSEPORT socket goes at
  the tail of its hash2 chain, as Linux does.
* RCU readers (``udp4_lib_lookup2``, the multicast walk)  ->  one attribute load of a
  slot's chain, then a scan of that snapshot with no lock.
* ``SOCK_RCU_FREE``  ->  entries are unhashed under the slot locks before their owner drops
  its reference, and the last ``put`` hands the table's ``release`` callback (the socket
  destructor) to ``call_rcu``: it runs only after every RCU reader that could still hold
  the entry has left its read section.  A reader that pins (``ref.get()``) an entry from
  an old snapshot either fails (the entry is dead) or keeps it alive until it puts it
  back.  UDP entries are never recycled into another identity (not
  SLAB_TYPESAFE_BY_RCU), so the multicast walk needs only the read section.
* Bucket indexes come from the per-host ``HashSecret`` (``net_hash_mix`` for the primary,
  the keyed ``ipv{4,6}_portaddr_hash`` for the secondary), so 0.0.0.0, ``::`` and
  ``::ffff:0.0.0.0`` share one hash2 slot and ``a.b.c.d`` shares one with
  ``::ffff:a.b.c.d``.

Reference §8.2 behaviours covered here (tests in tests/tables/test_udp_*.py):

* 15 - a wildcard bind always scans the primary slot, so it conflicts with 11 (or more)
  specific-address binds exactly as with 10 (``inet_use_hash2_on_bind``, the 2026 fix);
  also for ``::`` and ``::ffff:0.0.0.0``;
* 39 - the ephemeral search visits every in-range port exactly once, slot by slot, one
  slot lock at a time (``ephemeral_slots`` is the pure search order; seeded RNG);
* 40 - an explicit bind of a specific address on a port whose primary slot holds more than
  10 sockets checks the two hash2 slots (address, then wildcard) only;
* 41 - unicast lookup returns the highest score; connected beats unconnected; the exact
  address slot is tried before the wildcard one; reuseport groups pick by
  ``reciprocal_scale(4-tuple hash)``, skip connected members, same flow -> same member;
* 44 - a reuseport member is published together with the count (``udp_reuseport``).

Yield points (rcunet.sync.hooks) for forcing interleavings: ``udp.bind.between_slots``,
``udp.unhash.between_slots``, ``udp.rehash.between_slots`` (between the primary and the
hash2 publication), ``udp.lookup.before_pin`` / ``udp.lookup.after_pin``,
``udp.reuseport.before_publish``; multicast: ``udp.mcast.locked_walk`` (slot lock held),
``udp.mcast.between_chains`` (between the two hash2 walks, no lock held),
``udp.mcast.collected`` (receivers known, nothing delivered yet).

Errors: ``bind`` raises OSError EINVAL (already bound, bad port/address), EADDRINUSE
(conflict, and also an exhausted ephemeral range: ``__inet_bind`` turns any
``get_port`` failure into EADDRINUSE); ``autobind`` (sendto/connect on an unbound socket)
raises EAGAIN when the range is exhausted, as ``inet_autobind`` does (commit 7a7160edf1bf,
"net: Return errno in sk->sk_prot->get_port()").
"""

from __future__ import annotations

import errno
import random
import threading
from collections.abc import Callable, Iterator
from typing import ClassVar, cast

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.sync import lockdep
from rcunet.sync.hooks import yield_point
from rcunet.sync.lock import Lock, LockClass
from rcunet.sync.rcu import Rcu
from rcunet.sync.shards import ShardedStats
from rcunet.tables.entry import AF_INET, AF_INET6, State, check_address, check_port, rcv_saddr_equal
from rcunet.tables.secret import HashSecret
from rcunet.tables.udp_entry import UdpEntry, v4_view
from rcunet.tables.udp_mcast import McastStats, mcast_deliver
from rcunet.tables.udp_reuseport import ReuseportGroup, reciprocal_scale
from rcunet.tuning import Tuning
from rcunet.wire.addr import ANY4, ANY6, is_any, is_v4mapped

HSLOT_LOCK = LockClass("udp_hslot_lock")
HSLOT2_LOCK = LockClass("udp_hslot2_lock")
# udp_lib_get_port / udp_lib_unhash / udp_lib_rehash nest one hslot2 lock inside the
# primary lock; two hslot2 locks (or two primary locks) are never held together.
lockdep.declare_order("udp_hslot_lock", "udp_hslot2_lock")

#: ``UDP_HTABLE_SIZE_MIN`` (256 unless CONFIG_BASE_SMALL); primary and secondary tables
#: share the size, as ``udp_table_init`` allocates them together.
UDP_HTABLE_SIZE_MIN = 256
#: "hslot->count > 10": from here on bind and multicast use the secondary hash.
HASH2_THRESHOLD = 10
#: A pinned lookup result that fails its re-check restarts from fresh snapshots; an entry
#: is unhashed before it can die, so a restart never finds it again.  Bounded anyway.
MAX_LOOKUP_RESTARTS = 16

M32 = 0xFFFFFFFF

#: Called with an entry whose last reference was just dropped (the socket destructor).
Release = Callable[[UdpEntry], None]


class UdpSlot:
    """``struct udp_hslot``: one bucket of the primary or the secondary table.

    Concurrency:
      chain  rcu: writers hold ``lock`` and replace the tuple with one attribute store;
             readers load it once and scan the snapshot.
      count  guarded-by ``lock`` for writes; read without it where Linux does (the
             "> 10" decisions of bind and multicast delivery: one int attribute load,
             a stale value only picks which complete index is walked).
    """

    __slots__ = lockfree_read_slots("chain", "count", "lock")

    def __init__(self, lock: Lock) -> None:
        self.chain: tuple[UdpEntry, ...] = ()  # rcu: writers hold lock
        self.count = 0  # guarded-by: lock
        self.lock = lock  # immutable


def use_hash2_on_bind(sk: UdpEntry) -> bool:
    """``inet_use_hash2_on_bind``: only a specific, non-wildcard address may use the
    secondary hash for the conflict check (reference §2.3, "udp: Fix wildcard bind
    conflict check when using hash2")."""
    if sk.family == AF_INET6:
        if sk.laddr == ANY6:
            return False
        if not is_v4mapped(sk.laddr):
            return True
    return sk.rcv_saddr4 != ANY4


def local_port_range(tuning: Tuning, sk: UdpEntry) -> tuple[int, int]:
    """``inet_sk_get_local_port_range``: the sysctl range narrowed by the socket's own
    IP_LOCAL_PORT_RANGE bounds that fall inside it."""
    low, high = tuning.ip_local_port_range
    sk_range = sk.local_port_range
    if sk_range is not None:
        sk_low, sk_high = sk_range
        if low <= sk_low <= high:
            low = sk_low
        if low <= sk_high <= high:
            high = sk_high
    return low, high


def ephemeral_slots(rand: int, low: int, high: int,
                    size: int) -> Iterator[tuple[int, Iterator[int]]]:
    """The order in which ``udp_lib_get_port`` tries ports for ``bind(port 0)``.

    Yields ``(first, candidates)`` per primary slot: ``first`` starts at
    ``reciprocal_scale(rand, remaining) + low`` and advances by one per slot for
    ``size`` slots; ``candidates`` steps from ``first`` by ``(rand | 1) * size`` (an odd
    multiple of the table size) in 16-bit arithmetic, which visits each of the
    ``65536 / size`` ports of that slot exactly once.  Out-of-range candidates are
    yielded too; the caller skips them as Linux does.
    """
    remaining = high - low + 1
    first = (reciprocal_scale(rand, remaining) + low) & 0xFFFF
    step = ((rand | 1) * size) & M32
    last = (first + size) & 0xFFFF
    while True:
        yield first, _slot_candidates(first, step)
        first = (first + 1) & 0xFFFF
        if first == last:
            return


def _slot_candidates(first: int, step: int) -> Iterator[int]:
    snum = first
    while True:
        yield snum
        snum = (snum + step) & 0xFFFF
        if snum == first:
            return


class _BindStats(ShardedStats):
    """Per-thread counts of what bind examined (reference §8.3: counts, not times).

    Concurrency: each thread writes only its own shard (owner: that thread); ``snapshot``
    copies the registered shards (list copy) under ``_lock``, taken once per thread.
    """

    FIELDS: ClassVar[tuple[str, ...]] = ("primary_scans", "hash2_scans", "entries_examined")



class UdpTable:
    """The UDP tables of one Host (network namespace).

    Concurrency:
      readers   unicast lookup and multicast delivery (receive workers): no lock; load
                one slot's chain (attribute load, paired with the store in
                ``_link_locked``/``_unlink_locked``) and scan the snapshot; a result is
                pinned with ``ref.get()`` and re-checked after pinning.
      writers   bind/unhash/connect (socket owners): hold the primary slot lock of the
                port, then one hslot2 lock at a time nested inside it.  A reuseport
                group is changed only under its port's primary lock.
      tuning    one attribute load per operation; the Host replaces it with one store.
      rng       ephemeral port choice; guarded-by ``_rng_lock`` (a leaf lock).
      release   runs from ``rcu`` callbacks, after a grace period (SOCK_RCU_FREE).
    Lock order: udp_hslot_lock > udp_hslot2_lock; never two of one class at once.
    """

    def __init__(self, secret: HashSecret | None = None, *, size: int = UDP_HTABLE_SIZE_MIN,
                 tuning: Tuning | None = None, rng: random.Random | None = None,
                 release: Release | None = None, mcast_collect: str = "rcu",
                 rcu: Rcu | None = None) -> None:
        if size < 1 or size & (size - 1) or size > 65536:
            raise ValueError(f"UDP table size must be a power of two <= 65536, got {size}")
        if mcast_collect not in ("rcu", "locked"):
            raise ValueError(f"mcast_collect must be 'rcu' or 'locked', got {mcast_collect!r}")
        self._rng = rng if rng is not None else random.Random()  # guarded-by: _rng_lock
        self._rng_lock = threading.Lock()
        self.secret = secret if secret is not None else HashSecret(self._rng)  # immutable
        #: ``net_hash_mix``, for the primary slot index on per-datagram paths.
        self.net_mix = self.secret.net_mix  # immutable
        self.size = size  # immutable
        self.mask = size - 1  # immutable
        self.log = size.bit_length() - 1  # immutable
        self.hash = tuple(UdpSlot(HSLOT_LOCK.new()) for _ in range(size))  # immutable
        self.hash2 = tuple(UdpSlot(HSLOT2_LOCK.new()) for _ in range(size))  # immutable
        self.tuning = tuning if tuning is not None else Tuning()  # replaced by one store
        self.release = release  # immutable after setup
        #: The domain whose grace periods delay ``release``; its owner (the Host) drives
        #: them with ``rcu.poll()``/``synchronize()``/``barrier()``.
        self.rcu = rcu if rcu is not None else Rcu("udp")  # immutable
        #: Modern multicast with Tuning.udp_mcast_deliver_unlocked: "rcu" walks snapshots
        #: with no lock (Linux since 2016); "locked" collects under the slot lock and
        #: delivers outside it (the 2009/2014 design).
        self.mcast_collect = mcast_collect
        self.bind_stats = _BindStats()
        self.mcast_stats = McastStats()
        #: ``portaddr_hash(ANY, 0)``: xor a port in for the wildcard hash2 slot.
        self.any_portaddr_hash = self.secret.portaddr_hash(ANY4, 0)  # immutable
        if self.secret.portaddr_hash(ANY4, 0xBEEF) != self.any_portaddr_hash ^ 0xBEEF:
            raise RuntimeError("portaddr_hash must be (address hash) xor port, as in Linux")

    # --- hash, slot helpers ----------------------------------------------------------
    def primary_slot(self, port: int) -> UdpSlot:
        """``udp_hashslot``: ``(port + net_hash_mix) & mask``."""
        return self.hash[(port + self.net_mix) & self.mask]

    def portaddr_hash(self, addr: bytes, port: int) -> int:
        """``ipv{4,6}_portaddr_hash``: keyed hash of the address xor the port."""
        return self.secret.portaddr_hash(addr, port)

    def secondary_slot(self, portaddr_hash: int) -> UdpSlot:
        """``udp_hashslot2``."""
        return self.hash2[portaddr_hash & self.mask]

    def _random_u32(self) -> int:
        with self._rng_lock:
            return self._rng.getrandbits(32)

    # --- bind ------------------------------------------------------------------------
    def bind(self, sk: UdpEntry, port: int) -> int:
        """Bind ``sk`` (its ``laddr`` already set) to ``port``, or to an ephemeral port
        when ``port`` is 0; returns the port.  The caller owns ``sk`` (socket lock)."""
        check_port(port)
        check_address(sk.family, sk.laddr)
        if sk.hashed or sk.lport:
            raise OSError(errno.EINVAL, "socket is already bound")
        if port == 0:
            got = self._get_port_ephemeral(sk)
            if got is None:
                raise OSError(errno.EADDRINUSE, "no free port in ip_local_port_range")
            return got
        if not self._get_port_explicit(sk, port):
            raise OSError(errno.EADDRINUSE, f"port {port} is in use")
        return port

    def autobind(self, sk: UdpEntry) -> int:
        """``inet_autobind`` (sendto/connect on an unbound socket): an ephemeral port, or
        EAGAIN when the range is exhausted.  A bound socket keeps its port."""
        if sk.hashed:
            return sk.lport
        got = self._get_port_ephemeral(sk)
        if got is None:
            raise OSError(errno.EAGAIN, "no free port in ip_local_port_range")
        return got

    def _get_port_ephemeral(self, sk: UdpEntry) -> int | None:
        """``udp_lib_get_port(sk, 0)``: slot by slot, each under its own lock, a bitmap of
        the conflicting ports in the slot, then the slot's candidates in stride order."""
        tuning = self.tuning  # one attribute load
        low, high = local_port_range(tuning, sk)
        reserved = tuning.ip_local_reserved_ports
        log = self.log
        for first, candidates in ephemeral_slots(self._random_u32(), low, high, self.size):
            slot = self.primary_slot(first)
            with slot.lock:
                used = self._ports_in_use_locked(slot, sk)
                for snum in candidates:
                    if low <= snum <= high and (snum >> log) not in used \
                            and snum not in reserved:
                        self._link_locked(sk, slot, snum)
                        return snum
        return None

    def _get_port_explicit(self, sk: UdpEntry, snum: int) -> bool:
        slot = self.primary_slot(snum)
        with slot.lock:
            if slot.count > HASH2_THRESHOLD and use_hash2_on_bind(sk):
                slot2 = self.secondary_slot(self.portaddr_hash(sk.laddr, snum))
                if not slot.count < slot2.count:
                    nulladdr = self.secondary_slot(self.portaddr_hash(ANY4, snum))
                    exist = self._lport_inuse2(snum, slot2, sk)
                    if not exist and nulladdr is not slot2:
                        exist = self._lport_inuse2(snum, nulladdr, sk)
                    if exist:
                        return False
                    self._link_locked(sk, slot, snum)
                    return True
            if self._lport_inuse_locked(snum, slot, sk):
                return False
            self._link_locked(sk, slot, snum)
            return True

    @staticmethod
    def _conflicts(sk: UdpEntry, sk2: UdpEntry) -> bool | None:
        """The per-socket test of ``udp_lib_lport_inuse[2]`` (port already compared):
        None if ``sk2`` does not overlap ``sk``; False if it overlaps but both sides
        allow SO_REUSEPORT sharing (same uid, ``sk`` not yet in a group); True if it
        conflicts."""
        if sk2 is sk or (sk2.reuseaddr and sk.reuseaddr):
            return None
        if sk2.bound_dev and sk.bound_dev and sk2.bound_dev != sk.bound_dev:
            return None
        if not rcv_saddr_equal(sk, sk2, True):
            return None
        if sk2.reuseport and sk.reuseport and sk.reuseport_cb is None and sk.uid == sk2.uid:
            return False
        return True

    def _lport_inuse_locked(self, num: int, slot: UdpSlot, sk: UdpEntry) -> bool:
        """``udp_lib_lport_inuse`` without a bitmap: the first overlapping socket decides
        (Linux returns "free" at the first reuseport-compatible one)."""
        shard = self.bind_stats.shard()
        shard[0] += 1  # owner: this thread
        for sk2 in slot.chain:
            shard[2] += 1
            if sk2.lport != num:
                continue
            verdict = self._conflicts(sk, sk2)
            if verdict is not None:
                return verdict
        return False

    def _ports_in_use_locked(self, slot: UdpSlot, sk: UdpEntry) -> set[int]:
        """``udp_lib_lport_inuse`` with a bitmap: ``port >> log`` of every socket in the
        slot that would conflict with ``sk`` (reuse-compatible owners leave no mark)."""
        log = self.log
        used: set[int] = set()
        shard = self.bind_stats.shard()
        shard[0] += 1  # owner: this thread
        for sk2 in slot.chain:
            shard[2] += 1
            if self._conflicts(sk, sk2):
                used.add(sk2.lport >> log)
        return used

    def _lport_inuse2(self, num: int, slot2: UdpSlot, sk: UdpEntry) -> bool:
        """``udp_lib_lport_inuse2``: the same test over one hash2 slot, under its lock
        nested inside the primary lock (which keeps port ``num``'s sockets stable)."""
        shard = self.bind_stats.shard()
        shard[1] += 1  # owner: this thread
        with slot2.lock:
            for sk2 in slot2.chain:
                shard[2] += 1
                if sk2.lport != num:
                    continue
                verdict = self._conflicts(sk, sk2)
                if verdict is not None:
                    return verdict
        return False

    def _link_locked(self, sk: UdpEntry, slot: UdpSlot, snum: int) -> None:
        """The "found:" part of ``udp_lib_get_port``: identity first, then the reuseport
        group, then the primary chain, then the hash2 chain (under its lock)."""
        sk.set_key(sk.laddr, snum, sk.faddr, sk.fport)
        sk.portaddr_hash = self.portaddr_hash(sk.laddr, snum)
        if sk.reuseport:
            self._reuseport_add_locked(sk, slot)
        sk.hashed = True
        slot.chain = (sk,) + slot.chain  # atomic: one attribute store (publication)
        slot.count += 1
        yield_point("udp.bind.between_slots")
        slot2 = self.secondary_slot(sk.portaddr_hash)
        with slot2.lock:
            self._hash2_add_locked(sk, slot2)

    @staticmethod
    def _hash2_add_locked(sk: UdpEntry, slot2: UdpSlot) -> None:
        if sk.reuseport and sk.family == AF_INET6:
            slot2.chain = slot2.chain + (sk,)  # atomic: one attribute store
        else:
            slot2.chain = (sk,) + slot2.chain  # atomic: one attribute store
        slot2.count += 1

    @staticmethod
    def _hash2_del_locked(sk: UdpEntry, slot2: UdpSlot) -> None:
        slot2.chain = tuple(x for x in slot2.chain if x is not sk)  # atomic: one store
        slot2.count -= 1

    def _reuseport_add_locked(self, sk: UdpEntry, slot: UdpSlot) -> None:
        """``udp_reuseport_add_sock``: join the group of an identical reuseport socket
        (same family, v6only, port, device, uid, exactly equal address) or start one."""
        for sk2 in slot.chain:
            group = sk2.reuseport_cb
            if (sk2 is not sk and sk2.family == sk.family and sk2.v6only == sk.v6only
                    and sk2.lport == sk.lport and sk2.bound_dev == sk.bound_dev
                    and sk2.reuseport and sk2.uid == sk.uid
                    and isinstance(group, ReuseportGroup)
                    and rcv_saddr_equal(sk, sk2, False)):
                group.add_locked(sk)
                sk.reuseport_cb = group
                return
        sk.reuseport_cb = ReuseportGroup(sk, bind_inany=is_any(sk.laddr))

    def _reuseport_detach_locked(self, sk: UdpEntry) -> None:
        group = sk.reuseport_cb
        if isinstance(group, ReuseportGroup):
            group.detach_locked(sk)
        sk.reuseport_cb = None

    # --- unhash / close --------------------------------------------------------------
    def unhash(self, sk: UdpEntry) -> bool:
        """``udp_lib_unhash``: unlink ``sk`` from both tables (idempotent; re-checked
        under the primary lock).  Lockless readers holding an old snapshot may still
        find it; they pin it before use.  Returns True if it was hashed."""
        if not sk.hashed:  # racy pre-check, re-checked under the lock (sk_hashed)
            return False
        slot = self.primary_slot(sk.lport)
        with slot.lock:
            if not sk.hashed:
                return False
            self._unlink_locked(sk, slot)
        return True

    def _unlink_locked(self, sk: UdpEntry, slot: UdpSlot) -> None:
        if sk.reuseport_cb is not None:
            self._reuseport_detach_locked(sk)
        slot.chain = tuple(x for x in slot.chain if x is not sk)  # atomic: one store
        slot.count -= 1
        sk.hashed = False
        yield_point("udp.unhash.between_slots")
        slot2 = self.secondary_slot(sk.portaddr_hash)
        with slot2.lock:
            self._hash2_del_locked(sk, slot2)
        # inet_num = 0: the port is free for a later bind/autobind of this socket.
        sk.set_key(sk.laddr, 0, sk.faddr, sk.fport)

    def put(self, sk: UdpEntry) -> None:
        """Drop one reference; the last one queues ``release`` (the socket destructor)
        behind a grace period (``sk_free`` -> ``call_rcu(__sk_destruct)``)."""
        if sk.ref.put() and self.release is not None:
            release = self.release
            self.rcu.call_rcu(lambda: release(sk))

    def close(self, sk: UdpEntry) -> None:
        """``udp_lib_close``: unhash, then drop the owner's reference."""
        self.unhash(sk)
        self.put(sk)

    # --- connect (ip4_datagram_connect's table part) -----------------------------------
    def connect(self, sk: UdpEntry, faddr: bytes, fport: int, laddr: bytes | None = None) -> None:
        """Set the peer; if the socket was bound to the wildcard and routing chose
        ``laddr``, move it to the (laddr, port) hash2 slot (``udp_lib_rehash``: the
        primary lock, then the old and the new hash2 lock one at a time; a reuseport
        member leaves its group).  Marks the reuseport group as having connections."""
        check_address(sk.family, faddr)
        check_port(fport)
        if laddr is not None:
            check_address(sk.family, laddr)
        if not sk.hashed:
            sk.set_key(laddr if laddr is not None else sk.laddr, sk.lport, faddr, fport)
            sk.state = State.ESTABLISHED
            return
        slot = self.primary_slot(sk.lport)
        with slot.lock:
            rehash = laddr is not None and is_any(sk.laddr) and laddr != sk.laddr
            new_laddr = laddr if rehash and laddr is not None else sk.laddr
            sk.set_key(new_laddr, sk.lport, faddr, fport)  # one key store for readers
            if rehash:
                self._rehash_locked(sk)
            group = sk.reuseport_cb
            if isinstance(group, ReuseportGroup):
                group.has_conns = True  # reuseport_has_conns_set
            sk.state = State.ESTABLISHED

    def disconnect(self, sk: UdpEntry) -> None:
        """``__udp_disconnect`` (connect with AF_UNSPEC): forget the peer; an address not
        locked by an explicit bind goes back to the wildcard (rehashed while the port
        stays), and a port not locked by an explicit bind is released (unhash).  The
        ``bind_addr_locked``/``bind_port_locked`` userlocks are set by the host's bind, as
        ``__inet_bind`` sets SOCK_BINDADDR_LOCK/SOCK_BINDPORT_LOCK."""
        any_addr = ANY4 if sk.family == AF_INET else ANY6
        if not sk.hashed:
            laddr = sk.laddr if sk.bind_addr_locked else any_addr
            sk.set_key(laddr, sk.lport, any_addr, 0)
            sk.state = State.CLOSE
            return
        slot = self.primary_slot(sk.lport)
        with slot.lock:
            reset_addr = not sk.bind_addr_locked and sk.laddr != any_addr
            sk.set_key(any_addr if reset_addr else sk.laddr, sk.lport, any_addr, 0)
            sk.state = State.CLOSE
            if not sk.hashed:
                return
            if not sk.bind_port_locked:
                self._unlink_locked(sk, slot)
            elif reset_addr:
                self._rehash_locked(sk)

    def _rehash_locked(self, sk: UdpEntry) -> None:
        """``udp_lib_rehash`` under the primary lock: leave the reuseport group (its
        members share an address, this socket no longer does), then move between hash2
        slots, new and old lock one at a time.  Linux unlinks from the old slot first,
        leaving a window in which a lookup finds the socket in neither; here the socket
        is linked into the new slot first, so a lookup for its new address never misses
        it, and a multicast walk that meets it in both snapshots delivers once
        (``udp_mcast`` de-duplicates across the two chains)."""
        new_hash = self.portaddr_hash(sk.laddr, sk.lport)
        old_slot2 = self.secondary_slot(sk.portaddr_hash)
        new_slot2 = self.secondary_slot(new_hash)
        sk.portaddr_hash = new_hash
        if sk.reuseport_cb is not None:
            self._reuseport_detach_locked(sk)
        if old_slot2 is not new_slot2:
            with new_slot2.lock:
                self._hash2_add_locked(sk, new_slot2)
            yield_point("udp.rehash.between_slots")
            with old_slot2.lock:
                self._hash2_del_locked(sk, old_slot2)

    # --- unicast lookup ----------------------------------------------------------------
    def lookup(self, saddr: bytes, sport: int, daddr: bytes, dport: int, dif: int = 0,
               *, cpu: int = -1) -> UdpEntry | None:
        """``__udp4_lib_lookup`` / ``__udp6_lib_lookup`` plus the pin Linux's early-demux
        callers take: the best socket for the datagram, with a reference the caller
        drops with ``put``; None if no socket matches."""
        for _ in range(MAX_LOOKUP_RESTARTS):
            sk = self.lookup_rcu(saddr, sport, daddr, dport, dif, cpu=cpu)
            if sk is None:
                return None
            yield_point("udp.lookup.before_pin")
            if not sk.ref.get():
                continue  # its close completed after our snapshot: rescan fresh chains
            yield_point("udp.lookup.after_pin")
            if score_for(sk, saddr, sport, daddr, dport, dif, cpu) >= 0:
                return sk
            self.put(sk)  # re-keyed while we pinned it: drop and rescan
        return None

    def lookup_rcu(self, saddr: bytes, sport: int, daddr: bytes, dport: int, dif: int = 0,
                   *, cpu: int = -1) -> UdpEntry | None:
        """The lookup without a reference (a socket found may be closing).  Tries the
        hash2 slot of (daddr, port), and unless that found something, the slot of
        (wildcard, port)."""
        if len(daddr) == 4:
            score_fn, any_addr, badness = compute_score4, ANY4, 0
        else:
            score_fn, any_addr, badness = compute_score6, ANY6, -1
        slot2 = self.secondary_slot(self.portaddr_hash(daddr, dport))
        result = self._lookup2_rcu(slot2, score_fn, badness, saddr, sport, daddr, dport,
                                   dif, cpu)
        if result is not None:
            return result
        slot2 = self.secondary_slot(self.portaddr_hash(any_addr, dport))
        return self._lookup2_rcu(slot2, score_fn, badness, saddr, sport, any_addr, dport,
                                 dif, cpu)

    def _lookup2_rcu(self, slot2: UdpSlot, score_fn: ScoreFn, badness: int, saddr: bytes,
                     sport: int, daddr: bytes, dport: int, dif: int,
                     cpu: int) -> UdpEntry | None:
        """``udp4_lib_lookup2``: best score in one hash2 snapshot; a reuseport socket
        hands over to its group's choice unless the group has connected members."""
        result: UdpEntry | None = None
        chain = self.secondary_slot_chain(slot2)
        for sk in chain:
            score = score_fn(sk, saddr, sport, daddr, dport, dif, cpu)
            if score <= badness:
                continue
            badness = score
            if sk.state == State.ESTABLISHED:
                result = sk
                continue
            group = sk.reuseport_cb if sk.reuseport else None
            if not isinstance(group, ReuseportGroup):
                result = sk
                continue
            chosen = cast(UdpEntry | None,
                          group.select_by_hash(self.secret.ehashfn(daddr, dport, saddr, sport)))
            if chosen is None:
                result = sk
                continue
            if not group.has_conns:
                return chosen
            # The group has connected members: keep scoring ("rescore" in Linux).
            result = chosen
            badness = max(badness, score_fn(chosen, saddr, sport, daddr, dport, dif, cpu))
        return result

    @staticmethod
    def secondary_slot_chain(slot2: UdpSlot) -> tuple[UdpEntry, ...]:
        return slot2.chain  # atomic: one attribute load, paired with the writers' store

    # --- multicast / broadcast ---------------------------------------------------------
    def mcast_deliver(self, daddr: bytes, dport: int, saddr: bytes, sport: int, ifindex: int,
                      datagram: object, deliver: Callable[[UdpEntry, object], None],
                      *, clone: Callable[[object], object] | None = None,
                      tuning: Tuning | None = None, collect: str | None = None) -> int:
        """Deliver a multicast/broadcast datagram to every matching socket (see
        ``rcunet.tables.udp_mcast.mcast_deliver``); returns the receiver count."""
        return mcast_deliver(self, daddr, dport, saddr, sport, ifindex, datagram, deliver,
                             clone=clone, tuning=tuning, collect=collect)

    # --- introspection (tests, leak checks) ----------------------------------------------
    def entries(self) -> list[UdpEntry]:
        """Every hashed entry (from the primary chains; a snapshot per slot)."""
        return [sk for slot in self.hash for sk in slot.chain]

    def check_consistency(self) -> None:
        """Assert the invariants a quiescent table keeps: every entry in exactly one
        primary chain (its port's) and one hash2 chain (its portaddr slot), counts equal
        to chain lengths, reuseport groups made of hashed members.  For tests."""
        primary = [sk for slot in self.hash for sk in slot.chain]
        secondary = [sk for slot in self.hash2 for sk in slot.chain]
        assert len({id(sk) for sk in primary}) == len(primary), "duplicate in primary"
        assert {id(sk) for sk in primary} == {id(sk) for sk in secondary}, "tables differ"
        assert len(secondary) == len(primary), "duplicate in hash2"
        for slot in self.hash + self.hash2:
            assert slot.count == len(slot.chain), "slot count != chain length"
        for sk in primary:
            assert sk.hashed
            assert sk in self.primary_slot(sk.lport).chain
            assert sk in self.secondary_slot(sk.portaddr_hash).chain
            group = sk.reuseport_cb
            if isinstance(group, ReuseportGroup):
                assert sk in group.socks
                assert all(cast(UdpEntry, member).hashed for member in group.socks)


ScoreFn = Callable[[UdpEntry, bytes, int, bytes, int, int, int], int]


def compute_score4(sk: UdpEntry, saddr: bytes, sport: int, daddr: bytes, hnum: int,
                   dif: int, cpu: int) -> int:
    """``compute_score`` (net/ipv4/udp.c): -1 unless port and exact bound address match;
    2 for PF_INET, 1 for a (non-v6only) PF_INET6 socket; +4 per connected-peer field
    (a mismatch disqualifies); +4 for a bound device (which must match); +1 when the
    socket's incoming CPU is this one."""
    laddr, lport, faddr, fport = sk.key  # atomic: one attribute load (set_key's last store)
    if lport != hnum:
        return -1
    if sk.family == AF_INET:
        score = 2
    else:
        if sk.v6only:
            return -1
        laddr = v4_view(laddr)
        faddr = v4_view(faddr)
        score = 1
    if laddr != daddr:
        return -1
    if faddr != ANY4:
        if faddr != saddr:
            return -1
        score += 4
    if fport:
        if fport != sport:
            return -1
        score += 4
    dev = sk.bound_dev
    if dev:
        if dev != dif:
            return -1
        score += 4
    if cpu >= 0 and sk.incoming_cpu == cpu:
        score += 1
    return score


def compute_score6(sk: UdpEntry, saddr: bytes, sport: int, daddr: bytes, hnum: int,
                   dif: int, cpu: int) -> int:
    """``compute_score`` (net/ipv6/udp.c): PF_INET6 only, exact bound address; base 0,
    +1 per connected field, +1 for a bound device, +1 for the incoming CPU."""
    laddr, lport, faddr, fport = sk.key  # atomic: one attribute load
    if lport != hnum or sk.family != AF_INET6 or laddr != daddr:
        return -1
    score = 0
    if fport:
        if fport != sport:
            return -1
        score += 1
    if faddr != ANY6:
        if faddr != saddr:
            return -1
        score += 1
    dev = sk.bound_dev
    if dev:
        if dev != dif:
            return -1
        score += 1
    if cpu >= 0 and sk.incoming_cpu == cpu:
        score += 1
    return score


def score_for(sk: UdpEntry, saddr: bytes, sport: int, daddr: bytes, dport: int, dif: int,
              cpu: int) -> int:
    """Re-check after pin: the score against the exact address, else the wildcard."""
    if len(daddr) == 4:
        score = compute_score4(sk, saddr, sport, daddr, dport, dif, cpu)
        return score if score >= 0 else compute_score4(sk, saddr, sport, ANY4, dport, dif, cpu)
    score = compute_score6(sk, saddr, sport, daddr, dport, dif, cpu)
    return score if score >= 0 else compute_score6(sk, saddr, sport, ANY6, dport, dif, cpu)
