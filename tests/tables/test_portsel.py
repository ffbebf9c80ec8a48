"""connect()-time port selection (reference §3), behaviours of §8.2:

18 default range: the first pass only yields ports with low's parity, then the other
   parity; IP_LOCAL_PORT_RANGE gives step 1 (both parities in one pass).
19 candidate order is a function of (perturbation table, secret, 10-second time bucket);
   start = low + ((perturb[idx] + (port_offset >> 32)) % remaining & ~1); after success
   perturb[idx] grows by max(i, r*step) + step, r in 0..7; replayable from a seeded RNG.
20 ports whose tb was made by bind() are never autoselected; reserved ports are skipped.
21 exhaustion: EADDRNOTAVAIL, and with the pre-check no bhash/ehash lock is taken for a
   candidate whose tuple a non-TIME_WAIT socket holds (counted, and seen in lock_stat).
23 TIME_WAIT reuse matrix (tcp_tw_reuse 0/1/2, loopback, timestamps, tcp_tw_reuse_delay,
   explicitly bound port, dying tw) and what reuse does (write_seq, ts_recent, unhash,
   TWRecycled).
24 an already-bound socket's connect() does no search: one locked 4-tuple check.
25 hash_port0: the 4-tuple hash is computed once per connect(), not once per candidate.
Plus: ports come back on close and TIME_WAIT expiry; no port leaks.
(22, the locked re-validation race, is in test_tables_races.py.)
"""

from __future__ import annotations

import errno
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tables_helpers import D4, L4, LO4, FakeClock, make_tables, mapped, sock

from rcunet.host.counters import Counters
from rcunet.sync import lockstat
from rcunet.tables import ConnectStats, State
from rcunet.tables.portsel import PERTURB_SIZE
from rcunet.tables.secret import M32, HashSecret

RANGE = (40000, 40099)


def connect_new(tables, laddr=L4, daddr=D4, dport=80, stats=None, **kw):
    sk = sock(laddr, **kw)
    tables.connect(sk, daddr, dport, stats)
    return sk


def fill(tables, ports, laddr=L4, daddr=D4, dport=80, state=State.ESTABLISHED):
    """Connected sockets on exactly these ports (connect() autobind, tb fastreuse -1)."""
    socks = []
    for port in ports:
        sk = sock(laddr)
        sk.local_port_range = (port, port)
        tables.connect(sk, daddr, dport)
        sk.state = state
        socks.append(sk)
    return socks


def test_first_pass_has_lows_parity_then_the_other():
    tables = make_tables(ip_local_port_range=RANGE)
    order = tables.ports.candidate_order(sock(L4), D4, 80)
    assert len(order) == 100 and sorted(order) == list(range(40000, 40100))
    assert all(p % 2 == 0 for p in order[:50]) and all(p % 2 == 1 for p in order[50:])
    ports = [connect_new(tables).lport for _ in range(60)]
    assert all(p % 2 == 0 for p in ports[:50]) and all(p % 2 == 1 for p in ports[50:])


def test_odd_low_means_odd_ports_first():
    tables = make_tables(ip_local_port_range=(40001, 40010))
    order = tables.ports.candidate_order(sock(L4), D4, 80)
    assert {p % 2 for p in order[:5]} == {1} and len(order) == 10


def test_per_socket_range_uses_step_one():
    tables = make_tables(ip_local_port_range=RANGE)
    sk = sock(L4)
    sk.local_port_range = (40010, 40019)
    order = tables.ports.candidate_order(sk, D4, 80)
    assert sorted(order) == list(range(40010, 40020))
    start = order[0]
    assert order == [40010 + (start - 40010 + k) % 10 for k in range(10)]


def test_start_offset_formula_and_perturbation_update(clock):
    tables = make_tables(ip_local_port_range=RANGE, clock=clock)
    sk = sock(L4)
    port_offset = tables.secret.port_ephemeral(L4, D4, 80, clock())
    table = tables.ports.table_perturb()
    assert len(table) == PERTURB_SIZE
    index = port_offset & (PERTURB_SIZE - 1)
    before = table[index]
    expected = 40000 + (((before + (port_offset >> 32)) & M32) % 100 & ~1)
    assert tables.ports.candidate_order(sk, D4, 80)[0] == expected
    assert tables.connect(sk, D4, 80) == expected
    assert table[index] - before in {max(0, r * 2) + 2 for r in range(8)}
    # Deep in the scan, i dominates the random part: the entry grows by exactly i + 2.
    tables2 = make_tables(ip_local_port_range=RANGE, clock=clock)
    order = tables2.ports.candidate_order(sock(L4), D4, 80)
    table2 = tables2.ports.table_perturb()
    saved = list(table2)
    fill(tables2, order[:20])  # setup connects nudge the table too: undo that
    table2[:] = saved
    before2 = table2[index]
    assert tables2.connect(sock(L4), D4, 80) == order[20]
    assert table2[index] - before2 == 2 * 20 + 2


