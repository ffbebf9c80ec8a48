"""Seed 000's server side (rcunet/lab/seed000.py's stack level): the ``CrrServer`` a
``CrrScenario`` drives, in the lab's process or in a child one (seed000_procs.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from rcunet.api import host_socket
from rcunet.host.tcp.life import FORGOTTEN
from rcunet.lab.common import rx_exceptions, serve_transaction, tcp_leaks, wait_until

T = TypeVar("T")

SERVER = "10.0.0.2"
PORT = 8000
ACCEPT_POLL = 0.05  # acceptors wake this often to see the stop flag
IO_TIMEOUT = 10.0


def _accept(srv: Any, timeout: float = IO_TIMEOUT) -> Any:
    end = time.monotonic() + timeout
    while True:
        try:
            return srv.accept()[0]
        except TimeoutError:
            if time.monotonic() > end:
                raise


def settled_read(read: Callable[[], T]) -> T:
    """``read()`` until two reads agree, so a TIME_WAIT half-way through its removal (out
    of ehash, not yet out of the bind tables) is not caught."""
    last = read()
    for _ in range(100):
        time.sleep(0.01)
        now = read()
        if now == last:
            break
        last = now
    return last


class CrrServer:
    """Host b's side of a ``CrrScenario``: the listener, the acceptors, the held flows'
    server ends and the server's part of the end checks.  It lives beside the client, or
    in b's own process (``--procs``: rcunet/lab/seed000_procs.py calls these methods on
    the parent's messages), so every method takes and returns plain values.

    Concurrency: the acceptor threads live from ``start_acceptors`` to ``drain``; each
    writes only its own slot of ``served`` (``drain`` sums the slots: each a list-slot
    load, atomic) and appends to ``errors`` (list append: atomic).  Every other attribute
    belongs to the thread that calls the methods.
    """

    def __init__(self, host: Any, *, hold: int, acceptors: int, request_size: int,
                 response_size: int) -> None:
        self.host = host
        self.request_size, self.response = request_size, b"r" * response_size
        self.held: list[Any] = []  # the held flows' server ends
        self.served = [0] * acceptors
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._acceptors = [threading.Thread(target=self._acceptor, args=(i,),
                                            name=f"seed000-acceptor-{i}", daemon=True)
                           for i in range(acceptors)]
        srv: Any = host.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.bind((SERVER, PORT))
        srv.listen(min(hold + 128, 4096))
        srv.settimeout(ACCEPT_POLL)
        self.srv = srv

    def accept_held(self, n: int) -> None:
        """Accept ``n`` connections the client opened to be held."""
        self.held += [_accept(self.srv) for _ in range(n)]

    def start_acceptors(self) -> None:
        for thread in self._acceptors:
            thread.start()

    def _acceptor(self, index: int) -> None:
        try:
            while not self._stop.is_set():
                try:
                    conn, _ = self.srv.accept()
                except TimeoutError:
                    continue
                serve_transaction(conn, self.request_size, self.response, IO_TIMEOUT,
                                  wait_for_fin=True)
                self.served[index] += 1  # owner: this acceptor thread
        except BaseException as exc:  # reported by check_problems
            self.errors.append(exc)

    def stop_acceptors(self) -> None:
        self._stop.set()
        for thread in self._acceptors:
            if thread.ident is not None:
                thread.join()

    def drain(self, completed: int) -> dict[str, Any]:
        """Once the clients stopped: serve the last of their ``completed`` transactions,
        stop the acceptors; the server's figures before the held flows are released."""
        host = self.host
        wait_until(lambda: sum(self.served) >= completed)
        self.stop_acceptors()
        held = {host_socket(conn) for conn in self.held} | {host_socket(self.srv)}
        return {"served": sum(self.served),
                "settled": wait_until(lambda: host.tcp.sockets == held),
                "ehash": settled_read(lambda: len(host.tcp.hashinfo.ehash)) - len(self.held),
                "passive_opens": host.counters.get("TcpPassiveOpens"),
                "rsts": host.counters.get("TcpOutRsts")}

    def release(self, start: int, stop: int) -> bool:
        """The server's half of ending held flows ``start:stop`` (their clients closed
        first): read the EOF, close (LAST_ACK); True once the sockets are gone."""
        batch = self.held[start:stop]
        for conn in batch:
            conn.settimeout(IO_TIMEOUT)
            if conn.recv(1):
                raise ConnectionError("a held flow's client sent data")
            conn.close()
        # sk.life: one attribute load (atomic), FORGOTTEN taken once (life.advance,
        # under the socket's wq) when the socket leaves the layer (TcpLayer.forget)
        return wait_until(partial(all_forgotten, [host_socket(conn) for conn in batch]))

    def close(self) -> dict[str, Any]:
        """After the release: what the server holds, then close everything; what is
        left behind and the first acceptor failure (as text)."""
        host = self.host
        result = {"only_listener": host.tcp.sockets == {host_socket(self.srv)},
                  "ehash": settled_read(lambda: len(host.tcp.hashinfo.ehash)),
                  "rsts": host.counters.get("TcpOutRsts")}
        self.srv.close()
        host.tcp.close_all()
        return {**result, "leaks": tcp_leaks(host), "rx_exceptions": rx_exceptions(host),
                "errors": [repr(exc) for exc in self.errors[:1]]}


def all_forgotten(sockets: Sequence[Any]) -> bool:
    return all(sk.life & FORGOTTEN for sk in sockets)
