"""UDP unicast lookup and SO_REUSEPORT groups (reference §6.3, §6.4).

§8.2 behaviours: 41 (highest score wins; connected beats unconnected; the exact-address
hash2 slot is tried before the wildcard one; reuseport picks by ``reciprocal_scale`` of
the 4-tuple hash, sticks per flow while membership is unchanged, skips connected
members), 44 (a new member is published together with the count), plus the pin and
re-check of a lockless result (a closed socket is never returned).
"""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest

from rcunet.sync.hooks import Schedule
from rcunet.tables.entry import AF_INET, AF_INET6, State
from rcunet.tables.secret import HashSecret
from rcunet.tables.udp import UdpTable, compute_score4, compute_score6
from rcunet.tables.udp_entry import UdpEntry
from rcunet.tables.udp_reuseport import ReuseportGroup, reciprocal_scale

# An imbalanced put (a pin dropped twice, a put on a dead entry) fails the test.
pytestmark = pytest.mark.filterwarnings("error::rcunet.sync.refcount.RefcountWarning")

ANY4 = bytes(4)
ANY6 = bytes(16)
L1 = bytes([10, 0, 0, 1])
L2 = bytes([10, 0, 0, 5])
P1 = bytes([10, 0, 0, 2])
P2 = bytes([10, 0, 0, 3])
V6L = bytes.fromhex("fd000000000000000000000000000001")
V6P = bytes.fromhex("fd000000000000000000000000000002")


def mapped(addr4: bytes) -> bytes:
    return bytes(10) + b"\xff\xff" + addr4


def table(size: int = 64, seed: int = 1, **kw: object) -> UdpTable:
    return UdpTable(HashSecret(random.Random(seed)), size=size,
                    rng=random.Random(seed + 1), **kw)  # type: ignore[arg-type]


def bound(t: UdpTable, addr: bytes, port: int, *, family: int | None = None,
          peer: tuple[bytes, int] | None = None, **kw: object) -> UdpEntry:
    if family is None:
        family = AF_INET if len(addr) == 4 else AF_INET6
    sk = UdpEntry(family, addr, reuseaddr=True, **kw)  # type: ignore[arg-type]
    t.bind(sk, port)
    if peer is not None:
        t.connect(sk, *peer)
    return sk


def found(t: UdpTable, saddr: bytes, sport: int, daddr: bytes, dport: int,
          dif: int = 0) -> UdpEntry | None:
    sk = t.lookup(saddr, sport, daddr, dport, dif)
    if sk is not None:
        t.put(sk)
    return sk


# --- scoring -------------------------------------------------------------------------------
def test_scores_follow_linux() -> None:
    t = table()
    wild = bound(t, ANY4, 53)
    exact = bound(t, L1, 53)
    conn = bound(t, L1, 53, peer=(P1, 1000))
    dev = bound(t, L1, 53, bound_dev=2)
    v6 = bound(t, ANY6, 53)
    assert compute_score4(wild, P1, 1000, ANY4, 53, 0, -1) == 2
    assert compute_score4(exact, P1, 1000, L1, 53, 0, -1) == 2
    assert compute_score4(conn, P1, 1000, L1, 53, 0, -1) == 2 + 4 + 4
    assert compute_score4(conn, P1, 1001, L1, 53, 0, -1) == -1  # peer port mismatch
    assert compute_score4(conn, P2, 1000, L1, 53, 0, -1) == -1  # peer address mismatch
    assert compute_score4(dev, P1, 1000, L1, 53, 2, -1) == 2 + 4
    assert compute_score4(dev, P1, 1000, L1, 53, 1, -1) == -1
    assert compute_score4(v6, P1, 1000, ANY4, 53, 0, -1) == 1  # PF_INET6 scores 1
    assert compute_score4(exact, P1, 1000, L1, 54, 0, -1) == -1
    exact.incoming_cpu = 3
    assert compute_score4(exact, P1, 1000, L1, 53, 0, 3) == 3
    v6x = bound(t, V6L, 53, peer=(V6P, 9))
    assert compute_score6(v6x, V6P, 9, V6L, 53, 0, -1) == 2
    assert compute_score6(v6x, V6P, 8, V6L, 53, 0, -1) == -1
    assert compute_score6(v6, V6P, 9, ANY6, 53, 0, -1) == 0
    assert compute_score6(exact, V6P, 9, L1, 53, 0, -1) == -1


