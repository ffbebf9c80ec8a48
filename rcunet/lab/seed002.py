"""Seed 002 through a whole Host: the route cache's refcount under sending threads.

Every ``sendto`` looks up its cached dst entry with no lock, pins it (``ref.get()``),
builds and sends the datagram, and drops the pin (``ref.put()``) — Linux's
``ip_route_output`` / ``dst_release`` pair, the refcount that seed 002 moved from
``atomic_inc_not_zero`` (a compare-and-swap retry loop) to ``rcuref`` (one unconditional
add).  ``threads`` user threads send UDP datagrams to one destination on host ``a``; the
datagrams leave through a dummy interface (a pure-IP device whose transmit discards, as
Linux's ``dummy``), so the measured path is the sender's: API, UDP, route cache, IP.

The second experiment removes and re-adds the route every millisecond while the threads
send: every send either uses a live entry or fails with ENETUNREACH — never a freed one
(``DstEntry.use`` raises ``UseAfterFree``) — and when the dust settles every entry ever
created has been freed exactly once.
"""

from __future__ import annotations

import argparse
import errno
import json
import socket
import threading
import time
from typing import Any

from rcunet.api import Socket
from rcunet.host.clock import MonotonicClock
from rcunet.host.host import Host
from rcunet.host.routecache import UseAfterFree
from rcunet.lab.common import (
    MODES,
    add_scale_options,
    alternate,
    interpreter,
    parallel_headroom,
    plot_scaling,
    ratio,
    scale,
    scaling_report,
    tuning_for,
)
from rcunet.lab.report import published_section

DESTINATION = "10.9.1.1"
PAYLOAD = b"x" * 64


def make_host(mode: str) -> Host:
    host = Host(f"seed002-{mode}", tuning=tuning_for(mode), clock=MonotonicClock())
    dummy = host.add_interface("dummy0", addresses=["10.9.0.1/16"])
    dummy.attach(lambda frame: None)
    return host


