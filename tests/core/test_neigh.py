"""Neighbour cache state machine on virtual time: resolution, retries, failure with the
queued packets returned, NUD transitions, queue bounds, table bounds and GC."""

from __future__ import annotations

import pytest

from rcunet.core.neigh import (
    DELAY,
    FAILED,
    INCOMPLETE,
    PERMANENT,
    PROBE,
    REACHABLE,
    STALE,
    USED_GRANULARITY,
    Discard,
    NeighbourTable,
    NeighParams,
    Solicit,
    Transmit,
    Unreachable,
)

S = 1_000_000_000
IP = b"\x0a\x00\x00\x02"
MAC = b"\x02\x00\x00\x00\x00\x02"
MAC2 = b"\x02\x00\x00\x00\x00\x99"


def resolved(table: NeighbourTable, now: int = 0) -> NeighbourTable:
    table.resolve(IP, now)
    table.advertisement_received(IP, MAC, now, solicited=True, override=True)
    assert table.state_of(IP) is REACHABLE
    return table


def test_first_packet_queues_and_broadcasts_a_solicit() -> None:
    table = NeighbourTable()
    lladdr, actions = table.resolve(IP, 0, "pkt1", 100)
    assert lladdr is None
    assert actions == [Solicit(IP, None)]
    assert table.state_of(IP) is INCOMPLETE
    assert table.next_deadline() == 1 * S
    lladdr, actions = table.resolve(IP, 10, "pkt2", 100)
    assert lladdr is None and actions == []  # already asking: just queued


def test_reply_releases_queue_in_order() -> None:
    table = NeighbourTable()
    table.resolve(IP, 0, "a", 10)
    table.resolve(IP, 1, "b", 10)
    actions = table.advertisement_received(IP, MAC, 5, solicited=True, override=False)
    assert actions == [Transmit(IP, MAC, ("a", "b"))]
    assert table.state_of(IP) is REACHABLE
    assert table.resolve(IP, 6, "c", 10) == (MAC, ())
    assert table.stats["hits"] == 1


def test_retries_then_failure_returns_queued_packets() -> None:
    params = NeighParams(retrans_time=1 * S, mcast_solicit=3)
    table = NeighbourTable(params)
    _, first = table.resolve(IP, 0, "p1", 10)
    table.resolve(IP, 0, "p2", 10)
    solicits = list(first)
    now = 0
    while (deadline := table.next_deadline()) is not None:
        now = deadline
        actions = table.poll(now)
        solicits += [a for a in actions if isinstance(a, Solicit)]
        failures = [a for a in actions if isinstance(a, Unreachable)]
        if failures:
            break
    assert solicits == [Solicit(IP, None)] * 3  # mcast_solicit probes, 1 s apart
    assert now == 3 * S
    assert failures == [Unreachable(IP, ("p1", "p2"))]
    assert table.state_of(IP) is FAILED
    assert table.stats["res_failed"] == 1
    # New traffic to a FAILED neighbour restarts resolution.
    lladdr, actions = table.resolve(IP, 4 * S, "p3", 10)
    assert lladdr is None and actions == [Solicit(IP, None)]
    assert table.state_of(IP) is INCOMPLETE


def test_no_probe_before_its_time() -> None:
    table = NeighbourTable()
    table.resolve(IP, 0, "p", 1)
    assert table.poll(S - 1) == []
    assert table.poll(S) == [Solicit(IP, None)]


def test_reachable_times_out_to_stale_then_delay_probe_reachable() -> None:
    params = NeighParams(reachable_time=30 * S, delay_first_probe_time=5 * S, retrans_time=S)
    table = resolved(NeighbourTable(params))
    assert table.next_deadline() == 30 * S
    assert table.poll(30 * S) == []
    assert table.state_of(IP) is STALE
    assert table.next_deadline() is None
    # Use of a STALE entry sends at once and starts DELAY.
    assert table.resolve(IP, 40 * S, "x", 1) == (MAC, ())
    assert table.state_of(IP) is DELAY
    assert table.next_deadline() == 45 * S
    # No confirmation within delay_first_probe_time: PROBE with a unicast solicit.
    assert table.poll(45 * S) == [Solicit(IP, MAC)]
    assert table.state_of(IP) is PROBE
    # Packets still flow in PROBE.
    assert table.resolve(IP, 45 * S + 1, "y", 1) == (MAC, ())
    actions = table.advertisement_received(IP, MAC, 45 * S + 2, solicited=True, override=False)
    assert actions == []
    assert table.state_of(IP) is REACHABLE


