"""``rcunet bench tables``: each seed's socket-layer mechanism, before vs after, in one run.

Seeds (each a module ``rcunet.bench.tables_seedNNN`` exposing
``measure(duration, threads) -> dict`` with at least ``legacy``, ``modern`` (rates) and
``ratio``, optionally ``lockstat`` text):

* seed000 — connect() port search: locked vs RCU pre-check (reference §3)
* seed002 — a shared route entry's refcount: inc-not-zero CAS loop vs rcuref (§4)
* seed003 — UDP multicast delivery: port chain under the lock vs hash2, deliver unlocked (§6.5)

Output: a kernel-test-robot style summary (``base  %change  new  metric``), then per seed
its extra counts as ``key=value`` lines, and with ``--lockstat`` the seed's lock statistics
(/proc/lock_stat layout).  ``--json`` prints one object keyed by seed.  A seed whose module
is missing is reported as not available (exit status 1).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from typing import Any

SEEDS: dict[str, str] = {
    "seed000": "connect() port search, locked check vs RCU pre-check",
    "seed002": "shared route entry refcount, inc_not_zero CAS loop vs rcuref",
    "seed003": "UDP multicast delivery, port chain under lock vs hash2 + unlocked delivery",
}

#: keys every seed result has (the rest are the seed's extra counts)
_CORE_KEYS = ("legacy", "modern", "ratio")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=1.0,
                        help="seconds per timed run inside each seed (default 1.0)")
    parser.add_argument("-T", "--threads", type=int, default=4,
                        help="worker threads per timed run (default 4)")
    parser.add_argument("--seeds", default=",".join(SEEDS),
                        help=f"comma-separated subset of {','.join(SEEDS)}")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--lockstat", action="store_true",
                        help="print each seed's lock statistics (/proc/lock_stat layout)")
    parser.add_argument("--lock-overhead", action="store_true",
                        help="also time a dict lookup under bare vs rcunet locks, per mode")


def _parse_seeds(text: str) -> list[str]:
    from rcunet.cli import UsageError

    seeds = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in seeds if s not in SEEDS]
    if unknown or not seeds:
        raise UsageError(f"unknown seed(s) {','.join(unknown) or '(none)'}; "
                         f"choose from {','.join(SEEDS)}")
    return list(dict.fromkeys(seeds))


def measure_seed(seed: str, duration: float, threads: int) -> dict[str, Any]:
    """Run one seed; ``{"available": False, "error": ...}`` when its module is missing."""
    module_name = f"rcunet.bench.tables_{seed}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise  # the seed module exists but something it imports is missing: a bug
        return {"available": False, "legacy": None, "modern": None, "ratio": None,
                "error": f"{module_name} not found"}
    t0 = time.perf_counter()
    result = dict(module.measure(duration, threads))
    missing = [k for k in _CORE_KEYS if k not in result]
    if missing:
        raise RuntimeError(f"{module_name}.measure() result lacks {missing}")
    result["available"] = True
    result["seconds"] = round(time.perf_counter() - t0, 3)
    return result


def run(args: argparse.Namespace) -> int:
    from rcunet.cli import UsageError

    if args.duration <= 0:
        raise UsageError("--duration must be positive")
    if args.threads < 1:
        raise UsageError("--threads must be at least 1")
    seeds = _parse_seeds(args.seeds)
    results = {seed: measure_seed(seed, args.duration, args.threads) for seed in seeds}
    overhead = None
    if args.lock_overhead:
        from rcunet.sync import lockbench

        overhead = lockbench.lookup_overhead()
    if args.json:
        payload: dict[str, Any] = dict(results)
        if overhead is not None:
            payload["lock_overhead"] = overhead
        if not args.lockstat:
            for r in payload.values():
                if isinstance(r, dict):
                    r.pop("lockstat", None)
        print(json.dumps(payload, default=_jsonable))
    else:
        print(format_report(results, args))
        if overhead is not None:
            from rcunet.sync import lockbench

            print()
            print(lockbench.format_overhead(overhead))
    unavailable = [s for s, r in results.items() if not r["available"]]
    for seed in unavailable:
        print(f"rcunet bench tables: {seed} is not available "
              f"({results[seed]['error']})", file=sys.stderr)
    return 1 if unavailable else 0


def _jsonable(value: object) -> object:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def format_report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    from rcunet.lab.common import interpreter

    lines = [
        f"# {interpreter()}; {args.threads} threads, {args.duration:g} s per timed run",
        "# rates are operations per second; %change is modern vs legacy",
        f"{'legacy':>14} {'%change':>9} {'modern':>14}  metric",
    ]
    for seed, r in results.items():
        if not r["available"]:
            lines.append(f"{'n/a':>14} {'':>9} {'n/a':>14}  {seed}: not available")
            continue
        change = (r["ratio"] - 1.0) * 100.0
        lines.append(f"{_rate(r['legacy']):>14} {change:>+8.1f}% {_rate(r['modern']):>14}  "
                     f"{seed}.ops_per_sec  ({SEEDS[seed]})")
    for seed, r in results.items():
        if not r["available"]:
            continue
        lines.append("")
        lines.append(f"== {seed}: {SEEDS[seed]}")
        lines.append(f"ratio={r['ratio']:.3f}")
        for key, value in _flatten(r):
            if key in _CORE_KEYS or key in ("available", "lockstat"):
                continue
            lines.append(f"{key}={_fmt(value)}")
        if args.lockstat:
            text = r.get("lockstat")
            if text:
                lines.append(f"-- {seed} lock statistics")
                lines.append(str(text).rstrip("\n"))
            elif seed == "seed002":
                from rcunet.bench.tables_seed002 import counts_text

                lines.append("-- seed002 has no lock classes (refcount words); its counters:")
                lines.append(counts_text(r))
    return "\n".join(lines)


def _flatten(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.extend(_flatten(value, name + "."))
        else:
            out.append((name, value))
    return out


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1000 else f"{value:.1f}"
    return str(value)
