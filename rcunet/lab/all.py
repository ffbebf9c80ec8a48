"""``rcunet lab all``: the five seed experiments in bounded time, one markdown report.

Each seed's lab runs with a fixed budget (``--quick``: about a minute on 2 cores; the
default: a few minutes), its report goes into one markdown file (``--output``) next to the
seed authors' published effect — direction and rough size — and ``--plot-dir`` gets a
before/after plot per seed, a summary of every seed's change beside the published one,
and (default mode) seed 004's connections/s against -T.

Seed 000 runs at its whole-stack level (``run_stack_lab``: tcp_crr between two Hosts); a
lab module that is not in the tree is reported as not run.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rcunet.lab.common import interpreter, ratio
from rcunet.lab.plot import Metric, before_after_bars, scaling, speedups
from rcunet.lab.report import PUBLISHED, format_change, percent_change, published_section
from rcunet.lab.report import to_json as result_json

SEEDS = ("seed000", "seed001", "seed002", "seed003", "seed004")
#: Changes smaller than this (in %) count as "flat", neither direction.
FLAT_PERCENT = 5.0


@dataclass(frozen=True)
class Lab:
    title: str
    unit: str  # of the headline legacy/modern rate
    quick: dict[str, Any]
    default: dict[str, Any]
    published: int  # which PUBLISHED figure is the seed's own headline
    runner: str = "run_lab"  # the module's lab function and its report
    reporter: str = "report"


LABS: dict[str, Lab] = {
    "seed000": Lab("connect() under port pressure: tcp_crr, narrow range, TIME_WAIT reuse",
                   "connections/s",
                   {"duration": 0.3, "rounds": 1, "lockstat_duration": 0.2},
                   {"duration": 1.0, "rounds": 3}, 0,
                   runner="run_stack_lab", reporter="stack_report"),
    "seed001": Lab("tcp recvmsg(): consumed buffers freed after the socket lock", "Mbit/s",
                   {"duration": 0.4, "rounds": 1, "lockstat_duration": 0.2},
                   {"duration": 1.5, "rounds": 5}, 0),
    "seed002": Lab("route-cache refcount: rcuref vs inc-not-zero", "sends/s",
                   {"threads": 2, "duration": 0.3, "rounds": 1},
                   {"threads": 4, "duration": 1.0, "rounds": 3}, 0),
    "seed003": Lab("UDP multicast to 300 sockets on one port", "datagrams/s",
                   {"duration": 0.05, "rounds": 1}, {"duration": 0.5, "rounds": 3}, 0),
    "seed004": Lab("short-lived connections: accept() without a global lock",
                   "connections/s",
                   {"duration": 0.4, "rounds": 1, "lockstat_duration": 0.2},
                   {"duration": 1.5, "rounds": 5}, 0),
}
SCALING_THREADS = (1, 2, 4)


def _supported(fn: Callable[..., Any], params: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``fn`` accepts (the labs' budgets differ in kind)."""
    accepted = inspect.signature(fn).parameters
    return {k: v for k, v in params.items() if k in accepted}


def run_seed(seed: str, quick: bool) -> dict[str, Any]:
    """One seed's lab: ``{"result": ...}``, or ``{"missing": reason}``."""
    lab = LABS[seed]
    try:
        module = importlib.import_module(f"rcunet.lab.{seed}")
    except ModuleNotFoundError as exc:
        if exc.name != f"rcunet.lab.{seed}":
            raise
        return {"missing": f"rcunet.lab.{seed} is not in this tree"}
    runner = getattr(module, lab.runner)
    params = _supported(runner, lab.quick if quick else lab.default)
    began = time.perf_counter()
    result = runner(**params)
    return {"result": result, "params": params, "seconds": time.perf_counter() - began,
            "report": getattr(module, lab.reporter)(result)}


def verdict(ours: float, published: float | None) -> str:
    """Does our change go the published way?  (Changes in %; with no published figure,
    every seed's fix is expected to raise the rate.)"""
    if abs(ours) < FLAT_PERCENT:
        return "flat here"
    expected_up = published is None or published > 0
    if (ours > 0) == expected_up:
        return "same direction"
    return "opposite direction"


def headline(seed: str, result: dict[str, Any]) -> tuple[float, float]:
    return float(result["legacy"]), float(result["modern"])


def plot_metrics(seed: str, result: dict[str, Any]) -> list[Metric]:
    unit = LABS[seed].unit
    if seed in ("seed000", "seed001", "seed004"):
        module = importlib.import_module(f"rcunet.lab.{seed}")
        return list(module.plot_metrics(result))
    if seed == "seed002":
        retries = result["cas_retries"]
        return [Metric("sends/s", result["legacy"], result["modern"], unit),
                Metric("CAS retries", retries["legacy"], retries["modern"], "count")]
    if seed == "seed003":
        fan, hold = result["fanout"], result["hold_ns_per_packet"]
        return [Metric("300 groups", result["legacy"], result["modern"], unit),
                Metric("fan-out to 300", fan["legacy"], fan["modern"], "deliveries/s"),
                Metric("bucket-lock hold", hold["legacy"], hold["modern"], "ns/datagram")]
    legacy, modern = headline(seed, result)
    return [Metric(unit, legacy, modern, unit)]


