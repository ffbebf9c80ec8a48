"""Where a neper workload runs, and the three ways to run it.

Targets (``--target``):

* ``mem`` (default): two rcunet Hosts in this process, a (10.0.0.1, fd00::1) as the
  client and b (10.0.0.2, fd00::2) as the server, on an in-memory Ethernet link whose
  receive path runs in the sending thread (``inline_rx``, as Linux loopback does) and
  whose MTU is loopback's 65536.  No root needed.
* ``kernel``: Python's ``socket`` module on 127.0.0.1 / ::1 — the same workload code
  on Linux sockets, so the two targets can be compared side by side.
* ``procs``: as mem, but the server's Host and workload run in a child process on an
  inter-process link (``rcunet.bench.procs``), so the two sides do not share a GIL.

Runs:

* in process (no ``-c``, no ``--server``): both sides here; one neper block is printed,
  the measuring side's (the client's for RR, the reader's — the server — for stream),
  with ``remote_throughput`` taken from the other side as neper's control connection
  would carry it;
* ``-c -H ADDR`` (kernel): the client, against ``rcunet bench WORKLOAD --server`` on
  ADDR;
* ``--server`` (kernel): the server; one client run, then it exits (as neper's does).

The control connection (port ``-C``) is rcunet's own, not neper's wire protocol: one JSON
line each way to agree on the plan and data ports, and one each way at the end to swap
``local_throughput``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

from rcunet.bench import neper
from rcunet.bench.neper import NeperError, SideResult, Usage
from rcunet.bench.workloads import Client, ConnectError, Plan, Server

MEM_CLIENT = {4: "10.0.0.1", 6: "fd00::1"}
MEM_SERVER = {4: "10.0.0.2", 6: "fd00::2"}
LOOPBACK = {4: "127.0.0.1", 6: "::1"}
GRACE_SECONDS = 2.0  # after the deadline, wait this long before unsticking flows
STALL_SECONDS = 5.0  # count mode: no progress for this long unsticks flows
PROGRESS_AFTER = 3  # runs longer than this many seconds show a progress line on a tty
CONTROL_TIMEOUT = 30.0  # for the server's answers
CONNECT_TIMEOUT = 5.0  # for reaching the server at all
#: The mem link's MTU: Linux loopback's (``ip link show lo``), so bulk transfers move in
#: 64 KB segments as they do on the kernel target's 127.0.0.1.
LOOPBACK_MTU = 65536


# ============================================================================== targets
class MemTarget:
    """Two threaded rcunet Hosts on one in-memory Ethernet link."""

    name = "mem"

    def __init__(self, tuning: str = "modern") -> None:
        from rcunet.host.network import Network
        from rcunet.tuning import Tuning

        self.network = Network(threaded=True, tuning=Tuning.preset(tuning))
        self.client_host = self.network.host("a")
        self.server_host = self.network.host("b")
        self.network.link(self.client_host, self.server_host,
                          [f"{MEM_CLIENT[4]}/24", f"{MEM_CLIENT[6]}/64"],
                          [f"{MEM_SERVER[4]}/24", f"{MEM_SERVER[6]}/64"], inline_rx=True,
                          mtu=LOOPBACK_MTU)
        self.network.start()

    def client_socket(self, family: int, kind: int) -> Any:
        return self.client_host.socket(family, kind)

    def server_socket(self, family: int, kind: int) -> Any:
        return self.server_host.socket(family, kind)

    def server_address(self, version: int) -> str:
        return MEM_SERVER[version]

    def base_port(self, opts: argparse.Namespace) -> int:
        return int(opts.port)  # a private network: neper's ports are free

    def close(self) -> None:
        self.network.close()


class KernelTarget:
    """Linux sockets over loopback."""

    name = "kernel"

    @staticmethod
    def client_socket(family: int, kind: int) -> Any:
        return socket.socket(family, kind)

    server_socket = client_socket

    def server_address(self, version: int) -> str:
        return LOOPBACK[version]

    def base_port(self, opts: argparse.Namespace) -> int:
        return 0  # ephemeral ports: runs beside other programs never collide

    def close(self) -> None:
        pass


def make_target(name: str, tuning: str = "modern") -> Any:
    if name.startswith("pmd-pytcp"):  # the peer stack on a TAP (bench/peer_pytcp.py)
        from rcunet.bench.peer_pytcp import PytcpTarget
        return PytcpTarget(blocking=name == "pmd-pytcp-blocking")
    if name == "procs":
        from rcunet.bench.procs import ProcsTarget
        return ProcsTarget(tuning)
    return MemTarget(tuning) if name == "mem" else KernelTarget()


# ============================================================================== plan
def plan_from(opts: argparse.Namespace) -> Plan:
    rr = opts.neper_workload in neper.RR_WORKLOADS
    return Plan(
        workload=opts.neper_workload,
        family=neper.family(opts),
        num_flows=opts.num_flows,
        num_threads=opts.num_threads,
        num_ports=getattr(opts, "num_ports", 1),
        request_size=opts.request_size if rr else 1,
        response_size=opts.response_size if rr else 1,
        buffer_size=opts.buffer_size,
        test_length=opts.test_length,
        interval=neper.effective_interval(opts),
        time_wait=opts.time_wait,
        listen_backlog=opts.listen_backlog,
        no_delay=opts.no_delay,
        delay=opts.delay,
        maerts=opts.enable_tcp_maerts,
    )


def _version(plan: Plan) -> int:
    return 6 if plan.family == socket.AF_INET6 else 4


# ============================================================================== running
def run(opts: argparse.Namespace) -> int:
    """``rcunet bench WORKLOAD``: validate, print the option dump, run, print results."""
    neper.validate(opts)
    neper.emit(neper.option_dump(opts))
    if opts.dry_run:
        return 0
    if opts.pin_cpu:
        neper.emit(neper.cpuset_lines(neper.allowed_cpus()))
    log = neper.Log(opts)
    if opts.suicide_length:
        _arm_suicide_timer(opts.suicide_length, opts.neper_workload, log)
    try:
        from rcunet.lab.common import interpreter

        log.info(f"{opts.neper_workload} on --target {opts.target}"
                 + (f" --tuning {opts.tuning}" if opts.target in ("mem", "procs") else "")
                 + f" ({interpreter()})")
        if opts.server:
            status = _run_server(opts, log)
        elif opts.client:
            status = _run_client(opts, log)
        else:
            status = _run_in_process(opts, log)
        # stdout stays neper's exact block; the interpreter and GIL mode go to stderr,
        # after a completed run (an error stays one line).
        if status == 0:
            print(f"rcunet bench {opts.neper_workload}: --target {opts.target}, "
                  f"{interpreter()}", file=sys.stderr)
        return status
    except (NeperError, ConnectError) as exc:
        log.info(f"error: {exc}")
        print(f"{opts.neper_workload}: {exc}", file=sys.stderr)
        return 1
    finally:
        log.close()


def _arm_suicide_timer(seconds: int, workload: str, log: neper.Log) -> None:
    """neper's -s: a hard kill timer, whatever the run is doing (a hung peer, a stuck
    flow): one line on stderr and exit status 1, no results."""

    def expire() -> None:
        log.info("suicide timeout")
        print(f"{workload}: suicide timeout after {seconds} s (-s)", file=sys.stderr,
              flush=True)
        os._exit(1)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def _run_in_process(opts: argparse.Namespace, log: neper.Log) -> int:
    plan = plan_from(opts)
    target = make_target(opts.target, opts.tuning)
    try:
        version = _version(plan)
        pin_cpus = neper.allowed_cpus() if opts.pin_cpu else None
        server = getattr(target, "make_server", Server)(plan, target.server_socket, "",
                                                         target.base_port(opts), pin_cpus)
        ports = [address[1] for address in server.open()]
        server.start()
        connect_host = target.server_address(version)
        stop = threading.Event()
        client = Client(plan, target.client_socket, [(connect_host, p) for p in ports], stop,
                        pin_cpus)
        try:
            client.connect()
        except ConnectError:
            server.stop(target.client_socket, connect_host)
            raise
        interrupted = _drive(client, plan, stop, log, opts.target)
        client.close()
        server.stop(target.client_socket, connect_host)
        client.run.usage_end = client.run.usage_end or Usage.now()
        return _report(opts, client, server, interrupted)
    finally:
        target.close()


def _drive(client: Client, plan: Plan, stop: threading.Event, log: neper.Log,
           target_name: str) -> bool:
    """Run the client threads to their end; returns True when interrupted (Ctrl-C).

    A Ctrl-C sets ``stop``: every thread ends its current round and the block is still
    printed.  Flows that will never answer (a lost UDP datagram, an interrupted wait)
    are shut down after a grace period so the run always ends."""
    client.start()
    begin = time.monotonic()
    show_progress = sys.stderr.isatty() and (plan.test_length > PROGRESS_AFTER
                                             or plan.test_length < 0)
    interrupted_at: float | None = None
    last_events, last_change = -1, begin
    unstuck = False
    while client.alive():
        try:
            client.join(0.25)
            now = time.monotonic()
            events = client.events()
            if events != last_events:
                last_events, last_change = events, now
            if not unstuck and _overdue(plan, now, begin, last_change, interrupted_at):
                stop.set()
                client.unstick()
                unstuck = True
            if show_progress:
                print(f"\r{plan.workload} --target {target_name}: {now - begin:5.1f} s, "
                      f"{events} {'transactions' if plan.rr else 'bytes sent or read'}",
                      end="", file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            if interrupted_at is None:
                interrupted_at = time.monotonic()
                log.info("interrupted")
            stop.set()
    if show_progress:
        print(file=sys.stderr)
    client.run.usage_end = Usage.now()
    return interrupted_at is not None


def _overdue(plan: Plan, now: float, begin: float, last_change: float,
             interrupted_at: float | None) -> bool:
    """Time to wake flows that still block: past the deadline plus a grace period; for a
    transaction count, no progress for STALL_SECONDS; a second after a Ctrl-C."""
    if interrupted_at is not None and now - interrupted_at > 1.0:
        return True
    if plan.test_length > 0:
        return now - begin > plan.test_length + GRACE_SECONDS
    return now - last_change > STALL_SECONDS


def _report(opts: argparse.Namespace, client: Client, server: Server,
            interrupted: bool) -> int:
    workload = opts.neper_workload
    rr = workload in neper.RR_WORKLOADS
    errors = client.run.errors + server.run.errors
    if errors and not interrupted:
        raise NeperError(errors[0])
    want_csv = opts.all_samples is not None
    plan = client.plan
    client_summary = server_summary = None
    if plan.client_measures:
        client_summary = neper.summarize(client.run.flows, rr, want_csv, opts.percentiles)
    if plan.server_measures:
        server_summary = neper.summarize(server.run.flows, rr, want_csv and not rr)
    if plan.client_measures:  # RR, or stream -M (the client reads)
        run, summary = client.run, client_summary
        remote = neper.local_throughput(workload, server_summary)
    else:  # the reader (server) measures; the writer reports local_throughput=0
        run, summary, remote = server.run, server_summary, 0
    return _print_results(opts, run.usage_start, run.usage_end, summary, remote, True,
                          interrupted)


def _print_results(opts: argparse.Namespace, usage_start: Usage | None,
                   usage_end: Usage | None, summary: neper.Summary | None, remote: int,
                   measures: bool, interrupted: bool) -> int:
    rr = opts.neper_workload in neper.RR_WORKLOADS
    if measures and summary is not None and summary.num_samples < 2:
        raise NeperError(f"only {summary.num_samples} sample(s): too few to compute a "
                         "throughput (run longer, or more transactions)")
    if measures and summary is not None and opts.all_samples is not None:
        try:
            neper.write_csv(opts.all_samples, rr, opts.percentiles, summary)
        except OSError as exc:
            raise NeperError(f"cannot write {opts.all_samples}: {exc.strerror}") from None
    start = usage_start or Usage.now()
    side = SideResult(flows=[], usage_start=start, usage_end=usage_end or Usage.now(),
                      measures=measures, remote_throughput=remote)
    neper.emit(neper.result_lines(opts, side, summary))
    return 130 if interrupted else 0


# ============================================================================== remote
def _send_json(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def _recv_json(reader: Any, what: str) -> dict[str, Any]:
    line = reader.readline()
    if not line:
        raise NeperError(f"the peer vanished ({what})")
    try:
        message = json.loads(line)
    except ValueError:
        raise NeperError(f"garbled control message ({what})") from None
    if not isinstance(message, dict):
        raise NeperError(f"garbled control message ({what})")
    if "error" in message:
        raise NeperError(f"server: {message['error']}")
    return message


def _run_client(opts: argparse.Namespace, log: neper.Log) -> int:
    plan = plan_from(opts)
    target = KernelTarget()
    try:
        control = socket.create_connection((opts.host, int(opts.control_port)),
                                           timeout=CONNECT_TIMEOUT)
        control.settimeout(CONTROL_TIMEOUT)
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise NeperError(f"cannot reach {opts.host} port {opts.control_port}: {reason}") \
            from None
    with control, control.makefile("r", encoding="utf-8") as reader:
        try:
            _send_json(control, {"magic": 42, "plan": asdict(plan)})
            ports = _recv_json(reader, "waiting for the data ports").get("ports")
        except (OSError, TimeoutError) as exc:
            raise NeperError(f"control connection: {exc}") from None
        if not isinstance(ports, list) or not ports:
            raise NeperError("the server sent no data ports")
        stop = threading.Event()
        client = Client(plan, target.client_socket, [(opts.host, int(p)) for p in ports], stop,
                        neper.allowed_cpus() if opts.pin_cpu else None)
        client.connect()
        interrupted = _drive(client, plan, stop, log, "kernel")
        client.close()
        if client.run.errors and not interrupted:
            raise NeperError(client.run.errors[0])
        rr = plan.rr
        summary = neper.summarize(client.run.flows, rr, opts.all_samples is not None,
                                  opts.percentiles) if plan.client_measures else None
        local = neper.local_throughput(plan.workload, summary)
        control.settimeout(CONTROL_TIMEOUT)
        try:
            _send_json(control, {"stop": True, "local_throughput": local})
            remote = int(_recv_json(reader, "waiting for the server's result")
                         .get("local_throughput", 0))
        except (OSError, TimeoutError, ValueError) as exc:
            raise NeperError(f"the server vanished (control connection: {exc})") from None
    return _print_results(opts, client.run.usage_start, client.run.usage_end, summary,
                          remote, plan.client_measures, interrupted)


def _run_server(opts: argparse.Namespace, log: neper.Log) -> int:
    version = 6 if opts.ipv6 else 4
    bind_host = opts.host or ("::" if version == 6 else "0.0.0.0")
    try:
        listener = socket.create_server((bind_host, int(opts.control_port)),
                                        family=neper.family(opts), reuse_port=False)
    except OSError as exc:
        raise NeperError(f"cannot listen on {bind_host} port {opts.control_port}: "
                         f"{exc.strerror}") from None
    with listener:
        log.info(f"listening on {bind_host} control port {opts.control_port}")
        control, _peer = listener.accept()
    with control, control.makefile("r", encoding="utf-8") as reader:
        message = _recv_json(reader, "waiting for the client's plan")
        plan = _check_remote_plan(opts, message, control)
        server = Server(plan, socket.socket, bind_host, int(opts.port),
                        neper.allowed_cpus() if opts.pin_cpu else None)
        try:
            ports = [address[1] for address in server.open()]
        except ConnectError as exc:
            _send_json(control, {"error": str(exc)})
            raise
        server.start()
        _send_json(control, {"ports": ports})
        control.settimeout(None)
        try:
            end = _recv_json(reader, "waiting for the end of the run")
        except KeyboardInterrupt:
            end = {}
        wake_host = LOOPBACK[version] if bind_host in ("0.0.0.0", "::") else bind_host
        server.stop(socket.socket, wake_host)
        rr = plan.rr
        summary = None
        if plan.server_measures:
            summary = neper.summarize(server.run.flows, rr,
                                      opts.all_samples is not None and not rr)
        _send_json(control, {"local_throughput":
                             neper.local_throughput(plan.workload, summary)})
    remote = int(end.get("local_throughput", 0))
    return _print_results(opts, server.run.usage_start, server.run.usage_end, summary,
                          remote, plan.server_measures, False)


def _check_remote_plan(opts: argparse.Namespace, message: dict[str, Any],
                       control: socket.socket) -> Plan:
    fields = message.get("plan")
    problem = None
    if message.get("magic") != 42 or not isinstance(fields, dict):
        problem = "not an rcunet neper client (bad magic)"
    elif fields.get("workload") != opts.neper_workload:
        problem = f"this server runs {opts.neper_workload}, the client asked for " \
                  f"{fields.get('workload')}"
    if problem is None:
        try:
            plan = Plan(**fields)  # type: ignore[arg-type]
        except TypeError:
            problem = "the client's plan has unknown fields"
    if problem is not None:
        _send_json(control, {"error": problem})
        raise NeperError(problem)
    return plan
