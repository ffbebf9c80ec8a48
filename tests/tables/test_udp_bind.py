"""UDP bind: Linux's conflict rules, the hash2 bind path, ephemeral search (reference §6.2).

§8.2 behaviours: 15 (wildcard vs. 11 specific binds), 39 (ephemeral search visits every
in-range port exactly once, one slot lock at a time, seeded order), 40 (a specific bind on
a long port chain checks only two hash2 slots), plus the errno of every failure.
"""

from __future__ import annotations

import errno
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcunet.tables.entry import AF_INET, AF_INET6
from rcunet.tables.secret import HashSecret
from rcunet.tables.udp import UdpTable, ephemeral_slots
from rcunet.tables.udp_entry import UdpEntry
from rcunet.tables.udp_reuseport import reciprocal_scale
from rcunet.tuning import Tuning

ANY4 = bytes(4)
ANY6 = bytes(16)
A1 = bytes([10, 0, 0, 1])
A2 = bytes([10, 0, 0, 2])
V6A = bytes.fromhex("fd000000000000000000000000000001")
V6B = bytes.fromhex("fd000000000000000000000000000002")


def mapped(addr4: bytes) -> bytes:
    return bytes(10) + b"\xff\xff" + addr4


def table(size: int = 64, seed: int = 1, **tuning: object) -> UdpTable:
    return UdpTable(HashSecret(random.Random(seed)), size=size,
                    tuning=Tuning(**tuning), rng=random.Random(seed + 1000))  # type: ignore[arg-type]


def entry(addr: bytes = ANY4, family: int | None = None, **kw: object) -> UdpEntry:
    if family is None:
        family = AF_INET if len(addr) == 4 else AF_INET6
    return UdpEntry(family, addr, **kw)  # type: ignore[arg-type]


# --- the conflict matrix -----------------------------------------------------------------
# (first socket, second socket, expected errno of the second bind or None)
MATRIX = [
    ("same address", dict(addr=A1), dict(addr=A1), errno.EADDRINUSE),
    ("different addresses", dict(addr=A1), dict(addr=A2), None),
    ("wildcard then specific", dict(addr=ANY4), dict(addr=A1), errno.EADDRINUSE),
    ("specific then wildcard", dict(addr=A1), dict(addr=ANY4), errno.EADDRINUSE),
    ("both SO_REUSEADDR", dict(addr=A1, reuseaddr=True), dict(addr=A1, reuseaddr=True), None),
    ("only the first SO_REUSEADDR", dict(addr=A1, reuseaddr=True), dict(addr=A1),
     errno.EADDRINUSE),
    ("only the second SO_REUSEADDR", dict(addr=A1), dict(addr=A1, reuseaddr=True),
     errno.EADDRINUSE),
    ("SO_REUSEADDR wildcard over specific", dict(addr=A1, reuseaddr=True),
     dict(addr=ANY4, reuseaddr=True), None),
    ("both SO_REUSEPORT, same uid", dict(addr=A1, reuseport=True, uid=7),
     dict(addr=A1, reuseport=True, uid=7), None),
    ("both SO_REUSEPORT, other uid", dict(addr=A1, reuseport=True, uid=7),
     dict(addr=A1, reuseport=True, uid=8), errno.EADDRINUSE),
    ("only the first SO_REUSEPORT", dict(addr=A1, reuseport=True), dict(addr=A1),
     errno.EADDRINUSE),
    ("SO_REUSEPORT wildcard and specific, same uid", dict(addr=ANY4, reuseport=True),
     dict(addr=A1, reuseport=True), None),
    ("different bound devices", dict(addr=A1, bound_dev=1), dict(addr=A1, bound_dev=2), None),
    ("bound device vs unbound", dict(addr=A1, bound_dev=1), dict(addr=A1), errno.EADDRINUSE),
    ("unbound vs bound device", dict(addr=A1), dict(addr=A1, bound_dev=2), errno.EADDRINUSE),
    ("IPv6 :: then IPv4 0.0.0.0", dict(addr=ANY6), dict(addr=ANY4), errno.EADDRINUSE),
    ("IPv4 0.0.0.0 then IPv6 ::", dict(addr=ANY4), dict(addr=ANY6), errno.EADDRINUSE),
    ("IPv6 :: v6only then IPv4 0.0.0.0", dict(addr=ANY6, v6only=True), dict(addr=ANY4), None),
    ("IPv4 0.0.0.0 then IPv6 :: v6only", dict(addr=ANY4), dict(addr=ANY6, v6only=True), None),
    ("v4-mapped then the same IPv4", dict(addr=mapped(A1)), dict(addr=A1), errno.EADDRINUSE),
    ("IPv4 then the same v4-mapped", dict(addr=A1), dict(addr=mapped(A1)), errno.EADDRINUSE),
    ("v4-mapped any then IPv4 specific", dict(addr=mapped(ANY4)), dict(addr=A1),
     errno.EADDRINUSE),
    ("two IPv6 addresses", dict(addr=V6A), dict(addr=V6B), None),
    ("IPv6 :: then IPv6 specific", dict(addr=ANY6), dict(addr=V6A), errno.EADDRINUSE),
    ("IPv6 specific then IPv6 ::", dict(addr=V6A), dict(addr=ANY6), errno.EADDRINUSE),
    ("IPv6 :: v6only then v4-mapped", dict(addr=ANY6, v6only=True), dict(addr=mapped(A1)),
     None),
]


