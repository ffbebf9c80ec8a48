"""neper's flags, option dump and statistics (rcunet.bench.neper): no sockets, no timing."""

from __future__ import annotations

import argparse
import math
import re

import pytest

from rcunet import cli
from rcunet.bench import neper
from rcunet.bench.neper import FlowStats, Snapshot, ThreadClock, Usage
from rcunet.cli import build_parser, main

# LNST's neper parser: re.compile(r"^(?P<key>.*)=(?P<value>.*)$", re.M)
KEY_VALUE = re.compile(r"^(?P<key>[^=]*)=(?P<value>.*)$")

# The option dump of neper 1.1.0's tcp_rr client (bench-conventions.md §1.4), in order.
NEPER_TCP_RR_DUMP_KEYS = """
VERSION noburst reuseaddr async_connect delay mark logrtt_entries_per_flow log_rtt
buffer_size test_length percentiles response_size request_size congestion_control
no_delay tcp_tx_delay tcp_fastopen num_ports wait_start iostat_ms time_wait all_samples
port control_port host local_hosts max_pacing_rate interval freebind nonblocking nolog
logtostderr pin_cpu dry_run debug client ipv6 ipv4 stime_use_proc source_port
suicide_length listen_backlog num_clients num_threads num_flows maxevents magic
total_run_time
""".split()


def parse(*argv: str) -> argparse.Namespace:
    full = ["bench", *argv]
    cli.CURRENT_ARGV[:] = full  # what main() sets: the bench dispatcher reads it
    return build_parser(full).parse_args(full)


def dump(*argv: str) -> dict[str, str]:
    lines = neper.option_dump(parse(*argv))
    return dict(KEY_VALUE.match(line).groups() for line in lines)  # type: ignore[union-attr]


def test_tcp_rr_dump_has_neper_keys_in_neper_order() -> None:
    lines = neper.option_dump(parse("tcp_rr", "-l", "3", "-p", "50,90,99,99.9",
                                    "--nolog", "-c", "-H", "127.0.0.1",
                                    "--all-samples=rr_samples.csv", "--target", "kernel"))
    assert [KEY_VALUE.match(line).group(1) for line in lines] == NEPER_TCP_RR_DUMP_KEYS  # type: ignore[union-attr]
    values = dict(KEY_VALUE.match(line).groups() for line in lines)  # type: ignore[union-attr]
    assert values["VERSION"] == "1.1.0"
    assert values["percentiles"] == "50,90,99,99.9,"
    assert values["interval"] == "1.000000"
    assert values["host"] == "127.0.0.1" and values["local_hosts"] == ""
    assert values["all_samples"] == "rr_samples.csv"
    assert values["nolog"] == "1" and values["client"] == "1" and values["ipv6"] == "0"
    assert values["magic"] == "42" and values["source_port"] == "-1"
    assert values["total_run_time"] == "3"


@pytest.mark.parametrize("workload", neper.WORKLOADS)
def test_every_workload_dumps_each_key_once_ending_with_magic(workload: str) -> None:
    lines = neper.option_dump(parse(workload))
    keys = [KEY_VALUE.match(line).group(1) for line in lines]  # type: ignore[union-attr]
    assert len(keys) == len(set(keys))
    assert keys[0] == "VERSION" and keys[-2:] == ["magic", "total_run_time"]
    if workload in neper.STREAM_WORKLOADS:
        assert "throughput_opt" in keys and "percentiles" not in keys
    else:
        assert "request_size" in keys and "throughput_opt" not in keys
    assert ("num_ports" in keys) == workload.startswith("tcp")


def test_buffer_size_default_is_the_workloads_own() -> None:
    assert dump("tcp_rr")["buffer_size"] == "65536"
    assert dump("tcp_stream")["buffer_size"] == "16384"
    assert dump("udp_stream")["buffer_size"] == "1400"
    assert dump("tcp_crr")["async_connect"] == "1"


def test_negative_test_length_is_a_transaction_count() -> None:
    values = dump("udp_rr", "-l", "-500")
    assert values["test_length"] == "-500"
    assert values["total_transactions"] == "500"
    assert "total_run_time" not in values


def test_long_flags_and_optional_all_samples() -> None:
    opts = parse("tcp_rr", "--num-flows", "4", "--num-threads", "2", "--test-length=-7",
                 "--request-size", "100", "--response-size=200", "-A", "-6")
    assert (opts.num_flows, opts.num_threads, opts.test_length) == (4, 2, -7)
    assert (opts.request_size, opts.response_size, opts.ipv6) == (100, 200, True)
    assert opts.all_samples == "samples.csv"  # bare -A, as neper
    assert parse("udp_rr", "-Afoo.csv").all_samples == "foo.csv"


