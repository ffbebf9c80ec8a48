"""Faults on a timeline: partition and heal, crash and restart, a link's impairment
changed, a skewed clock; the scenario file and its one-line errors."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from sim_support import two_hosts

from rcunet.link.impair import ImpairmentConfig
from rcunet.sim.faults import FaultError


def _pinger(results: list[tuple[float, bool]], rounds: int, peer: str = "10.0.0.2") -> None:
    """One UDP question a second to ``peer``; whether its answer came within 0.5 s (a
    late answer to an earlier question does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for number in range(rounds):
            sent = time.monotonic()
            question = f"ping {number}".encode()
            sock.sendto(question, (peer, 9))
            answered = False
            while not answered and (left := sent + 0.5 - time.monotonic()) > 0:
                sock.settimeout(left)
                try:
                    answered = sock.recvfrom(100)[0] == question
                except TimeoutError:
                    break
            results.append((round(sent - 1), answered))
            time.sleep(1 - (time.monotonic() - sent))


def _answerer() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("0.0.0.0", 9))
        while True:
            data, peer = sock.recvfrom(100)
            sock.sendto(data, peer)


def test_partition_and_heal_cut_and_restore_the_link() -> None:
    sim, a, b = two_hosts()
    results: list[tuple[float, bool]] = []
    sim.spawn(b, _answerer, daemon=True)
    sim.spawn(a, _pinger, results, 10)
    sim.partition({a}, at=2.5)
    sim.heal(at=5.5)
    assert sim.run()
    sim.close()
    assert [ok for _t, ok in results] == [True] * 3 + [False] * 3 + [True] * 4


def test_a_crashed_host_stops_and_a_restart_runs_its_program_again() -> None:
    sim, a, b = two_hosts()
    results: list[tuple[float, bool]] = []
    starts: list[float] = []

    def answerer() -> None:
        starts.append(time.monotonic() - 1)
        _answerer()

    sim.spawn(b, answerer, daemon=True)
    sim.spawn(a, _pinger, results, 10)
    sim.crash(b, at=2.5)
    sim.restart(b, at=5.2)
    assert sim.run()
    sim.close()
    assert starts == [0.0, 5.2]
    assert [ok for _t, ok in results] == [True] * 3 + [False] * 3 + [True] * 4


def test_a_crash_leaves_the_peer_without_fin_or_rst() -> None:
    sim, a, b = two_hosts()
    outcome: list[str] = []

    def server() -> None:
        with socket.create_server(("0.0.0.0", 7000)) as listener:
            conn, _ = listener.accept()
            with conn:
                time.sleep(1000)

    def client() -> None:
        with socket.create_connection(("10.0.0.2", 7000)) as conn:
            conn.settimeout(30)
            try:
                outcome.append(repr(conn.recv(10)))
            except TimeoutError:
                outcome.append("silence")

    sim.spawn(b, server, daemon=True)
    sim.spawn(a, client)
    sim.crash(b, at=1)
    assert sim.run()
    sim.close()
    assert outcome == ["silence"]  # no FIN (b''), no RST (ConnectionResetError)


def test_impairment_changes_at_a_time() -> None:
    sim, a, b = two_hosts()
    results: list[tuple[float, bool]] = []
    sim.spawn(b, _answerer, daemon=True)
    sim.spawn(a, _pinger, results, 8)
    link = sim.network.links[0]
    sim.impair(link, ImpairmentConfig(delay=300_000_000), at=1.5)  # 0.6 s round trip
    sim.impair(link, None, at=4.5)
    assert sim.run()
    sim.close()
    assert [ok for _t, ok in results] == [True, True, False, False, False, True, True, True]


def test_a_skewed_host_reads_its_own_wall_clock() -> None:
    sim, a, b = two_hosts()
    seen: dict[str, float] = {}

    def read(name: str) -> None:
        time.sleep(2)
        seen[name] = time.time()
        seen[name + "-mono"] = time.monotonic()

    sim.skew(b, 2.5, at=1)
    sim.spawn(a, read, "a")
    sim.spawn(b, read, "b")
    assert sim.run()
    sim.close()
    assert seen["b"] - seen["a"] == 2.5
    assert seen["b-mono"] == seen["a-mono"]


def _scenario(tmp_path: Any, text: str) -> str:
    path = tmp_path / "faults.txt"
    path.write_text(text)
    return str(path)


