"""The control socket of a running Host and the tools on it (``rcunet ss``, ``nstat``,
``lockstat``), against in-process Hosts (the socket is a plain UNIX socket: no root, no
TAP needed here; tests/interop/test_up.py covers ``rcunet up`` creating it)."""

from __future__ import annotations

import json
import re
import socket
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from rcunet.cli import main
from rcunet.control.memory import MemoryTracer
from rcunet.control.server import ControlError, ControlServer
from rcunet.host.network import Network
from rcunet.services import start_services


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[object, str, socket.socket]]:
    """Host b serving echo on TCP and UDP with one connection from a open, and b's
    control socket."""
    network = Network(threaded=True)
    client, server = network.host("a"), network.host("b")
    network.link(client, server, ["10.0.0.1/24", "fd00::1/64"], ["10.0.0.2/24", "fd00::2/64"])
    network.start()
    path = str(tmp_path / "b.sock")
    try:
        with start_services(server, "echo:7,udp-echo:7"):
            control = ControlServer(server, path).start()
            conn = client.socket(socket.AF_INET, socket.SOCK_STREAM)
            conn.settimeout(10)
            conn.connect(("10.0.0.2", 7))
            conn.sendall(b"hi")
            assert conn.recv(2) == b"hi"
            try:
                yield server, path, conn
            finally:
                conn.close()
                control.stop()
    finally:
        network.close()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_ss_lists_connections_in_iproute2_layout(running, capsys) -> None:
    _server, path, conn = running
    status, out, _ = run(capsys, "ss", "-t", "--control", path)
    assert status == 0
    lines = out.splitlines()
    assert re.match(r"State +Recv-Q Send-Q +Local Address:Port +Peer Address:Port +Process$",
                    lines[0])
    port = conn.getsockname()[1]
    assert re.match(rf"ESTAB +0 +\d+ +10\.0\.0\.2:7 +10\.0\.0\.1:{port} *$", lines[1])
    assert len(lines) == 2  # the default shows connected sockets only


def test_ss_listening_all_protocols_has_a_netid_column(running, capsys) -> None:
    _server, path, _conn = running
    status, out, _ = run(capsys, "ss", "-l", "--control", path)
    assert status == 0
    rows = [line.split() for line in out.splitlines()[1:]]
    assert out.splitlines()[0].startswith("Netid State")
    assert ["tcp", "LISTEN", "0", "128", "0.0.0.0:7", "0.0.0.0:*"] in rows
    assert ["tcp", "LISTEN", "0", "128", "[::]:7", "[::]:*"] in rows
    assert ["udp", "UNCONN", "0", "0", "0.0.0.0:7", "0.0.0.0:*"] in rows
    assert all(row[1] in ("LISTEN", "UNCONN") for row in rows)


def test_ss_info_prints_tcp_info_under_each_connection(running, capsys) -> None:
    _server, path, _conn = running
    status, out, _ = run(capsys, "ss", "-ti", "--control", path)
    assert status == 0
    info = out.splitlines()[2]
    assert info.startswith("\t cubic rto:")
    assert re.search(r" rtt:[\d.]+/[\d.]+ mss:\d+ cwnd:\d+", info)
    # TCP_INFO's counters, as ss prints them after ssthresh (misc/ss.c tcp_stats_print)
    assert re.search(r" segs_out:\d+ segs_in:\d+ .*minrtt:[\d.]+ snd_wnd:\d+ rcv_wnd:\d+$",
                     info), info


def test_ss_summary(running, capsys) -> None:
    _server, path, _conn = running
    status, out, _ = run(capsys, "ss", "-s", "--control", path)
    assert status == 0
    assert "TCP:   3 (estab 1, closed 0, orphaned 0, timewait 0)" in out
    assert "UDP\t  2         1         1        " in out.splitlines()


def test_nstat_absolute_then_deltas(running, capsys, tmp_path: Path, monkeypatch) -> None:
    server, path, conn = running
    monkeypatch.setattr("rcunet.control.nstat.history_path",
                        lambda control: str(tmp_path / "history"))
    status, out, _ = run(capsys, "nstat", "-a", "--control", path)
    assert status == 0 and out.splitlines()[0] == "#kernel"
    opens = server.counters.get("TcpPassiveOpens")  # type: ignore[attr-defined]
    assert f"{'TcpPassiveOpens':<32}{opens:<16}{0.0:6.1f}" in out.splitlines()
    conn.sendall(b"again")
    assert conn.recv(5) == b"again"
    status, out, _ = run(capsys, "nstat", "--control", path)
    names = [line.split()[0] for line in out.splitlines()[1:]]
    assert "TcpPassiveOpens" not in names  # unchanged since the history: not shown
    assert "TcpInSegs" in names
    status, out, _ = run(capsys, "nstat", "-z", "--control", path)
    assert re.search(r"^TcpPassiveOpens +0 +0\.0$", out, re.M)  # -z: zero deltas too


