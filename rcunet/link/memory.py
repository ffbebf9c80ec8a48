"""In-memory links: point-to-point and switched segments, Ethernet or pure IP.

A link connects ``Endpoint`` objects (one per Host interface).  ``endpoint.send(frame)``
puts a frame on the link; the link hands it to the receivers' callbacks
(``endpoint.set_receiver(callback)``, called as ``callback(frame)``):

* ``PointToPoint``: two endpoints; every frame goes to the other one.
* ``Segment`` of kind ``"ethernet"``: an Ethernet switch.  It learns source MACs per
  port (aging after ``fdb_ageing`` ns, at most ``fdb_max`` entries), forwards known
  unicast to one port, floods broadcast, multicast and unknown unicast to every port
  but the ingress one, and filters frames addressed back to their ingress port.
* ``Segment`` of kind ``"ip"``: a shared medium without link-layer addresses; every
  frame reaches every other endpoint (the Host filters by IP destination).

Frames longer than the MTU (Ethernet: payload after the 14-byte header, or 18 with an
802.1Q tag; IP: the whole packet) are dropped and counted (``mtu_drops``).

Delivery: with ``deliver_inline=True`` the receiver's callback runs in the sending
thread right away (Linux loopback's fast path: netif_rx then the same CPU's softirq).
Otherwise frames wait in a per-endpoint queue (bounded by ``backlog``, like
``netdev_max_backlog``; overflow counts ``rx_dropped``) until ``pump()`` runs, either
called by the owner (deterministic mode) or by the link's worker thread (``start()``).

Impairments (``rcunet.link.impair``) apply per direction: an endpoint's
``tx_impairment`` to what it sends (before switching), its ``rx_impairment`` to what it
receives.  Held frames are released by ``poll(now)`` (deterministic mode: the test
advances a virtual clock and polls) or by the worker thread, which sleeps until the
next release time.  ``checksum_offload`` is True only for a clean link: once any
impairment is active, hosts must compute and verify checksums (DESIGN.md).

A receiver that raises loses its frame and nothing else: the exception is counted
(``receiver_errors``), kept in ``link.last_error`` and logged; the sender carries on.

Captures: ``link.tap`` and ``endpoint.tap`` accept any object with
``write(timestamp_ns, frame)`` (``rcunet.link.pcap.PcapWriter``); the link tap sees every
frame put on the link, an endpoint tap what that endpoint sends and receives.  Taps are
called outside the link's lock and must be thread-safe themselves.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Protocol

from mypy_extensions import mypyc_attr

from rcunet.link.impair import Impairment
from rcunet.sync.hooks import yield_point

KIND_ETHERNET = "ethernet"
KIND_IP = "ip"
ETH_HEADER_LEN = 14
ETH_VLAN_HEADER_LEN = 18
ETHERTYPE_VLAN = b"\x81\x00"
#: ``net.core.netdev_max_backlog``.
DEFAULT_BACKLOG = 1000
#: Linux bridge ``ageing_time``: 300 s.
DEFAULT_FDB_AGEING = 300 * 1_000_000_000
DEFAULT_FDB_MAX = 8192

#: The yield point (rcunet.sync.hooks) between ``_transmit``'s lock-free test of a clean
#: link and ``_transmit_clean``'s re-check under the lock.
CLEAN_BEFORE_LOCK = "memory.transmit_clean.before_lock"
#: Takes each received frame; what it returns is ignored (an endpoint's send returns a bool).
Receiver = Callable[[bytes], object]
_log = logging.getLogger(__name__)

ENDPOINT_COUNTERS = ("rx_packets", "rx_bytes", "rx_dropped", "tx_packets", "tx_bytes",
                     "tx_dropped")
LINK_COUNTERS = ("frames", "mtu_drops", "runts", "delivered", "flooded", "forwarded",
                 "filtered", "no_receiver", "backlog_drops", "receiver_errors")


#: A point-to-point link's per-thread counts: a's, b's and the link's.
_Shard = tuple[dict[str, int], dict[str, int], dict[str, int]]


class Tap(Protocol):
    def write(self, timestamp_ns: int, frame: bytes) -> object: ...


class Clock(Protocol):
    def now(self) -> int: ...


class _MonotonicClock:
    def now(self) -> int:
        return time.monotonic_ns()


class Endpoint:
    """One port of a link (a Host interface's wire).

    Concurrency: ``send`` may be called from any number of threads.  ``counters`` are
    guarded by the link's lock (read them with ``stats()``).  ``receiver`` and ``tap``
    are single attribute stores, loaded once per delivery (atomic), so they may be set
    while traffic flows; the receiver may be called from several threads at once
    (inline senders, the worker) and must be thread-safe.
    """

    def __init__(
        self,
        link: _Link,
        name: str,
        mac: bytes | None,
        tx_impairment: Impairment | None,
        rx_impairment: Impairment | None,
    ) -> None:
        self.link = link  # immutable
        self.name = name  # immutable
        self.mac = mac  # immutable; the switch learns from traffic, not from this
        self.tx_impairment = tx_impairment  # guarded-by: link._lock (set_tx_impairment)
        self.rx_impairment = rx_impairment  # immutable; used under link._lock
        self.receiver: Receiver | None = None  # atomic: one attribute store/load
        self.tap: Tap | None = None  # atomic: one attribute store/load
        # guarded-by: link._lock
        self.counters: dict[str, int] = dict.fromkeys(ENDPOINT_COUNTERS, 0)
        self.queue: deque[bytes] = deque()  # guarded-by: link._lock

    @property
    def mtu(self) -> int:
        return self.link.mtu

    @property
    def kind(self) -> str:
        return self.link.kind

    @property
    def checksum_offload(self) -> bool:
        return self.link.checksum_offload

    def set_receiver(self, receiver: Receiver | None) -> None:
        self.receiver = receiver

    def send(self, frame: bytes | bytearray | memoryview) -> bool:
        """Put ``frame`` on the link.  False when it was dropped at once (too big for
        the MTU, or a runt Ethernet frame); later losses show in the counters."""
        return self.link._transmit(self, bytes(frame))

    def stats(self) -> dict[str, int]:
        return self.link.endpoint_stats(self)

    def __repr__(self) -> str:
        return f"Endpoint({self.name!r} on {type(self.link).__name__})"


class _Link:
    """What point-to-point links and segments share.

    Concurrency:
      _lock     guards the endpoint list, the forwarding database, every counter, the
                receive queues and the impairments (whose random state must advance in
                one order).  Held only to decide and record where frames go; receivers
                and taps are called after it is released.
      _pump_lock  held by the one thread delivering queued frames, so a receiver sees
                its frames in queue order; taken with a non-blocking acquire, so a
                receiver that pumps (or a second pumper) returns at once instead of
                deadlocking.
      Lock order: _pump_lock > _lock.
    """

    def __init__(
        self,
        kind: str,
        mtu: int,
        deliver_inline: bool,
        clock: Clock | None,
        backlog: int,
        checksum_offload: bool,
    ) -> None:
        if kind not in (KIND_ETHERNET, KIND_IP):
            raise ValueError(f"link kind {kind!r} (expected 'ethernet' or 'ip')")
        if mtu < 68:
            raise ValueError(f"MTU {mtu} below IPv4's minimum of 68")
        self.kind = kind  # immutable
        self.mtu = mtu  # immutable
        self.deliver_inline = deliver_inline  # immutable
        self.clock: Clock = clock or _MonotonicClock()  # immutable
        self.backlog = backlog  # immutable
        self._offload = checksum_offload  # immutable
        # frame sizes that always pass _check_size (immutable): a header and at most
        # the MTU behind it (an IP link: the MTU)
        ethernet = kind == KIND_ETHERNET
        self._min_frame = ETH_HEADER_LEN if ethernet else 0
        self._max_plain = mtu + ETH_HEADER_LEN if ethernet else mtu
        self.tap: Tap | None = None  # atomic: one attribute store/load
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._pump_lock = threading.Lock()
        self._endpoints: tuple[Endpoint, ...] = ()  # guarded-by: _lock (replaced whole)
        self.counters: dict[str, int] = dict.fromkeys(LINK_COUNTERS, 0)  # guarded-by: _lock
        self._names = itertools.count()
        self._worker: threading.Thread | None = None  # guarded-by: _lock
        self._stopping = False  # guarded-by: _lock
        #: Some endpoint has an impairment that may hold frames for the worker to release
        #: (a clean link never wakes the worker on transmit).
        self._impaired = False  # guarded-by: _lock (set once, never cleared)
        #: The last exception a receiver raised (see ``receiver_errors``).
        self.last_error: Exception | None = None  # guarded-by: _lock

    # -- configuration -----------------------------------------------------------------

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return self._endpoints  # atomic: one attribute load of an immutable tuple

    @property
    def checksum_offload(self) -> bool:
        """True when hosts may skip checksums: the link is clean (no active
        impairment on any endpoint) and was built with ``checksum_offload=True``."""
        if not self._offload:
            return False
        for endpoint in self._endpoints:  # atomic: one attribute load of a tuple
            for impairment in (endpoint.tx_impairment, endpoint.rx_impairment):
                if impairment is not None and impairment.active:
                    return False
        return True

    def _attach(
        self,
        name: str | None,
        mac: bytes | None,
        tx_impairment: Impairment | None,
        rx_impairment: Impairment | None,
    ) -> Endpoint:
        if mac is not None and len(mac) != 6:
            raise ValueError("a MAC address is 6 bytes")
        for impairment in (tx_impairment, rx_impairment):
            if impairment is not None:  # where its CE marking finds the IP header
                impairment.ethernet = self.kind == KIND_ETHERNET
        endpoint = Endpoint(self, name or f"ep{next(self._names)}", mac, tx_impairment,
                            rx_impairment)
        with self._lock:
            self._endpoints = (*self._endpoints, endpoint)
            if tx_impairment is not None or rx_impairment is not None:
                self._impaired = True
        return endpoint

    def set_tx_impairment(self, endpoint: Endpoint, impairment: Impairment | None) -> None:
        """Replace what ``endpoint``'s frames go through (``tc qdisc replace``: the frames
        the old impairment holds are dropped with it).  A simulation's timeline changes
        a link this way; a link that was clean stays on the general path after."""
        with self._lock:
            endpoint.tx_impairment = impairment
            if impairment is not None:
                self._impaired = True

    def endpoint_stats(self, endpoint: Endpoint) -> dict[str, int]:
        with self._lock:
            return dict(endpoint.counters)

    def stats(self) -> dict[str, int]:
        """Link counters plus every impairment's, summed (``lost``, ``corrupted``...)."""
        with self._lock:
            out = self._link_counts_locked()
            for endpoint in self._endpoints:
                for impairment in (endpoint.tx_impairment, endpoint.rx_impairment):
                    if impairment is not None:
                        for name, value in impairment.counters.items():
                            if name != "frames":
                                out[name] = out.get(name, 0) + value
            return out

    # -- sending -----------------------------------------------------------------------

    def _transmit(self, source: Endpoint, frame: bytes) -> bool:
        # atomic: attribute loads; ``_impaired`` is set once (at attach) and never
        # cleared, ``deliver_inline`` is immutable.  An impaired endpoint attached after
        # this load is seen by ``_transmit_clean``'s re-check under ``_lock``.
        if self.deliver_inline and not self._impaired:
            return self._transmit_clean(source, frame)
        return self._transmit_impaired(source, frame)

    def _transmit_impaired(self, source: Endpoint, frame: bytes) -> bool:
        """The general path: impairments, queued delivery, held frames."""
        now = self.clock.now()
        deliveries: list[tuple[Endpoint, bytes]] = []
        with self._lock:
            source.counters["tx_packets"] += 1
            source.counters["tx_bytes"] += len(frame)
            reason = self._check_size(frame)
            if reason is not None:
                self.counters[reason] += 1
                source.counters["tx_dropped"] += 1
                return False
            self.counters["frames"] += 1
            if source.tx_impairment is not None:
                frames = source.tx_impairment.submit(frame, now)
            else:
                frames = [frame]
            for out in frames:
                self._switch_locked(source, out, now, deliveries)
            if self._worker is not None and self._impaired:
                self._wakeup.notify()  # a held frame may move the worker's next deadline
            # inline delivery: counted in this lock section (one acquisition per frame)
            resolved = self._resolve_locked(deliveries) if deliveries else None
        self._tap_sent(source, now, frame)
        if resolved:
            self._call_receivers(resolved, now)
        return True

    def _transmit_clean(self, source: Endpoint, frame: bytes) -> bool:
        """``_transmit`` on a clean inline link (no impairment anywhere): the general
        path's steps (size check, switching, counting, receivers) written out, since
        this runs once per frame and a clean link has no held or queued frames."""
        now = self.clock.now()
        size = len(frame)
        resolved = None
        yield_point(CLEAN_BEFORE_LOCK)  # _transmit found the link clean, without the lock
        with self._lock:
            impaired = self._impaired
            if not impaired:
                resolved = self._count_clean_locked(source, frame, size, now)
        if impaired:
            # An impaired endpoint was attached since _transmit's lock-free load: its
            # impairment must see this frame, so the general path sends it.
            return self._transmit_impaired(source, frame)
        if resolved is None:
            return False
        self._tap_sent(source, now, frame)
        for target, receiver in resolved:
            self._hand_to(target, receiver, now, frame)
        return True

    def _count_clean_locked(self, source: Endpoint, frame: bytes, size: int,
                            now: int) -> list[tuple[Endpoint, Receiver]] | None:
        """The clean path's lock section: count the frame and pick its receivers; None
        when it fails the size check."""
        counters = source.counters
        counters["tx_packets"] += 1
        counters["tx_bytes"] += size
        # every frame within [_min_frame, _max_plain] passes _check_size
        if not self._min_frame <= size <= self._max_plain:
            reason = self._check_size(frame)
            if reason is not None:
                self.counters[reason] += 1
                counters["tx_dropped"] += 1
                return None
        link_counters = self.counters
        link_counters["frames"] += 1
        resolved: list[tuple[Endpoint, Receiver]] = []
        for target in self._destinations_locked(source, frame, now):
            # atomic: one attribute load (pairs with set_receiver's store)
            receiver = target.receiver
            if receiver is None:
                target.counters["rx_dropped"] += 1
                link_counters["no_receiver"] += 1
            else:
                target_counters = target.counters
                target_counters["rx_packets"] += 1
                target_counters["rx_bytes"] += size
                link_counters["delivered"] += 1
                resolved.append((target, receiver))
        return resolved

    def _link_counts_locked(self) -> dict[str, int]:
        return dict(self.counters)

    def _check_size(self, frame: bytes) -> str | None:
        if self.kind == KIND_IP:
            return "mtu_drops" if len(frame) > self.mtu else None
        if len(frame) < ETH_HEADER_LEN:
            return "runts"
        header = ETH_VLAN_HEADER_LEN if frame[12:14] == ETHERTYPE_VLAN else ETH_HEADER_LEN
        return "mtu_drops" if len(frame) - header > self.mtu else None

    def _switch_locked(
        self, source: Endpoint, frame: bytes, now: int, deliveries: list[tuple[Endpoint, bytes]]
    ) -> None:
        for target in self._destinations_locked(source, frame, now):
            self._arrive_locked(target, frame, now, deliveries)

    def _destinations_locked(
        self, source: Endpoint, frame: bytes, now: int
    ) -> tuple[Endpoint, ...] | list[Endpoint]:
        raise NotImplementedError

    def _arrive_locked(
        self, target: Endpoint, frame: bytes, now: int, deliveries: list[tuple[Endpoint, bytes]]
    ) -> None:
        """A frame reaches ``target``'s port: its rx impairment, then delivery."""
        if target.rx_impairment is not None:
            frames = target.rx_impairment.submit(frame, now)
        else:
            frames = [frame]
        for out in frames:
            self._enqueue_locked(target, out, deliveries)

    def _enqueue_locked(
        self, target: Endpoint, frame: bytes, deliveries: list[tuple[Endpoint, bytes]]
    ) -> None:
        if self.deliver_inline:
            deliveries.append((target, frame))
            return
        if len(target.queue) >= self.backlog:
            self.counters["backlog_drops"] += 1
            target.counters["rx_dropped"] += 1
            return
        target.queue.append(frame)
        self._wakeup.notify()

    # -- delivering --------------------------------------------------------------------

    def _deliver(self, deliveries: list[tuple[Endpoint, bytes]], now: int) -> None:
        """Count, then call receivers with no link lock held."""
        if not deliveries:
            return
        with self._lock:
            resolved = self._resolve_locked(deliveries)
        self._call_receivers(resolved, now)

    def _resolve_locked(
        self, deliveries: list[tuple[Endpoint, bytes]]
    ) -> list[tuple[Endpoint, bytes, Receiver | None]]:
        """Load each target's receiver and count the delivery (or the drop)."""
        # atomic: one attribute load of each receiver (pairs with set_receiver's store)
        resolved = [(target, frame, target.receiver) for target, frame in deliveries]
        counters = self.counters
        for target, frame, receiver in resolved:
            if receiver is None:
                target.counters["rx_dropped"] += 1
                counters["no_receiver"] += 1
            else:
                target.counters["rx_packets"] += 1
                target.counters["rx_bytes"] += len(frame)
                counters["delivered"] += 1
        return resolved

    def _call_receivers(
        self, resolved: list[tuple[Endpoint, bytes, Receiver | None]], now: int
    ) -> None:
        """Hand each frame to its receiver, with no link lock held."""
        for target, frame, receiver in resolved:
            if receiver is not None:
                self._hand_to(target, receiver, now, frame)

    def _tap_sent(self, source: Endpoint, now: int, frame: bytes) -> None:
        """The link's tap and the sending port's see every frame sent."""
        tap = self.tap  # atomic: one attribute load of each tap (pairs with its store)
        if tap is not None:
            tap.write(now, frame)
        tap = source.tap
        if tap is not None:
            tap.write(now, frame)

    def _hand_to(self, target: Endpoint, receiver: Receiver, now: int, frame: bytes) -> None:
        """The receiving port's tap, then its receiver; no link lock held."""
        tap = target.tap  # atomic: one attribute load (pairs with its store)
        if tap is not None:
            tap.write(now, frame)
        try:
            receiver(frame)
        except Exception as error:  # a wire never fails its sender
            self._receiver_failed(target, error)

    def _receiver_failed(self, target: Endpoint, error: Exception) -> None:
        """A receiver raised: the frame is gone, as if the host had crashed on it.  The
        sender (or the worker) carries on; the error is counted, kept and logged."""
        with self._lock:
            self.counters["receiver_errors"] += 1
            self.last_error = error
        _log.error("receiver of %r raised", target, exc_info=error)

    def pump(self, limit: int | None = None) -> int:
        """Deliver queued frames (up to ``limit``) in the calling thread; returns how many
        were handed to receivers.  Returns 0 at once if another thread is pumping."""
        if not self._pump_lock.acquire(blocking=False):
            return 0
        try:
            total = 0
            while limit is None or total < limit:
                batch = self._take_batch(None if limit is None else limit - total)
                if not batch:
                    break
                self._deliver(batch, self.clock.now())
                total += len(batch)
            return total
        finally:
            self._pump_lock.release()

    def _take_batch(self, limit: int | None) -> list[tuple[Endpoint, bytes]]:
        """Up to 64 frames (or ``limit``), round-robin over the endpoints' queues."""
        cap = 64 if limit is None else min(64, limit)
        batch: list[tuple[Endpoint, bytes]] = []
        with self._lock:
            progress = True
            while progress and len(batch) < cap:
                progress = False
                for endpoint in self._endpoints:
                    if endpoint.queue and len(batch) < cap:
                        batch.append((endpoint, endpoint.queue.popleft()))
                        progress = True
        return batch

    def pending(self) -> int:
        """Frames queued for delivery (not counting frames held by impairments)."""
        with self._lock:
            return sum(len(endpoint.queue) for endpoint in self._endpoints)

    # -- time --------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """The earliest release time of a frame held by an impairment, or ``None``."""
        with self._lock:
            return self._next_deadline_locked()

    def _next_deadline_locked(self) -> int | None:
        deadlines = [
            deadline
            for endpoint in self._endpoints
            for impairment in (endpoint.tx_impairment, endpoint.rx_impairment)
            if impairment is not None and (deadline := impairment.next_deadline()) is not None
        ]
        return min(deadlines) if deadlines else None

    def poll(self, now: int | None = None) -> int:
        """Release frames held by impairments that are due at ``now`` (the link clock by
        default), deliver them (inline mode) or queue them, then ``pump()``.  Returns the
        number of frames handed to receivers."""
        if now is None:
            now = self.clock.now()
        deliveries: list[tuple[Endpoint, bytes]] = []
        with self._lock:
            for endpoint in self._endpoints:
                if endpoint.tx_impairment is not None:
                    for frame in endpoint.tx_impairment.release(now):
                        self._switch_locked(endpoint, frame, now, deliveries)
            for endpoint in self._endpoints:
                if endpoint.rx_impairment is not None:
                    for frame in endpoint.rx_impairment.release(now):
                        self._enqueue_locked(endpoint, frame, deliveries)
        self._deliver(deliveries, now)
        return len(deliveries) + self.pump()

    # -- worker thread -----------------------------------------------------------------

    def start(self) -> None:
        """Run a worker thread that delivers queued frames and releases held ones on
        the real clock.  (Deterministic tests call ``poll(now)`` instead.)"""
        with self._lock:
            if self._worker is not None:
                raise RuntimeError("link worker already running")
            self._stopping = False
            self._worker = threading.Thread(target=self._run, name="rcunet-link", daemon=True)
        self._worker.start()

    def stop(self) -> None:
        with self._lock:
            worker = self._worker
            self._stopping = True
            self._wakeup.notify_all()
        if worker is not None:
            worker.join()
        with self._lock:
            self._worker = None

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and not self._has_work_locked():
                    deadline = self._next_deadline_locked()
                    timeout = None
                    if deadline is not None:
                        timeout = max(0.0, (deadline - self.clock.now()) / 1e9)
                    self._wakeup.wait(timeout)
                if self._stopping:
                    return
            self.poll()

    def _has_work_locked(self) -> bool:
        if any(endpoint.queue for endpoint in self._endpoints):
            return True
        deadline = self._next_deadline_locked()
        return deadline is not None and deadline <= self.clock.now()


