"""Established hash (reference §1), behaviours of §8.2:

1  ``hash(l, lport, f, fport) == hash(l, 0, f, fport) + lport`` (mod 2^32); keyed per host.
2  lock stripe = locks[hash & locks_mask]; lock count = round_up_pow2(max(cpu lines,
   node pages)) capped at the bucket count.
3/4 (nulls markers, diverted reader) have no Python counterpart: a bucket is an immutable
   tuple, so a reader cannot be diverted into another chain (see rcunet/tables/ehash.py).
5  re-check after the pin: an entry recycled between match and pin is skipped, the pin is
   dropped and the lookup restarts.
6  a matching entry at refcount 0 gives "not found" without a restart.
7  identity (``sk_hash``, key) is final before publication.
8  atomic replace: a concurrent lookup finds the old or the new entry, never neither;
   a TIME_WAIT entry is never findable with refcount 0.
9  duplicate 4-tuple insert refused.
10 unhash is idempotent.
"""

from __future__ import annotations

import errno
import random
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tables_helpers import D4, L4

from rcunet.sync import hooks
from rcunet.sync.hooks import Schedule
from rcunet.tables import AF_INET, RequestEntry, SockEntry, State, TimeWaitEntry
from rcunet.tables.ehash import EstablishedTable, ehash_lock_count, put_entry
from rcunet.tables.secret import HashSecret

addr4 = st.binary(min_size=4, max_size=4)
port = st.integers(0, 0xFFFF)


def table(seed: int = 7, size: int = 64) -> EstablishedTable:
    return EstablishedTable(HashSecret(random.Random(seed)), size=size, ncpus=2)


def established(lport: int = 40000, fport: int = 80, laddr: bytes = L4,
                faddr: bytes = D4) -> SockEntry:
    return SockEntry(AF_INET, laddr, lport, faddr, fport, state=State.ESTABLISHED)


@given(addr4, port, addr4, port)
def test_lport_is_added_outside_the_mix(laddr, lport, faddr, fport):
    secret = HashSecret(random.Random(3))
    assert secret.ehashfn(laddr, lport, faddr, fport) == (
        secret.ehash_port0(laddr, faddr, fport) + lport) % 2**32


def test_two_hosts_place_the_same_tuples_differently():
    a, b = HashSecret(random.Random(1)), HashSecret(random.Random(2))
    rng = random.Random(0)
    tuples = [(rng.randbytes(4), rng.randrange(65536), rng.randbytes(4), rng.randrange(65536))
              for _ in range(200)]
    same = sum(a.ehashfn(*t) & 1023 == b.ehashfn(*t) & 1023 for t in tuples)
    assert same < 20  # ~200/1024 expected by chance


@pytest.mark.parametrize(("buckets", "ncpus", "nodes", "expected"), [
    (1 << 16, 2, 1, 1024),        # one 4 KiB page of 4-byte locks beats 2 CPUs x 32
    (1 << 16, 64, 1, 2048),       # 32 locks per CPU
    (1 << 20, 480, 6, 16384),     # 480 CPUs: 15360 rounded up to a power of two
    (1 << 20, 2, 6, 8192),        # NUMA dispersion: 6 pages -> 6144 -> 8192
    (256, 64, 1, 256),            # never more locks than buckets
])
def test_lock_array_sizing(buckets, ncpus, nodes, expected):
    assert ehash_lock_count(buckets, ncpus, nodes) == expected


def test_bucket_lock_is_the_stripe_of_the_hash():
    t = table(size=1 << 12)
    n = t.lock_count
    assert n & (n - 1) == 0 and 1 <= n <= t.size
    for h in (0, 1, 12345, 2**32 - 1):
        assert t.ehash_lock(h) is t.ehash_lock(h + 7 * n)
        assert t.ehash_lock(h) is t._locks[h & (n - 1)]


def test_insert_lookup_remove_roundtrip():
    t = table()
    sk = established()
    assert t.insert(sk)
    found = t.lookup(L4, 40000, D4, 80)
    assert found is sk and sk.ref.read() == 2
    put_entry(found)
    assert t.lookup(L4, 40001, D4, 80) is None
    assert t.remove(sk) and not t.remove(sk)  # idempotent (10)
    assert t.lookup(L4, 40000, D4, 80) is None
    assert sk.ref.read() == 1


def test_duplicate_four_tuple_is_refused():
    t = table()
    assert t.insert(established())
    assert not t.insert(established())
    assert len(t) == 1


def test_bound_device_must_match():
    t = table()
    sk = established()
    sk.bound_dev = 3
    t.insert(sk)
    assert t.lookup(L4, 40000, D4, 80, dif=4) is None
    found = t.lookup(L4, 40000, D4, 80, dif=3)
    assert found is sk
    put_entry(found)


