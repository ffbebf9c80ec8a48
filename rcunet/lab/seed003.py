"""Seed 003 through whole Hosts: UDP multicast to many sockets on one port.

Shawn Bohrer's setup (seed 003, reference §6.5): host ``b`` has 300 UDP sockets on port
5000, each bound to its own group address and joined to it; host ``a`` sends datagrams
round-robin to the 300 groups over an Ethernet link.  Every datagram crosses a's UDP and
IP output, the link, b's Ethernet/IP input and UDP multicast delivery.  Legacy walks the
300-socket port chain under the bucket lock for every datagram and delivers under it;
modern looks in the (group, port) and (ANY, port) secondary slots and walks them with no
lock.  The second run is true fan-out: 300 sockets on (ANY, 5001) in one group, so every
datagram is delivered 300 times — there the difference is how long the bucket lock is held.

Deterministic hosts (a virtual clock, no threads): the time measured is the CPU cost of
the path, the same code the threaded hosts run.  Receive queues are drained between
batches, outside the timed part.

Fan-in (``-T N``, ``--scale 1,2,4``): the same 300-group receiver ``b`` on the real clock,
fed by N sender threads, each on its own host ``a<i>`` with its own link into ``b`` (one
interface per sender, like the receive queues of a multi-queue NIC; every socket joins its
group on each of them).  The links deliver inline, so each sender thread runs ``b``'s
receive path itself — Ethernet, IP, UDP multicast delivery, the receiver's queue — the
way Linux runs loopback and veth receive on the sending CPU: N threads deliver to port
5000 at once.  Legacy walks the 300-socket chain under the one bucket lock of that port,
so its threads queue there; modern's walk takes no lock.  Measured: datagrams delivered
per second (each datagram reaches its group's one socket), legacy and modern slices
alternating, queues drained between slices outside the timing; every datagram sent is
accounted for (delivered, or counted in UdpRcvbufErrors).
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from typing import Any

from rcunet.api import Socket, host_socket
from rcunet.host.interface import Interface
from rcunet.host.network import Network
from rcunet.lab.common import (
    MODES,
    Series,
    add_scale_options,
    alternate,
    interpreter,
    parallel_headroom,
    plot_scaling,
    ratio,
    scale,
    scaling_report,
    stopwatch,
    tuning_for,
    with_lockstat,
)
from rcunet.lab.report import published_section
from rcunet.tables.udp import HSLOT2_LOCK, HSLOT_LOCK

N_SOCKETS = 300
GROUPS_PORT = 5000
FANOUT_PORT = 5001
FANOUT_GROUP = "239.9.9.9"
PAYLOAD = bytes(range(256)) * 5 + bytes(120)  # 1400 bytes
FANIN_RCVBUF = 1 << 22  # the fan-in's SO_RCVBUF and net.core.rmem_max


def _mac_of(iface: Interface) -> bytes:
    """The MAC address of an interface on one of the lab's Ethernet links."""
    assert iface.mac is not None, f"{iface.name} is not on an Ethernet link"
    return iface.mac


def group_address(index: int) -> str:
    return f"239.1.{index >> 8}.{index & 0xFF}"