def test_a_scenario_file_schedules_its_faults(tmp_path: Any) -> None:
    sim, a, b = two_hosts()
    results: list[tuple[float, bool]] = []
    sim.spawn(b, _answerer, daemon=True)
    sim.spawn(a, _pinger, results, 10)
    faults = sim.load_scenario(_scenario(tmp_path, "# a cut\n2.5s partition a | b\n"
                                         "5500ms heal\n9 skew a -1.5\n"))
    assert [f.text for f in faults] == ["partition a", "heal", "skew a -1.5"]
    assert sim.run()
    sim.close()
    assert [ok for _t, ok in results] == [True] * 3 + [False] * 3 + [True] * 4


def _star(hosts: int) -> tuple[Any, list[Any]]:
    from rcunet.cmd.run_common import build_network
    from rcunet.sim import Simulation

    sim = Simulation(1)
    build_network(f"star:{hosts}", None, network=sim.network)
    return sim, list(sim.network.hosts)


def test_a_partition_splits_a_switch_and_heal_joins_it(tmp_path: Any) -> None:
    """h1 and h2 on one side, h3 on the other, all on one switch: h1 keeps reaching
    h2 and loses h3 until the heal."""
    sim, (h1, h2, h3) = _star(3)
    to_h2: list[tuple[float, bool]] = []
    to_h3: list[tuple[float, bool]] = []
    sim.spawn(h2, _answerer, daemon=True)
    sim.spawn(h3, _answerer, daemon=True)
    sim.spawn(h1, _pinger, to_h2, 10, "10.0.0.2")
    sim.spawn(h1, _pinger, to_h3, 10, "10.0.0.3")
    sim.load_scenario(_scenario(tmp_path, "2.5s partition h1 h2 | h3\n5.5s heal\n"))
    assert sim.run()
    sim.close()
    assert [ok for _t, ok in to_h2] == [True] * 10
    assert [ok for _t, ok in to_h3] == [True] * 3 + [False] * 3 + [True] * 4


def test_partitions_on_a_switch_compose_until_the_heal() -> None:
    """{h1} cut at 2.5 s, then {h1, h2} at 4.5 s: h2 and h3 talk until the second
    cut; h1 and h2 stay apart (the first cut) until the heal at 6.5 s."""
    sim, (h1, h2, h3) = _star(3)
    h2_to_h3: list[tuple[float, bool]] = []
    h2_to_h1: list[tuple[float, bool]] = []
    sim.spawn(h1, _answerer, daemon=True)
    sim.spawn(h3, _answerer, daemon=True)
    sim.spawn(h2, _pinger, h2_to_h3, 9, "10.0.0.3")
    sim.spawn(h2, _pinger, h2_to_h1, 9, "10.0.0.1")
    sim.partition([h1], at=2.5)
    sim.partition([h1, h2], at=4.5)
    sim.heal(at=6.5)
    assert sim.run()
    sim.close()
    assert [ok for _t, ok in h2_to_h3] == [True] * 5 + [False] * 2 + [True] * 2
    assert [ok for _t, ok in h2_to_h1] == [True] * 3 + [False] * 4 + [True] * 2


@pytest.mark.parametrize(("text", "message"), [
    ("3s partition a | c\n", "faults.txt:1: no host 'c' (the network has a, b)"),
    ("\n1s heal\nsoon crash a\n", "faults.txt:3: 'soon' is not a time"),
    ("1s explode a\n", "faults.txt:1: unknown or malformed action 'explode a'"),
    ("1s impair a-b loss=lots\n", "faults.txt:1: --impair 'loss=lots': bad value"),
    ("1s impair a-a loss=1%\n", "faults.txt:1: no point-to-point link between a and a"),
    ("1s skew b fast\n", "faults.txt:1: skew: 'fast' is not a number of seconds"),
])
def test_a_bad_scenario_line_is_one_line_naming_it(tmp_path: Any, text: str,
                                                    message: str) -> None:
    sim, _a, _b = two_hosts()
    with pytest.raises(FaultError) as caught:
        sim.load_scenario(_scenario(tmp_path, text))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert not sim._faults  # nothing scheduled
    sim.close()


def test_a_fault_in_the_past_is_refused(tmp_path: Any) -> None:
    sim, a, _b = two_hosts()
    sim.spawn(a, time.sleep, 10)
    assert sim.run()
    with pytest.raises(FaultError, match="time 5s is in the past"):
        sim.load_scenario(_scenario(tmp_path, "5s crash a\n"))
    sim.close()
