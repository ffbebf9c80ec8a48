"""connect()-time source port selection: ``__inet_hash_connect`` as of Linux 6.15
(reference §3.1-3.5: the March 2025 series "tcp: scale connect() under pressure" and
"tcp: even faster connect() under stress").

For a socket with no port yet:

1. Range from ``ip_local_port_range`` or the per-socket IP_LOCAL_PORT_RANGE (then step 1
   and both parities in one pass, else step 2 and ``low``'s parity first).
2. ``port_offset`` = keyed 64-bit hash of (saddr, daddr, dport, now // 10 s); its low 16
   bits index a 2^16-entry perturbation table filled once from the RNG, its high 32 bits
   are added to that entry to give the start offset.
3. Walk the range with wrap-around, skipping reserved ports.  With
   ``Tuning.connect_rcu_precheck`` each candidate is first checked without any lock: a
   bhash chain snapshot (a tb made by bind() -> skip) and the ehash chain snapshot (a
   non-TIME_WAIT owner of the 4-tuple -> skip).  Only the survivors take the bhash lock,
   where both checks are repeated (the ehash one under the ehash lock, which may take
   over a TIME_WAIT entry via ``twsk_unique``).  Legacy (before the series) locks every
   candidate.
4. If nothing was found with the first parity, rescan with the other; then EADDRNOTAVAIL.
5. On success the perturbation entry grows by ``max(i, random(0..7) * step) + step``.

``Tuning.connect_hash_port0`` computes ``ehash(laddr, 0, faddr, fport)`` once per
connect() and derives each candidate's hash with one addition; legacy rehashes the full
4-tuple for every candidate.
"""

from __future__ import annotations

import errno
import random
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Protocol

from rcunet.core.tcp.timewait import reuse_iss
from rcunet.sync.hooks import yield_point
from rcunet.sync.lock import LockClass
from rcunet.tables.bind import Bind2Bucket, BindBucket, BindTables, v6_key
from rcunet.tables.ehash import EstablishedTable, chain_established_rcu, destroy_entry
from rcunet.tables.entry import (
    SockEntry,
    State,
    TableEntry,
    TimeWaitEntry,
    check_address,
    check_port,
)
from rcunet.tables.secret import M32, bhash_slot
from rcunet.tuning import Tuning
from rcunet.wire.addr import is_any, is_loopback

#: INET_TABLE_PERTURB_SIZE
PERTURB_SIZE = 1 << 16
LOOPBACK_IFINDEX = 1
NS_PER_MS = 1_000_000

PERTURB_ONCE_LOCK = LockClass("table_perturb_once")


class CounterSink(Protocol):
    def inc(self, name: str, amount: int = 1) -> None: ...