@mypyc_attr(native_class=False)  # compiled, a native class could not be weakly referenced
class _ShardOwner:
    """Held by one thread's ``PointToPoint._tls`` alone: it dies with that thread's
    locals, after the last Python code the thread runs."""

    __slots__ = ("__weakref__",)


class PointToPoint(_Link):
    """Two endpoints, ``a`` and ``b``; every frame from one goes to the other.
    ``impair_ab`` applies to frames from ``a`` to ``b``, ``impair_ba`` the other way.

    Concurrency, in addition to ``_Link``'s: a clean inline link sends without ``_lock``,
    as Linux loopback does (``NETIF_F_LLTX``, per-CPU ``dev_lstats``): the peer is fixed
    and nothing is held or queued, so the only shared state a frame touched was its
    counters.  Each sending thread counts into its own shard (``_tls.shard``: three
    dicts, a's, b's and the link's; owner: that thread), registered in ``_shards`` under
    ``_lock``; ``stats()`` adds the shards to the locked counters (each dict item read is
    atomic; a count a thread is making at that moment shows in the next read).  A thread
    whose locals are gone writes no more: its shard is folded into the locked counters
    when the next new thread registers, so threads that come and go leave no shards
    behind.  "Gone" is a token only the thread's ``_tls`` holds having died, not
    ``is_alive()``: the main thread reports False from interpreter shutdown on, while
    it still runs atexit handlers that may send.  Without
    this, two threads sending over one link queued on ``_lock`` for every frame, and on
    free-threaded builds every count replaced an int the other thread had made, whose
    release went through the maker's biased-refcount queue.
    """

    def __init__(
        self,
        kind: str = KIND_ETHERNET,
        mtu: int = 1500,
        *,
        deliver_inline: bool = True,
        clock: Clock | None = None,
        backlog: int = DEFAULT_BACKLOG,
        checksum_offload: bool = True,
        mac_a: bytes | None = None,
        mac_b: bytes | None = None,
        impair_ab: Impairment | None = None,
        impair_ba: Impairment | None = None,
    ) -> None:
        super().__init__(kind, mtu, deliver_inline, clock, backlog, checksum_offload)
        self.a = self._attach("a", mac_a, impair_ab, None)
        self.b = self._attach("b", mac_b, impair_ba, None)
        self._tls = threading.local()
        # guarded-by: _lock (the list); each shard's dicts: owner, its thread
        self._shards: list[tuple[weakref.ref[_ShardOwner], _Shard]] = []

    def _destinations_locked(self, source: Endpoint, frame: bytes, now: int) -> tuple[Endpoint]:
        return (self.b,) if source is self.a else (self.a,)

    def _new_shard(self) -> _Shard:
        shard = (dict.fromkeys(ENDPOINT_COUNTERS, 0), dict.fromkeys(ENDPOINT_COUNTERS, 0),
                 dict.fromkeys(LINK_COUNTERS, 0))
        owner = _ShardOwner()
        with self._lock:
            self._fold_ended_locked()
            self._shards.append((weakref.ref(owner), shard))
        self._tls.owner = owner
        self._tls.shard = shard
        return shard

    def _fold_ended_locked(self) -> None:
        """Add the shards of threads whose locals are gone to the locked counters."""
        live = []
        for owner_ref, shard in self._shards:
            if owner_ref() is not None:
                live.append((owner_ref, shard))
                continue
            for counters, counts in ((self.a.counters, shard[0]),
                                     (self.b.counters, shard[1]), (self.counters, shard[2])):
                for name, value in counts.items():
                    counters[name] += value
        self._shards = live

    def endpoint_stats(self, endpoint: Endpoint) -> dict[str, int]:
        index = 0 if endpoint is self.a else 1
        with self._lock:
            out = dict(endpoint.counters)
            for _thread, shard in self._shards:
                for name, value in shard[index].items():
                    out[name] += value
            return out

    def _link_counts_locked(self) -> dict[str, int]:
        out = dict(self.counters)
        for _thread, shard in self._shards:
            for name, value in shard[2].items():
                out[name] += value
        return out

    def _transmit_clean(self, source: Endpoint, frame: bytes) -> bool:
        """The clean inline path with no lock (see the class docstring); a frame outside
        the sizes that always pass the size check takes ``_Link``'s locked path."""
        size = len(frame)
        if not self._min_frame <= size <= self._max_plain:
            return super()._transmit_clean(source, frame)
        now = self.clock.now()
        try:
            shard = self._tls.shard  # owner: this thread
        except AttributeError:
            shard = self._new_shard()
        if source is self.a:
            sent, got, target = shard[0], shard[1], self.b
        else:
            sent, got, target = shard[1], shard[0], self.a
        link_counts = shard[2]
        sent["tx_packets"] += 1
        sent["tx_bytes"] += size
        link_counts["frames"] += 1
        receiver = target.receiver  # atomic: one attribute load (pairs with set_receiver)
        if receiver is None:
            got["rx_dropped"] += 1
            link_counts["no_receiver"] += 1
        else:
            got["rx_packets"] += 1
            got["rx_bytes"] += size
            link_counts["delivered"] += 1
        self._tap_sent(source, now, frame)
        if receiver is not None:
            self._hand_to(target, receiver, now, frame)
        return True


