"""``--target procs``: the client Host and workload in this process, the server Host and
server workload in a child process, on an inter-process link (rcunet/link/ipc.py).

Like ``--target mem`` (a 10.0.0.1 / fd00::1 client, b 10.0.0.2 / fd00::2 server, one
Ethernet link with loopback's 65536-byte MTU, the receive path run by the link's
receive thread as loopback's softirq runs it, checksum offload on the clean link) but
the two Hosts no longer share an interpreter, so under the GIL the client and the
server run at the same time, as the kernel target's threads do.  ``-T``/``-F`` spread
over each process's threads as on the other targets (the client's ``-T`` threads here,
the server's thread per flow in the child).

The child runs ``_serve``: it opens the data sockets and reports their ports, starts
the server threads when told, and on ``stop()`` stops them and returns the server's
``Run`` (its flows' statistics, rusage around the data phase, errors).  neper's block is
printed as on the other targets; the other process's CPU over the run goes to stderr
(``server process: utime=... stime=...``, and the same for the client) so CPU per
transaction can count both.

Placement (``--procs-cpus``): by default each process gets CPUs of its own, as two
machines have, the client's process the first half of the allowed CPUs and the server's
the second (``spread``; with one allowed CPU they share it).  Left to the scheduler
(``none``), the threads move between CPUs at the hand-offs: on the 2-vCPU machine of
docs/BENCHMARKS.md tcp_crr -T2 ran about 1.5x faster placed on a quiet machine (-T1,
whose transactions are serial, gained little there and ~45% beside load).
``CLIENT:SERVER`` names the CPU lists (``0:1``, ``0-1:2-3``).
``--pin-cpu`` then pins each side's threads within its own process's CPUs.

``RCUNET_IPC_TRANSPORT=ring`` runs the link over the shared-memory ring instead of the
default seqpacket pair (``rcunet bench ipc`` compares the two).  ``RCUNET_IPC_BUSY_POLL=1``
turns busy polling on at both ends (rcunet/host/busypoll.py: off by default, as
Linux's ``net.core.busy_poll``; it helps one thread's request/response and costs
streams and several threads: ``scripts/bench-procs --targets procs,procs-busypoll``).
``RCUNET_IPC_RX_SPIN_US=N`` makes each end's receive thread poll on for N µs after its
last frame before it sleeps (rcunet/link/ipc.py; off by default): request/response
traffic then mostly skips the wake-up of the receiving process.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from rcunet.bench import neper
from rcunet.bench.cpus import cpu_list, placement
from rcunet.bench.neper import Usage
from rcunet.bench.workloads import ConnectError, MakeSocket, Plan, Run, Server

MEM_CLIENT = {4: "10.0.0.1", 6: "fd00::1"}
MEM_SERVER = {4: "10.0.0.2", 6: "fd00::2"}
LOOPBACK_MTU = 65536
#: A spawned child imports rcunet and builds its Host: allow for a loaded machine.
CHILD_TIMEOUT = 60.0


class ProcsTarget:
    """A client Host here, the server's Host in a child process."""

    name = "procs"

    def __init__(self, tuning: str = "modern", transport: str | None = None,
                 cpus: str = "spread") -> None:
        from rcunet.host.network import Network
        from rcunet.link.ipc import DEFAULT_TRANSPORT
        from rcunet.tuning import Tuning

        client_cpus, server_cpus = placement(cpus, neper.allowed_cpus())
        self.placement = (client_cpus, server_cpus)
        self.network = Network(threaded=True, tuning=Tuning.preset(tuning))
        self.client_host = self.network.host("a")
        self.server_process = self.network.host_process("b", cpus=server_cpus)
        if client_cpus is not None:
            # before the Network's threads start (start() below): a thread inherits its
            # creator's CPUs
            os.sched_setaffinity(0, client_cpus)
        self.network.link(self.client_host, self.server_process,
                          [f"{MEM_CLIENT[4]}/24", f"{MEM_CLIENT[6]}/64"],
                          [f"{MEM_SERVER[4]}/24", f"{MEM_SERVER[6]}/64"], inline_rx=True,
                          mtu=LOOPBACK_MTU,
                          busy_poll=os.environ.get("RCUNET_IPC_BUSY_POLL") == "1",
                          rx_spin=float(os.environ.get("RCUNET_IPC_RX_SPIN_US", "0")) / 1e6,
                          transport=(transport or os.environ.get("RCUNET_IPC_TRANSPORT")
                                     or DEFAULT_TRANSPORT))
        self.network.start()

    def client_socket(self, family: int, kind: int) -> Any:
        return self.client_host.socket(family, kind)

    def server_socket(self, family: int, kind: int) -> Any:
        raise RuntimeError("--target procs: the server's sockets live in its process")

    def make_server(self, plan: Plan, make_socket: MakeSocket, bind_host: str,
                    base_port: int, pin_cpus: Sequence[int] | None) -> RemoteServer:
        # --pin-cpu: the child pins its threads within its own CPUs, not the client's
        return RemoteServer(self.server_process, plan, base_port, pin=pin_cpus is not None)

    def describe_placement(self) -> str:
        """One line for stderr: where the two processes run."""
        client, server = self.placement
        if client is None:
            return "procs: both processes on any allowed CPU (--procs-cpus none)"
        return (f"procs: client process on CPUs {cpu_list(client)}, server process on "
                f"CPUs {cpu_list(server or ())}")

    def server_address(self, version: int) -> str:
        return MEM_SERVER[version]

    def base_port(self, opts: argparse.Namespace) -> int:
        return int(opts.port)  # a private network: neper's ports are free

    def close(self) -> None:
        self.network.close()


