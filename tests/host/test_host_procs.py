"""Hosts in their own processes (rcunet/host/procs.py over rcunet/link/ipc.py): data
integrity between two processes, and what happens when the child dies."""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import socket
import tempfile
import threading
import time
from dataclasses import replace
from typing import Any

import procs_workloads as work
import pytest

from rcunet.host.network import Network
from rcunet.host.procs import HostProcess
from rcunet.link.impair import ImpairmentConfig
from rcunet.tuning import Tuning

MB = 1_000_000
SIZE = int(os.environ.get("RCUNET_TCP_BULK_MB", "20")) * MB
A4, B4 = "10.0.0.1", "10.0.0.2"
PORT = 5001
#: How long a child may take to answer: a bound that catches a hung child, not an
#: expected time (a child starting on 3.13t beside a loaded machine took over 30 s).
PATIENCE = 180.0


@pytest.fixture(scope="module", autouse=True)
def _multiprocessing_started() -> None:
    """Start and stop one child first: multiprocessing keeps one resource tracker
    process (and its pipe) per parent for the parent's lifetime; the leftover checks
    compare against a baseline that has it."""
    net = Network(threaded=True)
    b = net.host_process("warm-up")
    b.start(work.wait_for_stop, 5)
    assert b.recv(timeout=PATIENCE)[0] == "pid"
    b.stop()
    assert b.join(timeout=30).result[0] == 5
    net.close()


def leftovers() -> dict[str, Any]:
    """What a run could leave behind: this process's descriptors and children, shared
    memory segments, multiprocessing's temporary directories (named sockets)."""
    children = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                children.add(int(pid))
    return {"fds": _open_descriptors(),
            "children": children,
            "shm": set(os.listdir("/dev/shm")),
            "pymp": {name for name in os.listdir(tempfile.gettempdir())
                     if name.startswith("pymp-")}}


