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
* ``-c -H ADDR`` (kernel, or tap: an rcunet Host on a TAP device,
  ``rcunet.bench.tap_target``): the client, against a neper server on ADDR (neper's own
  binary, ``rcunet bench WORKLOAD --server`` or ``rcunet up --serve neper``);
* ``--server`` (kernel): the server; its data ports open first, then one client run
  (connections with another test's secret are counted and closed meanwhile), then it
  exits (as neper's does).

The control connection (port ``-C``) is neper's own (``rcunet.bench.control``: CLI_HELLO,
SER_ACK, CLI_DONE, SER_BYE), and the data ports are neper's (``-P`` and up), so either
side can face a real neper binary.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from dataclasses import replace
from typing import Any

from rcunet.bench import control, neper
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


def make_target(name: str, tuning: str = "modern", procs_cpus: str = "spread") -> Any:
    if name.startswith("pmd-pytcp"):  # the peer stack on a TAP (bench/peer_pytcp.py)
        from rcunet.bench.peer_pytcp import PytcpTarget
        return PytcpTarget(blocking=name == "pmd-pytcp-blocking")
    if name == "procs":
        from rcunet.bench.procs import ProcsTarget
        target = ProcsTarget(tuning, cpus=procs_cpus)
        print(target.describe_placement(), file=sys.stderr)  # stdout: neper's block
        return target
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
        bidir=getattr(opts, "stream_bidir", False),
    )


def data_addresses(host: str, port: int, plan: Plan) -> list[tuple[str, int]]:
    """Where a client's flows go (neper's socket_connect_one): flow f to ``-P`` +
    f % --num-ports for TCP; every UDP flow to ``-P``."""
    count = plan.num_ports if plan.tcp else 1
    return [(host, port + index) for index in range(count)]


def _version(plan: Plan) -> int:
    return 6 if plan.family == socket.AF_INET6 else 4


# ============================================================================== running
def run(opts: argparse.Namespace) -> int:
    """``rcunet bench WORKLOAD``: validate, print the option dump, run, print results."""
    neper.validate(opts)
    neper.adjust_stream_directions(opts)
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
                 + (f" --tuning {opts.tuning}" if opts.target in ("mem", "procs", "tap")
                    else "")
                 + f" ({interpreter()})")
        if opts.server:
            status = _run_server(opts, log)
        elif opts.client and opts.target == "tap":
            status = _run_client_on_tap(opts, log)
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
    target = make_target(opts.target, opts.tuning, opts.procs_cpus)
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
                   measures: bool, interrupted: bool, invalid_secrets: int = 0) -> int:
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
                      measures=measures, remote_throughput=remote,
                      invalid_secrets=invalid_secrets)
    neper.emit(neper.result_lines(opts, side, summary))
    return 130 if interrupted else 0