class RemoteServer:
    """``workloads.Server``'s surface (open, start, stop, run) for a server running in
    a child process."""

    def __init__(self, process: Any, plan: Plan, base_port: int, *, pin: bool) -> None:
        self.process = process
        self.plan = plan
        self.base_port = base_port
        self.pin = pin
        self.run = Run()
        self._parent_start: Usage | None = None

    def open(self) -> list[Any]:
        from rcunet.host.procs import ChildFailed

        self.process.start(_serve, self.plan, self.base_port, self.pin)
        try:
            kind, body = self.process.recv(timeout=CHILD_TIMEOUT)
        except (ChildFailed, TimeoutError) as exc:
            raise ConnectError(f"server process: {exc}") from None
        if kind == "error":
            raise ConnectError(body)
        return [tuple(address) for address in body]

    def start(self) -> None:
        self._parent_start = Usage.now()
        self.process.send("start")

    def stop(self, make_socket: MakeSocket, connect_host: str) -> None:
        self.process.stop()
        outcome = self.process.join(timeout=CHILD_TIMEOUT)
        if outcome.failure is not None or outcome.result is None:
            self.run.errors.append(f"server process: {outcome.failure or 'no result'}")
            return
        parent_end = Usage.now()
        self.run = outcome.result["run"]
        _print_cpu("server", self.run.usage_start, self.run.usage_end, self.process.pid)
        _print_cpu("client", self._parent_start, parent_end, os.getpid())


def _print_cpu(side: str, start: Usage | None, end: Usage | None, pid: int | None) -> None:
    """One process's CPU over the run, on stderr (neper's block has one process's)."""
    if start is not None and end is not None:
        print(f"{side} process: utime={end.utime - start.utime:.6f} "
              f"stime={end.stime - start.stime:.6f} (pid {pid}, over the run)",
              file=sys.stderr)


def _serve(child: Any, plan: Plan, base_port: int, pin: bool) -> dict[str, Any] | None:
    """In the child: the neper server on its Host until the parent's stop()."""
    version = 6 if plan.family == 10 else 4  # AF_INET6
    pin_cpus = neper.allowed_cpus() if pin else None  # this process's CPUs
    server = Server(plan, child.host.socket, "", base_port, pin_cpus)
    try:
        addresses = server.open()
    except ConnectError as exc:
        child.report(("error", str(exc)))
        return None
    child.report(("ports", [list(address) for address in addresses]))
    child.recv(timeout=CHILD_TIMEOUT)  # "start"
    server.start()
    child.stopping.wait()
    server.stop(child.host.socket, MEM_SERVER[version])
    return {"run": server.run}