def _open_descriptors() -> dict[str, int]:
    """This process's descriptors by kind (socket, pipe, anon_inode:[eventfd], memfd:...),
    counted: a failure names the kind that was left open."""
    kinds: dict[str, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed by now
        kind = target.split(":[", 1)[0] if target.startswith(("socket:", "pipe:")) else \
            target.split(" (deleted)")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def left_behind(before: dict[str, Any], after: dict[str, Any]) -> str:
    """What differs between two ``leftovers()``, for an assertion's message."""
    lines = []
    for key in before:
        if key == "fds":
            kinds = set(before["fds"]) | set(after["fds"])
            lines += [f"fds {kind}: {before['fds'].get(kind, 0)} -> {after['fds'].get(kind, 0)}"
                      for kind in sorted(kinds)
                      if before["fds"].get(kind, 0) != after["fds"].get(kind, 0)]
        elif before[key] != after[key]:
            lines.append(f"{key}: {before[key]} -> {after[key]}")
    return "; ".join(lines)


def leftovers_settle(before: dict[str, Any], patience: float = 30.0) -> dict[str, Any]:
    """``leftovers()`` once it is back to ``before``, or as it is after ``patience``
    seconds: a ring's mapping and doorbell are released by their last user, a Host
    thread that may still be leaving when ``Network.close`` returns (seen once on 3.13t:
    one descriptor more for a moment)."""
    deadline = time.monotonic() + patience
    now = leftovers()
    while now != before and time.monotonic() < deadline:
        time.sleep(0.05)
        now = leftovers()
    return now


def two_processes(*, impair: ImpairmentConfig | None = None, transport: str = "seqpacket",
                  tuning: Tuning | None = None) -> tuple[Network, Any, HostProcess]:
    net = Network(threaded=True, tuning=tuning)
    a = net.host("a")
    b = net.host_process("b", lockdep=True)
    net.link(a, b, f"{A4}/24", f"{B4}/24", impair=impair, transport=transport)
    net.start()
    return net, a, b


def connect(a: Any, b: HostProcess, timeout: float = 10.0) -> Any:
    assert b.recv(timeout=PATIENCE) == ("listening", PORT)
    sock = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect((B4, PORT))
    return sock


def bulk_both_ways(net: Network, a: Any, b: HostProcess, size: int) -> None:
    b.start(work.serve_bulk, socket.AF_INET, B4, PORT, size, 7)
    sock = connect(a, b, timeout=600)
    data = work.payload(8, size)
    writer = threading.Thread(target=sock.sendall, args=(data,))
    writer.start()
    received = work.recv_hash(sock, size)
    writer.join()
    sock.close()
    outcome = b.join(timeout=600)
    assert outcome.failure is None
    assert outcome.result == {"received": hashlib.sha256(data).hexdigest(),
                              "sent": hashlib.sha256(work.payload(7, size)).hexdigest()}
    assert received == outcome.result["sent"]
    assert outcome.lockdep_reports == []
    assert outcome.exitcode == 0


@pytest.mark.parametrize("transport", ["seqpacket", "ring"])
def test_20mb_each_way_clean_link(transport: str) -> None:
    before = leftovers()
    net, a, b = two_processes(transport=transport)
    try:
        bulk_both_ways(net, a, b, SIZE)
        outcome = b.join()
        # a clean link: checksum offload, nothing dropped
        assert outcome.links["eth0"]["rx_length_errors"] == 0
        assert outcome.counters.get("TcpInCsumErrors", 0) == 0
    finally:
        net.close()
    after = leftovers_settle(before)
    assert after == before, left_behind(before, after)


@pytest.mark.usefixtures("unguarded_spin")
def test_receive_threads_that_spin_carry_the_same_bytes() -> None:
    """``rx_spin`` reaches the child's end of the link (it counts spin hits there too)
    and both Hosts' waits (``Host.wait_spin``), and bulk data both ways arrives as
    without it."""
    net = Network(threaded=True)
    a = net.host("a")
    b = net.host_process("b", lockdep=True)
    end_a, _end_b = net.link(a, b, f"{A4}/24", f"{B4}/24", rx_spin=0.05)
    assert a.wait_spin == 0.05
    net.start()
    try:
        bulk_both_ways(net, a, b, 2_000_000)
        assert end_a.stats()["spin_hits"] > 0
        outcome = b.join()
        assert outcome.links["eth0"]["spin_hits"] > 0
        assert outcome.counters.get("RcunetWaitSpinHits", 0) > 0
        assert a.counters.get("RcunetWaitSpinHits") > 0
    finally:
        net.close()


def test_20mb_each_way_with_loss_duplication_and_reordering() -> None:
    """The issue's lossy transfer (about 35 s on an idle core).  It used to end in
    ECONNRESET, or stall when that RST was lost: the child's function returned with its
    last data still queued, and the child's Host reset the orphan instead of sending it
    (see test_data_queued_before_the_childs_function_returns_is_delivered)."""
    impair = ImpairmentConfig(loss=0.02, duplicate=0.02, reorder=0.02, corrupt=0.001,
                              seed=3)
    before = leftovers()
    net, a, b = two_processes(impair=impair)
    try:
        bulk_both_ways(net, a, b, SIZE)
        outcome = b.join()
        child_link = outcome.links["eth0"]
        assert child_link["lost"] > 0 and child_link["duplicated"] > 0
        assert child_link["reordered"] > 0
        parent_link = net.ipc_ends[0].stats()
        assert parent_link["lost"] > 0 and parent_link["duplicated"] > 0
        # TCP repaired it on both sides
        assert outcome.counters["TcpRetransSegs"] > 0
        assert a.counters.get("TcpRetransSegs") > 0
        # an impaired link computes and checks checksums: corruption is caught
        assert (outcome.counters.get("TcpInCsumErrors", 0)
                + a.counters.get("TcpInCsumErrors")) > 0
    finally:
        net.close()
    after = leftovers_settle(before)
    assert after == before, left_behind(before, after)


def test_data_queued_before_the_childs_function_returns_is_delivered() -> None:
    """The child's function closes a socket with data still queued and returns at once;
    a kernel keeps sending an orphan's data after its program exits, so the child's Host
    must too before it closes (it used to reset them: the lossy transfer's ECONNRESET,
    or a stall when that RST was lost)."""
    size = 200_000
    net, a, b = two_processes()
    try:
        b.start(work.send_close_return, socket.AF_INET, B4, PORT, size, 9)
        assert b.recv(timeout=PATIENCE) == ("listening", PORT)
        sock = a.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window
        sock.settimeout(60)
        sock.connect((B4, PORT))
        assert b.recv(timeout=PATIENCE) == ("closed", size)  # before a byte was read here
        assert work.recv_hash(sock, size) == hashlib.sha256(work.payload(9, size)).hexdigest()
        assert sock.recv(1) == b""  # then the FIN
        outcome = b.join(timeout=60)
        assert outcome.failure is None and outcome.result == size
        sock.close()
    finally:
        net.close()


def test_an_exiting_child_stops_waiting_for_its_orphans_when_its_link_goes_down() -> None:
    """The child's closed connection cannot deliver once the link is down: the child
    ends at once instead of lingering for ``exit_linger`` (30 s)."""
    size = 200_000
    net, a, b = two_processes()
    try:
        b.start(work.send_close_return, socket.AF_INET, B4, PORT, size, 9)
        assert b.recv(timeout=PATIENCE) == ("listening", PORT)
        sock = a.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # data stays queued
        sock.settimeout(60)
        sock.connect((B4, PORT))
        assert b.recv(timeout=PATIENCE) == ("closed", size)
        net.ipc_ends[0].close()  # the wire is cut: the child's end sees its peer gone
        outcome = b.join(timeout=20)  # well inside the 30 s it would linger
        assert outcome.failure is None and outcome.result == size
        sock.close()
    finally:
        net.close()


def test_killing_the_server_mid_transfer_times_the_client_out() -> None:
    before = leftovers()
    # tcp_retries2=3: the connection gives up after ~4 RTOs instead of 15 minutes
    net, a, b = two_processes(tuning=replace(Tuning(), tcp_retries2=3))
    try:
        b.start(work.serve_sink, socket.AF_INET, B4, PORT)
        sock = connect(a, b, timeout=120)
        errors: list[OSError] = []

        def send_forever() -> None:
            chunk = bytes(65536)
            try:
                while True:
                    sock.sendall(chunk)
            except OSError as exc:
                errors.append(exc)

        writer = threading.Thread(target=send_forever)
        writer.start()
        assert b.recv(timeout=PATIENCE)[0] == "reading"  # mid-transfer
        pid = b.pid
        b.kill(signal.SIGKILL)
        outcome = b.join(timeout=30)
        assert outcome.failure == "killed by SIGKILL" == b.failure
        assert outcome.exitcode == -signal.SIGKILL
        assert net.ipc_ends[0].down is not None  # the link went down
        writer.join(timeout=120)
        assert not writer.is_alive()
        assert errors and errors[0].errno == errno.ETIMEDOUT
        assert a.counters.get("TcpExtTCPAbortOnTimeout") == 1
        assert net.ipc_ends[0].stats()["tx_carrier_errors"] > 0
        sock.close()
        assert not os.path.exists(f"/proc/{pid}")  # reaped: no zombie
    finally:
        net.close()
    after = leftovers_settle(before)
    assert after == before, left_behind(before, after)


def test_a_crashing_server_resets_its_connections() -> None:
    """The child's function raises: its Host closes as a crashing program's kernel
    closes its sockets (RST), the client sees ECONNRESET, the parent the traceback."""
    before = leftovers()
    net, a, b = two_processes()
    try:
        b.start(work.serve_then_fail, socket.AF_INET, B4, PORT, "raise")
        sock = connect(a, b, timeout=PATIENCE)
        sock.sendall(bytes(work.CHUNK))
        assert b.recv(timeout=PATIENCE) == ("read", work.CHUNK)
        with pytest.raises(ConnectionResetError):
            while True:
                sock.sendall(bytes(work.CHUNK))
        outcome = b.join(timeout=30)
        assert outcome.failure is not None
        assert "RuntimeError: the server's program crashed" in outcome.failure
        assert outcome.exitcode == 0
        sock.close()
    finally:
        net.close()
    after = leftovers_settle(before)
    assert after == before, left_behind(before, after)


def test_a_child_that_exits_is_reported_with_its_status() -> None:
    before = leftovers()
    net, a, b = two_processes()
    try:
        b.start(work.serve_then_fail, socket.AF_INET, B4, PORT, "exit")
        sock = connect(a, b, timeout=PATIENCE)
        sock.sendall(bytes(work.CHUNK))
        assert b.recv(timeout=PATIENCE) == ("read", work.CHUNK)
        outcome = b.join(timeout=30)
        assert outcome.failure == "exited with status 3"
        assert net.ipc_ends[0].down is not None
        sock.close()
    finally:
        net.close()
    after = leftovers_settle(before)
    assert after == before, left_behind(before, after)


def test_start_stop_join_collects_result_counters_pcap_and_lockstat() -> None:
    net = Network(threaded=True)
    a = net.host("a")
    b = net.host_process("b", capture=True, lockstat=True)
    net.link(a, b, f"{A4}/24", f"{B4}/24")
    net.start()
    try:
        b.start(work.serve_sink, socket.AF_INET, B4, PORT)
        sock = connect(a, b)
        sock.sendall(bytes(4 * work.CHUNK))
        assert b.recv(timeout=PATIENCE)[0] == "reading"
        b.stop()
        outcome = b.join(timeout=30)
        assert outcome.failure is None and outcome.exitcode == 0
        assert work.CHUNK <= outcome.result <= 4 * work.CHUNK
        assert outcome.counters["TcpPassiveOpens"] == 1
        assert outcome.links["eth0"]["rx_packets"] > 0
        from rcunet.link.pcap import read_all

        records = read_all(outcome.pcaps["eth0"])
        assert len(records) == (outcome.links["eth0"]["rx_packets"]
                                + outcome.links["eth0"]["tx_packets"])
        assert any(stats.acquisitions for stats in outcome.lockstat.values())
        sock.close()
    finally:
        net.close()


def test_a_child_runs_on_the_cpus_it_was_given() -> None:
    """``cpus``: every thread of the child (its Host's included) runs on them, as a
    machine runs on its own CPUs; the parent's stay as they were."""
    mine = sorted(os.sched_getaffinity(0))
    net = Network(threaded=True)
    a = net.host("a")
    b = net.host_process("b", cpus=[mine[-1]])
    net.link(a, b, f"{A4}/24", f"{B4}/24")
    net.start()
    try:
        b.start(work.thread_cpus)
        outcome = b.join(timeout=PATIENCE)
        assert outcome.failure is None, outcome.error
        threads = outcome.result
        assert len(threads) > 1  # the Host's threads, not only the main one
        assert all(cpus == [mine[-1]] for cpus in threads), threads
        assert sorted(os.sched_getaffinity(0)) == mine
    finally:
        net.close()


@pytest.mark.parametrize("cpus", [[], [4096]])
def test_cpus_the_parent_may_not_use_are_einval(cpus: list[int]) -> None:
    with pytest.raises(OSError) as info:
        Network(threaded=True).host_process("b", cpus=cpus)
    assert info.value.errno == errno.EINVAL


def test_the_deterministic_mode_stays_single_process() -> None:
    with pytest.raises(ValueError, match="single-process"):
        Network().host_process("b")


def test_fork_is_refused() -> None:
    with pytest.raises(ValueError, match="fork copies only one thread"):
        Network(threaded=True).host_process("b", start_method="fork")


def test_data_segments_leave_room_for_sack_blocks() -> None:
    """Both directions at once over a lossy link: data segments then carry SACK blocks,
    and header + data must still fit the MTU (the bug the two-process transfer found:
    1448 bytes of data plus two blocks made 1520-byte packets, dropped as IpFragFails,
    and the retransmission of such a segment failed for ever)."""
    impair = ImpairmentConfig(loss=0.03, reorder=0.03, seed=5)
    with Network(threaded=True) as net:
        a, b = net.host("a"), net.host("b")
        net.link(a, b, f"{A4}/24", f"{B4}/24", impair=impair)
        net.start()
        server = b.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind((B4, PORT))
        server.listen(1)
        client = a.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.settimeout(120)
        client.connect((B4, PORT))
        conn, _peer = server.accept()
        conn.settimeout(120)
        size = 2 * MB
        writers = [threading.Thread(target=sock.sendall, args=(work.payload(n, size),))
                   for n, sock in ((1, client), (2, conn))]
        for writer in writers:
            writer.start()
        got = {}
        reader = threading.Thread(target=lambda: got.update(b=work.recv_hash(conn, size)))
        reader.start()
        got["a"] = work.recv_hash(client, size)
        reader.join()
        for writer in writers:
            writer.join()
        assert got == {"a": hashlib.sha256(work.payload(2, size)).hexdigest(),
                       "b": hashlib.sha256(work.payload(1, size)).hexdigest()}
        assert a.counters.get("TcpExtTCPSACKReorder") + a.counters.get("TcpRetransSegs") > 0
        assert a.counters.get("IpFragFails") == b.counters.get("IpFragFails") == 0
