"""Hosts in their own processes: a child process runs one Host and a function with it.

    net = Network(threaded=True)
    a = net.host("a")                          # a Host in this process
    b = net.host_process("b")                  # a HostProcess: its Host lives in a child
    net.link(a, b, "10.0.0.1/24", "10.0.0.2/24")   # an inter-process link (link/ipc.py)
    net.start()
    b.start(serve, 7)                          # serve(child, 7) runs in the child
    ... a's sockets talk to b's over the link ...
    b.stop(); outcome = b.join()               # result, counters, link stats, pcap, locks

Why 'spawn' (the default start method; 'forkserver' works too, 'fork' is refused): the
parent is threaded (receive workers, timers, link threads, the caller's own) and fork
copies only the calling thread, so a lock another thread held at that instant — a socket
lock, the allocator's, logging's — stays held for ever in the child; spawn starts a fresh
interpreter that imports rcunet, builds its Host from a picklable ``HostSpec`` and gets
its link's descriptors duplicated in (``IpcEndpoint`` pickles as its file descriptors).

The child (``_child_main``):
  * asks the kernel to kill it if the parent dies (``PR_SET_PDEATHSIG``), so an
    interrupted parent leaves no orphan;
  * builds the Host, attaches the links, starts the Host's threads;
  * runs ``function(child, *args)``; ``child`` (a ``Child``) has the Host, a ``stopping``
    event the parent's ``stop()`` sets, and ``report()``/``recv()`` for messages;
  * when the function returns, lets the connections it closed deliver what they still
    hold (a kernel keeps sending an orphan's queued data and FIN after the program
    exits; closing the Host at once would reset them and lose that data), for at most
    ``exit_linger`` seconds or until ``stop()``;
  * closes the Host and sends back an ``Outcome``: the result (or the exception's
    traceback), the Host's counters, each link's counters, pcap captures and lock
    statistics when asked for.

The parent (``HostProcess``) watches the child's sentinel and control pipe in a monitor
thread.  A child that exits without an outcome (crashed, killed) is reported with the
signal or status (``failure``); its links go down in the parent at once (the peer Host's
connections then fail as TCP says: retransmission timeouts, or ECONNRESET where a RST
came first), the process is reaped (no zombie), and it held no named resource (the link
is an unnamed socketpair or a memfd; the control channel a pipe), so nothing remains.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import faulthandler
import io
import multiprocessing
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import TYPE_CHECKING, Any

from rcunet.host.busypoll import attach_waits
from rcunet.link.ipc import IpcEndpoint
from rcunet.tuning import Tuning
from rcunet.wire.addr import is_link_local6

if TYPE_CHECKING:
    from rcunet.host.host import Host

START_METHODS = ("spawn", "forkserver")
DEFAULT_START_METHOD = "spawn"

#: How long ``join`` waits for an outcome after the child exited, and ``close`` for a
#: child to end after stop() before it is killed.
_EXIT_GRACE = 5.0
_PR_SET_PDEATHSIG = 1


def _context(start_method: str) -> SpawnContext | ForkServerContext:
    """The multiprocessing context of a start method ``HostProcess`` accepted
    (``START_METHODS``)."""
    if start_method == "forkserver":
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


@dataclass
class InterfaceSpec:
    """One interface of a child's Host and the link end it attaches to."""

    name: str
    endpoint: IpcEndpoint
    mac: bytes | None
    mtu: int
    addresses: list[str]
    inline_rx: bool
    capture: bool = False  # pcap of this interface (HostSpec.capture: of every one)
    busy_poll: bool = False  # sleepers poll this link (host/busypoll.py; inline_rx only)


@dataclass
class HostSpec:
    """Everything the child needs to build its Host (picklable)."""

    name: str
    tuning: Tuning
    seed: int
    rx_queues: int
    interfaces: list[InterfaceSpec] = field(default_factory=list)
    routes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    capture: bool = False  # pcap of every interface, returned in the outcome
    lockstat: bool = False  # lock statistics on, returned in the outcome
    lockdep: bool = False  # lock-order checking on; its reports come back in the outcome
    exit_linger: float = 30.0  # seconds closed connections may deliver after the function
    #: The CPUs the child's threads run on (sched_setaffinity before any thread starts);
    #: None: wherever the parent's may.
    cpus: tuple[int, ...] | None = None


@dataclass
class Outcome:
    """What a child sends back when its function has returned (or raised)."""

    result: Any = None
    error: str | None = None  # the traceback when the function raised
    counters: dict[str, int] = field(default_factory=dict)
    links: dict[str, dict[str, int]] = field(default_factory=dict)  # interface -> counts
    pcaps: dict[str, bytes] = field(default_factory=dict)  # interface -> pcap file
    lockstat: dict[str, Any] = field(default_factory=dict)  # class -> ClassStats
    lockdep_reports: list[str] = field(default_factory=list)
    exitcode: int | None = None  # set by the parent
    failure: str | None = None  # set by the parent: why the child died, if it did


