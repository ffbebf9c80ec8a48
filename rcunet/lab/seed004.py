"""Seed 004 through whole Hosts: short-lived connections and accept() with no global lock.

Julien Charbon's FreeBSD work (seed 004, reference §7.2): FreeBSD 9.2 took the global
``INP_INFO`` lock in ``tcp_usr_accept`` only as a barrier against a socket published in the
listen queue before its fields were set, and on SYN processing and teardown as well; short
connections spread over many cores then queued on that one lock.  The fix publishes a new
connection only when it is fully initialised, so accept() needs just the socket's own lock.

Here ``clients`` threads on host ``a`` (linked to ``b`` by a link that delivers inline, as
loopback does: ``two_hosts_inline``) each run tcp_crr transactions back to back —
connect, a ``request_size`` request, a ``response_size`` response, close — against one
listener on host ``b`` served by ``acceptors`` threads (accept, recv, send, close: the
server closes first and keeps the TIME_WAIT, so client ports never run out).  Legacy
(``Tuning.accept_no_global_lock`` off) takes the global ``tcbinfo_lock`` on accept, SYN
processing and teardown — as 9.2's ``tcp_input``, over the input of every SYN, FIN and RST
segment and of any segment to a connection not yet ESTABLISHED; modern takes none.
Measured: connections/s, the latency of each transaction (a neper tcp_crr block), and the
lock statistics of ``tcbinfo_lock``.

Two shapes (``--shape``).  ``pairs`` (the default of the plain lab) is the one above:
client threads and accepting threads, so every transaction hands its segments back and
forth between two threads and one client/acceptor pair keeps 1.2-1.4 CPUs busy.
``workers`` (the default of ``--scale``) gives each of ``-T`` threads both roles, as a
server worker that is also its own load generator: connect, send the request, ``accept()``
the next connection from the shared listener (its own or another worker's), serve it,
then read its own response.  Each thread is one CPU of work, so the 1 -> 2 step of the
scaling figure measures the stack, not the hand-offs; every accept still goes to the one
listener from several threads, which is what seed 004 is about.  A worker that accepts
another's connection waits at most until that worker sends its request, which it does
right after connecting, so no worker can wait on one that waits on it.  Checked:
every connection the clients completed was served exactly once and counted by both hosts,
and afterwards no socket, table entry or port is left behind.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from functools import partial
from typing import Any

from rcunet.api import host_socket
from rcunet.host.network import Network
from rcunet.host.tcp import TCBINFO_LOCK
from rcunet.lab.common import (
    MODES,
    Series,
    alternate,
    connect_and_send,
    interpreter,
    parallel_headroom,
    plot_scaling,
    ratio,
    run_timed,
    rx_exceptions,
    scale,
    scaling_report,
    tcp_leaks,
    thread_counts,
    wait_until,
    with_lockstat,
)
from rcunet.lab.report import cover_letter, extra_reports, lock_stat_lines, to_json
from rcunet.lab.seed001 import (
    add_common_options,
    check_lockstat_duration,
    seed_tuning,
    switch_interval_flag,
    with_switch_interval,
)
from rcunet.lab.seed004_crr import (  # the parts a server in another process shares
    ACCEPT_POLL,
    IO_TIMEOUT,
    PORT,
    SERVER,
)
from rcunet.lab.seed004_crr import Tally as _Tally
from rcunet.lab.seed004_crr import read_response as _read_response
from rcunet.lab.seed004_crr import transaction as _transaction
from rcunet.sync.lock import all_classes


def two_hosts_inline(mode: str) -> tuple[Network, Any, Any]:
    """Hosts ``a`` (10.0.0.1) and ``b`` (10.0.0.2) on one link that delivers inline: the
    sending thread runs the receiver's input, as Linux loopback does (netif_rx, then the
    same CPU's softirq) and as ``rcunet bench tcp_crr``'s mem target does.  Each client /
    acceptor pair then does its own work in its own threads; with receive workers instead,
    every segment would wait for one of the hosts' worker threads, and one client already
    kept more than one CPU busy handing segments between threads."""
    net = Network(threaded=True, tuning=seed_tuning(mode, "seed004"))
    a, b = net.host("a"), net.host("b")
    net.link(a, b, ["10.0.0.1/24"], [f"{SERVER}/24"], inline_rx=True)
    return net, a, b


SHAPES = ("pairs", "workers")


def run_crr(mode: str, duration: float = 1.0, *, acceptors: int = 4, clients: int = 4,
            request_size: int = 1, response_size: int = 1,
            shape: str = "pairs", procs: bool = False) -> dict[str, Any]:
    """One run of ``duration`` seconds; see the module docstring.  With ``shape``
    "workers", ``acceptors`` threads play both roles and ``clients`` is ignored.
    ``procs``: the server Host in a child process (rcunet/lab/seed004_procs.py)."""
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES}, not {shape!r}")
    if procs:
        if shape != "pairs":
            raise ValueError("--procs runs the pairs shape (a workers thread plays both "
                             "roles, which cannot span two processes)")
        from rcunet.lab.seed004_procs import run_crr_procs

        return run_crr_procs(mode, duration, acceptors=acceptors, clients=clients,
                             request_size=request_size, response_size=response_size,
                             tuning=seed_tuning(mode, "seed004"))
    net, a, b = two_hosts_inline(mode)
    net.start()
    try:
        srv: Any = b.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.bind((SERVER, PORT))
        srv.listen(128)
        if shape == "workers":
            srv.settimeout(IO_TIMEOUT)
            result = _workers(a, srv, duration, acceptors, request_size, response_size)
        else:
            srv.settimeout(ACCEPT_POLL)
            result = _churn(a, srv, duration, acceptors, clients, request_size,
                            response_size)
        result["mode"] = mode
        result["passive_opens"] = b.counters.get("TcpPassiveOpens")
        result["active_opens"] = a.counters.get("TcpActiveOpens")
        listener = host_socket(srv)
        result["settled"] = wait_until(lambda: not a.tcp.sockets and b.tcp.sockets == {listener})
        result["client_ports_in_use"] = len(a.tcp.hashinfo.bind.ports_in_use())
        result["nstat"] = {**b.counters.nonzero()}
        srv.close()
        b.tcp.close_all()  # the server's TIME_WAIT entries go too
        result["leaks"] = tcp_leaks(a, b)
        result["rx_exceptions"] = rx_exceptions(a, b)
        return result
    finally:
        net.close()


def _churn(a: Any, srv: Any, duration: float, acceptors: int, clients: int,
           request_size: int, response_size: int) -> dict[str, Any]:
    """The ``pairs`` shape: client threads and accepting threads."""
    tally = _Tally(duration, clients, acceptors, request_size, response_size)
    stop = threading.Event()

    def acceptor(index: int) -> None:
        tally.accept_loop(srv, index, stop)

    servers = [threading.Thread(target=acceptor, args=(i,), name=f"acceptor-{i}")
               for i in range(acceptors)]
    for thread in servers:
        thread.start()
    deadline = time.monotonic() + duration
    transaction = partial(_transaction, a, tally.request, response_size)
    workers = [threading.Thread(target=tally.transactions, args=(i, deadline, transaction),
                                name=f"crr-client-{i}") for i in range(clients)]
    elapsed, usage_start, usage_end = run_timed(workers)
    # A connection the clients finished was served: its response arrived before the EOF.
    wait_until(lambda: sum(tally.served) >= sum(tally.done))
    stop.set()
    for thread in servers:
        thread.join()
    return tally.result(elapsed, usage_start, usage_end)


def _workers(a: Any, srv: Any, duration: float, workers: int, request_size: int,
             response_size: int) -> dict[str, Any]:
    """The ``workers`` shape: each thread connects, sends its request, accepts and serves
    one connection from the shared listener, then reads its own response."""
    tally = _Tally(duration, workers, workers, request_size, response_size)
    start = threading.Barrier(workers + 1)

    def one_transaction(index: int) -> None:
        with connect_and_send(a, (SERVER, PORT), tally.request, IO_TIMEOUT) as cli:
            conn, _ = srv.accept()
            tally.serve(conn, index)
            _read_response(cli, response_size)

    def worker(index: int) -> None:
        try:
            start.wait()
        except threading.BrokenBarrierError as exc:
            tally.errors.append(exc)
            return
        deadline = time.monotonic() + duration
        tally.transactions(index, deadline, partial(one_transaction, index))

    threads = [threading.Thread(target=worker, args=(i,), name=f"crr-worker-{i}")
               for i in range(workers)]
    # the clock starts when every worker is ready
    return tally.result(*run_timed(threads, ready=start.wait))


def _checked(run: dict[str, Any]) -> dict[str, Any]:
    problems = []
    n = run["connections"]
    if not (n == run["served"] == run["passive_opens"] == run["active_opens"]):
        problems.append(f"completed {n}, served {run['served']}, passive opens "
                        f"{run['passive_opens']}, active opens {run['active_opens']}")
    if not run["settled"] or any(run["leaks"].values()) or run["client_ports_in_use"]:
        problems.append(f"left behind: {run['leaks']}, client ports "
                        f"{run['client_ports_in_use']}, settled {run['settled']}")
    if run["rx_exceptions"]:
        problems.append(f"{run['rx_exceptions']} receive-path exceptions")
    if problems:
        raise RuntimeError(f"seed004 {run['mode']}: " + "; ".join(problems))
    return run


def run_lab(duration: float = 1.0, rounds: int = 3, *, acceptors: int = 4, clients: int = 4,
            request_size: int = 1, response_size: int = 1,
            lockstat_duration: float | None = None, shape: str = "pairs",
            procs: bool = False) -> dict[str, Any]:
    best: dict[str, dict[str, Any]] = {}

    def run_one(mode: str, seconds: float) -> dict[str, Any]:
        return _checked(run_crr(mode, seconds, acceptors=acceptors, clients=clients,
                                request_size=request_size, response_size=response_size,
                                shape=shape, procs=procs))

    def measure(mode: str) -> float:
        run = run_one(mode, duration)
        if mode not in best or run["rate"] > best[mode]["rate"]:
            best[mode] = run
        return float(run["rate"])

    rates = alternate(measure, rounds)
    locks: dict[str, Any] = {}
    global_lock: dict[str, dict[str, float]] = {}
    seconds = lockstat_duration if lockstat_duration is not None else max(duration / 2, 0.1)
    for mode in MODES if seconds > 0 else ():
        run, locks[mode] = with_lockstat(partial(run_one, mode, seconds), all_classes())
        if procs:  # the server's locks, where accept() runs
            locks[mode] = run["server_lockstat"]
        global_lock[mode] = _class_summary(locks[mode].get(TCBINFO_LOCK.name),
                                           run["connections"])
    return {
        "interpreter": interpreter(),
        "params": {"switch_interval": sys.getswitchinterval(),
                   "duration": duration, "rounds": rounds, "acceptors": acceptors,
                   "clients": clients, "shape": shape, "procs": procs,
                   "request_size": request_size,
                   "response_size": response_size},
        "legacy": rates["legacy"],
        "modern": rates["modern"],
        "ratio": ratio(rates["modern"], rates["legacy"]),
        "runs": best,
        "lockstat": locks,
        "global_lock": global_lock,
    }


def _class_summary(stats: Any, connections: int) -> dict[str, float]:
    """The global lock's counters in the statistics run, and acquisitions per connection
    (a count, so machine load does not move it)."""
    summary = {"acquisitions": 0, "contentions": 0, "wait_total_ns": 0, "hold_total_ns": 0}
    if stats is not None:
        summary = {"acquisitions": stats.acquisitions, "contentions": stats.contentions,
                   "wait_total_ns": stats.wait_total, "hold_total_ns": stats.hold_total}
    per_connection = summary["acquisitions"] / connections if connections else 0.0
    return {**summary, "per_connection": per_connection}


SCALE_TITLES = {
    "pairs": "seed 004: connections/s against -T (T client threads, T accepting threads)",
    "workers": "seed 004: connections/s against -T (T workers, each client and acceptor)",
}


def scaling(threads: tuple[int, ...] = (1, 2, 4), duration: float = 1.0,
            rounds: int = 1, shape: str = "workers",
            cpu: dict[int, dict[str, tuple[float, float]]] | None = None) -> Series:
    """Connections/s against -T, legacy and modern, every (T, mode) point visited once
    per round (``rcunet.lab.common.scale``); ``shape`` as ``run_crr``.  ``cpu``, if given,
    is filled with each point's (CPU µs per connection, CPUs busy) from its best run."""
    best: dict[tuple[int, str], float] = {}

    def measure(mode: str, t: int) -> float:
        run = _checked(run_crr(mode, duration, acceptors=t, clients=t, shape=shape))
        rate = float(run["rate"])
        if cpu is not None and rate > best.get((t, mode), -1.0):
            best[(t, mode)] = rate
            cpu.setdefault(t, {})[mode] = (run["cpu_per_connection_us"], run["cpus_busy"])
        return rate

    return scale(measure, threads, rounds)


