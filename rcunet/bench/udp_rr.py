"""``rcunet bench udp_rr``: neper's udp_rr — request/response over connected UDP sockets, one
server port per flow.

Flags, output and targets: ``rcunet.bench.neper`` and ``rcunet.bench.targets``."""

from __future__ import annotations

import argparse

WORKLOAD = "udp_rr"


def configure(parser: argparse.ArgumentParser) -> None:
    from rcunet.bench import neper

    neper.configure(parser, WORKLOAD)


def run(args: argparse.Namespace) -> int:
    from rcunet.bench import targets

    return targets.run(args)
