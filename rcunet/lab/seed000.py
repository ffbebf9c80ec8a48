"""Seed 000 in the lab: connect() port selection under port pressure, two levels.

``--level stack`` (the default of the plain command): tcp_crr through whole threaded Hosts.
Client ``a`` has a narrow ephemeral range (``ip_local_port_range``, ``--ports`` wide);
``--hold`` long-lived connections to the server keep part of it busy with established
4-tuples, as neper's many flows do in the authors' test (the first ``ports / 2`` fill the
even ports, the parity that connect() scans first, reference §3.2); ``-T`` client threads
then run tcp_crr transactions (connect, ``-Q`` request, ``-R`` response, close) against
``--acceptors`` threads on host ``b``.  The client closes first, so its side keeps a
TIME_WAIT entry per transaction and the rest of the range fills with them; connect() takes
a TIME_WAIT port over once it is ``tcp_tw_reuse_delay`` (1 s) old, with timestamps on
(Linux defaults).  ``tcp_tw_reuse`` is 1 on the client (``--tw-reuse``): Linux's default 2
reuses only loopback TIME_WAITs, and the hosts talk over 10.0.0.0/24 (reference §3.4).
The free ports then sustain ``(ports - hold) / 1 s`` connections/s; the default range,
2000 ports (against Linux's 28,232), keeps that ceiling well above the rates measured here,
and the report warns when a rate comes near it.  Legacy turns off the seed's two switches
(``connect_rcu_precheck``, ``connect_hash_port0``) and nothing else; modern is the
default.  Each mode keeps its two Hosts for the whole run; set-up and a warm-up (until
TIME_WAIT fills the free ports) use the modern search in both, unmeasured; then the two
modes' timed slices alternate.
Measured: connections/s, per connect(): candidate ports, lock acquisitions, lockless skips,
locks on occupied ports, TIME_WAITs taken over; EADDRNOTAVAIL; TIME_WAIT entries present;
a neper tcp_crr block; lock statistics from one extra slice per mode.  Checked at the end:
every attempt completed or failed with EADDRNOTAVAIL (and was counted so by both hosts and
the port search), and no socket, table entry or port is left beyond the TIME_WAITs, then
nothing at all after ``close_all``.

``--level tables`` (the default with ``--scale``, as issue 8's scaling figures were made):
the scenario of ``rcunet.bench.tables_seed000`` (reference §3.6): one TcpHashInfo, an
ephemeral range of 1000 ports, 95% of the 4-tuples to one destination held by established
connections, and ``-T`` threads each running ``connect()`` + ``close()`` of a fresh socket
as fast as they can.  The tables are driven directly (no TCP host), so the figure is the
port search's own cost, and its scaling is the tables' scaling: with the GIL, threads only
take turns; without it, modern's lockless pre-check runs in parallel while legacy's threads
meet on the bucket locks of the same few ports.

Output: legacy and modern rates (each mode's slices alternate with the other's) and the
per-connect counts; with ``--scale 1,2,4`` the rates at every thread count (interleaved),
each mode's gain over the first count, and the machine's parallel headroom measured
alongside.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import socket
import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from rcunet.api import host_socket
from rcunet.bench import neper
from rcunet.bench.tables_seed000 import Workload
from rcunet.host.network import Network
from rcunet.lab.common import (
    MODES,
    Series,
    add_scale_options,
    connect_and_send,
    interpreter,
    parallel_headroom,
    plot_scaling,
    ratio,
    recv_exactly,
    run_timed,
    rx_exceptions,
    scale,
    scaling_report,
    tcp_leaks,
    wait_until,
    with_lockstat,
)
from rcunet.lab.report import cover_letter, extra_reports, lock_stat_lines, neper_lines, to_json
from rcunet.lab.seed000_server import (
    IO_TIMEOUT,
    PORT,
    SERVER,
    CrrServer,
    all_forgotten,
    settled_read,
)
from rcunet.lab.seed001 import seed_tuning
from rcunet.sync.lock import all_classes
from rcunet.tables import ConnectStats
from rcunet.tuning import Tuning

TITLE = "seed 000: connect() under port pressure (95% of 1000 ports busy)"
UNIT = "connects/s"


# ==================================================================== tables level
class Workloads:
    """One built ``Workload`` per (mode, threads), reused by every slice, so the tables are
    built once and every slice measures the same state."""

    def __init__(self) -> None:
        self._built: dict[tuple[str, int], Workload] = {}

    def get(self, mode: str, threads: int) -> Workload:
        key = (mode, threads)
        if key not in self._built:
            self._built[key] = Workload(mode == "modern", threads)
        return self._built[key]

    def slice_rate(self, mode: str, threads: int, duration: float) -> float:
        """Run one slice; its own connects/s (not the workload's running total)."""
        workload = self.get(mode, threads)
        connects, elapsed = workload.stats.connects, workload.elapsed
        workload.run_slice(duration)
        spent = workload.elapsed - elapsed
        return (workload.stats.connects - connects) / spent if spent > 0 else 0.0


def run_lab(threads: int = 1, duration: float = 1.0, rounds: int = 4) -> dict[str, Any]:
    """Legacy and modern at ``threads`` threads: ``rounds`` alternating slices of
    ``duration / rounds`` seconds each; best slice rate per mode, counts over all slices."""
    workloads = Workloads()
    best = {mode: 0.0 for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            best[mode] = max(best[mode],
                             workloads.slice_rate(mode, threads, duration / rounds))
    counts = {mode: workloads.get(mode, threads).result() for mode in MODES}
    return {
        "interpreter": interpreter(),
        "threads": threads,
        "legacy": best["legacy"],
        "modern": best["modern"],
        "ratio": ratio(best["modern"], best["legacy"]),
        "candidates_per_connect": {m: counts[m]["candidates_per_connect"] for m in MODES},
        "locks_per_connect": {m: counts[m]["locks_per_connect"] for m in MODES},
        "occupied_candidate_locks": {m: counts[m]["occupied_candidate_locks"] for m in MODES},
        "connects": {m: counts[m]["connects"] for m in MODES},
    }


def run_scale(counts: tuple[int, ...], duration: float, rounds: int) -> dict[str, Any]:
    """Rates at every thread count (interleaved rounds of ``duration / rounds`` seconds per
    point) and the machine's headroom at each count above the first."""
    workloads = Workloads()
    series: Series = scale(
        lambda mode, t: workloads.slice_rate(mode, t, duration / rounds), counts, rounds)
    headroom = {t: parallel_headroom(t) for t in counts[1:]}
    return {"interpreter": interpreter(), "series": series, "headroom": headroom}


def report(result: dict[str, Any]) -> str:
    lines = [
        f"{TITLE}, {result['threads']} thread(s) ({result['interpreter']})",
        "",
        f"{'':34}{'legacy':>14}{'modern':>14}{'ratio':>9}",
        f"{UNIT:34}{result['legacy']:>14,.0f}{result['modern']:>14,.0f}"
        f"{result['ratio']:>8.2f}x",
    ]
    for key, label in (("candidates_per_connect", "candidate ports per connect"),
                       ("locks_per_connect", "lock acquisitions per connect")):
        lines.append(f"{label:34}{result[key]['legacy']:>14.1f}{result[key]['modern']:>14.1f}")
    occupied = result["occupied_candidate_locks"]
    lines.append(f"{'locks on occupied candidates':34}{occupied['legacy']:>14,}"
                 f"{occupied['modern']:>14,}")
    return "\n".join(lines)


# ==================================================================== stack level
STACK_TITLE = "seed 000: tcp_crr through whole Hosts, narrow ephemeral range, TIME_WAIT reuse"
STACK_SCALE_TITLE = "seed 000 (whole Hosts): connections/s against -T client threads"
STACK_UNIT = "conn/s"
PORT_LOW = 40000  # the client's range is PORT_LOW .. PORT_LOW + ports - 1
DEFAULT_PORTS = 2000
WARMUP_SLICE = 0.2
WARMUP_FILL = 0.9  # warm up until TIME_WAIT holds this share of the ports not held
WARMUP_MAX = 3.0  # default warm-up cap (s); shorter runs warm up for 3 slices' length
CEILING_WARNING = 0.8  # a rate this close to the TIME_WAIT reuse ceiling is bounded by it
#: A client that got EADDRNOTAVAIL tries again after this pause (s), as an application
#: would, rather than spin on full-range scans that starve the other threads.
NO_PORT_BACKOFF = 0.001
PERCENTILES = (50.0, 90.0, 99.0)
HELD_BATCH = 64  # held flows opened (then accepted) and closed at a time (CrrScenario)


TW_REUSE_DELAY_MS = Tuning().tcp_tw_reuse_delay  # Linux's default, 1000 ms


def stack_tuning(mode: str, ports: int, tw_reuse: int = 1,
                 tw_reuse_delay: int = TW_REUSE_DELAY_MS) -> Tuning:
    """The seed's two switches by mode (nothing else differs), the narrow range, and
    ``tcp_tw_reuse`` (1: reuse TIME_WAITs to any peer; Linux's default 2 is loopback only)
    after ``tcp_tw_reuse_delay`` ms."""
    return dataclasses.replace(seed_tuning(mode, "seed000"),
                               ip_local_port_range=(PORT_LOW, PORT_LOW + ports - 1),
                               tcp_tw_reuse=tw_reuse, tcp_tw_reuse_delay=tw_reuse_delay)


def default_hold(ports: int) -> int:
    """Half the range: every even port, the parity connect() scans first."""
    return ports // 2


def default_warmup(duration: float) -> float:
    return min(WARMUP_MAX, 3 * duration)


def reuse_ceiling(ports: int, hold: int, tw_reuse_delay: int) -> float:
    """Connections/s the free ports sustain once TIME_WAIT fills them: each port is
    reusable ``tcp_tw_reuse_delay`` ms after its last connection closed."""
    return (ports - hold) * 1000 / max(tw_reuse_delay, 1)


def stats_minus(after: ConnectStats, before: ConnectStats) -> ConnectStats:
    return ConnectStats(**{f.name: getattr(after, f.name) - getattr(before, f.name)
                           for f in dataclasses.fields(ConnectStats)})


def per_connect(stats: ConnectStats) -> dict[str, float]:
    """What one connect() call cost the port search, on average (exact counts)."""
    n = stats.connects or 1
    return {
        "connect_calls": stats.connects,
        "failures": stats.failures,
        "candidates_per_connect": stats.candidates / n,
        "locks_per_connect": stats.locks / n,
        "rcu_skips_per_connect": stats.rcu_skips / n,
        "occupied_candidate_locks_per_connect": stats.occupied_candidate_locks / n,
        "hash_calls_per_connect": stats.hash_calls / n,
        "tw_recycled": stats.tw_recycled,
    }


class ConnectProbe:
    """Counts the port search of every connect() on one Host's tables.

    The Host's TCP calls ``hashinfo.connect(sk, daddr, dport, saddr=...)`` without a
    ``ConnectStats``; the probe sets itself as that instance's ``connect`` (an instance
    attribute shadows the method) and passes the calling thread's own ``ConnectStats``.

    Concurrency: each ConnectStats is written only by its thread (its contract: plain
    ``+=``); ``_all`` is appended under ``_lock``.  ``total()`` is exact only while no
    thread connects: the lab calls it after joining the client threads (join orders their
    writes before the read).
    """

    def __init__(self, hashinfo: Any) -> None:
        self._connect = hashinfo.connect
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[ConnectStats] = []  # guarded-by: _lock
        hashinfo.connect = self.connect

    def connect(self, sk: Any, daddr: bytes, dport: int, stats: ConnectStats | None = None,
                *, saddr: bytes | None = None) -> int:
        if stats is None:
            stats = getattr(self._local, "stats", None)
            if stats is None:
                stats = self._local.stats = ConnectStats()
                with self._lock:
                    self._all.append(stats)
        return int(self._connect(sk, daddr, dport, stats, saddr=saddr))

    def total(self) -> ConnectStats:
        total = ConnectStats()
        with self._lock:
            every = list(self._all)
        for stats in every:
            total.merge(stats)
        return total


def _transaction(a: Any, request: bytes, response_size: int) -> None:
    """tcp_crr's client side; the client closes first and keeps the TIME_WAIT."""
    with connect_and_send(a, (SERVER, PORT), request, IO_TIMEOUT) as cli:
        recv_exactly(cli, response_size)


class CrrScenario:
    """One mode's two threaded Hosts, kept for a whole lab run so its timed slices can
    alternate with the other mode's on the same, warmed-up state.  ``procs``: the server
    (``CrrServer``) and its Host in a child process, driven by messages.

    Concurrency: client threads live for one slice and write only their own slots; the
    lab reads them after joining them.  Every other attribute belongs to the thread that
    drives the scenario.
    """

    def __init__(self, mode: str, *, ports: int = DEFAULT_PORTS, hold: int | None = None,
                 acceptors: int = 4, request_size: int = 1, response_size: int = 1,
                 tw_reuse: int = 1, tw_reuse_delay: int = TW_REUSE_DELAY_MS,
                 procs: bool = False) -> None:
        hold = default_hold(ports) if hold is None else hold
        if not 0 <= hold < ports:
            raise ValueError(f"hold must be in 0..{ports - 1} (the range has {ports} ports)")
        self.mode, self.ports, self.hold = mode, ports, hold
        self.request = b"q" * request_size
        self.response_size = response_size
        self.tuning = stack_tuning(mode, ports, tw_reuse, tw_reuse_delay)
        # Set-up and warm-up use the modern search in both modes: the same ports result
        # (even ones first, then odd), and legacy's long set-up is not what is measured.
        self.setup_tuning = stack_tuning("modern", ports, tw_reuse, tw_reuse_delay)
        server_args = {"hold": hold, "acceptors": acceptors, "request_size": request_size,
                       "response_size": response_size}
        self.server: Any
        if procs:
            from rcunet.lab.seed000_procs import server_in_child

            self.net, self.a, self.server = server_in_child(self.setup_tuning, server_args)
        else:
            self.net, self.a, b = Network.two_hosts(threaded=True, tuning=self.setup_tuning)
            self.net.start()
        self.completed = 0  # transactions completed by clients, all slices
        self.no_port = 0  # connect() attempts that failed with EADDRNOTAVAIL
        try:
            if not procs:
                self.server = CrrServer(b, **server_args)
            self.probe = ConnectProbe(self.a.tcp.hashinfo)
            self.held = self._hold_flows(hold)
            self.a.set_tuning(self.tuning)  # from here on: this mode's search
            self.server.start_acceptors()
        except BaseException:
            if not procs and hasattr(self, "server"):
                self.server.stop_acceptors()
            self.net.close()
            raise

    # ---------------------------------------------------------------- set-up
    def _hold_flows(self, n: int) -> list[Any]:
        """``n`` established connections kept open, opened ``HELD_BATCH`` at a time and
        accepted by the server: their 4-tuples are the busy candidates the port search
        meets (the first half of the range fills the even ports, the parity connect()
        tries first)."""
        held: list[Any] = []
        for start in range(0, n, HELD_BATCH):
            for _ in range(min(HELD_BATCH, n - start)):
                cli: Any = self.a.socket(socket.AF_INET, socket.SOCK_STREAM)
                cli.settimeout(IO_TIMEOUT)
                cli.connect((SERVER, PORT))
                held.append(cli)
            self.server.accept_held(len(held) - start)
        return held

    def warm_up(self, clients: int, timeout: float) -> float:
        """Churn (with the modern search) until TIME_WAIT holds ``WARMUP_FILL`` of the
        ports not held, or ``timeout`` passes; returns the seconds spent.  Not measured."""
        target = WARMUP_FILL * (self.ports - self.hold)
        began = time.perf_counter()
        self.a.set_tuning(self.setup_tuning)
        try:
            while self.tw_count() < target and time.perf_counter() - began < timeout:
                self.run_slice(WARMUP_SLICE, clients)
        finally:
            self.a.set_tuning(self.tuning)
        return time.perf_counter() - began

    # ---------------------------------------------------------------- one slice
    def tw_count(self) -> int:
        return int(self.a.tcp.hashinfo.ehash.tw_count())

    def run_slice(self, duration: float, clients: int, *,
                  at_least_one: bool = True) -> dict[str, Any]:
        """``clients`` threads run transactions for ``duration`` seconds; the slice's own
        rate, connect() costs, EADDRNOTAVAIL count and neper block.  ``at_least_one``:
        a thread goes on past the deadline until it completed a transaction (a rate
        needs one); off where the range may be used up, or a thread that found every
        port taken would wait for a TIME_WAIT to expire (60 s)."""
        done = [0] * clients
        no_port = [0] * clients
        errors: list[BaseException] = []
        clock = neper.ThreadClock(max(duration / 10, 0.01))
        flows = [neper.FlowStats(i, i, clock, keep_latency=True) for i in range(clients)]
        a, request, response_size = self.a, self.request, self.response_size

        def client(index: int, deadline: float) -> None:
            flow = flows[index]
            try:
                # At least one transaction each, however late a loaded machine starts
                # the thread: a slice that measured nothing has no rate to compare.
                while time.monotonic() < deadline or (at_least_one and not done[index]):
                    began = time.perf_counter()
                    try:
                        _transaction(a, request, response_size)
                    except OSError as exc:
                        if exc.errno != errno.EADDRNOTAVAIL:
                            raise
                        no_port[index] += 1  # owner: this client thread
                        time.sleep(NO_PORT_BACKOFF)
                        continue
                    flow.event(neper.monotonic_ns(), 1, time.perf_counter() - began)
                    done[index] += 1  # owner: this client thread
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                flow.finish(neper.monotonic_ns())

        before = self.probe.total()
        deadline = time.monotonic() + duration
        workers = [threading.Thread(target=client, args=(i, deadline),
                                    name=f"seed000-crr-{i}") for i in range(clients)]
        elapsed, usage_start, usage_end = run_timed(workers)
        spent = stats_minus(self.probe.total(), before)
        self.completed += sum(done)
        self.no_port += sum(no_port)
        if errors:
            raise RuntimeError(f"seed000 {self.mode}: {len(errors)} transaction(s) failed, "
                               f"first: {errors[0]!r}") from errors[0]
        completed = sum(done)
        return {
            "mode": self.mode,
            "clients": clients,
            "connections": completed,
            "eaddrnotavail": sum(no_port),
            "elapsed": elapsed,
            "rate": completed / elapsed if elapsed else 0.0,
            "time_wait": self.tw_count(),
            **per_connect(spent),
            "neper": neper_lines("tcp_crr", flows, usage_start, usage_end, PERCENTILES)
            if completed else [],
        }

    # ---------------------------------------------------------------- the end
    def _client_counts(self) -> tuple[int, int, set[int]]:
        """Client TIME_WAIT entries, ehash entries, ports in use (``settled_read``)."""
        hashinfo = self.a.tcp.hashinfo
        return settled_read(lambda: (self.tw_count(), len(hashinfo.ehash),
                                     hashinfo.bind.ports_in_use()))

    def _release_held(self) -> bool:
        """End the held flows the way the transactions end - the client closes first and
        keeps a TIME_WAIT, the server reads the EOF, then closes (LAST_ACK) - in batches
        small enough that their FINs never overflow a receive queue (``netdev_max_backlog``
        frames): a dropped FIN is retransmitted after the server's socket is gone, and
        the RST that answers it kills the client's TIME_WAIT.  True once every batch's
        sockets are gone from both hosts."""
        for start in range(0, len(self.held), HELD_BATCH):
            batch = self.held[start:start + HELD_BATCH]
            for cli in batch:
                cli.close()
            if not self.server.release(start, start + len(batch)) or \
                    not wait_until(partial(all_forgotten, [host_socket(c) for c in batch])):
                return False
        return not self.a.tcp.sockets

    def finish(self) -> dict[str, Any]:
        """Stop, check the accounting and what is left, tear down; the checks' figures.
        Raises RuntimeError listing every check that failed."""
        try:
            return self._finish()
        finally:
            self.net.close()

    def _finish(self) -> dict[str, Any]:
        a = self.a
        server = self.server.drain(self.completed)
        held_a = {host_socket(cli) for cli in self.held}
        settled = wait_until(lambda: a.tcp.sockets == held_a)
        tw, client_ehash, ports = self._client_counts()
        low, high = a.tuning.ip_local_port_range
        stats = self.probe.total()
        checks: dict[str, Any] = {
            "completed": self.completed, "served": server["served"],
            "eaddrnotavail": self.no_port, "hold": self.hold,
            "connect_calls": stats.connects, "connect_failures": stats.failures,
            "active_opens": a.counters.get("TcpActiveOpens"),
            "passive_opens": server["passive_opens"],
            "tw_recycled": stats.tw_recycled,
            "tw_recycled_counter": a.counters.get("TcpExtTWRecycled"),
            "settled": settled and server["settled"], "time_wait": tw,
            "client_ehash": client_ehash, "client_ports": len(ports),
            "ports_outside_range": len([p for p in ports if not low <= p <= high]),
            "server_ehash": server["ehash"],
        }
        released = self._release_held()
        after = self._client_counts()
        end = self.server.close()
        checks["released"] = released and end["only_listener"]
        checks["time_wait_after_release"] = after[0]
        checks["client_ehash_after_release"] = after[1]
        checks["client_ports_after_release"] = len(after[2])
        checks["server_ehash_after_release"] = end["ehash"]
        # A TIME_WAIT dies early only to an RST (RFC 1337 off, as Linux's default): the
        # server answers so a segment that finds its socket gone, e.g. a spurious
        # retransmission when a loaded machine delays an ACK past the RTO.
        checks["server_rsts_during_release"] = end["rsts"] - server["rsts"]
        a.tcp.close_all()
        leaks = tcp_leaks(a)
        checks["leaks"] = {key: leaks[key] + end["leaks"][key] for key in leaks}
        checks["rx_exceptions"] = rx_exceptions(a) + end["rx_exceptions"]
        checks["nstat"] = {**a.counters.nonzero()}
        problems = check_problems(checks, end["errors"])
        if problems:
            raise RuntimeError(f"seed000 {self.mode}: " + "; ".join(problems))
        return checks


def check_problems(c: dict[str, Any], errors: Sequence[str] = ()) -> list[str]:
    """Every failed check of ``CrrScenario.finish``, in words (empty: all passed);
    ``errors``: the server threads' failures, as text."""
    problems = [f"server thread failed: {error}" for error in errors[:1]]
    n, hold = c["completed"], c["hold"]
    if c["served"] != n:
        problems.append(f"completed {n}, served {c['served']}")
    if c["connect_calls"] != hold + n + c["eaddrnotavail"] or \
            c["connect_failures"] != c["eaddrnotavail"]:
        problems.append(f"connect() calls {c['connect_calls']} (failed "
                        f"{c['connect_failures']}), expected {hold} held + {n} completed + "
                        f"{c['eaddrnotavail']} EADDRNOTAVAIL")
    if not c["active_opens"] == c["passive_opens"] == hold + n:
        problems.append(f"active opens {c['active_opens']}, passive opens "
                        f"{c['passive_opens']}, expected {hold + n}")
    if c["tw_recycled"] != c["tw_recycled_counter"]:
        problems.append(f"TIME_WAITs taken over {c['tw_recycled']}, TcpExtTWRecycled "
                        f"{c['tw_recycled_counter']}")
    expected = hold + c["time_wait"]
    if not c["settled"] or c["client_ehash"] != expected or c["client_ports"] != expected \
            or c["server_ehash"] or c["ports_outside_range"]:
        problems.append(f"before release: settled {c['settled']}, client ehash "
                        f"{c['client_ehash']} and ports {c['client_ports']} (expected {hold} "
                        f"held + {c['time_wait']} TIME_WAIT), server ehash beyond the held "
                        f"{c['server_ehash']}, ports outside the range "
                        f"{c['ports_outside_range']}")
    # The held flows closed client-first: TIME_WAITs too, less any an RST killed.
    tw, expected = c["time_wait_after_release"], c["time_wait"] + hold
    if not c["released"] or c["client_ehash_after_release"] != tw or \
            c["client_ports_after_release"] != tw or c["server_ehash_after_release"] or \
            not 0 <= expected - tw <= c["server_rsts_during_release"]:
        problems.append(f"after release: settled {c['released']}, client TIME_WAIT {tw} "
                        f"(expected {expected}, less at most "
                        f"{c['server_rsts_during_release']} killed by the server's RSTs), "
                        f"ehash {c['client_ehash_after_release']} and ports "
                        f"{c['client_ports_after_release']}, server ehash "
                        f"{c['server_ehash_after_release']}")
    if any(c["leaks"].values()):
        problems.append(f"left behind after close_all: {c['leaks']}")
    if c["rx_exceptions"]:
        problems.append(f"{c['rx_exceptions']} receive-path exceptions")
    return problems


# ---------------------------------------------------------------- the lab (stack level)
def _scenarios(*, ports: int, hold: int, acceptors: int, request_size: int,
               response_size: int, tw_reuse: int, tw_reuse_delay: int,
               procs: bool) -> dict[str, CrrScenario]:
    made: dict[str, CrrScenario] = {}
    try:
        for mode in MODES:
            made[mode] = CrrScenario(mode, ports=ports, hold=hold, acceptors=acceptors,
                                     request_size=request_size, response_size=response_size,
                                     tw_reuse=tw_reuse, tw_reuse_delay=tw_reuse_delay,
                                     procs=procs)
    except BaseException:
        for scenario in made.values():
            scenario.net.close()
        raise
    return made


def _finish_all(scenarios: dict[str, CrrScenario]) -> dict[str, dict[str, Any]]:
    """Every scenario's checks; every scenario is torn down even if one check fails."""
    checks: dict[str, dict[str, Any]] = {}
    failures: list[BaseException] = []
    for mode, scenario in scenarios.items():
        try:
            checks[mode] = scenario.finish()
        except BaseException as exc:  # the others still need tearing down
            failures.append(exc)
    if failures:
        raise failures[0]
    return checks




def run_stack_lab(duration: float = 1.0, rounds: int = 3, *, clients: int = 4,
                  acceptors: int = 4, ports: int = DEFAULT_PORTS, hold: int | None = None,
                  request_size: int = 1, response_size: int = 1, tw_reuse: int = 1,
                  tw_reuse_delay: int = TW_REUSE_DELAY_MS, warmup: float | None = None,
                  lockstat_duration: float | None = None,
                  procs: bool = False) -> dict[str, Any]:
    """Legacy and modern through whole Hosts: ``rounds`` alternating slices of ``duration``
    seconds each after a warm-up of at most ``warmup`` seconds per mode (default
    ``default_warmup``); each mode keeps its best slice; then one slice per mode with lock
    statistics on (this process's locks: with ``procs``, the client's alone), and the
    checks.  ``procs``: each mode's server Host in a child process
    (rcunet/lab/seed000_procs.py)."""
    hold = default_hold(ports) if hold is None else hold
    warmup = default_warmup(duration) if warmup is None else warmup
    scenarios = _scenarios(ports=ports, hold=hold, acceptors=acceptors,
                           request_size=request_size, response_size=response_size,
                           tw_reuse=tw_reuse, tw_reuse_delay=tw_reuse_delay, procs=procs)
    try:
        warmed = {mode: s.warm_up(clients, warmup) for mode, s in scenarios.items()}
        warm_tw = {mode: s.tw_count() for mode, s in scenarios.items()}
        best: dict[str, dict[str, Any]] = {}
        for _ in range(rounds):
            for mode in MODES:
                run = scenarios[mode].run_slice(duration, clients)
                if mode not in best or run["rate"] > best[mode]["rate"]:
                    best[mode] = run
        locks: dict[str, Any] = {}
        table_locks: dict[str, dict[str, float]] = {}
        seconds = lockstat_duration if lockstat_duration is not None else max(duration / 2,
                                                                               0.1)
        for mode in MODES if seconds > 0 else ():
            run, locks[mode] = with_lockstat(
                partial(scenarios[mode].run_slice, seconds, clients), all_classes())
            table_locks[mode] = _table_lock_summary(locks[mode], run["connect_calls"])
    except BaseException:
        for scenario in scenarios.values():
            scenario.net.close()
        raise
    checks = _finish_all(scenarios)
    return {
        "interpreter": interpreter(),
        "level": "stack",
        "params": {"duration": duration, "rounds": rounds, "clients": clients,
                   "acceptors": acceptors, "ports": ports, "hold": hold,
                   "request_size": request_size, "response_size": response_size,
                   "tw_reuse": tw_reuse, "tw_reuse_delay": tw_reuse_delay,
                   "warmup": warmup, "procs": procs},
        "legacy": best["legacy"]["rate"],
        "modern": best["modern"]["rate"],
        "ratio": ratio(best["modern"]["rate"], best["legacy"]["rate"]),
        "runs": {mode: {**best[mode], "nstat": checks[mode].pop("nstat")} for mode in MODES},
        "warmup_seconds": warmed,
        "warmup_time_wait": warm_tw,
        "checks": checks,
        "lockstat": locks,
        "table_locks": table_locks,
    }


#: The table locks the port search takes (both hosts' instances: b's are few).
TABLE_LOCKS = ("bhash_lock", "bhash2_lock", "ehash_lock")


def _table_lock_summary(snap: dict[str, Any], connect_calls: int) -> dict[str, float]:
    """The table locks' lock_stat counters, and their acquisitions per connect() call:
    per call, not per connection, since a call that ends in EADDRNOTAVAIL scans the range
    too (how many calls fail depends on the machine's speed and load; what one call
    locks depends on the mode alone)."""
    acquisitions = sum(snap[n].acquisitions for n in TABLE_LOCKS if n in snap)
    contentions = sum(snap[n].contentions for n in TABLE_LOCKS if n in snap)
    wait = sum(snap[n].wait_total for n in TABLE_LOCKS if n in snap)
    return {"acquisitions": acquisitions, "contentions": contentions, "wait_total_ns": wait,
            "per_connect": acquisitions / connect_calls if connect_calls else 0.0}


def run_stack_scale(counts: tuple[int, ...], duration: float, rounds: int, *,
                    acceptors: int | None = None, ports: int = DEFAULT_PORTS,
                    hold: int | None = None, request_size: int = 1,
                    response_size: int = 1, tw_reuse: int = 1,
                    tw_reuse_delay: int = TW_REUSE_DELAY_MS,
                    warmup: float | None = None, procs: bool = False) -> dict[str, Any]:
    """Connections/s at every client-thread count, both modes, every (T, mode) slice of
    ``duration`` seconds visited once per round on the same two warmed-up scenarios;
    the checks at the end; the machine's headroom at each count above the first."""
    hold = default_hold(ports) if hold is None else hold
    warmup = default_warmup(duration) if warmup is None else warmup
    scenarios = _scenarios(ports=ports, hold=hold, acceptors=acceptors or max(counts),
                           request_size=request_size, response_size=response_size,
                           tw_reuse=tw_reuse, tw_reuse_delay=tw_reuse_delay, procs=procs)
    try:
        for scenario in scenarios.values():
            scenario.warm_up(counts[0], warmup)
        series: Series = scale(
            lambda mode, t: float(scenarios[mode].run_slice(duration, t)["rate"]), counts,
            rounds)
    except BaseException:
        for scenario in scenarios.values():
            scenario.net.close()
        raise
    _finish_all(scenarios)
    headroom = {t: parallel_headroom(t) for t in counts[1:]}
    return {"interpreter": interpreter(), "level": "stack", "series": series,
            "headroom": headroom}


def stack_command_line(p: dict[str, Any]) -> str:
    return (f"rcunet lab seed000 -T {p['clients']} --acceptors {p['acceptors']} "
            f"--ports {p['ports']} --hold {p['hold']} --tw-reuse {p['tw_reuse']} "
            + (f"--tw-reuse-delay {p['tw_reuse_delay']} "
               if p["tw_reuse_delay"] != TW_REUSE_DELAY_MS else "") +
            f"--duration {p['duration']:g} --rounds {p['rounds']} --warmup {p['warmup']:g} "
            f"-Q {p['request_size']} -R {p['response_size']}"
            + (" --procs" if p.get("procs") else ""))


def stack_report(result: dict[str, Any]) -> str:
    legacy, modern = result["runs"]["legacy"], result["runs"]["modern"]
    p = result["params"]

    def row(label: str, key: str, fmt: str) -> str:
        return f"{label:40}{legacy[key]:>14{fmt}}{modern[key]:>14{fmt}}"

    summary = [
        f"{'':40}{'legacy':>14}{'modern':>14}{'ratio':>9}",
        f"{'connections/s':40}{result['legacy']:>14,.0f}{result['modern']:>14,.0f}"
        f"{result['ratio']:>8.2f}x",
        row("connect() calls (best slice)", "connect_calls", ","),
        row("  failed with EADDRNOTAVAIL", "eaddrnotavail", ","),
        row("candidate ports per connect()", "candidates_per_connect", ".1f"),
        row("  skipped with no lock (pre-check)", "rcu_skips_per_connect", ".1f"),
        row("lock acquisitions per connect()", "locks_per_connect", ".1f"),
        row("  on ports an established flow held", "occupied_candidate_locks_per_connect",
            ".1f"),
        row("4-tuple hashes per connect()", "hash_calls_per_connect", ".1f"),
        row("TIME_WAITs taken over", "tw_recycled", ","),
        row(f"TIME_WAIT entries (of {p['ports']} ports)", "time_wait", ","),
    ]
    if result["table_locks"]:
        gl, gm = result["table_locks"]["legacy"], result["table_locks"]["modern"]
        summary += [
            f"{'bhash/bhash2/ehash locks per connect()':40}{gl['per_connect']:>14.1f}"
            f"{gm['per_connect']:>14.1f}",
            f"{'  contentions (lock_stat slice)':40}{gl['contentions']:>14,}"
            f"{gm['contentions']:>14,}",
        ]
    checks = result["checks"]
    ceiling = reuse_ceiling(p["ports"], p["hold"], p["tw_reuse_delay"])
    notes = [
        f"Client range {p['ports']} ports, {p['hold']} held by established flows, "
        f"tcp_tw_reuse={p['tw_reuse']} on the client (Linux's default 2 reuses only loopback "
        f"TIME_WAITs), timestamps on; the client closes first; {p['clients']} client "
        f"threads, {p['acceptors']} acceptors.  After the warm-up (at most "
        f"{p['warmup']:g} s per mode) TIME_WAIT held legacy "
        f"{result['warmup_time_wait']['legacy']:,}, modern "
        f"{result['warmup_time_wait']['modern']:,} entries (set-up and warm-up use the "
        f"modern search in both modes; not measured).  A TIME_WAIT port is reusable after "
        f"{p['tw_reuse_delay']:,} ms (tcp_tw_reuse_delay), so the free ports sustain about "
        f"{ceiling:,.0f} connections/s."
        + (" --procs: the server's Host in a child process; the lock statistics are the "
           "client's (the port search's)." if p.get("procs") else ""),
        "Checks: every connect() completed or failed with EADDRNOTAVAIL, counted alike by "
        "the port search, both hosts (TcpActiveOpens = TcpPassiveOpens) and the server "
        f"(legacy {checks['legacy']['completed']:,} + "
        f"{checks['legacy']['eaddrnotavail']:,}, modern {checks['modern']['completed']:,} + "
        f"{checks['modern']['eaddrnotavail']:,}); before teardown the client held only the "
        "held flows and TIME_WAITs (ehash entries = ports in use), after close_all "
        "nothing.",
    ]
    capped = [mode for mode in MODES if result[mode] >= CEILING_WARNING * ceiling]
    if capped:
        notes.append(f"Warning: {' and '.join(capped)} ran at "
                     f"{max(result[m] for m in capped) / ceiling:.0%} of that ceiling: the "
                     "rate is bounded by port reuse, not by the search; raise --ports.")
    return cover_letter(
        STACK_TITLE, interpreter=result["interpreter"],
        commands=[stack_command_line(p)], summary=summary,
        before=legacy["neper"], after=modern["neper"],
        lock_stat=lock_stat_lines(result, TABLE_LOCKS), seed="seed000", notes=notes)


def plot_metrics(result: dict[str, Any]) -> list[Any]:
    """The before/after bars of ``rcunet lab all`` for either level's result."""
    from rcunet.lab.plot import Metric

    if result.get("level") != "stack":
        return [Metric(UNIT, result["legacy"], result["modern"], UNIT),
                Metric("locks per connect", result["locks_per_connect"]["legacy"],
                       result["locks_per_connect"]["modern"], "acquisitions")]
    legacy, modern = result["runs"]["legacy"], result["runs"]["modern"]
    return [Metric("connections/s", result["legacy"], result["modern"], "connections/s"),
            Metric("locks per connect()", legacy["locks_per_connect"],
                   modern["locks_per_connect"], "acquisitions"),
            Metric("candidates per connect()", legacy["candidates_per_connect"],
                   modern["candidates_per_connect"], "ports")]


# ==================================================================== command line
STACK_ONLY = ("acceptors", "ports", "hold", "request_size", "response_size", "tw_reuse",
              "tw_reuse_delay", "warmup", "lockstat_duration")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--level", choices=("stack", "tables"), default=None,
                        help="stack: tcp_crr through whole Hosts (default); tables: the "
                             "port search alone (default with --scale)")
    parser.add_argument("-T", "--threads", type=int, default=None,
                        help="connecting threads (default: 4 stack, 1 tables)")
    parser.add_argument("--duration", type=float, default=1.0,
                        help="stack: seconds per slice; tables: seconds per mode (and per "
                             "thread count with --scale)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="alternating slices per mode (default: 3 stack, 4 tables)")
    parser.add_argument("--acceptors", type=int, default=None,
                        help="stack: accepting threads on host b (default 4)")
    parser.add_argument("--ports", type=int, default=None,
                        help="stack: the client's ip_local_port_range width (default "
                             f"{DEFAULT_PORTS})")
    parser.add_argument("--hold", type=int, default=None,
                        help="stack: established flows kept open (default: half the range)")
    parser.add_argument("-Q", "--request-size", type=int, default=None,
                        help="stack: request bytes (default 1)")
    parser.add_argument("-R", "--response-size", type=int, default=None,
                        help="stack: response bytes (default 1)")
    parser.add_argument("--tw-reuse", type=int, choices=(0, 1, 2), default=None,
                        help="stack: the client's tcp_tw_reuse (default 1; Linux's 2 is "
                             "loopback only)")
    parser.add_argument("--tw-reuse-delay", type=int, default=None, metavar="MS",
                        help="stack: the client's tcp_tw_reuse_delay in ms (default "
                             f"{TW_REUSE_DELAY_MS}, Linux's)")
    parser.add_argument("--warmup", type=float, default=None,
                        help="stack: at most this many seconds per mode filling TIME_WAIT "
                             f"first (default: 3 x --duration, at most {WARMUP_MAX:g})")
    parser.add_argument("--lockstat-duration", type=float, default=None, metavar="SECONDS",
                        help="stack: the slice per mode with lock statistics on (default: "
                             "half of --duration; 0 skips it)")
    parser.add_argument("--lockstat", action="store_true",
                        help="stack: print /proc/lock_stat and perf lock contention layouts")
    parser.add_argument("--nstat", action="store_true",
                        help="stack: print host a's nstat counters")
    parser.add_argument("--procs", action="store_true",
                        help="stack: the server's Host (listener, acceptors, the held "
                             "flows' server ends and their release, the server's end "
                             "checks) in a child process, driven by messages; the client "
                             "Host, its port search and its threads here")
    add_scale_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _stack_params(args: argparse.Namespace) -> dict[str, Any]:
    given = {name: getattr(args, name) for name in STACK_ONLY
             if getattr(args, name) is not None}
    for name in ("acceptors", "ports", "request_size", "response_size"):
        if given.get(name, 1) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be positive")
    for name in ("hold", "tw_reuse_delay", "warmup", "lockstat_duration"):
        if given.get(name, 0) < 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 0")
    ports = given.get("ports", DEFAULT_PORTS)
    if given.get("hold", 0) >= ports:
        raise SystemExit(f"--hold must leave free ports: at most {ports - 1} of {ports}")
    if args.lockstat and given.get("lockstat_duration") == 0:
        raise SystemExit("--lockstat needs the lock statistics slice (--lockstat-duration > 0)")
    return given


def run(args: argparse.Namespace) -> int:
    level = args.level or ("tables" if args.scale else "stack")
    threads = args.threads if args.threads is not None else (4 if level == "stack" else 1)
    rounds = args.rounds if args.rounds is not None else (3 if level == "stack" else 4)
    if threads <= 0 or args.duration <= 0 or rounds <= 0:
        raise SystemExit("-T, --duration and --rounds must be positive")
    if args.plot and not args.scale:
        raise SystemExit("--plot draws rates against threads: give --scale too")
    if level == "tables":
        extra = [name for name in STACK_ONLY if getattr(args, name) is not None]
        if extra or args.lockstat or args.nstat or args.procs:
            raise SystemExit("--" + (extra[0] if extra else "lockstat/--nstat/--procs").replace(
                "_", "-") + " applies to --level stack only")
        return _run_tables(args, threads, rounds)
    params = _stack_params(args)
    if args.scale:
        scale_params = {k: v for k, v in params.items() if k != "lockstat_duration"}
        result = run_stack_scale(args.scale, args.duration, rounds, procs=args.procs,
                                 **scale_params)
        text = scaling_report(STACK_SCALE_TITLE, result["series"], STACK_UNIT,
                              result["headroom"])
        print(json.dumps(result) if args.json else text)
        if args.plot:
            plot_scaling(args.plot, STACK_SCALE_TITLE, result["series"], "connections/s")
        return 0
    result = run_stack_lab(args.duration, rounds, clients=threads, procs=args.procs,
                           **params)
    if args.json:
        print(json.dumps(to_json(result)))
        return 0
    print(stack_report(result))
    extra_text = extra_reports(result, show_lockstat=args.lockstat, show_nstat=args.nstat,
                               nstat_host="a")
    if extra_text:
        print()
        print(extra_text)
    return 0


def _run_tables(args: argparse.Namespace, threads: int, rounds: int) -> int:
    if args.scale:
        result = run_scale(args.scale, args.duration, rounds)
        text = scaling_report(TITLE, result["series"], UNIT, result["headroom"])
    else:
        result = run_lab(threads, args.duration, rounds)
        text = report(result)
    print(json.dumps(result) if args.json else text)
    if args.plot:
        plot_scaling(args.plot, TITLE, result["series"], UNIT)
    return 0
