"""``rcunet lab SEED``: a seed's scenario through whole Hosts, legacy beside modern.

Each experiment is a module exposing ``configure(parser)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse

from rcunet.cli import add_module_subcommands, run_module_subcommand

# seed -> (module, one-line help)
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "seed000": ("rcunet.lab.seed000",
                "tcp_crr under port pressure, TIME_WAIT reuse (--level tables: port search)"),
    "seed001": ("rcunet.lab.seed001",
                "TCP receive with a slow reader: buffers freed after the socket lock"),
    "seed002": ("rcunet.lab.seed002",
                "route-cache refcount (rcuref vs inc-not-zero) under sending threads"),
    "seed003": ("rcunet.lab.seed003", "UDP multicast to 300 sockets on one port"),
    "seed004": ("rcunet.lab.seed004", "short-lived connections, accept() with no global lock"),
    "all": ("rcunet.lab.all", "all five seeds in bounded time: a markdown report and plots"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    add_module_subcommands(parser, "lab", EXPERIMENTS, "SEED")


def run(args: argparse.Namespace) -> int:
    return run_module_subcommand(args)
