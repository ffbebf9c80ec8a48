"""Seed 001 through whole Hosts: a bulk TCP receive with a slow reader.

Eric Dumazet's "tcp: defer skb freeing after socket lock is released" (seed 001, reference
§5.2-5.3): ``recvmsg()`` used to free the buffers it consumed while owning the socket, so
the receive path — which must queue every segment arriving meanwhile on the socket's
backlog — found the socket owned for longer, and the owner then had to process a longer
backlog in ``release_sock``.  The fix frees after the release, handing each buffer back to
the worker (CPU) that allocated it.

Here host ``a`` sends one TCP stream as fast as the window allows for ``duration`` seconds
while a reader on host ``b`` calls ``recv(chunk)`` and does ``work_us`` of CPU work (and
optionally sleeps ``sleep_us``) between calls — the reader is the bottleneck, as the
``recvmsg()`` CPU is in the authors' test.  Threaded hosts: b's receive worker runs the TCP
input and meets the socket owned by the reader.  Legacy (``Tuning.tcp_defer_free`` off)
frees the consumed buffers inside the lock section; modern frees them after
``release_sock``, deferred to the allocating worker.  Measured: throughput, the backlog
(deepest, and its average sampled while the reader owns the socket), the reader's
socket-lock hold time, and where the buffers went.  Every byte is hash-checked.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from rcunet.api import host_socket
from rcunet.host.network import Network
from rcunet.lab.common import MODES, alternate, interpreter, ratio, with_lockstat
from rcunet.lab.report import cover_letter, extra_reports, lock_stat_lines, to_json
from rcunet.lab.seed001_stream import (
    IO_TIMEOUT,
    BacklogSampler,
    deferred_counts,
    finish_reader,
    read_blocks,
    send_blocks,
)
from rcunet.sync.lock import all_classes
from rcunet.tuning import SEED_SWITCHES, Tuning

SERVER = "10.0.0.2"
PORT = 5001
DEFAULT_SWITCH_INTERVAL = 0.005  # CPython's sys.getswitchinterval() default
#: ``--switch-interval auto``: with the GIL, switch threads every 100 us (not every 5 ms):
#: the receive worker then gets to run while the reader owns the socket, as the softirq on
#: another CPU does in the kernel; at 5 ms it almost never does and no backlog forms.
#: Not the default: the preemptions it adds inside lock sections make the hold times
#: noisier than the effect being measured (docs/BENCHMARKS.md, Seed lab).
GIL_SWITCH_INTERVAL = 0.0001


def seed_tuning(mode: str, seed: str) -> Tuning:
    """Modern everywhere except, in legacy, ``seed``'s own switches: the comparison then
    isolates this seed (the full legacy preset would also swap, say, the route cache's
    refcount that every transmitted segment takes)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "modern":
        return Tuning.modern()
    return Tuning.modern(**{name: False for name in SEED_SWITCHES[seed]})


def run_stream(mode: str, duration: float = 1.0, *, chunk: int = 16384, work_us: int = 20,
               sleep_us: int = 0, rcvbuf: int = 1 << 20, procs: bool = False
               ) -> dict[str, Any]:
    """One run: a sender on a, the slow reader on b, ``duration`` seconds of sending.
    ``procs``: b in a child process (rcunet/lab/seed001_procs.py)."""
    # lock_stat: the sockets time their owner sections (hold per recv, lock_stats())
    # a benchmark host raises net.core.rmem_max for the reader's SO_RCVBUF (Linux caps it)
    tuning = dataclasses.replace(seed_tuning(mode, "seed001"), lock_stat=True,
                                 rmem_max=max(Tuning().rmem_max, rcvbuf))
    if procs:
        from rcunet.lab.seed001_procs import run_stream_procs

        return run_stream_procs(mode, duration, chunk=chunk, work_us=work_us,
                                sleep_us=sleep_us, rcvbuf=rcvbuf, tuning=tuning)
    net, a, b = Network.two_hosts(threaded=True, tuning=tuning)
    net.start()
    try:
        srv: Any = b.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        srv.bind((SERVER, PORT))
        srv.listen(1)
        cli: Any = a.socket(socket.AF_INET, socket.SOCK_STREAM)
        cli.settimeout(IO_TIMEOUT)
        cli.connect((SERVER, PORT))
        child, _ = srv.accept()
        child.settimeout(IO_TIMEOUT)
        sk = host_socket(child)
        result = _transfer(cli, child, duration, chunk, work_us * 1000, sleep_us / 1e6,
                           BacklogSampler(sk))
        stats = sk.lock_stats()
        child.close()
        srv.close()
        result.update(
            mode=mode,
            hold_ns_avg=stats["hold_ns_total"] / stats["holds"] if stats["holds"] else 0.0,
            hold_ns_max=stats["hold_ns_max"],
            holds=stats["holds"],
            backlog_max_bytes=stats["backlog_max_bytes"],
            backlog_drops=stats["backlog_drops"],
            buffers=deferred_counts(b.tcp),
            nstat=b.counters.nonzero(),
        )
        return result
    finally:
        net.close()