class Scenario:
    """Two hosts, 300 receivers on b, one sender on a."""

    def __init__(self, mode: str, fanout: bool, n_sockets: int = N_SOCKETS) -> None:
        self.net = Network(tuning=tuning_for(mode))
        self.a, self.b = self.net.host("a"), self.net.host("b")
        self.net.link(self.a, self.b, "10.0.0.1/24", "10.0.0.2/24")
        self.a.add_neighbour("eth0", "10.0.0.2", _mac_of(self.b.interface("eth0")))
        self.b.add_neighbour("eth0", "10.0.0.1", _mac_of(self.a.interface("eth0")))
        ifindex = self.b.interface("eth0").ifindex
        self.fanout = fanout
        self.receivers = []
        self.groups = [FANOUT_GROUP] if fanout else [group_address(i) for i in range(n_sockets)]
        for index in range(n_sockets):
            group = FANOUT_GROUP if fanout else self.groups[index]
            sock = Socket(self.b, socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("" if fanout else group, FANOUT_PORT if fanout else GROUPS_PORT))
            mreqn = socket.inet_aton(group) + bytes(4) + ifindex.to_bytes(4, "little")
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            self.receivers.append(sock)
        self.tx = Socket(self.a, socket.AF_INET, socket.SOCK_DGRAM)
        self.tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
        self.port = FANOUT_PORT if fanout else GROUPS_PORT
        #: CPU time of the last batch's receive path (thread time: what other processes
        #: on a shared machine do not inflate, unlike the wall-clock rate).
        self.batch_cpu = 0.0
        self.net.run(0.01)  # IGMP reports out of the way

    def batch(self) -> tuple[int, float]:
        """Send one datagram per group (fan-out: one datagram), then let b receive them;
        returns (deliveries, seconds b's receive path took)."""
        for group in self.groups:
            self.tx.sendto(PAYLOAD, (group, self.port))
        cpu = time.thread_time()
        elapsed = stopwatch()
        self.net.step()
        seconds = elapsed()
        self.batch_cpu = time.thread_time() - cpu
        return self.drain(), seconds

    def drain(self) -> int:
        delivered = 0
        for sock in self.receivers:
            sk = host_socket(sock)
            while sk.dequeue() is not None:
                delivered += 1
        return delivered

    def receiver_sets(self, rounds: int = 1) -> list[tuple[int, ...]]:
        """Which sockets got each group's datagram (for the identical-sets check)."""
        sets = []
        for group in self.groups:
            self.tx.sendto(PAYLOAD, (group, self.port))
            self.net.step()
            sets.append(tuple(i for i, s in enumerate(self.receivers) if host_socket(s).has_data()))
            self.drain()
        return sets

    def close(self) -> None:
        self.net.close()


class FanIn:
    """``senders`` hosts, one sender thread each, into the 300-group receiver ``b``."""

    def __init__(self, mode: str, senders: int, n_sockets: int = N_SOCKETS) -> None:
        # As a benchmark host is prepared (sysctl net.core.rmem_max): each group's socket
        # holds a slice's datagrams undrained (~5,000 of 1,400 bytes), so the slice
        # measures deliveries, not drops.  Linux's default cap (SO_RCVBUF 416 KB, ~250
        # datagrams) overflowed in short slices of the faster modern runs.
        self.net = Network(threaded=True, tuning=tuning_for(mode, rmem_max=FANIN_RCVBUF))
        self.b = self.net.host("b")
        self.senders = []
        ifindexes = []
        for index in range(senders):
            a = self.net.host(f"a{index}")
            self.net.link(a, self.b, f"10.{index}.0.1/24", f"10.{index}.0.2/24", inline_rx=True)
            b_eth = self.b.interface(f"eth{index}")
            a.add_neighbour("eth0", f"10.{index}.0.2", _mac_of(b_eth))
            self.b.add_neighbour(b_eth, f"10.{index}.0.1", _mac_of(a.interface("eth0")))
            ifindexes.append(b_eth.ifindex)
            tx = Socket(a, socket.AF_INET, socket.SOCK_DGRAM)
            tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
            self.senders.append(tx)
        self.groups = [group_address(i) for i in range(n_sockets)]
        self.receivers = []
        for group in self.groups:
            sock = Socket(self.b, socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind((group, GROUPS_PORT))
            for ifindex in ifindexes:
                mreqn = socket.inet_aton(group) + bytes(4) + ifindex.to_bytes(4, "little")
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, FANIN_RCVBUF)
            self.receivers.append(sock)
        self.sent = 0
        self.delivered = 0

    def run_slice(self, duration: float) -> float:
        """Every sender sends round-robin over the groups (each from its own offset) for
        ``duration`` seconds; returns datagrams delivered per second."""
        counts = [0] * len(self.senders)
        start = threading.Barrier(len(self.senders) + 1)
        stop = threading.Event()
        errors: list[BaseException] = []

        def sender(index: int) -> None:
            tx, groups, sent = self.senders[index], self.groups, 0
            offset = index * len(groups) // len(self.senders)
            try:
                start.wait()
                while not stop.is_set():
                    for step in range(32):
                        group = groups[(offset + sent + step) % len(groups)]
                        tx.sendto(PAYLOAD, (group, GROUPS_PORT))
                    sent += 32
            except BaseException as exc:  # reported by the caller
                errors.append(exc)
            counts[index] = sent

        threads = [threading.Thread(target=sender, args=(i,), name=f"fanin-{i}")
                   for i in range(len(self.senders))]
        for thread in threads:
            thread.start()
        start.wait()
        elapsed = stopwatch()
        time.sleep(duration)
        stop.set()
        for thread in threads:
            thread.join()
        seconds = elapsed()
        if errors:
            raise errors[0]
        delivered = sum(_drain(sock) for sock in self.receivers)
        self.sent += sum(counts)
        self.delivered += delivered
        return delivered / seconds

    def check_accounting(self) -> None:
        """Every datagram sent was delivered or counted as a receive-buffer drop."""
        dropped = self.b.counters.get("UdpRcvbufErrors")
        if self.sent != self.delivered + dropped:
            raise AssertionError(f"fan-in lost datagrams: sent {self.sent}, delivered "
                                 f"{self.delivered}, counted drops {dropped}")

    def close(self) -> None:
        self.net.close()


