"""``rcunet bench ipc``: the inter-process link's own cost per frame, for each transport
(rcunet/link/ipc.py), with no Host on either end.

Two measurements per transport, in interleaved rounds (``--rounds``):

* **stream**: this process sends ``-n`` frames of ``-s`` bytes as fast as the link takes
  them; a child counts them.  Reported: µs per frame (wall time from the first send to
  the child's last receive), frames/s, CPU per frame (both processes' user + system
  time over the run, from getrusage in each), frames per wake-up of the receive thread
  (the batching: how many frames one wake-up delivered), and frames dropped (a full
  queue drops after a moment, as a NIC ring does).
* **ping-pong**: one frame of ``-s`` bytes bounced ``--pings`` times; µs per one-way
  trip (half the round trip): the latency a frame pays when the receiver sleeps.  Run
  twice: with both processes on one CPU (a hand-over is a context switch there) and on
  two CPUs (it wakes the other CPU, as ``--target procs`` does by default, giving each
  process its own CPUs).

The summary ends with what the ping-pong implies for ``tcp_crr --target procs``: a
transaction crosses the link four times in turn (SYN, SYN-ACK, request, answer), each
time to a process that sleeps unless its threads spin (``RCUNET_IPC_RX_SPIN_US``), so
four two-CPU trips bound its rate before either stack does any work.

Output: one ``key=value`` line per figure, prefixed with the transport and round, then
a summary table (best of the rounds) on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import resource
import threading
import time
from collections.abc import Iterator
from typing import Any

from rcunet.link.ipc import TRANSPORTS, IpcEndpoint, ipc_pair


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--frames", type=int, default=50_000,
                        help="frames per stream run (default 50000)")
    parser.add_argument("-s", "--size", type=int, default=1514,
                        help="frame size in bytes (default 1514: a full Ethernet frame)")
    parser.add_argument("--pings", type=int, default=2_000,
                        help="round trips per ping-pong run (default 2000)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds over the transports (default 3)")
    parser.add_argument("--transport", choices=TRANSPORTS, action="append",
                        help="only this transport (repeatable; default both)")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


#: One-way trips a tcp_crr transaction makes in turn, each to a sleeping process: SYN,
#: SYN-ACK, the request and the answer (the ACK of the handshake and the FINs travel
#: beside them, off the critical path).
CRR_CROSSINGS = 4


def _child(end: IpcEndpoint, ctl: Any, mode: str, expected: int,
           cpu: int | None = None) -> None:
    """Count (stream) or echo (ping) frames; report when done or told to stop."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})  # before end.start(): its thread inherits it
    done = threading.Event()
    seen = [0]

    def count(frame: bytes) -> None:
        seen[0] += 1
        if seen[0] >= expected:
            done.set()

    def echo(frame: bytes) -> None:
        end.send(frame)

    end.set_receiver(count if mode == "stream" else echo)
    cpu0 = _cpu()
    end.start()
    ctl.send("ready")
    if mode == "stream":
        while not done.wait(0.05):
            if ctl.poll():  # the sender gave up waiting (frames were dropped)
                break
    else:
        ctl.recv()
    stats = end.stats()
    ctl.send({"received": seen[0], "at": time.monotonic(), "cpu": _cpu() - cpu0,
              "wakeups": stats["wakeups"], "rx_packets": stats["rx_packets"]})
    end.close()


def _spawn(transport: str, size: int, mode: str, expected: int,
           cpu: int | None = None) -> tuple[IpcEndpoint, Any, Any]:
    context = multiprocessing.get_context("spawn")
    mine, theirs = ipc_pair(transport=transport, mtu=max(size, 1500))
    parent_ctl, child_ctl = context.Pipe()
    process = context.Process(target=_child, args=(theirs, child_ctl, mode, expected, cpu),
                              daemon=True)
    process.start()
    child_ctl.close()
    theirs.forget()
    assert parent_ctl.recv() == "ready"
    return mine, parent_ctl, process


