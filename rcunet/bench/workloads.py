"""The five neper workloads as client and server code over a socket factory.

The same functions run on rcunet Hosts (``--target mem``) and on Linux sockets
(``--target kernel``): they only call the standard socket API (socket, bind, listen,
accept, connect, send/sendall, recv, setsockopt, shutdown, close) on objects made by
``make_socket(family, type)``.

Threading (bench-conventions.md §1.1 and §1.2):

* **client**: ``-T`` threads, flow ``f`` on thread ``f % T``.  RR: one request
  outstanding per flow; a thread with several flows waits for their responses in a
  selector (neper's epoll loop), so each flow goes on as soon as its own response is in.
  CRR: a thread with several flows connects them without blocking and waits in a
  selector (neper's async_connect); a lone flow uses a blocking connect().  Stream: the
  writer writes ``-B`` bytes to each flow in turn with blocking calls; the reader
  (``-M``) reads them in turn.
* **server**: one thread per flow (a reader never waits on one flow while another has
  data, so no flow can block another), and for tcp_crr ``max(T, num_ports)`` accept
  threads.  neper's server uses ``-T`` epoll threads.

A transaction's latency is measured as neper does (§1.2): RR from just before the
request's send to the end of the response; CRR from the end of the flow's previous
transaction (so it covers close, socket, connect, handshake, request and response).
"""

from __future__ import annotations

import errno
import itertools
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rcunet.bench.neper import FlowStats, ThreadClock, Usage, monotonic_ns, pin_thread

MakeSocket = Callable[[int, int], Any]
Address = tuple[Any, ...]
LINGER_ABORT = struct.pack("ii", 1, 0)  # SO_LINGER {on, 0 s}: close sends RST, no TIME_WAIT
_JOIN_SLICE = 0.2
_WAKE_ATTEMPTS = 10
_SELECT_TIMEOUT = 0.25  # a selecting client thread re-checks ``stop`` this often


class PeerVanished(Exception):
    """The other side closed or reset a flow in the middle of the test."""


@dataclass(frozen=True)
class Plan:
    """What both sides of a run agree on (neper's client sends these to its server)."""

    workload: str
    family: int
    num_flows: int = 1
    num_threads: int = 1
    num_ports: int = 1
    request_size: int = 1
    response_size: int = 1
    buffer_size: int = 65536
    test_length: int = 10  # seconds, or -transactions for RR
    interval: float = 1.0
    time_wait: bool = False
    listen_backlog: int = 128
    no_delay: bool = False
    delay: int = 0  # ns to wait after each send (neper -D)
    maerts: bool = False  # tcp_stream -M: the server writes, the client reads
    bidir: bool = False  # tcp_stream -r/-w beyond the defaults: both ends read and write

    # tcp_stream directions (neper's tcp_stream_main.c): the client writes and the server
    # reads; -M swaps them (and overrides -r/-w); -r on the client or -w on the server
    # adds the other direction.
    @property
    def client_writes(self) -> bool:
        return not self.maerts or self.bidir

    @property
    def client_reads(self) -> bool:
        return self.maerts or self.bidir

    def server_reads(self) -> bool:
        return self.client_writes

    def server_writes(self) -> bool:
        return self.client_reads

    @property
    def client_measures(self) -> bool:
        """RR clients measure; in stream the reader does."""
        return self.rr or self.client_reads

    @property
    def server_measures(self) -> bool:
        """The rr servers count transactions (not tcp_crr's: neper PR #26); in stream
        the server measures when it reads."""
        return self.workload != "tcp_crr" and (self.rr or self.server_reads())

    @property
    def tcp(self) -> bool:
        return self.workload.startswith("tcp")

    @property
    def rr(self) -> bool:
        return self.workload.endswith("rr")

    def flows_of_thread(self, thread_index: int) -> list[int]:
        return list(range(thread_index, self.num_flows, self.num_threads))


