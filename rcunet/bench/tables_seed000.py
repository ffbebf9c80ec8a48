"""Seed 000 experiment: connect() port autoselection when the range is nearly full.

Setup (the situation of the March 2025 series, reference §3.6): an ephemeral range of
1000 ports, one destination, 95% of the 4-tuples held by established connections made by
connect() itself (tb ``fastreuse == -1``, so every occupied candidate reaches the 4-tuple
check).  Workload: ``connect()`` + ``close()`` of a fresh socket, as fast as possible,
under ``Tuning`` legacy (bucket locks for every candidate, full 4-tuple hash per
candidate) and modern (lockless pre-check, ``hash_port0 + port``).

``measure(duration, threads)`` returns the rates, lock acquisitions per connect (counted
by the port selector, exact), ``occupied_candidate_locks`` (lock acquisitions spent on
candidates whose tuple a non-TIME_WAIT socket held: 0 for modern), the same with 4
threads, and a /proc/lock_stat-style text from a short extra pass with lock statistics
on (the timed runs keep statistics off so they measure the locks, not the bookkeeping).

Run alone: ``python -m rcunet.bench.tables_seed000 --duration 2``.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import threading
import time
from typing import Any

from rcunet.sync import lockstat
from rcunet.tables import AF_INET, ConnectStats, SockEntry, State, TcpHashInfo
from rcunet.tuning import Tuning

PORT_LOW = 40000
PORT_COUNT = 1000
OCCUPIED_FRACTION = 0.95
SADDR = bytes([10, 0, 0, 1])
DADDR = bytes([10, 0, 0, 2])
DPORT = 80


def _tuning(modern: bool) -> Tuning:
    return Tuning(
        connect_rcu_precheck=modern,
        connect_hash_port0=modern,
        ip_local_port_range=(PORT_LOW, PORT_LOW + PORT_COUNT - 1),
    )


def build(modern: bool, seed: int = 0) -> TcpHashInfo:
    """Tables with 95% of the range's 4-tuples to DADDR:DPORT established."""
    rng = random.Random(seed)
    clock_ns = [1_000_000_000]
    tables = TcpHashInfo(_tuning(modern), rng=rng, clock=lambda: clock_ns[0])
    ports = list(range(PORT_LOW, PORT_LOW + PORT_COUNT))
    for port in sorted(rng.sample(ports, int(PORT_COUNT * OCCUPIED_FRACTION))):
        sk = SockEntry(AF_INET, SADDR)
        sk.local_port_range = (port, port)  # place it exactly; still a connect() autobind
        tables.connect(sk, DADDR, DPORT)
        sk.state = State.ESTABLISHED
    return tables


def _worker(tables: TcpHashInfo, duration: float, stats: ConnectStats,
            errors: list[BaseException], start: threading.Barrier) -> None:
    connect, close = tables.connect, tables.close
    try:
        start.wait()
        # The clock starts at the barrier: a slow thread start must not eat the slice.
        deadline = time.perf_counter() + duration
        while time.perf_counter() < deadline:
            for _ in range(20):
                sk = SockEntry(AF_INET, SADDR)
                connect(sk, DADDR, DPORT, stats)
                close(sk)
    except BaseException as exc:  # reported by the caller
        errors.append(exc)