WILDCARDS = (ANY4, ANY6, mapped(ANY4))
SPECIFIC_ONLY = [case for case in MATRIX
                 if case[1]["addr"] not in WILDCARDS and case[2]["addr"] not in WILDCARDS]


@pytest.mark.parametrize(("first", "second", "expected", "long_chain"),
                         [(*case[1:], False) for case in MATRIX]
                         + [(*case[1:], True) for case in SPECIFIC_ONLY],
                         ids=[case[0] for case in MATRIX]
                         + [f"long-chain {case[0]}" for case in SPECIFIC_ONLY])
def test_bind_conflict_matrix(first: dict, second: dict, expected: int | None,
                              long_chain: bool) -> None:
    """Each rule holds with a short primary chain (primary scan), and for two specific
    addresses also with more than 10 other sockets on the port (the hash2 path)."""
    t = table()
    port = 8888
    if long_chain:
        for i in range(12):  # other addresses on the same port, no overlap with the cases
            t.bind(entry(bytes([192, 168, 7, i + 1])), port)
        assert t.primary_slot(port).count > 10
    first, second = dict(first), dict(second)
    a = entry(first.pop("addr"), **first)
    t.bind(a, port)
    b = entry(second.pop("addr"), **second)
    if expected is None:
        assert t.bind(b, port) == port
        assert b.hashed and b.lport == port
    else:
        with pytest.raises(OSError) as info:
            t.bind(b, port)
        assert info.value.errno == expected
        assert not b.hashed and b.lport == 0
    if long_chain:
        assert t.bind_stats.snapshot()["hash2_scans"] >= 1
    t.check_consistency()


def test_reuseport_linux_first_match_quirk() -> None:
    """``udp_lib_lport_inuse`` returns "free" at the first reuseport-compatible socket in
    the chain (inserts go at the head), so the verdict depends on chain order."""
    t = table()
    a = entry(A1, reuseaddr=True, reuseport=True)
    b = entry(A1, reuseaddr=True)
    t.bind(a, 9000)
    t.bind(b, 9000)  # both SO_REUSEADDR: no conflict; b is now at the chain head
    c = entry(A1, reuseport=True)  # meets b first: b has no SO_REUSEPORT -> conflict
    with pytest.raises(OSError) as info:
        t.bind(c, 9000)
    assert info.value.errno == errno.EADDRINUSE


def test_bind_errors_are_einval() -> None:
    t = table()
    a = entry(A1)
    t.bind(a, 1000)
    with pytest.raises(OSError) as info:
        t.bind(a, 1001)
    assert info.value.errno == errno.EINVAL
    # (the port is typed int: compiled, a str is refused at the call with TypeError)
    for bad_port in (-1, 65536):
        with pytest.raises(OSError) as info:
            t.bind(entry(A2), bad_port)  # type: ignore[arg-type]
        assert info.value.errno == errno.EINVAL
    broken = entry(A2)
    broken.laddr = b"\x01\x02"  # not an IPv4 address
    with pytest.raises(OSError) as info:
        t.bind(broken, 1002)
    assert info.value.errno == errno.EINVAL
    t.check_consistency()
    assert [sk.lport for sk in t.entries()] == [1000]