def scaling_text(series: Series, shape: str = "workers",
                 cpu: dict[int, dict[str, tuple[float, float]]] | None = None) -> str:
    """The --scale table, with the machine's parallel headroom measured now, and (with
    ``cpu``) the CPU each connection cost at each count: on a shared machine the rates
    move with the other jobs, the CPU per connection much less."""
    counts = sorted(series)
    headroom = {t: parallel_headroom(t) for t in counts[1:]}
    text = scaling_report(SCALE_TITLES[shape], series, "conn/s", headroom)
    return text + ("\n\n" + cpu_text(cpu) if cpu else "")


def cpu_text(cpu: dict[int, dict[str, tuple[float, float]]],
             parallel: bool | None = None) -> str:
    """CPU per connection against -T.  Where threads can run at once (no GIL), also the
    gain that cost allows on idle CPUs: T threads at CPU(T) per connection do at most
    T * CPU(1) / CPU(T) times one thread's work."""
    if parallel is None:
        parallel = not getattr(sys, "_is_gil_enabled", lambda: True)()
    counts = sorted(cpu)
    header = (f"{'threads':>7}{'legacy us/conn':>18}{'modern us/conn':>18}"
              f"{'CPUs busy (l/m)':>18}")
    if parallel:
        header += f"{'legacy ceiling':>16}{'modern ceiling':>16}"
    lines = ["CPU per connection (process CPU time of the best run of each point)", "",
             header]
    first = cpu[counts[0]]
    for t in counts:
        row = cpu[t]
        line = (f"{t:>7}{row['legacy'][0]:>18,.0f}{row['modern'][0]:>18,.0f}"
                f"{row['legacy'][1]:>9.2f} / {row['modern'][1]:<6.2f}")
        if parallel:
            ceilings = [t / counts[0] * first[m][0] / row[m][0] if row[m][0] else 0.0
                        for m in MODES]
            line += f"{ceilings[0]:>15.2f}x{ceilings[1]:>15.2f}x"
        lines.append(line)
    return "\n".join(lines)