def test_delay_with_upper_layer_confirmation_goes_back_to_reachable() -> None:
    table = resolved(NeighbourTable())
    table.poll(30 * S)
    table.resolve(IP, 31 * S)
    assert table.state_of(IP) is DELAY
    table.confirm(IP, 32 * S)
    assert table.poll(36 * S) == []
    assert table.state_of(IP) is REACHABLE
    assert table.next_deadline() == 62 * S


def test_probe_failure_after_ucast_solicit() -> None:
    table = resolved(NeighbourTable(NeighParams(ucast_solicit=2)))
    table.poll(30 * S)
    table.resolve(IP, 31 * S)
    assert table.poll(36 * S) == [Solicit(IP, MAC)]
    assert table.poll(37 * S) == [Solicit(IP, MAC)]
    assert table.poll(38 * S) == []  # nothing queued in PROBE: no Unreachable
    assert table.state_of(IP) is FAILED


def test_reachable_used_recently_goes_to_delay_not_stale() -> None:
    table = resolved(NeighbourTable())
    table.resolve(IP, 28 * S)  # used within delay_first_probe_time of the expiry
    table.poll(30 * S)
    assert table.state_of(IP) is DELAY


def test_unsolicited_advertisement_without_override_keeps_address() -> None:
    table = resolved(NeighbourTable())
    actions = table.advertisement_received(IP, MAC2, 1, solicited=False, override=False)
    assert actions == []
    entry = table.get(IP)
    assert entry.lladdr == MAC and entry.state is STALE  # RFC 4861 §7.2.5: doubt it
    table.advertisement_received(IP, MAC2, 2, solicited=False, override=True)
    assert entry.lladdr == MAC2 and entry.state is STALE


def test_unsolicited_advertisement_never_creates() -> None:
    table = NeighbourTable()
    assert table.advertisement_received(IP, MAC, 0, solicited=False, override=True) == []
    assert IP not in table


def test_solicitation_creates_stale_and_releases_incomplete_queue() -> None:
    table = NeighbourTable()
    assert table.solicitation_received(IP, MAC, 0) == []
    assert table.state_of(IP) is STALE
    other = b"\x0a\x00\x00\x03"
    table.resolve(other, 0, "q", 1)
    assert table.solicitation_received(other, MAC2, 1) == [Transmit(other, MAC2, ("q",))]
    assert table.state_of(other) is STALE