def test_percentiles_are_sorted_deduplicated_and_accept_old_spellings() -> None:
    assert neper.parse_percentiles("99,50,999,9999,50") == (50.0, 99.0, 99.9, 99.99)
    with pytest.raises(argparse.ArgumentTypeError):
        neper.parse_percentiles("50,101")
    with pytest.raises(argparse.ArgumentTypeError):
        neper.parse_percentiles("fifty")


@pytest.mark.parametrize(("argv", "message"), [
    (["tcp_rr", "-F", "1", "-T", "2"], "less flows than threads"),
    (["tcp_rr", "-l", "0"], "Test length"),
    (["tcp_stream", "-l", "-5"], "Test length"),
    (["udp_rr", "-Q", "0"], "sizes must be positive"),
    (["udp_rr", "-R", "70000"], "UDP datagram carries at most 65507"),
    (["udp_stream", "-B", "65530", "-6"], "at most 65527"),
    (["tcp_rr", "-4", "-6"], "mutually exclusive"),
    (["tcp_rr", "-I", "0"], "Interval must be positive"),
    (["tcp_rr", "-c"], "-H ADDR"),
    (["tcp_rr", "-c", "-H", "10.0.0.2"], "--target kernel"),
    (["udp_rr", "--server", "-c", "-H", "::1", "--target", "kernel"], "mutually exclusive"),
    (["tcp_crr", "--num-ports", "0"], "data ports"),
    (["tcp_rr", "-P", "http"], "port number"),
    (["tcp_rr", "-B", "0"], "Buffer size"),
    (["udp_rr", "-H", "10.0.0.2"], "in-process run"),
    (["tcp_crr", "--tuning", "legacy", "--target", "kernel"], "needs --target mem"),
    (["tcp_rr", "--procs-cpus", "none"], "--procs-cpus places --target procs"),
    (["tcp_rr", "--target", "procs", "--procs-cpus", "0:4096"], "are not allowed"),
    (["udp_rr", "-s", "-1"], "Suicide length"),
])
def test_impossible_flags_give_one_line_and_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["bench", *argv, "--nolog"])
    out, err = capsys.readouterr()
    assert status == 2
    assert out == ""  # nothing measured, nothing printed
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [
    ["tcp_rrr"], ["tcp_stream", "-p", "50"], ["tcp_rr", "-p", "50,200"], ["udp_rr", "-l"],
])
def test_unknown_workloads_and_bad_values_are_usage_errors(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *argv])
    assert exit_info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_durations_take_neper_suffixes() -> None:
    assert neper.parse_duration("250") == 250
    assert neper.parse_duration("20us") == 20_000
    assert neper.parse_duration("3ms") == 3_000_000
    assert neper.parse_duration("1s") == 1_000_000_000
    with pytest.raises(argparse.ArgumentTypeError):
        neper.parse_duration("1min")
    assert parse("tcp_stream", "-D", "5us").delay == 5000


def test_dry_run_prints_the_options_and_exits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "tcp_crr", "-n", "-l", "3", "--nolog"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "VERSION=1.1.0" and lines[-1] == "total_run_time=3"


def test_version_flag_prints_neper_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "udp_rr", "-v"])
    assert capsys.readouterr().out.strip() == "1.1.0"


def test_short_runs_take_snapshots_every_fifth_of_a_second() -> None:
    assert neper.effective_interval(parse("tcp_rr", "-l", "3")) == 0.2
    assert neper.effective_interval(parse("tcp_rr", "-l", "10")) == 1.0
    assert neper.effective_interval(parse("tcp_rr", "-l", "-100")) == 1.0


# ------------------------------------------------------------------------------ statistics
USAGE = Usage(0.5, 0.25, 1000, 1, 0, 2, 3)
S = 1_000_000_000


def flow_with(points: list[tuple[int, int]], thread: int = 0, index: int = 0,
              latencies: tuple[float, ...] = ()) -> FlowStats:
    stats = FlowStats(thread, index, ThreadClock(1.0), keep_latency=True)
    stats.clock.start = points[0][0]
    stats.snapshots = [Snapshot(now, things, USAGE, latencies) for now, things in points]
    stats.things = points[-1][1]
    stats.latencies = list(latencies) * len(points)
    return stats


