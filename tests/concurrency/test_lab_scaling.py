"""The lab's thread scaling (``-T``, ``--scale``, ``--plot``) and interpreter line: the
shape and the accounting of short runs, never their timings."""

from __future__ import annotations

import json
import sys

import pytest

from rcunet.cli import main
from rcunet.lab import common, seed000, seed003


def test_thread_counts_parse_and_reject_bad_input():
    assert common.thread_counts("1,2,4") == (1, 2, 4)
    assert common.thread_counts(" 2 , 1 ") == (2, 1)
    for bad in ("", "a", "1,x", "0", "1,-2", "1,1"):
        with pytest.raises(SystemExit):
            common.thread_counts(bad)


def test_scale_interleaves_every_point_and_keeps_the_best():
    calls = []
    rates = iter([1.0, 2.0, 3.0, 4.0, 5.0, 0.5, 0.5, 9.0])

    def measure(mode, threads):
        calls.append((threads, mode))
        return next(rates)

    series = common.scale(measure, (1, 2), rounds=2)
    # one visit per (threads, mode) in each round, rounds one after the other
    assert calls == [(1, "legacy"), (1, "modern"), (2, "legacy"), (2, "modern")] * 2
    assert series == {1: {"legacy": 5.0, "modern": 2.0}, 2: {"legacy": 3.0, "modern": 9.0}}


def test_scaling_report_names_interpreter_and_gains():
    text = common.scaling_report("demo", {1: {"legacy": 100.0, "modern": 200.0},
                                          2: {"legacy": 120.0, "modern": 380.0}},
                                 "ops/s", {2: 1.9})
    assert common.interpreter() in text.splitlines()[0]
    rows = text.splitlines()
    two = next(line for line in rows if line.strip().startswith("2 "))
    assert "1.20x" in two and "1.90x" in two and "3.17x" in two
    assert "1.90x faster on 2 threads" in text


def test_interpreter_reports_the_gil_mode():
    text = common.interpreter()
    assert text.startswith("CPython " + ".".join(map(str, sys.version_info[:3])))
    gil_on = getattr(sys, "_is_gil_enabled", lambda: True)()
    assert ("GIL off" in text) == (not gil_on)


def test_seed000_counts_at_two_threads():
    result = seed000.run_lab(threads=2, duration=0.1, rounds=2)
    assert result["threads"] == 2 and result["legacy"] > 0 and result["modern"] > 0
    assert result["interpreter"] == common.interpreter()
    # modern locks ~3 times per connect; legacy locks every candidate it visits
    assert result["locks_per_connect"]["modern"] < 4
    assert result["locks_per_connect"]["legacy"] > 2 * result["candidates_per_connect"]["legacy"]


def test_seed000_scale_from_the_command_line(capsys):
    assert main(["lab", "seed000", "--scale", "1,2", "--duration", "0.1", "--rounds", "1",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["series"]) == {"1", "2"}
    assert all(rate > 0 for row in result["series"].values() for rate in row.values())
    assert set(result["headroom"]) == {"2"}


def test_seed003_fanin_accounts_for_every_datagram():
    result = seed003.run_fanin((1, 2), duration=0.1, rounds=1, n_sockets=20)
    assert set(result["series"]) == {1, 2}
    assert all(rate > 0 for row in result["series"].values() for rate in row.values())
    assert all(drops == 0 for drops in result["rcvbuf_drops"].values())


def test_seed003_fanin_delivers_each_group_to_its_socket_from_every_sender():
    scenario = seed003.FanIn("modern", senders=2, n_sockets=5)
    try:
        for tx in scenario.senders:
            for group in scenario.groups:
                tx.sendto(b"x", (group, seed003.GROUPS_PORT))
        got = [seed003._drain(sock) for sock in scenario.receivers]
    finally:
        scenario.close()
    assert got == [2] * 5  # one datagram per sender, to the group's one socket


def test_plot_needs_scale_and_bad_counts_are_refused():
    with pytest.raises(SystemExit):
        main(["lab", "seed000", "--plot", "x.png"])
    with pytest.raises(SystemExit):
        main(["lab", "seed003", "--scale", "1,zero"])
    with pytest.raises(SystemExit):
        main(["lab", "seed002", "-T", "0"])


def test_plot_draws_rates_against_threads(tmp_path, capsys):
    pytest.importorskip("matplotlib")  # the test extra has it; the 3.13t venv does not
    path = tmp_path / "seed002.png"
    assert main(["lab", "seed002", "--scale", "1,2", "--duration", "0.05", "--rounds", "1",
                 "--plot", str(path)]) == 0
    assert path.read_bytes().startswith(b"\x89PNG")
    assert "sends/s" in capsys.readouterr().out