def command_line(params: dict[str, Any]) -> str:
    return (f"rcunet lab seed004 -T {params['acceptors']} --clients {params['clients']} "
            f"--shape {params.get('shape', 'pairs')} "
            f"--duration {params['duration']} --rounds {params['rounds']} "
            f"-Q {params['request_size']} -R {params['response_size']}"
            + switch_interval_flag(params))


def report(result: dict[str, Any]) -> str:
    legacy, modern = result["runs"]["legacy"], result["runs"]["modern"]
    p = result["params"]
    summary = [
        f"{'':36}{'legacy':>14}{'modern':>14}{'ratio':>9}",
        f"{'connections/s':36}{result['legacy']:>14,.0f}{result['modern']:>14,.0f}"
        f"{result['ratio']:>8.2f}x",
    ]
    if result["global_lock"]:
        gl, gm = result["global_lock"]["legacy"], result["global_lock"]["modern"]
        summary += [
            f"{'tcbinfo_lock acquisitions':36}{gl['acquisitions']:>14,}"
            f"{gm['acquisitions']:>14,}",
            f"{'  per connection (both hosts)':36}{gl['per_connection']:>14.2f}"
            f"{gm['per_connection']:>14.2f}",
            f"{'tcbinfo_lock contentions':36}{gl['contentions']:>14,}{gm['contentions']:>14,}",
            f"{'tcbinfo_lock wait total (us)':36}{gl['wait_total_ns'] / 1e3:>14,.1f}"
            f"{gm['wait_total_ns'] / 1e3:>14,.1f}",
        ]
    notes = [
        f"Checks: every completed connection was served once and counted by both hosts "
        f"(legacy {legacy['connections']:,}, modern {modern['connections']:,}); nothing "
        f"left behind (sockets, ehash entries, ports, listeners) after close.",
        f"{p['acceptors']} accepting threads on one listener, {p['clients']} client threads; "
        f"the lock_stat figures come from one extra run per mode with statistics on.",
    ]
    return cover_letter(
        "seed 004: short-lived connections, accept() without a global lock",
        interpreter=result["interpreter"], commands=[command_line(p)], summary=summary,
        before=legacy["neper"], after=modern["neper"],
        lock_stat=lock_stat_lines(result), seed="seed004", notes=notes)


