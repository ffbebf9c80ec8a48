"""The seed lab through whole Hosts (short runs; the figures live in docs/BENCHMARKS.md)."""

from __future__ import annotations

import json

from rcunet.cli import main
from rcunet.lab import seed002, seed003


def test_seed003_groups_and_fanout_shape_and_identical_receivers():
    result = seed003.run_lab(duration=0.05, rounds=1, n_sockets=40)
    assert result["receiver_sets_identical"]
    assert result["legacy"] > 0 and result["modern"] > 0
    # Legacy delivers under the bucket lock; the modern walk takes none.
    assert result["hold_ns_per_packet"]["legacy"] > 0
    assert result["hold_ns_per_packet"]["modern"] == 0
    assert result["fanout"]["legacy_hold_ns_per_packet"] > 0
    assert result["fanout"]["modern_hold_ns_per_packet"] == 0


def test_seed003_scenario_delivers_each_group_to_its_one_socket():
    scenario = seed003.Scenario("modern", fanout=False, n_sockets=10)
    try:
        sets = scenario.receiver_sets()
    finally:
        scenario.close()
    assert sets == [(i,) for i in range(10)]


def test_seed002_route_churn_never_uses_a_freed_entry_and_leaks_nothing():
    for mode in ("legacy", "modern"):
        churn = seed002.route_churn(mode, threads=3, duration=0.3)
        assert churn["use_after_free"] == 0
        assert churn["entries_leaked"] == 0
        assert churn["sent"] > 0
        assert churn["route_changes"] > 0


def test_lab_json_output(capsys):
    assert main(["lab", "seed002", "--duration", "0.1", "--rounds", "1", "-T", "2",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"legacy", "modern", "ratio", "route_churn"} <= set(result)