@dataclass
class Run:
    """One side's outcome: flow statistics, rusage around the data phase, and the
    first error a worker met (None when the run was clean)."""

    flows: list[FlowStats] = field(default_factory=list)
    usage_start: Usage | None = None
    usage_end: Usage | None = None
    errors: list[str] = field(default_factory=list)  # list.append is atomic


class Budget:
    """When a client stops: at a deadline (``-l N``) or after N transactions shared by
    all flows (``-l -N``).

    Concurrency: tickets come from itertools.count (one atomic next() per claim)."""

    def __init__(self, test_length: int, start: int) -> None:
        self.count_mode = test_length < 0
        self.limit = -test_length
        self.deadline = start + test_length * 1_000_000_000
        self._tickets = itertools.count()

    def take(self, now: int) -> bool:
        if self.count_mode:
            return next(self._tickets) < self.limit
        return now < self.deadline


def _describe(exc: BaseException, what: str) -> str:
    if isinstance(exc, PeerVanished):
        return f"{what}: the peer vanished ({exc})"
    if isinstance(exc, ConnectionRefusedError):
        return f"{what}: connection refused (is the server running?)"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return f"{what}: the peer vanished (connection reset)"
    if isinstance(exc, OSError) and exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return f"{what}: host unreachable ({exc.strerror})"
    if isinstance(exc, TimeoutError):
        return f"{what}: timed out"
    return f"{what}: {type(exc).__name__}: {exc}"


def recv_exact(sock: Any, size: int, buffer_size: int) -> bool:
    """Read exactly ``size`` bytes; False on EOF before the first byte (the peer ended
    the flow between messages); PeerVanished on EOF inside a message."""
    remaining = size
    while remaining:
        data = sock.recv(min(remaining, buffer_size))
        if not data:
            if remaining == size:
                return False
            raise PeerVanished(f"EOF after {size - remaining} of {size} bytes")
        remaining -= len(data)
    return True


def close_quietly(sock: Any) -> None:
    try:
        sock.close()
    except OSError:
        pass


# ============================================================================== client
@dataclass
class _ClientFlow:
    index: int
    address: Address
    stats: FlowStats
    sock: Any = None
    started_at: int = 0


