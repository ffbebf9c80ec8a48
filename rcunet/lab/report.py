"""Lab results the way netdev cover letters show them (bench-conventions §8).

A cover letter has a ``Tested:`` block with the exact commands, a ``Before series:`` and an
``After this series:`` block — each a trimmed list of neper ``key=value`` lines with short
``#`` notes (a percentage after ``throughput=``) — and, here, the lock_stat rows that
changed and the seed authors' own figures for comparison.  ``compare_table`` prints the
same keys side by side with a ``%+.1f%%`` column (the kernel test robot's
``base  %change  new  metric`` habit).

The neper lines themselves come from ``rcunet.bench.neper`` (``summarize`` and
``result_lines``), so a lab's block is computed exactly as ``rcunet bench tcp_crr`` computes
its own: throughput is the slope of the merged snapshot series, not count / length.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rcunet.bench import neper
from rcunet.host.counters import format_nstat
from rcunet.sync.lockstat import ClassStats, format_lock_stat, format_perf_lock_contention

#: The keys a cover letter keeps from a neper block, in neper's order (§8 item 2).
TRIMMED_KEYS = (
    "utime_start", "utime_end", "stime_start", "stime_end", "num_transactions",
    "latency_min", "latency_max", "latency_mean", "latency_stddev", "num_samples",
    "throughput", "throughput_units",
)
#: Keys whose change is worth a "# +x.x%" note in the After block.
NOTED_KEYS = ("throughput", "num_transactions", "latency_mean")


# ------------------------------------------------------------------------------ arithmetic
def percent_change(before: float, after: float) -> float:
    """``(after - before) / before`` in percent: 47,426 -> 139,866.8 is +194.9%."""
    if before == 0:
        return float("inf") if after > 0 else 0.0
    return (after - before) / before * 100.0


def format_change(before: float, after: float) -> str:
    change = percent_change(before, after)
    if change == float("inf"):
        return "new"
    return f"{change:+.1f}%"


# ------------------------------------------------------------------------------ neper blocks
def neper_lines(workload: str, flows: Sequence[neper.FlowStats], usage_start: neper.Usage,
                usage_end: neper.Usage, percentiles: Sequence[float] = ()) -> list[str]:
    """The neper result block (``invalid_secret_count`` ... ``remote_throughput``) of
    the measuring side of a lab run."""
    rr = workload in neper.RR_WORKLOADS
    summary = neper.summarize(flows, rr=rr, want_csv=False, percentiles=percentiles)
    opts = argparse.Namespace(neper_workload=workload, percentiles=tuple(percentiles))
    side = neper.SideResult(flows=list(flows), usage_start=usage_start, usage_end=usage_end,
                            measures=True)
    return neper.result_lines(opts, side, summary)


def parse_block(lines: Iterable[str]) -> dict[str, str]:
    """``key=value`` lines to a dict (order kept); other lines are ignored."""
    values: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key and " " not in key:
            values[key] = value.split("#", 1)[0].strip()
    return values


def trim(lines: Iterable[str], keys: Sequence[str] = TRIMMED_KEYS) -> list[str]:
    """Keep the cover-letter keys, in the block's own order."""
    wanted = set(keys)
    return [line for line in lines if line.partition("=")[0] in wanted]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def annotate_after(before: Sequence[str], after: Sequence[str],
                   noted: Sequence[str] = NOTED_KEYS) -> list[str]:
    """The After block with ``  # +x.x%`` after each noted key that both blocks have."""
    old = parse_block(before)
    out = []
    for line in after:
        key, _, value = line.partition("=")
        a, b = _number(old.get(key, "")), _number(value)
        if key in noted and a is not None and b is not None:
            out.append(f"{line}  # {format_change(a, b)}")
        else:
            out.append(line)
    return out


def before_after(before: Sequence[str], after: Sequence[str], *,
                 before_title: str = "Before (legacy):",
                 after_title: str = "After (modern):") -> list[str]:
    """Two trimmed blocks, the second annotated, as in a cover letter."""
    b, a = trim(before), trim(after)
    return [before_title, "", *b, "", after_title, "", *annotate_after(b, a)]


def _with_cpu_used(values: dict[str, str]) -> dict[str, str]:
    """Add ``utime``/``stime``: CPU seconds used during the run (end - start); the raw
    rusage values are process totals, meaningless to compare across runs."""
    out = dict(values)
    for name in ("utime", "stime"):
        start, end = _number(values.get(f"{name}_start", "")), _number(
            values.get(f"{name}_end", ""))
        if start is not None and end is not None:
            out[name] = f"{end - start:.6f}"
    return out


