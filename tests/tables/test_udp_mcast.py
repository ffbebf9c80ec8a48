"""UDP multicast/broadcast delivery (reference §6.5): the legacy walk under the primary
slot lock and the modern hash2 + collect/lockless variants deliver to identical receiver
sets.

§8.2 behaviours: 42 (exactly once per matching socket, N > 10, ``hash2(daddr) ==
hash2(ANY)``, first match gets the original and the others clones, per-socket clone
failure, IgnoredMulti; concurrent add/remove: present sockets get exactly one copy,
added/removed ones 0 or 1, none after its close completed), 43 (membership and source
filters).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcunet.sync.hooks import Schedule
from rcunet.tables.entry import AF_INET, AF_INET6, State
from rcunet.tables.secret import HashSecret
from rcunet.tables.udp import UdpTable
from rcunet.tables.udp_entry import MCAST_EXCLUDE, MCAST_INCLUDE, UdpEntry
from rcunet.tables.udp_mcast import is_mcast_sock4, is_mcast_sock6, mcast_slots
from rcunet.tuning import Tuning

# An imbalanced put (a pin dropped twice, a put on a dead entry) fails the test.
pytestmark = pytest.mark.filterwarnings("error::rcunet.sync.refcount.RefcountWarning")

ANY4 = bytes(4)
ANY6 = bytes(16)
G1 = bytes([239, 1, 1, 1])
G2 = bytes([239, 1, 1, 2])
BCAST = bytes([255, 255, 255, 255])
UNI = bytes([10, 0, 0, 1])
S1 = bytes([10, 0, 0, 7])
S2 = bytes([10, 0, 0, 8])
G6 = bytes.fromhex("ff0e0000000000000000000000000101")
S6 = bytes.fromhex("fd000000000000000000000000000007")


def mapped(addr4: bytes) -> bytes:
    return bytes(10) + b"\xff\xff" + addr4


# name -> (tuning, mcast_collect)
MODES: dict[str, tuple[Tuning, str]] = {
    "legacy": (Tuning.legacy(), "rcu"),
    "hash2-deliver-locked": (Tuning(udp_mcast_deliver_unlocked=False), "rcu"),
    "primary-unlocked": (Tuning(udp_mcast_hash2=False), "rcu"),
    "modern-rcu": (Tuning(), "rcu"),
    "modern-collect-locked": (Tuning(), "locked"),
}


def table(size: int = 256, seed: int = 1, **kw: object) -> UdpTable:
    return UdpTable(HashSecret(random.Random(seed)), size=size,
                    rng=random.Random(seed + 1), **kw)  # type: ignore[arg-type]


def deliver(t: UdpTable, mode: str, daddr: bytes, dport: int, saddr: bytes, sport: int,
            ifindex: int, datagram: object = b"payload") -> list[UdpEntry]:
    tuning, collect = MODES[mode]
    t.tuning = tuning
    t.mcast_collect = collect
    got: list[UdpEntry] = []
    count = t.mcast_deliver(daddr, dport, saddr, sport, ifindex, datagram,
                            lambda sk, _data: got.append(sk))
    assert count == len(got)
    assert len({id(sk) for sk in got}) == len(got), f"{mode}: a socket received twice"
    return got


def expected(t: UdpTable, daddr: bytes, dport: int, saddr: bytes, sport: int,
             ifindex: int) -> set[int]:
    match = is_mcast_sock4 if len(daddr) == 4 else is_mcast_sock6
    return {id(sk) for sk in t.entries() if match(sk, daddr, dport, saddr, sport, ifindex)}


def check_all_modes(t: UdpTable, packet: tuple) -> set[int]:
    want = expected(t, *packet)
    for mode in MODES:
        assert {id(sk) for sk in deliver(t, mode, *packet)} == want, mode
    return want


def member(t: UdpTable, addr: bytes, port: int, *, groups: tuple = (), mc_all: bool = True,
           family: int | None = None, **kw: object) -> UdpEntry:
    if family is None:
        family = AF_INET if len(addr) == 4 else AF_INET6
    sk = UdpEntry(family, addr, reuseaddr=True, **kw)  # type: ignore[arg-type]
    sk.mc_all = mc_all
    t.bind(sk, port)
    for group, ifindex in groups:
        sk.join_group(group, ifindex)
    return sk


# --- the per-socket filter (__udp_is_mcast_sock, ip_mc_sf_allow) -----------------------------
def test_mcast_filter_cases() -> None:
    t = table()
    joined = member(t, ANY4, 5000, groups=((G1, 1),), mc_all=False)
    on_group = member(t, G1, 5000, groups=((G1, 1),), mc_all=False)
    other_group = member(t, G2, 5000, groups=((G2, 1),), mc_all=False)
    not_joined = member(t, ANY4, 5000, mc_all=False)
    mc_all = member(t, ANY4, 5000)  # IP_MULTICAST_ALL (Linux default): no join needed
    wrong_if = member(t, ANY4, 5000, groups=((G1, 2),), mc_all=False)
    connected = member(t, ANY4, 5000, groups=((G1, 1),), mc_all=False, faddr=S2, fport=9)
    on_dev2 = member(t, ANY4, 5000, groups=((G1, 2),), mc_all=False, bound_dev=2)
    unicast = member(t, UNI, 5000, groups=((G1, 1),), mc_all=False)
    v6any = member(t, ANY6, 5000, groups=((G1, 1),), mc_all=False)
    v6only = member(t, ANY6, 5000, mc_all=True, v6only=True)
    include = member(t, ANY4, 5000, mc_all=False)
    include.join_group(G1, 1, mode=MCAST_INCLUDE, sources=(S1,))
    exclude = member(t, ANY4, 5000, mc_all=False)
    exclude.join_group(G1, 1, mode=MCAST_EXCLUDE, sources=(S1,))
    got = {id(sk) for sk in deliver(t, "modern-rcu", G1, 5000, S1, 7, 1)}
    want = {joined, on_group, mc_all, v6any, include}
    assert got == {id(sk) for sk in want}
    for sk in (other_group, not_joined, wrong_if, connected, on_dev2, unicast, v6only, exclude):
        assert id(sk) not in got
    # From S2 the source filters flip, the connected socket's peer matches, and on
    # interface 2 the device-bound socket and the interface-2 membership count.
    got2 = {id(sk) for sk in deliver(t, "legacy", G1, 5000, S2, 9, 2)}
    assert got2 == {id(sk) for sk in (mc_all, wrong_if, on_dev2)}
    got3 = {id(sk) for sk in deliver(t, "legacy", G1, 5000, S2, 9, 1)}
    assert got3 == {id(sk) for sk in (joined, on_group, mc_all, connected, v6any, exclude)}
    # Broadcast is not multicast: no membership needed, but a bound address must match.
    got4 = {id(sk) for sk in deliver(t, "modern-rcu", BCAST, 5000, S1, 7, 1)}
    assert got4 == {id(sk) for sk in (joined, not_joined, mc_all, wrong_if, include, exclude,
                                      v6any)}


def test_ipv6_multicast_matches_group_on_any_interface() -> None:
    t = table()
    v6 = member(t, ANY6, 5000, groups=((G6, 3),), mc_all=False)
    v6_not = member(t, ANY6, 5000, mc_all=False)
    bound_group = member(t, G6, 5000, mc_all=True)
    member(t, ANY4, 5000)  # IPv4 sockets never see IPv6 datagrams
    got = {id(sk) for sk in deliver(t, "modern-rcu", G6, 5000, S6, 1, 1)}
    assert got == {id(v6), id(bound_group)}
    assert id(v6_not) not in got


def test_membership_api_errors() -> None:
    sk = UdpEntry(AF_INET, ANY4)
    sk.join_group(G1, 1)
    with pytest.raises(OSError) as info:
        sk.join_group(G1, 1)
    assert info.value.errno == 98  # EADDRINUSE: already a member
    with pytest.raises(OSError) as info:
        sk.leave_group(G2, 1)
    assert info.value.errno == 99  # EADDRNOTAVAIL: not a member
    with pytest.raises(OSError) as info:
        sk.join_group(UNI, 1)
    assert info.value.errno == 22  # EINVAL: not a multicast address
    with pytest.raises(OSError):
        sk.join_group(G6, 1)  # IPv6 group on an IPv4 socket
    sk.leave_group(G1, 1)
    assert sk.mc_list == {}


# --- identical receiver sets: legacy vs modern -------------------------------------------
V4_ADDRS = {"any": ANY4, "g1": G1, "g2": G2, "bcast": BCAST, "uni": UNI}
PEERS = [None, (S1, 0), (S1, 7), (S2, 8), (None, 7)]

sock_specs = st.fixed_dictionaries({
    "v6": st.booleans(),
    "port": st.sampled_from([5000, 5000, 5000, 5001]),
    "addr": st.sampled_from(["any", "any", "g1", "g2", "bcast", "uni", "g6"]),
    "peer": st.sampled_from(range(len(PEERS))),
    "dev": st.sampled_from([0, 0, 1, 2]),
    "joins": st.lists(st.tuples(st.sampled_from(["g1", "g2", "g6"]), st.sampled_from([1, 2]),
                                st.sampled_from(["plain", "include", "exclude"])),
                      max_size=3, unique_by=lambda j: (j[0], j[1])),
    "mc_all": st.booleans(),
    "v6only": st.booleans(),
})


def build(t: UdpTable, spec: dict) -> UdpEntry | None:
    v6 = spec["v6"] or spec["addr"] == "g6"
    if spec["addr"] == "g6":
        addr = G6
    elif v6:
        addr = ANY6 if spec["addr"] == "any" else mapped(V4_ADDRS[spec["addr"]])
    else:
        addr = V4_ADDRS[spec["addr"]]
    v6only = v6 and spec["v6only"] and addr in (ANY6, G6)
    peer = PEERS[spec["peer"]]
    kw: dict[str, object] = {}
    if peer is not None:
        paddr, pport = peer
        if paddr is not None:
            kw["faddr"] = S6 if addr == G6 else (mapped(paddr) if v6 else paddr)
        kw["fport"] = pport
    sk = UdpEntry(AF_INET6 if v6 else AF_INET, addr, reuseaddr=True, bound_dev=spec["dev"],
                  v6only=v6only, **kw)  # type: ignore[arg-type]
    if peer is not None:
        sk.state = State.ESTABLISHED
    sk.mc_all = spec["mc_all"]
    t.bind(sk, spec["port"])
    for name, ifindex, mode in spec["joins"]:
        group = G6 if name == "g6" else V4_ADDRS[name]
        if (len(group) == 16) != v6 or (len(group) == 4 and v6only):
            continue
        if mode == "plain":
            sk.join_group(group, ifindex)
        else:
            sk.join_group(group, ifindex,
                          mode=MCAST_INCLUDE if mode == "include" else MCAST_EXCLUDE,
                          sources=(S1 if len(group) == 4 else S6,))
    return sk


PACKETS = [(d, p, s, sp, i) for d in (G1, G2, BCAST) for p in (5000, 5001) for s in (S1, S2)
           for sp in (7, 8) for i in (1, 2)] + \
          [(G6, p, S6, sp, i) for p in (5000, 5001) for sp in (7, 8) for i in (1, 2)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(sock_specs, max_size=30), size=st.sampled_from([1, 2, 8, 256]))
def test_modern_and_legacy_receive_sets_identical(specs: list[dict], size: int) -> None:
    t = table(size=size)
    for spec in specs:
        build(t, spec)
    t.check_consistency()
    for packet in PACKETS:
        check_all_modes(t, packet)


@pytest.mark.parametrize("seed", range(12))
def test_identical_sets_on_long_chains(seed: int) -> None:
    """40 random sockets, most on one port: the hash2 path (count > 10) is taken."""
    rng = random.Random(seed)
    t = table(size=rng.choice([1, 4, 16, 256]), seed=seed)
    for _ in range(40):
        spec = {
            "v6": rng.random() < 0.3,
            "port": 5000 if rng.random() < 0.8 else 5001,
            "addr": rng.choice(["any", "any", "g1", "g2", "bcast", "uni", "g6"]),
            "peer": rng.randrange(len(PEERS)),
            "dev": rng.choice([0, 0, 1, 2]),
            "joins": rng.sample([(g, i, rng.choice(["plain", "include", "exclude"]))
                                 for g in ("g1", "g2", "g6") for i in (1, 2)], 2),
            "mc_all": rng.random() < 0.5,
            "v6only": rng.random() < 0.3,
        }
        build(t, spec)
    assert t.primary_slot(5000).count > 10
    nonempty = 0
    for packet in PACKETS:
        nonempty += bool(check_all_modes(t, packet))
    assert nonempty  # the configurations do reach somebody


def test_300_sockets_on_one_port_in_300_groups() -> None:
    """The seed's setup.  Bound to the wildcard (all in one hash2 slot) and bound to their
    group address (spread over hash2 slots): each group reaches exactly its socket."""
    groups = [bytes([239, 2, i // 250, i % 250 + 1]) for i in range(300)]
    for bind_group in (False, True):
        t = table(size=256)
        socks = [member(t, g if bind_group else ANY4, 5000, groups=((g, 1),), mc_all=False)
                 for g in groups]
        assert t.primary_slot(5000).count == 300
        for i in range(0, 300, 7):
            got = check_all_modes(t, (groups[i], 5000, S1, 7, 1))
            assert got == {id(socks[i])}
        if bind_group:
            slots = mcast_slots(t, groups[0], 5000, True)
            assert all(len(slot.chain) < 10 for slot in slots)  # the walk is short


@pytest.mark.parametrize("mode", list(MODES))
def test_300_sockets_in_one_group_fan_out(mode: str) -> None:
    t = table(size=256)
    socks = [member(t, ANY4 if i % 2 else G1, 5000, groups=((G1, 1),)) for i in range(300)]
    data = bytearray(b"multicast!")
    received: dict[int, object] = {}

    def queue(sk: UdpEntry, datagram: object) -> None:
        assert id(sk) not in received
        received[id(sk)] = datagram

    tuning, collect = MODES[mode]
    t.tuning, t.mcast_collect = tuning, collect
    before = t.mcast_stats.snapshot()
    assert t.mcast_deliver(G1, 5000, S1, 7, 1, data, queue) == 300
    assert set(received) == {id(sk) for sk in socks}
    originals = [k for k, v in received.items() if v is data]
    assert len(originals) == 1  # the first match gets the original, the rest clones
    assert all(v == data for v in received.values())
    after = t.mcast_stats.snapshot()
    assert after["clones"] - before["clones"] == 299
    assert after["receivers"] - before["receivers"] == 300
    assert all(sk.ref.read() == 1 for sk in socks)  # every pin dropped


@pytest.mark.parametrize("mode", list(MODES))
def test_clone_failure_is_per_socket_and_no_match_counts_ignored(mode: str) -> None:
    t = table()
    socks = [member(t, ANY4, 5000, groups=((G1, 1),)) for _ in range(5)]
    calls = {"n": 0}

    def flaky_clone(data: object) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise MemoryError
        return bytes(data)  # type: ignore[call-overload]

    tuning, collect = MODES[mode]
    t.tuning, t.mcast_collect = tuning, collect
    got: list[UdpEntry] = []
    before = t.mcast_stats.snapshot()
    t.mcast_deliver(G1, 5000, S1, 7, 1, b"x", lambda sk, _d: got.append(sk), clone=flaky_clone)
    assert len(got) == 4
    dropped = [sk for sk in socks if sk.drops]
    assert len(dropped) == 1 and dropped[0] not in got and dropped[0].drops == 1
    mid = t.mcast_stats.snapshot()
    assert mid["UdpRcvbufErrors"] - before["UdpRcvbufErrors"] == 1
    assert mid["UdpInErrors"] - before["UdpInErrors"] == 1
    assert t.mcast_deliver(G2, 5009, S1, 7, 1, b"x", lambda sk, _d: None) == 0
    assert t.mcast_stats.snapshot()["UdpIgnoredMulti"] - mid["UdpIgnoredMulti"] == 1


def test_hash2_of_daddr_equal_to_hash2_of_any() -> None:
    """A one-slot table: (daddr, port) and (ANY, port) share the hash2 slot, which is
    then walked once - no socket receives twice."""
    t = table(size=1)
    socks = [member(t, G1 if i % 3 else ANY4, 5000, groups=((G1, 1),)) for i in range(15)]
    slots = mcast_slots(t, G1, 5000, True)
    assert len(slots) == 1 and slots[0] is t.hash2[0]
    for mode in MODES:
        assert len(deliver(t, mode, G1, 5000, S1, 7, 1)) == len(socks)


def test_hash2_path_taken_only_above_ten() -> None:
    t = table()
    for _ in range(10):
        member(t, ANY4, 5000)
    assert mcast_slots(t, G1, 5000, True) == (t.primary_slot(5000),)
    member(t, ANY4, 5000)
    assert t.primary_slot(5000) not in mcast_slots(t, G1, 5000, True)
    assert mcast_slots(t, G1, 5000, False) == (t.primary_slot(5000),)


# --- concurrent add/remove (forced interleavings) --------------------------------------------
class Tracker:
    """Records deliveries and socket destruction; fails a delivery to a released socket."""

    def __init__(self) -> None:
        self.released: set[int] = set()
        self.delivered: list[UdpEntry] = []
        self.errors: list[str] = []

    def release(self, sk: UdpEntry) -> None:
        self.released.add(id(sk))

    def queue(self, sk: UdpEntry, _data: object) -> None:
        if id(sk) in self.released:
            self.errors.append(f"delivered to {sk!r} after its close completed")
        self.delivered.append(sk)


def run_paused(t: UdpTable, tracker: Tracker, mode: str, point: str,
               interfere: Callable[[], None]) -> None:
    tuning, collect = MODES[mode]
    t.tuning, t.mcast_collect = tuning, collect
    with Schedule(timeout=5.0) as sched:
        sched.pause_at(point, thread="rx")
        rx = threading.Thread(
            target=lambda: t.mcast_deliver(G1, 5000, S1, 7, 1, b"d", tracker.queue), name="rx")
        rx.start()
        sched.wait_paused(point)
        interfere()
        sched.release(point)
        rx.join(timeout=5)
        assert not rx.is_alive()


@pytest.mark.parametrize("n", [3, 15])
def test_close_during_rcu_walk_defers_the_destructor(n: int) -> None:
    """The RCU walk takes no reference: a socket closed while a delivery is between its
    walk and its fan-out still gets the datagram, and its destructor waits for the
    delivery's read section - a grace period cannot complete while it is parked."""
    tracker = Tracker()
    t = table(release=tracker.release)
    socks = [member(t, ANY4, 5000, groups=((G1, 1),)) for _ in range(n)]
    victim = socks[n // 2]

    def close_victim() -> None:
        t.close(victim)
        assert victim.ref.is_dead() and not victim.hashed
        assert not t.rcu.synchronize(timeout=0.1)  # blocked by the parked reader
        assert id(victim) not in tracker.released

    run_paused(t, tracker, "modern-rcu", "udp.mcast.collected", close_victim)
    assert {id(sk) for sk in tracker.delivered} == {id(sk) for sk in socks}
    assert t.rcu.barrier(timeout=5)
    assert id(victim) in tracker.released
    assert not tracker.errors
    # Once closed, later datagrams do not reach it.
    assert victim not in deliver(t, "modern-rcu", G1, 5000, S1, 7, 1)


@pytest.mark.parametrize("mode", ["modern-rcu", "modern-collect-locked"])
def test_close_after_collect_delivers_then_completes(mode: str) -> None:
    tracker = Tracker()
    t = table(release=tracker.release)
    socks = [member(t, ANY4, 5000, groups=((G1, 1),)) for _ in range(12)]
    victim = socks[4]

    def close_victim() -> None:
        t.close(victim)  # unhashed; the delivery's pin or read section keeps it alive
        t.rcu.poll()
        assert id(victim) not in tracker.released

    run_paused(t, tracker, mode, "udp.mcast.collected", close_victim)
    assert {id(sk) for sk in tracker.delivered} == {id(sk) for sk in socks}
    assert t.rcu.barrier(timeout=5)
    assert id(victim) in tracker.released
    assert victim.ref.is_dead()
    assert all(sk.ref.read() == 1 for sk in socks if sk is not victim)
    assert not tracker.errors


def test_add_during_delivery_gets_at_most_one() -> None:
    tracker = Tracker()
    t = table(release=tracker.release)
    socks = [member(t, ANY4, 5000, groups=((G1, 1),)) for _ in range(12)]
    late: list[UdpEntry] = []
    run_paused(t, tracker, "modern-rcu", "udp.mcast.collected",
               lambda: late.append(member(t, ANY4, 5000, groups=((G1, 1),))))
    assert {id(sk) for sk in tracker.delivered} == {id(sk) for sk in socks}
    assert late[0] not in tracker.delivered  # added after the snapshot: 0 copies
    got = deliver(t, "modern-rcu", G1, 5000, S1, 7, 1)
    assert late[0] in got and len(got) == 13


@pytest.mark.parametrize("mode", ["legacy", "modern-collect-locked"])
def test_close_waits_for_a_locked_walk(mode: str) -> None:
    """With the slot lock held by delivery, close() blocks until the walk is over: the
    socket gets its copy before its close completes."""
    tracker = Tracker()
    t = table(release=tracker.release)
    socks = [member(t, ANY4, 5000, groups=((G1, 1),)) for _ in range(3)]
    victim = socks[1]
    closer = threading.Thread(target=t.close, args=(victim,), name="closer")

    def start_closer() -> None:
        closer.start()
        closer.join(timeout=0.2)
        assert closer.is_alive()  # blocked on the slot lock held by the paused walk

    run_paused(t, tracker, mode, "udp.mcast.locked_walk", start_closer)
    closer.join(timeout=5)
    assert not closer.is_alive()
    assert victim in tracker.delivered
    assert t.rcu.barrier(timeout=5)
    assert id(victim) in tracker.released
    assert not tracker.errors


def test_socket_in_both_hash2_snapshots_receives_once() -> None:
    """Mid-rehash a socket sits in the hash2 slots of both its old (wildcard) and its new
    address; a lockless walk that meets it in both chains delivers one copy."""
    t = table(size=256)
    port = 5000
    while t.secondary_slot(t.portaddr_hash(G1, port)) is \
            t.secondary_slot(t.portaddr_hash(ANY4, port)):
        port += 1
    others = [member(t, ANY4, port, groups=((G1, 1),)) for _ in range(11)]
    moving = member(t, ANY4, port, groups=((G1, 1),))
    got: list[list[UdpEntry]] = []
    with Schedule(timeout=5.0) as sched:
        sched.pause_at("udp.rehash.between_slots", thread="connector")
        connector = threading.Thread(target=t.connect, args=(moving, S1, 7),
                                     kwargs={"laddr": G1}, name="connector")
        connector.start()
        sched.wait_paused("udp.rehash.between_slots")
        assert moving in t.secondary_slot(t.portaddr_hash(G1, port)).chain
        assert moving in t.secondary_slot(t.portaddr_hash(ANY4, port)).chain
        got.append(deliver(t, "modern-rcu", G1, port, S1, 7, 1))  # asserts no duplicate
        sched.release("udp.rehash.between_slots")
        connector.join(timeout=5)
    assert {id(sk) for sk in got[0]} == {id(sk) for sk in others + [moving]}
    t.check_consistency()


@pytest.mark.parametrize("mode", ["modern-rcu", "modern-collect-locked", "hash2-deliver-locked"])
def test_rehash_between_the_two_walks_delivers_once(mode: str) -> None:
    """A socket served by the walk of the (daddr, port) chain and then moved to the
    (ANY, port) chain by disconnect() before that chain is walked gets one copy."""
    t = table(size=256)
    port = 5000
    while t.secondary_slot(t.portaddr_hash(G1, port)) is \
            t.secondary_slot(t.portaddr_hash(ANY4, port)):
        port += 1
    others = [member(t, ANY4, port, groups=((G1, 1),)) for _ in range(11)]
    moving = member(t, ANY4, port, groups=((G1, 1),))
    moving.bind_port_locked = True  # disconnect() rehashes instead of unhashing
    t.connect(moving, S1, 7, laddr=G1)
    assert moving in t.secondary_slot(t.portaddr_hash(G1, port)).chain
    tuning, collect = MODES[mode]
    got: list[UdpEntry] = []
    with Schedule(timeout=5.0) as sched:
        sched.pause_at("udp.mcast.between_chains", thread="rx")
        rx = threading.Thread(
            target=lambda: t.mcast_deliver(G1, port, S1, 7, 1, b"d",
                                           lambda sk, _d: got.append(sk), tuning=tuning,
                                           collect=collect), name="rx")
        rx.start()
        sched.wait_paused("udp.mcast.between_chains")
        t.disconnect(moving)
        assert moving in t.secondary_slot(t.portaddr_hash(ANY4, port)).chain
        sched.release("udp.mcast.between_chains")
        rx.join(timeout=5)
    ids = [id(sk) for sk in got]
    assert len(ids) == len(set(ids)), "a socket received the datagram twice"
    assert set(ids) == {id(sk) for sk in others + [moving]}
    assert all(sk.ref.read() == 1 for sk in others + [moving])
