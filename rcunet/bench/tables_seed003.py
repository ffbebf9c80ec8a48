"""Seed 003: UDP multicast delivery with many sockets on one port (reference §6.5).

Two experiments on one ``UdpTable`` each, modern and legacy run back to back:

(a) **300 groups** - Shawn Bohrer's setup: 300 sockets bound to port 5000, each to its own
    group address (and joined to it); datagrams go round-robin to the 300 groups, so each
    has exactly one receiver.  Legacy (``Tuning.legacy()``) walks the whole 300-socket
    primary chain under its lock per datagram; modern uses the hash2 slots of (group,
    port) and (ANY, port) and walks them with no lock.  The rate is datagrams delivered
    per second over ``threads`` receive threads; the receiver of every group is asserted
    identical in both modes (and in the collect-under-lock variant) before timing.
(b) **fan-out** - 300 sockets bound to (ANY, 5001), all in one group: every datagram is
    cloned 299 times.  The metric is slot-lock hold time per datagram: legacy clones and
    queues under the lock; the collect variant (``mcast_collect="locked"``, the 2009/2014
    design) only matches and pins under it and delivers after unlocking; the default
    modern walk (RCU) takes no lock at all, so its hold time is 0.

The delivery callback models what the host does per receiver (``udp_queue_rcv_skb`` +
``sk_data_ready``): take the socket's receive-queue lock, account the bytes against
``rcvbuf``, append, wake a reader (``Condition.notify``; none is waiting), and - as if the
application kept reading - trim the queue.  Clones copy the 1400-byte payload
(``bytes(memoryview)``), the first receiver gets the original view.

What Python can and cannot show: lock hold time and walk length are structural and show
up as in the kernel; absolute rates are interpreter costs.  ``lockstat`` is collected in
a separate short run with statistics on, so the timed runs use the fast locks.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import deque
from typing import Any

from rcunet.sync import lockstat
from rcunet.tables.entry import AF_INET
from rcunet.tables.udp import HSLOT2_LOCK, HSLOT_LOCK, UdpTable
from rcunet.tables.udp_entry import UdpEntry
from rcunet.tables.udp_mcast import McastStats, mcast_deliver
from rcunet.tuning import Tuning

ANY4 = bytes(4)
SENDER = bytes([10, 0, 0, 99])
IFINDEX = 1
GROUPS_PORT = 5000
FANOUT_PORT = 5001
N_SOCKETS = 300
PAYLOAD = memoryview(bytes(range(256)) * 5 + bytes(120))  # 1400 bytes
FANOUT_GROUP = bytes([239, 9, 9, 9])

LEGACY = Tuning.legacy()
MODERN = Tuning()


class BenchSock(UdpEntry):
    """A UDP socket with the receive queue the host layer would give it.

    Concurrency: ``rx_queue``/``rx_bytes``/``rx_drops`` guarded-by ``rx_lock`` (the lock
    of the ``rx_ready`` condition a reader waits on).
    """

    __slots__ = ("rx_lock", "rx_ready", "rx_queue", "rx_bytes", "rcvbuf", "rx_drops")

    def __init__(self, laddr: bytes) -> None:
        super().__init__(AF_INET, laddr, reuseaddr=True)
        self.rx_lock = threading.Lock()
        self.rx_ready = threading.Condition(self.rx_lock)
        self.rx_queue: deque[object] = deque()  # guarded-by: rx_lock
        self.rx_bytes = 0  # guarded-by: rx_lock
        self.rcvbuf = MODERN.udp_rmem_default
        self.rx_drops = 0  # guarded-by: rx_lock


def queue_datagram(sk: UdpEntry, datagram: object) -> None:
    """``udp_queue_rcv_skb``, reduced: rcvbuf accounting and the queue append under the
    socket's queue lock; the application is modelled as reading (trim to 32)."""
    assert isinstance(sk, BenchSock)
    size = len(datagram)  # type: ignore[arg-type]
    with sk.rx_lock:
        if sk.rx_bytes + size > sk.rcvbuf:
            sk.rx_drops += 1
            return
        sk.rx_queue.append(datagram)
        sk.rx_bytes += size
        sk.rx_ready.notify()  # sk_data_ready
        if len(sk.rx_queue) > 32:
            sk.rx_bytes -= len(sk.rx_queue.popleft())  # type: ignore[arg-type]


