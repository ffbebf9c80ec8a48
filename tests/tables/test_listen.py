"""Listener table (reference §2.5, §6.4), behaviour 17 of §8.2: the exact-address bucket
is tried before the wildcard bucket; within a bucket the highest score wins (+1 bound
device, +1 PF_INET, +1 matching incoming CPU); no reference is taken.

Plus: __inet_lookup (established first, pinned; then listener, unpinned); the passive-open
hand-over (request -> child in one publication, the child inheriting the listener's
port); SO_REUSEPORT groups (a flow always maps to the same member while membership is
unchanged, members share the load, connected members are skipped); v6only listeners
never get IPv4."""

from __future__ import annotations

import errno
import random
from collections import Counter

import pytest
from tables_helpers import ANY4, ANY6, D4, L4, L4B, L6, make_tables, sock

from rcunet.tables import AF_INET, RequestEntry, SockEntry, State
from rcunet.tables.ehash import put_entry
from rcunet.tables.listen import ListenTable, ReuseportGroup, reciprocal_scale
from rcunet.tables.secret import HashSecret

PORT = 80


def listener(addr: bytes, **kw: object):
    sk = sock(addr, **kw)
    sk.set_key(addr, PORT, sk.faddr, 0)
    sk.state = State.LISTEN
    return sk


def table() -> ListenTable:
    return ListenTable(HashSecret(random.Random(5)), size=16)


def test_exact_address_bucket_before_wildcard():
    t = table()
    wild, exact = listener(ANY4), listener(L4)
    t.add(wild)
    t.add(exact)
    assert t.lookup(L4, PORT, D4, 1234) is exact
    assert t.lookup(L4B, PORT, D4, 1234) is wild
    assert t.lookup(L4, PORT + 1, D4, 1234) is None
    assert exact.ref.read() == 1  # no reference taken


def test_ipv4_socket_beats_dual_stack_ipv6_in_the_wildcard_bucket():
    t = table()
    v6, v4 = listener(ANY6), listener(ANY4)
    t.add(v6)
    t.add(v4)
    assert t.lookup(L4, PORT, D4, 1) is v4
    t.remove(v4)
    assert t.lookup(L4, PORT, D4, 1) is v6


def test_v6only_listener_never_gets_ipv4():
    t = table()
    t.add(listener(ANY6, v6only=True))
    assert t.lookup(L4, PORT, D4, 1) is None
    assert t.lookup(L6, PORT, bytes(15) + b"\x02", 1) is not None


def test_bound_device_scores_higher_and_must_match():
    t = table()
    plain, dev = listener(ANY4), listener(ANY4, bound_dev=4)
    t.add(dev)
    t.add(plain)
    assert t.lookup(L4, PORT, D4, 1, dif=4) is dev
    assert t.lookup(L4, PORT, D4, 1, dif=5) is plain


def test_incoming_cpu_breaks_ties():
    t = table()
    a, b = listener(ANY4), listener(ANY4)
    b.incoming_cpu = 1
    t.add(a)
    t.add(b)
    assert t.lookup(L4, PORT, D4, 1, cpu=1) is b
    assert t.lookup(L4, PORT, D4, 1, cpu=0) in (a, b)


def test_reuseport_group_is_stable_per_flow_and_spreads_flows():
    t = table()
    members = [listener(ANY4, reuseport=True, uid=7) for _ in range(4)]
    for m in members:
        t.add(m)
    group = members[0].reuseport_cb
    assert isinstance(group, ReuseportGroup) and group.socks == tuple(members)
    rng = random.Random(3)
    flows = [(rng.randbytes(4), rng.randrange(1, 65536)) for _ in range(400)]
    picks = [t.lookup(L4, PORT, saddr, sport) for saddr, sport in flows]
    assert picks == [t.lookup(L4, PORT, saddr, sport) for saddr, sport in flows]
    spread = Counter(id(p) for p in picks)
    assert len(spread) == 4 and min(spread.values()) > 50
    t.remove(members[1])
    assert members[1] not in [t.lookup(L4, PORT, s, p) for s, p in flows]