def run_all(*, quick: bool, plot_dir: str | None = None,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every seed's lab, their plots, and seed 004's scaling (default mode only)."""
    say = progress or (lambda message: None)
    began = time.perf_counter()
    outcome: dict[str, Any] = {"interpreter": interpreter(), "quick": quick,
                               "cpus": os.cpu_count(), "seeds": {}, "plots": {}}
    if plot_dir:
        os.makedirs(plot_dir, exist_ok=True)
    for seed in SEEDS:
        say(f"{seed}: running")
        entry = run_seed(seed, quick)
        outcome["seeds"][seed] = entry
        if "result" in entry:
            say(f"{seed}: {entry['seconds']:.1f} s")
            if plot_dir:
                path = os.path.join(plot_dir, f"{seed}.png")
                before_after_bars(path, f"{seed}: {LABS[seed].title}",
                                  plot_metrics(seed, entry["result"]))
                outcome["plots"][seed] = path
        else:
            say(f"{seed}: skipped ({entry['missing']})")
    if not quick:
        say("seed004: connections/s against -T")
        from rcunet.lab import seed004

        series = seed004.scaling(SCALING_THREADS, duration=1.0, rounds=2)
        outcome["seed004_scaling"] = series
        if plot_dir:
            path = os.path.join(plot_dir, "seed004-scaling.png")
            scaling(path, seed004.SCALE_TITLES["workers"], series, ylabel="connections/s")
            outcome["plots"]["seed004-scaling"] = path
    if plot_dir:
        path = os.path.join(plot_dir, "all-changes.png")
        speedups(path, "modern vs legacy: this lab and the seed authors", _change_rows(outcome))
        outcome["plots"]["all"] = path
    outcome["seconds"] = time.perf_counter() - began
    return outcome


def _change_rows(outcome: dict[str, Any]) -> list[tuple[str, float | None, float | None]]:
    rows = []
    for seed, entry in outcome["seeds"].items():
        ours = None
        if "result" in entry:
            legacy, modern = headline(seed, entry["result"])
            ours = percent_change(legacy, modern)
        rows.append((seed, ours, PUBLISHED[seed][LABS[seed].published].change()))
    return rows


def markdown(outcome: dict[str, Any], output: str | None = None) -> str:
    """The report: a summary table, then each seed's cover letter and plot."""
    base = os.path.dirname(os.path.abspath(output)) if output else os.getcwd()

    def image(key: str, alt: str) -> list[str]:
        path = outcome["plots"].get(key)
        if not path:
            return []
        return [f"![{alt}]({os.path.relpath(os.path.abspath(path), base)})", ""]

    mode = "--quick" if outcome["quick"] else "default"
    lines = [
        "# rcunet seed lab", "",
        f"`rcunet lab all` ({mode}), {outcome['interpreter']}, {outcome['cpus']} CPUs, "
        f"{outcome['seconds']:.0f} s in all. Legacy is each seed's \"before\" "
        "(seed002/003: `Tuning.legacy()`; seed000, seed001 and seed004: only that seed's "
        "switches off), modern its \"after\"; rates are the best of alternating rounds.",
        "",
        "| seed | what | legacy | modern | change | published (authors) | direction |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for seed, entry in outcome["seeds"].items():
        lab = LABS[seed]
        figure = PUBLISHED[seed][lab.published]
        published = f"{figure.change_text()} ({figure.what})"
        if "result" not in entry:
            lines.append(f"| {seed} | {lab.title} | – | – | – | {published} | "
                         f"not run: {entry['missing']} |")
            continue
        legacy, modern = headline(seed, entry["result"])
        ours = percent_change(legacy, modern)
        lines.append(
            f"| {seed} | {lab.title} | {legacy:,.1f} {lab.unit} | {modern:,.1f} {lab.unit} "
            f"| {format_change(legacy, modern)} ({ratio(modern, legacy):.2f}x) | {published} "
            f"| {verdict(ours, figure.change())} |")
    lines.append("")
    lines += image("all", "change per seed, this lab beside the published figure")
    for seed, entry in outcome["seeds"].items():
        lines += [f"## {seed}: {LABS[seed].title}", ""]
        if "result" not in entry:
            lines += [f"Not run: {entry['missing']}.", ""]
            lines += [*published_section(seed), ""]
            continue
        lines += image(seed, f"{seed} legacy vs modern")
        lines += ["```text", entry["report"]]
        if seed in ("seed002", "seed003"):  # their reports do not carry the figures
            lines += ["", *published_section(seed)]
        lines += ["```", ""]
        if seed == "seed004" and "seed004_scaling" in outcome:
            from rcunet.lab.common import scaling_rows

            lines += image("seed004-scaling", "seed004 connections/s against -T")
            lines += ["```text", *scaling_rows(outcome["seed004_scaling"], "conn/s"), "```",
                      ""]
    return "\n".join(lines)


def to_json(outcome: dict[str, Any]) -> dict[str, Any]:
    slim = dict(outcome)
    seeds = {}
    for seed, entry in outcome["seeds"].items():
        entry = dict(entry)
        result = entry.get("result")
        if isinstance(result, dict) and "lockstat" in result:
            entry["result"] = result_json(result)
        seeds[seed] = entry
    slim["seeds"] = seeds
    return slim


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="short runs, one round each (about a minute on 2 cores)")
    parser.add_argument("--output", metavar="FILE.md", help="write the markdown report here")
    parser.add_argument("--plot-dir", metavar="DIR", help="save the plots (PNG) here")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    def progress(message: str) -> None:
        print(f"lab all: {message}", file=sys.stderr, flush=True)

    if args.output:  # before the minutes of runs, not after them
        try:
            open(args.output, "a", encoding="utf-8").close()
        except OSError as exc:
            print(f"rcunet lab all: cannot write the report to {args.output}: "
                  f"{exc.strerror}", file=sys.stderr)
            return 2

    outcome = run_all(quick=args.quick, plot_dir=args.plot_dir, progress=progress)
    if args.json:
        print(json.dumps(to_json(outcome), default=str))
        return 0
    text = markdown(outcome, args.output)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text + "\n")
        progress(f"report written to {args.output}")
    else:
        print(text)
    return 0