def test_unhash_is_idempotent_and_frees_the_port() -> None:
    t = table()
    a = entry(A1)
    t.bind(a, 4000)
    assert t.unhash(a) is True
    assert t.unhash(a) is False
    assert a.lport == 0 and not a.hashed
    b = entry(A1)
    assert t.bind(b, 4000) == 4000
    assert t.bind(a, 0) != 4000  # the unhashed socket can bind again
    t.check_consistency()
    assert t.primary_slot(4000).count == 1


# --- §8.2 item 15: wildcard bind vs. many specific binds ------------------------------------
@pytest.mark.parametrize("n", [10, 11, 40])
@pytest.mark.parametrize(("specific", "wildcard"), [
    (lambda i: bytes.fromhex("fd00" + "00" * 13) + bytes([i]), ANY6),
    (lambda i: bytes([10, 1, 0, i]), ANY4),
    (lambda i: bytes([10, 1, 0, i]), mapped(ANY4)),
], ids=["v6-specific/::", "v4-specific/0.0.0.0", "v4-specific/::ffff:0.0.0.0"])
def test_wildcard_bind_conflicts_with_many_specific(n, specific, wildcard) -> None:
    t = table()
    for i in range(1, n + 1):
        t.bind(entry(specific(i)), 8888)
    assert t.primary_slot(8888).count == n
    with pytest.raises(OSError) as info:
        t.bind(entry(wildcard), 8888)
    assert info.value.errno == errno.EADDRINUSE
    stats = t.bind_stats.snapshot()
    assert stats["primary_scans"] >= 1


