"""The seed-003 benchmark runs end to end and returns what ``rcunet bench tables`` reads
(no timing is asserted: performance lives in the benchmark's output)."""

from __future__ import annotations

from rcunet.bench import tables_seed003


def test_measure_returns_the_aggregator_keys() -> None:
    result = tables_seed003.measure(0.05, threads=2)
    assert result["legacy"] > 0 and result["modern"] > 0
    assert result["ratio"] == result["modern"] / result["legacy"]
    assert result["groups"]["receivers_per_packet"] == 1.0
    assert result["groups"]["modern_lock_sections_per_packet"] == 0.0
    fanout = result["fanout"]
    assert fanout["receivers_per_packet"] == 300.0
    assert fanout["legacy_hold_ns_per_packet"] > 0
    assert fanout["modern_hold_ns_per_packet"] > 0
    assert fanout["rcu_hold_ns_per_packet"] == 0.0
    assert fanout["rcu_lock_sections_per_packet"] == 0.0
    assert "udp_hslot_lock" in result["lockstat"]


def test_receiver_sets_checked_before_timing() -> None:
    table, groups = tables_seed003.groups_table()
    assert tables_seed003.assert_identical_receivers(table, groups, 5000) == 300
