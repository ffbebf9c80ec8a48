"""``--target pmd-pytcp[-blocking]``: the closest Python peer (pmd-pytcp 0.3.8) as the
neper server.

pmd-pytcp is a fork of PyTCP that installs on Python 3.11 and runs in process on one
asyncio event loop (reference/peers.md).  Its stack is a process-wide singleton that
speaks only over a TAP/TUN device (no loopback), so the run is:

* a TAP device ``pmdtap<pid>`` in this namespace; pmd-pytcp owns it as 10.88.N.2/24 and
  fd88:0:0:N::2/64 and runs on its own event loop in a thread;
* the kernel's end of the TAP is 10.88.N.1/24 and fd88:0:0:N::1/64, N (1-254) a subnet
  no interface here uses yet, so two runs at once do not collide;
* the neper **server** runs on pmd-pytcp: with ``--target pmd-pytcp`` it is
  ``PytcpServer``, the server protocol written as coroutines on pmd-pytcp's own API (how
  pmd-pytcp is meant to be used); with ``--target pmd-pytcp-blocking`` it is the shared
  ``workloads.Server`` (threads, blocking calls) over ``PytcpSocket``, a stdlib-shaped
  blocking adapter;
* the neper **client** is the shared ``workloads.Client`` on Linux sockets, reaching the
  server through the TAP.  pmd-pytcp does one side's work where ``--target mem`` (rcunet)
  does both.

The device (with its addresses) disappears when its file descriptor is closed, which
``PytcpTarget.close()`` does whatever happened before; so does process exit.

Needs root (or CAP_NET_ADMIN) and ``pip install pmd-pytcp==0.3.8``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import errno
import ipaddress
import os
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from rcunet.bench.neper import FlowStats, NeperError, ThreadClock, Usage, monotonic_ns
from rcunet.bench.workloads import MakeSocket, Plan, Run, Server
from rcunet.link.tap import TapError, open_queue

SUBNETS = {4: ipaddress.ip_network("10.88.0.0/16"), 6: ipaddress.ip_network("fd88::/48")}
PREFIX_LENGTH = {4: 24, 6: 64}
PMD_HOST, KERNEL_HOST = 2, 1  # host numbers within the run's subnet
PMD_MAC = "02:00:00:88:00:02"
PMD_VERSION = "0.3.8"
#: Ethernet's MTU, pmd-pytcp's TAP default (INTERFACE__TAP__MTU).
TAP_MTU = 1500
IFA_F_NODAD = 0x02  # linux/if_addr.h: the kernel's IPv6 address is usable at once
NUD_PERMANENT = 0x80  # linux/neighbour.h: a static neighbour entry
READY_SECONDS = 15.0  # pmd-pytcp's address checks (ARP probe, DAD) finish well before
STOP_SECONDS = 5.0  # for pmd-pytcp's own stop() coroutine
#: pmd-pytcp claims a static IPv4 address with RFC 5227's probes and announcements
#: (about 9 s with its defaults); the shortest its sysctls allow (about 3 s) — start-up
#: only, nothing a run measures.
FAST_ADDRESS_CLAIM = {"arp.probe_wait": 1, "arp.probe_num": 1, "arp.probe_min": 1,
                      "arp.probe_max": 2, "arp.announce_num": 1, "arp.announce_wait": 1,
                      "arp.announce_interval": 1}
_READY_PROBE_PORT = 9  # discard: nothing listens there, so a ready stack answers RST
_WILDCARD = {4: "0.0.0.0", 6: "::"}


def _import_pmd_pytcp() -> Any:
    try:
        import pmd_pytcp  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        raise NeperError(f"--target pmd-pytcp needs the pmd-pytcp package: "
                         f"pip install pmd-pytcp=={PMD_VERSION}") from None
    if pmd_pytcp.__version__ != PMD_VERSION:
        raise NeperError(f"--target pmd-pytcp was written for pmd-pytcp {PMD_VERSION}, "
                         f"found {pmd_pytcp.__version__}")
    return pmd_pytcp


# ============================================================================== the loop
class PytcpLoop:
    """pmd-pytcp's event loop in its own thread, and the calls into it.

    Concurrency: pmd-pytcp takes no locks; every one of its objects may only be touched
    on this loop's thread.  Other threads hand work over with ``call`` (a plain
    function, queued with ``call_soon_threadsafe``) or ``wait`` (a coroutine, through
    ``run_coroutine_threadsafe``) and block on a ``concurrent.futures.Future`` for the
    result; the loop itself never blocks on a caller.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="pmd-pytcp",
                                        daemon=True)
        self._thread.start()

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(function(*args, **kwargs))
            except BaseException as exc:  # handed to the caller, re-raised there
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return future.result()

    def wait(self, coroutine: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(errno.ETIMEDOUT, "pmd-pytcp did not answer in time") \
                from None

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(STOP_SECONDS)
        if not self._thread.is_alive():
            self.loop.close()


# ============================================================================== sockets
class PytcpSocket:
    """A blocking, stdlib-shaped socket over one pmd-pytcp socket.

    The subset the neper workloads call (rcunet/bench/workloads.py): bind, listen,
    accept, connect, send/sendall/recv, sendto/recvfrom, setsockopt/getsockopt,
    setblocking, shutdown, close, getsockname, and the context manager.  Errors are
    pmd-pytcp's own OSErrors (Linux errno values).  No ``fileno()``: pmd-pytcp's
    in-process sockets have none, so a selector cannot wait on them (only the client
    side of a run multiplexes flows, and it runs on Linux sockets).

    Concurrency: every call is handed to the loop thread (``PytcpLoop``); a thread
    blocked in recv() waits on its future while others' calls (a shutdown() to wake
    it) still run on the loop.
    """

    def __init__(self, pytcp_loop: PytcpLoop, sock: Any, family: int) -> None:
        self._loop = pytcp_loop
        self._sock = sock
        self._family = family

    @classmethod
    def open(cls, pytcp_loop: PytcpLoop, family: int, kind: int) -> PytcpSocket:
        from pmd_pytcp import socket as pmd_socket  # type: ignore[import-untyped, unused-ignore]

        families: dict[int, Any] = {socket.AF_INET: pmd_socket.AddressFamily.INET4,
                                    socket.AF_INET6: pmd_socket.AddressFamily.INET6}
        kinds: dict[int, Any] = {socket.SOCK_STREAM: pmd_socket.SocketType.STREAM,
                                 socket.SOCK_DGRAM: pmd_socket.SocketType.DGRAM}
        pmd_family, pmd_kind = families.get(family), kinds.get(kind)
        if pmd_family is None or pmd_kind is None:
            raise OSError(errno.EAFNOSUPPORT, os.strerror(errno.EAFNOSUPPORT))
        sock = pytcp_loop.call(pmd_socket.socket, pmd_family, pmd_kind)
        return cls(pytcp_loop, sock, family)

    def __enter__(self) -> PytcpSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _host(self, host: str) -> str:
        return host or _WILDCARD[6 if self._family == socket.AF_INET6 else 4]

    # -- setup ----------
    def bind(self, address: tuple[Any, ...]) -> None:
        self._loop.call(self._sock.bind, (self._host(address[0]), address[1]))

    def listen(self, backlog: int = 128) -> None:
        self._loop.call(self._sock.listen, backlog=max(1, backlog))

    def accept(self) -> tuple[PytcpSocket, tuple[str, int]]:
        child, address = self._loop.wait(self._sock.accept())
        return PytcpSocket(self._loop, child, self._family), address

    def connect(self, address: tuple[Any, ...]) -> None:
        self._loop.wait(self._sock.connect((address[0], address[1])))

    def setsockopt(self, level: int, option: int, value: int | bytes) -> None:
        self._loop.call(self._sock.setsockopt, level, option, value)

    def getsockopt(self, level: int, option: int) -> int | bytes:
        return self._loop.call(self._sock.getsockopt, level, option)  # type: ignore[no-any-return]

    def setblocking(self, flag: bool) -> None:
        self._loop.call(self._sock.setblocking, flag)

    def getsockname(self) -> tuple[str, int]:
        return self._loop.call(self._sock.getsockname)  # type: ignore[no-any-return]

    # -- data ----------
    def send(self, data: bytes | memoryview) -> int:
        return self._loop.wait(self._sock.send(bytes(data)))  # type: ignore[no-any-return]

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self.send(view):]

    def recv(self, bufsize: int) -> bytes:
        return self._loop.wait(self._sock.recv(bufsize))  # type: ignore[no-any-return]

    def sendto(self, data: bytes, address: tuple[Any, ...]) -> int:
        return self._loop.wait(  # type: ignore[no-any-return]
            self._sock.sendto(bytes(data), (address[0], address[1])))

    def recvfrom(self, bufsize: int) -> tuple[bytes, tuple[str, int]]:
        return self._loop.wait(self._sock.recvfrom(bufsize))  # type: ignore[no-any-return]

    # -- ending ----------
    def shutdown(self, how: int) -> None:
        self._loop.call(self._sock.shutdown, how)

    def close(self) -> None:
        self._loop.call(self._sock.close)