# --- §8.2 item 40: a specific bind on a long chain checks two hash2 slots --------------------
@pytest.mark.parametrize("n", [11, 200])
def test_specific_bind_on_long_chain_checks_two_hash2_slots(n: int) -> None:
    t = table(size=256)
    for i in range(n):
        t.bind(entry(bytes([10, 2, i // 250, i % 250 + 1])), 7777)
    new = entry(bytes([10, 3, 0, 1]))
    slot2 = t.secondary_slot(t.portaddr_hash(new.laddr, 7777))
    slot_any = t.secondary_slot(t.portaddr_hash(ANY4, 7777))
    expected_examined = len(slot2.chain) + (len(slot_any.chain) if slot_any is not slot2 else 0)
    before = t.bind_stats.snapshot()
    t.bind(new, 7777)
    after = t.bind_stats.snapshot()
    assert after["primary_scans"] == before["primary_scans"]
    assert after["hash2_scans"] - before["hash2_scans"] == (2 if slot_any is not slot2 else 1)
    assert after["entries_examined"] - before["entries_examined"] == expected_examined
    assert expected_examined < 11  # independent of n: only the two slots were looked at
    # The hash2 path still finds the conflicts: the same address, and a wildcard socket.
    with pytest.raises(OSError):
        t.bind(entry(bytes([10, 3, 0, 1])), 7777)
    t.check_consistency()


def test_specific_bind_on_long_chain_sees_wildcard_owner() -> None:
    t = table(size=256)
    t.bind(entry(ANY4, reuseaddr=True), 7000)
    for i in range(12):
        t.bind(entry(bytes([10, 4, 0, i + 1]), reuseaddr=True), 7000)
    with pytest.raises(OSError) as info:
        t.bind(entry(bytes([10, 4, 1, 1])), 7000)  # no SO_REUSEADDR: the wildcard conflicts
    assert info.value.errno == errno.EADDRINUSE


# --- ephemeral ports (§8.2 item 39) -------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(rand=st.integers(0, 2**32 - 1), log=st.integers(0, 8),
       bounds=st.tuples(st.integers(1, 65535), st.integers(1, 65535)))
def test_ephemeral_order_visits_every_port_once(rand: int, log: int, bounds) -> None:
    low, high = min(bounds), max(bounds)
    size = 1 << log
    seen: list[int] = []
    slots = 0
    for first, candidates in ephemeral_slots(rand, low, high, size):
        slots += 1
        ports = list(candidates)
        assert len(ports) == 65536 // size
        assert all((p - first) % size == 0 for p in ports)  # one primary slot each
        seen.extend(p for p in ports if low <= p <= high)
    assert slots == size
    assert len(seen) == high - low + 1
    assert sorted(seen) == list(range(low, high + 1))


def test_ephemeral_port_follows_the_seeded_rng() -> None:
    def ports(seed: int) -> list[int]:
        t = UdpTable(HashSecret(random.Random(5)), size=64, rng=random.Random(seed))
        return [t.bind(entry(ANY4), 0) for _ in range(50)]

    assert ports(3) == ports(3)
    assert ports(3) != ports(4)
    # The first port is reciprocal_scale(rand, remaining) + low on an empty table.
    rand = random.Random(3).getrandbits(32)
    low, high = Tuning().ip_local_port_range
    assert ports(3)[0] == reciprocal_scale(rand, high - low + 1) + low


@pytest.mark.parametrize("size", [1, 8, 256])
def test_ephemeral_exhaustion(size: int) -> None:
    low, high = 40000, 40015
    t = table(size=size, ip_local_port_range=(low, high))
    got = {t.bind(entry(ANY4), 0) for _ in range(16)}
    assert got == set(range(low, high + 1))
    before = t.bind_stats.snapshot()["primary_scans"]
    late = entry(ANY4)
    with pytest.raises(OSError) as info:
        t.bind(late, 0)
    assert info.value.errno == errno.EADDRINUSE  # __inet_bind: get_port's error
    assert t.bind_stats.snapshot()["primary_scans"] - before == size  # each slot once
    with pytest.raises(OSError) as info:
        t.autobind(late)
    assert info.value.errno == errno.EAGAIN  # inet_autobind
    assert not late.hashed and late.lport == 0
    t.check_consistency()
    # Freeing one port makes exactly that port available again.
    victim = next(sk for sk in t.entries() if sk.lport == 40007)
    t.close(victim)
    assert t.autobind(late) == 40007


def test_ephemeral_skips_reserved_and_uses_socket_range() -> None:
    t = table(size=8, ip_local_port_range=(40000, 40009),
              ip_local_reserved_ports=frozenset({40001, 40002, 40003}))
    got = sorted(t.bind(entry(ANY4), 0) for _ in range(7))
    assert got == [40000, 40004, 40005, 40006, 40007, 40008, 40009]
    with pytest.raises(OSError):
        t.bind(entry(ANY4), 0)
    narrow = entry(A1)
    narrow.local_port_range = (40005, 40006)  # IP_LOCAL_PORT_RANGE inside the sysctl's
    t2 = table(size=8, ip_local_port_range=(40000, 40009))
    assert t2.bind(narrow, 0) in (40005, 40006)


def test_ephemeral_shares_ports_with_compatible_owners() -> None:
    """The bitmap marks only conflicting sockets: with SO_REUSEADDR on both sides a port
    in use by another SO_REUSEADDR socket is still a candidate (as in Linux)."""
    t = table(size=4, ip_local_port_range=(40000, 40001))
    t.bind(entry(ANY4, reuseaddr=True), 40000)
    t.bind(entry(ANY4, reuseaddr=True), 40001)
    assert t.bind(entry(ANY4, reuseaddr=True), 0) in (40000, 40001)
    with pytest.raises(OSError):
        t.bind(entry(ANY4), 0)


def test_ipv6_and_ipv4_share_ephemeral_space() -> None:
    t = table(size=4, ip_local_port_range=(40000, 40001))
    t.bind(entry(ANY6), 0)
    t.bind(entry(ANY6), 0)
    with pytest.raises(OSError):
        t.bind(entry(ANY4), 0)  # :: (not v6only) covers 0.0.0.0
    v6only = entry(ANY6, v6only=True)
    with pytest.raises(OSError):
        t.bind(v6only, 0)  # ... and :: covers :: whatever v6only says