def send_rate(mode: str, threads: int, duration: float) -> dict[str, Any]:
    host = make_host(mode)
    sockets = [Socket(host, socket.AF_INET, socket.SOCK_DGRAM) for _ in range(threads)]
    counts = [0] * threads
    retries_before = 0
    start = threading.Barrier(threads + 1)
    stop = threading.Event()

    def sender(index: int) -> None:
        sock = sockets[index]
        sent = 0
        start.wait()
        while not stop.is_set():
            for _ in range(64):
                sock.sendto(PAYLOAD, (DESTINATION, 9))
            sent += 64
        counts[index] = sent

    workers = [threading.Thread(target=sender, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(duration)
    stop.set()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    entry = host.dst_cache.cached(bytes([10, 9, 1, 1]))
    retries = getattr(entry.ref, "cas_retries", 0) - retries_before if entry else 0
    host.close()
    return {"rate": sum(counts) / elapsed, "cas_retries": retries}


def route_churn(mode: str, threads: int, duration: float) -> dict[str, Any]:
    """Senders versus a thread that deletes and re-adds the route."""
    host = make_host(mode)
    route = host.add_route("10.9.1.0/24", dev="dummy0")
    stop = threading.Event()
    results = {"sent": 0, "unreachable": 0, "use_after_free": 0}
    lock = threading.Lock()

    def sender() -> None:
        sock = Socket(host, socket.AF_INET, socket.SOCK_DGRAM)
        sent = unreachable = bad = 0
        while not stop.is_set():
            try:
                sock.sendto(PAYLOAD, (DESTINATION, 9))
                sent += 1
            except UseAfterFree:
                bad += 1
            except OSError as exc:
                if exc.errno != errno.ENETUNREACH:
                    raise
                unreachable += 1
        with lock:
            results["sent"] += sent
            results["unreachable"] += unreachable
            results["use_after_free"] += bad

    def churner() -> int:
        flips = 0
        current = route
        while not stop.is_set():
            host.remove_route(current)
            wider = host.routes.lookup(bytes([10, 9, 1, 1]))  # the /16 too
            assert wider is not None  # dummy0's connected /16, put back below each round
            host.remove_route(wider)
            time.sleep(0.0005)
            current = host.add_route("10.9.1.0/24", dev="dummy0")
            host.add_route("10.9.0.0/16", dev="dummy0", src="10.9.0.1")
            flips += 1
            time.sleep(0.0005)
        return flips

    flips: list[int] = []
    workers = [threading.Thread(target=sender) for _ in range(threads)]
    churn = threading.Thread(target=lambda: flips.append(churner()))
    for worker in workers:
        worker.start()
    churn.start()
    time.sleep(duration)
    stop.set()
    churn.join()
    for worker in workers:
        worker.join()
    host.dst_cache.invalidate()
    results["route_changes"] = flips[0] if flips else 0
    results["entries_created"] = host.dst_cache.slow_lookups
    results["entries_leaked"] = host.dst_cache.live_entries()
    host.close()
    return results


def run_lab(threads: int = 4, duration: float = 1.0, rounds: int = 3) -> dict[str, Any]:
    details: dict[str, dict[str, Any]] = {}

    def measure(mode: str) -> float:
        outcome = send_rate(mode, threads, duration)
        best = details.get(mode)
        if best is None or outcome["rate"] > best["rate"]:
            details[mode] = outcome
        return float(outcome["rate"])

    rates = alternate(measure, rounds)
    churn = {mode: route_churn(mode, threads, duration) for mode in MODES}
    return {
        "interpreter": interpreter(),
        "threads": threads,
        "legacy": rates["legacy"],
        "modern": rates["modern"],
        "ratio": ratio(rates["modern"], rates["legacy"]),
        "cas_retries": {mode: details[mode]["cas_retries"] for mode in MODES},
        "route_churn": churn,
    }


def run_scale(counts: tuple[int, ...], duration: float = 1.0, rounds: int = 3) -> dict[str, Any]:
    """Sends/s at each thread count, legacy and modern (interleaved rounds of
    ``duration / rounds`` seconds per point), and the machine's headroom."""
    series = scale(lambda mode, t: float(send_rate(mode, t, duration / rounds)["rate"]),
                   counts, rounds)
    headroom = {t: parallel_headroom(t) for t in counts if t != counts[0]}
    return {"interpreter": interpreter(), "series": series, "headroom": headroom}


SCALE_TITLE = "seed 002: route-cache refcount, sends/s against sending threads"


def report(result: dict[str, Any]) -> str:
    lines = [
        f"seed 002: route-cache refcount, {result['threads']} sending threads "
        f"({result['interpreter']})",
        "",
        f"{'':30}{'legacy':>14}{'modern':>14}{'ratio':>9}",
        f"{'sends/s':30}{result['legacy']:>14,.0f}{result['modern']:>14,.0f}"
        f"{result['ratio']:>8.2f}x",
        f"{'CAS retries (inc-not-zero)':30}{result['cas_retries']['legacy']:>14,}"
        f"{result['cas_retries']['modern']:>14,}",
        "",
        "route removed and re-added while sending:",
    ]
    for mode in MODES:
        churn = result["route_churn"][mode]
        lines.append(
            f"  {mode:7} sends {churn['sent']:>9,}  ENETUNREACH {churn['unreachable']:>7,}  "
            f"route changes {churn['route_changes']:>5,}  used-after-free "
            f"{churn['use_after_free']}  entries leaked {churn['entries_leaked']}")
    lines += ["", "Tested:", "",
              f"  rcunet lab seed002 -T {result['threads']}  ({result['interpreter']})", "",
              *published_section("seed002")]
    return "\n".join(lines)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        'No --procs: seed 002 has one Host (threads sending through a dummy interface); '
        'there is no client/server pair to split across processes.')
    parser.add_argument("-T", "--threads", type=int, default=4, help="sending threads")
    parser.add_argument("--duration", type=float, default=1.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    add_scale_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    if args.threads <= 0 or args.duration <= 0 or args.rounds <= 0:
        raise SystemExit("-T, --duration and --rounds must be positive")
    if args.plot and not args.scale:
        raise SystemExit("--plot draws rates against threads: give --scale too")
    if args.scale:
        result = run_scale(args.scale, args.duration, args.rounds)
        print(json.dumps(result) if args.json else
              scaling_report(SCALE_TITLE, result["series"], "sends/s", result["headroom"]))
        if args.plot:
            plot_scaling(args.plot, SCALE_TITLE, result["series"], "sends/s")
        return 0
    result = run_lab(args.threads, args.duration, args.rounds)
    print(json.dumps(result) if args.json else report(result))
    return 0
