"""Linux TAP and TUN devices as rcunet links.

A ``TapDevice`` opens ``/dev/net/tun`` and attaches to (or creates) a kernel interface:

* ``mode="tap"``: Ethernet frames; the rcunet Host runs ARP and neighbour discovery
  against the kernel's side of the device as it would against any Ethernet peer;
* ``mode="tun"``: bare IPv4/IPv6 packets (a point-to-point link, no link layer).

Always ``IFF_NO_PI`` (no 4-byte packet-information prefix) and no ``IFF_VNET_HDR``: the
kernel then hands over complete checksums and never sends GSO super-frames, so every
frame is one wire packet.  With ``queues > 1`` the device is multi-queue
(``IFF_MULTI_QUEUE``): one file descriptor per queue, the kernel steers flows across
them, and one reader thread per queue feeds the Host's receive workers.

The equivalent shell commands (``ip-tuntap(8)``)::

    ip tuntap add dev NAME mode tap [multi_queue]   # what TUNSETIFF does when absent
    ip link set NAME up

Reader threads wait with ``poll()`` on the queue's non-blocking fd and on a wake pipe,
read until ``EAGAIN`` and hand each frame to ``host.receive``.  Frames longer than the
MTU (plus the Ethernet header on TAP) are dropped and counted as a NIC would
(``rx_length_errors``).

Losing the device — the interface deleted (``POLLERR``, then ``EBADFD`` on read or
write), ``EBADF``, ``EIO`` on read, ``ENODEV``, ``ENXIO`` — stops the readers and is
reported once: ``device.lost`` holds the reason, ``device.wait_lost()`` returns it and
the ``on_lost`` callback is called; nothing raises into the Host.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rcunet.host.counters import Counters
from rcunet.link.pcap import LINKTYPE_ETHERNET, LINKTYPE_RAW, PcapWriter

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.host.interface import Interface

TUN_PATH = "/dev/net/tun"
TUNSETIFF = 0x400454CA  # _IOW('T', 202, int)
IFF_TUN = 0x0001
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFF_MULTI_QUEUE = 0x0100
IFNAMSIZ = 16
ETH_HLEN = 14
VLAN_HLEN = 4
MAX_QUEUES = 16
_IFREQ = struct.Struct("16sH22x")  # struct ifreq: name, flags, union padding
_READ_SIZE = 65536 + ETH_HLEN + VLAN_HLEN  # larger than anything the kernel may send
_BATCH = 64  # frames read per wake-up before polling again
_POLL_MS = 500  # readers re-check the stop flag at least this often
_POLL_LOST = select.POLLERR | select.POLLHUP | select.POLLNVAL
#: errno values that mean the device is gone (deleted, or the fd detached from it).
LOST_ERRNOS = frozenset({errno.EBADFD, errno.EBADF, errno.ENODEV, errno.ENXIO, errno.EIO})
#: On write, EIO only means "the kernel side is down" (the frame is dropped) — not lost.
_WRITE_LOST_ERRNOS = LOST_ERRNOS - {errno.EIO}


class TapError(OSError):
    """The device could not be opened; the message says why and what to do."""


def random_mac() -> bytes:
    """A locally administered unicast MAC (02:xx:...)."""
    return bytes([0x02]) + os.urandom(5)


def open_queue(name: str, mode: str, multi_queue: bool) -> int:
    """Open one queue of device ``name`` (created when absent) as a non-blocking fd."""
    flags = (IFF_TAP if mode == "tap" else IFF_TUN) | IFF_NO_PI
    if multi_queue:
        flags |= IFF_MULTI_QUEUE
    try:
        fd = os.open(TUN_PATH, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise TapError(errno.ENOENT, f"{TUN_PATH} is missing: load the tun module "
                       "(modprobe tun) or run where TUN/TAP is available") from None
    except PermissionError:
        raise TapError(errno.EPERM, f"cannot open {TUN_PATH}: permission denied "
                       "(needs root or CAP_NET_ADMIN)") from None
    try:
        fcntl.ioctl(fd, TUNSETIFF, _IFREQ.pack(name.encode(), flags))
    except OSError as exc:
        os.close(fd)
        raise _setiff_error(exc, name, mode, multi_queue) from None
    return fd


def _setiff_error(exc: OSError, name: str, mode: str, multi_queue: bool) -> TapError:
    code = exc.errno or errno.EINVAL
    if code == errno.EPERM:
        return TapError(code, f"cannot attach to {mode} device {name!r}: operation not "
                        "permitted (needs root or CAP_NET_ADMIN)")
    if code == errno.EBUSY:
        return TapError(code, f"{mode} device {name!r} is busy (another program holds it, "
                        "or it is not a single-queue device)")
    if code == errno.EINVAL:
        kind = "multi-queue" if multi_queue else "single-queue"
        return TapError(code, f"cannot attach to {name!r} as a {kind} {mode} device: it "
                        "exists with other flags (another mode, or single/multi-queue)")
    return TapError(code, f"cannot attach to {mode} device {name!r}: {os.strerror(code)}")


class TapDevice:
    """One TAP or TUN device with ``queues`` file descriptors.

    Use: ``dev = TapDevice("tap0")``; ``iface = dev.attach(host, addresses=[...])``;
    ``host.start()``; ``dev.start()``; ... ``dev.close()`` (before or after the Host).

    Concurrency:
      _fds        immutable after ``__init__`` until ``close``, which runs only after
                  every reader thread has been joined (no fd is closed under a poll).
      send        any thread; one ``os.write`` per frame, which the kernel keeps whole.
                  The queue is picked by flow hash so one flow's frames stay in order.
      lost        written once under ``_lost_lock``; readers load it (atomic: one
                  attribute load) paired with the store in ``_report_lost``.
      _stopping   threading.Event: set by ``close``, read by the readers.
      closed      set once by ``close`` (one attribute store) before the queues are
                  released; ``send`` loads it (atomic: one attribute load) and, if it
                  raced past, writes into a /dev/null sink (see ``_release_queues``).
      counters    per-thread shards (``rcunet.host.counters``).
      rx_per_queue  slot i written only by queue i's reader (one writer per slot, so
                  ``+= 1`` loses nothing); other threads read a slot (atomic: one
                  list-slot load) and may see a slightly old value.
      pcap        ``PcapWriter`` serialises its own records.
    """

    def __init__(self, name: str, *, mode: str = "tap", queues: int = 1) -> None:
        if mode not in ("tap", "tun"):
            raise ValueError(f"mode must be 'tap' or 'tun', not {mode!r}")
        if not name or len(name.encode()) >= IFNAMSIZ or "/" in name or " " in name:
            raise ValueError(f"bad interface name {name!r} (1..15 characters, no '/' or space)")
        if not 1 <= queues <= MAX_QUEUES:
            raise ValueError(f"queues must be 1..{MAX_QUEUES}, got {queues}")
        self.name = name  # immutable
        self.mode = mode  # immutable
        self.queues = queues  # immutable
        self.counters = Counters()
        self.lost: str | None = None  # rcu: written once under _lost_lock
        self.on_lost: Callable[[str], None] | None = None
        self.pcap: PcapWriter | None = None
        self.rx_per_queue = [0] * queues  # owner: slot i by reader i
        self._lost_lock = threading.Lock()
        self._lost_event = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._host: Host | None = None
        self._iface: Interface | None = None
        self._max_frame = 0
        self._fds = self._open_all()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.closed = False

    def _open_all(self) -> list[int]:
        multi = self.queues > 1
        try:
            first = open_queue(self.name, self.mode, multi)
        except TapError as exc:
            if exc.errno != errno.EINVAL or multi:
                raise
            # One queue asked for, the device exists multi-queue: attach as one of them.
            first = open_queue(self.name, self.mode, True)
        fds = [first]
        try:
            for _ in range(self.queues - 1):
                fds.append(open_queue(self.name, self.mode, True))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    @property
    def is_ethernet(self) -> bool:
        return self.mode == "tap"

    def __repr__(self) -> str:
        return f"<TapDevice {self.name} {self.mode} queues={self.queues}>"

    # -- wiring ----------
    def attach(
        self,
        host: Host,
        *,
        mac: bytes | None = None,
        mtu: int = 1500,
        addresses: list[str] | tuple[str, ...] = (),
        ifname: str | None = None,
        pcap: PcapWriter | None = None,
    ) -> Interface:
        """Add an interface to ``host`` whose wire is this device (TAP: Ethernet with
        ``mac`` or a random local MAC; TUN: pure IP).  TAP/TUN never offload checksums."""
        if self._host is not None:
            raise ValueError(f"{self.name} is already attached to {self._host.name}")
        if pcap is not None and pcap.linktype != self.linktype:
            raise ValueError(f"{self.name}: the capture's linktype must be {self.linktype}")
        link_mac = (mac or random_mac()) if self.is_ethernet else None
        iface = host.add_interface(ifname or self.name, mac=link_mac, mtu=mtu,
                                   addresses=list(addresses), checksum_offload=False)
        self._max_frame = mtu + (ETH_HLEN + VLAN_HLEN if self.is_ethernet else 0)
        self.pcap = pcap
        self._host = host
        self._iface = iface
        iface.attach(self.send)
        return iface

    @property
    def linktype(self) -> int:
        return LINKTYPE_ETHERNET if self.is_ethernet else LINKTYPE_RAW

    def start(self) -> TapDevice:
        """Start one reader thread per queue (the Host should be started first)."""
        if self._host is None:
            raise RuntimeError(f"{self.name}: attach() to a Host before start()")
        if self._threads or self.closed:
            return self
        for index, fd in enumerate(self._fds):
            thread = threading.Thread(target=self._reader, args=(index, fd), daemon=True,
                                      name=f"{self.name}-q{index}")
            self._threads.append(thread)
            thread.start()
        return self

    # -- transmit ----------
    def send(self, frame: bytes) -> None:
        """Put one frame on the device (called by the Host's output path)."""
        if self.lost is not None or self.closed:  # atomic: attribute loads
            self.counters.inc("tx_dropped")
            return
        fds = self._fds
        fd = fds[0] if len(fds) == 1 else fds[self._tx_queue(frame) % len(fds)]
        pcap = self.pcap
        if pcap is not None:
            pcap.write(time.time_ns(), frame)
        try:
            os.write(fd, frame)
        except OSError as exc:
            code = exc.errno or 0
            if code in _WRITE_LOST_ERRNOS:
                self._report_lost(f"write: {os.strerror(code)}")
            else:  # EIO (kernel side down), ENOBUFS, EINVAL: the frame is dropped
                self.counters.inc("tx_errors")
            return
        self.counters.inc("tx_packets")

    def _tx_queue(self, frame: bytes) -> int:
        iface = self._iface
        host = self._host
        if iface is None or host is None:
            return 0
        return host.ip.flow_hash(iface, frame)

    # -- receive ----------
    def _reader(self, index: int, fd: int) -> None:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stopping.is_set():
            try:
                events = poller.poll(_POLL_MS)
            except InterruptedError:
                continue
            for ready_fd, mask in events:
                if ready_fd == self._wake_r:
                    return
                if mask & _POLL_LOST and not mask & select.POLLIN:
                    # POLLERR alone: the device was deleted; read() names the reason.
                    self._drain(index, fd)
                    if self.lost is None:
                        self._report_lost("the device reported an error (deleted?)")
                    return
            if events and not self._drain(index, fd):
                return

    def _drain(self, index: int, fd: int) -> bool:
        """Read up to a batch of frames; False once the device is lost."""
        host, iface = self._host, self._iface
        assert host is not None and iface is not None
        pcap = self.pcap
        for _ in range(_BATCH):
            try:
                frame = os.read(fd, _READ_SIZE)
            except BlockingIOError:
                return True
            except InterruptedError:
                continue
            except OSError as exc:
                code = exc.errno or 0
                if code in LOST_ERRNOS:
                    self._report_lost(f"read: {os.strerror(code)}")
                    return False
                self.counters.inc("rx_errors")
                continue
            if not frame:
                self._report_lost("read: end of file")
                return False
            if pcap is not None:
                pcap.write(time.time_ns(), frame)
            if len(frame) > self._max_frame:
                self.counters.inc("rx_length_errors")  # a NIC drops oversize frames
                host.counters.inc("RcunetLinkRxLengthErrors")
                continue
            self.counters.inc("rx_packets")
            self.rx_per_queue[index] += 1  # owner: this reader is the slot's only writer
            host.receive(iface, frame)
        return True

    # -- device loss ----------
    def _report_lost(self, reason: str) -> None:
        with self._lost_lock:
            if self.lost is not None:
                return
            self.lost = f"{self.mode} device {self.name!r} lost: {reason}"
        self._lost_event.set()
        callback = self.on_lost
        if callback is not None:
            callback(self.lost)

    def wait_lost(self, timeout: float | None = None) -> str | None:
        """Block until the device is lost (its reason) or ``timeout`` passes (None)."""
        self._lost_event.wait(timeout)
        return self.lost

    def stats(self) -> dict[str, int]:
        """``ip -s link``-style numbers: rx/tx packets, errors, drops, length errors."""
        return self.counters.snapshot()

    # -- teardown ----------
    def close(self) -> None:
        """Stop the readers, then close every queue (a non-persistent device vanishes)."""
        if self.closed:
            return
        self.closed = True
        self._stopping.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)
        self._release_queues()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        if self.pcap is not None:
            self.pcap.flush()

    def _release_queues(self) -> None:
        """Detach from the device now without closing the fd numbers: a sender that
        loaded ``_fds`` before ``closed`` was set must not write into a descriptor the
        process has since reused.  ``dup2`` of /dev/null drops our reference to the
        device (the kernel detaches the queue) and leaves a harmless sink; the sinks are
        closed when this object is collected."""
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        try:
            for fd in self._fds:
                os.dup2(null, fd, inheritable=False)
        finally:
            os.close(null)

    def __del__(self) -> None:
        if getattr(self, "closed", False):
            for fd in self._fds:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __enter__(self) -> TapDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