def run_stream(transport: str, frames: int, size: int) -> dict[str, float]:
    end, ctl, process = _spawn(transport, size, "stream", frames)
    frame = bytes(size)
    cpu0 = _cpu()
    start = time.monotonic()
    end.start()
    for _ in range(frames):
        end.send(frame)
    sent_at = time.monotonic()
    if not ctl.poll(max(5.0, 2 * (sent_at - start))):
        ctl.send("give up")
    report = ctl.recv()
    cpu = _cpu() - cpu0 + report["cpu"]
    process.join()
    dropped = end.stats()["tx_dropped"]
    end.close()
    received = max(report["received"], 1)
    wall = report["at"] - start if report["received"] >= frames else sent_at - start
    return {"us_per_frame": wall / received * 1e6, "frames_per_s": received / wall,
            "cpu_us_per_frame": cpu / received * 1e6,
            "frames_per_wakeup": report["rx_packets"] / max(report["wakeups"], 1),
            "dropped": dropped}


def placements() -> dict[str, tuple[int, int]]:
    """The ping-pong's (this process's CPU, the child's): one CPU, and two CPUs when
    this process may run on two."""
    cpus = sorted(os.sched_getaffinity(0))
    found = {"one_cpu": (cpus[0], cpus[0])}
    if len(cpus) > 1:
        found["two_cpus"] = (cpus[0], cpus[1])
    return found


@contextlib.contextmanager
def _pinned(cpu: int) -> Iterator[None]:
    """The calling thread, and the threads it starts meanwhile, on ``cpu``."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def run_ping(transport: str, pings: int, size: int,
             cpus: tuple[int, int]) -> float:
    """µs per one-way trip, this process on ``cpus[0]`` and the child on ``cpus[1]``."""
    mine, child = cpus
    end, ctl, process = _spawn(transport, size, "ping", 0, cpu=child)
    back = threading.Event()
    end.set_receiver(lambda frame: back.set())
    frame = bytes(size)
    trips = 0
    with _pinned(mine):
        end.start()
        start = time.monotonic()
        for _ in range(pings):
            back.clear()
            end.send(frame)
            if not back.wait(5):
                break
            trips += 1
        wall = time.monotonic() - start
    ctl.send("stop")
    ctl.recv()
    process.join()
    end.close()
    if trips < pings:
        raise RuntimeError(f"{transport}: ping {trips + 1} of {pings} got no answer in 5 s")
    return wall / pings / 2 * 1e6


def run(args: argparse.Namespace) -> int:
    transports = args.transport or list(TRANSPORTS)
    where = placements()
    pings = {f"one_way_us_{name}" for name in where}
    best: dict[str, dict[str, float]] = {}
    for round_index in range(1, args.rounds + 1):
        for transport in transports:
            figures = run_stream(transport, args.frames, args.size)
            for name, cpus in where.items():
                figures[f"one_way_us_{name}"] = run_ping(transport, args.pings, args.size,
                                                         cpus)
            for key, value in figures.items():
                print(f"{transport}.round{round_index}.{key}={value:.2f}", flush=True)
            kept = best.setdefault(transport, dict(figures))
            if figures["us_per_frame"] < kept["us_per_frame"]:
                kept.update({k: v for k, v in figures.items() if k not in pings})
            for key in pings:
                kept[key] = min(kept[key], figures[key])
    print(f"# {args.frames} frames of {args.size} bytes per stream run, {args.pings} "
          f"round trips per ping-pong run; best of {args.rounds} interleaved rounds")
    print("# transport   us/frame   frames/s   cpu us/frame   frames/wakeup   "
          "one-way us (1 CPU)   one-way us (2 CPUs)   dropped")
    for transport, figures in best.items():
        two = figures.get("one_way_us_two_cpus")
        print(f"  {transport:<10} {figures['us_per_frame']:9.2f} "
              f"{figures['frames_per_s']:10.0f} {figures['cpu_us_per_frame']:14.2f} "
              f"{figures['frames_per_wakeup']:15.1f} "
              f"{figures['one_way_us_one_cpu']:20.1f} "
              f"{'-' if two is None else f'{two:.1f}':>21} {figures['dropped']:9.0f}")
    for transport, figures in best.items():
        if "one_way_us_two_cpus" in figures:
            print(crr_floor_line(transport, figures["one_way_us_two_cpus"]))
    return 0


def crr_floor_line(transport: str, one_way_us: float) -> str:
    """What ``one_way_us`` between two CPUs allows tcp_crr over ``transport``."""
    floor = CRR_CROSSINGS * one_way_us
    return (f"# tcp_crr over {transport}, threads that sleep, one process per CPU: "
            f"{CRR_CROSSINGS} crossings in turn x {one_way_us:.1f} us = {floor:.0f} us "
            f"per transaction before any stack work, at most {1e6 / floor:,.0f} conn/s")
