"""``rcunet lab SEED``: a seed's scenario through whole Hosts, legacy beside modern.

Each experiment is a module exposing ``configure(parser)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse
import importlib

from rcunet.cli import chosen_after

# seed -> (module, one-line help)
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "seed000": ("rcunet.lab.seed000", "connect() port selection under port pressure, -T threads"),
    "seed001": ("rcunet.lab.seed001",
                "TCP receive with a slow reader: buffers freed after the socket lock"),
    "seed002": ("rcunet.lab.seed002",
                "route-cache refcount (rcuref vs inc-not-zero) under sending threads"),
    "seed003": ("rcunet.lab.seed003", "UDP multicast to 300 sockets on one port"),
    "seed004": ("rcunet.lab.seed004", "short-lived connections, accept() with no global lock"),
    "all": ("rcunet.lab.all", "all five seeds in bounded time: a markdown report and plots"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="seed", metavar="SEED", required=True)
    chosen = chosen_after("lab", EXPERIMENTS)
    for name, (module_name, help_text) in EXPERIMENTS.items():
        seed_parser = sub.add_parser(name, help=help_text, description=help_text)
        seed_parser.set_defaults(_lab_module=module_name)
        if chosen is None or chosen == name:
            importlib.import_module(module_name).configure(seed_parser)


def run(args: argparse.Namespace) -> int:
    return int(importlib.import_module(args._lab_module).run(args) or 0)