# ============================================================================== server
class PytcpServer:
    """The neper server written on pmd-pytcp's own API: coroutines on its event loop.

    The same protocol as ``workloads.Server`` (one listener per data port or one UDP
    socket per flow; RR answers each request, tcp_crr answers and waits for the
    client's close, stream reads and counts) and the same interface to the run
    (``open``, ``start``, ``stop``, ``run``), but every flow is a task on pmd-pytcp's
    loop instead of a thread calling blocking methods — the way pmd-pytcp is meant to
    be used.  tcp_stream -M is refused: pmd-pytcp's send() buffers without limit, so
    a writer that never waits would fill memory.

    Concurrency: the tasks, the sockets and the flows' FlowStats live on the loop
    thread.  The calling thread starts and stops them through ``PytcpLoop.wait`` and
    reads ``run`` only after ``stop()`` has returned (the loop has finished every
    task by then); ``run.errors`` is appended to on the loop thread only.
    """

    def __init__(self, plan: Plan, pytcp_loop: PytcpLoop, base_port: int) -> None:
        if plan.maerts:
            raise NeperError("--target pmd-pytcp cannot run tcp_stream -M: pmd-pytcp's "
                             "send() buffers without limit (no send-buffer back-pressure)")
        self.plan = plan
        self._loop = pytcp_loop
        self.base_port = base_port
        self.run = Run()
        self.addresses: list[tuple[Any, ...]] = []
        self._sockets: list[Any] = []  # listeners (TCP) or flow sockets (UDP)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False  # loop thread only

    # -- driven from the run's thread ----------
    def open(self) -> list[tuple[Any, ...]]:
        self._loop.wait(self._open())
        return self.addresses

    def start(self) -> None:
        self.run.usage_start = Usage.now()
        self._loop.call(self._start_tasks)

    def stop(self, make_socket: MakeSocket, connect_host: str) -> None:
        """End every flow's task (the client has closed its flows by now)."""
        del make_socket, connect_host  # nothing blocks a thread: tasks are cancelled
        self._loop.wait(self._stop(), STOP_SECONDS)
        self.run.usage_end = Usage.now()

    # -- on the loop ----------
    async def _open(self) -> None:
        from pmd_pytcp import socket as pmd_socket  # type: ignore[import-untyped, unused-ignore]

        plan = self.plan
        version = 6 if plan.family == socket.AF_INET6 else 4
        family = (pmd_socket.AddressFamily.INET6 if version == 6
                  else pmd_socket.AddressFamily.INET4)
        kind = pmd_socket.SocketType.STREAM if plan.tcp else pmd_socket.SocketType.DGRAM
        try:
            for index in range(plan.num_ports if plan.tcp else plan.num_flows):
                sock = pmd_socket.socket(family, kind)
                self._sockets.append(sock)
                sock.bind((_WILDCARD[version], self.base_port + index))
                if plan.tcp:
                    sock.listen(backlog=max(1, plan.listen_backlog))
                self.addresses.append(sock.getsockname())
        except OSError as exc:
            self._close_sockets()
            raise NeperError(f"server: binding pmd-pytcp port {self.base_port}: "
                             f"{exc.strerror or exc}") from None

    def _start_tasks(self) -> None:
        plan = self.plan
        for index, sock in enumerate(self._sockets):
            if plan.workload == "tcp_crr":
                self._spawn(self._crr_acceptor(sock))
            elif plan.tcp:
                self._spawn(self._acceptor(sock, len(range(index, plan.num_flows,
                                                           plan.num_ports))))
            else:
                self._spawn(self._serve_flow(sock))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = self._loop.loop.create_task(self._guard(coroutine))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guard(self, coroutine: Coroutine[Any, Any, None]) -> None:
        try:
            await coroutine
        except (OSError, _PeerVanished) as exc:
            if not self._stopping:
                self.run.errors.append(f"server: {type(exc).__name__}: {exc}")

    async def _stop(self) -> None:
        self._stopping = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(Exception):
                sock.close()
        self._sockets.clear()

    def _new_stats(self) -> FlowStats:
        index = len(self.run.flows)
        stats = FlowStats(index, index, ThreadClock(self.plan.interval), keep_latency=False)
        self.run.flows.append(stats)
        return stats

    # -- TCP ----------
    async def _acceptor(self, listener: Any, expected: int) -> None:
        for _ in range(expected):
            conn, _address = await listener.accept()
            self._configure(conn)
            self._spawn(self._serve_connection(conn, self._new_stats()))

    def _configure(self, conn: Any) -> None:
        if self.plan.no_delay:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def _serve_connection(self, conn: Any, stats: FlowStats) -> None:
        plan = self.plan
        try:
            if plan.rr:
                response = bytes(plan.response_size)
                while await _recv_exact(conn, plan.request_size, plan.buffer_size):
                    await conn.send(response)
                    stats.event(monotonic_ns(), 1)
            else:
                while data := await conn.recv(plan.buffer_size):
                    stats.event(monotonic_ns(), len(data))
        except (ConnectionResetError, ConnectionAbortedError):
            pass  # the client's abortive close (SO_LINGER 0) ends the flow
        finally:
            stats.finish(monotonic_ns())
            with contextlib.suppress(Exception):
                conn.close()

    async def _crr_acceptor(self, listener: Any) -> None:
        while True:
            conn, _address = await listener.accept()
            self._configure(conn)
            self._spawn(self._crr_connection(conn))

    async def _crr_connection(self, conn: Any) -> None:
        """Answer the request, then keep the connection until the client closes it
        (neper's server waits for the RST or EOF); no statistics (neper PR #26)."""
        plan = self.plan
        try:
            if await _recv_exact(conn, plan.request_size, plan.buffer_size):
                await conn.send(bytes(plan.response_size))
                while await conn.recv(plan.buffer_size):
                    pass
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError,
                _PeerVanished):
            pass  # the client went on without this answer, or closed abortively
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    # -- UDP ----------
    async def _serve_flow(self, sock: Any) -> None:
        plan = self.plan
        stats = self._new_stats()
        response = bytes(plan.response_size)
        bufsize = max(plan.request_size, plan.buffer_size)
        try:
            while True:
                data, peer = await sock.recvfrom(bufsize)
                if plan.rr:
                    await sock.sendto(response, peer)
                    stats.event(monotonic_ns(), 1)
                else:
                    stats.event(monotonic_ns(), len(data))
        finally:
            stats.finish(monotonic_ns())