# ============================================================================== remote
def _resolve(opts: argparse.Namespace, make_socket: Any) -> tuple[int, str]:
    """-H as (family, numeric address): getaddrinfo on Linux sockets (neper's
    getaddrinfo_or_die, honouring -4/-6); an rcunet Host takes numeric addresses."""
    if make_socket is not socket.socket:
        return (socket.AF_INET6 if ":" in opts.host else socket.AF_INET), opts.host
    wanted = socket.AF_INET6 if opts.ipv6 else socket.AF_INET if opts.ipv4 else 0
    try:
        infos = socket.getaddrinfo(opts.host, opts.control_port, wanted, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise NeperError(f"cannot resolve {opts.host}: {exc.strerror}") from None
    family, _kind, _proto, _name, address = infos[0]
    return family, str(address[0])  # an IPv4 or IPv6 socket address: its host is a str


def _connect_control(opts: argparse.Namespace, make_socket: Any, family: int,
                     host: str) -> Any:
    sock = make_socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect((host, int(opts.control_port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(CONTROL_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        sock.close()
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise NeperError(f"cannot reach {opts.host} port {opts.control_port}: {reason}") \
            from None
    return sock


def _run_client(opts: argparse.Namespace, log: neper.Log,
                make_socket: Any = socket.socket) -> int:
    """neper's client: CLI_HELLO/SER_ACK on -C, the flows on -P and up, CLI_DONE with
    our throughput, SER_BYE with the server's (printed as remote_throughput)."""
    plan = plan_from(opts)
    hello = control.Hello(plan.workload, plan.num_threads, plan.num_flows,
                          plan.test_length, 0, opts.magic)
    family, host = _resolve(opts, make_socket)
    if family != plan.family:
        plan = replace(plan, family=family)
    with _connect_control(opts, make_socket, family, host) as sock:
        try:
            ack = control.client_hello(sock, hello)
        except control.ControlError as exc:
            raise NeperError(f"control connection: {exc}") from None
        except (OSError, TimeoutError) as exc:
            raise NeperError(f"control connection: waiting for SER_ACK: {exc}") from None
        log.info(f"+++ CLI <-- SER   SER_ACK -T {ack.num_threads} -F {ack.num_flows} "
                 f"-l {ack.test_length}")
        stop = threading.Event()
        client = Client(plan, make_socket, data_addresses(host, int(opts.port), plan),
                        stop, neper.allowed_cpus() if opts.pin_cpu else None)
        client.connect()
        interrupted = _drive(client, plan, stop, log, opts.target)
        client.close()
        if client.run.errors and not interrupted:
            raise NeperError(client.run.errors[0])
        summary = neper.summarize(client.run.flows, plan.rr, opts.all_samples is not None,
                                  opts.percentiles) if plan.client_measures else None
        local = neper.local_throughput(plan.workload, summary)
        try:
            remote = control.client_done(sock, opts.magic, local)
        except (control.ControlError, OSError, TimeoutError) as exc:
            raise NeperError(f"control connection: final handshake: {exc}") from None
    return _print_results(opts, client.run.usage_start, client.run.usage_end, summary,
                          remote, plan.client_measures, interrupted)


def _run_client_on_tap(opts: argparse.Namespace, log: neper.Log) -> int:
    """``-c --target tap``: the same client on an rcunet Host on a TAP device
    (``rcunet.bench.tap_target``), which lives as long as the run."""
    from rcunet.bench.tap_target import TapTarget, TapTargetError

    try:
        target = TapTarget(opts)
    except TapTargetError as exc:
        raise NeperError(str(exc)) from None
    try:
        return _run_client(opts, log, target.client_socket)
    finally:
        target.close()


def _accept_client(listener: Any, workload: str, log: neper.Log) -> tuple[Any, int]:
    """neper's ctrl_accept: the first connection whose CLI_HELLO carries our secret;
    every other one (garbage, a short struct, another test) is an incident, closed."""
    incidents = 0
    while True:
        conn, peer = listener.accept()
        try:
            conn.settimeout(CONTROL_TIMEOUT)
            control.read_hello(conn, (workload,))
            return conn, incidents
        except (control.ControlError, OSError, TimeoutError) as exc:
            incidents += 1
            log.info(f"Invalid secret from {peer[0]}:{peer[1]}: {exc}")
            conn.close()


def _run_server(opts: argparse.Namespace, log: neper.Log) -> int:
    """neper's server: the data ports open first, then one client on -C."""
    version = 6 if opts.ipv6 else 4
    plan = plan_from(opts)
    bind_host = opts.host or ("::" if version == 6 else "0.0.0.0")
    try:
        listener = socket.create_server((bind_host, int(opts.control_port)),
                                        family=neper.family(opts), reuse_port=False)
    except OSError as exc:
        raise NeperError(f"cannot listen on {bind_host} port {opts.control_port}: "
                         f"{exc.strerror}") from None
    server = Server(plan, socket.socket, bind_host, int(opts.port),
                    neper.allowed_cpus() if opts.pin_cpu else None)
    with listener:
        server.open()
        server.start()
        log.info(f"listening on {bind_host} control port {opts.control_port}")
        conn, incidents = _accept_client(listener, plan.workload, log)
    wake_host = LOOPBACK[version] if bind_host in ("0.0.0.0", "::") else bind_host
    with conn:
        control.send_ack(conn, control.ServerSide(plan.num_threads, plan.num_flows,
                                                  plan.test_length, opts.magic))
        conn.settimeout(None)
        try:
            remote = control.wait_done(conn, opts.magic)
        except KeyboardInterrupt:
            remote = None
        if remote is None:
            log.info("Abandoning client")
        server.stop(socket.socket, wake_host)
        summary = None
        if plan.server_measures:
            summary = neper.summarize(server.run.flows, plan.rr,
                                      opts.all_samples is not None and not plan.rr)
        try:
            control.send_bye(conn, opts.magic, neper.local_throughput(plan.workload, summary))
        except OSError:
            pass  # the client is gone; the block is still ours to print
    return _print_results(opts, server.run.usage_start, server.run.usage_end, summary,
                          remote or 0, plan.server_measures, False, incidents)
