"""``Network``: build topologies of in-process Hosts in a few lines and run them.

    net = Network()                                  # deterministic: a virtual clock
    a, b = net.host("a"), net.host("b")
    net.link(a, b, "10.0.0.1/24", "10.0.0.2/24")     # point-to-point Ethernet
    ... sockets on a and b ...
    net.run_until(lambda: got_reply, timeout=1.0)    # polls hosts and links, moves time

``Network(threaded=True)`` runs the same topology on the real clock with each Host's
receive workers and timer thread; ``run_until`` then just waits for the predicate.

A threaded Network can also place a Host in its own process (``host_process(name)``
returns a ``HostProcess``, rcunet/host/procs.py); a link with such a Host at either end
is an inter-process link (rcunet/link/ipc.py).  The deterministic
virtual-clock mode stays single-process: one clock cannot drive two interpreters.
"""

from __future__ import annotations

import ipaddress
import itertools
import time
from collections.abc import Callable, Iterable
from typing import TypedDict, Unpack

from rcunet.host.busypoll import attach_waits
from rcunet.host.clock import MonotonicClock, VirtualClock
from rcunet.host.host import Host
from rcunet.host.interface import Interface
from rcunet.host.procs import (
    DEFAULT_START_METHOD,
    HostProcess,
    HostSpec,
    InterfaceSpec,
    check_cpus,
)
from rcunet.host.wakeups import deferred as deferred_wakeups
from rcunet.link.impair import Impairment, ImpairmentConfig
from rcunet.link.ipc import DEFAULT_TRANSPORT, IpcEndpoint, ipc_pair
from rcunet.link.memory import KIND_ETHERNET, Endpoint, PointToPoint, Segment
from rcunet.tuning import Tuning

Link = PointToPoint | Segment


class NetworkOptions(TypedDict, total=False):
    """``Network()``'s keyword arguments, which the ready-made topologies pass on."""

    threaded: bool
    tuning: Tuning | None
    seed: int
    rx_queues: int
    clock: VirtualClock | None