def test_candidate_order_replays_from_the_seed(clock):
    def run(seed):
        tables = make_tables(seed, clock=clock, ip_local_port_range=RANGE)
        return [connect_new(tables).lport for _ in range(30)]

    assert run(11) == run(11)
    assert run(11) != run(12)


def test_port_offset_is_resalted_every_ten_seconds():
    secret = HashSecret(__import__("random").Random(1))
    t0 = 50 * 10**9
    first = secret.port_ephemeral(L4, D4, 80, t0)
    assert first == secret.port_ephemeral(L4, D4, 80, t0 + 9 * 10**8)
    assert first != secret.port_ephemeral(L4, D4, 80, t0 + 10**10)
    assert first != secret.port_ephemeral(L4, D4, 81, t0)


def test_a_remembered_port_offset_is_the_keyed_hash_of_its_own_inputs():
    """port_ephemeral remembers its last answer; any other input gets its own hash."""
    t0 = 50 * 10**9
    inputs = [(L4, D4, 80, t0), (L4, D4, 80, t0 + 1), (L4, D4, 81, t0),
              (L4, bytes([10, 0, 0, 9]), 80, t0), (bytes([10, 0, 0, 7]), D4, 80, t0),
              (L4, D4, 80, t0 + 10**10), (L4, D4, 80, t0)]
    remembering = HashSecret(__import__("random").Random(1))
    for args in inputs:
        fresh = HashSecret(__import__("random").Random(1))
        assert remembering.port_ephemeral(*args) == fresh.port_ephemeral(*args), args


def test_bind_owned_and_reserved_ports_are_never_autoselected():
    tables = make_tables(ip_local_port_range=(40000, 40003),
                         ip_local_reserved_ports=frozenset({40002}))
    tables.bind_socket(sock(L4, reuseaddr=True), L4, 40000)
    tables.bind_socket(sock(bytes([10, 0, 0, 7])), bytes([10, 0, 0, 7]), 40001)
    assert connect_new(tables).lport == 40003
    stats = ConnectStats()
    with pytest.raises(OSError) as exc:
        connect_new(tables, stats=stats)
    assert exc.value.errno == errno.EADDRNOTAVAIL
    assert stats.candidates == 3  # 40002 is reserved, never a candidate
    assert stats.bhash_locks == 0  # bind-owned ports are rejected by the pre-check


@pytest.mark.parametrize("modern", [True, False])
def test_exhaustion_and_occupied_candidate_locks(modern):
    tables = make_tables(ip_local_port_range=(40000, 40031), connect_rcu_precheck=modern,
                         connect_hash_port0=modern)
    fill(tables, range(40000, 40032))
    stats = ConnectStats()
    with lockstat.collecting():
        with pytest.raises(OSError) as exc:
            connect_new(tables, stats=stats)
        snap = lockstat.snapshot()
    assert exc.value.errno == errno.EADDRNOTAVAIL
    assert stats.candidates == 32
    acquisitions = {name: s.acquisitions for name, s in snap.items()}
    if modern:
        assert stats.occupied_candidate_locks == 0 and stats.locks == 0
        assert acquisitions.get("bhash_lock", 0) == 0 and acquisitions.get("ehash_lock", 0) == 0
        assert stats.rcu_skips == 32
    else:
        assert stats.bhash_locks == stats.ehash_locks == 32
        assert stats.occupied_candidate_locks == 64
        assert acquisitions["bhash_lock"] == 32 and acquisitions["ehash_lock"] == 32


@pytest.mark.parametrize("modern", [True, False])
def test_hash_is_computed_once_per_connect(modern):
    tables = make_tables(ip_local_port_range=(40000, 40031), connect_hash_port0=modern,
                         connect_rcu_precheck=modern)
    fill(tables, range(40000, 40030))
    calls = {"port0": 0, "full": 0}
    real = tables.ehash.secret

    class Counting(HashSecret):
        def ehash_port0(self, *a):
            calls["port0"] += 1
            return real.ehash_port0(*a)

        def ehashfn(self, *a):
            calls["full"] += 1
            return real.ehashfn(*a)

    tables.ehash.secret = Counting(random.Random(0))
    stats = ConnectStats()
    sk = connect_new(tables, stats=stats)
    assert sk.lport in (40030, 40031) and stats.candidates >= 2
    if modern:
        assert calls == {"port0": 1, "full": 0}
    else:
        assert calls["port0"] == 0 and calls["full"] == stats.candidates
    tables.ehash.secret = real
    assert sk.sk_hash == real.ehashfn(L4, sk.lport, D4, 80)