def plot_metrics(result: dict[str, Any]) -> list[Any]:
    from rcunet.lab.plot import Metric

    metrics = [Metric("connections/s", result["legacy"], result["modern"], "connections/s")]
    if result["global_lock"]:
        gl, gm = result["global_lock"]["legacy"], result["global_lock"]["modern"]
        metrics.append(Metric("tcbinfo_lock per connection", gl["per_connection"],
                              gm["per_connection"], "acquisitions"))
    return metrics


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-T", "--num-threads", dest="acceptors", type=int, default=4,
                        help="accepting threads on the listener (default 4)")
    parser.add_argument("--clients", type=int, default=4, help="client threads (default 4)")
    parser.add_argument("--duration", type=float, default=1.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds (default 3); with --scale, the rounds of "
                             "every point")
    parser.add_argument("-Q", "--request-size", type=int, default=1)
    parser.add_argument("-R", "--response-size", type=int, default=1)
    parser.add_argument("--scale", metavar="T,T,...", type=thread_counts,
                        help="also measure connections/s at these -T values, interleaved "
                             "(with --plot: FILE-scaling.png)")
    parser.add_argument("--shape", choices=SHAPES, default=None,
                        help="pairs: --clients client threads and -T accepting threads; "
                             "workers: -T threads that each connect and accept (default: "
                             "pairs for the lab, workers for --scale)")
    parser.add_argument("--procs", action="store_true",
                        help="the server Host (listener, accepting threads) in a child "
                             "process, the clients' Host here (pairs shape only)")
    add_common_options(parser)