def group_address(i: int) -> bytes:
    return bytes([239, 1, i // 250, i % 250 + 1])


def groups_table() -> tuple[UdpTable, list[bytes]]:
    """(a): 300 sockets on one port, each bound to and joined to its own group."""
    table = UdpTable(size=256)
    groups = [group_address(i) for i in range(N_SOCKETS)]
    for group in groups:
        sk = BenchSock(group)
        sk.mc_all = False
        table.bind(sk, GROUPS_PORT)
        sk.join_group(group, IFINDEX)
    return table, groups


def fanout_table() -> UdpTable:
    """(b): 300 sockets on (ANY, port), all joined to one group."""
    table = UdpTable(size=256)
    for _ in range(N_SOCKETS):
        sk = BenchSock(ANY4)
        table.bind(sk, FANOUT_PORT)
        sk.join_group(FANOUT_GROUP, IFINDEX)
    return table


def receivers(table: UdpTable, group: bytes, port: int, tuning: Tuning,
              collect: str) -> frozenset[int]:
    got: list[UdpEntry] = []
    table.mcast_deliver(group, port, SENDER, 4000, IFINDEX, PAYLOAD,
                        lambda sk, _d: got.append(sk), tuning=tuning, collect=collect)
    ids = [id(sk) for sk in got]
    if len(set(ids)) != len(ids):
        raise AssertionError("a socket received one datagram twice")
    return frozenset(ids)


def assert_identical_receivers(table: UdpTable, groups: list[bytes], port: int) -> int:
    """Every group's receiver set is the same in all modes; returns the total receivers."""
    total = 0
    for group in groups:
        legacy = receivers(table, group, port, LEGACY, "rcu")
        if receivers(table, group, port, MODERN, "rcu") != legacy \
                or receivers(table, group, port, MODERN, "locked") != legacy:
            raise AssertionError(f"receiver sets differ for group {group.hex()}")
        total += len(legacy)
    return total


def run_deliveries(table: UdpTable, groups: list[bytes], port: int, tuning: Tuning,
                   collect: str, duration: float, threads: int) -> tuple[int, float]:
    """``threads`` receive threads deliver round-robin over ``groups`` for ``duration``
    seconds; returns (datagrams, elapsed seconds)."""
    stop_at = time.perf_counter_ns() + int(duration * 1e9)
    counts = [0] * threads
    n_groups = len(groups)

    def worker(index: int) -> None:
        i = index * 37
        done = 0
        while time.perf_counter_ns() < stop_at:
            for _ in range(16):
                mcast_deliver(table, groups[i % n_groups], port, SENDER, 4000, IFINDEX,
                              PAYLOAD, queue_datagram, tuning=tuning, collect=collect)
                i += 1
            done += 16
        counts[index] = done

    started = time.perf_counter_ns()
    pool = [threading.Thread(target=worker, args=(k,), name=f"rx{k}") for k in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return sum(counts), (time.perf_counter_ns() - started) / 1e9


def compare(table: UdpTable, groups: list[bytes], port: int,
            modes: dict[str, tuple[Tuning, str]], duration: float, threads: int,
            rounds: int = 5) -> dict[str, dict[str, float]]:
    """Time each mode for ``duration`` seconds in total, in ``rounds`` interleaved slices
    (so a machine whose load drifts treats every mode alike); per mode the rate and the
    per-datagram counts from the table's statistics."""
    totals = {name: [0, 0.0] for name in modes}
    stats = {name: dict.fromkeys(McastStats.FIELDS, 0) for name in modes}
    for _ in range(rounds):
        for name, (tuning, collect) in modes.items():
            before = table.mcast_stats.snapshot()
            packets, elapsed = run_deliveries(table, groups, port, tuning, collect,
                                              duration / rounds, threads)
            after = table.mcast_stats.snapshot()
            totals[name][0] += packets
            totals[name][1] += elapsed
            for key in McastStats.FIELDS:
                stats[name][key] += after[key] - before[key]
    result = {}
    for name in modes:
        packets = max(stats[name]["packets"], 1)
        result[name] = {
            "rate": totals[name][0] / totals[name][1],
            "receivers_per_packet": stats[name]["receivers"] / packets,
            "hold_ns_per_packet": stats[name]["lock_hold_ns"] / packets,
            "lock_sections_per_packet": stats[name]["lock_sections"] / packets,
        }
    return result


def lockstat_text(tables: list[tuple[UdpTable, list[bytes], int]], duration: float,
                  threads: int) -> str:
    """A short run per mode with lock statistics on, in /proc/lock_stat layout."""
    classes = [HSLOT_LOCK, HSLOT2_LOCK]
    was_on = lockstat.enabled()
    lockstat.enable()
    lockstat.reset(classes)
    try:
        for table, groups, port in tables:
            for tuning, collect in ((LEGACY, "rcu"), (MODERN, "locked"), (MODERN, "rcu")):
                run_deliveries(table, groups, port, tuning, collect, duration / 3, threads)
        snap = lockstat.snapshot(classes)
    finally:
        if not was_on:
            lockstat.disable()
    return lockstat.format_lock_stat(snap)


def measure(duration: float, threads: int = 1) -> dict[str, Any]:
    """Run (a) and (b); ``duration`` seconds per timed run."""
    table, groups = groups_table()
    matched = assert_identical_receivers(table, groups, GROUPS_PORT)
    if matched != len(groups):
        raise AssertionError(f"expected one receiver per group, got {matched}")
    runs = compare(table, groups, GROUPS_PORT,
                   {"legacy": (LEGACY, "rcu"), "modern": (MODERN, "rcu")}, duration, threads)
    legacy, modern = runs["legacy"], runs["modern"]

    fan = fanout_table()
    fan_groups = [FANOUT_GROUP]
    if assert_identical_receivers(fan, fan_groups, FANOUT_PORT) != N_SOCKETS:
        raise AssertionError("fan-out did not reach every socket")
    fan_runs = compare(fan, fan_groups, FANOUT_PORT,
                       {"legacy": (LEGACY, "rcu"), "locked": (MODERN, "locked"),
                        "rcu": (MODERN, "rcu")}, duration, threads)
    f_legacy, f_locked, f_rcu = fan_runs["legacy"], fan_runs["locked"], fan_runs["rcu"]

    stat_text = lockstat_text([(table, groups, GROUPS_PORT), (fan, fan_groups, FANOUT_PORT)],
                              min(duration, 0.25), threads)
    hold_ratio = f_legacy["hold_ns_per_packet"] / max(f_locked["hold_ns_per_packet"], 1e-9)
    return {
        "legacy": legacy["rate"],
        "modern": modern["rate"],
        "ratio": modern["rate"] / legacy["rate"],
        "groups": {
            "sockets": N_SOCKETS,
            "legacy_hold_ns_per_packet": legacy["hold_ns_per_packet"],
            "modern_hold_ns_per_packet": modern["hold_ns_per_packet"],
            "modern_lock_sections_per_packet": modern["lock_sections_per_packet"],
            "receivers_per_packet": modern["receivers_per_packet"],
        },
        "fanout": {
            "receivers_per_packet": f_rcu["receivers_per_packet"],
            "legacy_hold_ns_per_packet": f_legacy["hold_ns_per_packet"],
            "modern_hold_ns_per_packet": f_locked["hold_ns_per_packet"],
            "ratio": hold_ratio,
            "rcu_hold_ns_per_packet": f_rcu["hold_ns_per_packet"],
            "rcu_lock_sections_per_packet": f_rcu["lock_sections_per_packet"],
            "legacy_rate": f_legacy["rate"],
            "modern_rate": f_locked["rate"],
            "rcu_rate": f_rcu["rate"],
        },
        "lockstat": stat_text,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rcunet.bench.tables_seed003",
        description="UDP multicast delivery, 300 sockets on one port: legacy vs modern")
    parser.add_argument("--duration", type=float, default=1.0, help="seconds per timed run")
    parser.add_argument("--threads", type=int, default=1, help="receive threads")
    parser.add_argument("--lockstat", action="store_true", help="print lock statistics")
    args = parser.parse_args(argv)
    result = measure(args.duration, args.threads)
    text = result.pop("lockstat")
    print(json.dumps(result, indent=2))
    if args.lockstat:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