def test_bound_socket_connect_is_one_locked_check():
    tables = make_tables(ip_local_port_range=RANGE)
    sk = sock(L4)
    tables.bind_socket(sk, L4, 5000)
    stats = ConnectStats()
    assert tables.connect(sk, D4, 80, stats) == 5000
    assert (stats.candidates, stats.ehash_locks, stats.bhash_locks) == (0, 1, 0)
    other = sock(L4, reuseaddr=True)
    sk.reuseaddr = True
    tables.close(sk)
    tables.bind_socket(other, L4, 5000)
    tables.connect(other, D4, 80)
    third = sock(L4, reuseaddr=True)
    tables.bind_socket(third, L4, 5000)
    with pytest.raises(OSError) as exc:
        tables.connect(third, D4, 80)
    assert exc.value.errno == errno.EADDRNOTAVAIL
    assert third.state == State.CLOSE and third.fport == 0


def test_connect_rejects_bad_arguments():
    tables = make_tables()
    with pytest.raises(OSError) as exc:
        tables.connect(sock(L4), D4, 0)
    assert exc.value.errno == errno.EADDRNOTAVAIL
    with pytest.raises(OSError) as exc:
        tables.connect(sock(L4), b"\x01", 80)
    assert exc.value.errno == errno.EINVAL
    sk = connect_new(tables)
    with pytest.raises(OSError) as exc:
        tables.connect(sk, D4, 81)
    assert exc.value.errno == errno.EISCONN
    with pytest.raises(OSError) as exc:
        tables.connect(sock(bytes(4)), D4, 80)  # wildcard source and no saddr
    assert exc.value.errno == errno.EADDRNOTAVAIL


def test_ports_come_back_on_close_and_tw_expiry():
    tables = make_tables(ip_local_port_range=(40000, 40009))
    socks = [connect_new(tables) for _ in range(10)]
    with pytest.raises(OSError):
        connect_new(tables)
    tws = []
    for i, sk in enumerate(socks):
        if i % 2:
            tables.close(sk)
        else:
            tws.append(tables.time_wait(sk, timeout=10**9))
    assert len(tables.bind.ports_in_use()) == 5
    for tw in tws:
        assert tables.tw_kill(tw)
    assert tables.bind.ports_in_use() == set() and len(tables.ehash) == 0
    assert tables.bind.all_tb2() == []
    assert len({connect_new(tables).lport for _ in range(10)}) == 10


# --- TIME_WAIT reuse ---------------------------------------------------------------------
SEC = 10**9

TW_MATRIX = [
    # id, tcp_tw_reuse, timestamps, ms since TIME_WAIT, local addr, bound dev, explicit, reused
    ("no timestamps, reuse=1", 1, False, 5000, L4, 0, False, False),
    ("timestamps, reuse=0", 0, True, 5000, L4, 0, False, False),
    ("timestamps, reuse=1, after delay", 1, True, 1001, L4, 0, False, True),
    ("timestamps, reuse=1, exactly delay", 1, True, 1000, L4, 0, False, False),
    ("timestamps, reuse=1, before delay", 1, True, 400, L4, 0, False, False),
    ("reuse=2, not loopback", 2, True, 5000, L4, 0, False, False),
    ("reuse=2, loopback address", 2, True, 5000, LO4, 0, False, True),
    ("reuse=2, v4-mapped loopback", 2, True, 5000, mapped(LO4), 0, False, True),
    ("reuse=2, loopback device", 2, True, 5000, L4, 1, False, True),
    ("explicit port, reuse=0", 0, True, 0, L4, 0, True, True),
    ("explicit port, no timestamps", 1, False, 5000, L4, 0, True, False),
]


def _peer(laddr: bytes) -> bytes:
    return mapped(D4) if len(laddr) == 16 else D4


@pytest.mark.parametrize(("reuse", "timestamps", "elapsed_ms", "laddr", "dev", "explicit",
                          "reused"), [row[1:] for row in TW_MATRIX],
                         ids=[row[0] for row in TW_MATRIX])
