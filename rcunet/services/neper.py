"""neper's server on rcunet sockets: ``rcunet up --serve neper:12866``.

It speaks neper's control protocol (``rcunet.bench.control``) on its port and runs the
data plane of whichever of the five workloads the client's CLI_HELLO names (the secret
carries the test name) on neper's data ports, the control port + 1 and up (12867, as
neper's ``-P`` default), with ``rcunet.bench.workloads.Server``: the code
``rcunet bench W --server`` runs on Linux sockets.  So a real neper binary measures
rcunet with the command it would use against a neper server::

    tcp_crr -c -H 10.77.0.2 -l 5          (neper)
    rcunet bench tcp_crr -c -H 10.77.0.2   (rcunet, Linux sockets)

What the server cannot learn from CLI_HELLO it takes from its own flags, as a neper
server binary does (``rcunet up --serve neper:12866 --neper '-T 2 --num-ports 2 -R 64'``,
``rcunet.services.neper_flags``), and without flags from neper's server defaults:
``-Q 1 -R 1`` for the RR tests, a reading tcp_stream server (no ``-M``), ``-B`` per
workload, data on the control port + 1, the client's ``-T`` (capped).  Clients run one
after another; a control connection that sends garbage, a short struct or another secret is counted
(``invalid_secrets``) and closed, one that vanishes mid-run is counted (``abandoned``)
and its data plane stopped; the next client is served either way.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from rcunet.bench import control, neper
from rcunet.bench.workloads import ConnectError, Plan, Server
from rcunet.services import neper_flags
from rcunet.services.base import Service

WORKLOADS = ("tcp_rr", "tcp_crr", "tcp_stream", "udp_rr", "udp_stream")
HELLO_TIMEOUT = 10.0  # a connection that says nothing this long is not a neper client
MAX_THREADS = 64  # the client's -T, capped: a CLI_HELLO must not spawn unbounded threads
SERVER_TEST_LENGTH = 10  # what neper's server says about itself in SER_ACK (its -l)


def _default(workload: str, key: str) -> Any:
    return next(f.default for f in neper.flags_for(workload) if f.key == key)


def plan_for(workload: str, hello: control.HsMsg, family: int) -> Plan:
    """The server's plan for one client: neper's server defaults, the client's -T."""
    return Plan(workload=workload, family=family,
                num_threads=max(1, min(hello.num_threads, MAX_THREADS)),
                buffer_size=_default(workload, "buffer_size"),
                test_length=SERVER_TEST_LENGTH, interval=1.0)


class NeperServer(Service):
    """One run per control connection, one run at a time."""

    name = "neper"

    def __init__(self, host: Any, port: int, flags: str = "") -> None:
        super().__init__(host, port)
        self.flags = neper_flags.parse(flags) if flags.strip() else None
        self.data_port = port + 1
        self._run_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self.runs = 0  # completed runs; guarded-by: _stats_lock
        self.invalid_secrets = 0  # refused first messages; guarded-by: _stats_lock
        self.abandoned = 0  # clients gone without CLI_DONE; guarded-by: _stats_lock

    def _bump(self, name: str) -> None:
        with self._stats_lock:
            setattr(self, name, getattr(self, name) + 1)

    def serve_connection(self, conn: Any, peer: Any) -> None:
        conn.settimeout(HELLO_TIMEOUT)
        try:
            workload, hello = control.read_hello(conn, WORKLOADS)
        except (control.ControlError, OSError, TimeoutError):
            self._bump("invalid_secrets")
            return  # the base class closes the connection
        with self._run_lock:  # one run at a time: the data ports are neper's, fixed
            self._run(conn, workload, hello)

    def _run(self, conn: Any, workload: str, hello: control.HsMsg) -> None:
        family = socket.AF_INET6 if ":" in conn.getsockname()[0] else socket.AF_INET
        magic, data_port = control.DEFAULT_MAGIC, self.data_port
        if self.flags is None:
            plan = plan_for(workload, hello, family)
        else:
            plan = neper_flags.plan_with(self.flags, workload, family, hello.num_threads,
                                         MAX_THREADS)
            magic = self.flags.magic(workload)
            data_port = self.flags.data_port(workload, self.port)
        bind_host = conn.getsockname()[0]
        server = Server(plan, self.host.socket, bind_host, data_port)
        try:
            server.open()
        except ConnectError:
            self._bump("abandoned")
            return  # closing without SER_ACK: the client reports it
        server.start()
        remote: int | None = None
        try:
            control.send_ack(conn, control.ServerSide(plan.num_threads, plan.num_flows,
                                                      plan.test_length, magic))
            conn.settimeout(None)  # a run lasts as long as the client says
            remote = control.wait_done(conn, magic)
        except OSError:
            pass
        finally:
            server.stop(self.host.socket, bind_host)
        if remote is None:
            self._bump("abandoned")
            return
        summary = None
        if plan.server_measures:
            summary = neper.summarize(server.run.flows, plan.rr, False)
        # Counted before SER_BYE: a client that has its BYE finds the run counted.
        self._bump("runs")
        try:
            control.send_bye(conn, magic, neper.local_throughput(workload, summary))
        except OSError:
            pass