def run(args: argparse.Namespace) -> int:
    for name in ("acceptors", "clients", "duration", "rounds", "request_size",
                 "response_size"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be positive")
    check_lockstat_duration(args)
    if args.procs and args.scale:
        raise SystemExit("--procs measures the lab's pairs; --scale stays in one process")
    counts = args.scale or ()
    lab_shape = args.shape or "pairs"
    scale_shape = args.shape or "workers"
    cpu: dict[int, dict[str, tuple[float, float]]] = {}

    def body() -> tuple[dict[str, Any], Series]:
        result = run_lab(args.duration, args.rounds, acceptors=args.acceptors,
                         clients=args.clients, request_size=args.request_size,
                         response_size=args.response_size,
                         lockstat_duration=args.lockstat_duration, shape=lab_shape,
                         procs=args.procs)
        series = (scaling(counts, args.duration, args.rounds, scale_shape, cpu)
                  if counts else {})
        return result, series

    result, series = with_switch_interval(args.switch_interval, body)
    if args.json:
        slim = to_json(result)
        if series:
            slim["scaling"] = series
            slim["scaling_cpu_per_connection_us"] = {
                t: {mode: point[mode][0] for mode in point} for t, point in cpu.items()}
        print(json.dumps(slim))
    else:
        print(report(result))
        if series:
            print()
            print(scaling_text(series, scale_shape, cpu))
        extra = extra_reports(result, show_lockstat=args.lockstat, show_nstat=args.nstat)
        if extra:
            print()
            print(extra)
    if args.plot:
        from rcunet.lab.plot import before_after_bars

        before_after_bars(args.plot, "seed 004: short-lived connections",
                          plot_metrics(result))
        if series:
            stem = args.plot[:-4] if args.plot.endswith(".png") else args.plot
            plot_scaling(f"{stem}-scaling.png", SCALE_TITLES[scale_shape], series,
                         "connections/s")
    return 0