#: The keys ``compare_table`` compares (CPU used, then the workload's results).
COMPARED_KEYS = ("utime", "stime", "num_transactions", "latency_min", "latency_max",
                 "latency_mean", "latency_stddev", "throughput")


def compare_table(before: Sequence[str], after: Sequence[str],
                  keys: Sequence[str] = COMPARED_KEYS) -> list[str]:
    """``key  legacy  modern  %change`` for the numeric keys both blocks carry."""
    old, new = _with_cpu_used(parse_block(before)), _with_cpu_used(parse_block(after))
    rows = [f"{'':24}{'legacy':>16}{'modern':>16}{'%change':>10}"]
    for key in keys:
        a, b = _number(old.get(key, "")), _number(new.get(key, ""))
        if a is None or b is None:
            continue
        rows.append(f"{key:24}{old[key]:>16}{new[key]:>16}{format_change(a, b):>10}")
    return rows


# ------------------------------------------------------------------------------ lock_stat
def _changed(old: ClassStats | None, new: ClassStats | None, tolerance: float) -> bool:
    if old is None or new is None:
        return True
    if old.contentions != new.contentions:
        return True
    for a, b in ((old.hold_avg, new.hold_avg), (old.wait_total, new.wait_total)):
        if max(a, b) and abs(a - b) > tolerance * max(a, b):
            return True
    return False


def changed_classes(before: Mapping[str, ClassStats], after: Mapping[str, ClassStats],
                    tolerance: float = 0.5, limit: int = 6) -> list[str]:
    """Lock classes present in only one snapshot, whose contention count differs, or whose
    average hold or total wait moved by more than ``tolerance`` (a fraction); at most
    ``limit`` of them, the most contended and longest held first."""
    def weight(name: str) -> tuple[int, int]:
        stats = [s for s in (before.get(name), after.get(name)) if s is not None]
        return (-max(s.contentions for s in stats), -max(s.hold_total for s in stats))

    names = [n for n in set(before) | set(after)
             if _changed(before.get(n), after.get(n), tolerance)]
    return sorted(names, key=lambda n: (weight(n), n))[:limit]


def lock_stat_rows(snap: Mapping[str, ClassStats], names: Iterable[str]) -> list[str]:
    """The class rows of ``format_lock_stat`` for ``names`` (the lines with ``:``)."""
    chosen = {n: snap[n] for n in names if n in snap}
    if not chosen:
        return []
    text = format_lock_stat(chosen)
    # A class row is "%40s:" + numbers (rwlocks "%38s-W:"): the colon is at column 40.
    return [line for line in text.splitlines() if len(line) > 40 and line[40] == ":"]


def lock_stat_section(before: Mapping[str, ClassStats], after: Mapping[str, ClassStats],
                      always: Sequence[str] = ()) -> list[str]:
    """``grep : /proc/lock_stat`` for the classes that changed, before and after, after
    the ``always`` classes (a lab's own subject) that either run took."""
    shown = [n for n in always if n in before or n in after]
    names = shown + [n for n in changed_classes(before, after) if n not in shown]
    if not names:
        return ["lock_stat: no class changed"]
    header = format_lock_stat({}).splitlines()[2]
    out = ["Before (legacy), lock_stat classes that changed:", header]
    out += lock_stat_rows(before, names) or ["  (none taken)"]
    out += ["", "After (modern), the same classes:", header]
    out += lock_stat_rows(after, names) or ["  (none taken)"]
    return out


# ------------------------------------------------------------------------------ lab results
# A lab result (seed001, seed004) carries ``lockstat`` {mode: snapshot} (empty when the
# statistics run was skipped) and ``runs`` {mode: run with its "nstat" counters}.
def lock_stat_lines(result: dict[str, Any], always: Sequence[str] = ()) -> list[str]:
    locks = result["lockstat"]
    if not locks:
        return ["lock_stat: not collected (--lockstat-duration 0)"]
    return lock_stat_section(locks["legacy"], locks["modern"], always)


def extra_reports(result: dict[str, Any], *, show_lockstat: bool, show_nstat: bool,
                  nstat_host: str = "b") -> str:
    """The --lockstat and --nstat layouts, legacy then modern (``nstat_host``: whose
    counters the runs carry)."""
    out = []
    for mode in ("legacy", "modern"):
        if show_lockstat and mode in result["lockstat"]:
            snap = result["lockstat"][mode]
            out += [f"== {mode}: /proc/lock_stat", format_lock_stat(snap),
                    f"== {mode}: perf lock contention",
                    format_perf_lock_contention(snap)]
        if show_nstat:
            out += [f"== {mode}: nstat (host {nstat_host})",
                    format_nstat(result["runs"][mode]["nstat"])]
    return "\n".join(out)