class Client:
    """The client side: connect the flows, run ``-T`` threads until the budget is
    spent or ``stop`` is set, close the flows.

    Concurrency: each flow (its socket, its FlowStats) belongs to one worker thread.  The
    controlling thread only sets ``stop`` (an Event), reads ``stats.things`` for progress
    (one attribute load; a stale count is fine), and calls ``unstick()``, whose
    ``shutdown()`` from another thread is the socket API's way to wake a blocked recv.
    Errors go to ``run.errors`` (list.append is atomic); results are read after join().
    """

    def __init__(self, plan: Plan, make_socket: MakeSocket, addresses: Sequence[Address],
                 stop: threading.Event, pin_cpus: Sequence[int] | None = None) -> None:
        self.plan = plan
        self.make_socket = make_socket
        self.addresses = list(addresses)  # flow f uses addresses[f % len(addresses)]
        self.stop = stop
        self.pin_cpus = pin_cpus  # --pin-cpu: thread i on pin_cpus[i % len]; None: no pinning
        self.run = Run()
        self._threads: list[threading.Thread] = []
        self._done: list[threading.Event] = []
        self._flows: list[_ClientFlow] = []

    # -- setup ----------
    def connect(self) -> None:
        """Open every flow (tcp_crr opens one per transaction instead)."""
        plan = self.plan
        for thread_index in range(plan.num_threads):
            clock = ThreadClock(plan.interval)
            for flow_index in plan.flows_of_thread(thread_index):
                address = self.addresses[flow_index % len(self.addresses)]
                stats = FlowStats(thread_index, flow_index, clock, keep_latency=True)
                self._flows.append(_ClientFlow(flow_index, address, stats))
        self.run.flows = [flow.stats for flow in sorted(self._flows, key=lambda f: f.index)]
        if plan.workload == "tcp_crr":
            return
        kind = socket.SOCK_STREAM if plan.tcp else socket.SOCK_DGRAM
        try:
            for flow in sorted(self._flows, key=lambda f: f.index):
                flow.sock = self._open(kind)
                flow.sock.connect(flow.address)
        except OSError as exc:
            self.close()
            raise ConnectError(_describe(exc, f"connecting to {flow.address[0]} "
                                              f"port {flow.address[1]}")) from None

    def _open(self, kind: int) -> Any:
        sock = self.make_socket(self.plan.family, kind)
        if self.plan.no_delay and kind == socket.SOCK_STREAM:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def start(self) -> None:
        plan = self.plan
        body = {"tcp_rr": self._rr_thread, "udp_rr": self._rr_thread,
                "tcp_crr": self._crr_thread, "tcp_stream": self._stream_thread,
                "udp_stream": self._stream_thread}[plan.workload]
        self.run.usage_start = Usage.now()
        budget = Budget(plan.test_length, monotonic_ns())
        bodies = [body]
        if plan.workload == "tcp_stream" and plan.client_reads and plan.client_writes:
            bodies.append(self._read_thread)  # -rw: a reader beside each writer
        for thread_index in range(plan.num_threads):
            flows = [f for f in self._flows if f.stats.thread_index == thread_index]
            for role, work in enumerate(bodies):
                done = threading.Event()
                thread = threading.Thread(target=self._guard,
                                          args=(thread_index, work, flows, budget, done),
                                          name=f"neper-client-{thread_index}"
                                               + ("-rx" if role else ""), daemon=True)
                self._threads.append(thread)
                self._done.append(done)
                thread.start()

    # Thread.join() interrupted by Ctrl-C can leave is_alive() False for a thread that
    # still runs (CPython 3.11), so completion is each thread's own Event.
    def alive(self) -> bool:
        return not all(done.is_set() for done in self._done)

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds in all; True when every thread has finished."""
        deadline = time.monotonic() + timeout
        for done in self._done:
            if not done.wait(max(0.0, deadline - time.monotonic())):
                return False
        for thread in self._threads:
            thread.join()  # finished: returns at once
        return True

    def unstick(self) -> None:
        """Wake threads blocked on a flow that will never answer (a lost UDP datagram):
        shutting a socket down makes its blocked recv return."""
        for flow in self._flows:
            sock = flow.sock  # one attribute load: tcp_crr threads replace it as they go
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        for flow in self._flows:
            if flow.sock is not None:
                self._close_flow(flow)

    def events(self) -> int:
        # each read is one attribute load of an int; the sum is a progress estimate
        return sum(flow.stats.things for flow in self._flows)

    # -- threads ----------
    def _guard(self, index: int, body: Callable[[list[_ClientFlow], Budget], None],
               flows: list[_ClientFlow], budget: Budget, done: threading.Event) -> None:
        try:
            pin_thread(self.pin_cpus, index)
            body(flows, budget)
        except (OSError, PeerVanished) as exc:
            if not self.stop.is_set():
                self.run.errors.append(_describe(exc, "client"))
                self.stop.set()
        finally:
            now = monotonic_ns()
            for flow in flows:
                flow.stats.finish(now)
            done.set()

    def _rr_thread(self, flows: list[_ClientFlow], budget: Budget) -> None:
        """One request outstanding per flow.  A lone flow waits in recv(); several
        wait in a selector, as neper's epoll loop does, so each flow sends its next
        request as soon as its own response is in."""
        request = bytes(self.plan.request_size)
        if len(flows) > 1:
            self._rr_multiplexed(flows, budget, request)
            return
        flow = flows[0]
        while not self.stop.is_set() and self._send_request(flow, budget, request):
            if not self._read_response(flow):
                return

    def _rr_multiplexed(self, flows: list[_ClientFlow], budget: Budget,
                        request: bytes) -> None:
        with selectors.DefaultSelector() as selector:
            for flow in flows:
                if not self._send_request(flow, budget, request):
                    break
                selector.register(flow.sock, selectors.EVENT_READ, flow)
            outstanding = len(selector.get_map())
            while outstanding and not self.stop.is_set():
                for key, _events in selector.select(_SELECT_TIMEOUT):
                    flow = key.data
                    if not self._read_response(flow):
                        return
                    if self.stop.is_set() or not self._send_request(flow, budget, request):
                        selector.unregister(flow.sock)
                        outstanding -= 1

    def _send_request(self, flow: _ClientFlow, budget: Budget, request: bytes) -> bool:
        """Start a transaction on ``flow`` unless the budget is spent."""
        now = monotonic_ns()
        if not budget.take(now):
            return False
        flow.started_at = now
        flow.sock.sendall(request)
        if self.plan.delay:
            time.sleep(self.plan.delay / 1e9)
        return True

    def _read_response(self, flow: _ClientFlow) -> bool:
        """Finish the transaction on ``flow``; False when unstick() shut it down."""
        plan = self.plan
        if plan.tcp:
            if not recv_exact(flow.sock, plan.response_size, plan.buffer_size):
                raise PeerVanished("connection closed by the server")
        elif not flow.sock.recv(max(plan.response_size, plan.buffer_size)):
            return False  # shut down by unstick(): the test is over
        now = monotonic_ns()
        flow.stats.event(now, 1, (now - flow.started_at) / 1e9)
        return True

    def _crr_thread(self, flows: list[_ClientFlow], budget: Budget) -> None:
        """One connection per transaction.  A lone flow connects with a blocking
        connect(); several connect without blocking and wait in a selector (neper's
        async_connect, its crr default), each flow reconnecting as soon as its own
        transaction is done."""
        plan, stop = self.plan, self.stop
        request = bytes(plan.request_size)
        start = monotonic_ns()
        for flow in flows:
            flow.started_at = start  # the first latency runs from the thread's start
        if len(flows) > 1:
            self._crr_multiplexed(flows, budget, request)
            return
        while not stop.is_set():
            active = []
            for flow in flows:
                if flow.sock is not None:
                    self._close_flow(flow)
                now = monotonic_ns()
                if not budget.take(now):
                    break
                flow.sock = self._open(socket.SOCK_STREAM)
                flow.sock.connect(flow.address)
                active.append(flow)
            if not active:
                return
            for flow in active:
                flow.sock.sendall(request)
            for flow in active:
                if not recv_exact(flow.sock, plan.response_size, plan.buffer_size):
                    raise PeerVanished("connection closed by the server")
                now = monotonic_ns()
                flow.stats.event(now, 1, (now - flow.started_at) / 1e9)
                flow.started_at = now

    def _crr_multiplexed(self, flows: list[_ClientFlow], budget: Budget,
                         request: bytes) -> None:
        with selectors.DefaultSelector() as selector:
            for flow in flows:
                if not self._start_connect(flow, budget, selector):
                    break
            while selector.get_map() and not self.stop.is_set():
                for key, events in selector.select(_SELECT_TIMEOUT):
                    flow = key.data
                    if events & selectors.EVENT_WRITE:  # connected (or failed)
                        error = flow.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                        if error:
                            raise OSError(error, os.strerror(error))
                        flow.sock.setblocking(True)
                        flow.sock.sendall(request)
                        selector.modify(flow.sock, selectors.EVENT_READ, flow)
                        continue
                    if not recv_exact(flow.sock, self.plan.response_size,
                                      self.plan.buffer_size):
                        raise PeerVanished("connection closed by the server")
                    now = monotonic_ns()
                    flow.stats.event(now, 1, (now - flow.started_at) / 1e9)
                    flow.started_at = now
                    selector.unregister(flow.sock)
                    self._close_flow(flow)
                    if not self.stop.is_set():
                        self._start_connect(flow, budget, selector)

    def _start_connect(self, flow: _ClientFlow, budget: Budget,
                       selector: selectors.BaseSelector) -> bool:
        """A new connection for ``flow``'s next transaction, connecting in the
        background; False when the budget is spent."""
        if not budget.take(monotonic_ns()):
            return False
        sock = self._open(socket.SOCK_STREAM)
        flow.sock = sock
        sock.setblocking(False)
        status = sock.connect_ex(flow.address)
        if status not in (0, errno.EINPROGRESS):
            raise OSError(status, os.strerror(status))
        selector.register(sock, selectors.EVENT_WRITE, flow)
        return True

    def _stream_thread(self, flows: list[_ClientFlow], budget: Budget) -> None:
        if not self.plan.client_writes:
            self._read_thread(flows, budget)
            return
        chunk = bytes(self.plan.buffer_size)
        stop = self.stop
        tcp = self.plan.tcp
        delay = self.plan.delay / 1e9
        size = len(chunk)
        counts_reads = self.plan.client_reads  # -rw: the flow's stats are the reader's
        while not stop.is_set() and budget.take(monotonic_ns()):
            for flow in flows:
                if tcp:
                    flow.sock.sendall(chunk)
                else:
                    try:
                        flow.sock.send(chunk)
                    except (BlockingIOError, ConnectionRefusedError):
                        pass  # ENOBUFS-like pressure or a stale ICMP error: datagrams drop
                if not counts_reads:
                    flow.stats.count(size)  # the writer measures nothing: progress only
                if delay:
                    time.sleep(delay)

    def _read_thread(self, flows: list[_ClientFlow], budget: Budget) -> None:
        """tcp_stream -M or -r: read each flow in turn (the server writes on every flow,
        so a flow without data now has some soon)."""
        bufsize, stop = self.plan.buffer_size, self.stop
        while not stop.is_set():
            for flow in flows:
                data = flow.sock.recv(bufsize)
                if not data:
                    raise PeerVanished("the server closed a flow")
                now = monotonic_ns()
                flow.stats.event(now, len(data))
                if not budget.take(now):
                    return

    def _close_flow(self, flow: _ClientFlow) -> None:
        sock, flow.sock = flow.sock, None
        if self.plan.tcp and not self.plan.time_wait:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ABORT)
            except OSError:
                pass  # the socket already failed; close() below still releases it
        close_quietly(sock)


class ConnectError(Exception):
    """The client could not open its flows (message ready to print)."""


# ============================================================================== server
class Server:
    """The server side, laid out as neper's ``socket_listen``: ``--num-ports`` listeners
    on consecutive ports from ``-P`` (TCP), or one socket on ``-P`` that every flow of
    every client sends to (UDP: neper's client connects all its flows to ``-P``);
    a thread per accepted flow (accept threads for tcp_crr), ``-T`` threads on the UDP
    socket, until ``stop()``.  Like neper's server it takes whatever flows arrive: the
    client's ``-F`` is its own business.

    Concurrency: a flow's socket and FlowStats belong to its thread.  ``_threads_lock``
    guards ``_threads`` and ``run.flows`` (appended by acceptor threads, read by
    ``stop()``/``events()``); ``_conns`` and ``run.errors`` are append-only lists
    (list.append is atomic) read in full after the threads are joined (or, to shut
    sockets down, while some are still blocked).  ``stopping`` (an Event) tells every
    thread that wakes up to return.
    """

    def __init__(self, plan: Plan, make_socket: MakeSocket, bind_host: str,
                 base_port: int, pin_cpus: Sequence[int] | None = None) -> None:
        self.plan = plan
        self.make_socket = make_socket
        self.pin_cpus = pin_cpus  # --pin-cpu: the i-th thread spawned on pin_cpus[i % len]
        self.bind_host = bind_host
        self.base_port = base_port  # 0: every socket takes an ephemeral port
        self.run = Run()
        self.stopping = threading.Event()
        self._sockets: list[Any] = []  # listeners (TCP) or flow sockets (UDP)
        self._conns: list[Any] = []  # accepted connections; list.append is atomic
        self._threads: list[threading.Thread] = []
        self._threads_lock = threading.Lock()
        self.addresses: list[Address] = []

    def _port(self, index: int) -> int:
        return self.base_port + index if self.base_port else 0

    def open(self) -> list[Address]:
        """Bind every data socket; returns the addresses the client connects to."""
        plan = self.plan
        count = plan.num_ports if plan.tcp else 1
        kind = socket.SOCK_STREAM if plan.tcp else socket.SOCK_DGRAM
        try:
            for index in range(count):
                sock = self.make_socket(plan.family, kind)
                self._sockets.append(sock)
                if plan.tcp and self.base_port:
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    except OSError:
                        pass  # only speeds up restarting a server on a fixed port
                sock.bind((self.bind_host, self._port(index)))
                if plan.tcp:
                    sock.listen(plan.listen_backlog)
                self.addresses.append(sock.getsockname())
        except OSError as exc:
            self.close()
            raise ConnectError(_describe(exc, f"server: binding {self.bind_host}")) from None
        return self.addresses

    def start(self) -> None:
        plan = self.plan
        self.run.usage_start = Usage.now()
        if plan.workload == "tcp_crr":
            for index in range(max(plan.num_threads, plan.num_ports)):
                self._spawn(f"neper-accept-{index}", self._crr_acceptor,
                            self._sockets[index % plan.num_ports])
        elif plan.tcp:
            for index, listener in enumerate(self._sockets):
                self._spawn(f"neper-accept-{index}", self._acceptor, listener)
        else:
            for index in range(plan.num_threads):
                self._spawn(f"neper-server-{index}", self._serve_flow, self._sockets[0],
                            None)

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        with self._threads_lock:
            index = len(self._threads)
            thread = threading.Thread(target=self._guard, args=(index, target, *args),
                                      name=name, daemon=True)
            self._threads.append(thread)
        thread.start()

    def _guard(self, index: int, target: Callable[..., None], *args: Any) -> None:
        try:
            pin_thread(self.pin_cpus, index)
            target(*args)
        except (OSError, PeerVanished) as exc:
            if not self.stopping.is_set():
                self.run.errors.append(_describe(exc, "server"))

    def _new_stats(self) -> FlowStats:
        with self._threads_lock:
            index = len(self.run.flows)
            stats = FlowStats(index, index, ThreadClock(self.plan.interval),
                              keep_latency=False)
            self.run.flows.append(stats)
        return stats

    # -- TCP rr / stream ----------
    def _acceptor(self, listener: Any) -> None:
        while True:
            conn, _address = listener.accept()
            if self.stopping.is_set():
                close_quietly(conn)
                return
            if self.plan.no_delay:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns.append(conn)
            self._spawn(f"neper-server-{len(self._conns) - 1}", self._serve_flow, conn,
                        self._new_stats())

    def _serve_flow(self, sock: Any, stats: FlowStats | None) -> None:
        plan = self.plan
        if stats is None:
            stats = self._new_stats()
        if plan.rr:
            self._serve_rr(sock, stats)
        elif plan.server_reads():
            if plan.server_writes():  # -rw: a writer beside the reader
                self._spawn("neper-server-tx", self._write_stream, sock)
            self._serve_stream(sock, stats)
        else:
            self._write_stream(sock)
        stats.finish(monotonic_ns())

    def _serve_rr(self, sock: Any, stats: FlowStats) -> None:
        plan, stopping = self.plan, self.stopping
        response = bytes(plan.response_size)
        if plan.tcp:
            try:
                while recv_exact(sock, plan.request_size, plan.buffer_size):
                    sock.sendall(response)
                    stats.event(monotonic_ns(), 1)
            except ConnectionResetError:
                pass  # the client's abortive close (SO_LINGER 0) ends the flow
            return
        bufsize = max(plan.request_size, plan.buffer_size)
        while True:
            _data, peer = sock.recvfrom(bufsize)
            if stopping.is_set():
                return
            sock.sendto(response, peer)
            stats.event(monotonic_ns(), 1)

    def _serve_stream(self, sock: Any, stats: FlowStats) -> None:
        bufsize, stopping, tcp = self.plan.buffer_size, self.stopping, self.plan.tcp
        while True:
            try:
                data = sock.recv(bufsize)
            except ConnectionResetError:
                return  # the client's abortive close (SO_LINGER 0) ends the flow
            if tcp and not data:
                return
            if stopping.is_set():
                return
            stats.event(monotonic_ns(), len(data))

    def _write_stream(self, sock: Any) -> None:
        """tcp_stream -M: write until the client closes the flow (or the run stops)."""
        chunk, stopping = bytes(self.plan.buffer_size), self.stopping
        try:
            while not stopping.is_set():
                sock.sendall(chunk)
        except (ConnectionResetError, BrokenPipeError):
            pass  # the client's close ends the flow

    # -- tcp_crr ----------
    def _crr_acceptor(self, listener: Any) -> None:
        """Accept, read the request, answer, and keep the connection until the client
        closes it (neper's server waits for the RST or EOF); no statistics (neper
        PR #26)."""
        plan = self.plan
        response = bytes(plan.response_size)
        waiting: list[Any] = []
        try:
            while True:
                conn, _address = listener.accept()
                if self.stopping.is_set():
                    close_quietly(conn)
                    return
                if plan.no_delay:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    if recv_exact(conn, plan.request_size, plan.buffer_size):
                        conn.sendall(response)
                        conn.setblocking(False)
                        waiting.append(conn)
                    else:
                        close_quietly(conn)
                except (ConnectionResetError, BrokenPipeError, PeerVanished):
                    close_quietly(conn)  # the client went on without this answer
                waiting = _reap_closed(waiting)
        finally:
            for conn in waiting:
                close_quietly(conn)

    # -- stopping ----------
    def stop(self, make_socket: MakeSocket, connect_host: str) -> None:
        """End the run (the client is done): wake every thread still blocked on a
        socket (a connection to each listener, shutdown of the accepted TCP flows, a
        datagram to the UDP socket), so each flow's last snapshot is taken now, as
        neper's thread_flush_stat does, and not when the client gets round to closing
        its sockets (neper's client closes them only when it exits)."""
        plan = self.plan
        self.stopping.set()
        if plan.tcp:  # a connection wakes each acceptor blocked in accept()
            acceptors = max(plan.num_threads, plan.num_ports) \
                if plan.workload == "tcp_crr" else plan.num_ports
            for index in range(acceptors):
                port = self.addresses[index % plan.num_ports][1]
                try:
                    with make_socket(plan.family, socket.SOCK_STREAM) as wake:
                        wake.connect((connect_host, port))
                except OSError:
                    pass
            _shutdown_all(self._conns)
        else:
            self._wake_udp(make_socket, connect_host)
        if not self.join(2.0):
            _shutdown_all(self._conns + self._sockets)
            self.join(2.0)
        self.run.usage_end = Usage.now()
        self.close()

    def _wake_udp(self, make_socket: MakeSocket, connect_host: str) -> None:
        """An empty datagram to every flow socket, again until the threads end: a full
        receive queue (udp_stream) drops the first ones."""
        try:
            with make_socket(self.plan.family, socket.SOCK_DGRAM) as wake:
                for _attempt in range(_WAKE_ATTEMPTS):
                    for _thread in range(self.plan.num_threads):
                        wake.sendto(b"", (connect_host, self.addresses[0][1]))
                    if self.join(_JOIN_SLICE):
                        return
        except OSError:
            pass  # the threads are shut down below

    def join(self, timeout: float) -> bool:
        with self._threads_lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)
        return not any(t.is_alive() for t in threads)

    def events(self) -> int:
        with self._threads_lock:
            flows = list(self.run.flows)
        return sum(stats.things for stats in flows)

    def close(self) -> None:
        for sock in self._conns + self._sockets:
            close_quietly(sock)


def _shutdown_all(socks: list[Any]) -> None:
    for sock in list(socks):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _reap_closed(conns: list[Any]) -> list[Any]:
    """Close the connections whose client has closed (EOF or RST); keep the rest."""
    still_open = []
    for conn in conns:
        try:
            data = conn.recv(1)
        except BlockingIOError:
            still_open.append(conn)
            continue
        except OSError:
            data = b""
        if data:
            still_open.append(conn)  # a client that sends more than it should
        else:
            close_quietly(conn)
    return still_open
