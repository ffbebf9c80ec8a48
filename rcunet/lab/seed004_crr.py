"""The tcp_crr transaction of the seed-004 lab and what its threads tally, shared by the
in-process run (seed004.py) and the run with the server Host in a child process
(seed004_procs.py), which the child imports by name."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rcunet.bench import neper
from rcunet.lab.common import connect_and_send, serve_transaction
from rcunet.lab.report import neper_lines

SERVER = "10.0.0.2"
PORT = 8080
ACCEPT_POLL = 0.05  # acceptors wake this often to see the stop flag
IO_TIMEOUT = 10.0
PERCENTILES = (50.0, 90.0, 99.0)


def transaction(a: Any, request: bytes, response_size: int) -> None:
    with connect_and_send(a, (SERVER, PORT), request, IO_TIMEOUT) as cli:
        read_response(cli, response_size)


def read_response(cli: Any, response_size: int) -> None:
    """The whole response, up to the server's FIN."""
    got = 0
    while data := cli.recv(65536):
        got += len(data)
    if got != response_size:
        raise ConnectionError(f"response of {got} bytes, expected {response_size}")


class Tally:
    """What one run's threads record: each list slot has one owner thread (its index),
    so the counts need no lock."""

    def __init__(self, duration: float, clients: int, acceptors: int, request_size: int,
                 response_size: int) -> None:
        self.served = [0] * acceptors
        self.done = [0] * clients
        self.errors: list[BaseException] = []
        self.request_size = request_size
        self.request = b"q" * request_size
        self.response_size = response_size
        self.response = b"r" * response_size
        clock = neper.ThreadClock(max(duration / 10, 0.01))
        self.flows = [neper.FlowStats(i, i, clock, keep_latency=True) for i in range(clients)]

    def accept_loop(self, srv: Any, index: int, stop: Any) -> None:
        """Acceptor thread ``index``: serve what ``srv`` accepts until ``stop`` is set
        (``srv`` times out every ACCEPT_POLL to look at it); errors go to ``errors``."""
        try:
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except TimeoutError:
                    continue
                self.serve(conn, index)
        except BaseException as exc:  # reported by result(), or returned to the parent
            self.errors.append(exc)

    def serve(self, conn: Any, index: int) -> None:
        serve_transaction(conn, self.request_size, self.response, IO_TIMEOUT)
        self.served[index] += 1  # owner: thread ``index``

    def transactions(self, index: int, deadline: float,
                     transaction: Callable[[], None]) -> None:
        """Client thread ``index``: timed transactions until ``deadline``."""
        flow = self.flows[index]
        try:
            while time.monotonic() < deadline:
                began = time.perf_counter()
                transaction()
                flow.event(neper.monotonic_ns(), 1, time.perf_counter() - began)
                self.done[index] += 1  # owner: thread ``index``
        except BaseException as exc:  # reported by result()
            self.errors.append(exc)
        finally:
            flow.finish(neper.monotonic_ns())

    def result(self, elapsed: float, usage_start: Any, usage_end: Any) -> dict[str, Any]:
        if self.errors:
            raise RuntimeError(f"seed004: {len(self.errors)} transaction(s) failed, first: "
                               f"{self.errors[0]!r}") from self.errors[0]
        completed = sum(self.done)
        cpu = (usage_end.utime + usage_end.stime) - (usage_start.utime + usage_start.stime)
        return {
            "connections": completed,
            "served": sum(self.served),
            "served_per_acceptor": self.served,
            "elapsed": elapsed,
            "rate": completed / elapsed if elapsed else 0.0,
            # process CPU (getrusage): what a connection cost, whatever else ran
            "cpu_per_connection_us": 1e6 * cpu / completed if completed else 0.0,
            "cpus_busy": cpu / elapsed if elapsed else 0.0,
            "neper": neper_lines("tcp_crr", self.flows, usage_start, usage_end, PERCENTILES),
        }


