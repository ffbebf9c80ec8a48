"""Seed 000 through whole threaded Hosts: tcp_crr with a narrow ephemeral range, held
flows on the even ports and TIME_WAIT reuse (small ranges and short runs: counts and
invariants, never speed)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rcunet.cli import main
from rcunet.lab import all as lab_all
from rcunet.lab import report, seed000
from rcunet.sync.lockstat import ClassStats
from rcunet.tuning import Tuning

# 32 ports, the 16 even ones held: every connect() scans the 16 held ports first.
SMALL = {"ports": 32, "hold": 16, "acceptors": 2, "tw_reuse_delay": 20}
#: A bound on the slices a test runs until what it waits for happened.
MAX_SLICES = 50


def test_stack_tuning_flips_only_the_seeds_switches():
    legacy = seed000.stack_tuning("legacy", 100)
    assert legacy == Tuning.modern(connect_rcu_precheck=False, connect_hash_port0=False,
                                   ip_local_port_range=(seed000.PORT_LOW,
                                                        seed000.PORT_LOW + 99),
                                   tcp_tw_reuse=1)
    assert not legacy.seed_is_modern("seed000") and legacy.seed_is_modern("seed004")
    assert seed000.stack_tuning("modern", 100).seed_is_modern("seed000")
    assert legacy.tcp_tw_reuse_delay == 1000 and legacy.tcp_timestamps  # Linux's defaults


def test_lab_counts_the_held_ports_each_connect_scans():
    result = seed000.run_stack_lab(duration=0.15, rounds=1, clients=2, warmup=0.1,
                                   lockstat_duration=0.1, **SMALL)
    assert result["level"] == "stack" and result["legacy"] > 0 and result["modern"] > 0
    legacy, modern = result["runs"]["legacy"], result["runs"]["modern"]
    for run in (legacy, modern):
        # every call meets the 16 held even ports before any free one
        assert run["candidates_per_connect"] >= 16
        assert run["time_wait"] > 0
        assert any(line.startswith("num_transactions=") for line in run["neper"])
    # legacy locks bhash and ehash for each held port; modern skips them with no lock
    assert legacy["occupied_candidate_locks_per_connect"] >= 2 * 16  # + flows in flight
    assert legacy["rcu_skips_per_connect"] == 0
    assert legacy["hash_calls_per_connect"] == legacy["candidates_per_connect"]
    assert modern["occupied_candidate_locks_per_connect"] == 0
    assert modern["rcu_skips_per_connect"] >= 16  # + flows in flight
    assert modern["hash_calls_per_connect"] == 1
    assert legacy["locks_per_connect"] > 2 * 16 > modern["locks_per_connect"]
    # the lock_stat slice sees the same through the lock classes themselves: per call,
    # legacy's 2 locks on each of the 16 held ports come on top of what modern takes
    assert result["table_locks"]["legacy"]["per_connect"] > \
        result["table_locks"]["modern"]["per_connect"]
    for mode in ("legacy", "modern"):
        checks = result["checks"][mode]
        n = checks["completed"]
        assert n > 0 and checks["served"] == n
        assert checks["connect_calls"] == 16 + n + checks["eaddrnotavail"]
        assert checks["active_opens"] == checks["passive_opens"] == 16 + n
        assert checks["tw_recycled"] == checks["tw_recycled_counter"]
        assert checks["client_ehash"] == checks["client_ports"] == 16 + checks["time_wait"]
        # the held flows were closed client-first: they are TIME_WAITs too (less any the
        # server's RSTs killed, which only a spurious retransmission provokes)
        lost = checks["time_wait"] + 16 - checks["time_wait_after_release"]
        assert 0 <= lost <= checks["server_rsts_during_release"]
        assert checks["client_ehash_after_release"] == checks["time_wait_after_release"]
        assert checks["leaks"] == {"sockets": 0, "ehash": 0, "ports": 0, "listeners": 0}
    text = seed000.stack_report(result)
    assert "candidate ports per connect()" in text
    assert "Before (legacy):" in text and "After (modern):" in text
    assert "--ports 32 --hold 16 --tw-reuse 1 --tw-reuse-delay 20" in text
    assert "62,524.04 -> 84,387.19 transactions/s (+35.0%)" in text  # the authors' figure
    # the port search's lock classes always head the lock_stat rows
    assert "bhash_lock:" in text and "ehash_lock:" in text
    json.dumps(seed000.to_json(result))
    # 16 free ports reusable every 20 ms sustain 800 connections/s: a rate near that is
    # bounded by port reuse, and the report says so
    assert seed000.reuse_ceiling(32, 16, 20) == 800
    assert "Warning" not in seed000.stack_report({**result, "legacy": 100.0, "modern": 600.0})
    capped = seed000.stack_report({**result, "legacy": 100.0, "modern": 700.0})
    assert "Warning: modern ran at 88% of that ceiling" in capped


def test_time_wait_ports_are_taken_over_once_old_enough():
    scenario = seed000.CrrScenario("modern", **SMALL)
    try:
        first = scenario.run_slice(0.15, 2)
        assert first["connections"] > 0 and first["time_wait"] > 0
        # slices until the 16 odd ports went round more than once (a loaded machine
        # may need several: a slice is a time, not a count)
        later = [scenario.run_slice(0.15, 2)]
        while not later[-1]["tw_recycled"] and len(later) < MAX_SLICES:
            later.append(scenario.run_slice(0.15, 2))
        assert later[-1]["tw_recycled"] > 0
        assert all(run["time_wait"] <= 16 for run in later)  # one per free port at most
        assert scenario.a.counters.get("TcpExtTWRecycled") == sum(
            run["tw_recycled"] for run in [first, *later])
    finally:
        checks = scenario.finish()
    assert checks["leaks"] == {"sockets": 0, "ehash": 0, "ports": 0, "listeners": 0}


def test_without_tw_reuse_the_range_runs_out_and_every_attempt_is_counted():
    scenario = seed000.CrrScenario("legacy", ports=16, hold=8, acceptors=1, tw_reuse=0)
    try:
        # not at_least_one: a thread that found the range used up would go on until a
        # TIME_WAIT expired (60 s) and then complete a ninth transaction; slices until
        # the range ran out (a loaded machine may need several)
        runs = [scenario.run_slice(0.2, 2, at_least_one=False)]
        while not runs[-1]["eaddrnotavail"] and len(runs) < MAX_SLICES:
            runs.append(scenario.run_slice(0.2, 2, at_least_one=False))
    finally:
        checks = scenario.finish()
    # 8 free ports, each kept by a TIME_WAIT that is never reused: 8 transactions at most
    assert 0 < sum(run["connections"] for run in runs) <= 8
    last = runs[-1]
    assert last["eaddrnotavail"] > 0 and last["tw_recycled"] == 0
    assert last["failures"] == last["eaddrnotavail"]
    # a failed search visits all 16 ports of both parities
    assert last["candidates_per_connect"] > 8
    assert checks["connect_calls"] == 8 + checks["completed"] + checks["eaddrnotavail"]
    assert checks["time_wait"] == checks["completed"]


def test_hold_must_leave_a_free_port():
    with pytest.raises(ValueError):
        seed000.CrrScenario("modern", ports=8, hold=8)


def test_check_problems_names_each_broken_invariant():
    good = {"completed": 5, "served": 5, "eaddrnotavail": 1, "hold": 2,
            "connect_calls": 8, "connect_failures": 1, "active_opens": 7,
            "passive_opens": 7, "tw_recycled": 3, "tw_recycled_counter": 3,
            "settled": True, "time_wait": 4, "client_ehash": 6, "client_ports": 6,
            "ports_outside_range": 0, "server_ehash": 0, "released": True,
            "time_wait_after_release": 5, "client_ehash_after_release": 5,
            "client_ports_after_release": 5, "server_ehash_after_release": 0,
            "server_rsts_during_release": 1,
            "leaks": {"sockets": 0, "ehash": 0, "ports": 0, "listeners": 0},
            "rx_exceptions": 0}
    assert seed000.check_problems(good) == []
    for key, value, words in (("served", 4, "served 4"),
                              ("connect_calls", 9, "connect() calls 9"),
                              ("passive_opens", 6, "passive opens 6"),
                              ("tw_recycled_counter", 2, "TcpExtTWRecycled 2"),
                              ("client_ports", 7, "before release"),
                              ("client_ehash_after_release", 7, "after release"),
                              ("server_rsts_during_release", 0, "after release"),
                              ("leaks", {"sockets": 1, "ehash": 0, "ports": 0,
                                         "listeners": 0}, "left behind"),
                              ("rx_exceptions", 2, "2 receive-path exceptions")):
        problems = seed000.check_problems({**good, key: value})
        assert len(problems) == 1 and words in problems[0], (key, problems)
    assert "server thread failed" in seed000.check_problems(good, [OSError(5)])[0]


def test_cli_stack_json_and_bad_input(capsys):
    assert main(["lab", "seed000", "--ports", "32", "--hold", "16", "--tw-reuse-delay", "20",
                 "-T", "2", "--acceptors", "1", "--duration", "0.05", "--rounds", "1",
                 "--warmup", "0.05", "--lockstat-duration", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["level"] == "stack" and result["lockstat"] == {}
    assert {"legacy", "modern", "ratio", "runs", "checks", "params"} <= set(result)
    assert result["runs"]["modern"]["rcu_skips_per_connect"] >= 16  # the held ports
    assert result["runs"]["legacy"]["rcu_skips_per_connect"] == 0
    for argv in (["--ports", "16", "--hold", "16"],  # no free port left
                 ["--level", "tables", "--hold", "4"],  # a stack option at tables level
                 ["--lockstat", "--lockstat-duration", "0"],
                 ["--ports", "0"], ["--tw-reuse", "3"], ["--warmup", "-1"]):
        with pytest.raises(SystemExit):
            main(["lab", "seed000", *argv])


def test_cli_stack_scale(capsys):
    assert main(["lab", "seed000", "--level", "stack", "--scale", "1,2", "--ports", "32",
                 "--hold", "16", "--tw-reuse-delay", "20", "--duration", "0.05",
                 "--rounds", "1", "--warmup", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["level"] == "stack" and set(result["series"]) == {"1", "2"}
    assert all(rate > 0 for row in result["series"].values() for rate in row.values())


def test_lab_all_runs_seed000_through_the_stack(monkeypatch):
    labs = dict(lab_all.LABS)
    labs["seed000"] = dataclasses.replace(
        labs["seed000"], quick={"duration": 0.1, "rounds": 1, "clients": 2, "warmup": 0,
                                "lockstat_duration": 0, **SMALL})
    monkeypatch.setattr(lab_all, "LABS", labs)
    entry = lab_all.run_seed("seed000", quick=True)
    assert entry["result"]["level"] == "stack"
    assert entry["report"].startswith(seed000.STACK_TITLE)
    names = [m.label for m in lab_all.plot_metrics("seed000", entry["result"])]
    assert names[0] == "connections/s" and "locks per connect()" in names


def test_lock_stat_section_always_shows_the_labs_own_classes():
    def stats(name, acquisitions):
        return ClassStats(name=name, display_name=name, kind="mutex", con_bounces=0,
                          contentions=0, wait_min=0, wait_max=0, wait_total=0,
                          acq_bounces=0, acquisitions=acquisitions, hold_min=1,
                          hold_max=10, hold_total=10 * acquisitions,
                          contention_points=(), contending_points=())

    same = {"bhash_lock": stats("bhash_lock", 100), "sk_lock.slock": stats("sk_lock.slock", 5)}
    # nothing changed: only the named class is shown, in both blocks
    lines = report.lock_stat_section(same, same, always=("bhash_lock", "ehash_lock"))
    rows = [line.split(":")[0].strip() for line in lines if line[40:41] == ":"]
    assert rows == ["bhash_lock", "bhash_lock"]
    assert report.lock_stat_section(same, same) == ["lock_stat: no class changed"]
