"""A point-to-point link between two processes, needing no root: two Hosts in their own
processes share a wire but not an interpreter.

Two transports carry the frames; ``ipc_pair(transport=...)`` builds both ends:

* ``"seqpacket"`` (the default): one ``AF_UNIX`` ``SOCK_SEQPACKET`` socketpair, one
  frame per message.  The kernel keeps message boundaries, so a frame is never split or
  merged; a receive that finds ``MSG_TRUNC`` (a message longer than the largest frame
  the link carries) is a torn message and a counted drop.
* ``"ring"``: a shared-memory ring per direction in a ``memfd`` (no ``/dev/shm`` name, so
  nothing is left behind whatever happens to the processes) with an ``eventfd``
  doorbell.  The producer rings only when the consumer said it is going to sleep, so a
  busy consumer takes frames in batches with no system call at all.  A liveness
  socketpair tells each side when the other process is gone.

``rcunet bench ipc`` measures both (µs and CPU per frame, frames/s, frames per wake-up);
docs/BENCHMARKS.md "Inter-process link" has the figures for both.

Spinning (``rx_spin``, off by default): the receive thread keeps polling the link for
that long after its last frame before it sleeps, yielding the CPU between polls (as a
NAPI thread keeps polling while packets keep coming, ``napi_defer_hard_irqs``, instead
of re-arming the interrupt at once).  A frame that arrives within the spin costs no
wake-up of the receiving process: on a virtual machine, where waking an idle CPU is
dear, request/response traffic gets faster and may even cost less CPU; the spin's own
polls are CPU the process spends while idle (docs/BENCHMARKS.md, ``procs-spin``).
``spin_hits`` counts the batches found by spinning (not those already waiting).  The
Hosts at both ends spin as long in their sockets' waits (``Host.wait_spin``), so a
frame that ends a wait costs no thread wake-up either (rcunet/sync/spin.py).

Each end is an ``IpcEndpoint``: the same surface as an in-memory ``Endpoint`` (``send``,
``set_receiver``, ``tap``, ``mtu``, ``kind``, ``checksum_offload``, ``stats``), so a
Host interface attaches to it the same way.  Frames keep their bytes: the sender's
impairment (``rcunet.link.impair``: loss, duplication, corruption, delay, reordering,
rate) runs in the sending process, the endpoint's tap sees what it sends and receives,
and checksum offload follows the in-memory rule: only a clean link (no active impairment
in either direction) lets Hosts skip checksums.

Bad input, as a NIC counts it: a frame longer than the MTU (plus the Ethernet header) is
dropped at send (``mtu_drops``), a torn or oversized message at receive
(``rx_length_errors``); a full transmit queue drops (``tx_queue_full``) after a short
wait rather than blocking a Host thread for ever (two receive threads each blocked
sending to the other would deadlock).  The peer process going away (its end closed,
crashed or killed) takes the link down: ``down`` holds the reason, ``on_down`` is called
once, and later sends are dropped (``tx_carrier_errors``), as on an unplugged cable.

An end is built in one process and may be handed to a child started with the 'spawn'
or 'forkserver' method: ``IpcEndpoint`` pickles as its file descriptors
(``multiprocessing.reduction.DupFd``), so it can be a ``Process`` argument.
"""

from __future__ import annotations

import errno
import mmap
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from rcunet.link.impair import Impairment, ImpairmentConfig
from rcunet.link.memory import ETH_VLAN_HEADER_LEN, KIND_ETHERNET, KIND_IP, Tap
from rcunet.sync.spin import spin_until

TRANSPORTS = ("seqpacket", "ring")
DEFAULT_TRANSPORT = "seqpacket"
#: How long a sender waits for room in a full transmit queue before dropping the frame.
TX_FULL_WAIT = 0.002
#: The kernel socket buffer asked for on each seqpacket end (capped by net.core.wmem_max
#: and rmem_max unless the process may force it).
SOCKET_BUFFER = 4 * 1024 * 1024
#: Bytes of frame data a ring holds per direction (a power of two).
RING_BYTES = 4 * 1024 * 1024
#: The ring consumer's longest sleep: bounds the cost of a doorbell lost to store->load
#: reordering on a weakly ordered CPU (see ``_Ring``).
RING_MAX_SLEEP = 0.001
#: A spinning ring consumer polls its doorbell, wake-up pipe and liveness socket once in
#: this many looks at the ring (a few µs apart): a wake-up or the peer's end is seen a
#: little later, and most looks make no system call.
RING_SPIN_POLL_EVERY = 16
#: How long closing a ring waits for a thread still inside a call on its mapping.
MAP_CLOSE_PATIENCE = 5.0
#: How long a receive thread blocks between checks that its endpoint is closing.
_POLL_SLICE_MS = 200
#: Busy polling (``busy_poll``): how long the receive thread leaves the link alone after
#: an application thread stopped polling it (Linux's ``gro_flush_timeout`` with
#: ``napi_defer_hard_irqs``: the device interrupt stays masked while the application
#: keeps polling, and a timer hands the queue back if it stops).  A frame that arrives
#: while nobody polls waits at most this long.
BUSY_POLL_DEFER = 0.0005

