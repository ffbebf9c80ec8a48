"""``Simulation``: programs on the Hosts of a network, on virtual time, reproducible by seed.

    sim = Simulation(seed=7)
    a, b = sim.network.host("a"), sim.network.host("b")
    sim.network.link(a, b, "10.0.0.1/24", "10.0.0.2/24",
                     impair=ImpairmentConfig(loss=0.05, delay=50_000_000))
    server = sim.spawn(b, serve)              # serve() and fetch() are ordinary code:
    client = sim.spawn(a, fetch, "10.0.0.2")  # threads, blocking sockets, time.sleep...
    sim.run()                                 # until every program ends
    print(client.result, sim.now)
    sim.close()

Every thread runs one at a time under a scheduler seeded by ``seed``
(rcunet/sim/scheduler.py); every clock the programs read is the network's virtual clock
(rcunet/sim/patches.py).  ``run(until=, condition=)`` may stop early and be called
again: the programs are paused in between, and go on where they were.  ``close()``
unwinds whatever still runs and closes the network.

A failure of the simulation itself (a deadlock, a busy loop, a refused call) raises a
``SimulationError`` from ``run``; a program's own exception is its ``Program.error``
(the traceback, with the simulated time and the seed), status 1.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from rcunet.api.socket import Socket
from rcunet.host.host import Host
from rcunet.host.network import Network
from rcunet.link.impair import Impairment, ImpairmentConfig
from rcunet.sim.clock import START_NS, SimClock
from rcunet.sim.faults import (
    Fault,
    FaultError,
    crossing_links,
    iface_host,
    interfaces_on,
    isolate_on_switches,
    parse_scenario,
    switch_ports,
)
from rcunet.sim.guard import DestinationGuard
from rcunet.sim.patches import Patches, SeededRandom, real_time, simulated
from rcunet.sim.scheduler import DONE, Interrupted, Scheduler, SimThread, Stop
from rcunet.sim.watchdog import Watchdog
from rcunet.tuning import Tuning

#: Default bounds of the watchdog (rcunet/sim/watchdog.py), in real seconds.
CPU_BOUND = 10.0
WALL_BOUND = 60.0
#: Steps of the network at one instant before the scheduler looks at the threads
#: again: frames delivered inline can answer each other, but never without end.
_MAX_STEPS = 10_000


class Program:
    """One function placed on a Host.  ``status``: None while it runs, 0 when it
    returned, its ``sys.exit`` code, 1 when it raised (``error``: the report)."""

    def __init__(self, sim: Simulation, host: Host, target: Callable[..., Any],
                 args: tuple[Any, ...], name: str, daemon: bool) -> None:
        self.sim = sim
        self.host = host
        self.target = target
        self.args = args
        self.name = name
        self.daemon = daemon
        self.result: Any = None
        self.status: int | None = None
        self.error: str | None = None
        self.exception: BaseException | None = None  # what it raised (status 1)
        self.record: SimThread | None = None
        self._started = False

    @property
    def done(self) -> bool:
        return self.status is not None

    def __repr__(self) -> str:
        return f"<Program {self.name} on {self.host.name} status={self.status}>"

    def _body(self) -> None:
        from rcunet.api.patch import patched

        try:
            with patched(self.host, this_thread=True):
                self.result = simulated(self.target)(*self.args)
            self.status = 0
        except Stop:
            self.status = -1  # unwound: the run stopped before it ended
            raise
        except KeyboardInterrupt:
            self.status = 130  # as Python's own exit status for it
        except SystemExit as exc:
            code = exc.code
            self.status = code if isinstance(code, int) else (0 if code is None else 1)
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
        except BaseException as exc:
            self.status = 1
            self.exception = exc
            self.error = (f"{traceback.format_exc()}rcunet sim: {self.name} on "
                          f"{self.host.name} raised at simulated time {self.sim.now:.6f} s "
                          f"(seed {self.sim.seed})\n")
            print(self.error, end="", file=sys.stderr)


class Simulation:
    def __init__(self, seed: int = 1, *, tuning: Tuning | None = None,
                 cpu_bound: float = CPU_BOUND, wall_bound: float = WALL_BOUND,
                 exit_on_hang: bool = True, seed_random: bool = False) -> None:
        """``seed_random``: the programs' ``random``, ``os.urandom``, ``uuid4`` and
        ``secrets`` come from the seed too.  ``cpu_bound``/``wall_bound``: the
        watchdog's (rcunet/sim/watchdog.py); ``exit_on_hang``: a thread blocked outside
        the simulation that never comes back ends the process (status 1)."""
        self.seed = seed
        self._seeded = SeededRandom(seed) if seed_random else None
        self.clock = SimClock()
        self.network = Network(seed=seed, clock=self.clock, tuning=tuning)
        self.programs: list[Program] = []
        self.sched = Scheduler(self.clock, seed, self._step, self.network.next_deadline)
        self._patches = Patches()
        self._watchdog = Watchdog(self.sched, cpu_bound, wall_bound, exit_on_hang)
        self._saved_sigint: Any = None
        self.real_seconds = 0.0  # real time spent in run()
        self._placed: list[Program] = []  # what spawn() placed (a restart runs it again)
        self._faults: list[Fault] = []  # scheduled, not yet handed to a timeline thread
        self._cut: list[Any] = []  # links a partition took down
        self._sides: list[set[Host]] = []  # the partitions in force (switches split)
        self._crashed: set[Host] = set()
        self.closed = False

    @property
    def now(self) -> float:
        """Simulated seconds since the start."""
        return (self.clock.now() - START_NS) / 1e9

    # -- placing programs --------------------------------------------------------------
    def spawn(self, host: Host, target: Callable[..., Any], *args: Any,
              name: str | None = None, daemon: bool = False) -> Program:
        """Run ``target(*args)`` on ``host`` (its ``socket`` module is ``host``'s) in a
        thread of its own, from the next ``run``.  A ``daemon`` program does not keep
        ``run`` going (a server the clients use)."""
        if self.closed:
            raise RuntimeError("the simulation is closed")
        program = Program(self, host, target, args,
                          name or str(getattr(target, "__name__", "program")), daemon)
        self.programs.append(program)
        self._placed.append(program)
        return program

    # -- faults on a timeline ------------------------------------------------------------
    def at(self, when: float, action: Callable[[], None], text: str = "") -> Fault:
        """Run ``action()`` at ``when`` simulated seconds (in a thread of the
        simulation's, in the order given among faults of one instant)."""
        if when < self.now:
            raise FaultError(f"time {when:g}s is in the past (the simulation is at "
                             f"{self.now:g}s)")
        fault = Fault(when, action, text or getattr(action, "__name__", "action"))
        self._faults.append(fault)
        return fault

    def partition(self, side: set[Host] | list[Host], *, at: float) -> Fault:
        """Cut ``side`` from the other Hosts until ``heal``: the point-to-point links
        between them go down (both interfaces), and every switch forwards only between
        Hosts on one side (its ports split into VLANs)."""
        hosts = set(side)
        links = crossing_links(self, hosts)
        ports = switch_ports(self)

        def cut() -> None:
            for link in links:
                for iface in interfaces_on(self, link):
                    iface.up = False
                self._cut.append(link)
            self._sides.append(hosts)
            isolate_on_switches(ports, self._sides)

        return self.at(at, cut, f"partition {' '.join(sorted(h.name for h in hosts))}")

    def heal(self, *, at: float) -> Fault:
        """Every link a partition cut comes back up (a crashed Host's stay down), and
        the switches forward between every port again."""
        ports = switch_ports(self)

        def heal() -> None:
            for link in self._cut:
                for iface in interfaces_on(self, link):
                    if iface_host(self, iface) not in self._crashed:
                        iface.up = True
            self._cut.clear()
            self._sides.clear()
            isolate_on_switches(ports, self._sides)

        return self.at(at, heal, "heal")

    def crash(self, host: Host, *, at: float) -> Fault:
        """``host`` stops: its threads are stopped at their blocking points, its
        sockets vanish without a FIN or RST reaching anyone (its interfaces go down
        first), until ``restart``."""
        def crash() -> None:
            self._crashed.add(host)
            for iface in host.interfaces.values():
                if iface.name != "lo":
                    iface.up = False
            for record in self.sched.live():
                if record.host is host:
                    self.sched.interrupt(record, Stop())
            host.tcp.close_all()
            host.udp.close_all()

        return self.at(at, crash, f"crash {host.name}")

    def restart(self, host: Host, *, at: float) -> Fault:
        """``host`` comes back: interfaces up, and the programs placed on it with
        ``spawn`` run again from the start."""
        def restart() -> None:
            self._crashed.discard(host)
            cut = {i for link in self._cut for i in interfaces_on(self, link)}
            for iface in host.interfaces.values():
                if iface not in cut:
                    iface.up = True
            for program in [p for p in self._placed if p.host is host]:
                again = Program(self, host, program.target, program.args, program.name,
                                program.daemon)
                self.programs.append(again)
            self._start_programs()

        return self.at(at, restart, f"restart {host.name}")

    def impair(self, link: Any, config: ImpairmentConfig | None, *, at: float) -> Fault:
        """Both directions of the point-to-point ``link`` go through ``config`` from
        ``at`` on (None or an inactive one: clean)."""
        serial = len(self._faults)

        def impair() -> None:
            for index, endpoint in enumerate((link.a, link.b)):
                impairment = None
                if config is not None and config.active:
                    impairment = Impairment(config, seed=self.seed * 7919 + serial * 2 + index)
                link.set_tx_impairment(endpoint, impairment)

        return self.at(at, impair, "impair")

    def skew(self, host: Host, seconds: float, *, at: float) -> Fault:
        """From ``at`` on, ``host``'s wall clock (``time.time``, ``datetime.now``) reads
        ``seconds`` ahead of the others (behind when negative)."""
        def skew() -> None:
            self.clock.skews[host] = int(seconds * 1e9)

        return self.at(at, skew, f"skew {host.name} {seconds:+g}")

    def load_scenario(self, path: str) -> list[Fault]:
        """Schedule the faults of a scenario file (rcunet/sim/faults.py); FaultError
        (one line: file, line, problem) before anything is scheduled."""
        before = list(self._faults)
        try:
            return parse_scenario(self, path)
        except FaultError:
            self._faults[:] = before
            raise

    def _timeline(self, faults: list[Fault]) -> None:
        for fault in faults:
            delay = fault.at - self.now
            if delay > 0:
                time.sleep(delay)
            fault.action()

    # -- running -----------------------------------------------------------------------
    def run(self, until: float | None = None,
            condition: Callable[[], bool] | None = None) -> bool:
        """Run until every (non-daemon) program has ended, ``condition()`` is true, or the
        simulated clock reaches ``until`` seconds; True unless ``until`` ended it.
        Raises the ``SimulationError`` that stopped the run, if one did (the
        simulation is closed then)."""
        if self.closed:
            raise RuntimeError("the simulation is closed")
        deadline = None if until is None else START_NS + int(until * 1e9)

        def finished() -> bool:
            return all(p.done for p in self.programs if not p.daemon) or (
                condition is not None and bool(condition()))

        start = real_time["perf_counter"]()
        self._enter()
        try:
            self._start_programs()
            if not finished() and not self.sched.stopping:
                self.sched.block(finished, deadline)
            reached = finished()
        finally:
            self.real_seconds += real_time["perf_counter"]() - start
            self._leave()
        if self.sched.stopping:
            self.close()
        return reached

    def interrupt(self, program: Program, error: BaseException) -> None:
        """Raise ``error`` in ``program``'s thread at its blocking point (the CLI's
        KeyboardInterrupt when the --also programs have ended)."""
        if program.record is not None and program.record.state is not DONE:
            self.sched.interrupt(program.record, error)

    def close(self) -> None:
        """Unwind every thread still running (``Stop`` at its blocking point), close the
        network.  Raises the ``SimulationError`` that stopped the run, if one did."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.sched.live():
                self._enter()
                try:
                    self.sched.stopping = True
                    while self.sched.live():
                        self.sched.block(None, None)
                finally:
                    self._leave()
        finally:
            self.network.close()
        failure = self.sched.failure
        if failure is not None:
            raise failure

    def __enter__(self) -> Simulation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------
    def _step(self) -> None:
        for _ in range(_MAX_STEPS):
            if not self.network.step():
                return

    def _start_programs(self) -> None:
        if self._faults:
            faults = sorted(self._faults, key=lambda f: f.at)  # stable: file order kept
            self._faults.clear()
            threading.Thread(target=self._timeline, args=(faults,), name="rcunet-faults",
                             daemon=True).start()
        for program in self.programs:
            if not program._started:
                program._started = True
                thread = threading.Thread(target=program._body, name=program.name,
                                          daemon=True)
                thread.start()
                program.record = thread.__dict__.get("_rcunet_sim")

    def _enter(self) -> None:
        from rcunet.api import patch

        # Drop-in mode first, the simulation's patches over it: where both replace a
        # call (os.fork), the simulation's answer is the one programs get; _leave
        # takes them off in the reverse order.
        if self.network.hosts:
            patch.install(self.network.hosts[0], this_thread=True)
        self._patches.install(self.sched, self._seeded)
        for name, method in DestinationGuard(self.network).methods().items():
            self._patches.replace(Socket, name, method)
        self.sched.adopt_driver()
        self._watchdog.start()
        if threading.current_thread() is threading.main_thread():
            # Ctrl-C stops the run at its next switch, whatever the main thread is doing
            # (a KeyboardInterrupt raised in the middle of a switch would leave the
            # batons in no known state)
            self._saved_sigint = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, _signum: int, _frame: object) -> None:
        self.sched.fail(Interrupted("interrupted (Ctrl-C); the threads were at:\n"
                                    + self.sched.describe_threads()))

    def _leave(self) -> None:
        from rcunet.api import patch

        if self._saved_sigint is not None:
            signal.signal(signal.SIGINT, self._saved_sigint)
            self._saved_sigint = None
        self._watchdog.stop()
        self._patches.uninstall()
        if self.network.hosts:
            patch.uninstall(self.network.hosts[0], this_thread=True)
