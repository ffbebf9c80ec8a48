"""``rcunet lab seed004 --procs``: the same tcp_crr churn with the server Host (listener
and accepting threads) in a child process and the client Host and its threads here, on
an inter-process link (rcunet/host/procs.py, rcunet/link/ipc.py) that runs the receive
path in the link's receive thread, as the in-process lab's inline link runs it in the
sender's.  The pairs shape only: a ``workers`` thread plays both roles, which cannot
span two processes.

The result has run_crr's fields, so the lab's checks (every completed connection
served once and counted by both Hosts, nothing left behind) and report are unchanged;
the server's counters, leaks and lock statistics come back in the child's Outcome.
With lock statistics on in this process (the lab's statistics run), they are switched
on in the child too, and the run's ``server_lockstat`` is the server's: the lock seed
004 is about is taken on accept.
"""

from __future__ import annotations

import socket
import threading
import time
from functools import partial
from typing import Any

from rcunet.api import host_socket
from rcunet.host.network import Network
from rcunet.lab import seed004_crr
from rcunet.lab.common import run_timed, rx_exceptions, tcp_leaks, wait_until
from rcunet.sync import lockstat

SERVER = "10.0.0.2"
PORT = 8080
ACCEPT_POLL = 0.05
DRAIN_TIMEOUT = 10.0
CHILD_TIMEOUT = 60.0


def run_crr_procs(mode: str, duration: float, *, acceptors: int, clients: int,
                  request_size: int, response_size: int, tuning: Any) -> dict[str, Any]:
    net = Network(threaded=True, tuning=tuning)
    a = net.host("a")
    b = net.host_process("b", lockstat=lockstat.enabled())
    net.link(a, b, ["10.0.0.1/24"], [f"{SERVER}/24"], inline_rx=True)
    net.start()
    try:
        b.start(_serve, acceptors, request_size, response_size)
        assert b.recv(timeout=CHILD_TIMEOUT) == "listening"
        tally = seed004_crr.Tally(duration, clients, acceptors, request_size, response_size)
        deadline = time.monotonic() + duration
        transaction = partial(seed004_crr.transaction, a, tally.request, response_size)
        workers = [threading.Thread(target=tally.transactions,
                                    args=(i, deadline, transaction), name=f"crr-client-{i}")
                   for i in range(clients)]
        elapsed, usage_start, usage_end = run_timed(workers)
        b.send(sum(tally.done))  # the child stops once it has served them all
        outcome = b.join(timeout=CHILD_TIMEOUT)
        if outcome.failure is not None:
            raise RuntimeError(f"seed004 --procs: the server's process: {outcome.failure}")
        server = outcome.result
        tally.served = server["served"]
        result = tally.result(elapsed, usage_start, usage_end)
        result["mode"] = mode
        result["passive_opens"] = server["passive_opens"]
        result["active_opens"] = a.counters.get("TcpActiveOpens")
        result["settled"] = server["settled"] and wait_until(lambda: not a.tcp.sockets)
        result["client_ports_in_use"] = len(a.tcp.hashinfo.bind.ports_in_use())
        result["nstat"] = server["nstat"]
        leaks = tcp_leaks(a)
        result["leaks"] = {key: leaks[key] + server["leaks"][key] for key in leaks}
        result["rx_exceptions"] = rx_exceptions(a) + server["rx_exceptions"]
        result["server_cpu_per_connection_us"] = (
            1e6 * server["cpu"] / result["connections"] if result["connections"] else 0.0)
        result["server_lockstat"] = outcome.lockstat
        return result
    finally:
        net.close()


def _serve(child: Any, acceptors: int, request_size: int,
           response_size: int) -> dict[str, Any]:
    """In the child: ``acceptors`` threads accept and serve until the parent says how
    many connections its clients completed and that many are served."""
    from rcunet.bench.neper import Usage
    host = child.host
    srv: Any = host.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind((SERVER, PORT))
    srv.listen(128)
    srv.settimeout(ACCEPT_POLL)
    tally = seed004_crr.Tally(1.0, 0, acceptors, request_size, response_size)
    stop = threading.Event()

    def acceptor(index: int) -> None:
        tally.accept_loop(srv, index, stop)

    threads = [threading.Thread(target=acceptor, args=(i,), name=f"acceptor-{i}")
               for i in range(acceptors)]
    start = Usage.now()
    for thread in threads:
        thread.start()
    child.report("listening")
    completed = child.recv(timeout=None)
    wait_until(lambda: sum(tally.served) >= completed, DRAIN_TIMEOUT)
    stop.set()
    for thread in threads:
        thread.join()
    end = Usage.now()
    if tally.errors:
        raise RuntimeError(f"acceptor failed: {tally.errors[0]!r}") from tally.errors[0]
    settled = wait_until(lambda: host.tcp.sockets == {host_socket(srv)})
    nstat = dict(host.counters.nonzero())
    passive_opens = host.counters.get("TcpPassiveOpens")
    srv.close()
    host.tcp.close_all()  # the server's TIME_WAIT entries go too
    return {"served": tally.served, "passive_opens": passive_opens, "settled": settled,
            "nstat": nstat, "leaks": tcp_leaks(host), "rx_exceptions": rx_exceptions(host),
            "cpu": (end.utime + end.stime) - (start.utime + start.stime)}