class Workload:
    """One mode's tables, built once, run in slices (so legacy and modern slices can
    alternate and share the machine's load drift)."""

    def __init__(self, modern: bool, threads: int, seed: int = 0) -> None:
        self.tables = build(modern, seed)
        self.threads = threads
        self.stats = ConnectStats()
        self.elapsed = 0.0

    def run_slice(self, duration: float) -> None:
        per_thread = [ConnectStats() for _ in range(self.threads)]
        errors: list[BaseException] = []
        start = threading.Barrier(self.threads + 1)
        workers = [threading.Thread(target=_worker,
                                    args=(self.tables, duration, st, errors, start),
                                    name=f"seed000-{i}") for i, st in enumerate(per_thread)]
        for w in workers:
            w.start()
        start.wait()
        began = time.perf_counter()
        for w in workers:
            w.join()
        self.elapsed += time.perf_counter() - began
        if errors:
            raise errors[0]
        for st in per_thread:
            self.stats.merge(st)

    def result(self) -> dict[str, Any]:
        total = self.stats
        n = max(total.connects, 1)
        return {
            "rate": total.connects / self.elapsed if self.elapsed else 0.0,
            "connects": total.connects,
            "candidates_per_connect": total.candidates / n,
            "locks_per_connect": total.locks / n,
            "bhash_locks_per_connect": total.bhash_locks / n,
            "ehash_locks_per_connect": total.ehash_locks / n,
            "hash_calls_per_connect": total.hash_calls / n,
            "occupied_candidate_locks": total.occupied_candidate_locks,
            "stats": dataclasses.asdict(total),
        }


#: Each timed comparison alternates this many legacy and modern slices.
SLICES = 8


def compare(duration: float, threads: int, seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """Legacy and modern, ``duration`` seconds each, in alternating slices."""
    legacy, modern = Workload(False, threads, seed), Workload(True, threads, seed)
    for _ in range(SLICES):
        legacy.run_slice(duration / SLICES)
        modern.run_slice(duration / SLICES)
    return legacy.result(), modern.result()


def run(modern: bool, duration: float, threads: int = 1, seed: int = 0) -> dict[str, Any]:
    """One timed run of one mode; rate (connect+close per second) and per-connect counts."""
    workload = Workload(modern, threads, seed)
    workload.run_slice(duration)
    return workload.result()


def _lockstat_text(duration: float) -> str:
    parts = []
    for name, modern in (("legacy", False), ("modern", True)):
        with lockstat.collecting():
            run(modern, duration)
            snap = lockstat.snapshot()
        parts.append(f"# seed000 {name}: connect()+close() autoselect, 95% of 1000 ports busy\n"
                     + lockstat.format_lock_stat(snap))
    return "\n".join(parts)


def measure(duration: float, threads: int = 1) -> dict[str, Any]:
    """Legacy vs modern autoselect.  ``duration`` is each mode's timed total, once with
    ``threads`` threads and once with 4 (legacy and modern slices alternate, so load
    from other processes hits both alike); a lock_stat pass of duration/4 per mode
    follows."""
    legacy, modern = compare(duration, threads)
    legacy4, modern4 = compare(duration, 4)
    return {
        "legacy": legacy["rate"],
        "modern": modern["rate"],
        "ratio": modern["rate"] / legacy["rate"],
        "locks_per_connect": {"legacy": legacy["locks_per_connect"],
                              "modern": modern["locks_per_connect"]},
        "occupied_candidate_locks": {"legacy": legacy["occupied_candidate_locks"],
                                     "modern": modern["occupied_candidate_locks"]},
        "candidates_per_connect": {"legacy": legacy["candidates_per_connect"],
                                   "modern": modern["candidates_per_connect"]},
        "hash_calls_per_connect": {"legacy": legacy["hash_calls_per_connect"],
                                   "modern": modern["hash_calls_per_connect"]},
        "threads4": {
            "legacy": legacy4["rate"],
            "modern": modern4["rate"],
            "ratio": modern4["rate"] / legacy4["rate"],
            "locks_per_connect": {"legacy": legacy4["locks_per_connect"],
                                  "modern": modern4["locks_per_connect"]},
            "occupied_candidate_locks": {"legacy": legacy4["occupied_candidate_locks"],
                                         "modern": modern4["occupied_candidate_locks"]},
        },
        "lockstat": _lockstat_text(max(duration / 4, 0.05)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per timed run")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lockstat", action="store_true", help="also print the lock_stat text")
    args = parser.parse_args(argv)
    result = measure(args.duration, args.threads)
    text = result.pop("lockstat")
    for key, value in result.items():
        print(f"{key}={value}")
    if args.lockstat:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