ENDPOINT_COUNTERS = ("tx_packets", "tx_bytes", "tx_dropped", "rx_packets", "rx_bytes",
                     "rx_dropped", "mtu_drops", "rx_length_errors", "tx_queue_full",
                     "tx_carrier_errors", "receiver_errors", "wakeups", "doorbells",
                     "busy_claims", "spin_hits")

#: Takes each received frame; what it returns is ignored (an endpoint's send returns a bool).
Receiver = Callable[[bytes], object]


def max_frame(kind: str, mtu: int) -> int:
    """The longest frame the link carries: the MTU plus an 802.1Q Ethernet header."""
    return mtu + ETH_VLAN_HEADER_LEN if kind == KIND_ETHERNET else mtu


class _Fd:
    """A file descriptor that travels to a spawned child as a duplicate."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, ...]:
        from multiprocessing import reduction

        return (_Fd._rebuild, (reduction.DupFd(self.fd),))

    @staticmethod
    def _rebuild(dup: Any) -> _Fd:
        return _Fd(dup.detach())


# ============================================================================ transports
# Plain ints: ``flags & socket.MSG_TRUNC`` would build an IntFlag through the enum
# machinery on every frame (0.6 µs against 0.03 for two ints; py-spy put 4 µs of a tcp_crr
# transaction in the enum code, ``.venv/bin/py-spy record --gil`` of tcp_crr --target procs).
_MSG_DONTWAIT = int(socket.MSG_DONTWAIT)
_MSG_TRUNC = int(socket.MSG_TRUNC)


class _SeqpacketTransport:
    """One end of an AF_UNIX SOCK_SEQPACKET pair; one frame per message.

    Concurrency: ``put`` from any thread (the kernel orders concurrent sends; each is one
    whole message); ``take`` from the endpoint's receive thread only.
    """

    name = "seqpacket"

    def __init__(self, sock: socket.socket, largest: int) -> None:
        self.sock = sock
        self.largest = largest  # immutable
        self._wake_r, self._wake_w = _wake_pipe()  # wake(): the link's poller returns
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLIN)
        self._poller.register(self._wake_r, select.POLLIN)

    def fds(self) -> list[int]:
        return [self.sock.fileno()]

    @classmethod
    def from_fds(cls, fds: list[int], largest: int) -> _SeqpacketTransport:
        return cls(socket.socket(fileno=fds[0]), largest)

    def put(self, frame: bytes) -> str | None:
        """Send one frame; None, or why it was not sent ("full", "down")."""
        try:
            self.sock.send(frame, _MSG_DONTWAIT)
            return None
        except BlockingIOError:
            pass
        except OSError:
            return "down"
        # the peer's queue is full: wait a moment for room, then give up on this frame
        try:
            _r, writable, _x = select.select([], [self.sock], [], TX_FULL_WAIT)
            if writable:
                self.sock.send(frame, _MSG_DONTWAIT)
                return None
        except BlockingIOError:
            pass
        except OSError:
            return "down"
        return "full"

    def take(self, counts: dict[str, int], timeout_ms: float = _POLL_SLICE_MS,
             spin: float = 0.0) -> list[bytes] | None:
        """Wait up to ``timeout_ms`` for frames and return them (a batch: what is queued
        now); [] on a quiet slice, a ``wake()`` or a torn message; None when the peer is
        gone.  With ``spin`` (seconds), poll without sleeping that long first.  One
        caller at a time (the endpoint's receiver)."""
        poll = self._poller.poll
        events = poll(0) if spin else None
        if spin and not events:
            events = spin_until(lambda: poll(0), spin)
            if any(fd != self._wake_r for fd, _event in events):
                counts["spin_hits"] += 1  # frames (or the peer's end), not a wake-up
        if not events:
            events = poll(timeout_ms)
        if not events:
            return []
        for fd, _event in events:
            if fd == self._wake_r:
                _drain_wake(fd)
        frames: list[bytes] = []
        sock, bufsize = self.sock, self.largest + 1
        while True:
            try:
                data, _anc, flags, _addr = sock.recvmsg(bufsize, 0, _MSG_DONTWAIT)
            except BlockingIOError:
                return frames
            except OSError:
                return frames or None
            if flags & _MSG_TRUNC or len(data) > self.largest:
                counts["rx_length_errors"] += 1  # torn: longer than any frame we carry
                continue
            if not data:
                return frames or None  # EOF: the peer closed its end (or died)
            frames.append(data)

    def wake(self) -> None:
        _poke(self._wake_w)

    def close(self) -> None:
        self.sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)