def test_lookup_prefers_connected_then_exact_then_wildcard() -> None:
    t = table()
    wild = bound(t, ANY4, 53)
    exact = bound(t, L1, 53)
    conn = bound(t, L1, 53, peer=(P1, 1000))
    assert found(t, P1, 1000, L1, 53) is conn
    assert found(t, P1, 1001, L1, 53) is exact  # connected peer port differs
    assert found(t, P2, 1000, L1, 53) is exact
    assert found(t, P2, 1000, L2, 53) is wild  # no exact socket for 10.0.0.5
    assert found(t, P2, 1000, L2, 54) is None
    t.check_consistency()


def test_exact_slot_is_tried_before_wildcard_slot() -> None:
    """A connected wildcard-bound socket would score higher, but the exact-address slot
    is searched first and its result stands (``__udp4_lib_lookup``)."""
    t = table()
    wild_conn = bound(t, ANY4, 53, peer=(P1, 1000))
    exact = bound(t, L1, 53)
    assert wild_conn.laddr == ANY4  # connect() without a route-chosen address keeps it
    assert found(t, P1, 1000, L1, 53) is exact
    t.close(exact)
    assert found(t, P1, 1000, L1, 53) is wild_conn


def test_bound_device_and_families() -> None:
    t = table()
    plain = bound(t, L1, 53)
    on_dev2 = bound(t, L1, 53, bound_dev=2)
    assert found(t, P1, 7, L1, 53, dif=2) is on_dev2
    assert found(t, P1, 7, L1, 53, dif=1) is plain
    v6any = bound(t, ANY6, 99)
    assert found(t, P1, 7, L1, 99) is v6any  # IPv6 wildcard, not v6only, receives IPv4
    v6only = UdpEntry(AF_INET6, ANY6, v6only=True)
    t.bind(v6only, 98)
    assert found(t, P1, 7, L1, 98) is None
    assert found(t, V6P, 7, V6L, 98) is v6only
    v4wild = bound(t, ANY4, 99)
    assert found(t, P1, 7, L1, 99) is v4wild  # PF_INET scores 2 against PF_INET6's 1
    m = bound(t, mapped(L2), 97)
    assert found(t, P1, 7, L2, 97) is m  # v4-mapped bind found through the IPv4 address


def test_lookup_pins_the_result() -> None:
    t = table()
    sk = bound(t, L1, 53)
    got = t.lookup(P1, 1, L1, 53)
    assert got is sk and sk.ref.read() == 2
    t.put(sk)
    assert sk.ref.read() == 1
    t.close(sk)
    assert sk.ref.is_dead()
    assert t.lookup(P1, 1, L1, 53) is None


def test_lookup_never_returns_a_closed_socket() -> None:
    """Freeze a lookup after its lockless scan chose ``victim``, close ``victim``
    (unhash + last put), resume: the pin fails, the lookup rescans and returns the
    other socket; the victim's refcount stays dead."""
    released: list[UdpEntry] = []
    t = table(release=released.append)
    other = bound(t, ANY4, 53)
    victim = bound(t, L1, 53)
    result: list[UdpEntry | None] = []
    with Schedule(timeout=5.0) as sched:
        sched.pause_at("udp.lookup.before_pin", thread="reader")
        reader = threading.Thread(target=lambda: result.append(t.lookup(P1, 1, L1, 53)),
                                  name="reader")
        reader.start()
        sched.wait_paused("udp.lookup.before_pin")
        t.close(victim)
        t.rcu.barrier()  # the destructor runs after a grace period
        assert released == [victim]
        sched.release("udp.lookup.before_pin")
        reader.join(timeout=5)
    assert result == [other]
    assert victim.ref.is_dead()
    assert other.ref.read() == 2
    t.put(other)


def test_lookup_drops_a_pin_when_the_recheck_fails() -> None:
    """Freeze after the pin; the socket is connected elsewhere meanwhile; the re-check
    fails, the pin is dropped (refcount back to its prior value) and the rescan finds
    the wildcard socket."""
    t = table()
    wild = bound(t, ANY4, 53)
    moving = bound(t, L1, 53)
    result: list[UdpEntry | None] = []
    with Schedule(timeout=5.0) as sched:
        sched.pause_at("udp.lookup.after_pin", thread="reader")
        reader = threading.Thread(target=lambda: result.append(t.lookup(P1, 1, L1, 53)),
                                  name="reader")
        reader.start()
        sched.wait_paused("udp.lookup.after_pin")
        assert moving.ref.read() == 2
        t.connect(moving, P2, 4444)
        sched.release("udp.lookup.after_pin")
        reader.join(timeout=5)
    assert result == [wild]
    assert moving.ref.read() == 1
    t.put(wild)