def _transfer(cli: Any, child: Any, duration: float, chunk: int, work_ns: int,
              sleep_s: float, sampler: BacklogSampler) -> dict[str, Any]:
    sent: dict[str, Any] = {"bytes": 0, "digest": b""}  # by the sender; read after join
    errors: list[BaseException] = []
    thread = threading.Thread(target=send_blocks, args=(cli, duration, sent, errors),
                              name="seed001-sender")
    sampler.start()
    thread.start()
    try:
        result = read_blocks(child, chunk, work_ns, sleep_s, duration)
    finally:
        sampler.stop()
        thread.join(IO_TIMEOUT)
    if errors:
        raise RuntimeError(f"seed001 sender failed: {errors[0]!r}") from errors[0]
    return finish_reader(result, sent, sampler)


def _checked(run: dict[str, Any]) -> dict[str, Any]:
    if run["bytes_received"] != run["bytes_sent"] or not run["hash_ok"]:
        raise RuntimeError(
            f"seed001 {run['mode']}: received {run['bytes_received']} bytes of "
            f"{run['bytes_sent']}, hash {'ok' if run['hash_ok'] else 'MISMATCH'}")
    return run


def lab_switch_interval(choice: float | str | None) -> float | None:
    """``"auto"``: ``GIL_SWITCH_INTERVAL`` with the GIL, the interpreter's own without;
    None: the interpreter's; a number: that."""
    if choice == "auto":
        gil = getattr(sys, "_is_gil_enabled", lambda: True)()
        return GIL_SWITCH_INTERVAL if gil else None
    return None if choice is None else float(choice)


def run_lab(duration: float = 1.0, rounds: int = 3, *, chunk: int = 16384, work_us: int = 20,
            sleep_us: int = 0, rcvbuf: int = 1 << 20, lockstat_duration: float | None = None,
            switch_interval: float | str | None = None, procs: bool = False
            ) -> dict[str, Any]:
    """Alternating legacy/modern rounds (best throughput of each kept, with that run's
    details), then one run per mode with lock statistics on; all under
    ``lab_switch_interval(switch_interval)``.  ``procs``: the reader's Host in a child
    process (its lock statistics are the ones reported)."""
    result: dict[str, Any] = with_switch_interval(
        lab_switch_interval(switch_interval),
        lambda: _run_lab(duration, rounds, chunk, work_us, sleep_us, rcvbuf, lockstat_duration,
                         procs))
    return result


def _run_lab(duration: float, rounds: int, chunk: int, work_us: int, sleep_us: int,
             rcvbuf: int, lockstat_duration: float | None, procs: bool) -> dict[str, Any]:
    best: dict[str, dict[str, Any]] = {}

    def measure(mode: str) -> float:
        run = _checked(run_stream(mode, duration, chunk=chunk, work_us=work_us,
                                  sleep_us=sleep_us, rcvbuf=rcvbuf, procs=procs))
        if mode not in best or run["throughput_mbit"] > best[mode]["throughput_mbit"]:
            best[mode] = run
        return float(run["throughput_mbit"])

    rates = alternate(measure, rounds)
    locks: dict[str, dict[str, Any]] = {}
    seconds = lockstat_duration if lockstat_duration is not None else max(duration / 2, 0.1)
    for mode in MODES if seconds > 0 else ():
        def one(mode: str = mode) -> dict[str, Any]:
            return _checked(run_stream(mode, seconds, chunk=chunk, work_us=work_us,
                                       sleep_us=sleep_us, rcvbuf=rcvbuf, procs=procs))

        run, snap = with_lockstat(one, all_classes())
        locks[mode] = run["server_lockstat"] if procs else snap  # the reader's locks
    return {
        "interpreter": interpreter(),
        "params": {"switch_interval": sys.getswitchinterval(),
                   "duration": duration, "rounds": rounds, "chunk": chunk, "work_us": work_us,
                   "sleep_us": sleep_us, "rcvbuf": rcvbuf, "procs": procs},
        "legacy": rates["legacy"],
        "modern": rates["modern"],
        "ratio": ratio(rates["modern"], rates["legacy"]),
        "runs": best,
        "lockstat": locks,
    }


