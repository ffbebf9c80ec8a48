"""Multi-thread stress of the TCP tables, once per scheduling-jitter seed
(``rcunet.sync.jitter``; ``RCUNET_JITTER_SEEDS``, default 5), bounded: 0.6 s per seed by
default, ``RCUNET_STRESS_SECONDS`` to change it, e.g. 10.

Eight threads on one TcpHashInfo: five connectors (connect() autoselect in a 200-port
range towards four destinations, then close() or TIME_WAIT, expiring TIME_WAIT entries,
looking up their own and random tuples, explicit binds), one replacer flipping a fixed
4-tuple between ESTABLISHED and TIME_WAIT with ehash.replace() (the replaced entry's last
reference is dropped after an RCU grace period, as Linux frees a socket only after the
readers that could see it), one reader that looks that tuple up continuously, and one
checker scanning bucket snapshots for a 4-tuple present twice.

Checked during the run: a connection's owner always finds it, the flipping tuple is never
missing, no bucket ever holds a 4-tuple twice.  Checked at the end: after everything is
closed or expired, the established hash is empty, no port is in use, no tb2 remains,
every socket's refcount is back to 1, and lockdep has no report (the suite-wide fixture).
"""

from __future__ import annotations

import errno
import random
import threading
import time

import pytest
from tables_helpers import D4, L4, make_tables, sock

from rcunet.sync.jitter import Jitter, stress_seconds, stress_seeds
from rcunet.sync.rcu import Rcu
from rcunet.tables import AF_INET, SockEntry, State, TimeWaitEntry
from rcunet.tables.ehash import put_entry

SECONDS = stress_seconds(0.6)
DESTS = [(D4, 80), (D4, 81), (bytes([10, 0, 0, 3]), 80), (bytes([10, 0, 0, 4]), 443)]
FLIP_KEY = (bytes([10, 9, 9, 9]), 7000, bytes([10, 9, 9, 8]), 8000)


@pytest.mark.stress
@pytest.mark.parametrize("seed", stress_seeds(), ids=lambda seed: f"jitter{seed}")
def test_tables_under_concurrent_churn(seed):
    with Jitter(seed) as jitter:
        _churn(seed)
    assert jitter.arrivals() > 0


