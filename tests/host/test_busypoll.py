"""Busy polling on an inter-process link (rcunet/host/busypoll.py): a thread about to
sleep on a socket runs the link's receive path itself; the receive thread keeps off
while threads poll and takes the link back when they stop."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from typing import Any

import busypoll_workloads as bp
import procs_workloads as work
import pytest

from rcunet.api import host_socket
from rcunet.host.network import Network

A4, B4 = "10.0.0.1", "10.0.0.2"
PORT = 5002
SIZE = 4_000_000


def busy_pair(transport: str = "seqpacket") -> tuple[Network, Any, Any, Any]:
    net = Network(threaded=True)
    a = net.host("a")
    b = net.host_process("b", lockdep=True)
    end_a, _end_b = net.link(a, b, f"{A4}/24", f"{B4}/24", inline_rx=True, busy_poll=True,
                             transport=transport)
    net.start()
    assert a.busy_poller is not None
    return net, a, b, end_a


def connect(a: Any, b: Any, timeout: float = 60.0) -> Any:
    assert b.recv(timeout=60) == ("listening", PORT)
    sock = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect((B4, PORT))
    return sock


def wait_until(predicate: Any, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)  # polling a condition
    return True


@pytest.mark.parametrize("transport", ["seqpacket", "ring"])
def test_bulk_both_ways_with_busy_polling_threads(transport: str) -> None:
    """Two threads per side (a writer and a reader): one polls, the other sleeps on its
    gate and is woken by the poller's delivery."""
    net, a, b, end_a = busy_pair(transport)
    try:
        b.start(work.serve_bulk, socket.AF_INET, B4, PORT, SIZE, 7)
        sock = connect(a, b)
        data = work.payload(8, SIZE)
        writer = threading.Thread(target=sock.sendall, args=(data,))
        writer.start()
        received = work.recv_hash(sock, SIZE)
        writer.join()
        sock.close()
        outcome = b.join(timeout=120)
        assert outcome.failure is None
        assert outcome.result == {"received": hashlib.sha256(data).hexdigest(),
                                  "sent": hashlib.sha256(work.payload(7, SIZE)).hexdigest()}
        assert received == outcome.result["sent"]
        assert outcome.lockdep_reports == []
        assert end_a.stats()["busy_claims"] > 0  # this side's threads polled the link
        assert outcome.links["eth0"]["busy_claims"] > 0  # and the child's did
    finally:
        net.close()


def test_deadline_wakeup_and_the_receive_thread_taking_the_link_back() -> None:
    net, a, b, end_a = busy_pair()
    try:
        b.start(bp.serve_on_request, B4, PORT)
        sock = connect(a, b)
        # the deadline: a busy-polling recv on a silent connection times out
        sock.settimeout(0.3)
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            sock.recv(10)
        assert time.monotonic() - began >= 0.3
        claims = end_a.stats()["busy_claims"]
        assert claims > 0
        # data while no thread waits: the receive thread delivers it
        b.send(b"x" * 5000)
        assert b.recv(timeout=30) == ("sent", 5000)
        sk = host_socket(sock)
        assert wait_until(lambda: sk.conn.readable >= 5000)
        assert end_a.stats()["busy_claims"] == claims  # nobody polled meanwhile
        sock.settimeout(10)
        assert sock.recv(5000) == b"x" * 5000
        # a wake-up from another thread ends a busy poll: shut the reading side down
        sock.settimeout(None)
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(sock.recv(10)))
        reader.start()
        assert wait_until(lambda: end_a.stats()["busy_claims"] > claims)  # it polls
        sock.shutdown(socket.SHUT_RD)
        reader.join(timeout=10)
        assert not reader.is_alive() and got == [b""]
        b.send(None)
        assert b.join(timeout=60).failure is None
        sock.close()
    finally:
        net.close()