def to_json(result: dict[str, Any]) -> dict[str, Any]:
    """The result without the lock snapshots' dataclasses (their summary instead)."""
    slim = dict(result)
    slim["lockstat"] = {mode: {name: {"acquisitions": s.acquisitions,
                                      "contentions": s.contentions,
                                      "wait_total_ns": s.wait_total,
                                      "hold_total_ns": s.hold_total}
                               for name, s in snap.items()}
                        for mode, snap in result["lockstat"].items()}
    return slim


# ------------------------------------------------------------------------------ published
@dataclass(frozen=True)
class Published:
    """One before/after figure the seed's authors reported."""

    what: str
    before: float
    after: float | None  # None: the authors published no "after" figure
    unit: str
    source: str  # where it was said (message id, commit, review)

    def change(self) -> float | None:
        return None if self.after is None else percent_change(self.before, self.after)

    def change_text(self) -> str:
        return "no after figure" if self.after is None else format_change(self.before,
                                                                           self.after)

    def line(self) -> str:
        if self.after is None:
            return f"{self.what}: {self.before:,.2f} {self.unit} before; {self.change_text()} " \
                   f"[{self.source}]"
        return (f"{self.what}: {self.before:,.2f} -> {self.after:,.2f} {self.unit} "
                f"({self.change_text()}) [{self.source}]")


#: The seed authors' own numbers (seeds/ and reference/kernel-design.md, with citations).
PUBLISHED: dict[str, tuple[Published, ...]] = {
    "seed000": (
        Published("tcp_crr -6 -T200 -F20000, first patch (RCU pre-check)", 62524.04,
                  84387.19, "transactions/s",
                  "seed 000, ML 20250301194624.1879919-1-edumazet@google.com"),
        Published("tcp_crr -T 200 -F 30000, whole series A", 47426.00, 139866.80,
                  "transactions/s", "kernel-design §3.6, cover ML 20250302124237.3913746-1"),
    ),
    "seed001": (
        Published("one TCP_STREAM flow, MTU 1500, 100 Gbit NIC", 55, 66, "Gbit/s",
                  "seed 001 cover letter; kernel-design §5.2, commit f35f821935d8"),
        Published("one TCP_STREAM flow, MTU 4096+", 82, 95, "Gbit/s",
                  "seed 001 cover letter; kernel-design §5.2"),
        Published("per-CPU deferral to the allocating CPU (2022)", 49685, 73076, "Mbit/s",
                  "kernel-design §5.3, commit 68822bdf76f1"),
    ),
    "seed002": (
        Published("localhost memtier/memcached, low end of the range", 1.00, 1.25, "x",
                  "seed 002, patch 3/3 '+25% to +130%'"),
        Published("localhost memtier/memcached, high end of the range", 1.00, 2.30, "x",
                  "seed 002, patch 3/3 '+25% to +130%'"),
    ),
    "seed003": (
        Published("300 sockets and groups on one port: cycles in _raw_spin_lock, 99% of "
                  "them under __udp4_lib_mcast_deliver", 52.56, None, "% of cycles",
                  "seed 003, Shawn Bohrer's perf profile; kernel-design §6.5"),
    ),
    "seed004": (
        Published("accept() without INP_INFO (rS261242)", 52000, 55000, "TCP queries/s",
                  "seed 004, freebsd-net 7 Nov 2013 (Julien Charbon)"),
        Published("INP_INFO decomposed (D2599): connection setup+teardown", 60000, 150000,
                  "connections/s", "kernel-design §7.2, reviews.freebsd.org/D2599"),
    ),
}


def published_section(seed: str) -> list[str]:
    figures = PUBLISHED.get(seed, ())
    if not figures:
        return []
    return ["The authors' figures, for comparison:", *("  " + f.line() for f in figures)]


# ------------------------------------------------------------------------------ the letter
def cover_letter(title: str, *, interpreter: str, commands: Sequence[str],
                 summary: Sequence[str], before: Sequence[str] = (),
                 after: Sequence[str] = (), lock_stat: Sequence[str] = (),
                 seed: str = "", notes: Sequence[str] = ()) -> str:
    """One lab's report: title, summary table, Tested:, the neper blocks, lock_stat, the
    published figures and the lab's own notes (checks that passed)."""
    out = [title, "", *summary, "", "Tested:", ""]
    out += [f"  {c}" for c in commands]
    out.append(f"  ({interpreter})")
    if before and after:
        out += ["", *before_after(before, after), "", *compare_table(before, after)]
    if lock_stat:
        out += ["", *lock_stat]
    published = published_section(seed)
    if published:
        out += ["", *published]
    if notes:
        out += ["", *notes]
    return "\n".join(out)