def test_lockstat_says_statistics_are_off_in_one_line(running, capsys) -> None:
    _server, path, _conn = running
    status, out, err = run(capsys, "lockstat", "--control", path)
    assert status == 1 and out == ""
    assert err == ("rcunet lockstat: lock statistics are off (start rcunet up with "
                   "--lockstat)\n")


@pytest.mark.parametrize("request_bytes", [b"hello\n", b"\xff\xfe\n", b"x" * 5000,
                                           b"ss --all\n"])
def test_garbage_is_refused_with_one_line_and_the_next_client_is_served(
        running, capsys, request_bytes: bytes) -> None:
    _server, path, _conn = running
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.settimeout(10)
        raw.connect(path)
        try:
            raw.sendall(request_bytes)
            raw.shutdown(socket.SHUT_WR)
        except BrokenPipeError:
            pass  # refused before it read it all
        answer = b""
        while chunk := raw.recv(4096):
            answer += chunk
    assert answer.startswith(b"error: ") and answer.count(b"\n") == 1
    status, out, _ = run(capsys, "ss", "--control", path)
    assert status == 0 and "ESTAB" in out


def test_a_live_control_socket_is_not_taken_over_and_a_stale_one_is(running,
                                                                     tmp_path: Path) -> None:
    server, path, _conn = running
    with pytest.raises(ControlError, match="in use by another rcunet up"):
        ControlServer(server, path).start()
    stale = str(tmp_path / "stale.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(stale)
    dead.close()  # the file stays, nobody listens
    ControlServer(server, stale).start().stop()
    assert not Path(stale).exists()


def test_no_daemon_is_one_line(capsys, tmp_path: Path) -> None:
    status, _out, err = run(capsys, "ss", "--control", str(tmp_path / "none.sock"))
    assert status == 1 and err.count("\n") == 1 and "no rcunet up listens there" in err


def _ask(path: str, line: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.settimeout(10)
        raw.connect(path)
        raw.sendall(line)
        raw.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    return answer


def test_tracemalloc_is_refused_in_one_line_when_tracing_is_off(running) -> None:
    _server, path, _conn = running
    answer = _ask(path, b"tracemalloc\n")
    assert answer == (b"error: allocation tracing is off (start rcunet up with "
                      b"RCUNET_TRACEMALLOC=FRAMES)\n")


def test_tracemalloc_diffs_allocations_between_requests(tmp_path: Path) -> None:
    network = Network(threaded=True)
    client, server = network.host("a"), network.host("b")
    network.link(client, server, ["10.0.0.1/24"], ["10.0.0.2/24"])
    network.start()
    path = str(tmp_path / "t.sock")
    tracer = MemoryTracer()
    tracer.start(1)
    control = ControlServer(server, path, tracer).start()
    try:
        kept = [bytearray(4096) for _ in range(64)]  # 256 KB that stay between requests
        first = json.loads(_ask(path, b"tracemalloc\n"))
        here = f"{Path(__file__).name}:"
        grown = [row for row in first["top"] if here in row["site"]]
        assert grown and grown[0]["size_diff"] >= 64 * 4096 and grown[0]["count_diff"] >= 64
        second = json.loads(_ask(path, b"tracemalloc\n"))  # nothing new: not among the top
        assert not [row for row in second["top"]
                    if here in row["site"] and row["size_diff"] >= 64 * 4096]
        assert first["traced"] > 0 and first["peak"] >= first["traced"]
        holding = [row for row in second["live"] if here in row["site"]]
        assert holding and holding[0]["size"] >= 64 * 4096  # still live: among the largest
        del kept
    finally:
        control.stop()
        tracemalloc.stop()
        network.close()


@pytest.mark.parametrize(("value", "frames"), [("", 0), ("1", 1), ("25", 25)])
def test_the_tracemalloc_switch_reads_a_frame_count(value: str, frames: int) -> None:
    assert MemoryTracer.frames_from_env({"RCUNET_TRACEMALLOC": value}) == frames


@pytest.mark.parametrize("value", ["yes", "0", "-1", "999"])
def test_a_bad_tracemalloc_switch_is_one_error(value: str) -> None:
    with pytest.raises(ValueError, match="RCUNET_TRACEMALLOC"):
        MemoryTracer.frames_from_env({"RCUNET_TRACEMALLOC": value})