@dataclass(slots=True)
class ConnectStats:
    """Per-caller counters for one or many connect() calls.  Owned by one thread (the
    benchmark keeps one per worker and merges them), so plain ``+=`` is safe."""

    connects: int = 0
    candidates: int = 0
    rcu_skips: int = 0
    bhash_locks: int = 0
    bhash2_locks: int = 0
    ehash_locks: int = 0
    #: lock acquisitions spent on candidates whose 4-tuple a non-TIME_WAIT socket held
    occupied_candidate_locks: int = 0
    hash_calls: int = 0
    tw_recycled: int = 0
    failures: int = 0

    @property
    def locks(self) -> int:
        return self.bhash_locks + self.bhash2_locks + self.ehash_locks

    def merge(self, other: ConnectStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def tw_reuse_allowed(sk: TableEntry, tw: TimeWaitEntry, *, explicit_port: bool,
                     tuning: Tuning, now: int) -> bool:
    """The policy half of ``tcp_twsk_unique`` (reference §3.4): timestamps are required;
    an explicitly bound port takes any such tw; otherwise ``tcp_tw_reuse`` (0 off, 1 on,
    2 loopback only) and ``tcp_tw_reuse_delay`` ms since the tw was entered decide."""
    if not tw.ts_recent_stamp:
        return False
    if explicit_port:
        return True
    reuse = tuning.tcp_tw_reuse
    if reuse == 2:
        loopback = (tw.bound_dev == LOOPBACK_IFINDEX or is_loopback(tw.faddr)
                    or is_loopback(tw.laddr))
        reuse = 1 if loopback else 0
    if not reuse:
        return False
    return now // NS_PER_MS > tw.entered_at // NS_PER_MS + tuning.tcp_tw_reuse_delay


def twsk_unique(sk: TableEntry, tw: TimeWaitEntry, *, explicit_port: bool, tuning: Tuning,
                now: int) -> bool:
    """``tcp_twsk_unique``: called under the ehash lock.  On acceptance the tw is pinned
    (fails on a dying tw) and the new socket inherits a write_seq past the old
    connection's and its ts_recent, so PAWS on the peer rejects old duplicates."""
    if not tw_reuse_allowed(sk, tw, explicit_port=explicit_port, tuning=tuning, now=now):
        return False
    if not tw.ref.get():
        return False
    if isinstance(sk, SockEntry) and not sk.repair:
        sk.write_seq = reuse_iss(tw.snd_nxt)
        sk.ts_recent = tw.ts_recent
        sk.ts_recent_stamp = tw.ts_recent_stamp
    return True


class PortSelector:
    """``inet_hash_connect`` for one Host.

    Concurrency:
      perturb   ``_perturb`` is filled once under ``table_perturb_once`` and then only
                its slots change.  An update is a slot load and a slot store, like
                Linux's READ_ONCE/WRITE_ONCE pair: two connects may race and one
                increment is lost, which only lessens the noise (it is not a count).
      tables    lock order as in BindTables: bhash > ehash (released) > bhash2 > ehash.
      rng       ``random.Random``: safe to share between threads.
      clock     ``clock()`` returns int ns; read once per connect().
    """

    def __init__(self, ehash: EstablishedTable, bind: BindTables, rng: random.Random,
                 clock: Callable[[], int], counters: CounterSink | None = None) -> None:
        self.ehash = ehash  # immutable
        self.bind = bind  # immutable
        self.rng = rng  # immutable
        self.clock = clock  # immutable
        self.counters = counters  # immutable
        self._perturb: list[int] | None = None  # filled once under _perturb_once
        self._perturb_once = PERTURB_ONCE_LOCK.new()

    # --- the perturbation table --------------------------------------------------------
    def table_perturb(self) -> list[int]:
        """The table, filled on first use (``get_random_sleepable_once``)."""
        table = self._perturb  # atomic: attribute load, pairs with the store below
        if table is None:
            with self._perturb_once:
                table = self._perturb
                if table is None:
                    bits = self.rng.getrandbits
                    table = [bits(32) for _ in range(PERTURB_SIZE)]
                    self._perturb = table
        return table

    def candidate_order(self, sk: TableEntry, daddr: bytes, dport: int,
                        now: int | None = None) -> list[int]:
        """The ports connect() would try, in order (first parity pass, then the other),
        with reserved ports left out.  Pure: reads the perturbation table, changes
        nothing.  For tests and diagnostics."""
        tuning = self.bind.tuning
        now = self.clock() if now is None else now
        low, high, step, remaining, index, offset = self._scan_params(sk, daddr, dport, now, tuning)
        order: list[int] = []
        while True:
            port = low + offset
            for _ in range(0, remaining, step):
                if port >= high:
                    port -= remaining
                if port not in tuning.ip_local_reserved_ports:
                    order.append(port)
                port += step
            if step == 1:
                return order
            offset += 1
            if not (offset & 1 and remaining > 1):
                return order

    def _scan_params(self, sk: TableEntry, daddr: bytes, dport: int, now: int,
                     tuning: Tuning) -> tuple[int, int, int, int, int, int]:
        low, high, local_ports = self.bind.local_port_range(sk, tuning)
        step = 1 if local_ports else 2
        high += 1  # [32768, 60999] -> [32768, 61000[
        remaining = high - low
        if not local_ports and remaining > 1:
            remaining &= ~1
        port_offset = self.bind.secret.port_ephemeral(sk.laddr, daddr, dport, now)
        table = self.table_perturb()
        index = port_offset & (PERTURB_SIZE - 1)
        offset = ((table[index] + (port_offset >> 32)) & M32) % remaining
        if not local_ports:
            offset &= ~1  # first pass: ports with low's parity
        return low, high, step, remaining, index, offset

    # --- connect() ---------------------------------------------------------------------
    def connect(self, sk: TableEntry, daddr: bytes, dport: int,
                stats: ConnectStats | None = None, *, saddr: bytes | None = None) -> int:
        """Give sk the destination (daddr, dport) and a source port; publish it in the
        established hash and the bind tables.  Returns the port.

        sk must not be hashed yet.  Its source address is ``sk.laddr``, or ``saddr``
        (the routed source) when sk is bound to the wildcard: a bound sk then moves
        from the (ANY, port) tb2 to the (saddr, port) tb2 first and moves back if
        connect() fails (``inet_bhash2_update_saddr`` / ``reset_saddr``).
        EADDRNOTAVAIL when every candidate is taken (or, for a bound port, its 4-tuple)."""
        check_address(sk.family, daddr)
        check_port(dport)
        if dport == 0:
            raise OSError(errno.EADDRNOTAVAIL, "connect() to port 0")
        if sk.sk_hash and self.ehash.contains(sk):
            raise OSError(errno.EISCONN, "socket is already connected")
        moved_saddr = False
        if is_any(sk.laddr):
            if saddr is None:
                raise OSError(errno.EADDRNOTAVAIL, "no source address for a wildcard socket")
            check_address(sk.family, saddr)
            self.bind.update_saddr(sk, saddr)
            moved_saddr = True
        tuning = self.bind.tuning  # atomic: attribute load; one Tuning for this connect
        now = self.clock()
        old_state = sk.state
        # tcp_v4_connect: destination and SYN_SENT first; "socket identity is still
        # unknown (sport may be zero)" - sk is not visible anywhere yet.
        sk.set_key(sk.laddr, sk.lport, daddr, dport)
        if sk.state == State.CLOSE:
            sk.state = State.SYN_SENT
        if stats is not None:
            stats.connects += 1
        try:
            if sk.lport and sk.tb is not None:
                self._connect_bound(sk, tuning, now, stats)
            else:
                self._connect_search(sk, tuning, now, stats)
        except OSError:
            if stats is not None:
                stats.failures += 1
            sk.state = old_state
            sk.set_key(sk.laddr, sk.lport, sk.faddr, 0)
            if moved_saddr:
                if sk.tb is not None:
                    self.bind.reset_saddr(sk)
                else:
                    wildcard = bytes(len(sk.laddr))
                    sk.set_key(wildcard, sk.lport, sk.faddr, sk.fport)
            raise
        return sk.lport

    def _hash_port0(self, sk: TableEntry, stats: ConnectStats | None) -> int:
        if stats is not None:
            stats.hash_calls += 1
        return self.ehash.hash_port0(sk.laddr, sk.faddr, sk.fport)

    def _connect_bound(self, sk: TableEntry, tuning: Tuning, now: int,
                       stats: ConnectStats | None) -> None:
        """An already-bound port: one locked 4-tuple check, no search (§3.1).  A tw on
        the tuple is taken whenever it had timestamps, whatever ``tcp_tw_reuse`` says."""
        port = sk.lport
        h = (self._hash_port0(sk, stats) + port) & M32
        key = (sk.laddr, port, sk.faddr, sk.fport)
        ok, tw, _ = self._check_established_locked(sk, key, h, True, tuning, now, stats)
        if not ok:
            raise OSError(errno.EADDRNOTAVAIL, "4-tuple already in use")
        if tw is not None:
            self._release_reused_tw(tw, stats)

    def _check_established_locked(self, sk: TableEntry, key: tuple[bytes, int, bytes, int],
                                  h: int, explicit_port: bool, tuning: Tuning, now: int,
                                  stats: ConnectStats | None,
                                  ) -> tuple[bool, TimeWaitEntry | None, bool]:
        """``__inet_check_established(rcu_lookup=false)``: under the ehash lock, either
        publish sk with ``key`` (taking over an acceptable TIME_WAIT) or report busy.
        Returns (ok, reused tw, occupied: a non-TIME_WAIT socket holds the tuple)."""
        def tw_unique(tw: TimeWaitEntry) -> bool:
            return twsk_unique(sk, tw, explicit_port=explicit_port, tuning=tuning, now=now)

        with self.ehash.ehash_lock(h):
            ok, tw, owner = self.ehash.connect_insert_locked(sk, key, h, tw_unique)
        # (the ehash lock is released before any bhash2 lock is taken)
        occupied = owner is not None and owner.state != State.TIME_WAIT
        if stats is not None:
            stats.ehash_locks += 1
            stats.occupied_candidate_locks += occupied
            stats.tw_recycled += tw is not None
        if tw is not None and self.counters is not None:
            self.counters.inc("TcpExtTWRecycled")
        return ok, tw, occupied

    def _release_reused_tw(self, tw: TimeWaitEntry, stats: ConnectStats | None) -> None:
        """``inet_twsk_bind_unhash`` + ``inet_twsk_deschedule_put`` for a tw taken over
        on an explicitly bound port (its bucket locks are not held here)."""
        tb, tb2 = tw.tb, tw.tb2
        if isinstance(tb, BindBucket) and isinstance(tb2, Bind2Bucket):
            with self.bind.bhash_lock(tb.port), self.bind.bhash2_lock(tb2.addr, tb2.port):
                if stats is not None:
                    stats.bhash_locks += 1
                    stats.bhash2_locks += 1
                if tw.tb is tb:
                    self.bind.remove_owner_locked(tw)
        _drop_tw_refs(tw)

    def _connect_search(self, sk: TableEntry, tuning: Tuning, now: int,
                        stats: ConnectStats | None) -> None:
        if sk.tb is not None:
            raise OSError(errno.EINVAL, "socket holds a bind bucket but no port")
        low, high, step, remaining, index, offset = self._scan_params(
            sk, sk.faddr, sk.fport, now, tuning)
        # None when nothing is reserved (the default): on free-threaded 3.13 ``in`` on a
        # set takes the set's lock, and every connecting thread tests every candidate.
        reserved = tuning.ip_local_reserved_ports or None
        precheck = tuning.connect_rcu_precheck
        hash_port0 = self._hash_port0(sk, stats) if tuning.connect_hash_port0 else None
        laddr, faddr, fport, dev = sk.laddr, sk.faddr, sk.fport, sk.bound_dev
        bind, ehash = self.bind, self.ehash
        # The tables' immutable parts, read once: each candidate then touches only its own
        # chains (on free-threaded builds every attribute load of a shared object is an
        # atomic reference-count update that the other connecting threads also make).
        bhash, net_mix, bmask = bind.bhash_rcu()
        ebuckets, emask = ehash.buckets_rcu()
        # get_random_u32_below(8) of the ok: path, drawn here, outside every lock (three
        # random bits: randrange(8) would cost an interpreted call into random.py)
        jitter = self.rng.getrandbits(3) * step
        while True:  # other_parity_scan
            port = low + offset
            for i in range(0, remaining, step):
                if port >= high:
                    port -= remaining
                if reserved is not None and port in reserved:
                    port += step
                    continue
                if stats is not None:
                    stats.candidates += 1
                if hash_port0 is None:
                    if stats is not None:
                        stats.hash_calls += 1
                    h = ehash.hashfn(laddr, port, faddr, fport)
                else:
                    h = (hash_port0 + port) & M32
                key = (laddr, port, faddr, fport)
                if precheck:
                    # Lockless pre-check: one list-slot load per chain, no lock, no pin.
                    skip = False
                    # atomic: list-slot load
                    for tb in bhash[bhash_slot(port, net_mix, bmask)]:
                        if tb.port == port:
                            # atomic: list-slot load, pairs with ehash._publish_locked
                            skip = (tb.fastreuse >= 0 or tb.fastreuseport >= 0
                                    or chain_established_rcu(ebuckets[h & emask], key, h, dev))
                            break
                    if skip:
                        if stats is not None:
                            stats.rcu_skips += 1
                        port += step
                        continue
                if self._try_port_locked_path(sk, port, key, h, i, step, index, jitter,
                                              tuning, now, stats):
                    return
                port += step
            if step == 2:
                offset += 1
                if offset & 1 and remaining > 1:
                    continue
            raise OSError(errno.EADDRNOTAVAIL, "no free local port for this destination")

    def _try_port_locked_path(self, sk: TableEntry, port: int,
                              key: tuple[bytes, int, bytes, int], h: int, i: int, step: int,
                              index: int, jitter: int, tuning: Tuning, now: int,
                              stats: ConnectStats | None) -> bool:
        """The candidate under its bhash lock: re-check the tb, check/insert the 4-tuple
        under the ehash lock (or create the tb: a new port has no 4-tuple), then bind."""
        bind = self.bind
        yield_point("portsel.connect.before_lock")  # the pre-check said "maybe free"
        with bind.bhash_lock(port):
            if stats is not None:
                stats.bhash_locks += 1
            tb = bind.find_tb_locked(port)
            tw: TimeWaitEntry | None = None
            if tb is not None:
                if tb.fastreuse >= 0 or tb.fastreuseport >= 0:
                    return False
                ok, tw, occupied = self._check_established_locked(sk, key, h, False, tuning,
                                                                  now, stats)
                if not ok:
                    if stats is not None:
                        stats.occupied_candidate_locks += occupied  # this bhash lock too
                    return False
                hashed = True  # check_established published sk
            else:
                tb = bind.create_tb_locked(port)
                tb.fastreuse = tb.fastreuseport = -1
                hashed = False
            self._bind_ok_locked(sk, tb, port, h, max(i, jitter), step, index, tw, hashed,
                                 stats)
        if tw is not None:
            _drop_tw_refs(tw)
        return True

    def _bind_ok_locked(self, sk: TableEntry, tb: BindBucket, port: int, h: int, i: int,
                        step: int, index: int, tw: TimeWaitEntry | None, hashed: bool,
                        stats: ConnectStats | None) -> None:
        """The ``ok:`` label: bhash lock held; take the bhash2 lock, find or create the
        tb2, nudge the perturbation entry (``i`` already includes the random part), bind,
        and hash sk if the check did not."""
        bind = self.bind
        addr = v6_key(sk.family, sk.laddr)
        with bind.bhash2_lock(addr, port):
            if stats is not None:
                stats.bhash2_locks += 1
            tb2 = bind.find_or_create_tb2_locked(tb, addr)
            table = self.table_perturb()
            table[index] = (table[index] + i + step) & M32  # racy by design, see class doc
            bind.add_owner_locked(sk, tb, tb2)  # sets sk.lport before sk is hashed
            if not hashed:
                # A brand-new tb: no 4-tuple can use this port yet (inet_ehash_nolisten).
                if stats is not None:
                    stats.ehash_locks += 1
                self.ehash.insert(sk, check_dup=False, h=h)
            if tw is not None:
                # inet_twsk_bind_unhash: the tw had sk's exact (laddr, port), so it sits in
                # this same tb2 and both of its bucket locks are held here.
                assert tw.tb2 is tb2
                bind.remove_owner_locked(tw)


def _drop_tw_refs(tw: TimeWaitEntry) -> None:
    """``inet_twsk_deschedule_put``: drop the pin taken by twsk_unique and the table's
    reference (the tw's timer finds it unhashed and does nothing)."""
    tw.ref.put()  # the pin from twsk_unique (never the last: the table's is still held)
    if tw.ref.put():
        destroy_entry(tw)