class ChildFailed(Exception):
    """The child process died (crashed, killed) or its function raised."""


class Child:
    """What the function in a child gets: its Host and the line to the parent.

    Concurrency: ``report`` may be called from any thread (``_send_lock``); ``recv`` and
    ``stopping`` are fed by the control thread.
    """

    def __init__(self, host: Host, ctl: Connection) -> None:
        self.host = host
        self.name: str = host.name
        self.stopping = threading.Event()
        self._ctl = ctl
        self._send_lock = threading.Lock()
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def report(self, message: Any) -> None:
        """Send ``message`` to the parent (``HostProcess.recv``)."""
        with self._send_lock:
            self._ctl.send(("report", message))

    def recv(self, timeout: float | None = None) -> Any:
        """The next message the parent sent with ``HostProcess.send``."""
        try:
            return self._inbox.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{self.name}: no message from the parent in {timeout} s") \
                from None

    def _control_loop(self) -> None:
        while True:
            try:
                kind, body = self._ctl.recv()
            except (EOFError, OSError):
                self.stopping.set()  # the parent is gone (PDEATHSIG follows)
                return
            if kind == "stop":
                self.stopping.set()
            elif kind == "message":
                self._inbox.put(body)
            elif kind == "bye":
                return


# ============================================================================ the child
def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the control pipe's EOF still sets ``stopping``


def _build_host(spec: HostSpec) -> tuple[Any, dict[str, Any]]:
    from rcunet.host.host import Host
    from rcunet.link.pcap import LINKTYPE_ETHERNET, LINKTYPE_RAW, PcapWriter

    host = Host(spec.name, tuning=spec.tuning, seed=spec.seed, rx_queues=spec.rx_queues)
    captures: dict[str, Any] = {}
    for ispec in spec.interfaces:
        endpoint = ispec.endpoint
        iface = host.add_interface(ispec.name, mac=ispec.mac, mtu=ispec.mtu,
                                   addresses=ispec.addresses,
                                   checksum_offload=endpoint.checksum_offload,
                                   inline_rx=ispec.inline_rx)
        iface.attach(endpoint.send)
        endpoint.set_receiver(host.receiver_for(iface))
        attach_waits(host, endpoint, busy_poll=ispec.busy_poll, inline_rx=ispec.inline_rx)
        if spec.capture or ispec.capture:
            buffer = io.BytesIO()
            linktype = LINKTYPE_ETHERNET if ispec.mac is not None else LINKTYPE_RAW
            endpoint.tap = PcapWriter(buffer, linktype=linktype)
            captures[ispec.name] = buffer
    for prefix, options in spec.routes:
        host.add_route(prefix, **options)
    return host, captures


#: How often the exiting child looks whether its closed connections are done.
_ORPHAN_POLL = 0.01


def _let_orphans_finish(host: Host, child: Child, endpoints: list[IpcEndpoint],
                        linger: float) -> None:
    """Wait until no connection the function closed still has data or a FIN to deliver,
    ``linger`` seconds at most, until the parent's ``stop()``, or until every link is
    down (nothing can be delivered any more).  ``down`` is one attribute load (atomic;
    set once under the endpoint's lock)."""
    deadline = time.monotonic() + linger
    while host.tcp.orphans_delivering() and time.monotonic() < deadline:
        if endpoints and all(end.down is not None for end in endpoints):
            return
        if child.stopping.wait(_ORPHAN_POLL):
            return


def _child_main(spec: HostSpec, ctl: Connection, function: Callable[..., Any],
                args: tuple[Any, ...]) -> None:
    _die_with_parent()
    if spec.cpus is not None:
        os.sched_setaffinity(0, spec.cpus)  # first: every thread after this inherits it
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 PID: every thread's stack on stderr
    if spec.lockdep:
        from rcunet.sync import lockdep

        lockdep.enable()
    if spec.lockstat:
        from rcunet.sync import lockstat

        lockstat.enable()
    host, captures = _build_host(spec)
    child = Child(host, ctl)
    control = threading.Thread(target=child._control_loop, name="child-control",
                               daemon=True)
    control.start()
    endpoints = [ispec.endpoint for ispec in spec.interfaces]
    outcome = Outcome()
    try:
        host.start()
        for endpoint in endpoints:
            endpoint.start()
        outcome.result = function(child, *args)
        _let_orphans_finish(host, child, endpoints, spec.exit_linger)
    except BaseException:  # reported to the parent, which decides what it means
        outcome.error = traceback.format_exc()
    finally:
        host.close()
        outcome.counters = host.counters.snapshot()
        for ispec in spec.interfaces:
            outcome.links[ispec.name] = ispec.endpoint.stats()
        for name, buffer in captures.items():
            outcome.pcaps[name] = buffer.getvalue()
        if spec.lockstat:
            from rcunet.sync import lockstat

            outcome.lockstat = dict(lockstat.snapshot())
        if spec.lockdep:
            from rcunet.sync import lockdep

            outcome.lockdep_reports = list(lockdep.reports())
        for endpoint in endpoints:
            endpoint.close()
        try:
            with child._send_lock:
                ctl.send(("done", outcome))
        except (OSError, ValueError):
            pass  # the parent is gone: nobody to tell
        ctl.close()


