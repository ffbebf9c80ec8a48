"""neper's command line and output, for the five workloads in ``rcunet.bench.workloads``.

What lives here (reference bench-conventions.md §1):

* the flags, short and long, registered on an argparse parser per workload, and their
  validation (neper's ``check_options``), raising ``UsageError`` with one clear line;
* the option dump, in neper 1.1.0's order (flags are defined general -> specific and
  printed in reverse) and number formats (bool ``0/1``, ``%d``, ``%f``, percentiles with
  a trailing comma, unset strings empty);
* per-flow statistics recorded the way neper's ``stat_event`` does: the first event of a
  flow always makes a snapshot, later ones when the thread's elapsed time crosses
  ``interval * (snapshots + 1)``, and a forced one at the end;
* the summary: snapshots of every flow merged in time order into one cumulative series;
  ``throughput`` is its first-to-last slope and ``correlation_coefficient`` is
  ``sum(xy) / sqrt(sum(xx) * sum(yy))`` over it (neper's coef.c), not count / length;
* the ``--all-samples`` CSV (§1.5) and the stdout block (§1.4).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import resource
import socket
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from rcunet.bench import tap_target
from rcunet.bench.cpus import cpu_list, placement

VERSION = "1.1.0"
RR_WORKLOADS = ("tcp_rr", "tcp_crr", "udp_rr")
STREAM_WORKLOADS = ("tcp_stream", "udp_stream")
TCP_WORKLOADS = ("tcp_rr", "tcp_crr", "tcp_stream")
WORKLOADS = RR_WORKLOADS + STREAM_WORKLOADS
TARGETS = ("mem", "kernel", "procs", "tap", "pmd-pytcp", "pmd-pytcp-blocking")
UDP_MAX_PAYLOAD = {4: 65507, 6: 65527}  # 65535 - IP header (v4 only) - UDP header
MIN_SAMPLES_PER_RUN = 5  # neper: fewer than 5 snapshots in the test shrinks -I to 0.2 s
SHORT_INTERVAL = 0.2
DEFAULT_TEST_LENGTH = 5  # neper: 10 s; ours stays short (pass -l 10 for neper's)


class NeperError(Exception):
    """A run could not produce a result (peer vanished, host unreachable, too few
    samples): printed as one line on stderr, exit status 1."""


def _usage_error(message: str) -> Exception:
    from rcunet.cli import UsageError

    return UsageError(message)


# ------------------------------------------------------------------------------ flags
@dataclass(frozen=True)
class Flag:
    """One neper flag as the option dump prints it (``key``) and, when rcunet
    implements it, how it is spelled on the command line (``short``/``long``)."""

    key: str
    default: Any
    kind: str = "int"  # int | bool | str | double | percentiles | unit
    short: str | None = None
    implemented: bool = False
    help: str = ""


def _common() -> list[Flag]:
    return [
        Flag("magic", 42, implemented=True,
             help="Magic number used by control connections"),
        Flag("maxevents", 1000),
        Flag("num_flows", 1, short="-F", implemented=True, help="Total number of flows"),
        Flag("num_threads", 1, short="-T", implemented=True, help="Number of threads"),
        Flag("num_clients", 1),
        Flag("listen_backlog", 128, implemented=True, help="Backlog size for listen()"),
        Flag("suicide_length", 0, short="-s", implemented=True,
             help="Suicide length in seconds: exit(1) after this long, whatever happens"),
        Flag("source_port", -1),
        Flag("stime_use_proc", False, "bool"),
        Flag("ipv4", False, "bool", "-4", True, "Set desired address family to AF_INET"),
        Flag("ipv6", False, "bool", "-6", True, "Set desired address family to AF_INET6"),
        Flag("client", False, "bool", "-c", True, "Is client?"),
        Flag("debug", False, "bool"),
        Flag("dry_run", False, "bool", "-n", True, "Turn on dry-run mode"),
        Flag("pin_cpu", False, "bool", implemented=True,
             help="Pin threads to CPU cores: worker thread i runs on the i-th allowed "
                  "CPU (round robin), on each side"),
        Flag("logtostderr", False, "bool", implemented=True, help="Log to stderr"),
        Flag("nolog", False, "bool", implemented=True, help="No logging"),
        Flag("nonblocking", False, "bool"),
        Flag("freebind", False, "bool"),
        Flag("interval", 1.0, "double", "-I", True,
             "For how many seconds that a sample is generated"),
        Flag("max_pacing_rate", 0),
        Flag("local_hosts", None, "str"),
        Flag("host", None, "str", "-H", True, "Server hostname or IP address"),
        Flag("control_port", "12866", "str", "-C", True, "Server control port"),
        Flag("port", "12867", "str", "-P", True, "Server data port"),
        Flag("all_samples", None, "str", "-A", True,
             "Print all samples? If yes, this is the output file name (-Afile, "
             "--all-samples=file; bare flag: samples.csv)"),
        Flag("time_wait", False, "bool", implemented=True,
             help="Do not set SO_LINGER 0. Close gracefully. Active peer will enter "
             "TIME_WAIT state"),
        Flag("iostat_ms", 0),
        Flag("wait_start", 0),
    ]


def _tcp() -> list[Flag]:
    return [
        Flag("num_ports", 1, implemented=True, help="Number of server data ports"),
        Flag("tcp_fastopen", False, "bool"),
        Flag("tcp_tx_delay", 0),
        Flag("no_delay", False, "bool", implemented=True, help="Set TCP_NODELAY"),
        Flag("congestion_control", None, "str"),
    ]


def _rr() -> list[Flag]:
    return [
        Flag("request_size", 1, short="-Q", implemented=True,
             help="Number of bytes in a request from client to server"),
        Flag("response_size", 1, short="-R", implemented=True,
             help="Number of bytes in a response from server to client"),
        Flag("percentiles", (), "percentiles", "-p", True,
             "Set reported latency percentiles (list)"),
        Flag("test_length", DEFAULT_TEST_LENGTH, short="-l", implemented=True,
             help="Test length, >0 seconds, <0 transactions"),
        Flag("buffer_size", 65536, short="-B", implemented=True,
             help="Number of bytes that each read()/send() can transfer at once"),
        Flag("log_rtt", None, "str"),
        Flag("logrtt_entries_per_flow", 10000),
    ]


def _stream() -> list[Flag]:
    return [
        Flag("test_length", DEFAULT_TEST_LENGTH, short="-l", implemented=True,
             help="Test length in seconds"),
        Flag("edge_trigger", False, "bool"),
        Flag("reuseaddr", False, "bool"),
        Flag("zerocopy", False, "bool"),
        Flag("throughput_opt", "Mb", "unit"),
    ]


_SPECIFIC: dict[str, list[Flag]] = {
    "tcp_rr": [Flag("mark", 0), Flag("delay", 0, "duration", "-D", True,
                          "Delay between each send()/write() in ns (default), us, ms, or s"),
               Flag("async_connect", False, "bool"),
               Flag("reuseaddr", False, "bool"), Flag("noburst", 0)],
    "tcp_crr": [Flag("mark", 0), Flag("async_connect", True, "bool")],
    "udp_rr": [Flag("mark", 0), Flag("delay", 0, "duration", "-D", True,
                          "Delay between each send()/write() in ns (default), us, ms, or s")],
    "tcp_stream": [Flag("delay", 0, "duration", "-D", True,
                          "Delay between each send()/write() in ns (default), us, ms, or s"),
                   Flag("buffer_size", 16384, short="-B", implemented=True,
                        help="Number of bytes that each read/write uses as the buffer"),
                   Flag("skip_rx_copy", False, "bool"), Flag("rx_zerocopy", False, "bool"),
                   Flag("enable_read", False, "bool", "-r", True,
                        "Read from flows? enabled by default for the server"),
                   Flag("enable_write", False, "bool", "-w", True,
                        "Write to flows? Enabled by default for the client"),
                   Flag("split_bidir", False, "bool"),
                   Flag("enable_tcp_maerts", False, "bool", "-M", True,
                        "Enables TCP_MAERTS test (server writes and client reads)"),
                   Flag("async_connect", False, "bool")],
    "udp_stream": [Flag("mark", 0), Flag("delay", 0, "duration", "-D", True,
                          "Delay between each send()/write() in ns (default), us, ms, or s"),
                   Flag("buffer_size", 1400, short="-B", implemented=True,
                        help="Number of bytes that each read/write uses as the buffer")],
}


def flags_for(workload: str) -> list[Flag]:
    """Every flag of ``workload`` in neper's dump order (most specific group first;
    a flag defined again in a later group keeps only its later, specific definition)."""
    groups = [_common()]
    groups.append(_tcp() if workload in TCP_WORKLOADS else [])
    groups.append(_rr() if workload in RR_WORKLOADS else _stream())
    groups.append(_SPECIFIC[workload])
    defined: dict[str, Flag] = {}
    for group in groups:
        for flag in group:
            defined.pop(flag.key, None)  # re-definition: the specific one wins its place
            defined[flag.key] = flag
    return list(reversed(defined.values()))


def configure(parser: argparse.ArgumentParser, workload: str) -> None:
    """Register neper's implemented flags for ``workload`` plus rcunet's own
    ``--target`` and ``--server``."""
    for flag in flags_for(workload):
        if not flag.implemented:
            continue
        names = [flag.short] if flag.short else []
        names.append("--" + flag.key.replace("_", "-"))
        if flag.kind == "bool":
            parser.add_argument(*names, dest=flag.key, action="store_true", help=flag.help)
        elif flag.key == "all_samples":
            parser.add_argument(*names, dest=flag.key, nargs="?", const="samples.csv",
                                default=None, metavar="FILE", help=flag.help)
        elif flag.kind == "duration":
            parser.add_argument(*names, dest=flag.key, type=parse_duration, default=0,
                                metavar="N[ns|us|ms|s]", help=flag.help)
        elif flag.kind == "percentiles":
            parser.add_argument(*names, dest=flag.key, type=parse_percentiles, default=(),
                                metavar="LIST", help=flag.help)
        else:
            kind = {"int": int, "double": float, "str": str}[flag.kind]
            parser.add_argument(*names, dest=flag.key, type=kind, default=flag.default,
                                help=f"{flag.help} (default {flag.default})")
    parser.add_argument("-v", "--version", action="version", version=VERSION)
    parser.add_argument("--target", choices=TARGETS, default="mem",
                        help="mem: two rcunet Hosts on an in-memory link in this process "
                             "(default); kernel: the same code on Linux sockets; procs: "
                             "the server's Host in a child process (rcunet/bench/procs.py); "
                             "tap: -c on an rcunet Host on a TAP device (--tap, "
                             "--tap-address; root) against a server beyond it; pmd-pytcp "
                             "(-blocking): the peer stack pmd-pytcp as the server on a TAP "
                             "device (root), the kernel as the client")
    parser.add_argument("--tuning", choices=("modern", "legacy"), default="modern",
                        help="--target mem: the Hosts' Tuning preset (legacy: every seed's "
                             "lock-heavy 'before'; default modern)")
    parser.add_argument("--procs-cpus", default="spread", metavar="PLACEMENT",
                        help="--target procs: where the two processes run: spread (each "
                             "its own half of the allowed CPUs, the default), none (the "
                             "scheduler decides) or CLIENT:SERVER CPU lists (0:1)")
    parser.add_argument("--server", action="store_true",
                        help="run only the server side (waits for a client's -c -H run)")
    tap_target.configure(parser)
    _negative_numbers_are_values(parser)
    # keys the shared code reads, for workloads that do not take the flag
    parser.set_defaults(neper_workload=workload, percentiles=(), request_size=1,
                        response_size=1, num_ports=1, no_delay=False,
                        enable_tcp_maerts=False, enable_read=False, enable_write=False,
                        delay=0)


def _negative_numbers_are_values(parser: argparse.ArgumentParser) -> None:
    """neper takes ``-l -600`` and ``-4``/``-6``; argparse would read ``-600`` as ``-6``
    with the value ``00``.  Here a negative number is always a value and only the exact
    strings ``-4``/``-6`` are options (argparse's private hook, the one place to say so)."""
    parse_optional = parser._parse_optional

    def _parse_optional(arg_string: str) -> Any:
        if _NEGATIVE_NUMBER.fullmatch(arg_string) and arg_string not in ("-4", "-6"):
            return None
        return parse_optional(arg_string)

    parser._parse_optional = _parse_optional  # type: ignore[method-assign]


_NEGATIVE_NUMBER = re.compile(r"-\d+(\.\d*)?")


_DURATION_UNITS = {"": 1, "ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_duration(text: str) -> int:
    """``-D 500``, ``-D 20us``: nanoseconds (neper's parse_duration)."""
    match = re.fullmatch(r"(\d+)(ns|us|ms|s)?", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"bad duration {text!r} (N, Nns, Nus, Nms or Ns)")
    return int(match.group(1)) * _DURATION_UNITS[match.group(2) or ""]


def parse_percentiles(text: str) -> tuple[float, ...]:
    """``-p 50,90,99,999``: sorted, duplicates removed; 999/9999 mean 99.9/99.99."""
    values: set[float] = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            value = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad percentile {item!r}") from None
        value = {999.0: 99.9, 9999.0: 99.99}.get(value, value)
        if not 0.0 <= value <= 100.0 or math.isnan(value):
            raise argparse.ArgumentTypeError(f"percentile {item} is not in 0..100")
        values.add(value)
    return tuple(sorted(values))


def validate(opts: argparse.Namespace) -> None:
    """neper's check_options, plus the combinations rcunet cannot run."""
    workload = opts.neper_workload
    problems = []
    rr = workload in RR_WORKLOADS
    if opts.test_length == 0 or (opts.test_length < 0 and not rr):
        problems.append("Test length must be at least 1 second."
                        if not rr else "Test length must be non-zero "
                        "(>0 seconds, <0 transactions).")
    if opts.num_flows < 1:
        problems.append("There must be at least 1 flow.")
    if opts.num_threads < 1:
        problems.append("There must be at least 1 thread.")
    if opts.num_flows < opts.num_threads and not opts.server:
        problems.append("There should not be less flows than threads.")
    if opts.interval <= 0 or not math.isfinite(opts.interval):
        problems.append("Interval must be positive.")
    if opts.buffer_size < 1:
        problems.append("Buffer size must be positive.")
    if opts.listen_backlog < 1:
        problems.append("listen() backlog must be positive.")
    if rr and (opts.request_size < 1 or opts.response_size < 1):
        problems.append("Request and response sizes must be positive.")
    if opts.ipv4 and opts.ipv6:
        problems.append("-4 and -6 are mutually exclusive.")
    if getattr(opts, "num_ports", 1) < 1:
        problems.append("Number of server data ports must be at least 1.")
    for name in ("port", "control_port"):
        value = getattr(opts, name)
        if not value.isdigit() or int(value) > 65535:
            problems.append(f"--{name.replace('_', '-')} must be a port number, got {value!r}.")
    if workload.startswith("udp"):
        limit = UDP_MAX_PAYLOAD[6 if opts.ipv6 else 4]
        sizes = [opts.request_size, opts.response_size] if rr else [opts.buffer_size]
        if max(sizes) > limit:
            problems.append(f"A UDP datagram carries at most {limit} bytes.")
    if opts.client and opts.server:
        problems.append("-c and --server are mutually exclusive.")
    if opts.client and not opts.host:
        problems.append("-c needs the server's address: -H ADDR.")
    if opts.host and not (opts.client or opts.server):
        problems.append("-H is the server's address for -c, or the address --server "
                        "binds; an in-process run (neither) picks its own.")
    if (opts.client or opts.server) and opts.target not in ("kernel", "tap"):
        problems.append(f"--target {opts.target} runs both sides in this process; "
                        "-c/--server need --target kernel (or tap for -c).")
    if opts.tuning != "modern" and opts.target not in ("mem", "procs", "tap"):
        problems.append("--tuning picks rcunet's mechanisms: it needs --target mem, "
                        "procs or tap.")
    if opts.procs_cpus != "spread":
        if opts.target != "procs":
            problems.append("--procs-cpus places --target procs' two processes.")
        else:
            try:
                placement(opts.procs_cpus, allowed_cpus())
            except ValueError as exc:
                problems.append(f"{exc}.")
    problems.extend(tap_target.problems(opts))
    if opts.suicide_length < 0:
        problems.append("Suicide length must not be negative.")
    if opts.num_flows > 4096:
        problems.append("At most 4096 flows (one thread per flow on the server side).")
    if problems:
        raise _usage_error(" ".join(problems))


def adjust_stream_directions(opts: argparse.Namespace) -> None:
    """tcp_stream_main.c before the dump: ``-M`` makes the client read and the server
    write (overriding -r/-w); otherwise the client always writes and the server always
    reads, and -r on the client (-w on the server) adds the other direction.  An
    in-process run is dumped from the client's side.  Sets ``opts.stream_bidir``."""
    opts.stream_bidir = False
    if opts.neper_workload != "tcp_stream":
        return
    client_view = not opts.server
    if opts.enable_tcp_maerts:
        opts.enable_read, opts.enable_write = client_view, not client_view
        return
    opts.stream_bidir = opts.enable_write if opts.server else opts.enable_read
    if client_view:
        opts.enable_write = True
    else:
        opts.enable_read = True


def effective_interval(opts: argparse.Namespace) -> float:
    """neper shrinks -I to 0.2 s when the run would give fewer than 5 snapshots."""
    if opts.test_length > 0 and opts.test_length / opts.interval < MIN_SAMPLES_PER_RUN:
        return min(float(opts.interval), SHORT_INTERVAL)
    return float(opts.interval)


def family(opts: argparse.Namespace) -> int:
    return socket.AF_INET6 if opts.ipv6 else socket.AF_INET


def _format_value(flag: Flag, value: Any) -> str:
    if flag.kind == "bool":
        return "1" if value else "0"
    if flag.kind == "double":
        return f"{value:f}"
    if flag.kind == "percentiles":
        return "".join(f"{p:g}," for p in value)
    if value is None:
        return ""
    return str(value)


def option_dump(opts: argparse.Namespace) -> list[str]:
    """``VERSION=``, every flag in neper's order, then ``total_run_time=`` (or
    ``total_transactions=`` for a negative -l)."""
    lines = [f"VERSION={VERSION}"]
    for flag in flags_for(opts.neper_workload):
        value = getattr(opts, flag.key, flag.default) if flag.implemented else flag.default
        lines.append(f"{flag.key}={_format_value(flag, value)}")
    if opts.test_length < 0:
        lines.append(f"total_transactions={-opts.test_length}")
    else:
        lines.append(f"total_run_time={opts.test_length}")
    return lines


# ------------------------------------------------------------------------------ statistics
def monotonic_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def format_ns(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


@dataclass(frozen=True)
class Usage:
    """getrusage(RUSAGE_SELF), the fields neper prints."""

    utime: float
    stime: float
    maxrss: int
    minflt: int
    majflt: int
    nvcsw: int
    nivcsw: int

    @classmethod
    def now(cls) -> Usage:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return cls(ru.ru_utime, ru.ru_stime, ru.ru_maxrss, ru.ru_minflt, ru.ru_majflt,
                   ru.ru_nvcsw, ru.ru_nivcsw)

    def csv(self) -> str:
        return (f"{self.utime:f},{self.stime:f},{self.maxrss},{self.minflt},{self.majflt},"
                f"{self.nvcsw},{self.nivcsw}")


@dataclass(frozen=True)
class Snapshot:
    now: int  # CLOCK_MONOTONIC ns
    things: int  # cumulative transactions or bytes of this flow
    usage: Usage
    latencies: tuple[float, ...]  # RR: the samples since the flow's previous snapshot


class ThreadClock:
    """The start time of one worker thread: its first event (neper's
    thread_time_start), which snapshot thresholds are measured from.

    Concurrency: owned by one worker thread; read by the reporter after join()."""

    def __init__(self, interval: float) -> None:
        self.interval_ns = int(interval * 1e9)
        self.start: int | None = None


class FlowStats:
    """Events of one flow, recorded by the thread that drives it.

    Concurrency: written only by the owning worker thread; the reporter reads it after
    joining that thread (Thread.join orders the writes before the reads)."""

    def __init__(self, thread_index: int, flow_index: int, clock: ThreadClock,
                 keep_latency: bool) -> None:
        self.thread_index = thread_index
        self.flow_index = flow_index
        self.clock = clock
        self.things = 0
        self.snapshots: list[Snapshot] = []
        self.latencies: list[float] | None = [] if keep_latency else None
        self._snapped_latencies = 0
        self._next_snap_at = 0

    def event(self, now: int, things: int, latency: float | None = None) -> None:
        """``things`` more transactions (or bytes) happened at ``now``."""
        clock = self.clock
        if clock.start is None:
            clock.start = now
        self.things += things
        if latency is not None and self.latencies is not None:
            self.latencies.append(latency)
        if not self.snapshots or now >= self._next_snap_at:
            self._snap(now)

    def count(self, things: int) -> None:
        """Count without snapshots (a stream writer: progress, never a result)."""
        self.things += things

    def finish(self, now: int) -> None:
        """The forced last snapshot (neper's stat event with force=true)."""
        if self.snapshots and (self.snapshots[-1].things != self.things
                               or self._pending_latencies()):
            self._snap(now)

    def _pending_latencies(self) -> bool:
        return self.latencies is not None and len(self.latencies) > self._snapped_latencies

    def _snap(self, now: int) -> None:
        clock = self.clock
        assert clock.start is not None
        latencies: tuple[float, ...] = ()
        if self.latencies is not None:
            latencies = tuple(self.latencies[self._snapped_latencies:])
            self._snapped_latencies = len(self.latencies)
        self.snapshots.append(Snapshot(now, self.things, Usage.now(), latencies))
        # neper: the next snapshot when elapsed >= interval * (count + 1)
        self._next_snap_at = clock.start + clock.interval_ns * len(self.snapshots)


@dataclass
class Summary:
    """What one side measured, ready to print."""

    num_samples: int = 0
    time_start: int = 0
    time_end: int = 0
    correlation: float = float("nan")
    throughput: float = 0.0  # events (transactions or bytes) per second
    transactions: int = 0
    latencies: list[float] = field(default_factory=list)
    csv_rows: list[str] = field(default_factory=list)


def summarize(flows: Sequence[FlowStats], rr: bool, want_csv: bool,
              percentiles: Sequence[float] = ()) -> Summary:
    """Merge the flows' snapshots in time order into one cumulative series (neper's
    neper_stat_print) and compute throughput and correlation over it."""
    merged = sorted(((snap.now, flow_number, index)
                     for flow_number, flow in enumerate(flows)
                     for index, snap in enumerate(flow.snapshots)))
    summary = Summary(num_samples=len(merged))
    latest = [0] * len(flows)
    total = 0
    first_now = first_total = 0
    prev_now = prev_total = 0
    sum_xx = sum_xy = sum_yy = 0.0
    for position, (now, flow_number, index) in enumerate(merged):
        flow = flows[flow_number]
        snap = flow.snapshots[index]
        total += snap.things - latest[flow_number]
        latest[flow_number] = snap.things
        if position == 0:
            first_now, first_total = now, total
        else:
            seconds = (now - first_now) / 1e9
            events = total - first_total
            sum_xx += seconds * seconds
            sum_xy += seconds * events
            sum_yy += events * events
        if want_csv:
            rate = 0.0
            if position and now != prev_now:
                rate = (total - prev_total) / ((now - prev_now) / 1e9)
            row = f"{flow.thread_index},{flow.flow_index},{format_ns(now)},{total},{rate:.2f}," \
                  f"{snap.usage.csv()}"
            if rr:
                row += "," + _csv_latency(snap.latencies, percentiles)
            summary.csv_rows.append(row)
        prev_now, prev_total = now, total
    if merged:
        summary.time_start = min(f.clock.start for f in flows if f.clock.start is not None)
        summary.time_end = merged[-1][0]
        seconds = (summary.time_end - first_now) / 1e9
        if seconds > 0:
            summary.throughput = (total - first_total) / seconds
        if sum_xx > 0 and sum_yy > 0:
            summary.correlation = sum_xy / math.sqrt(sum_xx * sum_yy)
    summary.transactions = sum(f.things for f in flows)
    if rr:
        summary.latencies = sorted(x for f in flows for x in (f.latencies or ()))
    return summary


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = math.ceil(p / 100.0 * len(sorted_values))
    return sorted_values[min(max(rank, 1), len(sorted_values)) - 1]


def latency_stats(values: Sequence[float]) -> tuple[float, float, float, float]:
    """min, max, mean, population stddev (all 0 for no samples)."""
    if not values:
        return 0.0, 0.0, 0.0, 0.0
    mean = math.fsum(values) / len(values)
    var = math.fsum((v - mean) ** 2 for v in values) / len(values)
    return min(values), max(values), mean, math.sqrt(var)


def _csv_latency(values: Sequence[float], percentiles: Sequence[float]) -> str:
    low, high, mean, stddev = latency_stats(values)
    ordered = sorted(values)
    cells = [f"{low:f}", f"{mean:f}", f"{high:f}", f"{stddev:f}"]
    cells += [f"{percentile(ordered, p):f}" for p in percentiles]
    return ",".join(cells)


def csv_header(rr: bool, percentiles: Sequence[float]) -> str:
    things = "transactions" if rr else "bytes_read"
    header = f"tid,flow_id,time,{things},{things}/s,utime,stime,maxrss,minflt,majflt," \
             "nvcsw,nivcsw"
    if rr:
        header += ",latency_min,latency_mean,latency_max,latency_stddev"
        header += "".join(f",latency_p{p:g}" for p in percentiles)
    return header


def write_csv(path: str, rr: bool, percentiles: Sequence[float], summary: Summary) -> None:
    with open(path, "w", encoding="ascii") as out:
        out.write(csv_header(rr, percentiles) + "\n")
        for row in summary.csv_rows:
            out.write(row + "\n")


# ------------------------------------------------------------------------------ the block
@dataclass
class SideResult:
    """One side's run: its flows (none for the tcp_crr server), its rusage at the first
    packet and at the end, and the peer's integer throughput."""

    flows: list[FlowStats]
    usage_start: Usage
    usage_end: Usage
    measures: bool  # prints the workload results (RR sides, stream reader)
    remote_throughput: int = 0
    invalid_secrets: int = 0  # control connections refused (neper's incidents)


def local_throughput(workload: str, summary: Summary | None) -> int:
    """Transactions/s for RR, bits/s for stream (0 for a side that measured nothing)."""
    if summary is None:
        return 0
    if workload in STREAM_WORKLOADS:
        return int(summary.throughput * 8)
    return int(summary.throughput)


def result_lines(opts: argparse.Namespace, side: SideResult,
                 summary: Summary | None) -> list[str]:
    """The block after ``total_run_time``: rusage, workload results, local/remote."""
    workload = opts.neper_workload
    start, end = side.usage_start, side.usage_end
    lines = [f"invalid_secret_count={side.invalid_secrets}",
             f"time_start={format_ns(summary.time_start if summary else 0)}"]
    for name in ("utime", "stime"):
        for edge, usage in (("start", start), ("end", end)):
            seconds = getattr(usage, name)
            lines.append(f"{name}_{edge}={int(seconds)}.{round(seconds % 1 * 1e6):06d}")
    for name in ("maxrss", "minflt", "majflt", "nvcsw", "nivcsw"):
        lines.append(f"{name}_start={getattr(start, name)}")
        lines.append(f"{name}_end={getattr(end, name)}")
    if summary is not None and side.measures:
        if workload in RR_WORKLOADS:
            lines.append(f"num_transactions={summary.transactions}")
            low, high, mean, stddev = latency_stats(summary.latencies)
            lines += [f"latency_min={low:.9f}", f"latency_max={high:.9f}",
                      f"latency_mean={mean:.9f}", f"latency_stddev={stddev:.9f}"]
            lines += [f"latency_p{p:g}={percentile(summary.latencies, p):.9f}"
                      for p in opts.percentiles]
        lines.append(f"num_samples={summary.num_samples}")
        lines.append(f"time_end={format_ns(summary.time_end)}")
        lines.append(f"correlation_coefficient={summary.correlation:.2f}")
        if workload in STREAM_WORKLOADS:
            lines.append(f"throughput={summary.throughput * 8 / 1e6:.2f}")
            lines.append("throughput_units=Mbit/s")
        else:
            lines.append(f"throughput={summary.throughput:.2f}")
    local = local_throughput(workload, summary if side.measures else None)
    lines.append(f"local_throughput={local}")
    lines.append(f"remote_throughput={side.remote_throughput}")
    return lines


def allowed_cpus() -> list[int]:
    """neper's ``get_cpuset``: the CPUs this process may run on, in order."""
    return sorted(os.sched_getaffinity(0))


def cpuset_lines(cpus: Sequence[int]) -> list[str]:
    """What neper prints when it pins: ``allowed_core_num`` and ``allowed_cores``."""
    return [f"allowed_core_num={len(cpus)}", f"allowed_cores={cpu_list(cpus)}"]


def pin_thread(cpus: Sequence[int] | None, index: int) -> None:
    """``--pin-cpu``: the calling worker thread onto the ``index``-th allowed CPU (round
    robin, as neper's ``start_worker_threads``); nothing when ``cpus`` is None.  Linux's
    sched_setaffinity of pid 0 applies to the calling thread only."""
    if cpus:
        os.sched_setaffinity(0, {cpus[index % len(cpus)]})


def emit(lines: Iterable[str], out: TextIO | None = None) -> None:
    """Print ``key=value`` lines, flushed at once as neper does."""
    out = out or sys.stdout
    for line in lines:
        out.write(line + "\n")
    out.flush()


# ------------------------------------------------------------------------------ log file
class Log:
    """neper's log: ``<prog>.<host>.<user>.<YYYYmmdd-HHMMSS>.<pid>.log`` in the current
    directory, stderr with --logtostderr, nothing with --nolog."""

    def __init__(self, opts: argparse.Namespace) -> None:
        self._out: TextIO | None = None
        self._owned = False
        if opts.nolog:
            return
        if opts.logtostderr:
            self._out = sys.stderr
            return
        name = ".".join([opts.neper_workload, socket.gethostname(), _user(),
                         time.strftime("%Y%m%d-%H%M%S"), str(os.getpid()), "log"])
        try:
            self._out = open(name, "a", encoding="utf-8")  # noqa: SIM115 closed in close()
        except OSError as exc:
            raise NeperError(f"cannot open log file {name}: {exc.strerror} "
                             "(use --nolog or --logtostderr)") from None
        self._owned = True

    def info(self, message: str) -> None:
        if self._out is not None:
            stamp = time.strftime("%m%d %H:%M:%S")
            self._out.write(f"I{stamp} {os.getpid()} {message}\n")
            self._out.flush()

    def close(self) -> None:
        if self._owned and self._out is not None:
            self._out.close()
        self._out = None


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return str(os.getuid())