# Ring layout: a 64-byte header per direction, then the data area.
#   head     u64 at 0: bytes ever produced (written by the producer only)
#   tail     u64 at 8: bytes ever consumed (written by the consumer only)
#   sleeping u32 at 16: the consumer is about to sleep and wants the doorbell
# A record is u32 length, u32 magic, the frame, padding to 8 bytes.  A record that does
# not fit before the end of the area is preceded by a wrap marker (magic WRAP).
_HEADER = 64
_U64 = struct.Struct("=Q")
_U32 = struct.Struct("=I")
_RECORD = struct.Struct("=II")
_MAGIC = 0x52434E46  # "RCNF"
_WRAP = 0x52434E57  # "RCNW"


class _Ring:
    """One direction's ring in a shared mapping, single producer, single consumer.

    Ordering: the producer writes the record, then stores ``head`` (one aligned 8-byte
    store: a single ``mov`` in glibc's memcpy for 8 bytes, so the consumer loads the old
    or the new value, never half of each); the consumer loads ``head``, reads the records
    before it, then stores ``tail``.  On x86 (TSO) stores are seen in program order, so a
    consumer that sees the new head sees the record.  The doorbell is the store->load
    pattern (producer: store head, load sleeping; consumer: store sleeping, load head),
    which TSO may reorder; an uncontended ``threading.Lock`` acquire between the two
    (a locked instruction, a full barrier on x86) orders them, and the consumer never
    sleeps longer than RING_MAX_SLEEP, so on a CPU where that is not a full barrier a
    lost doorbell is a delay, not a hang.  A record whose header is not one we wrote
    (a torn or stray write) is a counted drop and the consumer skips to ``head``.
    """

    def __init__(self, mapping: mmap.mmap, base: int, size: int) -> None:
        self.map = mapping
        self.base = base  # immutable: offset of this ring's header in the mapping
        self.data = base + _HEADER  # immutable
        self.size = size  # immutable
        self._fence = threading.Lock()

    def _load(self, offset: int) -> int:
        value: int = _U64.unpack_from(self.map, self.base + offset)[0]
        return value

    def fence(self) -> None:
        with self._fence:  # a locked instruction: a full memory barrier on x86
            pass

    def produce(self, frame: bytes) -> bool | None:
        """Append a record; None when the ring is full, else whether the consumer asked
        for the doorbell."""
        mapping, size = self.map, self.size
        head = self._load(0)
        tail = self._load(8)
        need = (8 + len(frame) + 7) & ~7
        offset = head % size
        room_to_end = size - offset
        wrap = room_to_end < need
        total = need + (room_to_end if wrap else 0)
        if size - (head - tail) < total:
            return None
        if wrap:
            _RECORD.pack_into(mapping, self.data + offset, 0, _WRAP)
            head += room_to_end
            offset = 0
        position = self.data + offset
        mapping[position + 8:position + 8 + len(frame)] = frame
        _RECORD.pack_into(mapping, position, len(frame), _MAGIC)
        _U64.pack_into(mapping, self.base, head + need)  # publish
        self.fence()
        return bool(_U32.unpack_from(mapping, self.base + 16)[0])

    def consume(self, largest: int, counts: dict[str, int]) -> list[bytes]:
        mapping, size, data = self.map, self.size, self.data
        head = self._load(0)
        tail = self._load(8)
        frames: list[bytes] = []
        while tail < head:
            offset = tail % size
            if size - offset < 8:
                tail += size - offset  # too short for a header: the producer wrapped
                continue
            length, magic = _RECORD.unpack_from(mapping, data + offset)
            if magic == _WRAP:
                tail += size - offset
                continue
            if magic != _MAGIC or length > largest or offset + 8 + length > size:
                counts["rx_length_errors"] += 1
                tail = head  # torn: nothing behind it can be trusted
                break
            start = data + offset + 8
            frames.append(mapping[start:start + length])
            tail += (8 + length + 7) & ~7
        _U64.pack_into(mapping, self.base + 8, tail)
        return frames

    def set_sleeping(self, sleeping: bool) -> None:
        _U32.pack_into(self.map, self.base + 16, int(sleeping))
        if sleeping:
            self.fence()

    def empty(self) -> bool:
        return self._load(0) == self._load(8)


