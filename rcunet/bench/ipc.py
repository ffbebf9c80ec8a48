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
  trip (half the round trip): the latency a frame pays when the receiver sleeps.

Output: one ``key=value`` line per figure, prefixed with the transport and round, then
a summary table (best of the rounds) on stdout.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import threading
import time
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


def _child(end: IpcEndpoint, ctl: Any, mode: str, expected: int) -> None:
    """Count (stream) or echo (ping) frames; report when done or told to stop."""
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


def _spawn(transport: str, size: int, mode: str,
           expected: int) -> tuple[IpcEndpoint, Any, Any]:
    context = multiprocessing.get_context("spawn")
    mine, theirs = ipc_pair(transport=transport, mtu=max(size, 1500))
    parent_ctl, child_ctl = context.Pipe()
    process = context.Process(target=_child, args=(theirs, child_ctl, mode, expected),
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


def run_ping(transport: str, pings: int, size: int) -> dict[str, float]:
    end, ctl, process = _spawn(transport, size, "ping", 0)
    back = threading.Event()
    end.set_receiver(lambda frame: back.set())
    end.start()
    frame = bytes(size)
    start = time.monotonic()
    for _ in range(pings):
        back.clear()
        end.send(frame)
        if not back.wait(5):
            break
    wall = time.monotonic() - start
    ctl.send("stop")
    ctl.recv()
    process.join()
    end.close()
    return {"one_way_us": wall / pings / 2 * 1e6}


def run(args: argparse.Namespace) -> int:
    transports = args.transport or list(TRANSPORTS)
    best: dict[str, dict[str, float]] = {}
    for round_index in range(1, args.rounds + 1):
        for transport in transports:
            figures = run_stream(transport, args.frames, args.size)
            figures.update(run_ping(transport, args.pings, args.size))
            for key, value in figures.items():
                print(f"{transport}.round{round_index}.{key}={value:.2f}", flush=True)
            kept = best.setdefault(transport, figures)
            if figures["us_per_frame"] < kept["us_per_frame"]:
                kept.update({k: v for k, v in figures.items() if k != "one_way_us"})
            kept["one_way_us"] = min(kept["one_way_us"], figures["one_way_us"])
    print(f"# {args.frames} frames of {args.size} bytes per stream run, {args.pings} "
          f"round trips per ping-pong run; best of {args.rounds} interleaved rounds")
    print("# transport   us/frame   frames/s   cpu us/frame   frames/wakeup   "
          "one-way us   dropped")
    for transport, figures in best.items():
        print(f"  {transport:<10} {figures['us_per_frame']:9.2f} "
              f"{figures['frames_per_s']:10.0f} {figures['cpu_us_per_frame']:14.2f} "
              f"{figures['frames_per_wakeup']:15.1f} {figures['one_way_us']:12.1f} "
              f"{figures['dropped']:9.0f}")
    return 0
