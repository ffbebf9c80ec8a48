"""Seed 000 in the lab: connect() port selection under port pressure, with threads.

The scenario of ``rcunet.bench.tables_seed000`` (reference §3.6): one TcpHashInfo, an
ephemeral range of 1000 ports, 95% of the 4-tuples to one destination held by established
connections, and ``-T`` threads each running ``connect()`` + ``close()`` of a fresh socket
as fast as they can.  Legacy takes the bucket locks for every candidate port; modern
pre-checks each candidate with no lock and locks only the few that look free.  The tables
are driven directly (the TCP host is not involved), so the figure is the port search's own
cost, and its scaling is the tables' scaling: with the GIL, threads only take turns; without
it, modern's lockless pre-check runs in parallel while legacy's threads meet on the bucket
locks of the same few ports.

Output: connects/s for legacy and modern at ``-T`` threads (each mode's slices alternate
with the other's), lock acquisitions and candidates per connect; with ``--scale 1,2,4``
the rates at every thread count (interleaved), each mode's gain over the first count, and
the machine's parallel headroom measured alongside.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rcunet.bench.tables_seed000 import Workload
from rcunet.lab.common import (
    MODES,
    Series,
    add_scale_options,
    interpreter,
    parallel_headroom,
    plot_scaling,
    ratio,
    scale,
    scaling_report,
)

TITLE = "seed 000: connect() under port pressure (95% of 1000 ports busy)"
UNIT = "connects/s"


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


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-T", "--threads", type=int, default=1,
                        help="connecting threads (default 1)")
    parser.add_argument("--duration", type=float, default=1.0,
                        help="seconds per mode (and per thread count with --scale)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="alternating slices per mode (default 4)")
    add_scale_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    if args.threads <= 0 or args.duration <= 0 or args.rounds <= 0:
        raise SystemExit("-T, --duration and --rounds must be positive")
    if args.plot and not args.scale:
        raise SystemExit("--plot draws rates against threads: give --scale too")
    if args.scale:
        result = run_scale(args.scale, args.duration, args.rounds)
        text = scaling_report(TITLE, result["series"], UNIT, result["headroom"])
    else:
        result = run_lab(args.threads, args.duration, args.rounds)
        text = report(result)
    print(json.dumps(result) if args.json else text)
    if args.plot:
        plot_scaling(args.plot, TITLE, result["series"], UNIT)
    return 0