def _row(label: str, legacy: float, modern: float, fmt: str = ",.0f",
         show_ratio: bool = True) -> str:
    tail = f"{ratio(modern, legacy):>8.2f}x" if show_ratio and legacy else ""
    return f"{label:36}{legacy:>14{fmt}}{modern:>14{fmt}}{tail}"


def command_line(params: dict[str, Any]) -> str:
    return (f"rcunet lab seed001 --duration {params['duration']} --rounds {params['rounds']} "
            f"--chunk {params['chunk']} --work-us {params['work_us']} "
            f"--sleep-us {params['sleep_us']} --rcvbuf {params['rcvbuf']}"
            + (" --procs" if params.get("procs") else "") + switch_interval_flag(params))


def report(result: dict[str, Any]) -> str:
    legacy, modern = result["runs"]["legacy"], result["runs"]["modern"]
    p = result["params"]
    summary = [
        f"{'':36}{'legacy':>14}{'modern':>14}{'ratio':>9}",
        _row("throughput (Mbit/s)", result["legacy"], result["modern"], ",.1f"),
        _row("reader CPU in recv(), us per MB", legacy["reader_recv_cpu_us_per_mb"],
             modern["reader_recv_cpu_us_per_mb"], ",.0f"),
        _row("socket-lock hold per recv, p50 (us)", legacy["hold_ns_per_recv_p50"] / 1e3,
             modern["hold_ns_per_recv_p50"] / 1e3, ",.1f"),
        _row("socket-lock hold per recv, p99 (us)", legacy["hold_ns_per_recv_p99"] / 1e3,
             modern["hold_ns_per_recv_p99"] / 1e3, ",.1f"),
        _row("socket-lock hold, avg (us)", legacy["hold_ns_avg"] / 1e3,
             modern["hold_ns_avg"] / 1e3, ",.1f"),
        _row("socket-lock hold, max (us)", legacy["hold_ns_max"] / 1e3,
             modern["hold_ns_max"] / 1e3, ",.0f"),
        _row("backlog max (bytes)", legacy["backlog_max_bytes"], modern["backlog_max_bytes"],
             show_ratio=False),
        _row("backlog avg while owned (bytes)", legacy["backlog_avg_bytes"],
             modern["backlog_avg_bytes"], show_ratio=False),
        _row("buffers freed in place", legacy["buffers"]["freed_local"],
             modern["buffers"]["freed_local"], show_ratio=False),
        _row("buffers handed back to their worker", legacy["buffers"]["deferred"],
             modern["buffers"]["deferred"], show_ratio=False),
    ]
    notes = [
        f"Checks: every byte arrived and hashed equal (legacy {legacy['bytes_received']:,} B, "
        f"modern {modern['bytes_received']:,} B); backlog drops {legacy['backlog_drops']} / "
        f"{modern['backlog_drops']}.",
        f"Reader: recv({p['chunk']}), {p['work_us']} us of work and {p['sleep_us']} us of "
        f"sleep per call, SO_RCVBUF {p['rcvbuf']}; best of {p['rounds']} alternating rounds.",
    ]
    return cover_letter(
        "seed 001: tcp recvmsg() frees consumed buffers after the socket lock "
        "(slow reader, one bulk flow)",
        interpreter=result["interpreter"], commands=[command_line(p)], summary=summary,
        before=legacy["neper"], after=modern["neper"],
        lock_stat=lock_stat_lines(result), seed="seed001", notes=notes)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=1.0, help="seconds of sending per run")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--chunk", type=int, default=16384, help="recv() size (default 16384)")
    parser.add_argument("--work-us", type=int, default=20,
                        help="CPU work of the reader between recv calls, us (default 20)")
    parser.add_argument("--sleep-us", type=int, default=0,
                        help="sleep of the reader between recv calls, us (default 0)")
    parser.add_argument("--rcvbuf", type=int, default=1 << 20, help="SO_RCVBUF of the reader")
    parser.add_argument("--procs", action="store_true",
                        help="the reader's Host (listener, reader, receive worker) in a "
                             "child process, the sender's Host here")
    add_common_options(parser)