class Segment(_Link):
    """A shared segment with any number of endpoints (``add_endpoint``): an Ethernet
    switch with MAC learning, or, for kind ``"ip"``, a hub delivering to all others."""

    def __init__(
        self,
        kind: str = KIND_ETHERNET,
        mtu: int = 1500,
        *,
        deliver_inline: bool = True,
        clock: Clock | None = None,
        backlog: int = DEFAULT_BACKLOG,
        checksum_offload: bool = True,
        fdb_ageing: int = DEFAULT_FDB_AGEING,
        fdb_max: int = DEFAULT_FDB_MAX,
    ) -> None:
        super().__init__(kind, mtu, deliver_inline, clock, backlog, checksum_offload)
        self.fdb_ageing = fdb_ageing  # immutable
        self.fdb_max = fdb_max  # immutable
        self._fdb: dict[bytes, tuple[Endpoint, int]] = {}  # guarded-by: _lock
        #: Each port's VLAN (``bridge vlan add dev PORT vid N pvid untagged``); a port
        #: not in it is in VLAN 1, and a segment with every port in VLAN 1 has it empty.
        self._vlans: dict[Endpoint, int] = {}  # guarded-by: _lock

    def add_endpoint(
        self,
        name: str | None = None,
        mac: bytes | None = None,
        *,
        tx_impairment: Impairment | None = None,
        rx_impairment: Impairment | None = None,
    ) -> Endpoint:
        return self._attach(name, mac, tx_impairment, rx_impairment)

    def set_vlans(self, vlans: dict[Endpoint, int]) -> None:
        """Put ports in VLANs (the others back in VLAN 1): a frame reaches only the
        ports of its sender's VLAN, as on a VLAN-filtering Linux bridge whose ports are
        untagged members of one VLAN each (``br_allowed_ingress``/``br_allowed_egress``).
        Learned addresses are per VLAN there, so a unicast frame whose destination was
        learned on another VLAN's port is flooded within its own VLAN."""
        for endpoint in vlans:
            if endpoint.link is not self:
                raise ValueError(f"{endpoint!r} is not a port of this segment")
        with self._lock:
            self._vlans = {port: vid for port, vid in vlans.items() if vid != 1}

    def vlan_of(self, endpoint: Endpoint) -> int:
        with self._lock:
            return self._vlans.get(endpoint, 1)

    def fdb(self) -> dict[bytes, str]:
        """The learned MAC table: address -> endpoint name (``bridge fdb show``)."""
        with self._lock:
            return {mac: endpoint.name for mac, (endpoint, _at) in self._fdb.items()}

    def _destinations_locked(
        self, source: Endpoint, frame: bytes, now: int
    ) -> tuple[Endpoint, ...] | list[Endpoint]:
        vlans = self._vlans
        if self.kind == KIND_IP:
            return [endpoint for endpoint in self._endpoints
                    if endpoint is not source and self._same_vlan(vlans, source, endpoint)]
        dst, src = frame[0:6], frame[6:12]
        if not src[0] & 1:
            self._learn_locked(src, source, now)
        if not dst[0] & 1:  # unicast
            learned = self._fdb.get(dst)
            if (learned is not None and now - learned[1] < self.fdb_ageing
                    and self._same_vlan(vlans, source, learned[0])):
                port = learned[0]
                if port is source:
                    self.counters["filtered"] += 1
                    return ()
                self.counters["forwarded"] += 1
                return (port,)
        self.counters["flooded"] += 1
        return [endpoint for endpoint in self._endpoints
                if endpoint is not source and self._same_vlan(vlans, source, endpoint)]

    @staticmethod
    def _same_vlan(vlans: dict[Endpoint, int], source: Endpoint, target: Endpoint) -> bool:
        return not vlans or vlans.get(source, 1) == vlans.get(target, 1)

    def _learn_locked(self, mac: bytes, port: Endpoint, now: int) -> None:
        fdb = self._fdb
        if mac not in fdb and len(fdb) >= self.fdb_max:
            self._age_fdb_locked(now)
            if len(fdb) >= self.fdb_max:
                return  # table full: keep flooding for this address
        fdb[mac] = (port, now)

    def _age_fdb_locked(self, now: int) -> None:
        expired = [mac for mac, (_port, at) in self._fdb.items() if now - at >= self.fdb_ageing]
        for mac in expired:
            del self._fdb[mac]