class _RingTransport:
    """Two rings in one memfd (a->b, b->a), one eventfd doorbell per direction, and a
    socketpair that only says whether the peer is alive.

    Concurrency: ``put`` may be called from several threads; ``_tx_lock`` makes them
    one producer.  ``take`` runs in the receive thread only (the one consumer).
    """

    name = "ring"

    def __init__(self, memfd: int, tx_bell: int, rx_bell: int, alive: socket.socket,
                 side: int, largest: int, ring_bytes: int) -> None:
        self.memfd, self.tx_bell, self.rx_bell, self.alive = memfd, tx_bell, rx_bell, alive
        self.side = side  # immutable: 0 produces into ring 0, 1 into ring 1
        self.largest = largest  # immutable
        self.ring_bytes = ring_bytes  # immutable
        span = _HEADER + ring_bytes
        # One mapping per direction, each touched by one thread at a time (the producer
        # under _tx_lock, the consumer as the link's receiver): an mmap object's count of
        # buffer exports is not atomic on a free-threaded build, and two threads taking
        # buffers of one mapping at once could lose a decrement, after which close()
        # meets BufferError for ever and the mapping's descriptor stays open.
        self.tx = _Ring(mmap.mmap(memfd, 2 * span), side * span, ring_bytes)
        self.rx = _Ring(mmap.mmap(memfd, 2 * span), (1 - side) * span, ring_bytes)
        self._tx_lock = threading.Lock()
        self._closed = False  # guarded-by: _tx_lock (no put touches the map or a bell after)
        self._wake_r, self._wake_w = _wake_pipe()
        self._poller = select.poll()
        self._poller.register(rx_bell, select.POLLIN)
        self._poller.register(alive.fileno(), select.POLLIN)
        self._poller.register(self._wake_r, select.POLLIN)

    def fds(self) -> list[int]:
        return [self.memfd, self.tx_bell, self.rx_bell, self.alive.fileno()]

    @classmethod
    def from_fds(cls, fds: list[int], side: int, largest: int,
                 ring_bytes: int) -> _RingTransport:
        memfd, tx_bell, rx_bell, alive = fds
        return cls(memfd, tx_bell, rx_bell, socket.socket(fileno=alive), side, largest,
                   ring_bytes)

    def put(self, frame: bytes) -> str | None:
        deadline = None
        while True:
            with self._tx_lock:
                if self._closed:
                    return "down"
                asked = self.tx.produce(frame)
                if asked:  # under the lock: close() cannot give the bell's number back
                    os.eventfd_write(self.tx_bell, 1)
            if asked is not None:
                return None
            # full: the consumer is behind; give it a moment (it is awake: it has work)
            now = time.monotonic()
            if deadline is None:
                deadline = now + TX_FULL_WAIT
            elif now >= deadline:
                return "full"
            time.sleep(0.0002)

    def take(self, counts: dict[str, int], timeout_ms: float = _POLL_SLICE_MS,
             spin: float = 0.0) -> list[bytes] | None:
        """As the seqpacket transport's; the consumer never sleeps longer than
        RING_MAX_SLEEP (see ``_Ring``).  One caller at a time (the endpoint's
        receiver)."""
        rx = self.rx
        frames = rx.consume(self.largest, counts)
        if frames:
            return frames
        if spin:
            # Frames end the spin, and so does a wake-up or the peer's end on the poller;
            # the ring is memory, looked at every time, the poller a system call (which
            # lets the GIL go and come back), looked at once in RING_SPIN_POLL_EVERY looks.
            poll = self._poller.poll
            looks = 0

            def ready() -> bool:
                nonlocal looks
                looks += 1
                return not rx.empty() or (looks % RING_SPIN_POLL_EVERY == 0 and bool(poll(0)))

            spin_until(ready, spin)
            frames = rx.consume(self.largest, counts)
            if frames:
                counts["spin_hits"] += 1
                return frames
        rx.set_sleeping(True)
        if not rx.empty():  # a frame published before the producer saw us sleeping
            rx.set_sleeping(False)
            return rx.consume(self.largest, counts)
        events = self._poller.poll(min(timeout_ms, RING_MAX_SLEEP * 1000))
        rx.set_sleeping(False)
        for fd, _event in events:
            if fd == self.rx_bell:
                os.eventfd_read(self.rx_bell)
                counts["doorbells"] += 1
            elif fd == self._wake_r:
                _drain_wake(fd)
            elif fd == self.alive.fileno():
                try:
                    if not self.alive.recv(1, _MSG_DONTWAIT):
                        return rx.consume(self.largest, counts) or None  # peer gone
                except BlockingIOError:
                    pass
                except OSError:
                    return None
        return rx.consume(self.largest, counts)

    def wake(self) -> None:
        _poke(self._wake_w)

    @staticmethod
    def _close_map(mapping: mmap.mmap) -> None:
        """Unmap, waiting out a thread that is inside pack_into/unpack_from on the
        mapping this moment (BufferError: on a free-threaded build nothing orders that
        call with ours; it lasts microseconds).  Past MAP_CLOSE_PATIENCE the unmap, and
        the mapping's own descriptor, are left to the object's last user (its
        deallocation), which keeps that user's memory valid."""
        deadline = time.monotonic() + MAP_CLOSE_PATIENCE
        while True:
            try:
                mapping.close()
                return
            except BufferError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.001)

    def close(self) -> None:
        with self._tx_lock:  # a put in progress finishes first; later ones see _closed
            self._closed = True
        for ring in (self.tx, self.rx):
            self._close_map(ring.map)
        for fd in (self.memfd, self.tx_bell, self.rx_bell, self._wake_r, self._wake_w):
            os.close(fd)
        self.alive.close()


