"""Lock statistics (``/proc/lock_stat`` for rcunet locks) and the two report layouts.

``enable()`` switches every ``rcunet.sync.lock.Lock`` to the instrumented path; each class
then records acquisitions, contentions (acquisitions that had to wait), wait and hold time
(total/max/min, ns from ``time.perf_counter_ns``), "bounces" (a change of acquiring thread,
the nearest Python analogue of a cache-line bounce), the call sites that had to wait
(contention points) and the sites where the holder took the lock (contending points).

``snapshot()`` freezes the counters; ``format_lock_stat`` prints them exactly as
``/proc/lock_stat`` (lockdep_proc.c, version 0.4) and ``format_perf_lock_contention`` as
``perf lock contention`` (builtin-lock.c) — see docs/reference bench-conventions §7.
"""

# The report code keeps the kernel's printf format strings verbatim, so it is easy to check
# against lockdep_proc.c and builtin-lock.c.
# ruff: noqa: UP031

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from rcunet.sync import lock as _lock_mod
from rcunet.sync.lock import LockClass, format_site, site_address

#: lock_stat keeps this many contention/contending points per class (LOCKSTAT_POINTS).
LOCKSTAT_POINTS = 4


@dataclass(frozen=True, slots=True)
class CallSite:
    """A call site's share of one class's contention."""

    site: str  # "Class.method:line", one token
    address: int  # pseudo instruction pointer, stable within the process
    count: int
    wait_total: int = 0
    wait_max: int = 0
    wait_min: int = 0


@dataclass(frozen=True, slots=True)
class ClassStats:
    """One lock class's counters (all times in ns)."""

    name: str  # class name as given
    display_name: str  # with lockdep's "#N" when the name was used before
    kind: str
    con_bounces: int
    contentions: int
    wait_min: int
    wait_max: int
    wait_total: int
    acq_bounces: int
    acquisitions: int
    hold_min: int
    hold_max: int
    hold_total: int
    contention_points: tuple[CallSite, ...]  # waiter sites, most contended first
    contending_points: tuple[CallSite, ...]  # holder sites seen by waiters, most first

    @property
    def wait_avg(self) -> int:
        return self.wait_total // self.contentions if self.contentions else 0

    @property
    def hold_avg(self) -> int:
        return self.hold_total // self.acquisitions if self.acquisitions else 0


#: class display name -> counters, for classes that were used since the last reset.
Snapshot = dict[str, ClassStats]


def enable() -> None:
    """Start recording (every live lock and every new one)."""
    _lock_mod._set_mode(stats=True)


def disable() -> None:
    _lock_mod._set_mode(stats=False)


def enabled() -> bool:
    return _lock_mod.stats_enabled()


def reset(classes: Iterable[LockClass] | None = None) -> None:
    """Zero the counters (``echo 0 > /proc/lock_stat``)."""
    for cls in _lock_mod.all_classes() if classes is None else classes:
        cls._reset_stats()


@contextmanager
def collecting() -> Iterator[None]:
    """Reset, record for the duration of the block, restore the previous state."""
    was_on = enabled()
    reset()
    enable()
    try:
        yield
    finally:
        if not was_on:
            disable()


def snapshot(classes: Iterable[LockClass] | None = None) -> Snapshot:
    """The counters of every class used since the last reset (or of ``classes``)."""
    result: Snapshot = {}
    for cls in _lock_mod.all_classes() if classes is None else classes:
        stats = class_stats(cls)
        if stats.acquisitions or stats.contentions:
            result[stats.display_name] = stats
    return result


def class_stats(cls: LockClass) -> ClassStats:
    records, wait, points, contending = cls._stats()
    hold_min = min((r.hold_min for r in records if r.acquisitions), default=0)
    waiter_sites = sorted(
        (
            CallSite(
                format_site(s), site_address(s), w.contentions, w.wait_total, w.wait_max, w.wait_min
            )
            for s, w in points.items()
        ),
        key=lambda c: (-c.count, c.site),
    )
    holder_sites = sorted(
        (CallSite(format_site(s), site_address(s), n) for s, n in contending.items()),
        key=lambda c: (-c.count, c.site),
    )
    return ClassStats(
        name=cls.name,
        display_name=cls.display_name,
        kind=cls.kind,
        con_bounces=wait.con_bounces,
        contentions=wait.contentions,
        wait_min=wait.wait_min,
        wait_max=wait.wait_max,
        wait_total=wait.wait_total,
        acq_bounces=sum(r.acq_bounces for r in records),
        acquisitions=sum(r.acquisitions for r in records),
        hold_min=hold_min,
        hold_max=max((r.hold_max for r in records), default=0),
        hold_total=sum(r.hold_total for r in records),
        contention_points=tuple(waiter_sites),
        contending_points=tuple(holder_sites),
    )


# -- /proc/lock_stat ------------------------------------------------------------------------

