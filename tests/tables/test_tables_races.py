"""Races forced with named yield points (rcunet.sync.hooks), reference §8.2:

8  an ehash replace during a lookup: the lookup finds the old or the new entry, never
   neither (both orders forced).
22 two connect()s race for the last free 4-tuple past the lockless pre-check: exactly one
   wins, the other gets EADDRNOTAVAIL; no duplicate 4-tuple in ehash.  With two free
   ports both win, on different ports.
   bind() takes the port a connect() pre-checked as free: the locked path sees the
   bind-owned tb and moves on (EADDRNOTAVAIL for a one-port range).
   TIME_WAIT expiry vs connect() reuse of the same tw: exactly one of them claims it.
(5, the entry recycled between match and pin, is in test_ehash.py.)
"""

from __future__ import annotations

import errno
import threading

from tables_helpers import D4, L4, FakeClock, make_tables, sock

from rcunet.sync.hooks import Schedule
from rcunet.tables import SockEntry, State, TimeWaitEntry
from rcunet.tables.ehash import put_entry


def run_threads(targets: dict[str, object]) -> dict[str, threading.Thread]:
    threads = {name: threading.Thread(target=fn, name=name) for name, fn in targets.items()}
    for t in threads.values():
        t.start()
    return threads


def test_replace_during_lookup_finds_old_or_new(clock):
    tables = make_tables(clock=clock)
    old = sock(L4)
    old.local_port_range = (40000, 40000)
    tables.connect(old, D4, 80)
    found: list[object] = []

    def lookup():
        e = tables.ehash.lookup(L4, 40000, D4, 80)
        found.append(e)
        if e is not None:
            put_entry(e)

    # Snapshot taken before the replace: the reader still sees (and pins) the old entry.
    with Schedule() as sched:
        sched.pause_at("ehash.lookup.after_snapshot", thread="reader")
        threads = run_threads({"reader": lookup})
        sched.wait_paused()
        tw = tables.time_wait(old, timeout=10**9)
        sched.release()
        threads["reader"].join(5)
    assert found == [old]
    # Replace paused just before its publication: a reader sees the old entry.
    new = SockEntry(old.family, L4, 40000, D4, 80, state=State.ESTABLISHED)
    with Schedule() as sched:
        sched.pause_at("ehash.replace.before_publish", thread="writer")
        threads = run_threads({"writer": lambda: tables.ehash.replace(tw, new)})
        sched.wait_paused()
        lookup()
        sched.release()
        threads["writer"].join(5)
    lookup()
    assert found == [old, tw, new]


def _shared_port_setup(ports: tuple[int, int]):
    """The range's ports already carry a connect()-made tb (a connection to port 81), so
    the pre-check reaches the ehash test and finds the port-80 tuples free."""
    tables = make_tables(ip_local_port_range=ports, clock=FakeClock())
    for port in range(ports[0], ports[1] + 1):
        other = sock(L4)
        other.local_port_range = (port, port)
        tables.connect(other, D4, 81)
    return tables


def _race_connects(tables, n: int = 2):
    results: dict[str, object] = {}

    def attempt(name):
        sk = sock(L4)
        try:
            results[name] = (tables.connect(sk, D4, 80), sk)
        except OSError as exc:
            results[name] = exc

    with Schedule() as sched:
        sched.pause_at("portsel.connect.before_lock", count=n)
        threads = run_threads({f"c{i}": (lambda i=i: attempt(f"c{i}")) for i in range(n)})
        sched.wait_paused(count=n)  # both passed the lockless pre-check: "maybe free"
        sched.release()
        for t in threads.values():
            t.join(5)
    return results


def test_racing_connects_for_the_last_tuple_exactly_one_wins():
    tables = _shared_port_setup((40000, 40000))
    results = _race_connects(tables)
    wins = [r for r in results.values() if isinstance(r, tuple)]
    losses = [r for r in results.values() if isinstance(r, OSError)]
    assert len(wins) == 1 and len(losses) == 1
    assert losses[0].errno == errno.EADDRNOTAVAIL
    keys = [e.key for e in tables.ehash.entries()]
    assert len(keys) == len(set(keys)) == 2  # the port-81 connection and the winner


def test_racing_connects_with_two_free_ports_both_win():
    tables = _shared_port_setup((40000, 40001))
    results = _race_connects(tables)
    ports = sorted(r[0] for r in results.values() if isinstance(r, tuple))
    assert ports == [40000, 40001]


def test_bind_takes_the_port_between_precheck_and_lock():
    tables = make_tables(ip_local_port_range=(40000, 40000), clock=FakeClock())
    outcome: list[object] = []

    def connect():
        try:
            outcome.append(tables.connect(sock(L4), D4, 80))
        except OSError as exc:
            outcome.append(exc)

    with Schedule() as sched:
        sched.pause_at("portsel.connect.before_lock", thread="connector")
        threads = run_threads({"connector": connect})
        sched.wait_paused()
        owner = sock(L4)
        assert tables.bind_socket(owner, L4, 40000) == 40000
        sched.release()
        threads["connector"].join(5)
    assert isinstance(outcome[0], OSError) and outcome[0].errno == errno.EADDRNOTAVAIL
    assert tables.bind.owners_of(40000) == [owner]


def test_bind_after_connect_took_the_port_conflicts():
    tables = make_tables(ip_local_port_range=(40000, 40000))
    tables.connect(sock(L4), D4, 80)
    try:
        tables.bind_socket(sock(L4), L4, 40000)
    except OSError as exc:
        assert exc.errno == errno.EADDRINUSE
    else:
        raise AssertionError("bind() shared a port held by a connected socket")


def _tw_setup():
    clock = FakeClock()
    tables = make_tables(clock=clock, tcp_tw_reuse=1, ip_local_port_range=(40000, 40000))
    old = sock(L4)
    tables.connect(old, D4, 80)
    tw = tables.time_wait(old, timeout=10**9, ts_recent_stamp=clock())
    clock.advance_ms(5000)
    assert isinstance(tw, TimeWaitEntry)
    return tables, tw


def test_tw_expiry_then_connect():
    tables, tw = _tw_setup()
    assert tables.tw_kill(tw)
    new = sock(L4)
    assert tables.connect(new, D4, 80) == 40000
    assert tables.bind.owners_of(40000) == [new] and tw.ref.is_dead()


def test_connect_reuse_then_tw_expiry():
    tables, tw = _tw_setup()
    new = sock(L4)
    assert tables.connect(new, D4, 80) == 40000
    assert not tables.tw_kill(tw)
    assert tables.bind.owners_of(40000) == [new] and tw.ref.is_dead()


def test_tw_expiry_racing_connect_claims_once():
    for _ in range(30):
        tables, tw = _tw_setup()
        new = sock(L4)
        killed: list[bool] = []
        connected: list[object] = []

        def kill(tables=tables, tw=tw, killed=killed):
            killed.append(tables.tw_kill(tw))

        def conn(tables=tables, new=new, connected=connected):
            try:
                connected.append(tables.connect(new, D4, 80))
            except OSError as exc:
                connected.append(exc)

        for t in run_threads({"killer": kill, "connector": conn}).values():
            t.join(5)
        assert connected == [40000]
        assert tables.bind.owners_of(40000) == [new]
        assert tw.ref.is_dead() and not tables.ehash.contains(tw)
        assert killed in ([True], [False])
