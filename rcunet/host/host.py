"""A Host: one network namespace — interfaces, routes, neighbours, sockets — and the
contexts that run it (reference DESIGN.md, Execution model).

Three ways to run the same code:

* **deterministic** (a ``VirtualClock``): no threads.  Links hand frames to
  ``receive()``, which queues them; the test calls ``host.poll(now)`` (or
  ``Network.run_until``) to process frames and fire timers.  Exact and repeatable.
* **threaded** (``host.start()``): one receive worker per queue, frames steered to a
  queue by flow hash (RSS) so a flow stays ordered, plus a timer thread.
* **inline**: an interface created with ``inline_rx=True`` runs the receive path in the
  sending thread, as Linux loopback does (netif_rx, then the same CPU's softirq).

A receive worker never dies: an exception from a packet is counted
(``RcunetRxExceptions``), reported once on stderr, and the next packet is processed.
"""

from __future__ import annotations

import importlib
import ipaddress
import itertools
import queue
import random
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rcunet.core.route import PmtuStore, Route, RoutingTable
from rcunet.host.clock import MonotonicClock, VirtualClock
from rcunet.host.counters import Counters
from rcunet.host.interface import Address, Interface, link_local_from_mac, parse_address
from rcunet.host.timers import Timers
from rcunet.sync.lock import LockClass
from rcunet.tuning import Tuning

if TYPE_CHECKING:
    from rcunet.host.busypoll import BusyPoller

Clock = MonotonicClock | VirtualClock
#: A receive queue's item: a frame and its interface, or None (the worker stops).
RxItem = tuple[Interface, bytes] | None

#: The timer thread sleeps at most this long (it re-checks for stop).  TCP's shortest
#: timer, the 40 ms delayed ACK (TCP_DELACK_MIN): a timer armed while the thread sleeps
#: is then never due before the thread wakes, so TCP timers never have to wake it
#: (``Timers.schedule``) — under the GIL each such wake-up cost two thread switches.
_TIMER_MAX_WAIT_NS = 40_000_000
_HOST_IDS = itertools.count(1)
HOST_CONFIG_LOCK = LockClass("host.config_lock")


def _ip(text: str | bytes) -> bytes:
    if isinstance(text, bytes):
        return text
    return ipaddress.ip_address(text).packed