_LOCK_STAT_WIDTH = 40 + 1 + 12 * (14 + 1)  # 221
_LOCK_STAT_COLUMNS = (
    "con-bounces",
    "contentions",
    "waittime-min",
    "waittime-max",
    "waittime-total",
    "waittime-avg",
    "acq-bounces",
    "acquisitions",
    "holdtime-min",
    "holdtime-max",
    "holdtime-total",
    "holdtime-avg",
)


def lock_stat_time(ns: int) -> str:
    """lockdep_proc.c snprint_time: µs with two decimals, rounded at the ns digit."""
    ns += 5
    return "%d.%02d" % (ns // 1000, (ns % 1000) // 10)


def _lock_stat_name(stats: ClassStats) -> str:
    # lockdep_proc.c: the name buffer holds 37 characters, 35 when "#N" follows.
    suffix = stats.display_name[len(stats.name) :]
    return stats.name[: 35 if suffix else 37] + suffix


def format_lock_stat(snap: Mapping[str, ClassStats]) -> str:
    """``/proc/lock_stat`` text: header, then classes by contentions (most first)."""
    out = ["lock_stat version 0.4\n", "-" * _LOCK_STAT_WIDTH + "\n"]
    out.append("%40s" % "class name" + "".join(" %14s" % c for c in _LOCK_STAT_COLUMNS) + "\n")
    out.append("-" * _LOCK_STAT_WIDTH + "\n")
    out.append("\n")
    rows = sorted(
        (s for s in snap.values() if s.acquisitions),
        key=lambda s: (-s.contentions, -s.acquisitions, s.display_name),
    )
    for stats in rows:
        out.append(_lock_stat_class(stats))
    return "".join(out)


def _lock_stat_class(s: ClassStats) -> str:
    name = _lock_stat_name(s)
    out = ["%40s:" % name]
    out.append("%14d " % s.con_bounces)
    out.append("%14d" % s.contentions)
    waits = (s.wait_min, s.wait_max, s.wait_total, s.wait_avg)
    out.extend(" %14s" % lock_stat_time(t) for t in waits)
    out.append(" %14d " % s.acq_bounces)
    out.append("%14d" % s.acquisitions)
    holds = (s.hold_min, s.hold_max, s.hold_total, s.hold_avg)
    out.extend(" %14s" % lock_stat_time(t) for t in holds)
    out.append("\n")
    if s.contentions == 0:
        return "".join(out)
    rule = " " * (40 - len(name)) + "-" * len(name) + "\n"
    printed = 0
    for points in (s.contention_points, s.contending_points):
        printed = 0
        for point in points[:LOCKSTAT_POINTS]:
            if printed == 0:
                out.append(rule)
            ip = "[<%016x>]" % point.address
            out.append("%40s %14d %29s %s\n" % (name, point.count, ip, point.site))
            printed += 1
    if printed:  # as lockdep_proc.c: the closing rule follows the contending points
        out.append("\n")
        out.append("." * _LOCK_STAT_WIDTH + "\n")
        out.append("\n")
    return "".join(out)


# -- perf lock contention ---------------------------------------------------------------------

_PERF_FIELDS = (("contended", 10), ("total wait", 12), ("max wait", 12), ("avg wait", 12))
_PERF_UNITS = ((1e9 * 3600, "h "), (1e9 * 60, "m "), (1e9, "s "), (1e6, "ms"), (1e3, "us"))


def perf_time(ns: int, width: int = 12) -> str:
    """builtin-lock.c lock_stat_key_print_time: auto-scaled, ``%9.2f`` + 2-char unit."""
    for base, unit in _PERF_UNITS:
        if ns >= base:
            return "%*.2f %s" % (width - 3, ns / base, unit)
    return "%*d %s" % (width - 3, ns, "ns")


@dataclass(frozen=True, slots=True)
class _PerfRow:
    contended: int
    wait_total: int
    wait_max: int
    kind: str
    name: str
    address: int

    @property
    def wait_avg(self) -> int:
        return self.wait_total // self.contended if self.contended else 0


def _rows_by_caller(snap: Mapping[str, ClassStats]) -> list[_PerfRow]:
    merged: dict[tuple[str, str], list[int]] = {}
    for s in snap.values():
        for p in s.contention_points:
            acc = merged.setdefault((p.site, s.kind), [0, 0, 0, p.address])
            acc[0] += p.count
            acc[1] += p.wait_total
            acc[2] = max(acc[2], p.wait_max)
    return [_PerfRow(c, t, m, kind, site, addr) for (site, kind), (c, t, m, addr) in merged.items()]


def _rows_by_class(snap: Mapping[str, ClassStats]) -> list[_PerfRow]:
    return [
        _PerfRow(s.contentions, s.wait_total, s.wait_max, s.kind, s.display_name, _class_address(s))
        for s in snap.values()
        if s.contentions
    ]


def _class_address(s: ClassStats) -> int:
    return (0xFFFF_8880_0000_0000 | (hash(s.display_name) & 0xFFFF_FFFF)) & 0xFFFF_FFFF_FFFF_FFFF


_SORT_KEYS = {
    "wait_total": lambda r: r.wait_total,
    "contended": lambda r: r.contended,
    "wait_max": lambda r: r.wait_max,
    "avg_wait": lambda r: r.wait_avg,
}


def format_perf_lock_contention(
    snap: Mapping[str, ClassStats],
    *,
    by: str = "caller",
    sort: str = "wait_total",
    sep: str | None = None,
    limit: int | None = None,
) -> str:
    """``perf lock contention`` text.

    ``by="caller"`` is perf's default (one row per contending call site, ``type caller``
    columns); ``by="class"`` is ``-l`` (one row per lock, ``address symbol``).  ``sep``
    gives perf's ``-x SEP`` CSV (raw ns).  ``sort`` is ``-k`` (wait_total by default).
    """
    if by not in ("caller", "class"):
        raise ValueError(f"by must be 'caller' or 'class', not {by!r}")
    if sort not in _SORT_KEYS:
        raise ValueError(f"sort must be one of {sorted(_SORT_KEYS)}, not {sort!r}")
    if sep is not None and (not sep or any(ch in sep for ch in ":+.")):
        raise ValueError(f"invalid separator {sep!r}: ':', '+' and '.' are not allowed")
    rows = _rows_by_caller(snap) if by == "caller" else _rows_by_class(snap)
    rows.sort(key=lambda r: (-_SORT_KEYS[sort](r), r.name))
    if limit is not None:
        rows = rows[:limit]
    if sep is not None:
        return _perf_csv(rows, by, sep)
    out = ["".join("%*s " % (width, header) for header, width in _PERF_FIELDS)]
    if by == "caller":
        out.append("  %10s   %s\n\n" % ("type", "caller"))
    else:
        out.append("  %16s   %s\n\n" % ("address", "symbol"))
    for r in rows:
        out.append("%*d " % (10, r.contended))
        out.extend(perf_time(t) + " " for t in (r.wait_total, r.wait_max, r.wait_avg))
        if by == "caller":
            out.append("  %10s   %s\n" % (r.kind, r.name))
        else:
            out.append("  %016x   %s (%s)\n" % (r.address, r.name, r.kind))
    return "".join(out)


def _perf_csv(rows: list[_PerfRow], by: str, sep: str) -> str:
    out = ["# output: "]
    out.extend(f"{header}{sep} " for header, _ in _PERF_FIELDS)
    out.append(f"type{sep} caller\n" if by == "caller" else f"address{sep} symbol\n")
    for r in rows:
        out.extend(f"{v}{sep} " for v in (r.contended, r.wait_total, r.wait_max, r.wait_avg))
        if by == "caller":
            out.append(f"{r.kind}{sep} {r.name}\n")
        else:
            out.append(f"{r.address:016x}{sep} {r.name} ({r.kind})\n")
    return "".join(out)


# -- perf lock report ---------------------------------------------------------------------------

_REPORT_FIELDS = (
    ("acquired", 10),
    ("contended", 10),
    ("avg wait", 12),
    ("total wait", 12),
    ("max wait", 12),
    ("min wait", 12),
)
_REPORT_SORT = {
    "acquired": lambda s: s.acquisitions,
    "contended": lambda s: s.contentions,
    "avg_wait": lambda s: s.wait_avg,
    "wait_total": lambda s: s.wait_total,
    "wait_max": lambda s: s.wait_max,
    "wait_min": lambda s: s.wait_min,
}


def _report_name(name: str) -> str:
    # builtin-lock.c: names of 20 characters or more are cut to 16 plus "..."
    return name if len(name) < 20 else name[:16] + "..."


def format_perf_lock_report(
    snap: Mapping[str, ClassStats], *, sort: str = "acquired", limit: int | None = None
) -> str:
    """``perf lock report -c`` text: one row per lock class, sorted by acquisitions."""
    if sort not in _REPORT_SORT:
        raise ValueError(f"sort must be one of {sorted(_REPORT_SORT)}, not {sort!r}")
    rows = sorted(
        (s for s in snap.values() if s.acquisitions),
        key=lambda s: (-_REPORT_SORT[sort](s), s.display_name),
    )
    if limit is not None:
        rows = rows[:limit]
    out = ["%20s " % "Name"]
    out.extend("%*s " % (width, header) for header, width in _REPORT_FIELDS)
    out.append("\n\n")
    for s in rows:
        out.append("%20s " % _report_name(s.display_name))
        out.append("%10d " % s.acquisitions)
        out.append("%10d " % s.contentions)
        out.extend(perf_time(t) + " " for t in (s.wait_avg, s.wait_total, s.wait_max, s.wait_min))
        out.append("\n")
    return "".join(out)