# ============================================================================ the parent
class HostProcess:
    """The parent's handle on a Host that lives in a child process.

    Built by ``Network.host_process(name)``; links and routes added before
    ``start`` become part of the child's ``HostSpec``.

    Concurrency: ``start``/``stop``/``join``/``close`` from the owning thread;
    the monitor thread fills ``_reports`` and sets ``_outcome``/``failure`` (published
    by ``_finished``, an Event); ``send`` holds ``_send_lock``; ``kill`` (any thread)
    and the monitor's reaping hold ``_reap_lock`` (leaf locks both).
    """

    def __init__(self, spec: HostSpec, *, start_method: str = DEFAULT_START_METHOD) -> None:
        if start_method not in START_METHODS:
            raise ValueError(f"start method {start_method!r}: Hosts in processes use "
                             f"{' or '.join(START_METHODS)} (fork copies only one thread "
                             "of a threaded parent)")
        self.spec = spec
        self.name = spec.name
        self.start_method = start_method
        self.process: multiprocessing.process.BaseProcess | None = None
        self.pid: int | None = None
        self.failure: str | None = None  # set by the monitor (then _finished)
        self.on_exit: Callable[[HostProcess], None] | None = None
        self._parent_ends: list[IpcEndpoint] = []  # the parent's ends of this child's links
        self._ctl: Connection | None = None
        self._send_lock = threading.Lock()
        self._reports: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._outcome: Outcome | None = None
        self._finished = threading.Event()
        self._monitor: threading.Thread | None = None
        self._reap_lock = threading.Lock()
        self._reaped = False  # guarded-by: _reap_lock

    def __repr__(self) -> str:
        state = "not started" if self.process is None else (
            f"pid {self.process.pid}" if not self._finished.is_set() else "ended")
        return f"<HostProcess {self.name} ({state})>"

    # -- configuration (before start) ----------------------------------------------------
    def add_route(self, prefix: str, **options: Any) -> None:
        """``Host.add_route`` in the child, applied before its function runs."""
        self._check_not_started()
        self.spec.routes.append((prefix, options))

    def _check_not_started(self) -> None:
        if self.process is not None:
            raise RuntimeError(f"{self.name}: the child is running; configure before start")

    @property
    def interfaces(self) -> list[InterfaceSpec]:
        return self.spec.interfaces

    def addresses(self) -> list[bytes]:
        """The child Host's addresses as a name answers with them (the resolver's rule:
        no link-local, IPv4 first)."""
        import ipaddress

        found = [ipaddress.ip_interface(text).ip.packed
                 for ispec in self.spec.interfaces for text in ispec.addresses]
        return sorted((a for a in found if not is_link_local6(a)), key=len)

    # -- running -------------------------------------------------------------------------
    def start(self, function: Callable[..., Any], *args: Any) -> HostProcess:
        """Start the child; it runs ``function(child, *args)`` with its Host (both
        picklable: a module-level function and plain arguments)."""
        self._check_not_started()
        context = _context(self.start_method)
        parent_ctl, child_ctl = context.Pipe(duplex=True)
        process = context.Process(target=_child_main,
                                  args=(self.spec, child_ctl, function, args),
                                  name=f"rcunet-{self.name}", daemon=True)
        process.start()
        child_ctl.close()
        for ispec in self.spec.interfaces:
            ispec.endpoint.forget()  # the child has its own copy of these descriptors
        self.process, self._ctl, self.pid = process, parent_ctl, process.pid
        self._monitor = threading.Thread(target=self._watch, name=f"watch-{self.name}",
                                         daemon=True)
        self._monitor.start()
        return self

    def _watch(self) -> None:
        process, ctl = self.process, self._ctl
        assert process is not None and ctl is not None
        outcome: Outcome | None = None
        pipe_open = True
        while pipe_open:
            ready = wait([ctl, process.sentinel])
            if ctl in ready:
                try:
                    kind, body = ctl.recv()
                except (EOFError, OSError):
                    pipe_open = False
                    continue
                if kind == "report":
                    self._reports.put(body)
                elif kind == "done":
                    outcome = body
                    pipe_open = False
            elif process.sentinel in ready:
                # drain what the child sent before it ended, then stop listening
                while pipe_open and ctl.poll():
                    try:
                        kind, body = ctl.recv()
                    except (EOFError, OSError):
                        break
                    if kind == "report":
                        self._reports.put(body)
                    elif kind == "done":
                        outcome = body
                pipe_open = False
        # Wait for the exit without reaping (a zombie keeps its pid, so kill() cannot
        # hit a recycled one), then reap under _reap_lock, which kill() holds too.
        if not wait([process.sentinel], _EXIT_GRACE):
            self.kill()  # sent its outcome but hangs on exit
            wait([process.sentinel])
        with self._reap_lock:
            process.join()
            self._reaped = True
        if outcome is None:
            outcome = Outcome()
            self.failure = describe_exit(process.exitcode)
            outcome.failure = self.failure
            for end in self._parent_ends:
                end.mark_down(f"host {self.name}'s process died ({self.failure})")
        elif outcome.error is not None:
            self.failure = "its function raised:\n" + outcome.error
            outcome.failure = self.failure
        outcome.exitcode = process.exitcode
        ctl.close()
        process.close()  # the sentinel and the pickle pipe, now rather than at GC
        self._outcome = outcome
        self._finished.set()
        callback = self.on_exit  # atomic: one attribute load
        if callback is not None:
            callback(self)

    @property
    def alive(self) -> bool:
        return self.process is not None and not self._finished.is_set()

    def send(self, message: Any) -> None:
        """A message for the child's ``Child.recv``."""
        self._post("message", message)

    def _post(self, kind: str, body: Any) -> None:
        if self._ctl is None:
            raise RuntimeError(f"{self.name}: not started")
        if self._finished.is_set():
            raise ChildFailed(f"host {self.name}'s process has ended"
                              + (f": {self.failure}" if self.failure else ""))
        with self._send_lock:
            try:
                self._ctl.send((kind, body))
            except (OSError, ValueError) as exc:
                raise ChildFailed(f"host {self.name}'s process is gone ({exc})") from None

    def recv(self, timeout: float | None = None) -> Any:
        """The next message the child sent with ``Child.report``.  Raises
        ``ChildFailed`` when the child ended first, ``TimeoutError`` on timeout."""
        step = 0.05
        waited = 0.0
        while True:
            try:
                return self._reports.get(timeout=step)
            except queue.Empty:
                pass
            if self._finished.is_set() and self._reports.empty():
                raise ChildFailed(f"host {self.name}'s process ended before it answered"
                                  + (f": {self.failure}" if self.failure else ""))
            waited += step
            if timeout is not None and waited >= timeout:
                raise TimeoutError(f"host {self.name}: no message in {timeout} s")

    def stop(self) -> None:
        """Ask the child's function to finish (sets ``child.stopping``)."""
        if self.process is not None and not self._finished.is_set():
            with contextlib.suppress(ChildFailed):
                self._post("stop", None)

    def join(self, timeout: float | None = None) -> Outcome:
        """Wait for the child to end; its ``Outcome`` (``failure`` says whether and why
        it died or its function raised).  TimeoutError if it is still running."""
        if self.process is None:
            raise RuntimeError(f"{self.name}: not started")
        if not self._finished.wait(timeout):
            raise TimeoutError(f"host {self.name} still running after {timeout} s")
        assert self._outcome is not None
        return self._outcome

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the child (SIGKILL by default) unless it has been reaped."""
        with self._reap_lock:
            if self.pid is not None and not self._reaped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, sig)

    def close(self) -> None:
        """Stop the child (killed if it does not end in time) and reap it."""
        if self.process is None:
            for ispec in self.spec.interfaces:
                ispec.endpoint.close()  # never handed over: this process owns them
            return
        if not self._finished.is_set():
            self.stop()
            if not self._finished.wait(_EXIT_GRACE):
                self.kill()
                self._finished.wait(_EXIT_GRACE)
        if self._monitor is not None:
            self._monitor.join(_EXIT_GRACE)


def check_cpus(cpus: Iterable[int]) -> tuple[int, ...]:
    """``cpus`` as a sorted tuple, or OSError(EINVAL) when it is empty or names a CPU
    this process may not run on (what sched_setaffinity answers in the child, said
    here before the child starts)."""
    chosen = tuple(sorted(set(cpus)))
    allowed = os.sched_getaffinity(0)
    if not chosen or not set(chosen) <= allowed:
        raise OSError(errno.EINVAL, f"CPUs {list(chosen)}: this process may run on "
                                    f"{sorted(allowed)} only")
    return chosen


def describe_exit(exitcode: int | None) -> str:
    """``killed by SIGKILL`` / ``exited with status 3`` / ``still running``."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"