class Host:
    """One network namespace: interfaces and addresses, routes, neighbours, the socket
    tables, receive workers and timers, a ``Tuning`` and counters.  Make one with
    ``Network.host`` (or ``Network.two_hosts``); open sockets on it with ``socket()``.

    Concurrency:
      interfaces   copy-on-write dict replaced under ``_config_lock``; the receive path
                   reads ``self.interfaces`` once (atomic: one attribute load).
      routes       RoutingTable publishes immutable snapshots; writers hold
                   ``_config_lock`` (lookups take no lock).
      tuning       immutable Tuning, replaced with one store.
      counters     per-thread shards (see counters.py).
    Lock order: _config_lock > table bucket locks > socket slock > neigh_lock.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        tuning: Tuning | None = None,
        clock: Clock | None = None,
        seed: int | None = None,
        rx_queues: int = 1,
    ) -> None:
        from rcunet.host.ip import IpLayer
        from rcunet.host.routecache import DstCache
        from rcunet.host.tcp import TcpLayer
        from rcunet.host.udp import UdpLayer

        self.id = next(_HOST_IDS)
        self.name = name or f"host{self.id}"
        self.tuning = tuning or Tuning()
        self.clock: Clock = clock or MonotonicClock()
        self.deterministic = self.clock.virtual
        # The time in int ns: the clock's own function, one C call for the real clock
        # (every segment reads it several times).  Immutable, as the clock is.
        self.now: Callable[[], int] = (time.monotonic_ns if type(self.clock) is MonotonicClock
                                       else self.clock.now)
        self.seed = self.id if seed is None else seed
        self.rng = random.Random(self.seed)  # guarded-by: _rng_lock (random_u32)
        self._rng_lock = threading.Lock()
        self.counters = Counters()
        self.timers = Timers()
        self.routes = RoutingTable()
        self.pmtu = PmtuStore()
        self._config_lock = HOST_CONFIG_LOCK.new()
        self.interfaces: dict[int, Interface] = {}  # rcu: writers hold _config_lock
        self.local_addrs: frozenset[bytes] = frozenset()  # rcu: writers hold _config_lock
        self.broadcast_addrs: frozenset[bytes] = frozenset()  # rcu: writers hold _config_lock
        self._ifindex = itertools.count(1)
        self.rx_queue_count = max(1, rx_queues)
        self._pending: deque[tuple[Interface, bytes]] = deque()  # deterministic mode
        #: each receive worker's queue of (interface, frame); None tells the worker to stop
        self._rx_queues: list[queue.SimpleQueue[RxItem]] = []
        self._threads: list[threading.Thread] = []
        self._running = False
        self._stopping = threading.Event()
        self._reported_errors: set[str] = set()  # guarded-by: _report_lock
        self._report_lock = threading.Lock()
        self.closed = False
        self.network: object | None = None  # the Network that built us (its resolver)
        #: Busy polling on an inter-process link (host/busypoll.py): set once, before
        #: the Host's threads start; None: sleepers sleep on their gates.
        self.busy_poller: BusyPoller | None = None
        #: Spin-then-park (host/tcp/sock.py ``_spin``): seconds a thread about to sleep on
        #: a socket first spins re-checking it; the longest ``rx_spin`` of this Host's
        #: inter-process links (set with them, before the Host's threads start).  0: off.
        self.wait_spin = 0.0
        self.ip = IpLayer(self)
        self.dst_cache = DstCache(self)
        self.udp = UdpLayer(self)
        self.tcp = TcpLayer(self)
        self.loopback = self._add_loopback()

    def __repr__(self) -> str:
        return f"<Host {self.name}>"

    # -- time and randomness ----------
    def random_u32(self) -> int:
        with self._rng_lock:
            return self.rng.getrandbits(32)

    # -- configuration ----------
    def _add_loopback(self) -> Interface:
        lo = self._register(Interface("lo", next(self._ifindex), mac=None, mtu=65536,
                                      checksum_offload=True))
        lo.attach(lambda frame: self.receive(lo, frame))
        for text in ("127.0.0.1/8", "::1/128"):
            self.add_address(lo, text)
        return lo

    def _register(self, iface: Interface) -> Interface:
        with self._config_lock:
            interfaces = dict(self.interfaces)
            interfaces[iface.ifindex] = iface
            self.interfaces = interfaces
        return iface

    def add_interface(
        self,
        name: str,
        *,
        mac: bytes | None = None,
        mtu: int = 1500,
        addresses: Iterable[str] = (),
        checksum_offload: bool = False,
        inline_rx: bool = False,
    ) -> Interface:
        """Create an interface (Ethernet when ``mac`` is given, pure IP otherwise),
        add its addresses and connected routes (and an IPv6 link-local address on
        Ethernet)."""
        if any(i.name == name for i in self.interfaces.values()):
            raise ValueError(f"{self.name}: interface {name!r} exists")
        iface = Interface(name, next(self._ifindex), mac=mac, mtu=mtu,
                          checksum_offload=checksum_offload)
        iface.inline_rx = inline_rx
        self._register(iface)
        if mac is not None:
            self.add_address(iface, f"{ipaddress.IPv6Address(link_local_from_mac(mac))}/64")
        for text in addresses:
            self.add_address(iface, text)
        return iface

    def interface(self, name: str) -> Interface:
        for iface in self.interfaces.values():
            if iface.name == name:
                return iface
        raise KeyError(f"{self.name}: no interface {name!r}")

    def add_address(self, iface: Interface | str, text: str) -> Address:
        if isinstance(iface, str):
            iface = self.interface(iface)
        address = parse_address(text)
        iface.add_address(address)
        with self._config_lock:
            self._publish_addresses_locked()
            if address.prefix_len < len(address.addr) * 8 or iface.name == "lo":
                self.routes.add_connected(iface.ifindex, address.addr, address.prefix_len)
        self.dst_cache.invalidate()
        if iface.is_ethernet and address.family == 6:
            self.ip.icmp.join_solicited_node(iface, address.addr)
        return address

    def _publish_addresses_locked(self) -> None:
        interfaces = self.interfaces.values()
        self.local_addrs = frozenset(a for i in interfaces for a in i.addr_set)
        self.broadcast_addrs = frozenset(b for i in interfaces for b in i.broadcasts)

    def add_route(
        self,
        prefix: str,
        *,
        via: str | None = None,
        dev: str | None = None,
        metric: int | None = None,
        mtu: int = 0,
        src: str | None = None,
    ) -> Route:
        """``ip route add PREFIX [via GW] [dev DEV] [metric M] [mtu M] [src S]``;
        ``prefix`` may be ``default`` / ``default6``."""
        if prefix in ("default", "0.0.0.0/0"):
            network = ipaddress.ip_network("0.0.0.0/0")
        elif prefix in ("default6", "::/0"):
            network = ipaddress.ip_network("::/0")
        else:
            network = ipaddress.ip_network(prefix, strict=False)
        gateway = _ip(via) if via is not None else None
        if dev is not None:
            ifindex = self.interface(dev).ifindex
        elif gateway is not None:
            on_link = self.routes.lookup(gateway)
            if on_link is None:
                raise OSError(101, f"gateway {via} is not reachable (ENETUNREACH)")
            ifindex = on_link.ifindex
        else:
            raise ValueError("a route needs 'via' or 'dev'")
        if metric is None:
            metric = 0 if network.version == 4 else 1024
        route = Route(network.network_address.packed, network.prefixlen, ifindex, gateway,
                      _ip(src) if src else None, metric, mtu)
        with self._config_lock:
            added = self.routes.add(route)
        self.dst_cache.invalidate()
        return added

    def remove_route(self, route: Route) -> None:
        with self._config_lock:
            self.routes.remove(route)
        self.dst_cache.invalidate()

    def set_mtu(self, iface: Interface | str, mtu: int) -> None:
        """``ip link set dev IFACE mtu MTU``: later routes, path MSS and SYN-ACKs use the
        new MTU; cached route decisions are dropped, as Linux's NETDEV_CHANGEMTU
        notifier flushes them (fib_netdev_event -> rt_cache_flush)."""
        if isinstance(iface, str):
            iface = self.interface(iface)
        if not 68 <= mtu <= 65535:  # dev_validate_mtu: a tun's min_mtu and max_mtu
            raise OSError(22, f"mtu {mtu} out of range 68..65535 (EINVAL)")
        iface.mtu = mtu  # atomic: one attribute store; readers load it once per packet
        self.dst_cache.invalidate()

    def add_neighbour(self, iface: Interface | str, addr: str, lladdr: bytes) -> None:
        """``ip neigh add ADDR lladdr MAC dev IFACE nud permanent``."""
        if isinstance(iface, str):
            iface = self.interface(iface)
        packed = _ip(addr)
        with iface.neigh_lock:
            table = iface.neigh4 if len(packed) == 4 else iface.neigh6
            table.add_permanent(packed, lladdr, self.now())

    def set_tuning(self, tuning: Tuning) -> None:
        self.tuning = tuning  # atomic: one attribute store; readers load it once per use
        self.udp.table.tuning = tuning

    def local_addresses(self, family: int | None = None) -> list[bytes]:
        return [a.addr for iface in self.interfaces.values() for a in iface.addresses
                if family is None or a.family == family]

    # -- the receive entry point ----------
    def receiver_for(self, iface: Interface) -> Callable[[bytes], None]:
        """A link's receive callback for ``iface``: ``receive(iface, frame)``, looked up
        on each frame (so a test can replace ``receive`` to make the Host vanish)."""
        return lambda frame: self.receive(iface, frame)

    def receive(self, iface: Interface, frame: bytes) -> None:
        """A link delivers ``frame`` on ``iface`` (any thread)."""
        # atomic: attribute loads of ``closed`` and ``_running`` (stores in close()/start());
        # a frame racing close() is processed or left in a stopped queue, never half-done.
        if self.closed:
            return
        if self.deterministic:
            self._pending.append((iface, frame))  # atomic: deque.append
        elif iface.inline_rx or not self._running:
            self._rx_one(iface, frame)
        else:
            index = self.ip.flow_hash(iface, frame) % self.rx_queue_count
            rxq = self._rx_queues[index]
            # netdev_max_backlog: a flood the workers cannot keep up with is dropped and
            # counted (softnet_stat "dropped"), not queued without bound.  qsize() is a
            # racy read; the bound is approximate by a few frames, as it may be.
            if rxq.qsize() >= self.tuning.netdev_max_backlog:
                self.counters.inc("RcunetRxBacklogDrops")
                return
            rxq.put((iface, frame))

    def _rx_one(self, iface: Interface, frame: bytes) -> None:
        try:
            self.ip.link_input(iface, frame)
        except Exception as exc:
            self._rx_failed(exc)

    def _rx_failed(self, exc: Exception) -> None:
        """A bug must not kill the worker: count it, say it once (with its traceback:
        called from the ``except`` block)."""
        self.counters.inc("RcunetRxExceptions")
        key = f"{type(exc).__name__}:{exc}"
        with self._report_lock:  # check-then-add: two workers must not both report
            first = key not in self._reported_errors
            self._reported_errors.add(key)
        if first:
            print(f"rcunet {self.name}: receive path error (counted, packet dropped):",
                  file=sys.stderr)
            traceback.print_exc()

    # -- deterministic mode ----------
    def poll(self, now: int | None = None) -> int | None:
        """Process queued frames and due timers at ``now``; return the next deadline.

        In deterministic mode ``now`` moves the virtual clock forward first."""
        if now is not None and isinstance(self.clock, VirtualClock) and now > self.clock.now():
            self.clock.set(now)
        current = self.clock.now()
        while self._pending:
            iface, frame = self._pending.popleft()
            self._rx_one(iface, frame)
        self.timers.run_due(current)
        return self.next_deadline()

    def has_pending(self) -> bool:
        return bool(self._pending)

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    # -- threaded mode ----------
    def start(self) -> Host:
        if self.deterministic:
            raise RuntimeError(f"{self.name}: a virtual-clock Host is driven by poll()")
        if self._running:
            return self
        # Queues first, flag last: receive() (any thread) reads the flag, then the queues.
        self._rx_queues = [queue.SimpleQueue() for _ in range(self.rx_queue_count)]
        self._running = True  # atomic: one attribute store, published after the queues
        for index, rxq in enumerate(self._rx_queues):
            self._spawn(f"{self.name}-rx{index}", self._rx_worker, rxq)
        self._spawn(f"{self.name}-timer", self._timer_worker)
        return self

    def _spawn(self, name: str, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _rx_worker(self, rxq: queue.SimpleQueue[RxItem]) -> None:
        while True:
            item = rxq.get()
            if item is None:
                return
            iface, frame = item
            self._rx_one(iface, frame)

    def _timer_worker(self) -> None:
        while not self._stopping.is_set():
            now = self.clock.now()
            try:
                self.timers.run_due(now)
            except Exception:
                self.counters.inc("RcunetTimerExceptions")
                traceback.print_exc()
            self.timers.wait(self.clock.now(), _TIMER_MAX_WAIT_NS)

    def close(self) -> None:
        """Close every socket, stop the workers and wait for them."""
        if self.closed:
            return
        self.udp.shutdown()
        self.tcp.close_all()
        self.closed = True
        if self._running:
            self._stopping.set()
            for rxq in self._rx_queues:
                rxq.put(None)
            self.timers.wake()
            for thread in self._threads:
                if thread is not threading.current_thread():
                    thread.join(timeout=5)
            self._running = False

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sockets ----------
    def socket(self, family: int = 2, type: int = 1, proto: int = 0) -> object:
        """A socket on this host, compatible with Python's ``socket.socket``: made by
        the factory the api layer registers (``register_socket_factory``)."""
        factory = _socket_factory  # atomic: one global load (stored once, at api import)
        if factory is None:
            factory = _load_socket_factory()
        return factory(self, family, type, proto)


#: Makes what ``Host.socket`` returns: ``rcunet.api.socket.Socket``, registered by the api
#: package when it loads.  The host never imports the layer above it; the factory is
#: late-bound, as Linux's socket layer finds a protocol family through the
#: ``net_proto_family`` an upper module registered (sock_register).
_socket_factory: Callable[[Host, int, int, int], object] | None = None
#: The package that registers the factory, loaded by name on the first ``socket()`` when
#: nothing imported it yet (a user of ``rcunet.host.network`` alone, as in the README).
SOCKET_API_PACKAGE = "rcunet.api"


def register_socket_factory(factory: Callable[[Host, int, int, int], object]) -> None:
    """The api layer's socket class (``rcunet.api`` calls this once, at import)."""
    global _socket_factory
    _socket_factory = factory


def _load_socket_factory() -> Callable[[Host, int, int, int], object]:
    importlib.import_module(SOCKET_API_PACKAGE)  # registers the factory
    if _socket_factory is None:
        raise RuntimeError(f"{SOCKET_API_PACKAGE} registered no socket factory")
    return _socket_factory
