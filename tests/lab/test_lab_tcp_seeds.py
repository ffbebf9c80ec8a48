"""Seeds 001 and 004 through whole threaded Hosts (short runs: shapes and invariants, never
speed), and the cover-letter report and plots they print."""

from __future__ import annotations

import argparse
import json
import sys

import pytest

from rcunet.bench import neper
from rcunet.cli import main
from rcunet.lab import plot, report, seed001, seed001_stream, seed004
from rcunet.sync.lockstat import ClassStats
from rcunet.tuning import Tuning


# ------------------------------------------------------------------------------ seed 001
@pytest.mark.parametrize("mode", ["legacy", "modern"])
def test_seed001_every_byte_arrives_and_buffers_go_where_the_mode_says(mode):
    run = seed001.run_stream(mode, duration=0.2, chunk=8192, work_us=10)
    assert run["bytes_sent"] > 0
    assert run["bytes_received"] == run["bytes_sent"]
    assert run["hash_ok"]
    assert run["recv_calls"] > 0 and run["holds"] >= run["recv_calls"]
    assert run["hold_ns_avg"] > 0 and run["hold_ns_max"] >= run["hold_ns_avg"]
    assert 0 < run["hold_ns_per_recv_p50"] <= run["hold_ns_per_recv_p99"]
    assert run["reader_recv_cpu_us_per_mb"] > 0
    assert run["backlog_drops"] == 0
    buffers = run["buffers"]
    if mode == "legacy":  # freed inside the reader's lock section, in the reader's thread
        assert buffers["deferred"] == 0
        assert buffers["freed_local"] > 0
    else:  # handed back to the receive worker that allocated them
        assert buffers["deferred"] > 0
    block = report.parse_block(run["neper"])
    assert block["throughput_units"] == "Mbit/s"
    assert float(block["throughput"]) > 0
    assert int(block["local_throughput"]) > 0


def test_seed_tuning_flips_only_the_seeds_own_switches():
    assert seed001.seed_tuning("modern", "seed001") == Tuning.modern()
    legacy = seed001.seed_tuning("legacy", "seed001")
    assert legacy == Tuning.modern(tcp_defer_free=False)
    assert not legacy.seed_is_modern("seed001") and legacy.seed_is_modern("seed002")
    assert seed001.seed_tuning("legacy", "seed004") == Tuning.modern(
        accept_no_global_lock=False)
    with pytest.raises(ValueError):
        seed001.seed_tuning("old", "seed001")


def test_switch_interval_choices(monkeypatch):
    assert seed001.switch_interval_arg("keep") is None
    assert seed001.switch_interval_arg("auto") == "auto"
    assert seed001.switch_interval_arg("0.001") == 0.001
    for bad in ("0", "-1", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            seed001.switch_interval_arg(bad)
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)
    assert seed001.lab_switch_interval("auto") == seed001.GIL_SWITCH_INTERVAL
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert seed001.lab_switch_interval("auto") is None
    before = sys.getswitchinterval()
    seen = seed001.with_switch_interval(0.002, sys.getswitchinterval)
    assert seen == pytest.approx(0.002) and sys.getswitchinterval() == before


def test_seed001_blocks_differ_so_the_hash_sees_order():
    assert seed001_stream.block(0) != seed001_stream.block(1)
    assert len(seed001_stream.block(7)) == len(seed001_stream.BLOCK) == 65536


def test_seed001_lab_shape_and_report():
    result = seed001.run_lab(duration=0.15, rounds=1, chunk=8192, work_us=5,
                             lockstat_duration=0.1)
    assert {"legacy", "modern", "ratio", "runs", "lockstat", "params"} <= set(result)
    assert result["legacy"] > 0 and result["modern"] > 0
    # The socket's small lock was taken in both runs with statistics on.
    for mode in ("legacy", "modern"):
        assert result["lockstat"][mode]["sk_lock.slock"].acquisitions > 0
    text = seed001.report(result)
    assert "Before (legacy):" in text and "After (modern):" in text
    assert "throughput=" in text and "# " in text  # the After block's % note
    assert "55.00 -> 66.00 Gbit/s (+20.0%)" in text  # the authors' figure, cited
    json.dumps(seed001.to_json(result))  # --json is serialisable