class Network:
    """In-process Hosts, the links between them, and one clock that drives them all.

    ``Network()`` runs on a virtual clock with no threads: ``run_until`` and ``step``
    process frames and timers in order, so a run is exact and repeatable (the protocol
    tests run this way).  ``Network(threaded=True)`` runs the same topology on the real
    clock; ``start()`` starts each Host's receive workers and timer thread.  ``tuning``
    is every Host's default ``Tuning``; ``seed`` makes impairments and port choices
    repeatable; ``rx_queues`` is each interface's number of receive queues (RSS).
    A Network is a context manager: leaving it closes every Host, link and process.
    """

    def __init__(self, *, threaded: bool = False, tuning: Tuning | None = None,
                 seed: int = 1, rx_queues: int = 1, clock: VirtualClock | None = None) -> None:
        """``clock``: a virtual clock of the caller's (a simulation's, shared with the
        programs it runs); a deterministic Network makes its own otherwise."""
        if clock is not None and threaded:
            raise ValueError("a threaded Network runs on the real clock")
        self.threaded = threaded
        self.clock: VirtualClock | MonotonicClock = (
            MonotonicClock() if threaded else clock or VirtualClock())
        self.tuning = tuning or Tuning()
        self.seed = seed
        self.rx_queues = rx_queues
        self.hosts: list[Host] = []
        self.links: list[Link] = []
        self.processes: list[HostProcess] = []
        self.ipc_ends: list[IpcEndpoint] = []  # the ends this process drives
        #: Every point-to-point inter-process link, as its (a, b) ends.
        self.ipc_links: list[tuple[IpcEndpoint, IpcEndpoint]] = []
        self._mac_serial = itertools.count(1)
        self._seed_serial = itertools.count(seed * 1000)
        self._started = False
        #: Names beyond each Host's own (``add_name``): lower-case name -> addresses.
        self.names: dict[str, list[bytes]] = {}

    # -- building -------------------------------------------------------------------------
    def host(self, name: str, *, tuning: Tuning | None = None, rx_queues: int | None = None,
             forwarding: bool = False) -> Host:
        """A Host in this process (``host_process`` puts one in a child process)."""
        host_tuning = self._host_tuning(tuning, forwarding)
        host = Host(name, tuning=host_tuning, clock=self.clock, seed=next(self._seed_serial),
                    rx_queues=rx_queues or self.rx_queues)
        host.network = self
        self.hosts.append(host)
        if self._started:
            host.start()
        return host

    def add_name(self, name: str, *addresses: str) -> None:
        """A name the resolver answers with ``addresses`` (an /etc/hosts line)."""
        self.names[name.lower()] = [ipaddress.ip_address(a).packed for a in addresses]

    def host_named(self, name: str) -> Host | None:
        """The Host called ``name`` (case-insensitive, as DNS names are), if any."""
        wanted = name.lower().rstrip(".")
        return next((h for h in self.hosts if h.name.lower() == wanted), None)

    def process_named(self, name: str) -> HostProcess | None:
        """The HostProcess called ``name`` (case-insensitive), if any."""
        wanted = name.lower().rstrip(".")
        return next((p for p in self.processes if p.name.lower() == wanted), None)

    def _host_tuning(self, tuning: Tuning | None, forwarding: bool) -> Tuning:
        host_tuning = tuning or self.tuning
        if forwarding:
            from dataclasses import replace

            host_tuning = replace(host_tuning, ip_forward=True)
        return host_tuning

    def host_process(self, name: str, *, tuning: Tuning | None = None,
                     rx_queues: int | None = None, forwarding: bool = False,
                     capture: bool = False, lockstat: bool = False, lockdep: bool = False,
                     start_method: str = DEFAULT_START_METHOD,
                     cpus: Iterable[int] | None = None) -> HostProcess:
        """A Host that will live in a child process (``HostProcess.start(fn, *args)``
        runs ``fn(child, *args)`` there).  ``capture``: pcap of each of its interfaces;
        ``lockstat``: lock statistics on in the child; ``lockdep``: lock-order checks
        on in the child; all come back in its Outcome.  ``cpus``: the CPUs the child
        runs on, as a machine has its own (OSError EINVAL for a CPU this process may
        not use)."""
        if not self.threaded:
            raise ValueError("a Host in its own process needs a threaded Network (the "
                             "deterministic virtual-clock mode stays single-process)")
        spec = HostSpec(name, self._host_tuning(tuning, forwarding), next(self._seed_serial),
                        rx_queues or self.rx_queues, capture=capture, lockstat=lockstat,
                        lockdep=lockdep, cpus=None if cpus is None else check_cpus(cpus))
        process = HostProcess(spec, start_method=start_method)
        self.processes.append(process)
        return process

    def _mac(self) -> bytes:
        return bytes([0x02, 0x00, 0x5E, 0x10]) + next(self._mac_serial).to_bytes(2, "big")

    def _impairment(self, config: ImpairmentConfig | None) -> Impairment | None:
        if config is None or not config.active:
            return None
        return Impairment(config, seed=next(self._seed_serial))  # per-direction stream

    def link(
        self,
        a: Host | HostProcess,
        b: Host | HostProcess,
        a_address: str | Iterable[str] = (),
        b_address: str | Iterable[str] = (),
        *,
        kind: str = KIND_ETHERNET,
        mtu: int = 1500,
        impair: ImpairmentConfig | None = None,
        impair_ba: ImpairmentConfig | None = None,
        inline_rx: bool = False,
        transport: str = DEFAULT_TRANSPORT,
        busy_poll: bool = False,
        rx_spin: float = 0.0,
    ) -> PointToPoint | tuple[IpcEndpoint, IpcEndpoint]:
        """A point-to-point link between ``a`` and ``b`` (``impair`` applies to both
        directions unless ``impair_ba`` is given for b->a).  In memory between two
        Hosts of this process; between processes (``transport``: ``seqpacket`` or
        ``ring``, rcunet/link/ipc.py) when either end is a ``HostProcess``: then the
        two ``IpcEndpoint`` ends are returned.  ``busy_poll`` (inter-process and
        ``inline_rx`` only): threads about to sleep on a socket poll the link themselves
        (host/busypoll.py), at both ends.  ``rx_spin`` (inter-process only): seconds
        each end's receive thread keeps polling after its last frame before it sleeps
        (rcunet/link/ipc.py)."""
        ethernet = kind == KIND_ETHERNET
        mac_a = self._mac() if ethernet else None
        mac_b = self._mac() if ethernet else None
        if isinstance(a, HostProcess) or isinstance(b, HostProcess):
            end_a, end_b = ipc_pair(
                transport=transport, kind=kind, mtu=mtu, impair_ab=impair,
                impair_ba=impair_ba if impair_ba else impair,
                seed=next(self._seed_serial), rx_spin=rx_spin)
            for host, end, mac, address in ((a, end_a, mac_a, a_address),
                                            (b, end_b, mac_b, b_address)):
                self._attach_ipc(host, end, mac, address, inline_rx, busy_poll)
            # a child's death takes the other end down at once (its monitor sees it)
            if isinstance(b, HostProcess) and not isinstance(a, HostProcess):
                b._parent_ends.append(end_a)
            if isinstance(a, HostProcess) and not isinstance(b, HostProcess):
                a._parent_ends.append(end_b)
            self.ipc_links.append((end_a, end_b))
            return end_a, end_b
        link = PointToPoint(kind, mtu, clock=self.clock, deliver_inline=True,
                            mac_a=mac_a, mac_b=mac_b,
                            impair_ab=self._impairment(impair),
                            impair_ba=self._impairment(impair_ba if impair_ba else impair))
        self.links.append(link)
        self._attach(a, link.a, mac_a, a_address, inline_rx)
        self._attach(b, link.b, mac_b, b_address, inline_rx)
        return link

    def _attach_ipc(self, host: Host | HostProcess, end: IpcEndpoint, mac: bytes | None,
                    address: str | Iterable[str], inline_rx: bool,
                    busy_poll: bool = False) -> None:
        addresses = [address] if isinstance(address, str) else list(address)
        if isinstance(host, HostProcess):
            host._check_not_started()
            name = f"eth{len(host.interfaces)}"
            host.interfaces.append(InterfaceSpec(name, end, mac, end.mtu, addresses,
                                                 inline_rx, busy_poll=busy_poll))
            return
        self._attach(host, end, mac, addresses, inline_rx)
        attach_waits(host, end, busy_poll=busy_poll, inline_rx=inline_rx)
        self.ipc_ends.append(end)
        if self._started:
            end.start()

    def switch(self, *, kind: str = KIND_ETHERNET, mtu: int = 1500) -> Segment:
        segment = Segment(kind, mtu, clock=self.clock, deliver_inline=True)
        self.links.append(segment)
        return segment

    def attach(self, host: Host | HostProcess, segment: Segment,
               address: str | Iterable[str] = (), *, impair: ImpairmentConfig | None = None,
               inline_rx: bool = False, transport: str = DEFAULT_TRANSPORT,
               ) -> Interface | None:
        """Plug ``host`` into ``segment`` (``impair``: the frames it sends).  A Host in a
        child process gets an inter-process link to a port of the switch, which stays in
        this process (returns None then: the interface is the child's)."""
        mac = self._mac() if segment.kind == KIND_ETHERNET else None
        port_name = f"{host.name}-{len(host.interfaces)}"
        if isinstance(host, HostProcess):
            self._attach_to_switch(host, segment, port_name, mac, address, impair,
                                   inline_rx, transport)
            return None
        endpoint = segment.add_endpoint(port_name, mac,
                                        tx_impairment=self._impairment(impair))
        return self._attach(host, endpoint, mac, address, inline_rx)

    def _attach_to_switch(self, host: HostProcess, segment: Segment, port_name: str,
                          mac: bytes | None, address: str | Iterable[str],
                          impair: ImpairmentConfig | None, inline_rx: bool,
                          transport: str) -> None:
        """The switch port and the child's interface joined by an inter-process link:
        what the child sends (impaired in the child, as an in-process port's
        ``tx_impairment``) enters the switch through the port; what the switch sends
        the port crosses to the child."""
        port = segment.add_endpoint(port_name, mac)
        end_switch, end_host = ipc_pair(
            transport=transport, kind=segment.kind, mtu=segment.mtu, impair_ba=impair,
            checksum_offload=segment.checksum_offload, seed=next(self._seed_serial))
        port.set_receiver(end_switch.send)
        end_switch.set_receiver(port.send)
        end_switch.around_batch = deferred_wakeups  # this process's Hosts on the switch
        self._attach_ipc(host, end_host, mac, address, inline_rx)
        host._parent_ends.append(end_switch)
        self.ipc_ends.append(end_switch)
        if self._started:
            end_switch.start()

    def _attach(self, host: Host, endpoint: Endpoint | IpcEndpoint, mac: bytes | None,
                address: str | Iterable[str], inline_rx: bool) -> Interface:
        addresses = [address] if isinstance(address, str) else list(address)
        name = f"eth{sum(1 for i in host.interfaces.values() if i.name != 'lo')}"
        iface = host.add_interface(name, mac=mac, mtu=endpoint.mtu, addresses=addresses,
                                   checksum_offload=endpoint.checksum_offload,
                                   inline_rx=inline_rx)
        iface.attach(endpoint.send)
        endpoint.set_receiver(host.receiver_for(iface))
        return iface

    # -- running -------------------------------------------------------------------------------
    def start(self) -> Network:
        if not self.threaded:
            raise RuntimeError("a deterministic Network is driven by run()/run_until()")
        if not self._started:
            self._started = True
            for host in self.hosts:
                host.start()
            for link in self.links:
                link.start()  # releases delayed frames on the real clock
            for end in self.ipc_ends:
                end.start()
        return self

    def step(self) -> bool:
        """Deterministic mode: process everything due now; True if anything happened."""
        busy = False
        now = self.clock.now()
        for link in self.links:
            if link.poll(now):
                busy = True
        for host in self.hosts:
            if host.has_pending():
                busy = True
            host.poll(now)
        return busy

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (*(h.next_deadline() for h in self.hosts),
                                 *(link.next_deadline() for link in self.links)) if d is not None]
        return min(deadlines) if deadlines else None

    def run(self, duration: float) -> None:
        """Run for ``duration`` seconds of (virtual or real) time."""
        end = self.clock.now() + int(duration * 1e9)
        self.run_until(lambda: False, timeout=duration, _end=end)

    def run_until(self, predicate: Callable[[], object], timeout: float = 10.0,
                  _end: int | None = None) -> bool:
        """Run until ``predicate()`` is true (returns True) or ``timeout`` seconds of
        network time pass (returns False)."""
        end = _end if _end is not None else self.clock.now() + int(timeout * 1e9)
        if self.threaded:
            while not predicate():
                if self.clock.now() >= end:
                    return False
                time.sleep(0.001)
            return True
        clock = self.clock
        assert isinstance(clock, VirtualClock)
        while True:
            while self.step():
                if predicate():
                    return True
            if predicate():
                return True
            deadline = self.next_deadline()
            if deadline is None or deadline > end:
                if clock.now() < end:
                    clock.set(end)
                    self.step()
                return bool(predicate())
            if deadline > clock.now():
                clock.set(deadline)

    def close(self) -> None:
        """Stop every child process (killed if it does not end in time) and reap it,
        close every Host, stop the links."""
        for process in self.processes:
            process.close()
        for host in self.hosts:
            host.close()
        for link in self.links:
            if hasattr(link, "stop"):
                link.stop()
        for end in self.ipc_ends:
            end.close()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ready-made topologies -----------------------------------------------------------------
    @classmethod
    def two_hosts(cls, **kw: Unpack[NetworkOptions]) -> tuple[Network, Host, Host]:
        """a (10.0.0.1/24, fd00::1/64) and b (10.0.0.2/24, fd00::2/64) on one Ethernet
        link; ``kw`` goes to ``Network()``."""
        net = cls(**kw)
        a, b = net.host("a"), net.host("b")
        net.link(a, b, ["10.0.0.1/24", "fd00::1/64"], ["10.0.0.2/24", "fd00::2/64"])
        return net, a, b

    @classmethod
    def routed(cls, **kw: Unpack[NetworkOptions]) -> tuple[Network, Host, Host, Host]:
        """a (10.1.0.0/24) -- r -- b (10.2.0.0/24), default routes via r."""
        net = cls(**kw)
        a, r, b = net.host("a"), net.host("r", forwarding=True), net.host("b")
        net.link(a, r, ["10.1.0.2/24", "fd01::2/64"], ["10.1.0.1/24", "fd01::1/64"])
        net.link(r, b, ["10.2.0.1/24", "fd02::1/64"], ["10.2.0.2/24", "fd02::2/64"])
        a.add_route("default", via="10.1.0.1")
        a.add_route("default6", via="fd01::1")
        b.add_route("default", via="10.2.0.1")
        b.add_route("default6", via="fd02::1")
        return net, a, r, b

    @classmethod
    def star(cls, n: int, **kw: Unpack[NetworkOptions]) -> tuple[Network, list[Host], Segment]:
        """``n`` hosts on one Ethernet switch, 10.0.0.1..n/24 and fd00::1..n/64."""
        net = cls(**kw)
        segment = net.switch()
        hosts = []
        for index in range(1, n + 1):
            host = net.host(f"h{index}")
            net.attach(host, segment, [f"10.0.0.{index}/24", f"fd00::{index:x}/64"])
            hosts.append(host)
        return net, hosts, segment
