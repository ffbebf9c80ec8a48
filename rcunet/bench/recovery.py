"""``rcunet bench recovery``: loss recovery compared, RACK-TLP with PRR (Linux's default,
``net.ipv4.tcp_recovery=1``) against duplicate-ACK recovery (``tcp_recovery=0``, RFC
6675), over a lossy, reordering or CE-marking in-process link.

Two Hosts on the virtual clock, no threads: one bulk transfer per scenario, sender to
receiver, over a link with a one-way delay and a rate limit; the impairment applies to
the data direction (the ACKs cross clean).  Everything is deterministic for a seed: the
same command prints the same table on any machine.  Per scenario and mode:

- goodput: bytes delivered to the receiving application over the virtual time the
  transfer took (Mbit/s);
- retransmitted bytes (the sender's tcpi_bytes_retrans) and RTOs (TcpExtTCPTimeouts);
- spurious retransmissions: segments the receiver got twice (each answered with a DSACK,
  TcpExtTCPDSACKOldSent), so retransmissions of data that was not lost.

CE marking applies the ``ecn=`` impairment: frames of an ECN-capable connection are
marked CE, the others dropped, as an AQM queue does.  In that scenario the sender asks
for classic ECN (``tcp_ecn=1``; the receiver's default 2 accepts it), so the marks reach
it as ECE and it reduces through CWR instead of retransmitting.
"""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass
from typing import Any

from rcunet.host.network import Network
from rcunet.link.impair import ImpairmentConfig
from rcunet.tuning import Tuning

MS = 1_000_000
PORT = 5001
SERVER = "10.0.0.2"

#: scenario name -> the data direction's impairments (besides delay and rate)
SCENARIOS: dict[str, dict[str, Any]] = {
    "loss 1%": {"loss": 0.01},
    "loss 3%": {"loss": 0.03},
    "loss 5%": {"loss": 0.05},
    "reorder 3%": {"reorder": 0.03, "reorder_delay": 5 * MS},
    "CE 3%": {"ecn": 0.03},
}
MODES = (("RACK-TLP", 1), ("tcp_recovery=0", 0))


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=float, default=4.0,
                        help="megabytes per transfer (default %(default)s)")
    parser.add_argument("--delay", type=float, default=10.0,
                        help="one-way delay, ms (default %(default)s)")
    parser.add_argument("--rate", type=float, default=50.0,
                        help="link rate, Mbit/s (default %(default)s)")
    parser.add_argument("--seeds", type=int, default=3,
                        help="transfers per cell, seeds 1..N, summed (default %(default)s)")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="run only these scenarios (repeatable)")


@dataclass
class Result:
    seconds: float = 0.0
    delivered: int = 0
    bytes_retrans: int = 0
    spurious: int = 0
    rtos: int = 0

    def add(self, other: Result) -> None:
        self.seconds += other.seconds
        self.delivered += other.delivered
        self.bytes_retrans += other.bytes_retrans
        self.spurious += other.spurious
        self.rtos += other.rtos

    @property
    def goodput_mbps(self) -> float:
        return self.delivered * 8 / self.seconds / 1e6 if self.seconds else 0.0


def transfer(*, size: int, seed: int, tcp_recovery: int, impair: dict[str, Any],
             delay_ms: float, rate_mbps: float) -> Result:
    """One bulk transfer; the figures of its sender and receiver."""
    ecn = {"tcp_ecn": 1} if "ecn" in impair or "ce_threshold" in impair else {}
    tuning = Tuning.modern(tcp_recovery=tcp_recovery, **ecn)
    with Network(seed=seed, tuning=tuning) as net:
        sender_host, receiver_host = net.host("a"), net.host("b")
        common = {"delay": int(delay_ms * MS), "rate_bps": int(rate_mbps * 1e6),
                  "rate_queue": 1 << 20, "seed": seed}
        net.link(sender_host, receiver_host, "10.0.0.1/24", f"{SERVER}/24",
                 impair=ImpairmentConfig(**common, **impair),
                 impair_ba=ImpairmentConfig(**common))
        listener = receiver_host.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.settimeout(0)
        listener.bind((SERVER, PORT))
        listener.listen(1)
        client = sender_host.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.settimeout(0)
        try:
            client.connect((SERVER, PORT))
        except BlockingIOError:
            pass
        box: list[Any] = []

        def accepted() -> bool:
            try:
                box.append(listener.accept()[0])
            except BlockingIOError:
                return False
            return True

        if not net.run_until(accepted, 30):
            raise RuntimeError("the connection was not accepted")
        server = box[0]
        server.settimeout(0)
        data = memoryview(bytes(size))
        sent = received = 0
        start = net.clock.now()

        def done() -> bool:
            nonlocal sent, received
            while sent < size:
                try:
                    sent += client.send(data[sent:sent + 262144])
                except BlockingIOError:
                    break
            while received < size:
                try:
                    chunk = server.recv(262144)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                received += len(chunk)
            return received >= size

        if not net.run_until(done, 3600):
            raise RuntimeError(f"transfer stalled: {received} of {size} bytes")
        seconds = (net.clock.now() - start) / 1e9
        loss = client._sk.conn.loss
        result = Result(seconds=seconds, delivered=received,
                        bytes_retrans=loss.bytes_retrans,
                        spurious=receiver_host.counters.get("TcpExtTCPDSACKOldSent"),
                        rtos=sender_host.counters.get("TcpExtTCPTimeouts"))
        for s in (client, server, listener):
            s.close()
        return result


def run(args: argparse.Namespace) -> int:
    size = int(args.size * 1_000_000)
    names = args.scenario or list(SCENARIOS)
    print(f"# rcunet bench recovery: {args.size:g} MB per transfer, {args.seeds} seed(s) "
          f"summed, {args.rate:g} Mbit/s, {2 * args.delay:g} ms RTT, virtual clock")
    header = (f"{'scenario':<12} {'recovery':<15} {'goodput Mbit/s':>14} "
              f"{'retrans bytes':>13} {'retrans %':>9} {'spurious':>8} {'RTOs':>5}")
    print(header)
    print("-" * len(header))
    for name in names:
        for label, mode in MODES:
            total = Result()
            for seed in range(1, args.seeds + 1):
                total.add(transfer(size=size, seed=seed, tcp_recovery=mode,
                                   impair=SCENARIOS[name], delay_ms=args.delay,
                                   rate_mbps=args.rate))
            share = 100 * total.bytes_retrans / total.delivered if total.delivered else 0.0
            print(f"{name:<12} {label:<15} {total.goodput_mbps:>14.2f} "
                  f"{total.bytes_retrans:>13} {share:>9.2f} {total.spurious:>8} "
                  f"{total.rtos:>5}", flush=True)
    return 0
