"""Spin-then-park waits (``Host.wait_spin``, host/tcp/sock.py): a thread about to sleep on
a socket first re-checks it for a while, yielding its CPU between checks, so a wake-up
that comes within the spin wakes no thread (``RcunetWaitSpinHits`` counts those waits).
An inter-process link that spins (``rx_spin``) sets it on the Hosts at both ends
(tests/host/test_host_procs.py)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from rcunet.host.network import Network

A4, B4 = "10.0.0.1", "10.0.0.2"
PORT = 5001


def spinning_pair(spin: float) -> tuple[Network, Any, Any]:
    net = Network(threaded=True)
    a, b = net.host("a"), net.host("b")
    net.link(a, b, f"{A4}/24", f"{B4}/24")
    a.wait_spin = b.wait_spin = spin  # before the Hosts' threads start
    net.start()
    return net, a, b


def echo_once(b: Any) -> threading.Thread:
    listener = b.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((B4, PORT))
    listener.listen(1)

    def serve() -> None:
        conn, _peer = listener.accept()
        with conn:
            conn.sendall(conn.recv(64))
        listener.close()

    server = threading.Thread(target=serve)
    server.start()
    return server


def request(a: Any, data: bytes) -> bytes:
    with a.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect((B4, PORT))
        sock.sendall(data)
        return bytes(sock.recv(64))


@pytest.mark.usefixtures("unguarded_spin")
@pytest.mark.parametrize("spin", [0.0, 5.0], ids=["off", "5s"])
def test_request_and_reply_whether_waits_spin_or_sleep(spin: float) -> None:
    """The reply arrives either way; only spinning waits count hits (5 s: far longer than
    any wake-up takes, and spins that never give up their CPU, so every wait here ends
    in its spin, whatever the load)."""
    net, a, b = spinning_pair(spin)
    try:
        server = echo_once(b)
        assert request(a, b"ping") == b"ping"
        server.join(timeout=30)
        assert not server.is_alive()
        hits = a.counters.get("RcunetWaitSpinHits") + b.counters.get("RcunetWaitSpinHits")
        assert (hits > 0) == (spin > 0)
    finally:
        net.close()


@pytest.mark.usefixtures("unguarded_spin")
def test_a_timeout_shorter_than_the_spin_still_expires() -> None:
    """A receive timeout ends the spin: the wait does not last the Host's whole spin (a
    spin that never gives up its CPU, so only the deadline can end it early)."""
    net, a, b = spinning_pair(60.0)
    try:
        listener = b.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((B4, PORT))
        listener.listen(1)
        with a.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect((B4, PORT))
            sock.settimeout(0.2)
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                sock.recv(1)  # the server never sends
            assert time.monotonic() - started < 30
        listener.close()
    finally:
        net.close()
