"""``rcunet bench tcp_rr``: neper's tcp_rr — one long-lived TCP connection per flow; a
transaction is a -Q byte request and a -R byte response.

Flags, output and targets: ``rcunet.bench.neper`` and ``rcunet.bench.targets``."""

from __future__ import annotations

import argparse

WORKLOAD = "tcp_rr"


def configure(parser: argparse.ArgumentParser) -> None:
    from rcunet.bench import neper

    neper.configure(parser, WORKLOAD)


def run(args: argparse.Namespace) -> int:
    from rcunet.bench import targets

    return targets.run(args)