_Transport = _SeqpacketTransport | _RingTransport


def _wake_pipe() -> tuple[int, int]:
    """A non-blocking pipe whose readability makes the link's poller return."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    return read_end, write_end


def _poke(fd: int) -> None:
    try:
        os.write(fd, b"x")
    except BlockingIOError:
        pass  # the pipe is full of wake-ups already: the poller will return


def _drain_wake(fd: int) -> None:
    try:
        os.read(fd, 512)
    except BlockingIOError:
        pass  # another wake-up's read took it


# ============================================================================ endpoint
class IpcEndpoint:
    """One end of an inter-process link (see the module docstring).

    Concurrency:
      counters     guarded by ``_lock`` (a send takes it once to count and impair; the
                   receive thread takes it once per batch).
      impairment   not thread-safe (its random state advances in one order): used under
                   ``_lock``; held frames are released by the ``-release`` thread.
      receiver, tap, on_down   single attribute stores, loaded once per use (atomic).
      down         set once, under ``_lock``, by whichever thread sees the link die.
    Lock order: ``_lock`` is a leaf (taps, receivers and the transport run outside it).
    """

    def __init__(self, transport: _Transport, *, kind: str, mtu: int, name: str,
                 offload: bool, tx_impair: ImpairmentConfig | None,
                 rx_impair_active: bool, seed: int, rx_spin: float = 0.0) -> None:
        if rx_spin < 0:
            raise ValueError(f"rx_spin must be >= 0 seconds, got {rx_spin}")
        self.transport = transport
        #: How long the receive thread polls on after its last frame before it sleeps
        #: (seconds; 0: it sleeps at once).  Immutable.
        self.rx_spin = rx_spin
        self.kind = kind  # immutable
        self.mtu = mtu  # immutable
        self.name = name  # immutable
        self.largest = max_frame(kind, mtu)  # immutable
        self._offload = offload  # immutable: built clean and with offload allowed
        self._tx_config = tx_impair  # immutable (for pickling)
        self._rx_impair_active = rx_impair_active  # immutable
        self._seed = seed  # immutable
        self.impairment = (Impairment(tx_impair, seed=seed, ethernet=kind == KIND_ETHERNET)
                           if tx_impair is not None and tx_impair.active else None)
        self.receiver: Receiver | None = None  # atomic: one attribute store/load
        self.tap: Tap | None = None  # atomic: one attribute store/load
        self.on_down: Callable[[str], None] | None = None  # atomic
        #: Wraps the delivery of each received batch (a Host's ``wakeups.deferred``:
        #: the sockets it wakes are woken when the batch is done).  Immutable once the
        #: receive thread runs.
        self.around_batch: Callable[[], AbstractContextManager[Any]] = nullcontext
        self.counters = dict.fromkeys(ENDPOINT_COUNTERS, 0)  # guarded-by: _lock
        self.down: str | None = None  # guarded-by: _lock (set once)
        self.last_error: Exception | None = None  # guarded-by: _lock
        self._lock = threading.Lock()
        self._release_cv = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._closing = False  # guarded-by: _lock
        self._started = False
        # Receiving: whoever holds ``_receiver`` takes frames and delivers them (the
        # receive thread, or an application thread busy polling, see ``claim``), so
        # frames are delivered in order and the transport has one consumer.
        self._receiver = threading.Lock()
        self._scratch = dict.fromkeys(ENDPOINT_COUNTERS, 0)  # guarded-by: _receiver
        self._defer_until = 0.0  # guarded-by: _lock; the receive thread keeps off till then
        #: The thread holding ``_receiver`` (set after acquiring it, cleared before
        #: releasing it; read unlocked: one attribute load, atomic, a stale value costs a
        #: failed claim or one needless wake-up).
        self._receiving: int | None = None
        self._rx_thread: int | None = None  # immutable once the receive thread runs
        self._nudge = threading.Event()  # wakes a parked receive thread (close, hand-back)

    # -- the Endpoint surface ------------------------------------------------------------
    @property
    def checksum_offload(self) -> bool:
        """The in-memory rule: Hosts may skip checksums only on a clean link."""
        return self._offload and self.impairment is None and not self._rx_impair_active

    def set_receiver(self, receiver: Receiver | None) -> None:
        self.receiver = receiver

    def stats(self) -> dict[str, int]:
        with self._lock:
            out = dict(self.counters)
            if self.impairment is not None:
                for name, value in self.impairment.counters.items():
                    if name != "frames":
                        out[name] = value
            return out

    def __repr__(self) -> str:
        return f"IpcEndpoint({self.name!r}, {self.transport.name})"

    # -- sending ---------------------------------------------------------------------------
    def send(self, frame: bytes | bytearray | memoryview) -> bool:
        """Put ``frame`` on the link; False when it was dropped at once (too big, link
        down, queue full); impairment losses show in the counters."""
        frame = bytes(frame)
        size = len(frame)
        impairment = self.impairment
        with self._lock:
            counts = self.counters
            counts["tx_packets"] += 1
            counts["tx_bytes"] += size
            if size > self.largest or (self.kind == KIND_ETHERNET and size < 14):
                counts["mtu_drops"] += 1
                counts["tx_dropped"] += 1
                return False
            if self.down is not None or self._closing:
                counts["tx_carrier_errors"] += 1
                counts["tx_dropped"] += 1
                return False
            if impairment is None:
                frames = [frame]
            else:
                frames = impairment.submit(frame, time.monotonic_ns())
                self._release_cv.notify()  # a held frame may move the next deadline
        tap = self.tap  # atomic: one attribute load (pairs with its store)
        if tap is not None:
            tap.write(time.time_ns(), frame)
        sent = True
        for out in frames:
            sent = self._put(out) and sent
        return sent

    def _put(self, frame: bytes) -> bool:
        problem = self.transport.put(frame)
        if problem is None:
            return True
        with self._lock:
            self.counters["tx_dropped"] += 1
            if problem == "full":
                self.counters["tx_queue_full"] += 1
                return False
            self.counters["tx_carrier_errors"] += 1
            closing = self._closing
        if not closing:  # our own close() is not the peer going away
            self._went_down("the peer's end is closed")
        return False

    # -- threads ---------------------------------------------------------------------------
    def start(self) -> IpcEndpoint:
        """Start the receive thread (and the release thread of an impaired end)."""
        if self._started:
            return self
        self._started = True
        self._spawn(f"ipc-{self.name}-rx", self._receive_loop)
        if self.impairment is not None:
            self._spawn(f"ipc-{self.name}-release", self._release_loop)
        return self

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _receive_loop(self) -> None:
        self._rx_thread = threading.get_ident()
        while True:
            with self._lock:
                closing, defer_until = self._closing, self._defer_until
            if closing:
                return
            wait = defer_until - time.monotonic()
            if wait > 0:  # an application thread polls the link: keep off for a while
                self._nudge.wait(min(wait, BUSY_POLL_DEFER))  # inf while one holds it
                self._nudge.clear()
                continue
            if not self._receiver.acquire(blocking=False):
                self._nudge.wait(BUSY_POLL_DEFER)  # a poller has it right now
                self._nudge.clear()
                continue
            self._receiving = self._rx_thread
            try:
                alive = self._receive_once(_POLL_SLICE_MS)
            finally:
                self._receiving = None
                self._receiver.release()
            if not alive:
                return

    def _receive_once(self, timeout_ms: float) -> bool:
        """Take what the link has (waiting up to ``timeout_ms``) and deliver it; False
        once the link is down or closing.  The caller holds ``_receiver``."""
        scratch = self._scratch
        frames = self.transport.take(scratch, timeout_ms, self.rx_spin)
        with self._lock:
            closing = self._closing
            if scratch["rx_length_errors"] or scratch["doorbells"] or scratch["spin_hits"]:
                self.counters["rx_length_errors"] += scratch["rx_length_errors"]
                self.counters["rx_dropped"] += scratch["rx_length_errors"]
                self.counters["doorbells"] += scratch["doorbells"]
                self.counters["spin_hits"] += scratch["spin_hits"]
                scratch["rx_length_errors"] = scratch["doorbells"] = scratch["spin_hits"] = 0
        if frames is None:
            if not closing:
                self._went_down("the peer process closed its end (exited or died)")
            return False
        if frames:
            self._deliver(frames)
        return not closing

    # -- busy polling (an application thread runs the receive path while it waits) ----
    def claim(self, timeout: float = 0.05) -> bool:
        """Make the calling thread the link's receiver (``SO_BUSY_POLL``-like: a thread
        about to sleep on a socket polls the link itself, so a frame wakes one thread
        instead of the receive thread and then the sleeper).  The receive thread is
        kicked out of its poll and keeps off until ``BUSY_POLL_DEFER`` after
        ``unclaim``.  False (sleep as usual) when the link is down or closing, when
        another application thread polls it (its delivery wakes ours), or when the
        receive thread did not let go within ``timeout``."""
        with self._lock:
            if self._closing or self.down is not None:
                return False
        if not self._receiver.acquire(blocking=False):
            # atomic: attribute loads (see _receiving)
            if self._receiving is None or self._receiving != self._rx_thread:
                return False  # another poller (or a hand-over in progress): sleep
            with self._lock:
                self._defer_until = float("inf")  # once it lets go, it keeps off
            self.transport.wake()  # the receive thread sleeps in take(): make it let go
            if not self._receiver.acquire(timeout=timeout):
                self._hand_back()
                return False
        self._receiving = threading.get_ident()
        with self._lock:
            self._defer_until = float("inf")
            self.counters["busy_claims"] += 1
        return True

    def poll_once(self, timeout_ms: float) -> bool:
        """The claimed receiver: one wait of up to ``timeout_ms`` on the link (a
        ``kick()`` ends it early) and delivery of what came; False once the link is down
        or closing."""
        return self._receive_once(timeout_ms)

    def kick(self) -> None:
        """End the claimed receiver's wait in ``poll_once`` (another thread woke the
        socket it waits on)."""
        self.transport.wake()

    def unclaim(self, hand_back: bool = False) -> None:
        """Stop being the receiver: the receive thread takes the link back after
        ``BUSY_POLL_DEFER`` (another wait is likely soon), or at once with
        ``hand_back`` (the caller is going to sleep for long)."""
        with self._lock:
            self._defer_until = 0.0 if hand_back else time.monotonic() + BUSY_POLL_DEFER
        self._receiving = None
        self._receiver.release()
        if hand_back:
            self._nudge.set()

    def _hand_back(self) -> None:
        with self._lock:
            self._defer_until = 0.0
        self._nudge.set()

    def _deliver(self, frames: list[bytes]) -> None:
        receiver = self.receiver  # atomic: one attribute load (pairs with set_receiver)
        tap = self.tap
        with self._lock:
            counts = self.counters
            counts["wakeups"] += 1
            counts["rx_packets"] += len(frames)
            counts["rx_bytes"] += sum(map(len, frames))
            if receiver is None:
                counts["rx_dropped"] += len(frames)
        if receiver is None:
            return
        with self.around_batch():
            for frame in frames:
                if tap is not None:
                    tap.write(time.time_ns(), frame)
                try:
                    receiver(frame)
                except Exception as error:  # a wire never fails: the frame is gone
                    with self._lock:
                        self.counters["receiver_errors"] += 1
                        self.last_error = error

    def _release_loop(self) -> None:
        """Send frames an impairment held (delay, reordering, rate) when they are due."""
        impairment = self.impairment
        assert impairment is not None
        while True:
            with self._lock:
                while not self._closing:
                    due = impairment.release(time.monotonic_ns())
                    if due:
                        break
                    deadline = impairment.next_deadline()
                    timeout = None if deadline is None else max(
                        0.0, (deadline - time.monotonic_ns()) / 1e9)
                    self._release_cv.wait(timeout)
                else:
                    return
                down = self.down is not None
            if not down:
                for frame in due:
                    self._put(frame)

    # -- going down --------------------------------------------------------------------
    def _went_down(self, reason: str) -> None:
        with self._lock:
            if self.down is not None:
                return
            self.down = reason
        callback = self.on_down  # atomic: one attribute load
        if callback is not None:
            callback(reason)

    def mark_down(self, reason: str) -> None:
        """Take the link down from outside (the parent saw the peer process die)."""
        self._went_down(reason)

    def close(self) -> None:
        """Stop the threads and close the descriptors; the peer sees the link go down."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._release_cv.notify_all()
        self._nudge.set()
        self.transport.wake()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)
        # a busy poller inside poll_once returns on the wake-up and sees ``_closing``
        owned = self._receiver.acquire(timeout=5)
        self.transport.close()
        if owned:
            self._receiver.release()

    # -- crossing to a child process -----------------------------------------------------
    def __reduce__(self) -> tuple[Any, ...]:
        if self._started:
            raise TypeError("a started IpcEndpoint stays in its process")
        transport = self.transport
        extra: tuple[int, ...] = ()
        if isinstance(transport, _RingTransport):
            extra = (transport.side, transport.ring_bytes)
        return (_rebuild_endpoint,
                (transport.name, [_Fd(fd) for fd in transport.fds()], extra, self.kind,
                 self.mtu, self.name, self._offload, self._tx_config,
                 self._rx_impair_active, self._seed, self.rx_spin))

    def forget(self) -> None:
        """Close this process's copy of an end handed to a child (its descriptors now
        live there), so the parent holds only its own end."""
        for fd in self.transport.fds():
            try:
                os.close(fd)
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise
        transport = self.transport
        if isinstance(transport, _SeqpacketTransport):
            transport.sock.detach()
        else:
            transport.alive.detach()
            transport.tx.map.close()
            transport.rx.map.close()
        os.close(transport._wake_r)
        os.close(transport._wake_w)