def test_gratuitous_arp_updates_within_locktime_plain_update_does_not() -> None:
    table = resolved(NeighbourTable(NeighParams(locktime=S)))
    table.arp_received(IP, MAC2, S // 2, reply_to_us=False)
    assert table.get(IP).lladdr == MAC  # within locktime: ignored
    table.arp_received(IP, MAC2, S // 2, reply_to_us=False, gratuitous=True)
    assert table.get(IP).lladdr == MAC2 and table.state_of(IP) is STALE
    table.arp_received(IP, MAC2, 3 * S, reply_to_us=True)
    assert table.state_of(IP) is REACHABLE


def test_pending_queue_is_bounded_oldest_dropped() -> None:
    table = NeighbourTable(NeighParams(unres_qlen=3, unres_qlen_bytes=1000))
    drops = []
    for i in range(5):
        _, actions = table.resolve(IP, i, f"p{i}", 100)
        drops += [a for a in actions if isinstance(a, Discard)]
    assert [d.packets for d in drops] == [("p0",), ("p1",)]
    assert all(d.reason == "unres_qlen" for d in drops)
    # byte bound: a 900-byte packet pushes out all but what fits
    _, actions = table.resolve(IP, 9, "big", 900)
    assert [a.packets for a in actions if isinstance(a, Discard)] == [("p2", "p3")]
    assert table.stats["unresolved_discards"] == 4
    actions = table.advertisement_received(IP, MAC, 10, solicited=True, override=True)
    assert actions == [Transmit(IP, MAC, ("p4", "big"))]


def test_permanent_entries_are_not_probed_updated_or_collected() -> None:
    table = NeighbourTable()
    table.resolve(IP, 0, "p", 1)
    assert table.add_permanent(IP, MAC, 1) == [Transmit(IP, MAC, ("p",))]
    assert table.next_deadline() is None or table.poll(10**12) == []
    table.arp_received(IP, MAC2, 10**12, reply_to_us=True, gratuitous=True)
    assert table.get(IP).lladdr == MAC and table.state_of(IP) is PERMANENT


def test_table_is_bounded_and_counts_table_full() -> None:
    params = NeighParams(gc_thresh1=2, gc_thresh2=4, gc_thresh3=8)
    table = NeighbourTable(params)
    # An ARP-request flood from distinct senders inside 5 s: nothing is old enough.
    for i in range(20):
        table.solicitation_received(bytes([10, 0, 1, i]), MAC, i)
    assert len(table) == 8
    assert table.stats["table_fulls"] == 12
    _, actions = table.resolve(IP, 30, "pkt", 10)
    assert actions == [Discard(IP, ("pkt",), "table_full")]
    # Later the old entries are collectable and the newcomer fits.
    _, actions = table.resolve(IP, 6 * S, "pkt", 10)
    assert actions == [Solicit(IP, None)]
    assert len(table) <= 8 and table.stats["forced_gc_runs"] >= 1


def test_periodic_gc_drops_unused_stale_entries() -> None:
    params = NeighParams(gc_thresh1=1, gc_stale_time=60 * S, gc_interval=15 * S)
    table = NeighbourTable(params)
    table.solicitation_received(IP, MAC, 0)
    table.poll(0)
    assert table.next_deadline() == 15 * S
    t = 0
    while IP in table:
        t = table.next_deadline()
        table.poll(t)
        assert t <= 90 * S
    assert t > 60 * S and table.stats["periodic_gc_runs"] >= 1


def test_remove_discards_queue() -> None:
    table = NeighbourTable()
    table.resolve(IP, 0, "p", 1)
    assert table.remove(IP) == [Discard(IP, ("p",), "removed")]
    assert table.poll(5 * S) == []
    assert table.remove(IP) == []


@pytest.mark.parametrize("count", [1, 50])
def test_many_neighbours_fail_independently(count: int) -> None:
    table = NeighbourTable()
    addrs = [bytes([10, 1, 0, i]) for i in range(count)]
    for i, addr in enumerate(addrs):
        table.resolve(addr, i, addr, 1)
    failed: list[bytes] = []
    while (deadline := table.next_deadline()) is not None and deadline < 100 * S:
        failed += [p for a in table.poll(deadline) if isinstance(a, Unreachable) for p in a.packets]
    assert sorted(failed) == sorted(addrs)


def test_lladdr_rcu_only_where_sending_changes_no_state() -> None:
    table = NeighbourTable()
    assert table.lladdr_rcu(IP, 0) is None  # unknown: the locked path resolves
    table.resolve(IP, 0, "a", 10)
    assert table.lladdr_rcu(IP, 1) is None  # INCOMPLETE
    table.advertisement_received(IP, MAC, 2, solicited=True, override=True)
    assert table.lladdr_rcu(IP, 3) == MAC  # REACHABLE
    assert table.get(IP).used == 0  # type: ignore[union-attr]  # within a tick: unchanged
    tick = USED_GRANULARITY
    assert table.lladdr_rcu(IP, tick) == MAC
    assert table.get(IP).used == tick  # type: ignore[union-attr]  # a tick later: stored
    assert table.stats["lookups"] == 1  # the fast path counts nothing, as neigh_output
    later = 2 + NeighParams().reachable_time
    table.poll(later)  # reachable_time without confirmation: STALE
    assert table.state_of(IP) is STALE
    assert table.lladdr_rcu(IP, later) is None  # STALE -> DELAY is resolve's job
    assert table.resolve(IP, later, "b", 10) == (MAC, ())
    assert table.state_of(IP) is DELAY
    assert table.lladdr_rcu(IP, later + 1) == MAC  # DELAY: timer armed, nothing to do
    table.add_permanent(IP, MAC2, later + 2)
    assert table.lladdr_rcu(IP, later + 3) == MAC2