def switch_interval_arg(text: str) -> float | str | None:
    """``--switch-interval``: seconds, ``auto`` or ``keep`` (the interpreter's)."""
    if text in ("auto", "keep"):
        return None if text == "keep" else text
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"seconds, 'auto' or 'keep', not {text!r}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return seconds


def add_common_options(parser: argparse.ArgumentParser,
                       switch_default: str | None = None) -> None:
    parser.add_argument("--lockstat-duration", type=float, default=None, metavar="SECONDS",
                        help="length of the extra run per mode with lock statistics on "
                             "(default: half of --duration; 0 skips it)")
    parser.add_argument("--switch-interval", type=switch_interval_arg, default=switch_default,
                        metavar="SECONDS|auto|keep",
                        help="sys.setswitchinterval for the run (GIL builds: how often "
                             "threads switch); auto: 100 us with the GIL; keep: the "
                             f"interpreter's (default: {switch_default or 'keep'})")
    parser.add_argument("--lockstat", action="store_true",
                        help="print /proc/lock_stat and perf lock contention layouts")
    parser.add_argument("--nstat", action="store_true", help="print nstat counters")
    parser.add_argument("--plot", metavar="FILE.png", help="save a before/after plot")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def switch_interval_flag(params: dict[str, Any]) -> str:
    """`` --switch-interval S`` when the run used another than CPython's default (5 ms)."""
    seconds = params.get("switch_interval", DEFAULT_SWITCH_INTERVAL)
    return "" if seconds == DEFAULT_SWITCH_INTERVAL else f" --switch-interval {seconds:g}"


def check_lockstat_duration(args: argparse.Namespace) -> None:
    if args.lockstat_duration is not None and args.lockstat_duration < 0:
        raise SystemExit("--lockstat-duration must be >= 0")
    if args.lockstat and args.lockstat_duration == 0:
        raise SystemExit("--lockstat needs the lock statistics run (--lockstat-duration > 0)")


def with_switch_interval(seconds: float | str | None, body: Callable[[], Any]) -> Any:
    seconds = lab_switch_interval(seconds)
    if seconds is None:
        return body()
    previous = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        return body()
    finally:
        sys.setswitchinterval(previous)


def plot_metrics(result: dict[str, Any]) -> list[Any]:
    from rcunet.lab.plot import Metric

    legacy, modern = result["runs"]["legacy"], result["runs"]["modern"]
    metrics = [
        Metric("throughput", result["legacy"], result["modern"], "Mbit/s"),
        Metric("socket-lock hold per recv, p50", legacy["hold_ns_per_recv_p50"] / 1e3,
               modern["hold_ns_per_recv_p50"] / 1e3, "us"),
        Metric("socket-lock hold per recv, p99", legacy["hold_ns_per_recv_p99"] / 1e3,
               modern["hold_ns_per_recv_p99"] / 1e3, "us"),
    ]
    if legacy["backlog_avg_bytes"] or modern["backlog_avg_bytes"]:
        metrics.append(Metric("backlog avg while owned", legacy["backlog_avg_bytes"],
                              modern["backlog_avg_bytes"], "bytes"))
    return metrics


def run(args: argparse.Namespace) -> int:
    for name in ("duration", "rounds", "chunk", "rcvbuf"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name} must be positive")
    if args.work_us < 0 or args.sleep_us < 0:
        raise SystemExit("--work-us and --sleep-us must be >= 0")
    check_lockstat_duration(args)
    result = run_lab(args.duration, args.rounds, chunk=args.chunk, work_us=args.work_us,
                     sleep_us=args.sleep_us, rcvbuf=args.rcvbuf,
                     lockstat_duration=args.lockstat_duration,
                     switch_interval=args.switch_interval, procs=args.procs)
    if args.json:
        print(json.dumps(to_json(result)))
    else:
        print(report(result))
        extra = extra_reports(result, show_lockstat=args.lockstat, show_nstat=args.nstat)
        if extra:
            print()
            print(extra)
    if args.plot:
        from rcunet.lab.plot import before_after_bars

        before_after_bars(args.plot, "seed 001: slow reader, one bulk flow",
                          plot_metrics(result))
    return 0