def test_throughput_is_the_slope_of_the_merged_series_not_count_over_length() -> None:
    # two flows, one starting late: totals 10@1s 110@1.5s 210@2s 410@3s
    a = flow_with([(1 * S, 10), (2 * S, 110), (3 * S, 210)])
    b = flow_with([(int(1.5 * S), 100), (3 * S, 200)], index=1)
    summary = neper.summarize([a, b], rr=True, want_csv=False)
    assert summary.num_samples == 5
    assert summary.time_start == 1 * S and summary.time_end == 3 * S
    assert summary.throughput == pytest.approx((410 - 10) / 2.0)
    assert summary.transactions == 410
    assert 0.9 < summary.correlation <= 1.0


def test_a_steady_rate_has_correlation_one() -> None:
    flow = flow_with([(k * S // 5, 100 * k + 1) for k in range(1, 16)])
    summary = neper.summarize([flow], rr=False, want_csv=False)
    assert summary.correlation == pytest.approx(1.0)
    assert summary.throughput == pytest.approx(500.0)


def test_snapshots_follow_neper_thresholds_from_the_threads_first_event() -> None:
    stats = FlowStats(0, 0, ThreadClock(0.2), keep_latency=True)
    for ms in (0, 50, 199, 200, 390, 400, 401, 1000):
        stats.event(ms * 1_000_000, 1, 0.001)
    # first event always; then when elapsed >= 0.2 * (snapshots + 1)
    assert [s.now // 1_000_000 for s in stats.snapshots] == [0, 200, 400, 1000]
    assert [s.things for s in stats.snapshots] == [1, 4, 6, 8]
    assert sum(len(s.latencies) for s in stats.snapshots) == 8
    stats.finish(2000 * 1_000_000)
    assert len(stats.snapshots) == 4  # nothing new since the last one: no extra snapshot


def test_csv_rows_carry_the_merged_rate_and_interval_latencies() -> None:
    a = flow_with([(1 * S, 1), (2 * S, 101)], latencies=(0.001, 0.003))
    summary = neper.summarize([a], rr=True, want_csv=True, percentiles=(50.0, 99.9))
    header = neper.csv_header(True, (50.0, 99.9))
    assert header.startswith("tid,flow_id,time,transactions,transactions/s,utime,stime")
    assert header.endswith("latency_stddev,latency_p50,latency_p99.9")
    assert summary.csv_rows[0].startswith("0,0,1.000000000,1,0.00,0.500000,0.250000,1000,")
    assert summary.csv_rows[1].startswith("0,0,2.000000000,101,100.00,")
    cells = summary.csv_rows[1].split(",")
    assert len(cells) == len(header.split(","))
    assert cells[12:16] == ["0.001000", "0.002000", "0.003000", "0.001000"]
    assert neper.csv_header(False, ()).split(",")[3:5] == ["bytes_read", "bytes_read/s"]


def test_latency_statistics_and_percentiles() -> None:
    values = sorted(float(v) for v in range(1, 101))
    assert neper.percentile(values, 50) == 50.0
    assert neper.percentile(values, 99.9) == 100.0
    assert neper.percentile([], 50) == 0.0
    low, high, mean, stddev = neper.latency_stats([1.0, 3.0])
    assert (low, high, mean, stddev) == (1.0, 3.0, 2.0, 1.0)
    assert math.isclose(neper.latency_stats([2.0])[3], 0.0)


def test_result_block_formats(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = parse("tcp_rr", "-p", "50,99.9")
    flow = flow_with([(1 * S, 1), (2 * S, 1001)], latencies=(0.000054296,))
    summary = neper.summarize([flow], rr=True, want_csv=False)
    side = neper.SideResult([], USAGE, Usage(1.033868, 1.178488, 2260, 127, 0, 53502, 1675),
                            measures=True, remote_throughput=999)
    values = dict(KEY_VALUE.match(line).groups()  # type: ignore[union-attr]
                  for line in neper.result_lines(opts, side, summary))
    assert values["time_start"] == "1.000000000"
    assert values["utime_end"] == "1.033868" and values["stime_start"] == "0.250000"
    assert values["nvcsw_end"] == "53502"
    assert values["latency_mean"] == "0.000054296"
    assert values["latency_p99.9"] == "0.000054296"
    assert values["throughput"] == "1000.00" and values["local_throughput"] == "1000"
    assert values["correlation_coefficient"] == "1.00"
    assert values["remote_throughput"] == "999"
    stream = parse("udp_stream")
    values = dict(KEY_VALUE.match(line).groups()  # type: ignore[union-attr]
                  for line in neper.result_lines(stream, side, summary))
    assert values["throughput"] == "0.01" and values["throughput_units"] == "Mbit/s"
    assert values["local_throughput"] == "8000"  # bits/s