def test_identity_is_final_before_publication():
    t = table()
    sk = established()
    seen = []

    def before_publish():
        seen.append((sk.sk_hash, t.lookup(L4, 40000, D4, 80)))

    with hooks.installed({"ehash.insert.before_publish": before_publish}):
        t.insert(sk)
    assert seen == [(t.hashfn(L4, 40000, D4, 80), None)]


def test_entry_at_refcount_zero_is_not_found_and_no_restart():
    t = table()
    sk = established()
    t.insert(sk)
    assert sk.ref.put()  # dying while still hashed
    loads = []
    with hooks.installed({"ehash.lookup.after_snapshot": lambda: loads.append(1)}):
        assert t.lookup(L4, 40000, D4, 80) is None
    assert len(loads) == 1
    assert sk.ref.is_dead()


def test_entry_recycled_between_match_and_pin_is_skipped():
    t = table()
    x = established()
    t.insert(x)
    result = []
    reader = threading.Thread(target=lambda: result.append(t.lookup(L4, 40000, D4, 80)),
                              name="reader")
    with Schedule() as sched:
        sched.pause_at("ehash.lookup.after_match", thread="reader")
        reader.start()
        sched.wait_paused("ehash.lookup.after_match")
        # X dies and its object is reused for another connection; Y takes X's old tuple.
        assert t.remove(x) and x.ref.put()
        x.recycle(L4, 41000, D4, 80)
        x.state = State.ESTABLISHED
        t.insert(x)
        y = established()
        t.insert(y)
        sched.release("ehash.lookup.after_match")
        reader.join(5)
    assert result == [y]
    assert x.ref.read() == 1  # the reader's pin on the recycled X was dropped
    assert y.ref.read() == 2
    put_entry(y)


def test_pinned_entry_cannot_be_recycled():
    t = table()
    x = established()
    t.insert(x)
    found = t.lookup(L4, 40000, D4, 80)
    t.remove(x)
    x.ref.put()  # the table's reference; the lookup's pin keeps it alive
    with pytest.raises(OSError):
        x.recycle(L4, 41000, D4, 80)
    put_entry(found)
    assert x.ref.is_dead()


@pytest.mark.parametrize("kind", ["established->timewait", "request->full"])
def test_replace_is_one_publication(kind, clock):
    t = table()
    if kind == "established->timewait":
        old = established()
    else:
        old = RequestEntry(AF_INET, L4, 40000, D4, 80)
    t.insert(old)
    if kind == "established->timewait":
        new = TimeWaitEntry(old, now=clock(), expires_at=clock() + 60, ts_recent_stamp=1)
    else:
        new = established()
    seen_before = []

    def before_publish():
        e = t.lookup(L4, 40000, D4, 80)
        seen_before.append(e)
        put_entry(e)

    with hooks.installed({"ehash.replace.before_publish": before_publish}):
        assert t.replace(old, new)
    assert seen_before == [old]
    e = t.lookup(L4, 40000, D4, 80)
    assert e is new and new.ref.read() == 2
    put_entry(e)
    assert not t.replace(old, new)  # old is gone
    assert t.tw_count() == (1 if kind == "established->timewait" else 0)


def test_replace_never_exposes_neither_to_a_concurrent_reader(clock):
    t = table()
    current = established()
    t.insert(current)
    stop = threading.Event()
    misses: list[int] = []
    dead_tw: list[object] = []

    def reader():
        n = 0
        while not stop.is_set():
            e = t.lookup(L4, 40000, D4, 80)
            n += 1
            if e is None:
                misses.append(n)
                continue
            if e.ref.read() < 2:
                dead_tw.append(e)
            put_entry(e)

    r = threading.Thread(target=reader, name="reader")
    retired = []  # replaced entries stay alive until the reader is done (its snapshots)
    r.start()
    try:
        for i in range(300):
            if i % 2 == 0:
                new = TimeWaitEntry(current, now=clock(), expires_at=clock() + 1)
            else:
                new = established()
            assert t.replace(current, new)
            retired.append(current)
            current = new
    finally:
        stop.set()
        r.join(5)
    assert misses == []
    assert dead_tw == []
    assert all(e.ref.read() == 1 for e in retired)


def test_inserts_go_to_the_chain_head():
    t = table(size=1)  # one bucket: every entry shares the chain
    a, b = established(40000), established(40001)
    t.insert(a)
    t.insert(b)
    assert t.chain_rcu(0) == (b, a)


def test_misuse_is_oserror():
    t = table()
    sk = established()
    t.insert(sk)
    with pytest.raises(OSError) as exc:
        t.insert(sk)
    assert exc.value.errno == errno.EISCONN
    with pytest.raises(OSError) as exc:
        t.replace(sk, established(40001))
    assert exc.value.errno == errno.EINVAL
