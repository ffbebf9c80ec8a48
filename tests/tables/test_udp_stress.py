"""Multi-thread stress of the UDP tables: binders/closers racing multicast delivery in
every mode (reference §8.2 item 42 under real concurrency; run on 3.13t too).

Churn threads bind (explicit and ephemeral ports), connect/disconnect (rehash) and close
sockets of one multicast group while receive threads deliver to it in every mode.
Invariants checked while it runs: every delivery reaches each socket that stayed bound
for the whole run exactly once, no socket receives twice, none receives after its close
completed.  At the end: refcounts of the surviving sockets back to 1, every closed socket
released exactly once, no entry and no port leaked (the whole ephemeral range binds
again), slot counts equal chain lengths.  Runs once per scheduling-jitter seed
(``rcunet.sync.jitter``; ``RCUNET_JITTER_SEEDS``, default 5).  Bounded:
``RCUNET_STRESS_SECONDS`` per seed (default 0.3).
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from rcunet.sync.jitter import Jitter, stress_seconds, stress_seeds
from rcunet.tables.entry import AF_INET, State
from rcunet.tables.secret import HashSecret
from rcunet.tables.udp import UdpTable
from rcunet.tables.udp_entry import UdpEntry
from rcunet.tuning import Tuning

ANY4 = bytes(4)
G1 = bytes([239, 1, 1, 1])
S1 = bytes([10, 0, 0, 7])
UNI = bytes([10, 0, 0, 1])
PORT = 5000
RANGE = (41000, 41063)
DURATION = stress_seconds(0.3)

MODES = [
    (Tuning.legacy(), "rcu"),
    (Tuning(), "rcu"),
    (Tuning(), "locked"),
    (Tuning(udp_mcast_hash2=False), "rcu"),
]


class Ledger:
    """Releases and delivery violations, shared by all threads.

    Concurrency: ``_lock`` guards both collections (a plain lock; not a table lock).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.released: dict[int, int] = {}  # guarded-by: _lock
        self.errors: list[str] = []  # guarded-by: _lock

    def release(self, sk: UdpEntry) -> None:
        with self._lock:
            self.released[id(sk)] = self.released.get(id(sk), 0) + 1

    def was_released(self, sk: UdpEntry) -> bool:
        with self._lock:
            return id(sk) in self.released

    def error(self, text: str) -> None:
        with self._lock:
            if len(self.errors) < 20:
                self.errors.append(text)


def new_member(t: UdpTable, rng: random.Random) -> UdpEntry:
    sk = UdpEntry(AF_INET, G1 if rng.random() < 0.3 else ANY4, reuseaddr=True)
    sk.join_group(G1, 1)
    port = PORT if rng.random() < 0.8 else 0
    sk.bind_port_locked = port != 0  # as __inet_bind marks an explicit port
    t.bind(sk, port)
    return sk


@pytest.mark.stress
@pytest.mark.parametrize("seed", stress_seeds(), ids=lambda seed: f"jitter{seed}")
def test_bind_close_deliver_stress(seed: int) -> None:
    with Jitter(seed) as jitter:
        _bind_close_deliver(seed)
    assert jitter.arrivals() > 0


