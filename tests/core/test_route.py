"""Routing table: longest-prefix match against a brute-force model, metrics, interface
scoping, generations; path MTU clamps and expiry."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcunet.core.route import (
    IPV4_MIN_PMTU,
    IPV6_MIN_MTU,
    KIND_CONNECTED,
    PmtuStore,
    Route,
    RoutingTable,
    network_of,
)

SECOND = 1_000_000_000


def a4(text: str) -> bytes:
    return ipaddress.IPv4Address(text).packed


def a6(text: str) -> bytes:
    return ipaddress.IPv6Address(text).packed


def route(prefix: str, ifindex: int = 1, via: str | None = None, metric: int = 0) -> Route:
    net = ipaddress.ip_network(prefix, strict=False)
    gateway = ipaddress.ip_address(via).packed if via else None
    return Route(net.network_address.packed, net.prefixlen, ifindex, gateway, None, metric)


def test_longest_prefix_wins_over_default_and_shorter() -> None:
    table = RoutingTable()
    table.add_default(a4("192.0.2.1"), ifindex=1)
    table.add(route("10.0.0.0/8", 2))
    table.add(route("10.1.0.0/16", 3))
    table.add(route("10.1.2.0/24", 4))
    assert table.lookup(a4("10.1.2.3")).ifindex == 4
    assert table.lookup(a4("10.1.3.3")).ifindex == 3
    assert table.lookup(a4("10.9.9.9")).ifindex == 2
    default = table.lookup(a4("8.8.8.8"))
    assert default.prefix_len == 0 and default.gateway == a4("192.0.2.1")
    assert default.next_hop(a4("8.8.8.8")) == a4("192.0.2.1")
    assert table.lookup(a4("10.1.2.3")).next_hop(a4("10.1.2.3")) == a4("10.1.2.3")


def test_no_route_without_default() -> None:
    table = RoutingTable()
    table.add(route("10.0.0.0/8"))
    assert table.lookup(a4("11.0.0.1")) is None
    assert table.lookup(a6("2001:db8::1")) is None


def test_families_are_separate() -> None:
    table = RoutingTable()
    table.add(route("0.0.0.0/0", 1, "10.0.0.1"))
    assert table.lookup(a6("::1")) is None
    table.add(route("::/0", 2, "fe80::1", metric=1024))
    assert table.lookup(a6("2001:db8::1")).ifindex == 2
    assert table.lookup(a4("1.2.3.4")).ifindex == 1
    assert {r.family for r in table.routes()} == {4, 6}
    assert len(table.routes(6)) == 1


def test_lowest_metric_wins_then_first_added() -> None:
    table = RoutingTable()
    table.add(route("10.0.0.0/8", 1, metric=100))
    table.add(route("10.0.0.0/8", 2, metric=10))
    table.add(route("10.0.0.0/8", 3, metric=10))
    assert table.lookup(a4("10.2.3.4")).ifindex == 2
    table.remove(route("10.0.0.0/8", 2, metric=10))
    assert table.lookup(a4("10.2.3.4")).ifindex == 3


def test_oif_restricts_to_interface_and_falls_back_to_shorter_prefix() -> None:
    table = RoutingTable()
    table.add_connected(1, a6("fe80::1"), 64)
    table.add_connected(2, a6("fe80::2"), 64)
    table.add(route("::/0", 2, "fe80::99", metric=1024))
    assert table.lookup(a6("fe80::5"), oif=2).ifindex == 2
    assert table.lookup(a6("fe80::5"), oif=1).ifindex == 1
    table.add(route("2001:db8::/32", 1))
    # the /32 is on interface 1 only; bound to 2 we fall back to the default route
    assert table.lookup(a6("2001:db8::7"), oif=2).prefix_len == 0
    assert table.lookup(a6("2001:db8::7"), oif=3) is None


def test_connected_route_prefers_address_and_masks_host_bits() -> None:
    table = RoutingTable()
    stored = table.add_connected(3, a4("10.0.0.7"), 24)
    assert stored.dst == a4("10.0.0.0") and stored.prefsrc == a4("10.0.0.7")
    assert stored.kind == KIND_CONNECTED and stored.gateway is None
    assert table.lookup(a4("10.0.0.200")) == stored
    v6 = table.add_connected(3, a6("2001:db8::7"), 64)
    assert v6.metric == 256


def test_duplicate_add_and_missing_remove_raise_linux_errors() -> None:
    table = RoutingTable()
    table.add(route("10.0.0.0/8"))
    with pytest.raises(FileExistsError) as exc:
        table.add(route("10.1.2.3/8"))  # same prefix once masked
    assert exc.value.errno == 17
    with pytest.raises(ProcessLookupError) as exc2:
        table.remove(route("10.0.0.0/8", ifindex=9))
    assert exc2.value.errno == 3
    assert len(table) == 1


def test_invalid_routes_rejected() -> None:
    table = RoutingTable()
    with pytest.raises(ValueError):
        table.add(Route(a4("10.0.0.0"), 33, 1))
    with pytest.raises(ValueError):
        table.add(Route(b"\x00" * 5, 8, 1))
    with pytest.raises(ValueError):
        table.add(Route(a4("10.0.0.0"), 8, 1, gateway=a6("::1")))
    assert table.generation == 0


def test_generation_bumps_on_every_change_only() -> None:
    table = RoutingTable()
    seen = [table.generation]
    r = table.add(route("10.0.0.0/8", 1))
    seen.append(table.generation)
    table.add(route("10.0.0.0/8", 2))
    seen.append(table.generation)
    table.lookup(a4("10.0.0.1"))
    assert table.generation == seen[-1]  # lookups change nothing
    table.remove(r)
    seen.append(table.generation)
    assert table.remove_interface(2)
    seen.append(table.generation)
    assert table.remove_interface(2) == []  # nothing removed: no bump
    assert table.generation == seen[-1]
    table.replace_all([route("0.0.0.0/0", 1, "10.0.0.1")])
    seen.append(table.generation)
    assert seen == list(range(6))
    found, generation = table.lookup_with_generation(a4("1.1.1.1"))
    assert found is not None and generation == 5


def test_remove_interface_drops_only_its_routes_in_both_families() -> None:
    table = RoutingTable()
    table.add(route("10.0.0.0/8", 1))
    table.add(route("10.0.0.0/16", 2))
    table.add(route("2001:db8::/32", 2))
    removed = table.remove_interface(2)
    assert len(removed) == 2
    assert table.lookup(a4("10.0.1.1")).ifindex == 1
    assert table.lookup(a6("2001:db8::1")) is None


def test_snapshot_seen_by_reader_is_immutable() -> None:
    table = RoutingTable()
    table.add(route("10.0.0.0/8", 1))
    before = table.routes()
    table.add(route("10.0.0.0/24", 2))
    assert before == [route("10.0.0.0/8", 1)]


# -- brute-force model --------------------------------------------------------------------


def brute_force(routes: list[Route], dst: bytes, oif: int | None) -> Route | None:
    value = int.from_bytes(dst, "big")
    bits = len(dst) * 8
    best: Route | None = None
    for r in routes:  # insertion order: earlier wins ties
        if len(r.dst) != len(dst) or (oif is not None and r.ifindex != oif):
            continue
        mask = ((1 << r.prefix_len) - 1) << (bits - r.prefix_len)
        if value & mask != int.from_bytes(r.dst, "big"):
            continue
        if best is None or (r.prefix_len, -r.metric) > (best.prefix_len, -best.metric):
            best = r
    return best


def route_strategy(size: int) -> st.SearchStrategy[Route]:
    bits = size * 8
    # Few distinct top bits so prefixes actually nest and collide.
    return st.builds(
        lambda top, plen, ifindex, metric: Route(
            network_of((top << (bits - 8)).to_bytes(size, "big"), plen), plen, ifindex,
            metric=metric,
        ),
        st.sampled_from([0, 10, 11, 192]),
        st.sampled_from([0, 1, 4, 7, 8, 9, 12, bits - 1, bits]),
        st.integers(1, 3),
        st.integers(0, 2),
    )


def addr_strategy(size: int) -> st.SearchStrategy[bytes]:
    bits = size * 8
    return st.builds(
        lambda top, low: ((top << (bits - 8)) | low).to_bytes(size, "big"),
        st.sampled_from([0, 10, 11, 12, 192, 255]),
        st.integers(0, (1 << (bits - 8)) - 1) | st.just(0),
    )


@pytest.mark.parametrize("size", [4, 16])
def test_lpm_matches_brute_force(size: int) -> None:
    @settings(max_examples=150, deadline=None)
    @given(
        st.lists(route_strategy(size), max_size=25),
        st.lists(addr_strategy(size), min_size=1, max_size=20),
        st.sampled_from([None, 1, 2]),
        st.data(),
    )
    def check(routes: list[Route], dsts: list[bytes], oif: int | None, data: st.DataObject) -> None:
        table = RoutingTable()
        model: list[Route] = []
        for r in routes:
            try:
                table.add(r)
            except FileExistsError:
                assert any(
                    (m.dst, m.prefix_len, m.ifindex, m.metric, m.gateway)
                    == (r.dst, r.prefix_len, r.ifindex, r.metric, r.gateway)
                    for m in model
                )
                continue
            model.append(r)
        # remove a few, including from the middle of a metric-ordered chain
        for victim in data.draw(st.lists(st.sampled_from(model), max_size=4, unique=True)
                                if model else st.just([])):
            table.remove(victim)
            model.remove(victim)
        for dst in dsts:
            assert table.lookup(dst, oif) == brute_force(model, dst, oif)
        assert sorted(table.routes()) == sorted(model)

    check()


# -- path MTU ----------------------------------------------------------------------------


def test_pmtu_lowers_clamps_and_expires() -> None:
    store = PmtuStore(expires=600 * SECOND)
    dst = a4("198.51.100.1")
    now = 5 * SECOND
    assert store.get(dst, now) is None
    assert store.update(dst, 1400, now) == 1400
    assert store.path_mtu(dst, 1500, now) == 1400
    assert store.path_mtu(dst, 1300, now) == 1300
    assert store.update(dst, 1450, now) is None  # never raised while live
    assert store.update(dst, 100, now) == IPV4_MIN_PMTU  # forged tiny MTU clamped to 552
    generation = store.generation
    assert store.update(dst, 552, now) is None
    assert store.generation == generation
    assert store.next_deadline() == now + 600 * SECOND
    later = now + 600 * SECOND
    assert store.get(dst, later - 1) == IPV4_MIN_PMTU
    assert store.get(dst, later) is None  # expired: readers ignore it at once
    assert store.update(dst, 1480, later) == 1480  # a fresh learn after expiry
    assert store.expire(later + 600 * SECOND) == 1
    assert len(store) == 0 and store.next_deadline() is None


def test_pmtu_ipv6_floor_is_1280() -> None:
    store = PmtuStore()
    dst = a6("2001:db8::1")
    assert store.update(dst, 1000, 0) == IPV6_MIN_MTU
    assert store.update(dst, 1279, 0) is None
    assert store.get(dst, 1) == 1280


def test_pmtu_store_is_bounded_and_evicts_oldest() -> None:
    store = PmtuStore(max_entries=4)
    dsts = [bytes([10, 0, 0, i]) for i in range(10)]
    for i, dst in enumerate(dsts):
        store.update(dst, 1000, i)
    assert len(store) == 4
    assert [store.get(d, 10) for d in dsts[:6]] == [None] * 6
    assert [store.get(d, 10) for d in dsts[6:]] == [1000] * 4
    assert store.forget(dsts[9]) and not store.forget(dsts[9])
