"""``rcunet bench tcp_crr``: neper's tcp_crr — a new TCP connection per transaction (connect,
request, response, abortive close unless --time-wait).

Flags, output and targets: ``rcunet.bench.neper`` and ``rcunet.bench.targets``."""

from __future__ import annotations

import argparse

WORKLOAD = "tcp_crr"


def configure(parser: argparse.ArgumentParser) -> None:
    from rcunet.bench import neper

    neper.configure(parser, WORKLOAD)


def run(args: argparse.Namespace) -> int:
    from rcunet.bench import targets

    return targets.run(args)