# --- connect / rehash ----------------------------------------------------------------------
def test_connect_rehashes_wildcard_socket() -> None:
    t = table()
    sk = bound(t, ANY4, 5000)
    old_slot = t.secondary_slot(sk.portaddr_hash)
    t.connect(sk, P1, 53, laddr=L1)
    assert sk.laddr == L1 and sk.state == State.ESTABLISHED
    assert sk in t.secondary_slot(t.portaddr_hash(L1, 5000)).chain
    if old_slot is not t.secondary_slot(sk.portaddr_hash):
        assert sk not in old_slot.chain
    t.check_consistency()
    assert found(t, P1, 53, L1, 5000) is sk
    assert found(t, P2, 53, L1, 5000) is None


def test_rehash_never_hides_the_socket() -> None:
    """While connect() moves a socket between hash2 slots, a lookup for its new address
    finds it (it is linked into the new slot before it leaves the old one)."""
    t = table(size=64)
    port = 5001
    sk = bound(t, ANY4, port)
    # The address hash is Python's hash() of the address (seeded per process) xor the
    # port: one address in 64 shares the wildcard's slot whatever the port (no move, no
    # pause).  The new address is the first of 10.0.0.0/24 that does not.
    old_slot = t.secondary_slot(sk.portaddr_hash)
    laddr = next(a for a in (bytes([10, 0, 0, i]) for i in range(1, 255))
                 if t.secondary_slot(t.portaddr_hash(a, port)) is not old_slot)
    seen: list[UdpEntry | None] = []
    with Schedule(timeout=5.0) as sched:
        sched.pause_at("udp.rehash.between_slots", thread="connector")
        connector = threading.Thread(target=t.connect, args=(sk, P1, 53),
                                     kwargs={"laddr": laddr}, name="connector")
        connector.start()
        sched.wait_paused("udp.rehash.between_slots")
        seen.append(found(t, P1, 53, laddr, port))
        sched.release("udp.rehash.between_slots")
        connector.join(timeout=5)
    assert seen == [sk]
    assert found(t, P1, 53, laddr, port) is sk
    t.check_consistency()


def test_disconnect_follows_the_bind_locks() -> None:
    t = table()
    explicit = bound(t, ANY4, 5003)
    explicit.bind_port_locked = True  # bind(("0.0.0.0", 5003)) as __inet_bind marks it
    t.connect(explicit, P1, 53, laddr=L1)
    assert explicit.laddr == L1
    t.disconnect(explicit)
    assert explicit.key == (ANY4, 5003, ANY4, 0) and explicit.state == State.CLOSE
    assert explicit.hashed
    assert found(t, P2, 9, L2, 5003) is explicit  # the wildcard slot again
    auto = UdpEntry(AF_INET, ANY4)
    port = t.autobind(auto)
    t.connect(auto, P1, 53, laddr=L1)
    t.disconnect(auto)  # autobound port: released
    assert not auto.hashed and auto.lport == 0
    assert found(t, P1, 53, L1, port) is None
    pinned_addr = bound(t, L2, 5004)
    pinned_addr.bind_addr_locked = pinned_addr.bind_port_locked = True
    t.connect(pinned_addr, P1, 53)
    t.disconnect(pinned_addr)
    assert pinned_addr.key == (L2, 5004, ANY4, 0) and pinned_addr.hashed
    t.check_consistency()


# --- SO_REUSEPORT ----------------------------------------------------------------------------
def flows(n: int, seed: int = 9) -> list[tuple[bytes, int]]:
    rng = random.Random(seed)
    return [(bytes([172, 16, rng.randrange(256), rng.randrange(1, 255)]),
             rng.randrange(1024, 65536)) for _ in range(n)]