def _bind_close_deliver(seed: int) -> None:
    ledger = Ledger()
    t = UdpTable(HashSecret(random.Random(1)), size=16, rng=random.Random(2),
                 tuning=Tuning(ip_local_port_range=RANGE), release=ledger.release)
    initial = [new_member(t, random.Random(i)) for i in range(8)]  # kept alive: ids stay unique
    for sk in initial:
        if sk.lport != PORT:  # keep the stable set on the delivery port
            t.close(sk)
    stable = [sk for sk in initial if sk.hashed]
    stable_ids = {id(sk) for sk in stable}
    created: list[list[UdpEntry]] = [[], []]
    deliveries = [0, 0]
    failures: list[BaseException] = []
    deadline_at = time.monotonic_ns() + int(DURATION * 1e9)

    def churn(index: int) -> None:
        rng = random.Random(1000 * seed + 100 + index)
        live: list[UdpEntry] = []
        try:
            # until the deadline and one completed grace period, however loaded the
            # machine (a synchronize below may time out while readers are in sections)
            while time.monotonic_ns() < deadline_at or not t.rcu.grace_periods:
                if len(live) < 12 and rng.random() < 0.6:
                    try:
                        sk = new_member(t, rng)
                    except OSError:
                        continue  # ephemeral range full for a moment
                    created[index].append(sk)
                    live.append(sk)
                elif live and rng.random() < 0.3:
                    # connect()/disconnect() rehash between hash2 slots under deliveries.
                    sk = live[rng.randrange(len(live))]
                    if sk.state == State.ESTABLISHED:
                        t.disconnect(sk)
                    else:
                        t.connect(sk, S1, 7, laddr=rng.choice((G1, UNI)))
                elif live:
                    t.close(live.pop(rng.randrange(len(live))))
                if rng.random() < 0.05:
                    # Drive grace periods so destructors run while deliveries go on.
                    t.rcu.synchronize(timeout=0.05)
            for sk in live:
                t.close(sk)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    def rx(index: int) -> None:
        rng = random.Random(1000 * seed + 200 + index)
        try:
            # at least one delivery, however late a loaded machine starts this thread,
            # and deliveries go on until a grace period completed under them
            while (deliveries[index] == 0 or time.monotonic_ns() < deadline_at
                   or not t.rcu.grace_periods):
                tuning, collect = MODES[rng.randrange(len(MODES))]
                got: list[UdpEntry] = []

                def queue(sk: UdpEntry, _data: object, got: list[UdpEntry] = got) -> None:
                    if ledger.was_released(sk):
                        ledger.error(f"delivered to {sk!r} after its close completed")
                    got.append(sk)

                t.mcast_deliver(G1, PORT, S1, 7, 1, b"d", queue, tuning=tuning,
                                collect=collect)
                ids = [id(sk) for sk in got]
                if len(set(ids)) != len(ids):
                    ledger.error(f"duplicate delivery ({collect}, hash2={tuning.udp_mcast_hash2})")
                if not stable_ids <= set(ids):
                    ledger.error("a socket bound for the whole run missed a datagram")
                deliveries[index] += 1
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=churn, args=(i,), name=f"churn{i}") for i in range(2)]
    threads += [threading.Thread(target=rx, args=(i,), name=f"rx{i}") for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=DURATION + 30)
    assert not any(th.is_alive() for th in threads), "stress threads did not finish"
    assert not failures, failures
    assert not ledger.errors, ledger.errors
    assert all(deliveries) and sum(len(c) for c in created) > 0
    assert t.rcu.grace_periods > 0
    assert t.rcu.barrier(timeout=10)  # run the destructors of every closed socket

    # Quiescent: only the stable sockets remain, each with just its owner's reference.
    t.check_consistency()
    assert {id(sk) for sk in t.entries()} == stable_ids
    assert all(sk.ref.read() == 1 for sk in stable)
    churned = [sk for per_thread in created for sk in per_thread]
    bad = [(sk, ledger.released.get(id(sk))) for sk in churned
           if ledger.released.get(id(sk)) != 1]
    assert not bad, bad[:5]
    assert all(sk.ref.is_dead() and not sk.hashed for sk in churned)
    for sk in stable:
        t.close(sk)
    assert t.entries() == [] and all(slot.count == 0 for slot in t.hash + t.hash2)
    # No port leaked: the whole ephemeral range binds again.
    ports = {t.bind(UdpEntry(AF_INET, ANY4), 0) for _ in range(RANGE[1] - RANGE[0] + 1)}
    assert ports == set(range(RANGE[0], RANGE[1] + 1))
