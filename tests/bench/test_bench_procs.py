"""``--target procs`` (the server's Host in a child process) end to end, and ``rcunet
bench ipc``: neper's keys, exact transaction counts, the server process's CPU line,
nothing left running.  Bounded by counts or ``-l 1``; nothing here asserts a rate."""

from __future__ import annotations

import os
import re

import pytest

from rcunet.bench import ipc as ipc_bench
from rcunet.bench import neper
from rcunet.bench.cpus import cpu_list, parse_cpu_list, placement
from rcunet.cli import main

KEY_VALUE = re.compile(r"^(?P<key>.*)=(?P<value>.*)$", re.M)


def bench(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, str], str]:
    status = main(["bench", *argv])
    out, err = capsys.readouterr()
    return status, {m["key"]: m["value"] for m in KEY_VALUE.finditer(out)}, err


@pytest.mark.parametrize("workload", ["tcp_rr", "tcp_crr", "udp_rr"])
def test_rr_on_procs_runs_exactly_the_transactions_asked(
        workload: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, workload, "--target", "procs", "-l", "-150",
                                "-F", "2", "-T", "2", "--nolog")
    assert status == 0, err
    assert int(values["num_transactions"]) == 150
    assert values["num_threads"] == "2" and values["num_flows"] == "2"
    assert float(values["throughput"]) > 0
    if workload != "tcp_crr":  # the crr server counts nothing (neper PR #26)
        assert int(values["remote_throughput"]) > 0  # the child's count came back
    for side in ("server", "client"):
        assert re.search(rf"^{side} process: utime=\d+\.\d+ stime=\d+\.\d+", err, re.M), err


def test_stream_on_procs_reports_the_server_process_as_the_reader(
        capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, "tcp_stream", "--target", "procs", "-l", "1",
                                "--nolog")
    assert status == 0, err
    assert values["throughput_units"] == "Mbit/s"
    assert float(values["throughput"]) > 0
    assert int(values["local_throughput"]) > 0  # measured in the child, the reader


def test_ipc_link_bench_prints_both_transports(capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, "ipc", "--rounds", "1", "-n", "2000",
                                "--pings", "50")
    assert status == 0, err
    pings = [f"one_way_us_{name}" for name in ipc_bench.placements()]
    for transport in ("seqpacket", "ring"):
        for key in ("us_per_frame", "frames_per_s", "cpu_us_per_frame",
                    "frames_per_wakeup", "dropped", *pings):
            assert float(values[f"{transport}.round1.{key}"]) >= 0


def test_ping_pong_runs_where_it_is_placed() -> None:
    """Each placement's ping-pong runs (and ends) with both processes pinned, and the
    caller's own CPUs are given back afterwards."""
    before = os.sched_getaffinity(0)
    where = ipc_bench.placements()
    assert where["one_cpu"][0] == where["one_cpu"][1]
    if len(before) > 1:
        assert where["two_cpus"][0] != where["two_cpus"][1]
    for cpus in where.values():
        assert ipc_bench.run_ping("seqpacket", 20, 64, cpus) > 0
        assert os.sched_getaffinity(0) == before


def test_the_crr_floor_is_four_crossings() -> None:
    line = ipc_bench.crr_floor_line("ring", 50.0)
    assert "4 crossings in turn x 50.0 us = 200 us" in line
    assert "at most 5,000 conn/s" in line


def test_spread_gives_each_process_half_of_the_allowed_cpus() -> None:
    assert placement("spread", [0, 1]) == ((0,), (1,))
    assert placement("spread", [0, 1, 2, 3, 5]) == ((0, 1), (2, 3, 5))
    assert placement("spread", [3]) == (None, None)  # one CPU: they share it
    assert placement("none", [0, 1]) == (None, None)
    assert placement("0-1:2,4", [0, 1, 2, 3, 4]) == ((0, 1), (2, 4))


@pytest.mark.parametrize("spec", ["0", "0:1:2", "a:1", "1-0:2", "0:", "0:7"])
def test_a_bad_placement_is_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        placement(spec, [0, 1, 2])


def test_cpu_lists_read_and_write_as_linux_prints_them() -> None:
    assert parse_cpu_list("0-2,5") == (0, 1, 2, 5)
    assert cpu_list((5, 0, 1, 2)) == "0-2,5"
    assert neper.cpuset_lines([0, 1, 3]) == ["allowed_core_num=3", "allowed_cores=0-1,3"]


def test_the_run_says_where_each_process_ran(capsys: pytest.CaptureFixture[str]) -> None:
    allowed = neper.allowed_cpus()
    spec = f"{allowed[0]}:{allowed[-1]}"
    status, values, err = bench(capsys, "tcp_rr", "--target", "procs", "--procs-cpus", spec,
                                "-l", "-20", "--nolog")
    assert status == 0, err
    assert int(values["num_transactions"]) == 20
    assert (f"procs: client process on CPUs {allowed[0]}, server process on CPUs "
            f"{allowed[-1]}") in err