def test_tw_reuse_matrix(reuse, timestamps, elapsed_ms, laddr, dev, explicit, reused):
    clock = FakeClock()
    counters = Counters()
    tables = make_tables(clock=clock, tcp_tw_reuse=reuse, tcp_tw_reuse_delay=1000)
    tables.ports.counters = counters
    daddr = _peer(laddr)
    old = sock(laddr, bound_dev=dev, reuseaddr=True)
    if explicit:
        tables.bind_socket(old, laddr, 40000)
    else:
        old.local_port_range = (40000, 40000)
    tables.connect(old, daddr, 80)
    tw = tables.time_wait(old, timeout=60 * SEC, snd_nxt=123456, ts_recent=777,
                          ts_recent_stamp=clock() if timestamps else 0)
    assert tw is not None
    clock.advance_ms(elapsed_ms)
    new = sock(laddr, bound_dev=dev, reuseaddr=True)
    if explicit:
        tables.bind_socket(new, laddr, 40000)
    else:
        new.local_port_range = (40000, 40000)
    stats = ConnectStats()
    if not reused:
        with pytest.raises(OSError) as exc:
            tables.connect(new, daddr, 80, stats)
        assert exc.value.errno == errno.EADDRNOTAVAIL
        assert tables.ehash.contains(tw) and tw.ref.read() == 1
        return
    assert tables.connect(new, daddr, 80, stats) == 40000
    assert new.write_seq == 123456 + 65537
    assert (new.ts_recent, new.ts_recent_stamp) == (777, tw.ts_recent_stamp)
    assert not tables.ehash.contains(tw) and tw.tb is None and tw.ref.is_dead()
    assert tables.bind.owners_of(40000) == [new]
    assert stats.tw_recycled == 1 and counters.get("TcpExtTWRecycled") == 1
    assert not tables.tw_kill(tw)  # the timer finds it gone


def _reuse_setup(**tuning):
    clock = FakeClock()
    tables = make_tables(clock=clock, tcp_tw_reuse=1, **tuning)
    old = sock(L4)
    old.local_port_range = (40000, 40000)
    tables.connect(old, D4, 80)
    return clock, tables, old


def test_write_seq_wraps_to_one():
    clock, tables, old = _reuse_setup()
    tables.time_wait(old, timeout=60 * SEC, snd_nxt=2**32 - 65537, ts_recent_stamp=clock())
    clock.advance_ms(2000)
    new = sock(L4)
    new.local_port_range = (40000, 40000)
    tables.connect(new, D4, 80)
    assert new.write_seq == 1


def test_repair_mode_keeps_write_seq():
    clock, tables, old = _reuse_setup()
    tables.time_wait(old, timeout=60 * SEC, snd_nxt=5, ts_recent_stamp=clock())
    clock.advance_ms(2000)
    new = sock(L4)
    new.local_port_range = (40000, 40000)
    new.repair = True
    new.write_seq = 42
    tables.connect(new, D4, 80)
    assert new.write_seq == 42


def test_dying_tw_is_never_reused():
    clock, tables, old = _reuse_setup()
    tw = tables.time_wait(old, timeout=60 * SEC, snd_nxt=5, ts_recent_stamp=clock())
    assert tw is not None and tw.ref.put()  # refcount 0 while still hashed
    clock.advance_ms(2000)
    new = sock(L4)
    new.local_port_range = (40000, 40000)
    with pytest.raises(OSError) as exc:
        tables.connect(new, D4, 80)
    assert exc.value.errno == errno.EADDRNOTAVAIL


@pytest.mark.parametrize(("per_socket", "expected"), [
    ((40010, 40019), (40010, 40019, True)),
    ((30000, 40019), (40000, 40019, True)),   # a bound outside the sysctl range is ignored
    ((40010, 50000), (40010, 40099, True)),
    (None, (40000, 40099, False)),
])
def test_per_socket_range_narrows_the_sysctl(per_socket, expected):
    tables = make_tables(ip_local_port_range=RANGE)
    sk = sock(L4)
    sk.local_port_range = per_socket
    assert tables.bind.local_port_range(sk, tables.tuning) == expected


@settings(max_examples=30, deadline=None)
@given(low=st.integers(1024, 60000), size=st.integers(1, 40), seed=st.integers(0, 2**16),
       reserved=st.sets(st.integers(0, 39), max_size=8), per_socket=st.booleans(),
       now=st.integers(0, 10**12))
def test_candidate_order_visits_each_port_once(low, size, seed, reserved, per_socket, now):
    """Step 1 (per-socket range) or an even-sized range: every non-reserved port exactly
    once.  (An odd-sized range with step 2 drops one port, as Linux's remaining &= ~1.)"""
    high = low + size - 1
    reserved_ports = frozenset(low + r for r in reserved if r < size)
    tables = make_tables(seed, ip_local_port_range=(low, high),
                         ip_local_reserved_ports=reserved_ports)
    sk = sock(L4)
    if per_socket:
        sk.local_port_range = (low, high)
    order = tables.ports.candidate_order(sk, D4, 80, now)
    everything = set(range(low, high + 1)) - reserved_ports
    assert len(order) == len(set(order))
    assert set(order) <= everything
    if per_socket or size % 2 == 0:
        assert set(order) == everything
    else:
        assert len(everything - set(order)) <= 1
