"""Bind tables (reference §2.1-2.4), behaviours of §8.2:

11 a tb is destroyed exactly when its last tb2 goes; a tb2 when its owner list empties.
12 lock order bhash > bhash2 (> ehash), never two bhash2 locks (lockdep is on for every
   test; a deliberate reversal is reported).
13 a specific-address bind examines a number of owners independent of how many other
   specific addresses share the port.
14 TIME_WAIT entries sit in bhash2: bind() to an addr:port held by a TIME_WAIT fails
   without SO_REUSEADDR.
15 wildcard vs many specific binds (the TCP form of the UDP regression): still EADDRINUSE
   with more than 10 specific binds, for 0.0.0.0, :: and ::ffff:0.0.0.0.
16 connect() on a wildcard-bound socket moves it to the (saddr, port) tb2 and a failed
   connect() moves it back.
Plus Linux's reuse rules (SO_REUSEADDR, SO_REUSEPORT + uid, listeners, devices, IPv4 vs
IPv6 with v6only and v4-mapped), fastreuse bookkeeping, bind(0) parity/halves/reserved
ports, and the errno of each misuse.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

import pytest
from tables_helpers import ANY4, ANY6, D4, L4, L4B, L6, make_tables, mapped, sock

from rcunet.sync import lockdep
from rcunet.tables import AF_INET6, BindStats, State
from rcunet.tables.bind import Bind2Bucket, BindBucket

PORT = 8888


@dataclass
class Spec:
    addr: bytes
    reuseaddr: bool = False
    reuseport: bool = False
    uid: int = 0
    v6only: bool = False
    dev: int = 0
    listen: bool = False


def bind_spec(tables, spec: Spec):
    sk = sock(spec.addr, reuseaddr=spec.reuseaddr, reuseport=spec.reuseport, uid=spec.uid,
              v6only=spec.v6only, bound_dev=spec.dev)
    tables.bind_socket(sk, spec.addr, PORT)
    if spec.listen:
        tables.listen_socket(sk)
    return sk


CONFLICTS = [
    ("same address, no flags", Spec(L4), Spec(L4), False),
    ("different specific addresses", Spec(L4), Spec(L4B), True),
    ("both SO_REUSEADDR", Spec(L4, reuseaddr=True), Spec(L4, reuseaddr=True), True),
    ("SO_REUSEADDR vs listener", Spec(L4, reuseaddr=True, listen=True),
     Spec(L4, reuseaddr=True), False),
    ("only the newcomer SO_REUSEADDR", Spec(L4), Spec(L4, reuseaddr=True), False),
    ("SO_REUSEPORT same uid", Spec(L4, reuseport=True, uid=5), Spec(L4, reuseport=True, uid=5),
     True),
    ("SO_REUSEPORT other uid", Spec(L4, reuseport=True, uid=5),
     Spec(L4, reuseport=True, uid=6), False),
    ("SO_REUSEPORT listeners same uid", Spec(L4, reuseport=True, listen=True),
     Spec(L4, reuseport=True), True),
    ("wildcard then specific", Spec(ANY4), Spec(L4), False),
    ("specific then wildcard", Spec(L4), Spec(ANY4), False),
    ("different bound devices", Spec(L4, dev=2), Spec(L4, dev=3), True),
    ("device vs no device", Spec(L4, dev=2), Spec(L4), False),
    ("[::] dual-stack vs 0.0.0.0", Spec(ANY6), Spec(ANY4), False),
    ("[::] v6only vs 0.0.0.0", Spec(ANY6, v6only=True), Spec(ANY4), True),
    ("0.0.0.0 vs [::] v6only", Spec(ANY4), Spec(ANY6, v6only=True), True),
    ("10.0.0.1 vs [::] dual-stack", Spec(L4), Spec(ANY6), False),
    ("v4-mapped vs same IPv4", Spec(mapped(L4)), Spec(L4), False),
    ("IPv4 vs same v4-mapped", Spec(L4), Spec(mapped(L4)), False),
    ("v4-mapped vs other IPv4", Spec(mapped(L4)), Spec(L4B), True),
    ("IPv6 specific vs IPv4 specific", Spec(L6), Spec(L4), True),
    ("IPv6 specific twice", Spec(L6), Spec(L6), False),
    ("::ffff:0.0.0.0 vs IPv4 specific", Spec(mapped(ANY4)), Spec(L4), False),
]


@pytest.mark.parametrize(("first", "second", "ok"), [c[1:] for c in CONFLICTS],
                         ids=[c[0] for c in CONFLICTS])
def test_bind_conflict_rules(first, second, ok):
    tables = make_tables()
    bind_spec(tables, first)
    if ok:
        bind_spec(tables, second)
        assert len(tables.bind.owners_of(PORT)) == 2
    else:
        with pytest.raises(OSError) as exc:
            bind_spec(tables, second)
        assert exc.value.errno == errno.EADDRINUSE
        assert len(tables.bind.owners_of(PORT)) == 1


def test_second_listen_on_a_reuseaddr_port_fails():
    tables = make_tables()
    a = bind_spec(tables, Spec(L4, reuseaddr=True))
    b = bind_spec(tables, Spec(L4, reuseaddr=True))  # allowed: neither is listening
    tables.listen_socket(a)
    with pytest.raises(OSError) as exc:
        tables.listen_socket(b)
    assert exc.value.errno == errno.EADDRINUSE
    assert b.state == State.CLOSE and a.state == State.LISTEN


def test_failed_bind_changes_nothing():
    tables = make_tables()
    bind_spec(tables, Spec(L4))
    sk = sock(ANY4)
    with pytest.raises(OSError):
        tables.bind_socket(sk, L4, PORT)
    assert sk.laddr == ANY4 and sk.lport == 0 and sk.tb is None


@pytest.mark.parametrize(("laddr", "port", "code"), [
    (b"\x01\x02\x03", PORT, errno.EINVAL),
    (L4, 70000, errno.EINVAL),
    (L4, -1, errno.EINVAL),
])
def test_bad_arguments(laddr, port, code):
    tables = make_tables()
    with pytest.raises(OSError) as exc:
        tables.bind_socket(sock(L4), laddr, port)
    assert exc.value.errno == code


def test_binding_twice_is_einval():
    tables = make_tables()
    sk = bind_spec(tables, Spec(L4))
    with pytest.raises(OSError) as exc:
        tables.bind_socket(sk, L4, PORT + 1)
    assert exc.value.errno == errno.EINVAL


def test_fastreuse_bookkeeping():
    tables = make_tables()
    a = bind_spec(tables, Spec(L4, reuseaddr=True, reuseport=True, uid=3))
    tb = a.tb
    assert isinstance(tb, BindBucket)
    assert (tb.fastreuse, tb.fastreuseport, tb.fastuid) == (1, 1, 3)
    bind_spec(tables, Spec(L4, reuseaddr=True, reuseport=True, uid=3))
    assert (tb.fastreuse, tb.fastreuseport) == (1, 1)
    bind_spec(tables, Spec(L4B))  # no reuse flags: the fast paths are off for good
    assert (tb.fastreuse, tb.fastreuseport) == (0, 0)


def test_tb_and_tb2_lifetimes():
    tables = make_tables()
    a = bind_spec(tables, Spec(L4, reuseaddr=True))
    b = bind_spec(tables, Spec(L4, reuseaddr=True))
    c = bind_spec(tables, Spec(L4B, reuseaddr=True))
    tb, tb2_l4, tb2_l4b = a.tb, a.tb2, c.tb2
    assert isinstance(tb, BindBucket) and isinstance(tb2_l4, Bind2Bucket)
    assert b.tb2 is tb2_l4 and len(tb.bhash2) == 2
    tables.close(a)
    assert tb2_l4 in tables.bind.all_tb2() and tables.bind.find_tb_rcu(PORT) is tb
    tables.close(b)
    assert tb2_l4 not in tables.bind.all_tb2() and tables.bind.find_tb_rcu(PORT) is tb
    assert tb.bhash2 == (tb2_l4b,)
    tables.close(c)
    assert tables.bind.find_tb_rcu(PORT) is None and tables.bind.all_tb2() == []
    assert tb.dead


@pytest.mark.parametrize("others", [10, 200])
def test_specific_bind_cost_does_not_grow_with_other_addresses(others):
    tables = make_tables()
    for i in range(others):
        bind_spec(tables, Spec(bytes([10, 1, i // 256, i % 256])))
    stats = BindStats()
    tables.bind_socket(sock(L4), L4, PORT, stats)
    assert stats.owners_examined == 0  # only its own tb2 and the wildcard tb2s, both empty
    assert stats.bhash2_locks == 2
    wildcard = BindStats()
    with pytest.raises(OSError):
        tables.bind_socket(sock(ANY4), ANY4, PORT, wildcard)
    assert wildcard.owners_examined >= 1  # a wildcard still has to look at the port


def established_on(tables, addr: bytes, port: int, *, reuseaddr: bool = False):
    """An accepted-style connection on an explicitly bound addr:port."""
    sk = sock(addr, reuseaddr=reuseaddr)
    tables.bind_socket(sk, addr, port)
    sk.state = State.ESTABLISHED
    sk.set_key(addr, port, D4, 5555)
    assert tables.ehash.insert(sk)
    return sk


def test_time_wait_holds_the_address_in_bhash2():
    tables = make_tables()
    sk = established_on(tables, L4, PORT)
    tw = tables.time_wait(sk, timeout=60_000_000_000)
    assert tw is not None and tables.bind.owners_of(PORT) == [tw]
    assert sk.tb is None and tw.tb2 is not None
    with pytest.raises(OSError) as exc:
        tables.bind_socket(sock(L4), L4, PORT)
    assert exc.value.errno == errno.EADDRINUSE
    with pytest.raises(OSError):
        tables.bind_socket(sock(L4, reuseaddr=True), L4, PORT)  # the tw had no SO_REUSEADDR
    assert tables.tw_kill(tw)
    assert not tables.tw_kill(tw)
    assert tables.bind.owners_of(PORT) == [] and tw.ref.is_dead()
    tables.bind_socket(sock(L4), L4, PORT)


def test_time_wait_over_max_buckets_just_closes():
    tables = make_tables(tcp_max_tw_buckets=1)
    tw = tables.time_wait(established_on(tables, L4, PORT), timeout=10**9)
    assert tw is not None
    sk = established_on(tables, L4B, PORT)
    assert tables.time_wait(sk, timeout=10**9) is None
    assert not tables.ehash.contains(sk) and tables.bind.owners_of(PORT) == [tw]


def test_time_wait_with_reuseaddr_lets_a_reuseaddr_bind_through():
    tables = make_tables()
    tw = tables.time_wait(established_on(tables, L4, PORT, reuseaddr=True), timeout=10**9)
    assert tw is not None
    tables.bind_socket(sock(L4, reuseaddr=True), L4, PORT)
    with pytest.raises(OSError):
        tables.bind_socket(sock(L4), L4, PORT)


@pytest.mark.parametrize(("specific", "wildcard"), [
    ([bytes.fromhex(f"fd00{0:028x}") [:15] + bytes([i]) for i in range(1, 12)], ANY6),
    ([bytes([10, 0, 1, i]) for i in range(1, 12)], ANY4),
    ([bytes([10, 0, 1, i]) for i in range(1, 12)], mapped(ANY4)),
])
def test_wildcard_bind_sees_many_specific_binds(specific, wildcard):
    tables = make_tables()
    for addr in specific:
        bind_spec(tables, Spec(addr))
    with pytest.raises(OSError) as exc:
        tables.bind_socket(sock(wildcard), wildcard, PORT)
    assert exc.value.errno == errno.EADDRINUSE


def test_connect_moves_a_wildcard_bound_socket_between_tb2(clock):
    tables = make_tables(clock=clock)
    sk = sock(ANY4)
    tables.bind_socket(sk, ANY4, PORT)
    any_tb2 = sk.tb2
    tables.connect(sk, D4, 80, saddr=L4)
    assert isinstance(sk.tb2, Bind2Bucket) and sk.tb2.addr == mapped(L4)
    assert any_tb2 not in tables.bind.all_tb2()
    # A second wildcard-bound socket on the same port (SO_REUSEADDR on both) cannot use
    # the same 4-tuple: connect() fails and it goes back to the wildcard tb2.
    tables.close(sk)
    a = sock(ANY4, reuseaddr=True)
    b = sock(ANY4, reuseaddr=True)
    tables.bind_socket(a, ANY4, PORT)
    tables.bind_socket(b, ANY4, PORT)
    tables.connect(a, D4, 80, saddr=L4)
    with pytest.raises(OSError) as exc:
        tables.connect(b, D4, 80, saddr=L4)
    assert exc.value.errno == errno.EADDRNOTAVAIL
    assert b.laddr == ANY4 and isinstance(b.tb2, Bind2Bucket) and b.tb2.addr == mapped(ANY4)
    assert b.lport == PORT and b.state == State.CLOSE


def test_bind0_prefers_odd_ports_and_skips_reserved():
    tables = make_tables(ip_local_port_range=(40000, 40009),
                         ip_local_reserved_ports=frozenset({40003}))
    ports = [tables.bind_socket(sock(L4), L4, 0) for _ in range(9)]
    assert sorted(ports[:4]) == [40001, 40005, 40007, 40009]
    assert sorted(ports[4:]) == [40000, 40002, 40004, 40006, 40008]
    with pytest.raises(OSError) as exc:
        tables.bind_socket(sock(L4), L4, 0)
    assert exc.value.errno == errno.EADDRINUSE
    assert tables.bind.owners_of(40003) == []


def test_bind0_with_reuseaddr_tries_the_lower_half_first():
    tables = make_tables(ip_local_port_range=(40000, 40099))
    for _ in range(20):
        port = tables.bind_socket(sock(L4, reuseaddr=True), L4, 0)
        assert 40000 <= port < 40050 and port % 2 == 1


def test_bind0_uses_the_per_socket_range():
    tables = make_tables()
    sk = sock(L4)
    sk.local_port_range = (50000, 50001)
    assert tables.bind_socket(sk, L4, 0) == 50001


def test_bind0_same_port_for_different_specific_addresses_is_allowed():
    tables = make_tables(ip_local_port_range=(40000, 40001))
    assert tables.bind_socket(sock(L4), L4, 0) == 40001
    assert tables.bind_socket(sock(L4B), L4B, 0) == 40001
    assert tables.bind_socket(sock(L4), L4, 0) == 40000


def test_lock_order_reversal_is_reported():
    tables = make_tables()
    with tables.bind.bhash_lock(PORT), tables.bind.bhash2_lock(L4, PORT):
        pass
    with tables.bind.bhash2_lock(L4, PORT), tables.bind.bhash_lock(PORT):
        pass
    assert lockdep.reports()
    lockdep.clear()


def test_ipv6_family_entry():
    tables = make_tables()
    sk = sock(L6)
    assert sk.family == AF_INET6
    tables.bind_socket(sk, L6, PORT)
    assert isinstance(sk.tb2, Bind2Bucket) and sk.tb2.addr == L6