def _drain(sock: Any) -> int:
    sk, count = host_socket(sock), 0
    while sk.dequeue() is not None:
        count += 1
    return count


def run_fanin(counts: tuple[int, ...], duration: float = 1.0, rounds: int = 3,
              n_sockets: int = N_SOCKETS) -> dict[str, Any]:
    """Delivered datagrams/s at each sender-thread count, legacy and modern (interleaved
    rounds of ``duration / rounds`` seconds per point), and the machine's headroom."""
    scenarios = {(mode, t): FanIn(mode, t, n_sockets) for t in counts for mode in MODES}
    try:
        series: Series = scale(
            lambda mode, t: scenarios[(mode, t)].run_slice(duration / rounds), counts, rounds)
        for scenario in scenarios.values():
            scenario.check_accounting()
        dropped = {f"{mode}/{t}": scenarios[(mode, t)].b.counters.get("UdpRcvbufErrors")
                   for mode, t in scenarios}
    finally:
        for scenario in scenarios.values():
            scenario.close()
    headroom = {t: parallel_headroom(t) for t in counts if t != counts[0]}
    return {"interpreter": interpreter(), "sockets": n_sockets, "series": series,
            "headroom": headroom, "rcvbuf_drops": dropped}


FANIN_TITLE = "seed 003: UDP multicast fan-in, 300 groups on one port, one sender thread per link"
FANIN_UNIT = "datagrams/s"


def measure_rate(scenario: Scenario, duration: float,
                 cpu_us: dict[str, float] | None = None, mode: str = "") -> float:
    """Deliveries per second of receive-path (wall) time over ``duration`` seconds of
    it.  With ``cpu_us``, also keeps ``cpu_us[mode]``: the least CPU time per delivery
    over the calls so far, in µs."""
    deliveries, seconds, cpu = 0, 0.0, 0.0
    while seconds < duration:
        count, spent = scenario.batch()
        deliveries += count
        seconds += spent
        cpu += scenario.batch_cpu
    if cpu_us is not None and deliveries:
        cpu_us[mode] = min(cpu_us.get(mode, float("inf")), cpu / deliveries * 1e6)
    return deliveries / seconds