# ------------------------------------------------------------------------------ seed 004
def test_seed004_connections_all_complete_and_nothing_leaks():
    result = seed004.run_lab(duration=0.25, rounds=1, acceptors=3, clients=2,
                             lockstat_duration=0.15)
    for mode in ("legacy", "modern"):
        run = result["runs"][mode]
        # run_lab re-checks these and raises; assert them here too, as the contract
        assert run["connections"] > 0
        assert run["connections"] == run["served"] == run["passive_opens"] \
            == run["active_opens"]
        assert sum(run["served_per_acceptor"]) == run["served"]
        assert run["settled"] and run["client_ports_in_use"] == 0
        assert run["leaks"] == {"sockets": 0, "ehash": 0, "ports": 0, "listeners": 0}
        block = report.parse_block(run["neper"])
        assert int(block["num_transactions"]) == run["connections"]
        assert float(block["latency_min"]) <= float(block["latency_p50"]) \
            <= float(block["latency_max"])
    # The FreeBSD-9.2-style global lock is taken only in legacy.
    assert result["global_lock"]["legacy"]["acquisitions"] > 0
    # accept, SYN processing and teardown: at least two acquisitions per connection
    assert result["global_lock"]["legacy"]["per_connection"] >= 2
    assert result["global_lock"]["modern"]["acquisitions"] == 0
    text = seed004.report(result)
    assert "tcbinfo_lock" in text
    assert "52,000.00 -> 55,000.00 TCP queries/s (+5.8%)" in text


@pytest.mark.parametrize("mode", ["legacy", "modern"])
def test_seed004_workers_shape_serves_every_connection_once(mode):
    # Three threads that each connect and accept on one listener: connections are served
    # by whichever worker dequeued them, yet every one completes, once, with no leak.
    run = seed004._checked(seed004.run_crr(mode, 0.3, acceptors=3, shape="workers"))
    assert run["connections"] > 0
    assert run["connections"] == run["served"] == run["passive_opens"] == run["active_opens"]
    assert len(run["served_per_acceptor"]) == 3
    assert run["leaks"] == {"sockets": 0, "ehash": 0, "ports": 0, "listeners": 0}
    assert run["rx_exceptions"] == 0
    block = report.parse_block(run["neper"])
    assert int(block["num_transactions"]) == run["connections"]


def test_seed004_cpu_table_and_its_ceiling():
    cpu = {1: {"legacy": (1000.0, 1.0), "modern": (800.0, 1.0)},
           2: {"legacy": (2000.0, 1.9), "modern": (1000.0, 1.9)}}
    text = seed004.cpu_text(cpu, parallel=True)
    # two threads at twice the CPU per connection gain nothing; at 1.25x, 1.6x at most
    assert "1.00x" in text.splitlines()[-1] and "1.60x" in text.splitlines()[-1]
    assert "ceiling" not in seed004.cpu_text(cpu, parallel=False)  # a GIL: no parallelism
    measured: dict = {}
    series = seed004.scaling((1,), 0.1, 1, "workers", measured)
    assert set(measured[1]) == {"legacy", "modern"} and series[1]["modern"] > 0
    assert all(us > 0 and busy > 0 for us, busy in measured[1].values())