def test_reuseport_other_uid_is_a_separate_group():
    t = table()
    a, b = listener(ANY4, reuseport=True, uid=1), listener(ANY4, reuseport=True, uid=2)
    t.add(a)
    t.add(b)
    assert a.reuseport_cb is not b.reuseport_cb


def test_select_by_hash_skips_established_members():
    g = ReuseportGroup()
    a, b = listener(ANY4), listener(ANY4)
    g.socks = (a, b)
    a.state = State.ESTABLISHED
    assert all(g.select_by_hash(h) is b for h in (0, 2**31, 2**32 - 1))
    b.state = State.ESTABLISHED
    assert g.select_by_hash(5) is None


def test_reciprocal_scale():
    assert reciprocal_scale(0, 4) == 0
    assert reciprocal_scale(2**32 - 1, 4) == 3
    assert reciprocal_scale(2**31, 4) == 2


def test_ipv6_reuseport_listeners_go_to_the_tail():
    t = table()
    first = listener(L6)
    t.add(first)
    rp = listener(L6, reuseport=True)
    t.add(rp)
    chain = t._buckets[t.lhash2_index(L6, PORT)]
    assert chain.index(first) < chain.index(rp)


def test_add_requires_a_bound_listener():
    t = table()
    sk = sock(L4)
    with pytest.raises(OSError) as exc:
        t.add(sk)
    assert exc.value.errno == errno.EINVAL


def test_listen_through_tcp_hash_info():
    tables = make_tables()
    sk = sock(L4)
    tables.bind_socket(sk, L4, PORT)
    tables.listen_socket(sk)
    assert tables.listen.lookup(L4, PORT, D4, 999) is sk
    tables.close(sk)
    assert tables.listen.lookup(L4, PORT, D4, 999) is None
    assert tables.bind.owners_of(PORT) == []


def _passive_open(tables, listener):
    req = RequestEntry(AF_INET, L4, PORT, D4, 5555, listener=listener)
    assert tables.ehash.insert(req)
    return req


def test_lookup_prefers_established_then_listener():
    tables = make_tables()
    lsk = sock(ANY4)
    tables.bind_socket(lsk, ANY4, PORT)
    tables.listen_socket(lsk)
    assert tables.lookup(L4, PORT, D4, 5555) == (lsk, False)
    req = _passive_open(tables, lsk)
    found, refcounted = tables.lookup(L4, PORT, D4, 5555)
    assert found is req and refcounted
    put_entry(found)


def test_establish_child_replaces_the_request_and_inherits_the_port():
    tables = make_tables()
    lsk = sock(ANY4)
    tables.bind_socket(lsk, ANY4, PORT)
    tables.listen_socket(lsk)
    req = _passive_open(tables, lsk)
    child = SockEntry(AF_INET, L4, PORT, D4, 5555, state=State.ESTABLISHED)
    assert tables.establish_child(lsk, req, child)
    found, _ = tables.lookup(L4, PORT, D4, 5555)
    assert found is child
    put_entry(found)
    assert child.tb is lsk.tb and child.tb2 is not lsk.tb2  # its own (10.0.0.1, 80) tb2
    assert set(map(id, tables.bind.owners_of(PORT))) == {id(lsk), id(child)}
    # A second completion of the same request loses and leaves nothing behind.
    twin = SockEntry(AF_INET, L4, PORT, D4, 5555, state=State.ESTABLISHED)
    assert not tables.establish_child(lsk, req, twin)
    assert twin.tb is None and len(tables.bind.owners_of(PORT)) == 2
    # The child's TIME_WAIT keeps the port after the listener is gone.
    tables.close(lsk)
    tw = tables.time_wait(child, timeout=10**9)
    assert tw is not None and tables.bind.owners_of(PORT) == [tw]
    assert tables.tw_kill(tw) and tables.bind.ports_in_use() == set()


def test_inherit_port_needs_a_bound_listener():
    tables = make_tables()
    with pytest.raises(OSError) as exc:
        tables.bind.inherit_port(sock(L4), sock(L4))
    assert exc.value.errno == errno.EINVAL
