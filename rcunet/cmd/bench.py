"""``rcunet bench WORKLOAD``: each workload is a module in ``rcunet.bench`` exposing
``configure(parser)`` and ``run(args) -> int``, registered in ``WORKLOADS``."""

from __future__ import annotations

import argparse

from rcunet.cli import add_module_subcommands, run_module_subcommand

# workload -> (module, one-line help)
WORKLOADS: dict[str, tuple[str, str]] = {
    "codec": ("rcunet.bench.codec", "parse+build rates: rcunet vs dpkt vs scapy"),
    "ipc": ("rcunet.bench.ipc", "the inter-process link's cost per frame, per transport"),
    "tables": ("rcunet.bench.tables",
               "socket-table mechanisms of seeds 000/002/003, before vs after"),
    "tcp_rr": ("rcunet.bench.tcp_rr", "neper tcp_rr: request/response on long-lived TCP flows"),
    "tcp_crr": ("rcunet.bench.tcp_crr", "neper tcp_crr: a new TCP connection per transaction"),
    "profile": ("rcunet.bench.profile",
                "Python calls and CPU per tcp_crr transaction, two Hosts on the virtual clock"),
    "recovery": ("rcunet.bench.recovery",
                 "loss recovery: RACK-TLP and PRR against tcp_recovery=0 over impaired links"),
    "tcp_stream": ("rcunet.bench.tcp_stream", "neper tcp_stream: bulk TCP throughput"),
    "udp_rr": ("rcunet.bench.udp_rr", "neper udp_rr: request/response over UDP"),
    "udp_stream": ("rcunet.bench.udp_stream", "neper udp_stream: bulk UDP throughput"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    add_module_subcommands(parser, "bench", WORKLOADS, "WORKLOAD")


def run(args: argparse.Namespace) -> int:
    return run_module_subcommand(args)