def test_reuseport_same_flow_same_member_and_spread() -> None:
    t = table()
    members = [UdpEntry(AF_INET, ANY4, reuseport=True, uid=1000) for _ in range(8)]
    for sk in members:
        t.bind(sk, 6000)
    group = members[0].reuseport_cb
    assert isinstance(group, ReuseportGroup)
    assert all(sk.reuseport_cb is group for sk in members)
    assert set(group.socks) == set(members)
    picks: Counter[int] = Counter()
    for saddr, sport in flows(4000):
        first = found(t, saddr, sport, L1, 6000)
        assert first is not None
        for _ in range(3):
            assert found(t, saddr, sport, L1, 6000) is first  # sticky per 4-tuple
        flow_hash = t.secret.ehashfn(ANY4, 6000, saddr, sport)
        assert first is group.socks[reciprocal_scale(flow_hash, 8)]
        picks[id(first)] += 1
    assert len(picks) == 8
    assert min(picks.values()) > 4000 / 8 / 2  # every member gets a fair share


def test_reuseport_skips_connected_members_and_survives_removal() -> None:
    t = table()
    members = [UdpEntry(AF_INET, ANY4, reuseport=True) for _ in range(4)]
    for sk in members:
        t.bind(sk, 6001)
    group = members[0].reuseport_cb
    assert isinstance(group, ReuseportGroup)
    conn = members[2]
    t.connect(conn, P1, 7777)  # stays bound to the wildcard: still a member
    assert group.has_conns and conn in group.socks
    for saddr, sport in flows(500):
        got = found(t, saddr, sport, L1, 6001)
        assert got is not None and got is not conn
    assert found(t, P1, 7777, L1, 6001) is conn  # scoring continues: connected wins
    t.close(members[0])
    assert members[0] not in group.socks and len(group.socks) == 3
    for saddr, sport in flows(500, seed=10):
        got = found(t, saddr, sport, L1, 6001)
        assert got in (members[1], members[3])
    t.check_consistency()


def test_reuseport_all_connected_falls_back_to_scoring() -> None:
    t = table()
    a = UdpEntry(AF_INET, ANY4, reuseport=True)
    b = UdpEntry(AF_INET, ANY4, reuseport=True)
    t.bind(a, 6002)
    t.bind(b, 6002)
    t.connect(a, P1, 1)
    t.connect(b, P2, 2)
    assert found(t, P1, 1, L1, 6002) is a
    assert found(t, P2, 2, L1, 6002) is b
    assert found(t, P2, 3, L1, 6002) is None


def test_reuseport_group_rules() -> None:
    t = table()
    a = UdpEntry(AF_INET, L1, reuseport=True, uid=1)
    t.bind(a, 6003)
    other_dev = UdpEntry(AF_INET, L1, reuseport=True, uid=1, bound_dev=3)
    t.bind(other_dev, 6003)  # devices differ: no conflict, and a group of its own
    assert other_dev.reuseport_cb is not a.reuseport_cb
    same = UdpEntry(AF_INET, L1, reuseport=True, uid=1)
    t.bind(same, 6003)
    assert same.reuseport_cb is a.reuseport_cb
    with pytest.raises(OSError):
        t.bind(UdpEntry(AF_INET, L1, reuseport=True, uid=2), 6003)


def test_reuseport_member_published_with_count() -> None:
    """§8.2 item 44: a reader running while a member is being added sees the old member
    tuple or the new one, each entry valid; never a count without its member."""
    t = table()
    first = UdpEntry(AF_INET, ANY4, reuseport=True)
    t.bind(first, 6004)
    group = first.reuseport_cb
    assert isinstance(group, ReuseportGroup)
    joiner = UdpEntry(AF_INET, ANY4, reuseport=True)
    with Schedule(timeout=5.0) as sched:
        sched.pause_at("udp.reuseport.before_publish", thread="binder")
        binder = threading.Thread(target=t.bind, args=(joiner, 6004), name="binder")
        binder.start()
        sched.wait_paused("udp.reuseport.before_publish")
        snapshot = group.socks
        assert snapshot == (first,)
        assert all(isinstance(sk, UdpEntry) and sk.hashed for sk in snapshot)
        for saddr, sport in flows(50):
            assert group.select_by_hash(t.secret.ehashfn(ANY4, 6004, saddr, sport)) is first
        sched.release("udp.reuseport.before_publish")
        binder.join(timeout=5)
    assert group.socks == (first, joiner)
    t.check_consistency()
