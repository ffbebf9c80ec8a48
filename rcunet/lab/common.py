"""What every lab experiment shares: alternating legacy/modern rounds, lock statistics
for the classes that matter, the interpreter line, and rates against thread counts
(``--scale 1,2,4``)."""

from __future__ import annotations

import argparse
import platform
import socket
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from rcunet.bench.neper import Usage
from rcunet.bench.workloads import PeerVanished, recv_exact
from rcunet.sync import lockstat
from rcunet.sync.lock import LockClass
from rcunet.tuning import Tuning

MODES = ("legacy", "modern")


def tuning_for(mode: str, **overrides: Any) -> Tuning:
    return Tuning.preset(mode, **overrides)


def interpreter() -> str:
    """``CPython 3.13.5 (free-threaded, GIL off)``: which interpreter and GIL mode ran.
    A free-threaded build that re-enabled its GIL (``PYTHON_GIL=1``, or an extension
    that asked for it) says so."""
    name = f"{platform.python_implementation()} {platform.python_version()}"
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        return f"{name} (GIL)"
    gil_on = getattr(sys, "_is_gil_enabled", lambda: True)()
    return f"{name} ({'free-threaded build, GIL enabled' if gil_on else 'free-threaded, GIL off'})"


def alternate(measure: Callable[[str], float], rounds: int) -> dict[str, float]:
    """Run ``measure(mode)`` for legacy and modern alternately, ``rounds`` times each,
    and keep each mode's best rate (the least disturbed by the rest of the machine)."""
    best = {mode: 0.0 for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            best[mode] = max(best[mode], measure(mode))
    return best


def with_lockstat(run: Callable[[], Any],
                  classes: Iterable[LockClass]) -> tuple[Any, dict[str, Any]]:
    """Run once with lock statistics on; return its result and the classes' stats."""
    classes = list(classes)
    was_on = lockstat.enabled()
    lockstat.enable()
    lockstat.reset(classes)
    try:
        result = run()
        snap = lockstat.snapshot(classes)
    finally:
        if not was_on:
            lockstat.disable()
    return result, snap


#: How long a lab waits for its hosts to settle: generous, only a failing run waits it out.
SETTLE_TIMEOUT = 10.0


def wait_until(predicate: Callable[[], bool], timeout: float = SETTLE_TIMEOUT) -> bool:
    """Poll ``predicate`` every 5 ms until it holds (True) or ``timeout`` passes (False)."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def run_timed(threads: Sequence[threading.Thread],
              ready: Callable[[], object] | None = None) -> tuple[float, Usage, Usage]:
    """Start ``threads`` and wait for all of them to end; returns the wall seconds they
    took and neper's rusage at the start and at the end.  ``ready``, if given, runs after
    the threads started and before the clock does (a barrier they wait on too)."""
    for thread in threads:
        thread.start()
    if ready is not None:
        ready()
    usage_start = Usage.now()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began, usage_start, Usage.now()


def connect_and_send(host: Any, address: tuple[str, int], request: bytes,
                     timeout: float) -> Any:
    """A TCP client socket of ``host``, connected to ``address`` with ``request`` sent
    (tcp_crr's first half); closed again if either step fails."""
    sock = host.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(address)
        sock.sendall(request)
    except BaseException:
        sock.close()
        raise
    return sock


def recv_exactly(sock: Any, size: int) -> None:
    """Read exactly ``size`` bytes from a stream socket (the benchmarks' ``recv_exact``);
    a peer that closes first is an error (``PeerVanished``), before the first byte too."""
    if not recv_exact(sock, size, size):
        raise PeerVanished(f"EOF before any of {size} bytes")


def serve_transaction(conn: Any, request_size: int, response: bytes, timeout: float, *,
                      wait_for_fin: bool = False) -> None:
    """A tcp_crr server's side of one accepted connection: the request, the response,
    then (``wait_for_fin``) the client's FIN before closing, so the server goes through
    LAST_ACK and keeps no TIME_WAIT."""
    with conn:
        conn.settimeout(timeout)
        recv_exactly(conn, request_size)
        conn.sendall(response)
        if wait_for_fin and conn.recv(1):
            raise ConnectionError("client sent more than its request")


def tcp_leaks(*hosts: Any) -> dict[str, int]:
    """What the hosts' TCP left after everything closed: sockets, ehash entries, ports
    in use, listeners (all 0 when nothing leaked)."""
    return {
        "sockets": sum(len(h.tcp.sockets) for h in hosts),
        "ehash": sum(len(h.tcp.hashinfo.ehash) for h in hosts),
        "ports": sum(len(h.tcp.hashinfo.bind.ports_in_use()) for h in hosts),
        "listeners": sum(len(h.tcp.hashinfo.listen.listeners()) for h in hosts),
    }


def rx_exceptions(*hosts: Any) -> int:
    """Receive-path exceptions the hosts counted (each one a bug: must stay 0)."""
    return sum(h.counters.get("RcunetRxExceptions") for h in hosts)


def ratio(modern: float, legacy: float) -> float:
    return modern / legacy if legacy else float("inf")


def stopwatch() -> Callable[[], float]:
    start = time.perf_counter()
    return lambda: time.perf_counter() - start


# -- rates against thread counts (--scale) ------------------------------------------------
Series = dict[int, dict[str, float]]  # threads -> mode -> rate


def thread_counts(text: str) -> tuple[int, ...]:
    """``--scale 1,2,4`` -> (1, 2, 4); a clear error for anything else."""
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SystemExit(f"--scale takes thread counts like 1,2,4, not {text!r}") from None
    if not counts or min(counts) <= 0:
        raise SystemExit(f"--scale needs positive thread counts, got {text!r}")
    if len(set(counts)) != len(counts):
        raise SystemExit(f"--scale lists a thread count twice: {text!r}")
    return counts


def scale(measure: Callable[[str, int], float], counts: Sequence[int],
          rounds: int) -> Series:
    """``measure(mode, threads)`` for every thread count and mode, interleaved: each round
    visits every (threads, mode) pair once, so load from the rest of the machine hits every
    point alike; each point keeps its best rate."""
    series: Series = {t: {mode: 0.0 for mode in MODES} for t in counts}
    for _ in range(rounds):
        for t in counts:
            for mode in MODES:
                series[t][mode] = max(series[t][mode], measure(mode, t))
    return series


def _spin_loop(iterations: int) -> None:
    x = 0
    for i in range(iterations):
        x += i
    del x


def parallel_headroom(threads: int, iterations: int = 500_000, rounds: int = 3) -> float:
    """How much faster ``threads`` threads run a trivially parallel pure-Python loop than
    one thread does, right now: the most any stack workload could gain here (2 on an idle
    2-core machine without the GIL, about 1 with it, less when the machine is busy).
    One-thread and ``threads``-thread runs alternate; each keeps its best rate."""
    def rate(n: int) -> float:
        workers = [threading.Thread(target=_spin_loop, args=(iterations,)) for _ in range(n)]
        elapsed = stopwatch()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return n * iterations / elapsed()

    one = many = 0.0
    for _ in range(rounds):
        one = max(one, rate(1))
        many = max(many, rate(threads))
    return many / one


def scaling_rows(series: Mapping[int, Mapping[str, float]], unit: str) -> list[str]:
    """The table: rates per thread count, modern/legacy, and each mode's gain over the
    smallest thread count."""
    counts = sorted(series)
    base = series[counts[0]]
    lines = [f"{'threads':>7}{'legacy ' + unit:>20}{'modern ' + unit:>20}{'ratio':>8}"
             f"{'legacy gain':>13}{'modern gain':>13}"]
    for t in counts:
        row = series[t]
        lines.append(
            f"{t:>7}{row['legacy']:>20,.0f}{row['modern']:>20,.0f}"
            f"{ratio(row['modern'], row['legacy']):>7.2f}x"
            f"{ratio(row['legacy'], base['legacy']):>12.2f}x"
            f"{ratio(row['modern'], base['modern']):>12.2f}x")
    return lines


def scaling_report(title: str, series: Mapping[int, Mapping[str, float]], unit: str,
                   headroom: Mapping[int, float]) -> str:
    """``scaling_rows`` under a title naming the interpreter, then the machine's headroom
    measured at the same time (so a flat line can be told from a busy machine)."""
    lines = [f"{title} ({interpreter()})", "", *scaling_rows(series, unit), ""]
    counts = sorted(series)
    for t in counts[1:]:
        lines.append(f"machine headroom: a trivially parallel loop runs "
                     f"{headroom.get(t, float('nan')):.2f}x faster on {t} threads than on "
                     f"{counts[0]} (measured alongside)")
    return "\n".join(lines)


def add_scale_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scale", metavar="T,T,...", type=thread_counts,
                        help="measure legacy and modern at each thread count (e.g. 1,2,4) "
                             "and print rates against threads")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="with --scale: draw rates against threads (needs matplotlib)")


def plot_scaling(path: str, title: str, series: Series, unit: str) -> str:
    """Rates against threads, legacy and modern (``rcunet.lab.plot.scaling``)."""
    from rcunet.lab.plot import scaling as draw

    return draw(path, f"{title}\n{interpreter()}", series, xlabel="threads (-T)",
                ylabel=unit)
