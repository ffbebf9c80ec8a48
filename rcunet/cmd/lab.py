"""``rcunet lab SEED``: a seed's scenario through whole Hosts, legacy beside modern.

Each experiment is a module exposing ``configure(parser)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse
import importlib
import sys

# seed -> (module, one-line help)
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "seed002": ("rcunet.lab.seed002",
                "route-cache refcount (rcuref vs inc-not-zero) under sending threads"),
    "seed003": ("rcunet.lab.seed003", "UDP multicast to 300 sockets on one port"),
}


def _chosen() -> str | None:
    argv = sys.argv[1:]
    if "lab" in argv:
        names = [a for a in argv[argv.index("lab") + 1 :] if not a.startswith("-")]
        if names and names[0] in EXPERIMENTS:
            return names[0]
    return None


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="seed", metavar="SEED", required=True)
    chosen = _chosen()
    for name, (module_name, help_text) in EXPERIMENTS.items():
        seed_parser = sub.add_parser(name, help=help_text, description=help_text)
        seed_parser.set_defaults(_lab_module=module_name)
        if chosen is None or chosen == name:
            importlib.import_module(module_name).configure(seed_parser)


def run(args: argparse.Namespace) -> int:
    return int(importlib.import_module(args._lab_module).run(args) or 0)