class _PeerVanished(Exception):
    """EOF inside a request."""


async def _recv_exact(conn: Any, size: int, buffer_size: int) -> bool:
    """Read exactly ``size`` bytes; False on EOF before the first one."""
    remaining = size
    while remaining:
        data = await conn.recv(min(remaining, buffer_size))
        if not data:
            if remaining == size:
                return False
            raise _PeerVanished(f"EOF after {size - remaining} of {size} bytes")
        remaining -= len(data)
    return True


# ============================================================================== target
class PytcpTarget:
    """pmd-pytcp on a TAP device as the server, Linux sockets as the client.

    ``blocking=False`` (``--target pmd-pytcp``): the server is ``PytcpServer``, tasks on
    pmd-pytcp's own asyncio API.  ``blocking=True`` (``--target pmd-pytcp-blocking``):
    the server is the shared ``workloads.Server`` — threads — over ``PytcpSocket``, the
    stdlib-shaped blocking use.  One per process at a time: pmd-pytcp's stack is
    module-level state.
    """

    def __init__(self, blocking: bool = False) -> None:
        self.blocking = blocking
        self.name = "pmd-pytcp-blocking" if blocking else "pmd-pytcp"
        self._pmd = _import_pmd_pytcp()
        self.ifname = f"pmdtap{os.getpid() % 1_000_000}"
        self.subnet = 0  # N in 10.88.N.0/24, chosen when the device is configured
        self._fd: int | None = None
        self._loop: PytcpLoop | None = None
        self._started = False
        try:
            self._fd = self._open_device()
            self._configure_kernel_side()
            self._loop = PytcpLoop()
            self._loop.wait(self._start_stack(self._fd), READY_SECONDS)
            self._started = True
            for version in (4, 6):
                _wait_reachable(self.address(version, PMD_HOST))
        except NeperError:
            self.close()
            raise
        except Exception as exc:  # netlink, pmd-pytcp's start-up: one clear message
            self.close()
            raise NeperError(f"--target pmd-pytcp: setting up {self.ifname} failed: "
                             f"{type(exc).__name__}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    def _open_device(self) -> int:
        try:
            return open_queue(self.ifname, "tap", multi_queue=False)
        except TapError as exc:
            raise NeperError(f"--target pmd-pytcp: {exc.strerror}") from None

    def address(self, version: int, host: int) -> str:
        """Host ``host`` of this run's subnet: 10.88.N.host or fd88:0:0:N::host."""
        network = SUBNETS[version]
        step = 1 << (network.max_prefixlen - PREFIX_LENGTH[version])
        return str(network.network_address + self.subnet * step + host)

    def _configure_kernel_side(self) -> None:
        """``ip link set IFNAME up; ip addr add 10.88.N.1/24 dev IFNAME;
        ip addr add fd88:0:0:N::1/64 dev IFNAME nodad; ip neigh replace 10.88.N.2 lladdr
        02:00:00:88:00:02 dev IFNAME nud permanent`` (and fd88:0:0:N::2): the kernel then
        never waits on ARP/ND while pmd-pytcp still probes for its addresses."""
        from pyroute2 import IPRoute  # type: ignore[import-untyped, unused-ignore]

        with IPRoute() as ipr:
            index = ipr.link_lookup(ifname=self.ifname)[0]
            ipr.link("set", index=index, state="up", mtu=TAP_MTU)
            self.subnet = _free_subnet(ipr)
            for version in (4, 6):
                extra = {"flags": IFA_F_NODAD} if version == 6 else {}
                ipr.addr("add", index=index, address=self.address(version, KERNEL_HOST),
                         prefixlen=PREFIX_LENGTH[version], **extra)
                ipr.neigh("replace", dst=self.address(version, PMD_HOST), lladdr=PMD_MAC,
                          ifindex=index, state=NUD_PERMANENT,
                          family=socket.AF_INET6 if version == 6 else socket.AF_INET)

    async def _start_stack(self, fd: int) -> None:
        """Runs on the loop: ``stack.init`` builds asyncio objects bound to it."""
        from pmd_net_addr import (  # type: ignore[import-untyped, unused-ignore]
            Ip4IfAddr,
            Ip6IfAddr,
            MacAddress,
        )
        from pmd_pytcp.lib.interface_layer import (  # type: ignore[import-untyped, unused-ignore]
            InterfaceLayer,
        )

        stack = self._pmd.stack
        stack.init(fd=fd, layer=InterfaceLayer.L2, mtu=TAP_MTU,
                   mac_address=MacAddress(PMD_MAC), interface_name=self.ifname,
                   ip4_host=Ip4IfAddr(f"{self.address(4, PMD_HOST)}/{PREFIX_LENGTH[4]}"),
                   ip4_dhcp=False,
                   ip6_host=Ip6IfAddr(f"{self.address(6, PMD_HOST)}/{PREFIX_LENGTH[6]}"),
                   ip6_gua_autoconfig=False, sysctls=FAST_ADDRESS_CLAIM)
        await stack.start()

    # -- the Target protocol (rcunet/bench/targets.py) ----------
    def client_socket(self, family: int, kind: int) -> Any:
        return socket.socket(family, kind)

    def server_socket(self, family: int, kind: int) -> Any:
        assert self._loop is not None
        return PytcpSocket.open(self._loop, family, kind)

    def server_address(self, version: int) -> str:
        return self.address(version, PMD_HOST)

    def make_server(self, plan: Plan, make_socket: MakeSocket, bind_host: str,
                    base_port: int, pin_cpus: Sequence[int] | None = None
                    ) -> Server | PytcpServer:
        assert self._loop is not None
        if self.blocking:
            return Server(plan, make_socket, bind_host, base_port, pin_cpus)
        return PytcpServer(plan, self._loop, base_port)  # pmd-pytcp's own loop: unpinned

    def base_port(self, opts: argparse.Namespace) -> int:
        return int(opts.port)  # pmd-pytcp's own address: neper's ports are free

    def close(self) -> None:
        """Stop pmd-pytcp, its loop, and delete the device; each step runs even if an
        earlier one failed."""
        loop, self._loop = self._loop, None
        if loop is not None:
            if self._started:
                with contextlib.suppress(Exception):
                    loop.wait(self._pmd.stack.stop(), STOP_SECONDS)
                self._started = False
            loop.close()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # a non-persistent TAP: the kernel deletes it with its addresses


def _free_subnet(ipr: Any) -> int:
    """A /24 of 10.88.0.0/16 (and the /64 of fd88::/48 with the same number) that no
    interface in this namespace has an address in; the search starts at a place picked
    by our pid, so concurrent runs rarely even look at the same one."""
    used = set()
    for message in ipr.get_addr():
        address = ipaddress.ip_address(message.get_attr("IFA_ADDRESS"))
        network = SUBNETS[address.version]
        if address in network:
            step = 1 << (network.max_prefixlen - PREFIX_LENGTH[address.version])
            used.add((int(address) - int(network.network_address)) // step)
    start = os.getpid() % 254
    for offset in range(254):
        candidate = (start + offset) % 254 + 1
        if candidate not in used:
            return candidate
    raise NeperError("--target pmd-pytcp: every subnet of 10.88.0.0/16 is in use")


def _wait_reachable(address: str) -> None:
    """Until pmd-pytcp answers on ``address`` (its address checks done): a TCP connect
    to a closed port is refused once it does."""
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    deadline = time.monotonic() + READY_SECONDS
    while True:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.settimeout(0.5)
            try:
                probe.connect((address, _READY_PROBE_PORT))
                return  # something listens there: reachable all the same
            except ConnectionRefusedError:
                return
            except OSError:
                pass
        if time.monotonic() > deadline:
            raise NeperError(f"--target pmd-pytcp: {address} did not answer within "
                             f"{READY_SECONDS:g} s")
        time.sleep(0.1)
