"""``rcunet bench profile``: what one tcp_crr transaction costs in Python calls and CPU.

Two in-process Hosts on the virtual clock, no threads: the client connects without
blocking, the server accepts, one request and one response cross, and the client closes
abortively (SO_LINGER 0, neper's tcp_crr default), then the clock moves on past the
transaction's timers.  Only the public socket API is used, so the figures compare any two
trees, and the same tree in its compiled and pure builds.

Three figures per run:
- CPU per transaction: process time over ``--transactions``, without a profiler, the
  best of ``--rounds`` rounds (the least disturbed one, as timeit takes its minimum);
- calls per transaction: cProfile's count over one round, split into Python functions
  and built-ins (a compiled module's functions are C and not seen: its calls drop);
- the functions that spend the most own time, from the same profile.
The packet count is exact and the call counts repeat within a fraction of a percent
(periodic work such as timer ticks varies a little); CPU depends on the machine.
"""

from __future__ import annotations

import argparse
import cProfile
import errno
import platform
import pstats
import socket
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

from rcunet.host.network import Network

PORT = 8080
SERVER = "10.0.0.2"
REQUEST = b"q"
RESPONSE = b"r"
LINGER_ABORT = struct.pack("ii", 1, 0)  # SO_LINGER {on, 0 s}: close sends RST
#: Virtual time each transaction ends with, so its timers (delayed ACK) run as they would.
SETTLE_NS = 50_000_000


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--transactions", type=int, default=2000,
                        help="transactions per round (default %(default)s)")
    parser.add_argument("-r", "--rounds", type=int, default=3,
                        help="timed rounds; the best is printed (default %(default)s)")
    parser.add_argument("--top", type=int, default=25,
                        help="functions listed by own time (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=200,
                        help="transactions run first and not counted (default %(default)s)")


@dataclass
class Pair:
    """Two Hosts on one virtual-clock link and a listening server socket."""

    net: Network
    client_host: Any  # a Host
    listener: Any  # its socket object

    @classmethod
    def open(cls) -> Pair:
        net, client_host, server_host = Network.two_hosts()
        listener: Any = server_host.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((SERVER, PORT))
        listener.listen(128)
        listener.setblocking(False)
        return cls(net, client_host, listener)

    def settle(self) -> None:
        """Everything due now, on every link and Host (no virtual time passes)."""
        while self.net.step():
            pass

    def transaction(self) -> None:
        client = self.client_host.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setblocking(False)
        status = client.connect_ex((SERVER, PORT))
        if status not in (0, errno.EINPROGRESS):
            raise OSError(status, f"connect: {errno.errorcode.get(status, status)}")
        self.settle()
        child, _ = self.listener.accept()
        child.setblocking(False)
        client.send(REQUEST)
        self.settle()
        if child.recv(64) != REQUEST:
            raise RuntimeError("the request did not arrive whole")
        child.send(RESPONSE)
        self.settle()
        if client.recv(64) != RESPONSE:
            raise RuntimeError("the response did not arrive whole")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ABORT)
        client.close()
        self.settle()
        child.close()
        self.net.run(SETTLE_NS / 1e9)

    def run(self, count: int) -> None:
        for _ in range(count):
            self.transaction()

    def packets(self) -> int:
        """IP packets both Hosts have received (nstat's IpInReceives, summed)."""
        return sum(host.counters.snapshot().get("IpInReceives", 0) for host in self.net.hosts)

    def close(self) -> None:
        self.listener.close()
        self.net.close()


def cpu_per_transaction(pair: Pair, count: int, rounds: int) -> float:
    """Best-of-``rounds`` process time per transaction, in microseconds."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time_ns()
        pair.run(count)
        best = min(best, (time.process_time_ns() - start) / count / 1000)
    return best


def profile(pair: Pair, count: int) -> pstats.Stats:
    profiler = cProfile.Profile()
    profiler.enable()
    pair.run(count)
    profiler.disable()
    return pstats.Stats(profiler)


def table(stats: pstats.Stats) -> dict[tuple[str, int, str], Any]:
    """pstats' table, function -> (primitive calls, calls, own time, cumulative, callers)
    (its documented ``stats`` attribute, which typeshed leaves out)."""
    return stats.stats  # type: ignore[attr-defined,no-any-return]


def call_counts(stats: pstats.Stats) -> tuple[int, int]:
    """(calls into Python functions, calls into built-ins) in ``stats``."""
    python = builtin = 0
    for (filename, _line, _name), (_cc, calls, *_rest) in table(stats).items():
        if filename == "~":
            builtin += calls
        else:
            python += calls
    return python, builtin


def short_name(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    marker = "/rcunet/"
    where = filename[filename.rfind(marker) + 1:] if marker in filename else filename
    return f"{where}:{line}({name})"


def print_top(stats: pstats.Stats, count: int, top: int) -> None:
    entries = table(stats).items()
    ranked = sorted(entries, key=lambda item: item[1][2], reverse=True)[:top]
    total = sum(value[2] for _key, value in entries)
    print(f"top {top} functions by own time (share of profiled time; calls per transaction):")
    for key, (_cc, calls, own, _cumulative, _callers) in ranked:
        print(f"  {100 * own / total:5.1f}%  {calls / count:7.1f}  {short_name(key)}")


def describe_build() -> str:
    """The build that runs, as ``rcunet --version`` names it."""
    try:
        from rcunet.build import describe
    except ImportError:  # an older tree's source, run by path (rcunet.bench.revision)
        return f"source of a tree without rcunet.build; CPython {platform.python_version()}"
    return describe()


def run(args: argparse.Namespace) -> int:
    if args.transactions < 1 or args.rounds < 1:
        print("rcunet bench profile: -n and -r must be at least 1", file=sys.stderr)
        return 2
    pair = Pair.open()
    try:
        pair.run(args.warmup)
        packets_before = pair.packets()
        cpu_us = cpu_per_transaction(pair, args.transactions, args.rounds)
        packets = (pair.packets() - packets_before) / (args.transactions * args.rounds)
        stats = profile(pair, args.transactions)
    finally:
        pair.close()
    python_calls, builtin_calls = call_counts(stats)
    n = args.transactions
    print(f"tcp_crr on the virtual clock, {describe_build()}")
    print(f"transactions={n} rounds={args.rounds} warmup={args.warmup}")
    print(f"packets_per_transaction={packets:.1f}")
    print(f"cpu_us_per_transaction={cpu_us:.1f}")
    print(f"python_calls_per_transaction={python_calls / n:.0f}")
    print(f"builtin_calls_per_transaction={builtin_calls / n:.0f}")
    print(f"functions_called={len(table(stats))}")
    print_top(stats, n, args.top)
    return 0


if __name__ == "__main__":  # by path, against another tree's rcunet (rcunet.bench.revision)
    main_parser = argparse.ArgumentParser(prog="profile.py")
    configure(main_parser)
    sys.exit(run(main_parser.parse_args()))