def run_lab(duration: float = 1.0, rounds: int = 3, n_sockets: int = N_SOCKETS) -> dict[str, Any]:
    scenarios = {(mode, fan): Scenario(mode, fan, n_sockets) for mode in MODES
                 for fan in (False, True)}
    try:
        sets = {mode: scenarios[(mode, False)].receiver_sets() for mode in MODES}
        if sets["legacy"] != sets["modern"]:
            raise AssertionError("legacy and modern delivered to different receiver sets")
        cpu: dict[str, float] = {}
        fan_cpu: dict[str, float] = {}
        groups = alternate(
            lambda m: measure_rate(scenarios[(m, False)], duration, cpu, m), rounds)
        fanout = alternate(
            lambda m: measure_rate(scenarios[(m, True)], duration, fan_cpu, m), rounds)
        hold: dict[str, dict[str, float]] = {}
        for mode in MODES:
            for fan, label in ((False, "groups"), (True, "fanout")):
                scenario = scenarios[(mode, fan)]
                packets = 50 if fan else 5 * len(scenario.groups)
                batches = max(1, packets // len(scenario.groups))

                def run(scenario: Scenario = scenario, batches: int = batches) -> None:
                    for _ in range(batches):
                        scenario.batch()

                _, snap = with_lockstat(run, [HSLOT_LOCK, HSLOT2_LOCK])
                held = sum(s.hold_total for s in snap.values())
                sent = batches * len(scenario.groups)
                hold.setdefault(label, {})[mode] = held / sent
    finally:
        for scenario in scenarios.values():
            scenario.close()
    fan_hold_legacy = hold["fanout"]["legacy"]
    fan_hold_modern = hold["fanout"]["modern"]
    return {
        "interpreter": interpreter(),
        "sockets": n_sockets,
        "legacy": groups["legacy"],
        "modern": groups["modern"],
        "ratio": ratio(groups["modern"], groups["legacy"]),
        "receiver_sets_identical": True,
        "cpu_us_per_datagram": cpu,
        "hold_ns_per_packet": hold["groups"],
        "fanout": {
            "legacy": fanout["legacy"],
            "modern": fanout["modern"],
            "ratio": ratio(fanout["modern"], fanout["legacy"]),
            "cpu_us_per_delivery": fan_cpu,
            "legacy_hold_ns_per_packet": fan_hold_legacy,
            "modern_hold_ns_per_packet": fan_hold_modern,
            "hold_ratio": ratio(fan_hold_legacy, fan_hold_modern),
        },
    }


def report(result: dict[str, Any]) -> str:
    fan = result["fanout"]
    cpu, fan_cpu = result["cpu_us_per_datagram"], fan["cpu_us_per_delivery"]
    lines = [
        f"seed 003: UDP multicast, {result['sockets']} sockets on one port "
        f"({result['interpreter']})",
        "",
        f"{'':34}{'legacy':>14}{'modern':>14}{'ratio':>9}",
        f"{'300 groups: received datagrams/s':34}{result['legacy']:>14,.0f}"
        f"{result['modern']:>14,.0f}{result['ratio']:>8.1f}x",
        f"{'  receive-path CPU µs/datagram':34}{cpu['legacy']:>14,.2f}{cpu['modern']:>14,.2f}"
        f"{cpu['legacy'] / cpu['modern']:>8.1f}x",
        f"{'  bucket-lock hold ns/datagram':34}{result['hold_ns_per_packet']['legacy']:>14,.0f}"
        f"{result['hold_ns_per_packet']['modern']:>14,.0f}",
        f"{'fan-out: socket deliveries/s':34}{fan['legacy']:>14,.0f}{fan['modern']:>14,.0f}"
        f"{fan['ratio']:>8.1f}x",
        f"{'  receive-path CPU µs/delivery':34}{fan_cpu['legacy']:>14,.2f}"
        f"{fan_cpu['modern']:>14,.2f}{fan_cpu['legacy'] / fan_cpu['modern']:>8.1f}x",
        f"{'  bucket-lock hold ns/datagram':34}{fan['legacy_hold_ns_per_packet']:>14,.0f}"
        f"{fan['modern_hold_ns_per_packet']:>14,.0f}",
        "",
        "receiver sets: identical in legacy and modern",
        "",
        "Tested:",
        "",
        f"  rcunet lab seed003 --sockets {result['sockets']}  ({result['interpreter']})",
        "",
        *published_section("seed003"),
    ]
    return "\n".join(lines)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "No --procs: seed 003's main runs are deterministic (a virtual clock drives both "
        'Hosts, which one process only can do), and its fan-in measures sender threads '
        "running b's receive path at once on inline links; a datagram source and its "
        'receiver are not a client and a server whose work a process boundary would '
        'separate.')
    parser.add_argument("--duration", type=float, default=1.0,
                        help="seconds of stack time per measurement (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--sockets", type=int, default=N_SOCKETS)
    parser.add_argument("-T", "--threads", type=int, default=None,
                        help="run the fan-in instead: this many sender threads")
    add_scale_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    if args.duration <= 0 or args.rounds <= 0 or args.sockets <= 0:
        raise SystemExit("--duration, --rounds and --sockets must be positive")
    if args.threads is not None and args.threads <= 0:
        raise SystemExit("-T must be positive")
    if args.plot and not args.scale:
        raise SystemExit("--plot draws rates against threads: give --scale too")
    counts = args.scale or ((args.threads,) if args.threads else ())
    if not counts:
        result = run_lab(args.duration, args.rounds, args.sockets)
        print(json.dumps(result) if args.json else report(result))
        return 0
    result = run_fanin(counts, args.duration, args.rounds, args.sockets)
    print(json.dumps(result) if args.json else
          scaling_report(FANIN_TITLE, result["series"], FANIN_UNIT, result["headroom"]))
    if args.plot:
        plot_scaling(args.plot, FANIN_TITLE, result["series"], FANIN_UNIT)
    return 0
