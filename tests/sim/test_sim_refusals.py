"""Whatever cannot be simulated stops the run with an error naming it, never a hang."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import threading

import pytest
from sim_support import two_hosts

from rcunet.sim import BusyLoop, Deadlock, Refused


def _spin_forever() -> None:
    while True:
        pass


def test_a_busy_loop_is_stopped_with_its_thread_and_stack() -> None:
    sim, a, _b = two_hosts(cpu_bound=0.3)
    sim.spawn(a, _spin_forever, name="spinner")
    with pytest.raises(BusyLoop) as caught:
        sim.run()
    message = str(caught.value)
    assert "'spinner'" in message and "_spin_forever" in message
    assert sim.closed


def test_every_thread_waiting_on_nothing_is_a_deadlock_with_stacks() -> None:
    sim, a, _b = two_hosts()

    def waits_forever() -> None:
        threading.Event().wait()

    sim.spawn(a, waits_forever)
    with pytest.raises(Deadlock) as caught:
        sim.run()
    assert "waits_forever" in str(caught.value)


def _connect(address: tuple[str, int]) -> None:
    with socket.socket() as sock:  # closed however the call ends: no socket left to GC
        sock.connect(address)


def _sendto(data: bytes, address: tuple[str, int]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(data, address)


def _sendmsg(data: bytes, address: tuple[str, int]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendmsg([data], [], 0, address)


def _connect_subclass(address: tuple[str, int]) -> None:
    class Logged(socket.socket):  # a program's own subclass is guarded as well
        pass

    with Logged() as sock:
        sock.connect(address)


@pytest.mark.parametrize(("call", "named"), [
    (lambda: subprocess.run(["true"], check=False), "subprocess.Popen(['true'])"),
    (lambda: os.fork(), "os.fork()"),
    (lambda: os.system("true"), "os.system()"),
    (lambda: _connect(("192.0.2.7", 80)), "192.0.2.7 is outside"),
    (lambda: _sendto(b"x", ("8.8.8.8", 53)), "socket.sendto(('8.8.8.8', 53))"),
    (lambda: _sendmsg(b"x", ("8.8.4.4", 53)), "socket.sendmsg(('8.8.4.4', 53))"),
    (lambda: _connect_subclass(("198.51.100.1", 443)), "198.51.100.1 is outside"),
])
def test_calls_outside_the_simulation_are_refused_by_name(call: object, named: str) -> None:
    sim, a, _b = two_hosts()

    def program() -> None:
        try:
            call()  # type: ignore[operator]
        except Exception:
            pass  # swallowing the error does not let the run go on

    sim.spawn(a, program)
    with pytest.raises(Refused) as caught:
        sim.run()
    assert named in str(caught.value)


def test_an_unused_address_of_a_simulated_subnet_is_inside() -> None:
    sim, a, _b = two_hosts()

    def program() -> str:
        try:
            socket.create_connection(("10.0.0.99", 80), timeout=5)
        except OSError as exc:
            return errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        return "connected"

    client = sim.spawn(a, program)
    assert sim.run()
    sim.close()
    assert client.result == "EHOSTUNREACH"  # no ARP answer: as Linux says it


def test_a_program_that_raises_reports_traceback_time_and_seed() -> None:
    sim, a, _b = two_hosts(seed=42)

    def program() -> None:
        import time

        time.sleep(12.5)
        raise ValueError("boom")

    failing = sim.spawn(a, program)
    assert sim.run()
    sim.close()
    assert failing.status == 1
    assert failing.error is not None
    assert "ValueError: boom" in failing.error
    assert "simulated time 12.500000 s (seed 42)" in failing.error