def _churn(seed: int) -> None:
    tables = make_tables(5, ip_local_port_range=(40000, 40199), tcp_tw_reuse=0)
    tables.ehash  # noqa: B018 - the hash is shared by every thread below
    deadline = time.monotonic() + SECONDS
    errors: list[str] = []
    all_socks: list[list[SockEntry]] = []
    leftovers: list[list[object]] = []
    ops = [0] * 8
    grace = Rcu("tables-stress")

    def fail(msg: str) -> None:
        errors.append(msg)

    def connector(idx: int) -> None:
        rng = random.Random(seed * 100 + idx)
        mine: list[SockEntry] = []
        tws: list[TimeWaitEntry] = []
        bound: list[SockEntry] = []
        created: list[SockEntry] = []
        all_socks.append(created)
        n = 0
        while (n == 0 or time.monotonic() < deadline) and not errors:  # at least one op
            n += 1
            roll = rng.random()
            if roll < 0.45 or not mine:
                sk = sock(L4)
                created.append(sk)
                daddr, dport = rng.choice(DESTS)
                try:
                    tables.connect(sk, daddr, dport)
                except OSError as exc:
                    if exc.errno != errno.EADDRNOTAVAIL:
                        fail(f"connect: {exc!r}")
                    continue
                sk.state = State.ESTABLISHED
                mine.append(sk)
                found = tables.ehash.lookup(*sk.key)
                if found is not sk:
                    fail(f"owner lookup found {found!r} for {sk!r}")
                if found is not None:
                    put_entry(found)
            elif roll < 0.65:
                sk = mine.pop(rng.randrange(len(mine)))
                tables.close(sk)
            elif roll < 0.8:
                sk = mine.pop(rng.randrange(len(mine)))
                tw = tables.time_wait(sk, timeout=10**9)
                if tw is not None:
                    tws.append(tw)
            elif roll < 0.9 and tws:
                tw = tws.pop(0)
                if not tables.tw_kill(tw):
                    fail(f"{tw!r} was claimed by someone else")
            elif roll < 0.95:
                b = sock(L4)
                created.append(b)
                try:
                    tables.bind_socket(b, L4, rng.randrange(40000, 40200))
                    bound.append(b)
                except OSError as exc:
                    if exc.errno != errno.EADDRINUSE:
                        fail(f"bind: {exc!r}")
                if len(bound) > 3:
                    tables.close(bound.pop(0))
            else:
                port = rng.randrange(40000, 40200)
                daddr, dport = rng.choice(DESTS)
                e = tables.ehash.lookup(L4, port, daddr, dport)
                if e is not None:
                    if e.key != (L4, port, daddr, dport):
                        fail(f"lookup returned {e!r} for another tuple")
                    put_entry(e)
        ops[idx] = n
        leftovers.append([*mine, *tws, *bound])

    # Hashed before any thread starts: the reader must find it from its first lookup.
    first_flip = SockEntry(AF_INET, *FLIP_KEY, state=State.ESTABLISHED)
    tables.ehash.insert(first_flip)

    def replacer() -> None:
        current: SockEntry | TimeWaitEntry = first_flip
        n = 0
        while (n == 0 or time.monotonic() < deadline) and not errors:  # at least one op
            if current.state == State.TIME_WAIT:
                new: SockEntry | TimeWaitEntry = SockEntry(AF_INET, *FLIP_KEY,
                                                           state=State.ESTABLISHED)
            else:
                new = TimeWaitEntry(current, now=0, expires_at=1)
            if not tables.ehash.replace(current, new):
                fail("replace lost the flipping entry")
            # The replaced entry may only die once every reader that could hold the old
            # snapshot is done (Linux: the socket outlives the RCU readers that saw it).
            grace.call_rcu(current.ref.put)
            current = new
            n += 1
            if n % 64 == 0:
                grace.poll()
        ops[5] = n
        leftovers.append([current])

    def reader() -> None:
        n = 0
        while (n == 0 or time.monotonic() < deadline) and not errors:  # at least one op
            with grace.read():
                e = tables.ehash.lookup(*FLIP_KEY)
            if e is None:
                fail("the flipping tuple was missing")
            else:
                put_entry(e)
            n += 1
        ops[6] = n

    def checker() -> None:
        n = 0
        while (n == 0 or time.monotonic() < deadline) and not errors:  # at least one op
            for chain in list(tables.ehash._buckets):
                keys = [e.key for e in chain]
                if len(keys) != len(set(keys)):
                    fail(f"a bucket holds a 4-tuple twice: {chain!r}")
            n += 1
        ops[7] = n

    threads = [threading.Thread(target=connector, args=(i,), name=f"connector-{i}")
               for i in range(5)]
    threads += [threading.Thread(target=f, name=f.__name__) for f in (replacer, reader, checker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert all(ops), ops
    assert grace.barrier(timeout=10)

    for group in leftovers:
        for e in group:
            if isinstance(e, TimeWaitEntry):
                if e.key == FLIP_KEY:
                    assert tables.ehash.remove(e)
                else:
                    assert tables.tw_kill(e)
            elif isinstance(e, SockEntry) and e.key == FLIP_KEY:
                assert tables.ehash.remove(e)
            else:
                tables.close(e)  # type: ignore[arg-type]
    assert len(tables.ehash) == 0 and tables.ehash.tw_count() == 0
    assert tables.bind.ports_in_use() == set() and tables.bind.all_tb2() == []
    for created in all_socks:
        for sk in created:
            assert sk.ref.read() == 1, sk
