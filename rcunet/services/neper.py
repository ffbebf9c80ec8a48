"""The server side of ``rcunet bench WORKLOAD -c -H ADDR`` on rcunet sockets.

It speaks the control protocol of ``rcunet.bench.targets`` (one JSON line each way to
agree on the plan and the data ports, one each way at the end to swap
``local_throughput``) on its port, and runs ``rcunet.bench.workloads.Server`` — the same
server code ``rcunet bench --server`` runs on Linux sockets — on the Host.  So a kernel
client can measure rcunet-as-server over TAP with the very command it would use against
a kernel server::

    rcunet bench tcp_crr -c -H 10.77.0.2 -C 12866 -l 5

Clients are served one after another, as neper's server does.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from rcunet.bench import neper
from rcunet.bench.workloads import ConnectError, Plan, Server
from rcunet.services.base import Service

MAX_LINE = 65536
WORKLOADS = ("tcp_rr", "tcp_crr", "tcp_stream", "udp_rr", "udp_stream")


class ControlError(Exception):
    pass


def _send_json(conn: Any, message: dict[str, Any]) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


class _Lines:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.buffer = bytearray()

    def read_json(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_LINE:
                raise ControlError("control line too long")
            data = self.conn.recv(4096)
            if not data:
                raise ControlError("the client vanished")
            self.buffer += data
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        try:
            message = json.loads(line)
        except ValueError:
            raise ControlError("garbled control message") from None
        if not isinstance(message, dict):
            raise ControlError("garbled control message")
        return message


def plan_from_message(message: dict[str, Any]) -> Plan:
    fields = message.get("plan")
    if message.get("magic") != 42 or not isinstance(fields, dict):
        raise ControlError("not an rcunet neper client (bad magic)")
    if fields.get("workload") not in WORKLOADS:
        raise ControlError(f"unknown workload {fields.get('workload')!r}")
    try:
        return Plan(**fields)
    except TypeError:
        raise ControlError("the client's plan has unknown fields") from None


class NeperServer(Service):
    """One run per control connection, one control connection at a time."""

    name = "neper"

    def __init__(self, host: Any, port: int) -> None:
        super().__init__(host, port)
        self._run_lock = threading.Lock()
        self.runs = 0  # completed runs; guarded-by: _run_lock

    def serve_connection(self, conn: Any, peer: Any) -> None:
        conn.settimeout(None)  # a run lasts as long as the client says
        with self._run_lock:  # one run at a time: its data ports and threads are its own
            lines = _Lines(conn)
            try:
                plan = plan_from_message(lines.read_json())
            except ControlError as exc:
                _send_json(conn, {"error": str(exc)})
                return
            bind_host = conn.getsockname()[0]
            server = Server(plan, self.host.socket, bind_host, 0)
            try:
                ports = [address[1] for address in server.open()]
            except ConnectError as exc:
                _send_json(conn, {"error": str(exc)})
                return
            server.start()
            try:
                _send_json(conn, {"ports": ports})
                lines.read_json()  # {"stop": true, "local_throughput": ...}
            except (ControlError, OSError):
                pass
            finally:
                server.stop(self.host.socket, bind_host)
            summary = None
            if plan.workload != "tcp_crr":
                summary = neper.summarize(server.run.flows, plan.rr, False)
            _send_json(conn, {"local_throughput":
                              neper.local_throughput(plan.workload, summary)})
            self.runs += 1