def test_seed004_scaling_workers_cli(capsys):
    assert main(["lab", "seed004", "--duration", "0.1", "--rounds", "1", "-T", "1",
                 "--clients", "1", "--lockstat-duration", "0", "--scale", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "T workers, each client and acceptor" in out
    with pytest.raises(ValueError, match="shape must be one of"):
        seed004.run_crr("modern", 0.1, shape="triples")


def test_seed004_cli_json_and_bad_input(capsys):
    assert main(["lab", "seed004", "--duration", "0.15", "--rounds", "1", "-T", "2",
                 "--clients", "1", "--lockstat-duration", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"legacy", "modern", "ratio", "runs", "params"} <= set(result)
    assert result["global_lock"] == {} and result["lockstat"] == {}  # not collected
    assert result["runs"]["modern"]["leaks"] == {"sockets": 0, "ehash": 0, "ports": 0,
                                                 "listeners": 0}
    with pytest.raises(SystemExit, match="--acceptors must be positive"):
        main(["lab", "seed004", "-T", "0"])
    with pytest.raises(SystemExit, match="thread counts like 1,2,4"):
        main(["lab", "seed004", "--scale", "1,x"])


# ------------------------------------------------------------------------------ report
def test_percent_change_arithmetic():
    assert report.percent_change(47426.00, 139866.80) == pytest.approx(194.92, abs=0.01)
    assert report.format_change(62524.04, 84387.19) == "+35.0%"
    assert report.format_change(100, 80) == "-20.0%"
    assert report.format_change(0, 5) == "new"
    assert report.format_change(0, 0) == "+0.0%"


BEFORE = ["utime_start=0.210641", "utime_end=1.704755", "stime_start=11.842697",
          "stime_end=1997.341498", "nvcsw_start=18518", "num_transactions=615906",
          "latency_mean=0.642949344", "num_samples=207534", "time_end=1.0",
          "throughput=62524.04", "local_throughput=62524"]
AFTER = ["utime_start=0.185656", "utime_end=2.436602", "stime_start=11.470889",
         "stime_end=1980.679087", "nvcsw_start=17327", "num_transactions=821025",
         "latency_mean=0.475903462", "num_samples=206556", "time_end=2.0",
         "throughput=84387.19", "local_throughput=84387"]


def test_before_after_blocks_are_trimmed_and_annotated():
    lines = report.before_after(BEFORE, AFTER)
    assert lines[0] == "Before (legacy):"
    assert "nvcsw_start=18518" not in lines and "time_end=1.0" not in lines
    assert "local_throughput=62524" not in lines
    assert "throughput=62524.04" in lines  # the Before block is not annotated
    assert "throughput=84387.19  # +35.0%" in lines
    assert "num_transactions=821025  # +33.3%" in lines
    assert "latency_mean=0.475903462  # -26.0%" in lines
    assert "utime_end=2.436602" in lines  # kept, not noted


def test_compare_table_uses_cpu_used_not_process_totals():
    rows = report.compare_table(BEFORE, AFTER)
    assert rows[0].split() == ["legacy", "modern", "%change"]
    utime = next(r for r in rows if r.startswith("utime "))
    # 1.704755 - 0.210641 = 1.494114 -> 2.436602 - 0.185656 = 2.250946: +50.7%
    assert utime.split() == ["utime", "1.494114", "2.250946", "+50.7%"]
    throughput = next(r for r in rows if r.startswith("throughput"))
    assert throughput.split()[-1] == "+35.0%"


def test_neper_lines_from_flows_follow_the_neper_format():
    clock = neper.ThreadClock(0.01)
    flow = neper.FlowStats(0, 0, clock, keep_latency=True)
    start = 10_000_000_000
    for i in range(50):
        flow.event(start + i * 2_000_000, 1, 0.001 + i * 1e-5)
    flow.finish(start + 100_000_000)
    usage = neper.Usage(0.25, 0.5, 1000, 1, 0, 2, 3)
    lines = report.neper_lines("tcp_crr", [flow], usage, usage, (50.0, 99.9))
    block = report.parse_block(lines)
    assert block["num_transactions"] == "50"
    assert block["utime_start"] == "0.250000"
    assert block["latency_min"] == "0.001000000"
    assert "latency_p99.9" in block and "latency_p50" in block
    assert block["throughput"].count(".") == 1 and len(block["throughput"].split(".")[1]) == 2
    # the slope from the first snapshot (1 transaction, at start) to the forced last one
    # (50, at start + 100 ms), not 50 / test length
    assert block["throughput"] == "490.00"


def _stats(name, contentions, acquisitions, hold_total, wait_total=0):
    return ClassStats(name=name, display_name=name, kind="mutex", con_bounces=0,
                      contentions=contentions, wait_min=0, wait_max=wait_total,
                      wait_total=wait_total, acq_bounces=0, acquisitions=acquisitions,
                      hold_min=1, hold_max=hold_total, hold_total=hold_total,
                      contention_points=(), contending_points=())


def test_lock_stat_section_keeps_only_classes_that_changed():
    before = {"tcbinfo_lock": _stats("tcbinfo_lock", 12, 500, 900_000, 40_000),
              "rskq_lock": _stats("rskq_lock", 0, 1000, 100_000),
              "sk_lock.slock": _stats("sk_lock.slock", 3, 2000, 200_000, 5_000)}
    after = {"rskq_lock": _stats("rskq_lock", 0, 1010, 101_000),
             "sk_lock.slock": _stats("sk_lock.slock", 1, 2100, 210_000, 1_000)}
    assert report.changed_classes(before, after) == ["tcbinfo_lock", "sk_lock.slock"]
    lines = report.lock_stat_section(before, after)
    rows = [line for line in lines if line.startswith(" ") and line[40:41] == ":"]
    assert [r.split(":")[0].strip() for r in rows] == ["tcbinfo_lock", "sk_lock.slock",
                                                       "sk_lock.slock"]
    tcbinfo = rows[0].split()
    assert tcbinfo[1:3] == ["0", "12"]  # con-bounces, contentions
    assert tcbinfo[-1] == "1.80"  # holdtime-avg, us: 900000 ns / 500 = 1800 ns
    assert report.lock_stat_section(after, after) == ["lock_stat: no class changed"]


def test_a_published_figure_without_an_after_value_claims_no_change():
    figure = report.Published("lock share", 52.56, None, "% of cycles", "seed 003")
    assert figure.change() is None
    assert figure.line() == "lock share: 52.56 % of cycles before; no after figure [seed 003]"
    assert report.Published("x", 55, 66, "Gbit/s", "s").change() == pytest.approx(20.0)


def test_published_figures_are_cited_for_every_seed():
    for seed in ("seed000", "seed001", "seed002", "seed003", "seed004"):
        section = report.published_section(seed)
        assert section and all("[" in line for line in section[1:])


# ------------------------------------------------------------------------------ plots
def _is_png(path) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plots_write_pngs_without_a_display(tmp_path, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    bars = plot.before_after_bars(str(tmp_path / "bars.png"), "t", [
        plot.Metric("rate", 10.0, 12.0, "ops/s"), plot.Metric("hold", 5.0, 0.0, "us")])
    lines = plot.scaling(str(tmp_path / "scale.png"), "t",
                         {1: {"legacy": 1.0, "modern": 1.1}, 2: {"legacy": 1.2, "modern": 2.0}})
    changes = plot.speedups(str(tmp_path / "all.png"), "t",
                            [("seed000", 12.0, 35.0), ("seed001", None, 20.0),
                             ("seed003", 90.0, None)])
    for path in (bars, lines, changes):
        assert _is_png(path)
    with pytest.raises(ValueError):
        plot.before_after_bars(str(tmp_path / "none.png"), "t", [])
    with pytest.raises(ValueError):
        plot.scaling(str(tmp_path / "none.png"), "t", {})


def test_seed001_cli_plot_and_layouts(tmp_path, capsys):
    png = tmp_path / "s1.png"
    assert main(["lab", "seed001", "--duration", "0.1", "--rounds", "1", "--lockstat",
                 "--nstat", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "lock_stat version 0.4" in out
    assert " contended   total wait     max wait     avg wait" in out
    assert "#kernel" in out and "TcpPassiveOpens" in out
    assert _is_png(png)
    with pytest.raises(SystemExit, match="--chunk must be positive"):
        main(["lab", "seed001", "--chunk", "0"])
    with pytest.raises(SystemExit, match="--lockstat needs the lock statistics run"):
        main(["lab", "seed001", "--lockstat", "--lockstat-duration", "0"])