def _rebuild_endpoint(transport_name: str, fds: list[_Fd], extra: tuple[int, ...],
                      kind: str, mtu: int, name: str, offload: bool,
                      tx_impair: ImpairmentConfig | None, rx_impair_active: bool,
                      seed: int, rx_spin: float) -> IpcEndpoint:
    numbers = [fd.fd for fd in fds]
    largest = max_frame(kind, mtu)
    transport: _Transport
    if transport_name == "seqpacket":
        transport = _SeqpacketTransport.from_fds(numbers, largest)
    else:
        transport = _RingTransport.from_fds(numbers, extra[0], largest, extra[1])
    return IpcEndpoint(transport, kind=kind, mtu=mtu, name=name, offload=offload,
                       tx_impair=tx_impair, rx_impair_active=rx_impair_active, seed=seed,
                       rx_spin=rx_spin)


# ============================================================================ building
def _seqpacket_pair(largest: int) -> tuple[_Transport, _Transport]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for sock in (a, b):
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
            except OSError:
                pass  # the default buffer works, only with less queued in flight
    return _SeqpacketTransport(a, largest), _SeqpacketTransport(b, largest)


def _ring_pair(largest: int, ring_bytes: int) -> tuple[_Transport, _Transport]:
    if ring_bytes < 2 * (largest + 16):
        raise ValueError(f"a ring of {ring_bytes} bytes cannot hold two {largest}-byte "
                         "frames")
    memfd = os.memfd_create("rcunet-ipc-ring", os.MFD_CLOEXEC)
    os.ftruncate(memfd, 2 * (_HEADER + ring_bytes))
    bell_ab = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    bell_ba = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    alive_a, alive_b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    memfd_b = os.dup(memfd)
    bell_ab_b, bell_ba_b = os.dup(bell_ab), os.dup(bell_ba)
    return (_RingTransport(memfd, bell_ab, bell_ba, alive_a, 0, largest, ring_bytes),
            _RingTransport(memfd_b, bell_ba_b, bell_ab_b, alive_b, 1, largest, ring_bytes))


def ipc_pair(*, transport: str = DEFAULT_TRANSPORT, kind: str = KIND_ETHERNET,
             mtu: int = 1500, impair_ab: ImpairmentConfig | None = None,
             impair_ba: ImpairmentConfig | None = None, checksum_offload: bool = True,
             seed: int = 1, ring_bytes: int = RING_BYTES,
             rx_spin: float = 0.0) -> tuple[IpcEndpoint, IpcEndpoint]:
    """Both ends of a new inter-process link: ``a`` sends with ``impair_ab``, ``b`` with
    ``impair_ba``; each end's receive thread spins ``rx_spin`` seconds before it sleeps
    (see the module docstring).  Start each with ``start()`` in the process that uses
    it."""
    if transport not in TRANSPORTS:
        raise ValueError(f"IPC transport {transport!r} (expected one of {TRANSPORTS})")
    if kind not in (KIND_ETHERNET, KIND_IP):
        raise ValueError(f"link kind {kind!r} (expected 'ethernet' or 'ip')")
    if mtu < 68:
        raise ValueError(f"MTU {mtu} below IPv4's minimum of 68")
    largest = max_frame(kind, mtu)
    end_a, end_b = (_seqpacket_pair(largest) if transport == "seqpacket"
                    else _ring_pair(largest, ring_bytes))
    active_ab = impair_ab is not None and impair_ab.active
    active_ba = impair_ba is not None and impair_ba.active
    a = IpcEndpoint(end_a, kind=kind, mtu=mtu, name="a", offload=checksum_offload,
                    tx_impair=impair_ab, rx_impair_active=active_ba, seed=seed,
                    rx_spin=rx_spin)
    b = IpcEndpoint(end_b, kind=kind, mtu=mtu, name="b", offload=checksum_offload,
                    tx_impair=impair_ba, rx_impair_active=active_ab, seed=seed + 1,
                    rx_spin=rx_spin)
    return a, b
